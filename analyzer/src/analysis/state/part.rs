//! What a record keeps of its kind's part: what the rules read, nothing else. kube-ovn
//! IPs and pods, the most numerous records, keep a compact [`IpPart`] / [`PodPart`]
//! (short strings inline, no empty fields for what no rule reads) instead of the decoded
//! `IpInfo` (a box of eleven strings) / `PodInfo`; the other kinds keep their decoded part. Saved in the decoded form, so
//! a checkpoint reads the same either way.

use std::hash::BuildHasher;
use std::sync::Arc;

use rustc_hash::FxBuildHasher;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smol_str::SmolStr;

use ipaudit_schemas::{
    CalicoAffinityInfo, CalicoBlockInfo, CalicoHandleInfo, CalicoPoolInfo, CiliumEndpointInfo,
    CiliumNodeInfo, IpInfo, IpPoolInfo, IpReservationInfo, KindPart, NetworkStatus, PodInfo,
    SpiderEndpointInfo, SpiderIpPoolInfo, SubnetInfo,
};

use super::shared::SharedTable;

/// A record's part, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// A Pod, compact.
    Pod(PodPart),
    /// A kube-ovn IP, compact.
    Ip(Box<IpPart>),
    /// A kube-ovn Subnet.
    Subnet(Box<SubnetInfo>),
    /// A whereabouts IPPool.
    IpPool(Box<IpPoolInfo>),
    /// A whereabouts OverlappingRangeIPReservation.
    IpReservation(Box<IpReservationInfo>),
    /// A spiderpool SpiderIPPool.
    SpiderIpPool(Box<SpiderIpPoolInfo>),
    /// A spiderpool SpiderEndpoint.
    SpiderEndpoint(Box<SpiderEndpointInfo>),
    /// A core Node: the rules read only that it exists.
    Node,
    /// A Calico IPAMBlock, in either API group, with its allocations' owners.
    CalicoBlock(Box<CalicoBlockPart>),
    /// A Calico IPAMHandle.
    CalicoHandle(Box<CalicoHandleInfo>),
    /// A Calico BlockAffinity.
    CalicoAffinity(Box<CalicoAffinityInfo>),
    /// A Calico IPPool.
    CalicoPool(Box<CalicoPoolInfo>),
    /// A CiliumNode.
    CiliumNode(Box<CiliumNodeInfo>),
    /// A CiliumEndpoint.
    CiliumEndpoint(Box<CiliumEndpointInfo>),
}

/// A Calico block as the rules read it: the decoded block, and the pod each allocation
/// is for (`namespace/pod`) made once, since the holder index names them on every lookup
/// of one of its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalicoBlockPart {
    block: CalicoBlockInfo,
    /// Per allocation, in its order: its pod, or `None` (a tunnel or LoadBalancer address,
    /// one cooling down, one without pod attributes).
    owners: Box<[Option<SmolStr>]>,
}

impl CalicoBlockPart {
    /// The part of `block`.
    pub fn new(block: CalicoBlockInfo) -> Self {
        let owners = block
            .allocations
            .iter()
            .map(|a| super::holdings::calico_pod_owner(a).map(SmolStr::from))
            .collect();
        CalicoBlockPart { block, owners }
    }

    /// The pod the allocation at `index` (of `allocations`) is for.
    pub fn owner(&self, index: usize) -> Option<&str> {
        self.owners.get(index).and_then(Option::as_deref)
    }
}

impl std::ops::Deref for CalicoBlockPart {
    type Target = CalicoBlockInfo;

    fn deref(&self) -> &CalicoBlockInfo {
        &self.block
    }
}

/// What the rules read of a kube-ovn IP (the fields of `IpInfo` by the same names): 64
/// bytes, jemalloc's 64-byte class.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpPart {
    /// `spec.namespace/spec.podName`: the owner its holdings name, kept whole so that
    /// reading them allocates nothing (see [`IpPart::pod`]).
    pod: SmolStr,
    /// spec.ipAddress (both families).
    pub ip_address: SmolStr,
    /// What it has in common with the IPs of its subnet and namespace, shared.
    common: Arc<IpCommon>,
    /// spec.attachSubnets and spec.attachIps, apart: nearly every IP has none.
    attachments: Option<Box<Attachments>>,
}

/// What many IPs have alike: one copy per subnet, namespace, pod type and reservation.
#[derive(Debug, PartialEq, Eq, Default)]
struct IpCommon {
    subnet: SmolStr,
    namespace: SmolStr,
    pod_type: SmolStr,
    /// Labelled `ovn.kubernetes.io/ip_reserved: "true"` (reserved by hand).
    reserved: bool,
}

