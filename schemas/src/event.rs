//! `WatchEvent`: one watch event of a Pod, a Node or an IPAM object, as the collector saw it.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The watch stream, one per watched kind. What each kind is (API group, plural, IPAM,
/// converter) lives in one table, [`crate::kinds::KINDS`]; this enum only names them, in
/// schema order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Stream {
    /// core/v1 Pods.
    Pod,
    /// kubeovn.io/v1 IPs.
    Ip,
    /// kubeovn.io/v1 Subnets.
    Subnet,
    /// whereabouts.cni.cncf.io/v1alpha1 IPPools (schema v4).
    IpPool,
    /// whereabouts.cni.cncf.io/v1alpha1 OverlappingRangeIPReservations (schema v4).
    OverlappingRangeIpReservation,
    /// spiderpool.spidernet.io/v2beta1 SpiderIPPools (schema v4).
    SpiderIpPool,
    /// spiderpool.spidernet.io/v2beta1 SpiderEndpoints (schema v4).
    SpiderEndpoint,
    /// A kind this build does not know: written by a newer collector (the Avro enum's
    /// default from v4 on). Counted and skipped by the analyzer. The symbols after it came
    /// with v5, so that each version's symbols are the first of the next.
    Unknown,
    /// crd.projectcalico.org/v1 IPAMBlocks (schema v5).
    CalicoIpamBlock,
    /// crd.projectcalico.org/v1 IPAMHandles (schema v5).
    CalicoIpamHandle,
    /// crd.projectcalico.org/v1 BlockAffinities (schema v5).
    CalicoBlockAffinity,
    /// crd.projectcalico.org/v1 IPPools (schema v5).
    CalicoIpPool,
    /// projectcalico.org/v3 IPAMBlocks, Calico 3.32's native CRDs (schema v5).
    CalicoV3IpamBlock,
    /// projectcalico.org/v3 IPAMHandles (schema v5).
    CalicoV3IpamHandle,
    /// projectcalico.org/v3 BlockAffinities (schema v5).
    CalicoV3BlockAffinity,
    /// projectcalico.org/v3 IPPools (schema v5).
    CalicoV3IpPool,
    /// cilium.io/v2 CiliumNodes (schema v5).
    CiliumNode,
    /// cilium.io/v2 CiliumEndpoints (schema v5).
    CiliumEndpoint,
    /// core/v1 Nodes (schema v5).
    Node,
}

impl Stream {
    /// Every stream, in schema order (the order of the Avro enum's symbols and of the
    /// variants' discriminants).
    pub const ALL: [Stream; 19] = [
        Stream::Pod,
        Stream::Ip,
        Stream::Subnet,
        Stream::IpPool,
        Stream::OverlappingRangeIpReservation,
        Stream::SpiderIpPool,
        Stream::SpiderEndpoint,
        Stream::Unknown,
        Stream::CalicoIpamBlock,
        Stream::CalicoIpamHandle,
        Stream::CalicoBlockAffinity,
        Stream::CalicoIpPool,
        Stream::CalicoV3IpamBlock,
        Stream::CalicoV3IpamHandle,
        Stream::CalicoV3BlockAffinity,
        Stream::CalicoV3IpPool,
        Stream::CiliumNode,
        Stream::CiliumEndpoint,
        Stream::Node,
    ];

    /// The stream whose objects are the same objects as this one's: a Calico kind's
    /// `crd.projectcalico.org/v1` stream for its `projectcalico.org/v3` one (during a
    /// migration an object exists in both groups, and is one object), else itself. The
    /// two carry the same kind part.
    pub fn canonical(self) -> Stream {
        match self {
            Stream::CalicoV3IpamBlock => Stream::CalicoIpamBlock,
            Stream::CalicoV3IpamHandle => Stream::CalicoIpamHandle,
            Stream::CalicoV3BlockAffinity => Stream::CalicoBlockAffinity,
            Stream::CalicoV3IpPool => Stream::CalicoIpPool,
            stream => stream,
        }
    }

