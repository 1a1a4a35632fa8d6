//! `handle-without-ip`: a Calico IPAMHandle whose `spec.block` counts addresses that no
//! allocation of those blocks carries under its id (an orphan handle, or a count too
//! high) for longer than the handle grace (60 s: a handle is written before the block on
//! allocation and after it on release). Calico's kube-controllers never deletes such
//! handles (calico#8548: 30,000 of them; #10759); `calicoctl ipam check` counts them as
//! "handles with no matching IPs" only when asked. Judged once blocks and handles were both
//! listed completely. Resolved when the counts match or the handle goes. A handle or block
//! seen in both API groups is one.

use ipaudit_schemas::{Cleanup, CleanupAction, Severity, Stream};
use serde::{Deserialize, Serialize};

use super::{duration_text, evidence, Change, Context, Deadlines, Rule};
use crate::analysis::alerts::Finding;
use crate::analysis::state::calico::{self, HANDLE_STREAMS};
use crate::analysis::state::{ClusterState, EventRef, ObjectRecord, Part};

const NAME: &str = "handle-without-ip";

/// Rule 10.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct HandleWithoutIp {
    /// Handles (object names) whose counts are off, due at noticed + grace.
    deadlines: Deadlines,
}

/// What a handle counts that its blocks do not show: (block CIDR, counted, found).
type Shortfalls = Vec<(String, i64, i64)>;

/// The live handle of this object name (either API group) and what it counts that its
/// blocks do not show; `None` when the handle is gone or its counts hold.
fn shortfalls<'a>(state: &'a ClusterState, name: &str) -> Option<(&'a ObjectRecord, Shortfalls)> {
    let (record, handle) = HANDLE_STREAMS.into_iter().find_map(|stream| {
        let record = state.get(stream, name)?;
        match record.part() {
            Part::CalicoHandle(handle) if !handle.deleted => Some((record, handle)),
            _ => None,
        }
    })?;
    let id = calico::clean_handle(&handle.handle_id);
    let short: Shortfalls = handle
        .blocks
        .iter()
        .filter(|entry| entry.count > 0)
        .filter_map(|entry| {
            let found = calico::addresses_of_handle_in(state, &entry.cidr, id);
            (found < entry.count).then(|| (entry.cidr.clone(), entry.count, found))
        })
        .collect();
    (!short.is_empty()).then_some((record, short))
}

impl Rule for HandleWithoutIp {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>) {
        match change.stream().canonical() {
            Stream::CalicoIpamHandle | Stream::CalicoIpamBlock if change.is_list_end() => {
                let names: Vec<String> = HANDLE_STREAMS
                    .into_iter()
                    .flat_map(|stream| ctx.state.records(stream).map(|(n, _)| n.to_string()))
                    .collect();
                for name in names {
                    self.evaluate(ctx, &name, change.event);
                }
            }
            Stream::CalicoIpamHandle => {
                let name = change.event.name.to_string();
                self.evaluate(ctx, &name, change.event);
            }
            Stream::CalicoIpamBlock => {
                // The handles of the allocations it had and has.
                let mut names: Vec<String> =
                    calico::allocations_had_and_has(change.before, change.after)
                        .filter_map(calico::handle_needed)
                        .map(calico::handle_object_name)
                        .collect();
                names.sort_unstable();
                names.dedup();
                for name in names {
                    self.evaluate(ctx, &name, change.event);
                }
            }
            _ => {}
        }
    }

    fn on_time(&mut self, ctx: &mut Context<'_>, now_ms: i64) {
        for (due, name) in self.deadlines.take_due(now_ms) {
            if let Some((record, short)) = shortfalls(ctx.state, &name) {
                let finding = finding(ctx, &name, record, &short);
                ctx.fire_at(finding, due);
            }
        }
    }

    fn has_due(&self, now_ms: i64) -> bool {
        self.deadlines.any_due(now_ms)
    }

    state_is_self!();
}

impl HandleWithoutIp {
    /// Schedules, or stops and resolves, the rule for one handle.
    fn evaluate(&mut self, ctx: &mut Context<'_>, name: &str, cause: &EventRef) {
        if !calico::blocks_and_handles_listed(ctx.state) {
            return;
        }
        if let Some((handle, short)) = shortfalls(ctx.state, name) {
            let id = ctx.alert_id(NAME, &subject_uid(name), None);
            if !ctx.is_firing(&id) {
                let blocks: Vec<String> = short
                    .iter()
                    .map(|(cidr, _, _)| calico::block_object_name(cidr))
                    .collect();
                let involved = std::iter::once(handle).chain(
                    blocks
                        .iter()
                        .flat_map(|b| calico::blocks_named(ctx.state, b).map(|(r, _)| r)),
                );
                let since = calico::mismatch_since(cause, involved, ctx.now_ms);
                let due = since.saturating_add(ctx.config.handle_grace_ms);
                self.deadlines.set_if_absent(name, due);
            }
            return;
        }
        self.deadlines.cancel(name);
        ctx.resolve_all_about(NAME, &subject_uid(name), || {
            evidence(
                cause,
                format!("IPAMHandle {name} is gone, or its blocks show what it counts"),
            )
        });
    }
}

