//! `subnet-deleted-before-ip`: a pool is deleted while allocations still name it.
//! - kube-ovn: a Subnet's deletion comes while IPs still name it (spec.subnet or an
//!   attachment subnet). kube-ovn releases such an IP only through its subnet, so the
//!   address leaks. One alert per IP; resolved when the IP is gone, stops naming the
//!   subnet, or the subnet exists again.
//! - whereabouts IPPool, spiderpool SpiderIPPool: the pool's deletion comes while it still
//!   holds allocations (for spiderpool, only after someone removed its finalizer). The
//!   pods keep addresses no IPAM tracks any more. One alert per allocation; resolved when
//!   its pod is gone or the pool exists again.

use std::collections::{BTreeMap, BTreeSet};

use ipaudit_schemas::{EventType, Severity, Stream};
use serde::{Deserialize, Serialize};

use super::{evidence, gone_evidence, remove_finalizer_command};
use super::{Change, Context, Rule};
use crate::analysis::alerts::Finding;
use crate::analysis::state::holdings::{self, PoolRef};
use crate::analysis::state::{EventRef, ObjectRecord, Part, ReleasedHolding};

const NAME: &str = "subnet-deleted-before-ip";

/// An alert about one allocation of a deleted pool, to resolve when its pod goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct AllocationAlert {
    pool: PoolRef,
    owner: String,
    owner_uid: Option<String>,
}

/// Rule 1.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SubnetDeletedBeforeIp {
    /// Firing alerts about allocations of deleted pools, by alert id.
    allocation_alerts: BTreeMap<String, AllocationAlert>,
    /// The same alerts by owner pod and by pool, so that a pod going or a pool coming
    /// back costs what it resolves, not a scan of every alert. Rebuilt on restore.
    #[serde(skip)]
    by_owner: BTreeMap<String, BTreeSet<String>>,
    #[serde(skip)]
    by_pool: BTreeMap<PoolRef, BTreeSet<String>>,
}

impl Rule for SubnetDeletedBeforeIp {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>) {
        let stream = change.stream();
        if let (Some(removed), true) = (change.removed(), change.after.is_none()) {
            if holdings::is_pool(stream) {
                let pool = PoolRef::new(stream, &change.event.name);
                match stream {
                    Stream::Subnet => on_subnet_deleted(ctx, &pool, removed, change.event),
                    _ => self.on_pool_deleted(ctx, &pool, removed, change.released, change.event),
                }
            }
        }
        match stream {
            Stream::Ip => {
                if let Some(removed) = change.removed() {
                    on_ip_gone(ctx, removed, change.event);
                }
                if let Some(ip) = change.after {
                    recheck_ip_record(ctx, &change.event.name, ip, change.event);
                }
            }
            Stream::Subnet if change.appeared() => {
                // The subnet exists again: the IPs naming it no longer leak.
                let pool = PoolRef::new(Stream::Subnet, &change.event.name);
                for (_, ip) in ctx.state.naming(&pool) {
                    recheck_ip(ctx, &ip, change.event);
                }
            }
            Stream::IpPool | Stream::SpiderIpPool if change.appeared() => {
                let pool = PoolRef::new(stream, &change.event.name);
                let ids = self.by_pool.get(&pool).cloned().unwrap_or_default();
                self.resolve(ctx, change.event, ids, |_| true, "exists again");
            }
            Stream::Pod => {
                if let Some(removed) = change.removed() {
                    let uid = removed.uid.text();
                    let uid: &str = &uid;
                    let ids = self
                        .by_owner
                        .get(&*change.event.name)
                        .cloned()
                        .unwrap_or_default();
                    self.resolve(
                        ctx,
                        change.event,
                        ids,
                        |a| a.owner_uid.as_deref().is_none_or(|u| u == uid),
                        "is gone",
                    );
                }
            }
            _ => {}
        }
    }

    fn save(&self) -> serde_json::Value {
        super::save_state(self)
    }

    fn restore(&mut self, saved: serde_json::Value) -> Result<(), serde_json::Error> {
        let restored: SubnetDeletedBeforeIp = super::restore_state(saved)?;
        *self = SubnetDeletedBeforeIp::default();
        for (id, alert) in restored.allocation_alerts {
            self.track(id, alert);
        }
        Ok(())
    }
}