    /// The Kubernetes kind of the stream's objects.
    pub fn kind(self) -> &'static str {
        self.spec().map_or("Unknown", |k| k.kind)
    }

    /// Lower-case name, as used in metric labels and reports.
    pub fn as_str(self) -> &'static str {
        self.spec().map_or("unknown", |k| k.label)
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the API server said, plus the collector's relist markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventType {
    /// The object appeared (or was listed).
    Added,
    /// The object changed.
    Modified,
    /// The object is gone; the event carries its last state and the deletion's version.
    Deleted,
    /// The API server's progress marker: no object, only a resourceVersion.
    Bookmark,
    /// A relist begins: the events up to `SyncEnd` are a snapshot.
    SyncStart,
    /// A relist ends; its resourceVersion is the list's.
    SyncEnd,
    /// The object was missing from a relist: deleted at or before the list's version.
    DeletedOnRelist,
    /// The collector acted (or refused to act) on a cleanup command (schema v3).
    Remediation,
}

impl EventType {
    /// The types that carry an object's change (no bookmark, no relist marker, no
    /// remediation): the `type` label values of the programs' events counters.
    pub const CHANGES: [EventType; 4] = [
        EventType::Added,
        EventType::Modified,
        EventType::Deleted,
        EventType::DeletedOnRelist,
    ];

    /// The name as it appears in the schema and in kubectl output.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
            EventType::Bookmark => "BOOKMARK",
            EventType::SyncStart => "SYNC_START",
            EventType::SyncEnd => "SYNC_END",
            EventType::DeletedOnRelist => "DELETED_ON_RELIST",
            EventType::Remediation => "REMEDIATION",
        }
    }

    /// Whether the event ends the object's life.
    pub fn is_deletion(self) -> bool {
        matches!(self, EventType::Deleted | EventType::DeletedOnRelist)
    }

    /// Whether the event carries an object's state (as opposed to a progress or relist
    /// marker, or the collector's own remediation record).
    pub fn carries_object(self) -> bool {
        !matches!(
            self,
            EventType::Bookmark
                | EventType::SyncStart
                | EventType::SyncEnd
                | EventType::Remediation
        )
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// metadata.ownerReferences[] of an object.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OwnerReference {
    /// apiVersion of the owner.
    pub api_version: String,
    /// kind of the owner.
    pub kind: String,
    /// name of the owner.
    pub name: String,
    /// uid of the owner.
    pub uid: String,
    /// Whether the owner is the managing controller.
    pub controller: Option<bool>,
}

/// The object metadata ipaudit keeps (managedFields dropped).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// metadata.uid.
    pub uid: String,
    /// metadata.name.
    pub name: String,
    /// metadata.namespace; `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// metadata.generation.
    pub generation: Option<i64>,
    /// metadata.creationTimestamp, in Unix milliseconds.
    pub creation_timestamp_ms: Option<i64>,
    /// metadata.deletionTimestamp, in Unix milliseconds: deletion was requested.
    pub deletion_timestamp_ms: Option<i64>,
    /// metadata.finalizers, in order.
    pub finalizers: Vec<String>,
    /// metadata.ownerReferences.
    pub owner_references: Vec<OwnerReference>,
    /// metadata.labels.
    pub labels: BTreeMap<String, String>,
    /// The annotations kube-ovn and multus use.
    pub annotations: BTreeMap<String, String>,
    /// Latest metadata.managedFields[].time, in Unix milliseconds (schema v2).
    #[serde(default)]
    pub last_update_ms: Option<i64>,
    /// metadata.deletionGracePeriodSeconds: a graceful deletion's deletionTimestamp lies
    /// this far after the request (schema v5).
    #[serde(default)]
    pub deletion_grace_period_seconds: Option<i64>,
}

/// spec of a kube-ovn IP.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IpInfo {
    /// spec.subnet.
    pub subnet: String,
    /// spec.attachSubnets.
    pub attach_subnets: Vec<String>,
    /// spec.podName.
    pub pod_name: String,
    /// spec.namespace.
    pub pod_namespace: String,
    /// spec.nodeName.
    pub node_name: String,
    /// spec.ipAddress.
    pub ip_address: String,
    /// spec.v4IpAddress.
    pub v4_ip_address: String,
    /// spec.v6IpAddress.
    pub v6_ip_address: String,
    /// spec.attachIps.
    pub attach_ips: Vec<String>,
    /// spec.macAddress.
    pub mac_address: String,
    /// spec.podType.
    pub pod_type: String,
}

