//! The IPAM model every rule shares, read from the kind-specific part of a record: which
//! pools a record names, and which addresses it holds for which owner, in which scope.
//! Pure functions; [`super::ClusterState`] keeps the indexes built from them.
//!
//! A *pool* is a kube-ovn Subnet, a whereabouts IPPool or a SpiderIPPool. A *holding* is
//! one address one record holds on behalf of one owner (a pod, or a VM for kept KubeVirt
//! addresses). A *scope* is where two holders of one address are a conflict: one subnet,
//! one pool, one network of pods' network-status, Calico's address space (its blocks and
//! the pods on its network), Cilium's (its nodes' used addresses and its endpoints).

use std::borrow::Cow;

use ipaudit_schemas::{CalicoAllocation, Stream};

use super::part::{IpPart, Part};

use super::ObjectRecord;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// A pool, by its stream and name (`namespace/name` for whereabouts pools).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PoolRef {
    /// Subnet, IpPool or SpiderIpPool.
    pub stream: Stream,
    /// Its name.
    pub name: String,
}

impl PoolRef {
    /// The pool `name` of stream `stream`.
    pub fn new(stream: Stream, name: &str) -> Self {
        PoolRef {
            stream,
            name: name.to_owned(),
        }
    }
}

/// Whether the stream's objects are pools.
pub fn is_pool(stream: Stream) -> bool {
    matches!(
        stream,
        Stream::Subnet | Stream::IpPool | Stream::SpiderIpPool
    )
}

/// Where two holders of one address are a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope<'a> {
    /// One kube-ovn subnet.
    Subnet(&'a str),
    /// One whereabouts IPPool (`namespace/name`).
    IpPool(&'a str),
    /// whereabouts' reservations, cluster-wide.
    Reservations,
    /// One SpiderIPPool.
    SpiderPool(&'a str),
    /// One network of pods' network-status.
    Network(&'a str),
    /// Calico's blocks and the pods on its network, cluster-wide: blocks do not overlap, so
    /// an address is one pod's at a time.
    Calico,
    /// Cilium's nodes' used addresses and its endpoints, cluster-wide.
    Cilium,
}

impl Scope<'_> {
    /// The subnet, pool or network, for people (`""` for reservations).
    pub fn place(&self) -> &str {
        match self {
            Scope::Subnet(n) | Scope::IpPool(n) | Scope::SpiderPool(n) | Scope::Network(n) => n,
            Scope::Reservations | Scope::Calico | Scope::Cilium => "",
        }
    }
}

impl std::fmt::Display for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Subnet(n) => write!(f, "subnet/{n}"),
            Scope::IpPool(n) => write!(f, "ippool/{n}"),
            Scope::Reservations => f.write_str("whereabouts-reservation"),
            Scope::SpiderPool(n) => write!(f, "spiderippool/{n}"),
            Scope::Network(n) => write!(f, "network/{n}"),
            Scope::Calico => f.write_str("calico"),
            Scope::Cilium => f.write_str("cilium"),
        }
    }
}

/// One address held by one record for one owner, borrowed from the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding<'a> {
    /// The address, without prefix length.
    pub address: &'a str,
    /// Where another holder of the same address is a conflict.
    pub scope: Scope<'a>,
    /// `namespace/name` of the owner pod (a VM's name for kept KubeVirt addresses).
    pub owner: Cow<'a, str>,
    /// The owner's uid, when the record carries it (spiderpool); whereabouts and kube-ovn
    /// records do not.
    pub owner_uid: Option<&'a str>,
    /// Kept on purpose after its pod is gone (StatefulSet, VM), as the record itself says.
    pub kept: bool,
}

/// What one record holds: nearly always one or two addresses.
pub type Holdings<'a> = SmallVec<[Holding<'a>; 2]>;