/// Distinct (subnet, namespace, pod type, reservation) kept to share (see [`SharedTable`]).
const SHARED_IP_COMMONS: usize = 65_536;
static IP_COMMONS: SharedTable<IpCommon> = SharedTable::new(SHARED_IP_COMMONS);

impl IpCommon {
    fn hash(subnet: &str, namespace: &str, pod_type: &str, reserved: bool) -> u64 {
        FxBuildHasher.hash_one((subnet, namespace, pod_type, reserved))
    }

    fn is(&self, ip: &IpInfo, reserved: bool) -> bool {
        self.subnet == ip.subnet
            && self.namespace == ip.pod_namespace
            && self.pod_type == ip.pod_type
            && self.reserved == reserved
    }

    /// The shared copy of these fields: `like`'s (the object's version before, nearly
    /// always alike) when it has them, else from the table.
    fn shared(ip: &IpInfo, reserved: bool, like: Option<&IpPart>) -> Arc<IpCommon> {
        if let Some(like) = like.filter(|l| l.common.is(ip, reserved)) {
            return Arc::clone(&like.common);
        }
        let (subnet, namespace, pod_type) = (&ip.subnet, &ip.pod_namespace, &ip.pod_type);
        IP_COMMONS.get_or_make(
            IpCommon::hash(subnet, namespace, pod_type, reserved),
            |c| c.is(ip, reserved),
            || IpCommon {
                subnet: SmolStr::new(subnet),
                namespace: SmolStr::new(namespace),
                pod_type: SmolStr::new(pod_type),
                reserved,
            },
            |c| IpCommon::hash(&c.subnet, &c.namespace, &c.pod_type, c.reserved),
        )
    }
}

/// An IP's attachment subnets and addresses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Attachments {
    subnets: Box<[String]>,
    ips: Box<[String]>,
}

/// What the rules read of a Pod (the fields of `PodInfo` by the same names): its node,
/// IPs and allocations are in the events, and no rule reads them from the state. One
/// pointer: a pod that shows no networks (most of them) shares its fields with every pod
/// of the same phase and disruption, so that it costs no allocation of its own.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodPart(Arc<PodFields>);

/// The fields of a [`PodPart`].
#[derive(Debug, PartialEq, Eq, Default)]
struct PodFields {
    phase: SmolStr,
    disruption_target: bool,
    network_status: Box<[NetworkStatus]>,
    /// Of a pod on Calico's network (it carries Calico's container id and does not use its
    /// node's network): the id, and its status.podIPs, which Calico's blocks hold. Empty
    /// for every other pod.
    calico: Option<Box<CalicoPod>>,
}

/// What the rules read of a pod on Calico's network.
#[derive(Debug, PartialEq, Eq, Default)]
struct CalicoPod {
    container_id: String,
    pod_ips: Box<[String]>,
}

impl PodFields {
    /// The shared table's hash of a pod without networks.
    fn hash(phase: &str, disruption_target: bool) -> u64 {
        FxBuildHasher.hash_one((phase, disruption_target))
    }
}

/// Distinct (phase, disruption) of pods without networks kept to share.
const SHARED_POD_FIELDS: usize = 1_024;
static POD_FIELDS: SharedTable<PodFields> = SharedTable::new(SHARED_POD_FIELDS);

impl PodPart {
    /// status.phase.
    pub fn phase(&self) -> &str {
        &self.0.phase
    }

    /// The `DisruptionTarget` condition is True.
    pub fn disruption_target(&self) -> bool {
        self.0.disruption_target
    }

    /// The `k8s.v1.cni.cncf.io/network-status` annotation's networks.
    pub fn network_status(&self) -> &[NetworkStatus] {
        &self.0.network_status
    }

    /// status.podIPs of a pod on Calico's network (empty for any other pod).
    pub fn calico_ips(&self) -> &[String] {
        self.0.calico.as_deref().map_or(&[], |c| &c.pod_ips)
    }

