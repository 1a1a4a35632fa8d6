//! `ip-released-while-pod-alive`: an allocation is removed — a whereabouts pool
//! allocation or reservation, a spiderpool pool entry, a Calico block's allocation (freed,
//! or put in cooldown) — while its pod still exists with the same uid, is not terminating
//! and has not finished (a Pending pod is alive); for Calico, while the pod still shows
//! the address in status.podIPs. The whereabouts reconciler race (#162) and Calico's
//! garbage collector misreading a pod's node (calico#12257): the next pod gets the same
//! address. Resolved when the pod is gone.

use ipaudit_schemas::{Severity, Stream};

use super::{evidence, gone_evidence, Change, Context, Rule};
use crate::analysis::alerts::Finding;
use crate::analysis::state::holdings;

const NAME: &str = "ip-released-while-pod-alive";

/// Rule 7 (no state of its own: the state says whose an allocation was).
#[derive(Debug, Default)]
pub struct IpReleasedWhilePodAlive;

impl Rule for IpReleasedWhilePodAlive {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>) {
        let stream = change.stream();
        if stream == Stream::Pod {
            if let Some(removed) = change.removed() {
                ctx.resolve_all_about(NAME, &removed.uid.text(), || {
                    gone_evidence(change.event, &format!("Pod {}", change.event.name))
                });
            }
            return;
        }
        let calico = stream.canonical() == Stream::CalicoIpamBlock;
        if !calico
            && !matches!(
                stream,
                Stream::IpPool | Stream::OverlappingRangeIpReservation | Stream::SpiderIpPool
            )
        {
            return;
        }
        resolve_reallocated(ctx, change);
        if change.released.is_empty() {
            return;
        }
        if holdings::is_pool(stream) && change.removed().is_some() {
            // The pool itself went (subnet-deleted-before-ip), or a pool of another uid took
            // its name (a relist may show the new pool before the old one's deletion): its
            // allocations were not released one by one.
            return;
        }
        let kind = stream.kind();
        for holding in change.released {
            let Some(pod) = ctx.state.pod(&holding.owner) else {
                continue;
            };
            let Some(uid) = holding.owner_uid.as_deref() else {
                continue;
            };
            if pod.uid != uid || pod.is_terminating() || !pod.is_live_pod() {
                continue;
            }
            if calico && !still_uses_calico_address(ctx, change, &holding.owner, &holding.address) {
                continue;
            }
            let phase = pod.phase().unwrap_or("unknown");
            let pool = holding.place.clone();
            let mut proof = Vec::new();
            if let Some(before) = change.before {
                proof.push(evidence(
                    &before.last,
                    format!(
                        "{kind} {} allocates {} to {}",
                        change.event.name, holding.address, holding.owner
                    ),
                ));
            }
            proof.push(evidence(
                change.event,
                format!(
                    "{kind} {} releases {} of {}",
                    change.event.name, holding.address, holding.owner
                ),
            ));
            proof.push(evidence(
                &pod.last,
                format!(
                    "Pod {} (uid {uid}) is {phase}, not terminating",
                    holding.owner
                ),
            ));
            ctx.fire(Finding {
                rule: NAME,
                severity: Severity::Critical,
                subject_kind: "Pod",
                subject_name: holding.owner.clone(),
                subject_uid: uid.to_owned(),
                scope: Some(holding.address.clone()),
                subnet: Some(pool),
                namespace: super::owner_namespace(&holding.owner),
                summary: format!(
                    "{} was released from {kind} {} while pod {} still lives ({phase}): the address can be given to a second pod",
                    holding.address, change.event.name, holding.owner
                ),
                fix: Some(format!(
                    "Restart pod {} so that it gets an address its IPAM records, and check which other pod got {}",
                    holding.owner, holding.address
                )),
                cleanup: None,
                evidence: proof,
            });
        }
    }
}

/// Whether a pod whose Calico allocation went still shows the address, and no copy of the
/// block in Calico's other API group still allocates it to the pod (during a migration a
/// block is in both groups, and the old copy's deletion frees nothing).
fn still_uses_calico_address(
    ctx: &Context<'_>,
    change: &Change<'_>,
    owner: &str,
    address: &str,
) -> bool {
    let shows = ctx
        .state
        .pod(owner)
        .and_then(|pod| pod.part().pod())
        .is_some_and(|pod| pod.calico_ips().iter().any(|ip| ip == address));
    let still_allocated = crate::analysis::state::calico::BLOCK_STREAMS
        .into_iter()
        .filter(|stream| *stream != change.stream())
        .any(|stream| {
            ctx.state
                .holdings_of(&(stream, change.event.name.clone()))
                .iter()
                .any(|h| h.address == address && h.owner == owner)
        });
    shows && !still_allocated
}