/// spec and status counts of a kube-ovn Subnet; counts are decimal strings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SubnetInfo {
    /// spec.cidrBlock.
    pub cidr_block: String,
    /// spec.vpc.
    pub vpc: String,
    /// spec.provider.
    pub provider: String,
    /// spec.protocol.
    pub protocol: String,
    /// spec.gateway.
    pub gateway: String,
    /// status.v4usingIPs.
    pub v4_using_ips: Option<String>,
    /// status.v4availableIPs.
    pub v4_available_ips: Option<String>,
    /// status.v6usingIPs.
    pub v6_using_ips: Option<String>,
    /// status.v6availableIPs.
    pub v6_available_ips: Option<String>,
}

/// kube-ovn allocation annotations of one provider on a pod.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PodAllocation {
    /// `ovn` for the primary network, else the attachment provider.
    pub provider: String,
    /// `<provider>.kubernetes.io/allocated == "true"`.
    pub allocated: bool,
    /// `<provider>.kubernetes.io/ip_address`.
    pub ip_address: String,
    /// `<provider>.kubernetes.io/mac_address`.
    pub mac_address: String,
    /// `<provider>.kubernetes.io/logical_switch`: the subnet name.
    pub logical_switch: String,
    /// `<provider>.kubernetes.io/cidr`.
    pub cidr: String,
}

/// What ipaudit keeps of a Pod.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PodInfo {
    /// status.phase.
    pub phase: String,
    /// spec.nodeName.
    pub node_name: String,
    /// status.podIPs[].ip.
    pub pod_ips: Vec<String>,
    /// kube-ovn allocations, one per provider.
    pub allocations: Vec<PodAllocation>,
    /// The `k8s.v1.cni.cncf.io/network-status` annotation: the addresses the pod really
    /// holds, per network (schema v4). Empty until the CNI reported.
    #[serde(default)]
    pub network_status: Vec<NetworkStatus>,
    /// The `DisruptionTarget` condition is True: the pod is being evicted or its node is
    /// gone (schema v4).
    #[serde(default)]
    pub disruption_target: bool,
    /// spec.hostNetwork: the pod uses its node's addresses and holds no IPAM address
    /// (schema v5).
    #[serde(default)]
    pub host_network: bool,
    /// The `cni.projectcalico.org/containerID` annotation: the sandbox whose Calico handle
    /// is `k8s-pod-network.<id>` (schema v5).
    #[serde(default)]
    pub calico_container_id: String,
}

/// One entry of a pod's `k8s.v1.cni.cncf.io/network-status` annotation (schema v4).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NetworkStatus {
    /// The network: `<namespace>/<NetworkAttachmentDefinition>`, or the default network's name.
    pub name: String,
    /// The interface in the pod (`eth0`, `net1`).
    pub interface: String,
    /// The addresses on that interface, without prefix length.
    pub ips: Vec<String>,
    /// The interface's MAC address.
    pub mac: String,
    /// Whether this is the pod's default network.
    pub default: bool,
}

/// One entry of a whereabouts IPPool's `spec.allocations` (schema v4).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IpPoolAllocation {
    /// The map key as written: the decimal offset from the range's network address.
    pub offset: String,
    /// The address it stands for; empty when the key or the range does not parse (such
    /// keys are skipped by whereabouts too).
    pub address: String,
    /// `id`: the container (sandbox) id.
    pub container_id: String,
    /// `podref`: `<namespace>/<pod name>`.
    pub podref: String,
    /// `ifname` (absent in pools written before whereabouts v0.8.0).
    pub ifname: String,
}

/// spec of a whereabouts IPPool (schema v4).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IpPoolInfo {
    /// spec.range: the CIDR (the node's slice with node slices).
    pub range: String,
    /// spec.allocations, in offset order.
    pub allocations: Vec<IpPoolAllocation>,
}

/// spec of a whereabouts OverlappingRangeIPReservation: one per allocated address across
/// overlapping ranges (schema v4).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IpReservationInfo {
    /// The address, read from the object's name (`:` written as `-`, optionally after a
    /// `<network_name>-` prefix); empty when the name holds none.
    pub address: String,
    /// spec.podref: `<namespace>/<pod name>`.
    pub podref: String,
    /// spec.ifname.
    pub ifname: String,
    /// spec.containerid (never written by whereabouts v0.9.4).
    pub container_id: String,
}

