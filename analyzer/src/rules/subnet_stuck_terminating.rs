//! Rule 3, `subnet-stuck-terminating`: a Subnet has had a deletionTimestamp for longer than
//! a grace period and still exists, with zero used IPs (seed scenario B: the finalizer is
//! never removed) or with IPs still naming it. Resolved when the subnet is gone.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};

use super::{
    duration_text, evidence, remove_finalizer_command, time_text, Context, Rule, RuleConfig,
};
use crate::alerts::{alert_id, Finding};
use crate::state::{ClusterState, EventRef};

/// Deadlines of the terminating subnets.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SubnetTimers {
    deadlines: BTreeSet<(i64, String)>,
    by_subnet: HashMap<String, i64>,
}

impl SubnetTimers {
    /// No subnet terminating.
    pub fn new() -> Self {
        Self::default()
    }

    /// The subnet `name` changed: start its timer when it starts terminating.
    pub(super) fn on_subnet_changed(
        &mut self,
        state: &ClusterState,
        config: &RuleConfig,
        name: &str,
    ) {
        let Some(deleting_since) = state.subnet(name).and_then(|s| s.deletion_ms) else {
            return;
        };
        if !self.by_subnet.contains_key(name) {
            let deadline = deleting_since.saturating_add(config.subnet_terminating_grace_ms);
            self.by_subnet.insert(name.to_owned(), deadline);
            self.deadlines.insert((deadline, name.to_owned()));
        }
    }

    /// The subnet is gone: stop its timer and resolve its alert.
    pub(super) fn on_subnet_gone(
        &mut self,
        ctx: &mut Context<'_>,
        uid: &str,
        name: &str,
        by: &EventRef,
    ) {
        if let Some(deadline) = self.by_subnet.remove(name) {
            self.deadlines.remove(&(deadline, name.to_owned()));
        }
        let id = alert_id(
            ctx.cluster_id,
            Rule::SubnetStuckTerminating,
            uid,
            Some(name),
        );
        if ctx.book.is_firing(&id) {
            ctx.resolve(
                &id,
                evidence(by, format!("Subnet {name} is gone ({})", by.event_type)),
            );
        }
    }

    /// Time is `now_ms`: fire for every subnet past its deadline.
    pub fn on_time(&mut self, ctx: &mut Context<'_>, config: &RuleConfig, now_ms: i64) {
        while let Some((deadline, name)) = self.deadlines.first().cloned() {
            if deadline >= now_ms {
                break;
            }
            self.deadlines.pop_first();
            self.by_subnet.remove(&name);
            let Some(subnet) = ctx.state.subnet(&name) else {
                continue;
            };
            let ips = ctx.state.ips_naming(&name);
            let used = subnet.v4_using_ips.as_deref().unwrap_or("unknown");
            let requested = subnet.deletion_requested.as_ref().unwrap_or(&subnet.last);
            let mut proof = vec![evidence(
                requested,
                format!(
                    "Subnet {name} marked for deletion at {}",
                    time_text(subnet.deletion_ms)
                ),
            )];
            if subnet.last.rv != requested.rv {
                proof.push(evidence(
                    &subnet.last,
                    format!("Subnet {name} still there, v4usingIPs={used}"),
                ));
            }
            let why = if ips.is_empty() {
                format!("no IP names it (v4usingIPs={used}) yet its finalizer was never removed")
            } else {
                format!(
                    "{} IP(s) still name it: {}",
                    ips.len(),
                    ips.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
                )
            };
            let finalizer = subnet
                .finalizers
                .iter()
                .enumerate()
                .find(|(_, f)| ipaudit_schemas::is_kube_ovn_finalizer(f));
            let fix = if let (true, Some((index, finalizer))) = (ips.is_empty(), finalizer) {
                format!(
                    "Restart kube-ovn-controller (kube-ovn #6092) or, as a last resort, remove its finalizer: {}",
                    remove_finalizer_command("subnet", &name, &subnet.resource_version, index, finalizer)
                )
            } else {
                format!("Delete the pods and IPs that still use subnet {name}: kubectl get ips -l ovn.kubernetes.io/subnet={name}")
            };
            let finding = Finding {
                rule: Rule::SubnetStuckTerminating,
                subject_kind: "Subnet",
                subject_name: name.clone(),
                subject_uid: subnet.uid.clone(),
                subnet: Some(name.clone()),
                summary: format!(
                    "Subnet {name} has been terminating for more than {}: {why}",
                    duration_text(config.subnet_terminating_grace_ms)
                ),
                fix: Some(fix),
                evidence: proof,
            };
            // It has been stuck since the deadline, whenever the clock noticed.
            let noticed_at = ctx.at.time_ms;
            ctx.at.time_ms = deadline;
            ctx.fire(finding);
            ctx.at.time_ms = noticed_at;
        }
    }
}
