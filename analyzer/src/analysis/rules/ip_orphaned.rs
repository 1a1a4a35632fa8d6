//! `ip-orphaned`: a kube-ovn IP or a SpiderEndpoint names a pool that is known absent — a
//! complete list of pools lacks it, or it was deleted before the record first appeared —
//! and no deletion of that pool was seen while the record existed (that case is
//! `subnet-deleted-before-ip`). What a collector started after the deletion, or a
//! recording that starts late, sees; and kube-ovn's scenario A, an IP created after its
//! subnet's deletion. A terminating IP is `ip-stuck-terminating`'s. Resolved when the
//! record is gone, stops naming the pool, starts terminating, or the pool exists again.

use ipaudit_schemas::{Severity, Stream};

use super::subnet_deleted_before_ip::describe_ip;
use super::{evidence, gone_evidence, Change, Context, Rule};
use crate::analysis::alerts::Finding;
use crate::analysis::state::holdings::{self, PoolRef};
use crate::analysis::state::{EventRef, ObjectRecord, RecordKey};

const NAME: &str = "ip-orphaned";

/// Rule 4 (no state of its own: the state's pool index and deletions say it all).
#[derive(Debug, Default)]
pub struct IpOrphaned;

/// Kinds whose records name pools.
fn names_pools(stream: Stream) -> bool {
    matches!(stream, Stream::Ip | Stream::SpiderEndpoint)
}

impl Rule for IpOrphaned {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>) {
        let stream = change.stream();
        if names_pools(stream) {
            if let Some(removed) = change.removed() {
                ctx.resolve_all_about(NAME, &removed.uid.text(), || {
                    gone_evidence(
                        change.event,
                        &format!("{} {}", stream.kind(), change.event.name),
                    )
                });
            }
            if let Some(after) = change.after {
                let termination_changed =
                    change.before.map(|b| b.is_terminating()) != Some(after.is_terminating());
                if change.reindexed || termination_changed {
                    check_record(ctx, &change.key(), after, change.event);
                }
            }
            return;
        }
        if !holdings::is_pool(stream) {
            return;
        }
        if change.is_list_end() {
            // A complete list of pools: every record naming one it lacks is orphaned, if
            // the record is no newer than the list. A list at version V says nothing of a
            // pool created after V, so a record last seen after V (which may name such a
            // pool, its ADDED not yet here) is judged by a later list or its own next
            // change, never by this one.
            let listed_at = change.event.rv;
            for pool in ctx.state.named_pools() {
                if pool.stream == stream && ctx.state.pool(&pool).is_none() {
                    for record in ctx.state.naming(&pool) {
                        let seen_at = ctx.state.get(record.0, &record.1).map(|r| r.last.rv);
                        if seen_at.is_some_and(|rv| rv <= listed_at) {
                            check(ctx, &record, change.event);
                        }
                    }
                }
            }
        } else if change.appeared() {
            // The pool exists (again): what names it is no longer orphaned.
            let pool = PoolRef::new(stream, &change.event.name);
            for record in ctx.state.naming(&pool) {
                check(ctx, &record, change.event);
            }
        }
    }
}

/// Fires or resolves the rule for one record after `cause`.
fn check(ctx: &mut Context<'_>, key: &RecordKey, cause: &EventRef) {
    if let Some(record) = ctx.state.get(key.0, &key.1) {
        check_record(ctx, key, record, cause);
    }
}

