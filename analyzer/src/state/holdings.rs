//! The IPAM model every rule shares, read from the kind-specific part of a record: which
//! pools a record names, and which addresses it holds for which owner, in which scope.
//! Pure functions; [`super::ClusterState`] keeps the indexes built from them.
//!
//! A *pool* is a kube-ovn Subnet, a whereabouts IPPool or a SpiderIPPool. A *holding* is
//! one address one record holds on behalf of one owner (a pod, or a VM for kept KubeVirt
//! addresses). A *scope* is where two holders of one address are a conflict: one subnet,
//! one pool, one network of pods' network-status.

use ipaudit_schemas::{IpInfo, KindPart, Stream};
use serde::{Deserialize, Serialize};

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

/// One address held by one record for one owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    /// The address, without prefix length.
    pub address: String,
    /// Where another holder of the same address is a conflict.
    pub scope: String,
    /// `namespace/name` of the owner pod (a VM's name for kept KubeVirt addresses).
    pub owner: String,
    /// The owner's uid, when the record carries it (spiderpool); whereabouts and kube-ovn
    /// records do not.
    pub owner_uid: Option<String>,
    /// Kept on purpose after its pod is gone (StatefulSet, VM), as the record itself says.
    pub kept: bool,
}

/// The pools a record names: a kube-ovn IP's subnet and attachment subnets, a
/// SpiderEndpoint's pools. (Pool entries live inside their pool and name no other.)
pub fn pools_named(part: &KindPart) -> Vec<PoolRef> {
    match part {
        KindPart::Ip(ip) => std::iter::once(ip.subnet.as_str())
            .chain(ip.attach_subnets.iter().map(String::as_str))
            .filter(|s| !s.is_empty())
            .map(|s| PoolRef::new(Stream::Subnet, s))
            .collect(),
        KindPart::SpiderEndpoint(endpoint) => {
            let mut pools: Vec<PoolRef> = endpoint
                .addresses
                .iter()
                .flat_map(|a| [a.ipv4_pool.as_str(), a.ipv6_pool.as_str()])
                .filter(|p| !p.is_empty())
                .map(|p| PoolRef::new(Stream::SpiderIpPool, p))
                .collect();
            pools.sort();
            pools.dedup();
            pools
        }
        _ => Vec::new(),
    }
}

