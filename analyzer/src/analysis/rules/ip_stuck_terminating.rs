//! `ip-stuck-terminating`: an address record that can never finish its deletion.
//! - kube-ovn: an IP has a deletionTimestamp and kube-ovn's finalizer (either name) while
//!   its subnet is gone; the controller needs the subnet to finish, so the IP can never go
//!   away by itself. Resolved when the IP is gone, loses the finalizer, or the subnet
//!   exists again.
//! - spiderpool: a SpiderEndpoint has been terminating with spiderpool's finalizer for
//!   longer than the owner grace while its pod (name and uid) is gone. Resolved when the
//!   endpoint is gone or loses the finalizer.

use std::collections::BTreeMap;

use ipaudit_schemas::{Cleanup, CleanupAction, Severity, Stream, SPIDERPOOL_FINALIZER};
use serde::{Deserialize, Serialize};

use super::subnet_deleted_before_ip::describe_ip;
use super::{
    duration_text, evidence, gone_evidence, remove_finalizer_command, time_text, Change, Context,
    Deadlines, Rule,
};
use crate::analysis::alerts::Finding;
use crate::analysis::state::holdings::PoolRef;
use crate::analysis::state::{EventRef, ObjectRecord, Part};

const NAME: &str = "ip-stuck-terminating";

/// Rule 2.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct IpStuckTerminating {
    /// Terminating SpiderEndpoints and when their grace ends (deletionTimestamp + owner
    /// grace); checked again whenever their pod goes.
    terminating: BTreeMap<String, i64>,
    /// Wake-ups at those times.
    wake: Deadlines,
}

impl Rule for IpStuckTerminating {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>) {
        match change.stream() {
            Stream::Ip => {
                if let Some(removed) = change.removed() {
                    ctx.resolve_all_about(NAME, &removed.uid.text(), || {
                        gone_evidence(change.event, &format!("IP {}", change.event.name))
                    });
                }
                if let Some(ip) = change.after {
                    check_ip_record(ctx, &change.event.name, ip, change.event);
                }
            }
            Stream::Subnet => {
                let pool = PoolRef::new(Stream::Subnet, &change.event.name);
                if change.is_list_end() {
                    // A complete list of subnets: a terminating IP whose subnet it lacks is
                    // stuck, whichever of the two lists came first.
                    let terminating: Vec<String> = ctx
                        .state
                        .records(Stream::Ip)
                        .filter(|(_, ip)| ip.is_terminating())
                        .map(|(name, _)| name.to_string())
                        .collect();
                    let mut terminating = terminating;
                    terminating.sort();
                    for name in terminating {
                        check_ip(ctx, &name, change.event);
                    }
                } else if change.is_deletion() || change.appeared() {
                    // Gone or back: the IPs naming it are stuck or no longer so. (Its
                    // status churn changes neither.)
                    for (_, ip) in ctx.state.naming(&pool) {
                        check_ip(ctx, &ip, change.event);
                    }
                }
            }
            Stream::SpiderEndpoint => {
                let key = change.event.name.to_string();
                if let Some(removed) = change.removed() {
                    self.forget(&key);
                    ctx.resolve_all_about(NAME, &removed.uid.text(), || {
                        gone_evidence(change.event, &format!("SpiderEndpoint {key}"))
                    });
                }
                if let Some(endpoint) = change.after {
                    match endpoint
                        .deletion_ms()
                        .filter(|_| holds_spiderpool_finalizer(endpoint))
                    {
                        Some(since) => {
                            let due = since.saturating_add(ctx.config.owner_grace_ms);
                            if self.terminating.insert(key.clone(), due).is_none() {
                                self.wake.set(&key, due);
                            }
                            self.check_endpoint(ctx, &key);
                        }
                        None => {
                            self.forget(&key);
                            ctx.resolve_all_about(NAME, &endpoint.uid.text(), || {
                                evidence(
                                    change.event,
                                    format!("SpiderEndpoint {key} no longer terminating with spiderpool's finalizer"),
                                )
                            });
                        }
                    }
                }
            }
            Stream::Pod if change.is_list_end() => {
                // A complete list of pods: an endpoint listed earlier may have lost its pod.
                let keys: Vec<String> = self.terminating.keys().cloned().collect();
                for key in keys {
                    self.check_endpoint(ctx, &key);
                }
            }
            Stream::Pod if change.removed().is_some() => {
                // The endpoint of a pod that just went may be past its grace already.
                self.check_endpoint(ctx, &change.event.name);
            }
            _ => {}
        }
    }

    fn on_time(&mut self, ctx: &mut Context<'_>, now_ms: i64) {
        for (_, key) in self.wake.take_due(now_ms) {
            self.check_endpoint(ctx, &key);
        }
    }

    fn has_due(&self, now_ms: i64) -> bool {
        self.wake.any_due(now_ms)
    }

    state_is_self!();
}