/// The pools a record names, as (kind, name): a kube-ovn IP's subnet and attachment
/// subnets, a SpiderEndpoint's pools. (Pool entries live inside their pool.)
pub fn pool_names(part: &Part) -> SmallVec<[(Stream, &str); 2]> {
    let mut names: SmallVec<[(Stream, &str); 2]> = SmallVec::new();
    match part {
        Part::Ip(ip) => {
            for subnet in
                std::iter::once(ip.subnet()).chain(ip.attach_subnets().iter().map(String::as_str))
            {
                if !subnet.is_empty() {
                    names.push((Stream::Subnet, subnet));
                }
            }
        }
        Part::SpiderEndpoint(endpoint) => {
            for address in &endpoint.addresses {
                for pool in [&address.ipv4_pool, &address.ipv6_pool] {
                    if !pool.is_empty() && !names.iter().any(|(_, n)| *n == pool.as_str()) {
                        names.push((Stream::SpiderIpPool, pool.as_str()));
                    }
                }
            }
        }
        _ => {}
    }
    names
}

/// The pools a record names, owned.
pub fn pools_named(part: &Part) -> Vec<PoolRef> {
    pool_names(part)
        .into_iter()
        .map(|(stream, name)| PoolRef::new(stream, name))
        .collect()
}

/// Whether a kube-ovn IP belongs to a pod: not a node's, U2O's or multicast querier's
/// address, not reserved by hand, and naming a pod.
pub fn kube_ovn_ip_is_pod_owned(name: &str, ip: &IpPart) -> bool {
    let node_ip = name.starts_with("node-") && ip.pod_namespace().is_empty();
    let subnet_owned =
        name.starts_with("u2o-interconnection.") || name.starts_with("mcast-querier.");
    !(ip.reserved() || ip.pod().is_none() || node_ip || subnet_owned)
}

/// kube-ovn pod types whose addresses outlive their pods on purpose.
fn kube_ovn_kept(pod_type: &str) -> bool {
    matches!(pod_type, "StatefulSet" | "VirtualMachine")
}

/// spiderpool owner controller types whose addresses outlive their pods on purpose.
pub fn spiderpool_kept(owner_controller_type: &str) -> bool {
    matches!(
        owner_controller_type,
        "StatefulSet" | "VirtualMachineInstance"
    )
}

/// The addresses of a kube-ovn IP field (`10.16.0.9,fd00::9` when dual-stack).
fn addresses(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|a| !a.is_empty())
}

/// An address without its prefix length (`172.18.40.10/16` -> `172.18.40.10`).
fn bare(address: &str) -> &str {
    address.split('/').next().unwrap_or(address)
}

/// What a stored record holds; `key` is its name (`namespace/name` when namespaced).
pub fn holdings<'a>(key: &'a str, record: &'a ObjectRecord) -> Holdings<'a> {
    part_holdings(key, record.part())
}