/// One entry of a SpiderIPPool's `status.allocatedIPs` (schema v4).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SpiderAllocation {
    /// The address (the map key).
    pub address: String,
    /// `pod`: `<namespace>/<name>` (for KubeVirt, the VM's name).
    pub pod: String,
    /// `podUid`.
    pub pod_uid: String,
}

/// spec and allocations of a spiderpool SpiderIPPool (schema v4).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SpiderIpPoolInfo {
    /// spec.subnet (CIDR).
    pub subnet: String,
    /// spec.ips: ranges (`a-b`) and single addresses.
    pub ips: Vec<String>,
    /// status.allocatedIPs (a JSON string in the object), in address order.
    pub allocations: Vec<SpiderAllocation>,
    /// status.allocatedIPCount.
    pub allocated_ip_count: Option<i64>,
}

/// One interface of a SpiderEndpoint's `status.current.ips` (schema v4).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SpiderEndpointAddress {
    /// `interface`.
    pub interface: String,
    /// `ipv4`, with its prefix length (`172.18.40.10/16`).
    pub ipv4: String,
    /// `ipv6`, with its prefix length.
    pub ipv6: String,
    /// `ipv4Pool`: the SpiderIPPool it came from.
    pub ipv4_pool: String,
    /// `ipv6Pool`.
    pub ipv6_pool: String,
}

/// status of a spiderpool SpiderEndpoint, named after its pod (schema v4).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SpiderEndpointInfo {
    /// status.current.uid: the pod's uid.
    pub pod_uid: String,
    /// status.current.node.
    pub node: String,
    /// status.current.ips.
    pub addresses: Vec<SpiderEndpointAddress>,
    /// status.ownerControllerType (`Deployment`, `StatefulSet`, `VirtualMachineInstance`...).
    pub owner_controller_type: String,
    /// status.ownerControllerName.
    pub owner_controller_name: String,
}

/// What ipaudit keeps of a core/v1 Node (schema v5): that it exists, and its pod CIDRs.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodeInfo {
    /// spec.podCIDRs.
    pub pod_cidrs: Vec<String>,
}

/// One allocated ordinal of a Calico IPAMBlock, with its attribute (schema v5).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CalicoAllocation {
    /// The ordinal: the address's offset in the block.
    pub ordinal: i64,
    /// The address the ordinal stands for; empty when the block's CIDR does not parse.
    pub address: String,
    /// `attributes[].handle_id`, as written (Calico cuts it at the first `\r`).
    pub handle_id: String,
    /// `sequenceNumberForAllocation[ordinal]`: the block's sequence number when the
    /// ordinal was allocated.
    pub sequence_number: Option<i64>,
    /// `attributes[].secondary.namespace`.
    pub namespace: String,
    /// `attributes[].secondary.pod`.
    pub pod: String,
    /// `attributes[].secondary.node`.
    pub node: String,
    /// `attributes[].secondary.type`: a tunnel address type (`ipipTunnelAddress`...), or a
    /// LoadBalancer Service's type.
    pub r#type: String,
    /// `attributes[].releasedAt`, in Unix ms: released, cooling down.
    pub released_at_ms: Option<i64>,
}

/// A Calico IPAMBlock, in either API group (schema v5).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CalicoBlockInfo {
    /// spec.cidr.
    pub cidr: String,
    /// spec.affinity: `host:<node>`, `virtual:<name>`, or empty for none.
    pub affinity: String,
    /// spec.allocations with spec.attributes, in ordinal order.
    pub allocations: Vec<CalicoAllocation>,
    /// spec.sequenceNumber: bumped on every write of the block.
    pub sequence_number: i64,
    /// spec.deleted: soft-deleted, as good as gone.
    pub deleted: bool,
}

/// One entry of a Calico IPAMHandle's `spec.block` (schema v5).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CalicoHandleBlock {
    /// The block's CIDR.
    pub cidr: String,
    /// How many addresses of that block the handle holds.
    pub count: i64,
}

/// A Calico IPAMHandle (schema v5).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CalicoHandleInfo {
    /// spec.handleID, as written (the object's name is its lower case).
    pub handle_id: String,
    /// spec.block, in CIDR order.
    pub blocks: Vec<CalicoHandleBlock>,
    /// spec.deleted: soft-deleted, as good as gone.
    pub deleted: bool,
}