fn holds_spiderpool_finalizer(record: &ObjectRecord) -> bool {
    record
        .finalizer_where(|f| f == SPIDERPOOL_FINALIZER)
        .is_some()
}

impl IpStuckTerminating {
    fn forget(&mut self, key: &str) {
        self.terminating.remove(key);
        self.wake.cancel(key);
    }

    /// Checks the endpoint `key` if its grace has ended.
    fn check_endpoint(&mut self, ctx: &mut Context<'_>, key: &str) {
        if let Some(due) = self
            .terminating
            .get(key)
            .copied()
            .filter(|d| *d < ctx.now_ms)
        {
            self.check_endpoint_at(ctx, key, due);
        }
    }

    /// Fires for the endpoint `key` if it is terminating past its grace and its pod is gone.
    fn check_endpoint_at(&self, ctx: &mut Context<'_>, key: &str, due: i64) {
        let Some(endpoint) = ctx.state.get(Stream::SpiderEndpoint, key) else {
            return;
        };
        let Part::SpiderEndpoint(info) = endpoint.part() else {
            return;
        };
        let Some((index, finalizer)) = endpoint.finalizer_where(|f| f == SPIDERPOOL_FINALIZER)
        else {
            return;
        };
        if endpoint.deletion_ms().is_none() {
            return;
        }
        let uid = (!info.pod_uid.is_empty()).then_some(info.pod_uid.as_str());
        let Some(gone) = ctx.state.owner_gone_since(key, uid) else {
            return;
        };
        let requested = endpoint.deletion_requested().unwrap_or(&endpoint.last);
        let mut proof = vec![
            evidence(gone, format!("Pod {key} is gone ({})", gone.event_type)),
            evidence(
                requested,
                format!(
                    "SpiderEndpoint {key} marked for deletion at {}; finalizer {finalizer} keeps it",
                    time_text(endpoint.deletion_ms())
                ),
            ),
        ];
        if endpoint.last.rv != requested.rv {
            proof.push(evidence(
                &endpoint.last,
                format!("SpiderEndpoint {key} still terminating"),
            ));
        }
        let addresses: Vec<&str> = info.addresses.iter().map(|a| a.ipv4.as_str()).collect();
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        let finding = Finding {
            rule: NAME,
            severity: Severity::Critical,
            subject_kind: "SpiderEndpoint",
            subject_name: key.to_owned(),
            subject_uid: endpoint.uid.to_string(),
            scope: None,
            subnet: info.addresses.first().map(|a| a.ipv4_pool.clone()),
            namespace: super::owner_namespace(key),
            summary: format!(
                "SpiderEndpoint {key} ({}) has been terminating for more than {} and its pod is gone: spiderpool did not release it",
                addresses.join(", "),
                duration_text(ctx.config.owner_grace_ms)
            ),
            fix: Some(format!(
                "Check spiderpool-controller's logs; once the addresses are free in their pool, remove the finalizer: {}",
                remove_finalizer_command("spiderendpoints.spiderpool.spidernet.io", key, &endpoint.resource_version(), index, finalizer)
            )),
            cleanup: Some(Cleanup {
                action: CleanupAction::RemoveFinalizer,
                target_stream: Stream::SpiderEndpoint,
                target_name: name.to_owned(),
                target_namespace: Some(namespace.to_owned()),
                target_uid: endpoint.uid.to_string(),
                resource_version: endpoint.resource_version().to_string(),
                finalizer: finalizer.to_owned(),
                pool: String::new(),
                address: None,
            }),
            evidence: proof,
        };
        // Stuck since its grace ended or its pod went, whichever came last.
        let at = due.max(gone.time_ms().unwrap_or(due));
        ctx.fire_at(finding, at.min(ctx.now_ms));
    }
}

/// Fires or resolves the kube-ovn part for the IP `name` after `cause`.
fn check_ip(ctx: &mut Context<'_>, name: &str, cause: &EventRef) {
    if let Some(ip) = ctx.state.get(Stream::Ip, name) {
        check_ip_record(ctx, name, ip, cause);
    }
}

/// [`check_ip`] of the live IP `ip`, named `name`.
fn check_ip_record(ctx: &mut Context<'_>, name: &str, ip: &ObjectRecord, cause: &EventRef) {
    let Part::Ip(spec) = ip.part() else {
        return;
    };
    let stuck = ip.is_terminating()
        && ip.kube_ovn_finalizer().is_some()
        && !spec.subnet().is_empty()
        && ctx.state.pool_known_gone(Stream::Subnet, spec.subnet());
    let firing = ctx.firing_about(NAME, &ip.uid.text());
    if stuck && firing.is_empty() {
        let finding = ip_finding(ctx, ip, name, spec.subnet());
        ctx.fire(finding);
    } else if !stuck {
        for alert in firing {
            let what = if ip.kube_ovn_finalizer().is_none() {
                format!("IP {name} no longer has kube-ovn's finalizer")
            } else {
                format!("Subnet {} exists again", spec.subnet())
            };
            ctx.resolve(&alert.alert_id, evidence(cause, what));
        }
    }
}