/// What a part holds.
pub fn part_holdings<'a>(key: &'a str, part: &'a Part) -> Holdings<'a> {
    let mut held = Holdings::new();
    match part {
        Part::Ip(ip) => {
            if !kube_ovn_ip_is_pod_owned(key, ip) {
                return held;
            }
            let Some(owner) = ip.pod() else {
                return held;
            };
            let owner: Cow<'a, str> = Cow::Borrowed(owner);
            let kept = kube_ovn_kept(ip.pod_type());
            let primary = addresses(&ip.ip_address).map(|a| (ip.subnet(), a));
            let attached = ip
                .attach_subnets()
                .iter()
                .zip(ip.attach_ips())
                .flat_map(|(subnet, ips)| addresses(ips).map(move |a| (subnet.as_str(), a)));
            for (subnet, address) in primary.chain(attached) {
                if !subnet.is_empty() {
                    held.push(Holding {
                        address,
                        scope: Scope::Subnet(subnet),
                        owner: owner.clone(),
                        owner_uid: None,
                        kept,
                    });
                }
            }
        }
        Part::IpPool(pool) => {
            for a in &pool.allocations {
                if !a.address.is_empty() && !a.podref.is_empty() {
                    held.push(Holding {
                        address: &a.address,
                        scope: Scope::IpPool(key),
                        owner: Cow::Borrowed(&a.podref),
                        owner_uid: None,
                        kept: false,
                    });
                }
            }
        }
        Part::IpReservation(reservation) => {
            if !reservation.address.is_empty() && !reservation.podref.is_empty() {
                held.push(Holding {
                    address: &reservation.address,
                    scope: Scope::Reservations,
                    owner: Cow::Borrowed(&reservation.podref),
                    owner_uid: None,
                    kept: false,
                });
            }
        }
        Part::SpiderIpPool(pool) => {
            for a in &pool.allocations {
                if !a.address.is_empty() && !a.pod.is_empty() {
                    held.push(Holding {
                        address: &a.address,
                        scope: Scope::SpiderPool(key),
                        owner: Cow::Borrowed(&a.pod),
                        owner_uid: (!a.pod_uid.is_empty()).then_some(a.pod_uid.as_str()),
                        kept: false,
                    });
                }
            }
        }
        Part::SpiderEndpoint(endpoint) => {
            let kept = spiderpool_kept(&endpoint.owner_controller_type);
            let uid = (!endpoint.pod_uid.is_empty()).then_some(endpoint.pod_uid.as_str());
            for a in &endpoint.addresses {
                for (address, pool) in [(&a.ipv4, &a.ipv4_pool), (&a.ipv6, &a.ipv6_pool)] {
                    if !address.is_empty() && !pool.is_empty() {
                        held.push(Holding {
                            address: bare(address),
                            scope: Scope::SpiderPool(pool),
                            owner: Cow::Borrowed(key),
                            owner_uid: uid,
                            kept,
                        });
                    }
                }
            }
        }
        Part::CalicoBlock(block) if !block.deleted => {
            for (index, allocation) in block.allocations.iter().enumerate() {
                if let Some(owner) = block.owner(index) {
                    held.push(Holding {
                        address: &allocation.address,
                        scope: Scope::Calico,
                        owner: Cow::Borrowed(owner),
                        owner_uid: None,
                        kept: false,
                    });
                }
            }
        }
        Part::CiliumNode(node) => {
            for used in &node.used {
                if let Some(owner) = cilium_pod_owner(&used.owner) {
                    held.push(Holding {
                        address: &used.address,
                        scope: Scope::Cilium,
                        owner: Cow::Borrowed(owner),
                        owner_uid: None,
                        kept: false,
                    });
                }
            }
        }
        Part::CiliumEndpoint(endpoint) => {
            for address in &endpoint.addresses {
                held.push(Holding {
                    address: bare(address),
                    scope: Scope::Cilium,
                    owner: Cow::Borrowed(key),
                    owner_uid: None,
                    kept: false,
                });
            }
        }
        Part::Pod(pod) => {
            // A pod on Calico's network shows the addresses its blocks hold.
            for address in pod.calico_ips() {
                held.push(Holding {
                    address: bare(address),
                    scope: Scope::Calico,
                    owner: Cow::Borrowed(key),
                    owner_uid: None,
                    kept: false,
                });
            }
            // The default network's address is the primary CNI's (kube-ovn's IP records
            // hold it, in its subnet); its network name is the same in every VPC, so it
            // says nothing about duplicates.
            for network in pod.network_status().iter().filter(|n| !n.default) {
                for address in &network.ips {
                    held.push(Holding {
                        address: bare(address),
                        scope: Scope::Network(&network.name),
                        owner: Cow::Borrowed(key),
                        owner_uid: None,
                        kept: false,
                    });
                }
            }
        }
        Part::Subnet(_)
        | Part::Node
        | Part::CalicoBlock(_)
        | Part::CalicoHandle(_)
        | Part::CalicoAffinity(_)
        | Part::CalicoPool(_) => {}
    }
    held
}

/// The pod a Calico allocation is for, as `namespace/name`: none for an allocation cooling
/// down after its release, a tunnel or LoadBalancer address (they carry a `type`), or one
/// whose attribute names no pod.
pub fn calico_pod_owner(allocation: &CalicoAllocation) -> Option<String> {
    let for_pod = allocation.released_at_ms.is_none()
        && allocation.r#type.is_empty()
        && !allocation.address.is_empty()
        && !allocation.namespace.is_empty()
        && !allocation.pod.is_empty();
    for_pod.then(|| format!("{}/{}", allocation.namespace, allocation.pod))
}