    /// The part of `pod`, sharing its fields with `like` (the object's version before) or
    /// the table when it shows no networks but the default one. Of its network-status it
    /// keeps what rules read (as the Avro decoder reads it, `Fields::part_details`): the
    /// networks other than the default (whose addresses the primary CNI's own records
    /// hold), without interface and MAC address.
    ///
    /// `pod` is an event's: what the part keeps is copied or moved out of it, and the rest
    /// is left for the event's next reading to reuse.
    pub fn new(pod: &mut PodInfo, like: Option<&PodPart>) -> Self {
        pod.network_status.retain(|network| !network.default);
        let on_calico = !pod.calico_container_id.is_empty() && !pod.host_network;
        if !pod.network_status.is_empty() || on_calico {
            // Its own networks or addresses: nothing to share.
            let mut network_status = std::mem::take(&mut pod.network_status);
            for network in &mut network_status {
                network.interface = String::new();
                network.mac = String::new();
            }
            let calico = on_calico.then(|| {
                Box::new(CalicoPod {
                    container_id: std::mem::take(&mut pod.calico_container_id),
                    pod_ips: std::mem::take(&mut pod.pod_ips).into_boxed_slice(),
                })
            });
            return PodPart(Arc::new(PodFields {
                phase: SmolStr::new(&pod.phase),
                disruption_target: pod.disruption_target,
                network_status: network_status.into_boxed_slice(),
                calico,
            }));
        }
        let alike = |f: &PodFields| {
            f.phase == pod.phase
                && f.disruption_target == pod.disruption_target
                && f.network_status.is_empty()
                && f.calico.is_none()
        };
        if let Some(like) = like.filter(|l| alike(&l.0)) {
            return PodPart(Arc::clone(&like.0));
        }
        PodPart(POD_FIELDS.get_or_make(
            PodFields::hash(&pod.phase, pod.disruption_target),
            alike,
            || PodFields {
                phase: SmolStr::new(&pod.phase),
                disruption_target: pod.disruption_target,
                network_status: Box::default(),
                calico: None,
            },
            |f| PodFields::hash(&f.phase, f.disruption_target),
        ))
    }
}

impl From<PodInfo> for PodPart {
    fn from(mut pod: PodInfo) -> Self {
        PodPart::new(&mut pod, None)
    }
}

impl From<&PodPart> for PodInfo {
    fn from(pod: &PodPart) -> Self {
        let calico = pod.0.calico.as_deref();
        PodInfo {
            phase: pod.phase().to_owned(),
            network_status: pod.network_status().to_vec(),
            disruption_target: pod.disruption_target(),
            pod_ips: pod.calico_ips().to_vec(),
            calico_container_id: calico.map(|c| c.container_id.clone()).unwrap_or_default(),
            ..PodInfo::default()
        }
    }
}

impl IpPart {
    /// spec.subnet.
    pub fn subnet(&self) -> &str {
        &self.common.subnet
    }

    /// spec.podType.
    pub fn pod_type(&self) -> &str {
        &self.common.pod_type
    }

    /// Labelled `ovn.kubernetes.io/ip_reserved: "true"` (reserved by hand).
    pub fn reserved(&self) -> bool {
        self.common.reserved
    }

    /// The part of `ip`, labelled reserved or not, sharing what it has alike with `like`
    /// (the object's version before).
    pub fn new(ip: &mut IpInfo, reserved: bool, like: Option<&IpPart>) -> Self {
        IpPart {
            pod: joined(&ip.pod_namespace, &ip.pod_name),
            ip_address: SmolStr::new(&ip.ip_address),
            common: IpCommon::shared(ip, reserved, like),
            attachments: (!ip.attach_subnets.is_empty() || !ip.attach_ips.is_empty()).then(|| {
                Box::new(Attachments {
                    subnets: std::mem::take(&mut ip.attach_subnets).into_boxed_slice(),
                    ips: std::mem::take(&mut ip.attach_ips).into_boxed_slice(),
                })
            }),
        }
    }

    /// spec.podName.
    pub fn pod_name(&self) -> &str {
        self.pod
            .get(self.common.namespace.len() + 1..)
            .unwrap_or_default()
    }

    /// spec.namespace.
    pub fn pod_namespace(&self) -> &str {
        &self.common.namespace
    }

    /// spec.attachSubnets.
    pub fn attach_subnets(&self) -> &[String] {
        self.attachments.as_deref().map_or(&[], |a| &a.subnets)
    }

    /// spec.attachIps.
    pub fn attach_ips(&self) -> &[String] {
        self.attachments.as_deref().map_or(&[], |a| &a.ips)
    }

    /// Its pod as `namespace/name`, when it names one.
    pub fn pod(&self) -> Option<&str> {
        (!self.pod_name().is_empty()).then_some(self.pod.as_str())
    }
}