fn ip_finding(ctx: &Context<'_>, ip: &ObjectRecord, name: &str, subnet: &str) -> Finding {
    let (index, finalizer) = ip.kube_ovn_finalizer().unwrap_or((0, ""));
    let mut proof = Vec::new();
    if let Some(deleted) = ctx.state.pool_deletion(Stream::Subnet, subnet) {
        proof.push(evidence(deleted, format!("Subnet {subnet} deleted")));
    }
    let requested = ip.deletion_requested().unwrap_or(&ip.last);
    proof.push(evidence(
        requested,
        format!(
            "IP {name} marked for deletion at {}; finalizer {finalizer} keeps it",
            time_text(ip.deletion_ms())
        ),
    ));
    if ip.last.rv != requested.rv {
        proof.push(evidence(&ip.last, format!("IP {name} still terminating")));
    }
    Finding {
        rule: NAME,
        severity: Severity::Critical,
        subject_kind: "IP",
        subject_name: name.to_owned(),
        subject_uid: ip.uid.to_string(),
        scope: Some(subnet.to_owned()),
        subnet: Some(subnet.to_owned()),
        namespace: super::object_namespace(name, ip),
        summary: format!(
            "IP {name}{} is terminating but its subnet {subnet} is gone: kube-ovn can never remove finalizer {finalizer}",
            describe_ip(ip)
        ),
        fix: Some(remove_finalizer_command("ip", name, &ip.resource_version(), index, finalizer)),
        cleanup: Some(Cleanup {
            action: CleanupAction::RemoveFinalizer,
            target_stream: Stream::Ip,
            target_name: name.to_owned(),
            target_namespace: None,
            target_uid: ip.uid.to_string(),
            resource_version: ip.resource_version().to_string(),
            finalizer: finalizer.to_owned(),
            pool: subnet.to_owned(),
            address: None,
        }),
        evidence: proof,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{t, transitions, MIN};
    use super::NAME;
    use ipaudit_schemas::builders::EventBuilder;
    use ipaudit_schemas::{EventType, Stream};

    fn endpoint() -> EventBuilder {
        EventBuilder::spider_endpoint("default", "api", "p1")
            .endpoint_ip("172.18.40.10/16", "pool-a")
    }

    #[test]
    fn a_spider_endpoint_terminating_past_the_grace_without_its_pod_is_stuck() {
        let got = transitions(vec![
            EventBuilder::pod("default", "api")
                .uid("p1")
                .rv(1)
                .at(0)
                .added(),
            endpoint().rv(2).at(1).added(),
            EventBuilder::pod("default", "api")
                .uid("p1")
                .rv(3)
                .at(MIN)
                .deleted(),
            endpoint().deleting(MIN).rv(4).at(MIN).modified(),
            EventBuilder::pod("default", "x").rv(5).at(12 * MIN).added(),
            endpoint()
                .deleting(MIN)
                .finalizers(&[])
                .rv(6)
                .at(13 * MIN)
                .deleted(),
        ]);
        assert_eq!(
            got,
            [
                t(NAME, "firing", "default/api"),
                t(NAME, "resolved", "default/api")
            ]
        );
    }

    #[test]
    fn a_stuck_endpoint_is_found_whichever_list_comes_first() {
        for pods_listed_first in [true, false] {
            let mut pods_end = EventBuilder::marker(Stream::Pod, EventType::SyncEnd, 0);
            pods_end.observed_at_ms = Some(20 * MIN);
            let endpoint = endpoint().deleting(0).rv(5).at(MIN).added();
            let mut events = vec![endpoint];
            pods_end.resource_version_num = Some(if pods_listed_first { 3 } else { 20 });
            pods_end.resource_version = pods_end.resource_version_num.unwrap_or(0).to_string();
            if pods_listed_first {
                events.insert(0, pods_end);
            } else {
                events.push(pods_end);
            }
            events.push(
                EventBuilder::pod("default", "x")
                    .rv(30)
                    .at(30 * MIN)
                    .added(),
            );
            assert_eq!(
                transitions(events),
                [t(NAME, "firing", "default/api")],
                "pods listed first: {pods_listed_first}"
            );
        }
    }

    #[test]
    fn a_spider_endpoint_whose_pod_lives_or_that_is_released_in_time_is_not_stuck() {
        let got = transitions(vec![
            EventBuilder::pod("default", "api")
                .uid("p1")
                .rv(1)
                .at(0)
                .added(),
            endpoint().rv(2).at(1).added(),
            endpoint().deleting(MIN).rv(3).at(MIN).modified(),
            EventBuilder::pod("default", "x").rv(4).at(12 * MIN).added(),
        ]);
        assert!(got.is_empty(), "the pod is still there: {got:?}");
    }
}