impl SubnetDeletedBeforeIp {
    /// A whereabouts or spiderpool pool went with allocations still in it: those whose
    /// pod still holds the address (an allocation of a pod already gone leaked before, and
    /// is `ip-without-pod`'s).
    fn on_pool_deleted(
        &mut self,
        ctx: &mut Context<'_>,
        pool: &PoolRef,
        last: &ObjectRecord,
        released: &[ReleasedHolding],
        deletion: &EventRef,
    ) {
        let kind = pool.stream.kind();
        for holding in released {
            if ctx
                .state
                .owner_gone_since(&holding.owner, holding.owner_uid.as_deref())
                .is_some()
            {
                continue;
            }
            let subject_name = format!("{}/{}", pool.name, holding.address);
            let subject_uid = format!("{}/{}", last.uid, holding.address);
            let finding = Finding {
                rule: NAME,
                severity: Severity::Critical,
                subject_kind: "Allocation",
                subject_name: subject_name.clone(),
                subject_uid: subject_uid.clone(),
                scope: Some(pool.name.clone()),
                subnet: Some(pool.name.clone()),
                namespace: super::owner_namespace(&holding.owner),
                summary: format!(
                    "{kind} {} was deleted while it still allocated {} to {}: no IPAM tracks this address any more, and it can be handed out twice",
                    pool.name, holding.address, holding.owner
                ),
                fix: Some(format!(
                    "Recreate {kind} {} with the same range so that the allocation is tracked again, or delete pod {} so that the address is free",
                    pool.name, holding.owner
                )),
                cleanup: None,
                evidence: vec![
                    evidence(
                        &last.last,
                        format!("{kind} {} allocates {} to {}", pool.name, holding.address, holding.owner),
                    ),
                    evidence(
                        deletion,
                        format!("{kind} {} deleted with {} allocation(s)", pool.name, released.len()),
                    ),
                ],
            };
            let id = ctx.alert_id(NAME, &subject_uid, Some(&pool.name));
            ctx.fire(finding);
            self.track(
                id,
                AllocationAlert {
                    pool: pool.clone(),
                    owner: holding.owner.clone(),
                    owner_uid: holding.owner_uid.clone(),
                },
            );
        }
    }

    /// Remembers a firing allocation alert, indexed.
    fn track(&mut self, id: String, alert: AllocationAlert) {
        self.by_owner
            .entry(alert.owner.clone())
            .or_default()
            .insert(id.clone());
        self.by_pool
            .entry(alert.pool.clone())
            .or_default()
            .insert(id.clone());
        self.allocation_alerts.insert(id, alert);
    }

    /// Forgets a firing allocation alert.
    fn untrack(&mut self, id: &str) -> Option<AllocationAlert> {
        let alert = self.allocation_alerts.remove(id)?;
        unindex(&mut self.by_owner, &alert.owner, id);
        unindex(&mut self.by_pool, &alert.pool, id);
        Some(alert)
    }

    /// Resolves those of the alerts `ids` that `matches`.
    fn resolve(
        &mut self,
        ctx: &mut Context<'_>,
        by: &EventRef,
        ids: BTreeSet<String>,
        matches: impl Fn(&AllocationAlert) -> bool,
        what: &str,
    ) {
        for id in ids {
            if !self.allocation_alerts.get(&id).is_some_and(&matches) {
                continue;
            }
            self.untrack(&id);
            ctx.resolve(
                &id,
                evidence(by, format!("{} {what} ({})", by.name, by.event_type)),
            );
        }
    }
}

/// Takes `id` out of `index` under `key`.
fn unindex<K: Ord>(index: &mut BTreeMap<K, BTreeSet<String>>, key: &K, id: &str) {
    if let Some(ids) = index.get_mut(key) {
        ids.remove(id);
        if ids.is_empty() {
            index.remove(key);
        }
    }
}

/// The subnet `pool` was just deleted: every live IP naming it leaks. The evidence names
/// both steps of the deletion when they were two: the request that marked the subnet (a
/// delete, which only sets deletionTimestamp while a finalizer is there) and the event
/// that made it go (the write that removed the last finalizer), so that an audit log can
/// name who did each.
fn on_subnet_deleted(
    ctx: &mut Context<'_>,
    pool: &PoolRef,
    subnet_record: &ObjectRecord,
    deletion: &EventRef,
) {
    let subnet = pool.name.as_str();
    let naming = ctx.state.naming(pool);
    for (_, name) in &naming {
        let Some(ip) = ctx.state.get(Stream::Ip, name) else {
            continue;
        };
        let how = if deletion.event_type == EventType::DeletedOnRelist {
            "was found deleted on relist"
        } else {
            "was deleted"
        };
        let described = describe_ip(ip);
        let mut proof = vec![evidence(
            &ip.last,
            format!(
                "IP {name} on subnet {subnet}{described}, finalizers [{}]",
                ip.finalizers.join(", ")
            ),
        )];
        if let Some(requested) = subnet_record
            .deletion_requested()
            .filter(|r| r.resource_version() != deletion.resource_version())
        {
            proof.push(evidence(
                requested,
                format!("Subnet {subnet} marked for deletion (deletion requested)"),
            ));
        }
        proof.push(evidence(
            deletion,
            format!(
                "Subnet {subnet} deleted while {} IP(s) still named it",
                naming.len()
            ),
        ));
        let finding = Finding {
            rule: NAME,
            severity: Severity::Critical,
            subject_kind: "IP",
            subject_name: name.to_string(),
            subject_uid: ip.uid.to_string(),
            scope: Some(subnet.to_owned()),
            subnet: Some(subnet.to_owned()),
            namespace: super::object_namespace(name, ip),
            summary: format!(
                "Subnet {subnet} {how} while IP {name}{described} still named it: kube-ovn cannot release this address",
            ),
            fix: Some(fix_for(ip, name, subnet)),
            cleanup: None,
            evidence: proof,
        };
        ctx.fire(finding);
    }
}