/// Whether a kube-ovn IP belongs to a pod: not a node's, U2O's or multicast querier's
/// address, not reserved by hand, and naming a pod.
pub fn kube_ovn_ip_is_pod_owned(name: &str, ip: &IpInfo, reserved: bool) -> bool {
    let node_ip = name.starts_with("node-") && ip.pod_namespace.is_empty();
    let subnet_owned =
        name.starts_with("u2o-interconnection.") || name.starts_with("mcast-querier.");
    !(reserved || ip.pod_name.is_empty() || node_ip || subnet_owned)
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

/// What a record holds. `key` is the record's name (`namespace/name` when namespaced),
/// `reserved` whether it carries kube-ovn's `ip_reserved: "true"` label.
pub fn holdings(key: &str, part: &KindPart, reserved: bool) -> Vec<Holding> {
    match part {
        KindPart::Ip(ip) => {
            if !kube_ovn_ip_is_pod_owned(key, ip, reserved) {
                return Vec::new();
            }
            let owner = format!("{}/{}", ip.pod_namespace, ip.pod_name);
            let kept = kube_ovn_kept(&ip.pod_type);
            let primary = addresses(&ip.ip_address).map(|a| (ip.subnet.as_str(), a));
            let attached = ip
                .attach_subnets
                .iter()
                .zip(&ip.attach_ips)
                .flat_map(|(subnet, ips)| addresses(ips).map(move |a| (subnet.as_str(), a)));
            primary
                .chain(attached)
                .filter(|(subnet, _)| !subnet.is_empty())
                .map(|(subnet, address)| Holding {
                    address: address.to_owned(),
                    scope: format!("subnet/{subnet}"),
                    owner: owner.clone(),
                    owner_uid: None,
                    kept,
                })
                .collect()
        }
        KindPart::IpPool(pool) => pool
            .allocations
            .iter()
            .filter(|a| !a.address.is_empty() && !a.podref.is_empty())
            .map(|a| Holding {
                address: a.address.clone(),
                scope: format!("ippool/{key}"),
                owner: a.podref.clone(),
                owner_uid: None,
                kept: false,
            })
            .collect(),
        KindPart::IpReservation(reservation)
            if !reservation.address.is_empty() && !reservation.podref.is_empty() =>
        {
            vec![Holding {
                address: reservation.address.clone(),
                scope: "whereabouts-reservation".to_owned(),
                owner: reservation.podref.clone(),
                owner_uid: None,
                kept: false,
            }]
        }
        KindPart::SpiderIpPool(pool) => pool
            .allocations
            .iter()
            .filter(|a| !a.address.is_empty() && !a.pod.is_empty())
            .map(|a| Holding {
                address: a.address.clone(),
                scope: format!("spiderippool/{key}"),
                owner: a.pod.clone(),
                owner_uid: (!a.pod_uid.is_empty()).then(|| a.pod_uid.clone()),
                kept: false,
            })
            .collect(),
        KindPart::SpiderEndpoint(endpoint) => {
            let kept = spiderpool_kept(&endpoint.owner_controller_type);
            endpoint
                .addresses
                .iter()
                .flat_map(|a| [(&a.ipv4, &a.ipv4_pool), (&a.ipv6, &a.ipv6_pool)])
                .filter(|(address, pool)| !address.is_empty() && !pool.is_empty())
                .map(|(address, pool)| Holding {
                    address: bare(address).to_owned(),
                    scope: format!("spiderippool/{pool}"),
                    owner: key.to_owned(),
                    owner_uid: (!endpoint.pod_uid.is_empty()).then(|| endpoint.pod_uid.clone()),
                    kept,
                })
                .collect()
        }
        KindPart::Pod(pod) => pod
            .network_status
            .iter()
            .flat_map(|network| {
                network.ips.iter().map(move |address| Holding {
                    address: bare(address).to_owned(),
                    scope: format!("network/{}", network.name),
                    owner: key.to_owned(),
                    owner_uid: None,
                    kept: false,
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether a holding is an IPAM record's (as opposed to what a pod's network-status shows).
pub fn is_record_holding(stream: Stream) -> bool {
    stream != Stream::Pod
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::builders::EventBuilder;

    fn part(event: ipaudit_schemas::WatchEvent) -> KindPart {
        event.part.expect("a part")
    }

    #[test]
    fn a_kube_ovn_ip_holds_its_primary_and_attachment_addresses_for_its_pod() {
        let mut event = EventBuilder::ip("web-0.default", "ovn-default")
            .ip_of("default", "web-0", "10.16.0.9,fd00::9", "")
            .attach_subnets(&["net1"])
            .added();
        if let Some(KindPart::Ip(ip)) = event.part.as_mut() {
            ip.attach_ips = vec!["192.168.1.5".into()];
        }
        let held: Vec<(String, String)> = holdings("web-0.default", &part(event), false)
            .into_iter()
            .map(|h| (h.scope, h.address))
            .collect();
        assert_eq!(
            held,
            [
                ("subnet/ovn-default".into(), "10.16.0.9".into()),
                ("subnet/ovn-default".into(), "fd00::9".into()),
                ("subnet/net1".into(), "192.168.1.5".into()),
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
        assert!(holdings(
            "node-worker-1",
            &ip("node-worker-1", "", "node-worker-1"),
            false
        )
        .is_empty());
        assert!(holdings(
            "u2o-interconnection.vpc.s",
            &ip("u2o-interconnection.vpc.s", "", "x"),
            false
        )
        .is_empty());
        assert!(holdings("mcast-querier.s", &ip("mcast-querier.s", "", "x"), false).is_empty());
        assert!(holdings("a.ns", &ip("a.ns", "ns", "a"), true).is_empty());
        assert!(holdings("a.ns", &ip("a.ns", "ns", ""), false).is_empty());
        assert_eq!(holdings("a.ns", &ip("a.ns", "ns", "a"), false).len(), 1);
    }

    #[test]
    fn spiderpool_endpoints_hold_bare_addresses_and_name_their_pools() {
        let endpoint = part(
            EventBuilder::spider_endpoint("default", "web-0", "p1")
                .endpoint_ip("172.18.40.10/16", "pool-a")
                .owner_controller("StatefulSet")
                .added(),
        );
        let held = holdings("default/web-0", &endpoint, false);
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].address, "172.18.40.10");
        assert_eq!(held[0].scope, "spiderippool/pool-a");
        assert_eq!(held[0].owner_uid.as_deref(), Some("p1"));
        assert!(held[0].kept);
        assert_eq!(
            pools_named(&endpoint),
            [PoolRef::new(Stream::SpiderIpPool, "pool-a")]
        );
    }
}