/// A Calico BlockAffinity (schema v5).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CalicoAffinityInfo {
    /// spec.node.
    pub node: String,
    /// spec.cidr.
    pub cidr: String,
    /// spec.state: `confirmed`, `pending`, `pendingDeletion` or empty.
    pub state: String,
    /// spec.type: `host` (also when empty) or `virtual`.
    pub r#type: String,
    /// spec.deleted (a string in v1, a boolean in v3): soft-deleted.
    pub deleted: bool,
}

/// A Calico IPPool (schema v5).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CalicoPoolInfo {
    /// spec.cidr.
    pub cidr: String,
    /// spec.blockSize.
    pub block_size: Option<i64>,
    /// spec.disabled.
    pub disabled: bool,
    /// spec.allowedUses.
    pub allowed_uses: Vec<String>,
}

/// One entry of a CiliumNode's `status.ipam.used` (schema v5).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CiliumUsedAddress {
    /// The address (the map key).
    pub address: String,
    /// `owner`: `<namespace>/<pod>` (with ` [restored]` after an agent restart), or
    /// `router`, `health`, `ingress`.
    pub owner: String,
    /// `resource`: the ENI or interface.
    pub resource: String,
}

/// A CiliumNode (schema v5): the node's CIDRs and, in CRD-backed IPAM modes, every
/// address in use and its owner.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CiliumNodeInfo {
    /// spec.ipam.podCIDRs.
    pub pod_cidrs: Vec<String>,
    /// spec.ipam.pools.allocated[].cidrs (multi-pool), of every pool.
    pub allocated_cidrs: Vec<String>,
    /// status.ipam.used, in address order.
    pub used: Vec<CiliumUsedAddress>,
    /// status.ipam.operator-status.error.
    pub operator_error: String,
}

/// A CiliumEndpoint, named after its pod (schema v5).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CiliumEndpointInfo {
    /// status.id.
    pub endpoint_id: Option<i64>,
    /// status.networking.addressing[].ipv4 and ipv6.
    pub addresses: Vec<String>,
    /// status.networking.node: the node's address.
    pub node_ip: String,
    /// status.external-identifiers: `<k8s-namespace>/<k8s-pod-name>`, or empty.
    pub pod: String,
    /// status.external-identifiers.container-id.
    pub container_id: String,
    /// status.state.
    pub state: String,
}

/// The kind-specific part of an event: what the kind's converter read from the object.
/// (Avro carries it as one optional field per kind; see the wire structs below.) Each
/// variant is boxed: parts differ tenfold in size, and hundreds of thousands are held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KindPart {
    /// A Pod.
    Pod(Box<PodInfo>),
    /// A kube-ovn IP.
    Ip(Box<IpInfo>),
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
    /// A core Node.
    Node(Box<NodeInfo>),
    /// A Calico IPAMBlock.
    CalicoBlock(Box<CalicoBlockInfo>),
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

impl KindPart {
    /// An empty part of the stream's kind (for an object whose part was not recorded);
    /// `None` for [`Stream::Unknown`].
    pub fn empty(stream: Stream) -> Option<KindPart> {
        Some(match stream {
            Stream::Pod => KindPart::Pod(Box::default()),
            Stream::Ip => KindPart::Ip(Box::default()),
            Stream::Subnet => KindPart::Subnet(Box::default()),
            Stream::IpPool => KindPart::IpPool(Box::default()),
            Stream::OverlappingRangeIpReservation => KindPart::IpReservation(Box::default()),
            Stream::SpiderIpPool => KindPart::SpiderIpPool(Box::default()),
            Stream::SpiderEndpoint => KindPart::SpiderEndpoint(Box::default()),
            Stream::Node => KindPart::Node(Box::default()),
            Stream::CalicoIpamBlock | Stream::CalicoV3IpamBlock => {
                KindPart::CalicoBlock(Box::default())
            }
            Stream::CalicoIpamHandle | Stream::CalicoV3IpamHandle => {
                KindPart::CalicoHandle(Box::default())
            }
            Stream::CalicoBlockAffinity | Stream::CalicoV3BlockAffinity => {
                KindPart::CalicoAffinity(Box::default())
            }
            Stream::CalicoIpPool | Stream::CalicoV3IpPool => KindPart::CalicoPool(Box::default()),
            Stream::CiliumNode => KindPart::CiliumNode(Box::default()),
            Stream::CiliumEndpoint => KindPart::CiliumEndpoint(Box::default()),
            Stream::Unknown => return None,
        })
    }
}