/// How a kube-ovn IP is described in evidence and summaries: ` (address, pod ns/name, type)`.
pub(super) fn describe_ip(ip: &ObjectRecord) -> String {
    let Part::Ip(spec) = ip.part() else {
        return String::new();
    };
    let mut parts = Vec::new();
    if !spec.ip_address.is_empty() {
        parts.push(spec.ip_address.to_string());
    }
    if let Some(pod) = spec.pod() {
        parts.push(format!("pod {pod}"));
    }
    if !spec.pod_type().is_empty() {
        parts.push(spec.pod_type().to_string());
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

fn fix_for(ip: &ObjectRecord, name: &str, subnet: &str) -> String {
    let patch = match ip.kube_ovn_finalizer() {
        Some((index, finalizer)) => format!(
            "; if it then stays terminating, remove kube-ovn's finalizer: {}",
            remove_finalizer_command(
                "ip",
                name,
                crate::analysis::fix::CURRENT_VERSION,
                index,
                finalizer
            )
        ),
        None => String::new(),
    };
    let pod = match ip.part() {
        Part::Ip(spec) if spec.pod().is_some() => {
            format!("{}/{}", spec.pod_namespace(), spec.pod_name())
        }
        _ => "(none)".to_owned(),
    };
    format!(
        "Recreate subnet {subnet} so that kube-ovn releases the address, or, if pod {pod} is gone, delete the IP: {}{patch}",
        crate::analysis::fix::delete("ip", name)
    )
}

/// The IP `name` changed: resolve its alerts that no longer hold.
fn recheck_ip(ctx: &mut Context<'_>, name: &str, cause: &EventRef) {
    if let Some(ip) = ctx.state.get(Stream::Ip, name) {
        recheck_ip_record(ctx, name, ip, cause);
    }
}

/// [`recheck_ip`] of the live IP `ip`, named `name`.
fn recheck_ip_record(ctx: &mut Context<'_>, name: &str, ip: &ObjectRecord, cause: &EventRef) {
    let alerts = ctx.firing_about(NAME, &ip.uid.text());
    if alerts.is_empty() {
        return;
    }
    let named = holdings::pools_named(ip.part());
    for alert in alerts {
        let subnet = alert.subnet.clone().unwrap_or_default();
        let pool = PoolRef::new(Stream::Subnet, &subnet);
        let still_named = named.contains(&pool);
        let restored = ctx.state.pool(&pool).is_some();
        if !still_named || restored {
            let what = if restored {
                format!("Subnet {subnet} exists again")
            } else {
                format!("IP {name} no longer names subnet {subnet}")
            };
            ctx.resolve(&alert.alert_id, evidence(cause, what));
        }
    }
}

/// The IP is gone: its leak is over.
fn on_ip_gone(ctx: &mut Context<'_>, ip: &ObjectRecord, by: &EventRef) {
    ctx.resolve_all_about(NAME, &ip.uid.text(), || {
        gone_evidence(by, &format!("IP {}", by.name))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::engine::{Analyzer, AnalyzerConfig, Output};
    use ipaudit_schemas::builders::EventBuilder;
    use ipaudit_schemas::WatchEvent;

    fn run(events: Vec<WatchEvent>) -> (Vec<(String, String, String)>, Analyzer) {
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        for e in events {
            analyzer.step(e, &mut out);
        }
        analyzer.finish(None, &mut out);
        let alerts = out
            .into_iter()
            .filter_map(|o| match o {
                Output::Alert(a) => Some((a.rule, a.status.as_str().to_owned(), a.subject_name)),
                Output::NewEpoch(_) => None,
            })
            .collect();
        (alerts, analyzer)
    }

    #[test]
    fn a_subnet_recreated_resolves_its_leaks_and_its_status_churn_changes_nothing() {
        let ip = || EventBuilder::ip("a.default", "s").ip_of("default", "a", "10.0.0.5", "");
        let (alerts, _) = run(vec![
            EventBuilder::subnet("s").uid("s-1").rv(1).at(1).added(),
            ip().rv(2).at(2).added(),
            EventBuilder::subnet("s").uid("s-1").rv(3).at(3).deleted(),
            EventBuilder::subnet("s").uid("s-2").rv(4).at(4).added(),
            EventBuilder::subnet("s")
                .uid("s-2")
                .using_ips(1)
                .rv(5)
                .at(5)
                .modified(),
            EventBuilder::subnet("s").uid("s-2").rv(6).at(6).deleted(),
        ]);
        assert_eq!(
            alerts,
            [
                (NAME.into(), "firing".into(), "a.default".into()),
                (NAME.into(), "resolved".into(), "a.default".into()),
                (NAME.into(), "firing".into(), "a.default".into()),
            ],
            "fires at each deletion and resolves when the subnet comes back; its status update changes nothing"
        );
    }

    #[test]
    fn allocation_alerts_restored_from_a_checkpoint_still_resolve_when_their_pod_goes() {
        let pool = || EventBuilder::ip_pool("kube-system", "10.0.0.0-24", "10.0.0.0/24");
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        for e in [
            EventBuilder::pod("default", "a")
                .uid("a-1")
                .rv(1)
                .at(1)
                .added(),
            pool()
                .allocation(5, "10.0.0.5", "default/a")
                .rv(2)
                .at(2)
                .added(),
            pool()
                .allocation(5, "10.0.0.5", "default/a")
                .rv(3)
                .at(3)
                .deleted(),
        ] {
            analyzer.step(e, &mut out);
        }
        let mut restored =
            Analyzer::from_checkpoint(&analyzer.checkpoint(), AnalyzerConfig::default()).unwrap();
        restored.step(
            EventBuilder::pod("default", "a")
                .uid("a-1")
                .rv(4)
                .at(4)
                .deleted(),
            &mut out,
        );
        restored.finish(None, &mut out);
        let statuses: Vec<&str> = out
            .iter()
            .filter_map(|o| match o {
                Output::Alert(a) if a.rule == NAME => Some(a.status.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(statuses, ["firing", "resolved"]);
    }

    #[test]
    fn an_allocation_of_a_pod_already_gone_is_not_a_deletion_leak() {
        let pool = || EventBuilder::ip_pool("kube-system", "10.0.0.0-24", "10.0.0.0/24");
        let (alerts, _) = run(vec![
            EventBuilder::pod("default", "a")
                .uid("a-1")
                .rv(1)
                .at(1)
                .added(),
            pool()
                .allocation(5, "10.0.0.5", "default/a")
                .rv(2)
                .at(2)
                .added(),
            EventBuilder::pod("default", "a")
                .uid("a-1")
                .rv(3)
                .at(3)
                .deleted(),
            pool()
                .allocation(5, "10.0.0.5", "default/a")
                .rv(4)
                .at(4)
                .deleted(),
        ]);
        assert!(alerts.iter().all(|(rule, _, _)| rule != NAME), "{alerts:?}");
    }

    #[test]
    fn a_whereabouts_pool_deleted_with_allocations_leaks_each_until_its_pod_goes() {
        let pool = || EventBuilder::ip_pool("kube-system", "10.0.0.0-24", "10.0.0.0/24");
        let (alerts, analyzer) = run(vec![
            EventBuilder::pod("default", "a")
                .uid("a-1")
                .rv(1)
                .at(1)
                .added(),
            pool()
                .allocation(5, "10.0.0.5", "default/a")
                .rv(2)
                .at(2)
                .added(),
            pool()
                .allocation(5, "10.0.0.5", "default/a")
                .rv(3)
                .at(3)
                .deleted(),
            EventBuilder::pod("default", "a")
                .uid("a-1")
                .rv(4)
                .at(4)
                .deleted(),
        ]);
        assert_eq!(
            alerts,
            [
                (
                    NAME.into(),
                    "firing".into(),
                    "kube-system/10.0.0.0-24/10.0.0.5".into()
                ),
                (
                    NAME.into(),
                    "resolved".into(),
                    "kube-system/10.0.0.0-24/10.0.0.5".into()
                ),
            ]
        );
        let pool = PoolRef::new(Stream::IpPool, "kube-system/10.0.0.0-24");
        assert!(analyzer.state().pool(&pool).is_none());
    }
}
