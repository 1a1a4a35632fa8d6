//! `subnet-stuck-terminating`: a pool (kube-ovn Subnet, SpiderIPPool, or a whereabouts
//! IPPool that carries a finalizer) has had a deletionTimestamp for longer than a grace
//! period and still exists: with nothing using it (kube-ovn seed scenario B: the
//! finalizer is never removed), or with allocations that keep it (a SpiderIPPool deleted
//! with entries stays terminating on its finalizer). Resolved when the pool is gone.

use ipaudit_schemas::{is_kube_ovn_finalizer, Severity, Stream, SPIDERPOOL_FINALIZER};
use serde::{Deserialize, Serialize};

use super::{
    duration_text, evidence, gone_evidence, remove_finalizer_command, time_text, Change, Context,
    Deadlines, Rule,
};
use crate::analysis::alerts::Finding;
use crate::analysis::state::holdings::{self, PoolRef};
use crate::analysis::state::{ClusterState, ObjectRecord, Part};

const NAME: &str = "subnet-stuck-terminating";

/// Rule 3.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SubnetStuckTerminating {
    /// Terminating pools, due at deletionTimestamp + grace; keys are `<label>/<name>`.
    deadlines: Deadlines,
}

fn timer_key(pool: &PoolRef) -> String {
    format!("{}/{}", pool.stream.as_str(), pool.name)
}

fn pool_of_key(key: &str) -> Option<PoolRef> {
    let (label, name) = key.split_once('/')?;
    let stream = ipaudit_schemas::kinds::stream_labelled(label)?;
    Some(PoolRef::new(stream, name))
}

impl Rule for SubnetStuckTerminating {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>) {
        if !holdings::is_pool(change.stream()) || change.is_list_end() {
            return;
        }
        let pool = PoolRef::new(change.stream(), &change.event.name);
        if let Some(removed) = change.removed() {
            self.deadlines.cancel(&timer_key(&pool));
            let what = format!("{} {}", pool.stream.kind(), pool.name);
            let id = ctx.alert_id(NAME, &removed.uid.text(), Some(&pool.name));
            ctx.resolve(&id, gone_evidence(change.event, &what));
        }
        if let Some(deleting_since) = change.after.and_then(|p| p.deletion_ms()) {
            let deadline = deleting_since.saturating_add(ctx.config.subnet_terminating_grace_ms);
            self.deadlines.set_if_absent(&timer_key(&pool), deadline);
        }
    }

    fn on_time(&mut self, ctx: &mut Context<'_>, now_ms: i64) {
        for (deadline, key) in self.deadlines.take_due(now_ms) {
            let Some(pool) = pool_of_key(&key) else {
                continue;
            };
            let Some(record) = ctx.state.pool(&pool) else {
                continue;
            };
            let finding = finding(
                ctx.state,
                ctx.config.subnet_terminating_grace_ms,
                &pool,
                record,
            );
            // It has been stuck since the deadline, whenever the clock noticed.
            ctx.fire_at(finding, deadline);
        }
    }

    fn has_due(&self, now_ms: i64) -> bool {
        self.deadlines.any_due(now_ms)
    }

    state_is_self!();
}

fn finding(state: &ClusterState, grace_ms: i64, pool: &PoolRef, record: &ObjectRecord) -> Finding {
    let name = pool.name.as_str();
    let kind = pool.stream.kind();
    // Who still uses it: records naming it (kube-ovn IPs, SpiderEndpoints), or its own
    // allocations (pool entries).
    let users: Vec<String> = match record.part() {
        Part::SpiderIpPool(_) | Part::IpPool(_) => holdings::holdings(name, record)
            .into_iter()
            .map(|h| format!("{} ({})", h.address, h.owner))
            .collect(),
        _ => state
            .naming(pool)
            .into_iter()
            .map(|(_, n)| n.to_string())
            .collect(),
    };
    let used = match record.part() {
        Part::Subnet(s) => format!(
            "v4usingIPs={}",
            s.v4_using_ips.as_deref().unwrap_or("unknown")
        ),
        Part::SpiderIpPool(p) => format!(
            "allocatedIPCount={}",
            p.allocated_ip_count
                .map_or_else(|| "unknown".to_owned(), |c| c.to_string())
        ),
        _ => format!("{} allocation(s)", users.len()),
    };
    let requested = record.deletion_requested().unwrap_or(&record.last);
    let mut proof = vec![evidence(
        requested,
        format!(
            "{kind} {name} marked for deletion at {}",
            time_text(record.deletion_ms())
        ),
    )];
    if record.last.rv != requested.rv {
        proof.push(evidence(
            &record.last,
            format!("{kind} {name} still there, {used}"),
        ));
    }
    let why = if users.is_empty() {
        format!("nothing uses it ({used}) yet its finalizer was never removed")
    } else {
        let noun = if pool.stream == Stream::Subnet {
            "IP(s) still name it"
        } else {
            "allocation(s) keep it"
        };
        format!(
            "{} {noun}: {}",
            users.len(),
            users.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        )
    };
    let fix = match (pool.stream, users.is_empty()) {
        (Stream::Subnet, true) => match record.kube_ovn_finalizer() {
            Some((index, finalizer)) => format!(
                "Restart kube-ovn-controller (kube-ovn #6092) or, as a last resort, remove its finalizer: {}",
                remove_finalizer_command("subnet", name, &record.resource_version(), index, finalizer)
            ),
            None => "Check kube-ovn-controller's logs for this subnet".to_owned(),
        },
        (Stream::Subnet, false) => format!(
            "Delete the pods and IPs that still use subnet {name}: {}",
            crate::analysis::fix::list_by_label("ips", "ovn.kubernetes.io/subnet", name)
        ),
        (_, false) => format!(
            "Delete or move the pods that still hold addresses of {kind} {name}; spiderpool removes its finalizer once no address is allocated"
        ),
        (_, true) => match record.finalizer_where(|f| f == SPIDERPOOL_FINALIZER || is_kube_ovn_finalizer(f)) {
            Some((index, finalizer)) => format!(
                "Check the IPAM controller's logs; as a last resort remove the finalizer: {}",
                remove_finalizer_command(
                    &pool.stream.spec().map_or_else(String::new, |k| k.resource()),
                    name,
                    &record.resource_version(),
                    index,
                    finalizer,
                )
            ),
            None => "Check the IPAM controller's logs for this pool".to_owned(),
        },
    };
    Finding {
        rule: NAME,
        severity: Severity::Warning,
        subject_kind: kind,
        subject_name: name.to_owned(),
        subject_uid: record.uid.to_string(),
        scope: Some(name.to_owned()),
        subnet: Some(name.to_owned()),
        // A pool's own alert: no pod's team owns it.
        namespace: None,
        summary: format!(
            "{kind} {name} has been terminating for more than {}: {why}",
            duration_text(grace_ms)
        ),
        fix: Some(fix),
        cleanup: None,
        evidence: proof,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{t, transitions, MIN};
    use super::NAME;
    use ipaudit_schemas::builders::EventBuilder;

    #[test]
    fn a_spiderpool_pool_deleted_with_entries_stays_terminating_and_is_reported() {
        let pool = || {
            EventBuilder::spider_pool("pool-a", "172.18.0.0/16").entry(
                "172.18.40.10",
                "default/api",
                "p1",
            )
        };
        let got = transitions(vec![
            pool().rv(1).at(0).added(),
            pool().deleting(MIN).rv(2).at(MIN).modified(),
            EventBuilder::pod("default", "x").rv(3).at(12 * MIN).added(),
        ]);
        assert_eq!(got, [t(NAME, "firing", "pool-a")]);
    }
}