/// What happened to a cleanup command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RemediationOutcome {
    /// The patch was applied.
    Applied,
    /// Every check passed; remediation is in dry-run mode, so nothing was changed.
    DryRun,
    /// A safety check did not pass; nothing was changed.
    Skipped,
    /// The patch failed.
    Failed,
}

impl RemediationOutcome {
    /// Lower-case name, for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            RemediationOutcome::Applied => "applied",
            RemediationOutcome::DryRun => "dry_run",
            RemediationOutcome::Skipped => "skipped",
            RemediationOutcome::Failed => "failed",
        }
    }
}

/// A cleanup action the collector took, or refused to take (schema v3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remediation {
    /// The command this answers.
    pub command_id: String,
    /// The alert that asked for it.
    pub reason_alert_id: String,
    /// REMOVE_FINALIZER or NUDGE.
    pub action: String,
    /// What happened.
    pub outcome: RemediationOutcome,
    /// Why, for a person.
    pub reason: String,
    /// The finalizer removed (or that would have been).
    pub finalizer: Option<String>,
}

impl ObjectMeta {
    /// When deletion was requested: the deletionTimestamp less the grace period (a graceful
    /// deletion's deletionTimestamp lies in the future, when the grace ends); the
    /// deletionTimestamp itself when the grace is not known.
    pub fn deletion_requested_ms(&self) -> Option<i64> {
        let at = self.deletion_timestamp_ms?;
        let grace_ms = self
            .deletion_grace_period_seconds
            .unwrap_or(0)
            .clamp(0, i64::MAX / 1_000)
            * 1_000;
        Some(at.saturating_sub(grace_ms))
    }
}

/// One watch event (the Avro record `io.ipaudit.WatchEvent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// Cluster the collector watches; the Kafka message key.
    pub cluster_id: String,
    /// The collector instance that observed the event.
    pub collector_id: String,
    /// Per (collector, stream) sequence number, from 1.
    pub sequence: i64,
    /// The watch stream.
    pub stream: Stream,
    /// The event type.
    pub event_type: EventType,
    /// metadata.resourceVersion exactly as sent.
    pub resource_version: String,
    /// resourceVersion parsed as an integer; `None` when it is not one.
    pub resource_version_num: Option<i64>,
    /// When the collector received the event (Unix ms); `None` for kubectl recordings.
    pub observed_at_ms: Option<i64>,
    /// Object metadata; `None` for BOOKMARK and SYNC markers.
    pub metadata: Option<ObjectMeta>,
    /// The kind-specific part; `None` for markers.
    pub part: Option<KindPart>,
    /// The object as JSON, when raw capture is on (schema v2).
    pub raw_object: Option<String>,
    /// Set on REMEDIATION events (schema v3).
    pub remediation: Option<Box<Remediation>>,
}

impl WatchEvent {
    /// An event with no object yet: the caller fills `metadata` and the kind part.
    pub fn new(stream: Stream, event_type: EventType, resource_version: &str) -> Self {
        WatchEvent {
            cluster_id: String::new(),
            collector_id: String::new(),
            sequence: 0,
            stream,
            event_type,
            resource_version: resource_version.to_owned(),
            resource_version_num: parse_resource_version(resource_version),
            observed_at_ms: None,
            metadata: None,
            part: None,
            raw_object: None,
            remediation: None,
        }
    }

    /// An event with nothing in it yet, for a decoder to read one into
    /// ([`crate::datum::read_watch_event_into`], [`crate::decode_into`]).
    pub fn blank() -> Self {
        WatchEvent::new(Stream::Unknown, EventType::Bookmark, "")
    }

    /// The object's uid, or "" for markers.
    pub fn uid(&self) -> &str {
        self.metadata.as_ref().map_or("", |m| m.uid.as_str())
    }

    /// The object's name, `namespace/name` for namespaced objects, or "" for markers.
    pub fn object_key(&self) -> String {
        match &self.metadata {
            Some(m) => match &m.namespace {
                Some(ns) if !ns.is_empty() => format!("{ns}/{}", m.name),
                _ => m.name.clone(),
            },
            None => String::new(),
        }
    }

