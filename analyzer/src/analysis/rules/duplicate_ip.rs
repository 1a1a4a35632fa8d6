//! `duplicate-ip`: one address held by two distinct live owners at once within one scope:
//! one kube-ovn subnet (two IP objects), one whereabouts pool, one spiderpool pool (its
//! entries and endpoints), or one network of pods' network-status (two live pods showing
//! the address on the same network); in Calico, cluster-wide: two live pods on its network
//! with one address in status.podIPs, or two blocks allocating it to two pods; in Cilium,
//! cluster-wide: two CiliumEndpoints, or the used addresses of two CiliumNodes, with one
//! address for two pods. The same address in two subnets, VPCs or networks is
//! not a duplicate. A terminating pod's network-status does not count: its CNI may have
//! released the address already. Resolved when fewer than two owners hold it.

use std::collections::BTreeMap;

use ipaudit_schemas::{Severity, Stream};
use rustc_hash::FxHashSet as HashSet;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use super::{evidence, Change, Context, Rule};
use crate::analysis::alerts::Finding;
use crate::analysis::state::holdings;
use crate::analysis::state::{ClusterState, EventRef, RecordKey};

const NAME: &str = "duplicate-ip";

/// Rule 6.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct DuplicateIp {
    /// Firing duplicates: address -> scope -> alert id.
    firing: BTreeMap<String, BTreeMap<String, String>>,
}

impl Rule for DuplicateIp {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>) {
        if change.is_list_end() || change.stream() == Stream::Subnet {
            return;
        }
        let termination_changed =
            change.before.map(|b| b.is_terminating()) != change.after.map(|a| a.is_terminating());
        if !change.reindexed && !termination_changed && change.after.is_some() {
            return;
        }
        let mut addresses: SmallVec<[&str; 4]> = SmallVec::new();
        let held = || change.held_before().iter().chain(change.held_after());
        if change.held_before().len() + change.held_after().len() <= 8 {
            for holding in held() {
                if !addresses.contains(&holding.address) {
                    addresses.push(holding.address);
                }
            }
        } else {
            // A pool's change lists thousands of addresses: dedupe them by a set.
            let mut seen: HashSet<&str> = HashSet::default();
            for holding in held() {
                if seen.insert(holding.address) {
                    addresses.push(holding.address);
                }
            }
        }
        for address in addresses {
            // The common case: one holder, nothing firing: no duplicate to find or heal.
            if ctx.state.holder_count(address) > 1 || self.firing.contains_key(address) {
                self.evaluate(ctx, address, change.event);
            }
        }
    }

    state_is_self!();
}

/// Who holds `address`, per scope: owner -> the records or pods that say so.
type Owners = BTreeMap<String, BTreeMap<String, Vec<RecordKey>>>;

fn owners_by_scope(state: &ClusterState, address: &str) -> Owners {
    let mut scopes = Owners::new();
    for (key, record) in state.records_holding(address) {
        if key.0 == Stream::Pod && (!record.is_live_pod() || record.is_terminating()) {
            continue;
        }
        for holding in holdings::holdings(&key.1, record) {
            if holding.address == address {
                scopes
                    .entry(holding.scope.to_string())
                    .or_default()
                    .entry(holding.owner.into_owned())
                    .or_default()
                    .push(key.clone());
            }
        }
    }
    scopes
}