/// One handle, whichever API group shows it.
fn subject_uid(name: &str) -> String {
    format!("calico-handle/{name}")
}

fn finding(ctx: &Context<'_>, name: &str, record: &ObjectRecord, short: &Shortfalls) -> Finding {
    let handle_id = match record.part() {
        Part::CalicoHandle(handle) => handle.handle_id.clone(),
        _ => name.to_owned(),
    };
    let counts: Vec<String> = short
        .iter()
        .map(|(cidr, counted, found)| format!("{counted} in block {cidr}, where {found} carry it"))
        .collect();
    let orphan = short.iter().all(|(_, _, found)| *found == 0);
    let resource = record
        .last
        .stream
        .spec()
        .map_or_else(String::new, |k| k.resource());
    Finding {
        rule: NAME,
        severity: Severity::Warning,
        subject_kind: "IPAMHandle",
        subject_name: handle_id.clone(),
        subject_uid: subject_uid(name),
        scope: None,
        subnet: short.first().map(|(cidr, _, _)| cidr.clone()),
        namespace: None,
        summary: format!(
            "IPAMHandle {handle_id} counts addresses no allocation carries ({}) for more than {}: {}",
            counts.join("; "),
            duration_text(ctx.config.handle_grace_ms),
            if orphan {
                "an orphan handle, which Calico never deletes (calicoctl ipam check: handles with no matching IPs)"
            } else {
                "its count is too high, so Calico's release by handle leaves it behind"
            }
        ),
        fix: Some(if orphan {
            format!(
                "Delete the handle once a re-read of its blocks still shows none of its addresses (a collector with --remediate on does, with uid and resourceVersion preconditions): {}",
                crate::analysis::fix::delete(&resource, name)
            )
        } else {
            "Release the handle's addresses and recreate it with the counts its blocks show (calicoctl ipam check --show-problem-ips lists them)".to_owned()
        }),
        // An orphan is deleted by the collector once a re-read of its blocks confirms it.
        cleanup: orphan.then(|| Cleanup {
            action: CleanupAction::Delete,
            target_stream: record.last.stream,
            target_name: name.to_owned(),
            target_namespace: None,
            target_uid: record.uid.text().to_string(),
            resource_version: record.resource_version().to_string(),
            finalizer: String::new(),
            pool: String::new(),
            address: None,
        }),
        evidence: vec![evidence(
            &record.last,
            format!("IPAMHandle {handle_id} counts {}", counts.join("; ")),
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{after_calico_lists, t, tick, transitions, MIN};
    use super::NAME;
    use ipaudit_schemas::builders::EventBuilder;

    fn block() -> EventBuilder {
        EventBuilder::calico_block("10.244.1.0/26", "node-a")
    }

    fn handle() -> EventBuilder {
        EventBuilder::calico_handle("k8s-pod-network.c0ffee", &[("10.244.1.0/26", 1)])
    }

    #[test]
    fn a_handle_left_behind_by_a_release_is_an_orphan_reported_after_the_grace() {
        let got = transitions(after_calico_lists(vec![
            handle().rv(1).at(0).added(),
            block()
                .calico_allocation(1, "default/web-0", "k8s-pod-network.c0ffee")
                .rv(2)
                .at(1)
                .added(),
            // Released from the block; the handle's decrement never comes.
            block().rv(3).at(MIN).modified(),
            tick(4, 3 * MIN),
            handle().rv(5).at(4 * MIN).deleted(),
        ]));
        assert_eq!(
            got,
            [
                t(NAME, "firing", "k8s-pod-network.c0ffee"),
                t(NAME, "resolved", "k8s-pod-network.c0ffee")
            ]
        );
    }

    #[test]
    fn a_handle_written_before_its_block_and_decremented_after_it_is_no_finding() {
        let got = transitions(after_calico_lists(vec![
            handle().rv(1).at(0).added(),
            block()
                .calico_allocation(1, "default/web-0", "k8s-pod-network.c0ffee")
                .rv(2)
                .at(3_000)
                .added(),
            block().rv(3).at(MIN).modified(),
            handle().rv(4).at(MIN + 2_000).deleted(),
            tick(5, 5 * MIN),
        ]));
        assert_eq!(got, []);
    }

    #[test]
    fn a_count_too_high_is_reported() {
        let got = transitions(after_calico_lists(vec![
            EventBuilder::calico_handle("k8s-pod-network.c0ffee", &[("10.244.1.0/26", 2)])
                .rv(1)
                .at(0)
                .added(),
            block()
                .calico_allocation(1, "default/web-0", "k8s-pod-network.c0ffee")
                .rv(2)
                .at(1)
                .added(),
            tick(3, 2 * MIN),
        ]));
        assert_eq!(got, [t(NAME, "firing", "k8s-pod-network.c0ffee")]);
    }
}