    /// The best time this event can be placed at: when it was observed, else the latest
    /// timestamp the object carries (recordings without observation times).
    pub fn event_time_ms(&self) -> Option<i64> {
        if self.observed_at_ms.is_some() {
            return self.observed_at_ms;
        }
        let m = self.metadata.as_ref()?;
        [
            m.last_update_ms,
            m.deletion_requested_ms(),
            m.creation_timestamp_ms,
        ]
        .into_iter()
        .flatten()
        .max()
    }
}

/// Parses a resourceVersion as the etcd revision it is in every etcd-backed API server.
pub fn parse_resource_version(rv: &str) -> Option<i64> {
    rv.parse::<i64>().ok().filter(|v| *v >= 0)
}

/// The record as the schema lays it out: one optional field per kind-specific record (an
/// Avro union of records does not map onto serde). Only the field of the event's stream is
/// read; the others are written as null.
#[derive(Serialize)]
#[serde(rename = "WatchEvent")]
struct WireRef<'a> {
    cluster_id: &'a str,
    collector_id: &'a str,
    sequence: i64,
    stream: Stream,
    event_type: EventType,
    resource_version: &'a str,
    resource_version_num: Option<i64>,
    observed_at_ms: Option<i64>,
    metadata: Option<&'a ObjectMeta>,
    ip: Option<&'a IpInfo>,
    subnet: Option<&'a SubnetInfo>,
    pod: Option<&'a PodInfo>,
    raw_object: Option<&'a str>,
    remediation: Option<&'a Remediation>,
    ip_pool: Option<&'a IpPoolInfo>,
    ip_reservation: Option<&'a IpReservationInfo>,
    spider_ip_pool: Option<&'a SpiderIpPoolInfo>,
    spider_endpoint: Option<&'a SpiderEndpointInfo>,
    node: Option<&'a NodeInfo>,
    calico_block: Option<&'a CalicoBlockInfo>,
    calico_handle: Option<&'a CalicoHandleInfo>,
    calico_affinity: Option<&'a CalicoAffinityInfo>,
    calico_pool: Option<&'a CalicoPoolInfo>,
    cilium_node: Option<&'a CiliumNodeInfo>,
    cilium_endpoint: Option<&'a CiliumEndpointInfo>,
}

#[derive(Deserialize)]
#[serde(rename = "WatchEvent")]
struct Wire {
    cluster_id: String,
    collector_id: String,
    sequence: i64,
    stream: Stream,
    event_type: EventType,
    resource_version: String,
    resource_version_num: Option<i64>,
    observed_at_ms: Option<i64>,
    metadata: Option<ObjectMeta>,
    ip: Option<IpInfo>,
    subnet: Option<SubnetInfo>,
    pod: Option<PodInfo>,
    #[serde(default)]
    raw_object: Option<String>,
    #[serde(default)]
    remediation: Option<Remediation>,
    #[serde(default)]
    ip_pool: Option<IpPoolInfo>,
    #[serde(default)]
    ip_reservation: Option<IpReservationInfo>,
    #[serde(default)]
    spider_ip_pool: Option<SpiderIpPoolInfo>,
    #[serde(default)]
    spider_endpoint: Option<SpiderEndpointInfo>,
    #[serde(default)]
    node: Option<NodeInfo>,
    #[serde(default)]
    calico_block: Option<CalicoBlockInfo>,
    #[serde(default)]
    calico_handle: Option<CalicoHandleInfo>,
    #[serde(default)]
    calico_affinity: Option<CalicoAffinityInfo>,
    #[serde(default)]
    calico_pool: Option<CalicoPoolInfo>,
    #[serde(default)]
    cilium_node: Option<CiliumNodeInfo>,
    #[serde(default)]
    cilium_endpoint: Option<CiliumEndpointInfo>,
}