impl DuplicateIp {
    fn evaluate(&mut self, ctx: &mut Context<'_>, address: &str, cause: &EventRef) {
        let scopes = owners_by_scope(ctx.state, address);
        for (scope, owners) in &scopes {
            let firing = self
                .firing
                .get(address)
                .is_some_and(|f| f.contains_key(scope));
            if owners.len() < 2 || firing {
                continue;
            }
            let (what, place) = scope.split_once('/').unwrap_or(("pool", scope.as_str()));
            // Calico's and Cilium's address spaces are cluster-wide, not one pool.
            let on = match scope.as_str() {
                "calico" => "in Calico's IPAM".to_owned(),
                "cilium" => "in Cilium's IPAM".to_owned(),
                _ => {
                    let what = match what {
                        "network" | "subnet" => what,
                        _ => "pool",
                    };
                    format!("on {what} {place}")
                }
            };
            let names: Vec<&str> = owners.keys().map(String::as_str).collect();
            let namespace = names.iter().find_map(|owner| super::owner_namespace(owner));
            let mut proof = Vec::new();
            for (owner, records) in owners {
                for record in records {
                    if let Some(r) = ctx.state.get(record.0, &record.1) {
                        let who = if record.0 == Stream::Pod {
                            format!("Pod {owner} shows {address} {on}")
                        } else {
                            format!(
                                "{} {} holds {address} for {owner}",
                                record.0.kind(),
                                record.1
                            )
                        };
                        proof.push(evidence(&r.last, who));
                    }
                }
            }
            let subject_uid = format!("{scope}/{address}");
            let id = ctx.alert_id(NAME, &subject_uid, None);
            ctx.fire(Finding {
                rule: NAME,
                severity: Severity::Critical,
                subject_kind: "Address",
                subject_name: address.to_owned(),
                subject_uid,
                scope: None,
                subnet: Some(place.to_owned()),
                namespace,
                summary: format!(
                    "{address} is held by {} owners at once {on}: {}",
                    names.len(),
                    names.join(", ")
                ),
                fix: Some(format!(
                    "Delete the pod that got {address} last so that it is given a free address; then check the IPAM's records of {address}"
                )),
                cleanup: None,
                evidence: proof,
            });
            self.firing
                .entry(address.to_owned())
                .or_default()
                .insert(scope.clone(), id);
        }
        let Some(firing) = self.firing.get_mut(address) else {
            return;
        };
        let healed: Vec<String> = firing
            .keys()
            .filter(|scope| scopes.get(*scope).is_none_or(|o| o.len() < 2))
            .cloned()
            .collect();
        for scope in healed {
            if let Some(id) = firing.remove(&scope) {
                let what = format!("{address} has at most one owner on {scope} again");
                ctx.resolve(&id, evidence(cause, what));
            }
        }
        if firing.is_empty() {
            self.firing.remove(address);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{t, transitions};
    use super::NAME;
    use ipaudit_schemas::builders::EventBuilder;

    #[test]
    fn two_live_pods_showing_one_address_on_one_network_are_a_duplicate_until_one_goes() {
        let got = transitions(vec![
            EventBuilder::pod("default", "web-2")
                .network("default/net", "10.0.0.47")
                .rv(1)
                .added(),
            EventBuilder::pod("default", "web-3")
                .network("default/net", "10.0.0.47")
                .rv(2)
                .added(),
            EventBuilder::pod("default", "web-3")
                .network("default/net", "10.0.0.47")
                .rv(3)
                .deleted(),
        ]);
        assert_eq!(
            got,
            [
                t(NAME, "firing", "10.0.0.47"),
                t(NAME, "resolved", "10.0.0.47")
            ]
        );
    }

    #[test]
    fn the_same_address_on_two_networks_or_on_a_terminating_pod_is_no_duplicate() {
        let got = transitions(vec![
            EventBuilder::pod("default", "a")
                .network("default/net-1", "10.0.0.5")
                .rv(1)
                .added(),
            EventBuilder::pod("default", "b")
                .network("default/net-2", "10.0.0.5")
                .rv(2)
                .added(),
            EventBuilder::pod("default", "c")
                .network("default/net-1", "10.0.0.6")
                .deleting(1)
                .rv(3)
                .added(),
            EventBuilder::pod("default", "d")
                .network("default/net-1", "10.0.0.6")
                .rv(4)
                .added(),
        ]);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn one_address_in_two_vpcs_on_the_default_network_is_no_duplicate() {
        let ip = |name: &str, pod: &str, ns: &str, subnet: &str| {
            EventBuilder::ip(name, subnet).ip_of(ns, pod, "10.0.1.5", "")
        };
        let on_default = |ns: &str, name: &str| {
            let mut pod = EventBuilder::pod(ns, name)
                .network("kube-ovn", "10.0.1.5")
                .added();
            if let Some(ipaudit_schemas::KindPart::Pod(info)) = pod.part.as_mut() {
                info.network_status[0].default = true;
            }
            pod
        };
        let mut events = vec![
            ip("a.ns1", "a", "ns1", "vpc1-subnet").rv(1).added(),
            ip("b.ns2", "b", "ns2", "vpc2-subnet").rv(2).added(),
        ];
        for (i, mut pod) in [on_default("ns1", "a"), on_default("ns2", "b")]
            .into_iter()
            .enumerate()
        {
            pod.resource_version = (3 + i).to_string();
            pod.resource_version_num = Some(3 + i as i64);
            events.push(pod);
        }
        let got = transitions(events);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn two_kube_ovn_ips_with_one_address_in_one_subnet_are_a_duplicate() {
        let ip = |name: &str, pod: &str, subnet: &str| {
            EventBuilder::ip(name, subnet).ip_of("ns", pod, "10.16.0.9", "")
        };
        let got = transitions(vec![
            ip("a.ns", "a", "s1").rv(1).added(),
            ip("b.ns", "b", "s2").rv(2).added(),
            ip("c.ns", "c", "s1").rv(3).added(),
        ]);
        assert_eq!(got, [t(NAME, "firing", "10.16.0.9")]);
    }

    #[test]
    fn two_live_calico_pods_with_one_address_are_a_duplicate_but_a_pod_and_its_own_block_are_not() {
        let got = transitions(vec![
            EventBuilder::pod("default", "web-0")
                .on_calico("c1", "10.244.1.1")
                .rv(1)
                .added(),
            EventBuilder::calico_block("10.244.1.0/26", "node-a")
                .calico_allocation(1, "default/web-0", "k8s-pod-network.c1")
                .rv(2)
                .added(),
            // calico#12257: the address released and given to a second pod while the first runs.
            EventBuilder::calico_block("10.244.1.0/26", "node-a")
                .calico_allocation(1, "default/web-9", "k8s-pod-network.c9")
                .rv(3)
                .modified(),
            EventBuilder::pod("default", "web-9")
                .on_calico("c9", "10.244.1.1")
                .rv(4)
                .added(),
        ]);
        let mine: Vec<_> = got.into_iter().filter(|t| t.0 == NAME).collect();
        assert_eq!(mine, [t(NAME, "firing", "10.244.1.1")]);
    }

    #[test]
    fn two_cilium_endpoints_with_one_address_are_a_duplicate() {
        let got = transitions(vec![
            EventBuilder::cilium_endpoint("default", "web-0", &["10.0.1.9"])
                .rv(1)
                .added(),
            EventBuilder::cilium_node("node-a", &["10.0.1.0/24"])
                .cilium_used("10.0.1.9", "default/web-0")
                .rv(2)
                .added(),
            EventBuilder::cilium_endpoint("default", "web-1", &["10.0.1.9"])
                .rv(3)
                .added(),
        ]);
        assert_eq!(got, [t(NAME, "firing", "10.0.1.9")]);
    }
}