/// `namespace/name`, without the formatting machinery (once per IP version).
fn joined(namespace: &str, name: &str) -> SmolStr {
    let mut pod = smol_str::SmolStrBuilder::new();
    pod.push_str(namespace);
    pod.push('/');
    pod.push_str(name);
    pod.finish()
}

impl From<IpInfo> for IpPart {
    fn from(mut ip: IpInfo) -> Self {
        IpPart::new(&mut ip, false, None)
    }
}

impl From<&IpPart> for IpInfo {
    fn from(ip: &IpPart) -> Self {
        IpInfo {
            subnet: ip.subnet().to_owned(),
            attach_subnets: ip.attach_subnets().to_vec(),
            pod_name: ip.pod_name().to_owned(),
            pod_namespace: ip.pod_namespace().to_owned(),
            ip_address: ip.ip_address.to_string(),
            attach_ips: ip.attach_ips().to_vec(),
            pod_type: ip.pod_type().to_owned(),
            ..IpInfo::default()
        }
    }
}

impl Part {
    /// What the rules read of `part`; `reserved`: the object carries kube-ovn's
    /// `ip_reserved: "true"` label (read of IPs only); `like`: the object's version
    /// before, whose shared fields it takes when they are alike. `part` is an event's:
    /// what the record keeps is copied or moved out, the rest left for the event's next
    /// reading to reuse.
    pub fn new(part: &mut KindPart, reserved: bool, like: Option<&Part>) -> Self {
        use std::mem::take;
        match part {
            KindPart::Pod(pod) => Part::Pod(PodPart::new(pod, like.and_then(Part::pod))),
            KindPart::Ip(ip) => {
                Part::Ip(Box::new(IpPart::new(ip, reserved, like.and_then(Part::ip))))
            }
            KindPart::Subnet(subnet) => Part::Subnet(Box::new(take(subnet))),
            KindPart::IpPool(pool) => Part::IpPool(Box::new(take(pool))),
            KindPart::IpReservation(reservation) => {
                Part::IpReservation(Box::new(take(reservation)))
            }
            KindPart::SpiderIpPool(pool) => Part::SpiderIpPool(Box::new(take(pool))),
            KindPart::SpiderEndpoint(endpoint) => Part::SpiderEndpoint(Box::new(take(endpoint))),
            KindPart::Node(_) => Part::Node,
            KindPart::CalicoBlock(block) => {
                Part::CalicoBlock(Box::new(CalicoBlockPart::new(take(block))))
            }
            KindPart::CalicoHandle(handle) => Part::CalicoHandle(Box::new(take(handle))),
            KindPart::CalicoAffinity(affinity) => Part::CalicoAffinity(Box::new(take(affinity))),
            KindPart::CalicoPool(pool) => Part::CalicoPool(Box::new(take(pool))),
            KindPart::CiliumNode(node) => Part::CiliumNode(Box::new(take(node))),
            KindPart::CiliumEndpoint(endpoint) => Part::CiliumEndpoint(Box::new(take(endpoint))),
        }
    }

    /// A Pod's part.
    pub fn pod(&self) -> Option<&PodPart> {
        match self {
            Part::Pod(pod) => Some(pod),
            _ => None,
        }
    }

    /// A kube-ovn IP's part.
    pub fn ip(&self) -> Option<&IpPart> {
        match self {
            Part::Ip(ip) => Some(ip),
            _ => None,
        }
    }

    /// Whether it is a kube-ovn IP labelled reserved.
    pub fn reserved(&self) -> bool {
        matches!(self, Part::Ip(ip) if ip.reserved())
    }
}

impl From<KindPart> for Part {
    fn from(mut part: KindPart) -> Self {
        Part::new(&mut part, false, None)
    }
}

impl From<&Part> for KindPart {
    fn from(part: &Part) -> Self {
        match part {
            Part::Pod(pod) => KindPart::Pod(Box::new(PodInfo::from(pod))),
            Part::Ip(ip) => KindPart::Ip(Box::new(IpInfo::from(&**ip))),
            Part::Subnet(subnet) => KindPart::Subnet(subnet.clone()),
            Part::IpPool(pool) => KindPart::IpPool(pool.clone()),
            Part::IpReservation(reservation) => KindPart::IpReservation(reservation.clone()),
            Part::SpiderIpPool(pool) => KindPart::SpiderIpPool(pool.clone()),
            Part::SpiderEndpoint(endpoint) => KindPart::SpiderEndpoint(endpoint.clone()),
            Part::Node => KindPart::Node(Box::default()),
            Part::CalicoBlock(block) => KindPart::CalicoBlock(Box::new(block.block.clone())),
            Part::CalicoHandle(handle) => KindPart::CalicoHandle(handle.clone()),
            Part::CalicoAffinity(affinity) => KindPart::CalicoAffinity(affinity.clone()),
            Part::CalicoPool(pool) => KindPart::CalicoPool(pool.clone()),
            Part::CiliumNode(node) => KindPart::CiliumNode(node.clone()),
            Part::CiliumEndpoint(endpoint) => KindPart::CiliumEndpoint(endpoint.clone()),
        }
    }
}