impl Serialize for WatchEvent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut wire = WireRef {
            cluster_id: &self.cluster_id,
            collector_id: &self.collector_id,
            sequence: self.sequence,
            stream: self.stream,
            event_type: self.event_type,
            resource_version: &self.resource_version,
            resource_version_num: self.resource_version_num,
            observed_at_ms: self.observed_at_ms,
            metadata: self.metadata.as_ref(),
            ip: None,
            subnet: None,
            pod: None,
            raw_object: self.raw_object.as_deref(),
            remediation: self.remediation.as_deref(),
            ip_pool: None,
            ip_reservation: None,
            spider_ip_pool: None,
            spider_endpoint: None,
            node: None,
            calico_block: None,
            calico_handle: None,
            calico_affinity: None,
            calico_pool: None,
            cilium_node: None,
            cilium_endpoint: None,
        };
        match &self.part {
            None => {}
            Some(KindPart::Pod(p)) => wire.pod = Some(p),
            Some(KindPart::Ip(p)) => wire.ip = Some(p),
            Some(KindPart::Subnet(p)) => wire.subnet = Some(p),
            Some(KindPart::IpPool(p)) => wire.ip_pool = Some(p),
            Some(KindPart::IpReservation(p)) => wire.ip_reservation = Some(p),
            Some(KindPart::SpiderIpPool(p)) => wire.spider_ip_pool = Some(p),
            Some(KindPart::SpiderEndpoint(p)) => wire.spider_endpoint = Some(p),
            Some(KindPart::Node(p)) => wire.node = Some(p),
            Some(KindPart::CalicoBlock(p)) => wire.calico_block = Some(p),
            Some(KindPart::CalicoHandle(p)) => wire.calico_handle = Some(p),
            Some(KindPart::CalicoAffinity(p)) => wire.calico_affinity = Some(p),
            Some(KindPart::CalicoPool(p)) => wire.calico_pool = Some(p),
            Some(KindPart::CiliumNode(p)) => wire.cilium_node = Some(p),
            Some(KindPart::CiliumEndpoint(p)) => wire.cilium_endpoint = Some(p),
        }
        wire.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for WatchEvent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let part = match wire.stream {
            Stream::Pod => wire.pod.map(|p| KindPart::Pod(Box::new(p))),
            Stream::Ip => wire.ip.map(|p| KindPart::Ip(Box::new(p))),
            Stream::Subnet => wire.subnet.map(|p| KindPart::Subnet(Box::new(p))),
            Stream::IpPool => wire.ip_pool.map(|p| KindPart::IpPool(Box::new(p))),
            Stream::OverlappingRangeIpReservation => wire
                .ip_reservation
                .map(|p| KindPart::IpReservation(Box::new(p))),
            Stream::SpiderIpPool => wire
                .spider_ip_pool
                .map(|p| KindPart::SpiderIpPool(Box::new(p))),
            Stream::SpiderEndpoint => wire
                .spider_endpoint
                .map(|p| KindPart::SpiderEndpoint(Box::new(p))),
            Stream::Node => wire.node.map(|p| KindPart::Node(Box::new(p))),
            Stream::CalicoIpamBlock | Stream::CalicoV3IpamBlock => wire
                .calico_block
                .map(|p| KindPart::CalicoBlock(Box::new(p))),
            Stream::CalicoIpamHandle | Stream::CalicoV3IpamHandle => wire
                .calico_handle
                .map(|p| KindPart::CalicoHandle(Box::new(p))),
            Stream::CalicoBlockAffinity | Stream::CalicoV3BlockAffinity => wire
                .calico_affinity
                .map(|p| KindPart::CalicoAffinity(Box::new(p))),
            Stream::CalicoIpPool | Stream::CalicoV3IpPool => {
                wire.calico_pool.map(|p| KindPart::CalicoPool(Box::new(p)))
            }
            Stream::CiliumNode => wire.cilium_node.map(|p| KindPart::CiliumNode(Box::new(p))),
            Stream::CiliumEndpoint => wire
                .cilium_endpoint
                .map(|p| KindPart::CiliumEndpoint(Box::new(p))),
            Stream::Unknown => None,
        };
        Ok(WatchEvent {
            cluster_id: wire.cluster_id,
            collector_id: wire.collector_id,
            sequence: wire.sequence,
            stream: wire.stream,
            event_type: wire.event_type,
            resource_version: wire.resource_version,
            resource_version_num: wire.resource_version_num,
            observed_at_ms: wire.observed_at_ms,
            metadata: wire.metadata,
            part,
            raw_object: wire.raw_object,
            remediation: wire.remediation.map(Box::new),
        })
    }
}