/// [`check`] with the record at hand (`key`'s live record).
fn check_record(ctx: &mut Context<'_>, key: &RecordKey, record: &ObjectRecord, cause: &EventRef) {
    let state = ctx.state;
    let named = holdings::pool_names(record.part());
    let has_alert = !ctx.firing_about(NAME, &record.uid.text()).is_empty();
    // The common case: every pool it names exists and nothing fires about it.
    if !has_alert
        && named
            .iter()
            .all(|(stream, name)| state.pool_live(*stream, name))
    {
        return;
    }
    // A deletion seen while the record existed is subnet-deleted-before-ip's.
    let deleted_while_it_existed = |stream: Stream, name: &str| {
        state
            .pool_deletion(stream, name)
            .is_some_and(|deleted| deleted.rv >= record.first_rv)
    };
    let orphaned_by: Vec<(Stream, &str)> = if record.is_terminating() {
        Vec::new()
    } else {
        named
            .iter()
            .copied()
            .filter(|(stream, name)| {
                state.pool_known_gone(*stream, name) && !deleted_while_it_existed(*stream, name)
            })
            .collect()
    };
    for (pool_stream, pool_name) in &orphaned_by {
        let what = match key.0 {
            Stream::Ip => format!("IP {}{}", key.1, describe_ip(record)),
            _ => format!("{} {}", key.0.kind(), key.1),
        };
        let pool_kind = pool_stream.kind();
        let (how, proof_of_absence) = match state.pool_deletion(*pool_stream, pool_name) {
            Some(deleted) => (
                format!("was created after {pool_kind} {pool_name} was deleted"),
                evidence(deleted, format!("{pool_kind} {pool_name} deleted")),
            ),
            None => {
                let listed = state
                    .listed(*pool_stream)
                    .cloned()
                    .unwrap_or_else(|| cause.clone());
                (
                    format!(
                        "names {pool_kind} {pool_name}, which a complete list shows does not exist"
                    ),
                    evidence(
                        &listed,
                        format!("complete list of {pool_kind} without {pool_name}"),
                    ),
                )
            }
        };
        let fix = match key.0 {
            Stream::Ip => format!(
                "Recreate subnet {pool_name} so that kube-ovn can release the address, or delete the IP if its pod is gone: {}",
                crate::analysis::fix::delete("ip", &key.1)
            ),
            _ => format!(
                "Recreate {pool_kind} {pool_name} or delete the pod of {} so that spiderpool releases it",
                key.1
            ),
        };
        ctx.fire(Finding {
            rule: NAME,
            severity: Severity::Critical,
            subject_kind: if key.0 == Stream::Ip {
                "IP"
            } else {
                "SpiderEndpoint"
            },
            subject_name: key.1.to_string(),
            subject_uid: record.uid.to_string(),
            scope: Some((*pool_name).to_owned()),
            subnet: Some((*pool_name).to_owned()),
            namespace: super::object_namespace(&key.1, record),
            summary: format!("{what} {how}: no IPAM can release this address"),
            fix: Some(fix),
            cleanup: None,
            evidence: vec![
                proof_of_absence,
                evidence(
                    &record.last,
                    format!("{what} names {pool_kind} {pool_name}"),
                ),
            ],
        });
    }
    if !has_alert {
        return;
    }
    for alert in ctx.firing_about(NAME, &record.uid.text()) {
        let pool_name = alert.subnet.clone().unwrap_or_default();
        if orphaned_by.iter().any(|(_, p)| *p == pool_name) {
            continue;
        }
        let what = if record.is_terminating() {
            format!("{} is terminating", key.1)
        } else if named.iter().any(|(_, p)| *p == pool_name) {
            format!("{pool_name} exists again")
        } else {
            format!("{} no longer names {pool_name}", key.1)
        };
        ctx.resolve(&alert.alert_id, evidence(cause, what));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{t, transitions};
    use super::NAME;
    use ipaudit_schemas::builders::EventBuilder;
    use ipaudit_schemas::{EventType, Stream};

    fn list_end(stream: Stream, rv: i64) -> ipaudit_schemas::WatchEvent {
        let mut e = EventBuilder::marker(stream, EventType::SyncEnd, rv);
        e.observed_at_ms = Some(rv);
        e
    }

    #[test]
    fn an_ip_created_after_its_subnet_was_deleted_is_orphaned_not_deleted_before() {
        let got = transitions(vec![
            EventBuilder::subnet("net").rv(1).at(1).added(),
            EventBuilder::subnet("net").rv(2).at(2).deleted(),
            EventBuilder::ip("vm.ns", "net").rv(3).at(3).added(),
        ]);
        assert_eq!(got, [t(NAME, "firing", "vm.ns")]);
    }

    #[test]
    fn a_recording_that_starts_after_the_subnet_is_gone_finds_the_orphan_from_the_lists() {
        for subnets_listed_first in [true, false] {
            let ip = EventBuilder::ip("vm.ns", "gone").rv(5).at(5).added();
            let mut events = vec![list_end(Stream::Subnet, 4)];
            if subnets_listed_first {
                events.push(ip);
            } else {
                events.insert(0, ip);
            }
            events.push(list_end(Stream::Ip, 6));
            assert_eq!(
                transitions(events),
                [t(NAME, "firing", "vm.ns")],
                "{subnets_listed_first}"
            );
        }
    }

    #[test]
    fn a_subnet_deleted_under_a_live_ip_is_the_other_rule_and_a_recreated_subnet_heals() {
        let got = transitions(vec![
            EventBuilder::subnet("net").rv(1).at(1).added(),
            EventBuilder::ip("vm.ns", "net").rv(2).at(2).added(),
            EventBuilder::subnet("net").rv(3).at(3).deleted(),
        ]);
        assert_eq!(got, [t("subnet-deleted-before-ip", "firing", "vm.ns")]);
        let got = transitions(vec![
            list_end(Stream::Subnet, 1),
            EventBuilder::ip("vm.ns", "net").rv(2).at(2).added(),
            EventBuilder::subnet("net").uid("new").rv(3).at(3).added(),
        ]);
        assert_eq!(
            got,
            [t(NAME, "firing", "vm.ns"), t(NAME, "resolved", "vm.ns")]
        );
    }
}