impl Serialize for Part {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // A copy per record, only while a checkpoint is written.
        KindPart::from(self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        KindPart::deserialize(deserializer).map(Part::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ip_part_keeps_what_rules_read_and_is_saved_as_the_decoded_form() {
        let ip = IpInfo {
            subnet: "ovn-default".into(),
            attach_subnets: vec!["net1".into()],
            pod_name: "web-0".into(),
            pod_namespace: "default".into(),
            ip_address: "10.16.0.9,fd00::9".into(),
            attach_ips: vec!["192.168.1.5".into()],
            pod_type: "StatefulSet".into(),
            ..IpInfo::default()
        };
        let part = Part::from(KindPart::Ip(Box::new(ip.clone())));
        // 64 bytes against 264 (jemalloc's 64-byte class), and the short strings inside
        // instead of beside it.
        assert!(std::mem::size_of::<IpPart>() <= 64);
        let json = serde_json::to_value(&part).unwrap();
        assert_eq!(
            json,
            serde_json::to_value(KindPart::Ip(Box::new(ip))).unwrap()
        );
        assert_eq!(serde_json::from_value::<Part>(json).unwrap(), part);
    }

    #[test]
    fn a_new_version_takes_the_shared_fields_of_the_one_before_when_they_are_alike() {
        let ip = |subnet: &str| IpInfo {
            subnet: subnet.into(),
            pod_name: "web-0".into(),
            pod_namespace: "default".into(),
            ip_address: "10.16.0.9".into(),
            ..IpInfo::default()
        };
        let before = IpPart::new(&mut ip("s1"), false, None);
        let after = IpPart::new(&mut ip("s1"), false, Some(&before));
        assert!(Arc::ptr_eq(&before.common, &after.common));
        let moved = IpPart::new(&mut ip("s2"), false, Some(&before));
        assert_eq!(moved.subnet(), "s2");
        let reserved = IpPart::new(&mut ip("s1"), true, Some(&before));
        assert!(reserved.reserved() && !Arc::ptr_eq(&before.common, &reserved.common));
        assert_eq!(
            IpPart::new(&mut ip("s1"), false, Some(&moved)).common,
            before.common,
            "found in the table when the one before differs"
        );
    }

    #[test]
    fn a_pod_part_keeps_phase_networks_and_disruption_and_is_saved_as_the_decoded_form() {
        let pod = PodInfo {
            phase: "Running".into(),
            network_status: vec![NetworkStatus {
                name: "default/net1".into(),
                ips: vec!["192.168.1.5".into()],
                ..NetworkStatus::default()
            }],
            disruption_target: true,
            ..PodInfo::default()
        };
        let part = Part::from(KindPart::Pod(Box::new(pod.clone())));
        assert_eq!(std::mem::size_of::<PodPart>(), 8);
        let plain = |phase: &str| {
            PodPart::from(PodInfo {
                phase: phase.into(),
                ..PodInfo::default()
            })
        };
        assert!(
            Arc::ptr_eq(&plain("Running").0, &plain("Running").0),
            "pods without networks share their fields"
        );
        assert!(!Arc::ptr_eq(&plain("Running").0, &plain("Pending").0));
        let on_the_default_network_only = PodPart::from(PodInfo {
            phase: "Running".into(),
            network_status: vec![NetworkStatus {
                name: "kube-ovn".into(),
                interface: "eth0".into(),
                ips: vec!["10.16.0.5".into()],
                mac: "00:00:00:aa:bb:cc".into(),
                default: true,
            }],
            ..PodInfo::default()
        });
        assert!(
            Arc::ptr_eq(&on_the_default_network_only.0, &plain("Running").0),
            "the default network is not kept: its addresses are the primary CNI's records'"
        );
        let json = serde_json::to_value(&part).unwrap();
        assert_eq!(
            json,
            serde_json::to_value(KindPart::Pod(Box::new(pod))).unwrap()
        );
        assert_eq!(serde_json::from_value::<Part>(json).unwrap(), part);
    }
}