/// A pod whose allocation was released and that got a new one from its IPAM (its sandbox
/// was re-created: CNI DEL, then ADD) holds an address its IPAM records again.
/// Only a pool allocation counts: whereabouts writes a reservation after the pool patch,
/// so a reservation appearing after a release is the old allocation's, late.
fn resolve_reallocated(ctx: &mut Context<'_>, change: &Change<'_>) {
    let (Some(key), true) = (change.record, change.reindexed) else {
        return;
    };
    if !holdings::is_pool(key.0) {
        return;
    }
    let state = ctx.state;
    let before = change.held_before();
    for holding in change.held_after() {
        if before.contains(holding) {
            continue;
        }
        let Some(pod) = state.pod(&holding.owner) else {
            continue;
        };
        if state.owner_uid(key, holding) != Some(&*pod.uid.text())
            || ctx.firing_about(NAME, &pod.uid.text()).is_empty()
        {
            continue;
        }
        let what = format!(
            "{} {} allocates {} to pod {} again",
            key.0.kind(),
            key.1,
            holding.address,
            holding.owner
        );
        ctx.resolve_all_about(NAME, &pod.uid.text(), || evidence(change.event, what));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{t, transitions};
    use super::NAME;
    use ipaudit_schemas::builders::EventBuilder;

    fn pool() -> EventBuilder {
        EventBuilder::ip_pool("kube-system", "10.0.0.0-24", "10.0.0.0/24")
    }

    #[test]
    fn an_allocation_removed_while_its_pending_pod_lives_is_reported_until_the_pod_goes() {
        let got = transitions(vec![
            EventBuilder::pod("default", "web-2")
                .uid("w2")
                .phase("Pending")
                .rv(1)
                .added(),
            pool()
                .allocation(47, "10.0.0.47", "default/web-2")
                .rv(2)
                .added(),
            pool().rv(3).modified(),
            EventBuilder::pod("default", "web-2")
                .uid("w2")
                .rv(4)
                .deleted(),
        ]);
        assert_eq!(
            got,
            [
                t(NAME, "firing", "default/web-2"),
                t(NAME, "resolved", "default/web-2")
            ]
        );
    }

    #[test]
    fn a_pod_allocated_again_after_its_sandbox_was_recreated_is_healed() {
        let got = transitions(vec![
            EventBuilder::pod("default", "a").uid("a1").rv(1).added(),
            pool().allocation(5, "10.0.0.5", "default/a").rv(2).added(),
            pool().rv(3).modified(),
            pool()
                .allocation(6, "10.0.0.6", "default/a")
                .rv(4)
                .modified(),
        ]);
        assert_eq!(
            got,
            [
                t(NAME, "firing", "default/a"),
                t(NAME, "resolved", "default/a")
            ]
        );
    }

    #[test]
    fn a_pool_recreated_under_its_name_releases_nothing() {
        let got = transitions(vec![
            EventBuilder::pod("default", "x").uid("x1").rv(1).added(),
            pool()
                .uid("p-old")
                .allocation(5, "10.0.0.5", "default/x")
                .rv(2)
                .added(),
            pool()
                .uid("p-new")
                .allocation(5, "10.0.0.5", "default/x")
                .rv(9)
                .added(),
        ]);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_release_after_the_pod_started_terminating_or_of_another_uid_is_healthy() {
        let got = transitions(vec![
            EventBuilder::pod("default", "a").uid("a1").rv(1).added(),
            pool().allocation(5, "10.0.0.5", "default/a").rv(2).added(),
            EventBuilder::pod("default", "a")
                .uid("a1")
                .deleting(3)
                .rv(3)
                .modified(),
            pool().rv(4).modified(),
            // A StatefulSet pod re-created under the same name: the old uid's allocation goes.
            EventBuilder::pod("default", "b").uid("b1").rv(5).added(),
            pool()
                .allocation(6, "10.0.0.6", "default/b")
                .rv(6)
                .modified(),
            EventBuilder::pod("default", "b").uid("b2").rv(7).added(),
            pool().rv(8).modified(),
        ]);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_calico_allocation_freed_while_its_pod_runs_with_the_address_is_reported() {
        let block = || EventBuilder::calico_block("10.244.1.0/26", "node-a");
        let pod = || {
            EventBuilder::pod("default", "web-0")
                .uid("w0")
                .on_calico("c1", "10.244.1.1")
        };
        let got = transitions(vec![
            pod().rv(1).added(),
            block()
                .calico_allocation(1, "default/web-0", "k8s-pod-network.c1")
                .rv(2)
                .added(),
            EventBuilder::calico_handle("k8s-pod-network.c1", &[("10.244.1.0/26", 1)])
                .rv(3)
                .added(),
            // Freed from the block while web-0 runs with it (calico#12257).
            block().rv(4).modified(),
        ]);
        assert_eq!(got, [t(NAME, "firing", "default/web-0")]);
        // A pod that no longer shows the address lost nothing that it uses.
        let moved = transitions(vec![
            pod().rv(1).added(),
            block()
                .calico_allocation(1, "default/web-0", "k8s-pod-network.c1")
                .rv(2)
                .added(),
            EventBuilder::pod("default", "web-0")
                .uid("w0")
                .on_calico("c1", "10.244.1.2")
                .rv(3)
                .modified(),
            block().rv(4).modified(),
        ]);
        assert!(moved.iter().all(|(rule, _, _)| rule != NAME), "{moved:?}");
    }
}