/// The pod a CiliumNode's used address is for: its owner `namespace/pod` without the
/// ` [restored]` an agent restart appends; none for the agent's own addresses (`router`,
/// `health`, `ingress`) or an endpoint id.
pub fn cilium_pod_owner(owner: &str) -> Option<&str> {
    let owner = owner.strip_suffix(" [restored]").unwrap_or(owner).trim();
    let (namespace, pod) = owner.split_once('/')?;
    (!namespace.is_empty() && !pod.is_empty()).then_some(owner)
}

/// Whether a holding is an IPAM record's (as opposed to what a pod's network-status shows).
pub fn is_record_holding(stream: Stream) -> bool {
    stream != Stream::Pod
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::builders::EventBuilder;

    fn part(event: ipaudit_schemas::WatchEvent) -> Part {
        Part::from(event.part.expect("a part"))
    }

    #[test]
    fn a_kube_ovn_ip_holds_its_primary_and_attachment_addresses_for_its_pod() {
        let mut event = EventBuilder::ip("web-0.default", "ovn-default")
            .ip_of("default", "web-0", "10.16.0.9,fd00::9", "")
            .attach_subnets(&["net1"])
            .added();
        if let Some(ipaudit_schemas::KindPart::Ip(ip)) = event.part.as_mut() {
            ip.attach_ips = vec!["192.168.1.5".into()];
        }
        let part = part(event);
        let held: Vec<(String, &str)> = part_holdings("web-0.default", &part)
            .into_iter()
            .map(|h| (h.scope.to_string(), h.address))
            .collect();
        assert_eq!(
            held,
            [
                ("subnet/ovn-default".into(), "10.16.0.9"),
                ("subnet/ovn-default".into(), "fd00::9"),
                ("subnet/net1".into(), "192.168.1.5"),
            ]
        );
    }

    #[test]
    fn node_u2o_multicast_and_reserved_ips_are_not_pod_owned() {
        let ip = |name: &str, ns: &str, pod: &str| {
            part(
                EventBuilder::ip(name, "s")
                    .ip_of(ns, pod, "10.0.0.2", "")
                    .added(),
            )
        };
        assert!(
            part_holdings("node-worker-1", &ip("node-worker-1", "", "node-worker-1")).is_empty()
        );
        assert!(part_holdings(
            "u2o-interconnection.vpc.s",
            &ip("u2o-interconnection.vpc.s", "", "x")
        )
        .is_empty());
        assert!(part_holdings("mcast-querier.s", &ip("mcast-querier.s", "", "x")).is_empty());
        let reserved = Part::new(
            &mut EventBuilder::ip("a.ns", "s")
                .ip_of("ns", "a", "10.0.0.2", "")
                .added()
                .part
                .expect("a part"),
            true,
            None,
        );
        assert!(part_holdings("a.ns", &reserved).is_empty());
        assert!(part_holdings("a.ns", &ip("a.ns", "ns", "")).is_empty());
        assert_eq!(part_holdings("a.ns", &ip("a.ns", "ns", "a")).len(), 1);
    }

    #[test]
    fn spiderpool_endpoints_hold_bare_addresses_and_name_their_pools() {
        let endpoint = part(
            EventBuilder::spider_endpoint("default", "web-0", "p1")
                .endpoint_ip("172.18.40.10/16", "pool-a")
                .owner_controller("StatefulSet")
                .added(),
        );
        let held = part_holdings("default/web-0", &endpoint);
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].address, "172.18.40.10");
        assert_eq!(held[0].scope, Scope::SpiderPool("pool-a"));
        assert_eq!(held[0].owner_uid, Some("p1"));
        assert!(held[0].kept);
        assert_eq!(
            pools_named(&endpoint),
            [PoolRef::new(Stream::SpiderIpPool, "pool-a")]
        );
    }
}
