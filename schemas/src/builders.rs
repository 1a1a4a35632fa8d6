//! Builders for events, so that tests, benchmarks and generators read like sentences:
//! `EventBuilder::ip("vm-1.ns", "subnet-x").rv(12).deleting(t).build(EventType::Modified)`.

use crate::event::{
    CalicoAffinityInfo, CalicoAllocation, CalicoBlockInfo, CalicoHandleBlock, CalicoHandleInfo,
    CiliumEndpointInfo, CiliumNodeInfo, CiliumUsedAddress, EventType, IpInfo, IpPoolAllocation,
    IpPoolInfo, IpReservationInfo, KindPart, NetworkStatus, ObjectMeta, PodInfo, SpiderAllocation,
    SpiderEndpointAddress, SpiderEndpointInfo, SpiderIpPoolInfo, Stream, SubnetInfo, WatchEvent,
};
use crate::{KUBE_OVN_FINALIZER, SPIDERPOOL_FINALIZER};

/// Builds one `WatchEvent` for an object.
#[derive(Debug, Clone)]
pub struct EventBuilder {
    event: WatchEvent,
}

impl EventBuilder {
    fn object(stream: Stream, name: &str) -> Self {
        let mut event = WatchEvent::new(stream, EventType::Added, "0");
        event.cluster_id = "test".into();
        event.collector_id = "builder".into();
        event.metadata = Some(ObjectMeta {
            uid: format!("uid-{}-{name}", stream.as_str()),
            name: name.to_owned(),
            ..ObjectMeta::default()
        });
        EventBuilder { event }
    }

    /// A kube-ovn IP on `subnet`, with kube-ovn's finalizer.
    pub fn ip(name: &str, subnet: &str) -> Self {
        let mut b = Self::object(Stream::Ip, name);
        b.meta().finalizers.push(KUBE_OVN_FINALIZER.into());
        b.meta()
            .labels
            .insert("ovn.kubernetes.io/subnet".into(), subnet.into());
        b.event.part = Some(KindPart::Ip(Box::new(IpInfo {
            subnet: subnet.to_owned(),
            ..IpInfo::default()
        })));
        b
    }

    /// A kube-ovn Subnet, with kube-ovn's finalizer.
    pub fn subnet(name: &str) -> Self {
        let mut b = Self::object(Stream::Subnet, name);
        b.meta().finalizers.push(KUBE_OVN_FINALIZER.into());
        b.event.part = Some(KindPart::Subnet(Box::new(SubnetInfo {
            v4_using_ips: Some("0".into()),
            ..SubnetInfo::default()
        })));
        b
    }

    /// A Pod in `namespace`.
    pub fn pod(namespace: &str, name: &str) -> Self {
        let mut b = Self::object(Stream::Pod, name);
        b.meta().namespace = Some(namespace.to_owned());
        b.event.part = Some(KindPart::Pod(Box::new(PodInfo {
            phase: "Running".into(),
            ..PodInfo::default()
        })));
        b
    }

    /// A whereabouts IPPool over `range` (a CIDR), in `namespace`, with no allocations.
    pub fn ip_pool(namespace: &str, name: &str, range: &str) -> Self {
        let mut b = Self::object(Stream::IpPool, name);
        b.meta().namespace = Some(namespace.to_owned());
        b.event.part = Some(KindPart::IpPool(Box::new(IpPoolInfo {
            range: range.to_owned(),
            allocations: Vec::new(),
        })));
        b
    }

    /// A whereabouts reservation of `address` for pod `podref` (`namespace/name`).
    pub fn reservation(namespace: &str, address: &str, podref: &str) -> Self {
        let mut b = Self::object(
            Stream::OverlappingRangeIpReservation,
            &address.replace(':', "-"),
        );
        b.meta().namespace = Some(namespace.to_owned());
        b.event.part = Some(KindPart::IpReservation(Box::new(IpReservationInfo {
            address: address.to_owned(),
            podref: podref.to_owned(),
            ..IpReservationInfo::default()
        })));
        b
    }

    /// A SpiderIPPool on `subnet` (a CIDR), with spiderpool's finalizer and no entries.
    pub fn spider_pool(name: &str, subnet: &str) -> Self {
        let mut b = Self::object(Stream::SpiderIpPool, name);
        b.meta().finalizers.push(SPIDERPOOL_FINALIZER.into());
        b.event.part = Some(KindPart::SpiderIpPool(Box::new(SpiderIpPoolInfo {
            subnet: subnet.to_owned(),
            ..SpiderIpPoolInfo::default()
        })));
        b
    }

    /// A SpiderEndpoint of pod `namespace/name` with uid `pod_uid`, with spiderpool's
    /// finalizer, owned by a Deployment.
    pub fn spider_endpoint(namespace: &str, name: &str, pod_uid: &str) -> Self {
        let mut b = Self::object(Stream::SpiderEndpoint, name);
        b.meta().namespace = Some(namespace.to_owned());
        b.meta().finalizers.push(SPIDERPOOL_FINALIZER.into());
        b.event.part = Some(KindPart::SpiderEndpoint(Box::new(SpiderEndpointInfo {
            pod_uid: pod_uid.to_owned(),
            owner_controller_type: "Deployment".into(),
            ..SpiderEndpointInfo::default()
        })));
        b
    }

    /// A core Node.
    pub fn node(name: &str) -> Self {
        let mut b = Self::object(Stream::Node, name);
        b.event.part = Some(KindPart::Node(Box::default()));
        b
    }

    /// A Calico IPAMBlock (crd.projectcalico.org/v1) over `cidr`, affine to `node`
    /// (`host:<node>`; none when empty), named as Calico names it, with no allocation.
    pub fn calico_block(cidr: &str, node: &str) -> Self {
        let name = cidr.replace(['.', ':', '/'], "-");
        let mut b = Self::object(Stream::CalicoIpamBlock, &name);
        b.event.part = Some(KindPart::CalicoBlock(Box::new(CalicoBlockInfo {
            cidr: cidr.to_owned(),
            affinity: if node.is_empty() {
                String::new()
            } else {
                format!("host:{node}")
            },
            ..CalicoBlockInfo::default()
        })));
        b
    }

    /// A Calico IPAMHandle of `handle_id`, named as Calico names it (lower case), holding
    /// `count` addresses of each block CIDR given.
    pub fn calico_handle(handle_id: &str, blocks: &[(&str, i64)]) -> Self {
        let mut b = Self::object(Stream::CalicoIpamHandle, &handle_id.to_lowercase());
        b.event.part = Some(KindPart::CalicoHandle(Box::new(CalicoHandleInfo {
            handle_id: handle_id.to_owned(),
            blocks: blocks
                .iter()
                .map(|(cidr, count)| CalicoHandleBlock {
                    cidr: (*cidr).to_owned(),
                    count: *count,
                })
                .collect(),
            deleted: false,
        })));
        b
    }

    /// A confirmed Calico BlockAffinity of `cidr` to `node`.
    pub fn calico_affinity(node: &str, cidr: &str) -> Self {
        let name = format!("{node}-{}", cidr.replace(['.', ':', '/'], "-"));
        let mut b = Self::object(Stream::CalicoBlockAffinity, &name);
        b.event.part = Some(KindPart::CalicoAffinity(Box::new(CalicoAffinityInfo {
            node: node.to_owned(),
            cidr: cidr.to_owned(),
            state: "confirmed".into(),
            r#type: "host".into(),
            deleted: false,
        })));
        b
    }

    /// A CiliumNode with `pod_cidrs` and no used address.
    pub fn cilium_node(name: &str, pod_cidrs: &[&str]) -> Self {
        let mut b = Self::object(Stream::CiliumNode, name);
        b.event.part = Some(KindPart::CiliumNode(Box::new(CiliumNodeInfo {
            pod_cidrs: pod_cidrs.iter().map(|c| (*c).to_owned()).collect(),
            ..CiliumNodeInfo::default()
        })));
        b
    }

    /// A CiliumEndpoint of pod `namespace/name` with `addresses`.
    pub fn cilium_endpoint(namespace: &str, name: &str, addresses: &[&str]) -> Self {
        let mut b = Self::object(Stream::CiliumEndpoint, name);
        b.meta().namespace = Some(namespace.to_owned());
        b.event.part = Some(KindPart::CiliumEndpoint(Box::new(CiliumEndpointInfo {
            addresses: addresses.iter().map(|a| (*a).to_owned()).collect(),
            pod: format!("{namespace}/{name}"),
            state: "ready".into(),
            ..CiliumEndpointInfo::default()
        })));
        b
    }

    /// A BOOKMARK on `stream`.
    pub fn bookmark(stream: Stream, rv: i64) -> WatchEvent {
        let mut event = WatchEvent::new(stream, EventType::Bookmark, &rv.to_string());
        event.cluster_id = "test".into();
        event.collector_id = "builder".into();
        event
    }

    /// A relist marker (`SYNC_START` or `SYNC_END`) on `stream`.
    pub fn marker(stream: Stream, event_type: EventType, rv: i64) -> WatchEvent {
        let mut event = Self::bookmark(stream, rv);
        event.event_type = event_type;
        event
    }

    fn meta(&mut self) -> &mut ObjectMeta {
        self.event.metadata.get_or_insert_with(ObjectMeta::default)
    }

    /// Sets the uid.
    pub fn uid(mut self, uid: &str) -> Self {
        self.meta().uid = uid.to_owned();
        self
    }

    /// Sets the resourceVersion.
    pub fn rv(mut self, rv: i64) -> Self {
        self.event.resource_version = rv.to_string();
        self.event.resource_version_num = Some(rv);
        self
    }

    /// Sets the observation time.
    pub fn at(mut self, ms: i64) -> Self {
        self.event.observed_at_ms = Some(ms);
        self
    }

    /// Sets the deletionTimestamp.
    pub fn deleting(mut self, ms: i64) -> Self {
        self.meta().deletion_timestamp_ms = Some(ms);
        self
    }

    /// Replaces the finalizers.
    pub fn finalizers(mut self, finalizers: &[&str]) -> Self {
        self.meta().finalizers = finalizers.iter().map(|f| (*f).to_owned()).collect();
        self
    }

    /// Adds attachment subnets to an IP.
    pub fn attach_subnets(mut self, subnets: &[&str]) -> Self {
        if let Some(KindPart::Ip(ip)) = self.event.part.as_mut() {
            ip.attach_subnets = subnets.iter().map(|s| (*s).to_owned()).collect();
        }
        self
    }

    /// Sets an IP's pod, address and pod type.
    pub fn ip_of(
        mut self,
        pod_namespace: &str,
        pod_name: &str,
        address: &str,
        pod_type: &str,
    ) -> Self {
        if let Some(KindPart::Ip(ip)) = self.event.part.as_mut() {
            ip.pod_namespace = pod_namespace.to_owned();
            ip.pod_name = pod_name.to_owned();
            ip.ip_address = address.to_owned();
            ip.v4_ip_address = address.to_owned();
            ip.pod_type = pod_type.to_owned();
        }
        self
    }

    /// Sets a subnet's used-IP count.
    pub fn using_ips(mut self, count: u64) -> Self {
        if let Some(KindPart::Subnet(subnet)) = self.event.part.as_mut() {
            subnet.v4_using_ips = Some(count.to_string());
        }
        self
    }

    /// Sets a pod's phase.
    pub fn phase(mut self, phase: &str) -> Self {
        if let Some(KindPart::Pod(pod)) = self.event.part.as_mut() {
            pod.phase = phase.to_owned();
        }
        self
    }

    /// Adds an address on a network to a pod's network-status.
    pub fn network(mut self, network: &str, address: &str) -> Self {
        if let Some(KindPart::Pod(pod)) = self.event.part.as_mut() {
            pod.network_status.push(NetworkStatus {
                name: network.to_owned(),
                interface: format!("net{}", pod.network_status.len() + 1),
                ips: vec![address.to_owned()],
                ..NetworkStatus::default()
            });
        }
        self
    }

    /// Adds an owner reference (`kind`, `name`).
    pub fn owned_by(mut self, kind: &str, name: &str) -> Self {
        self.meta()
            .owner_references
            .push(crate::event::OwnerReference {
                api_version: "apps/v1".into(),
                kind: kind.to_owned(),
                name: name.to_owned(),
                uid: format!("uid-{name}"),
                controller: Some(true),
            });
        self
    }

    /// Adds an allocation to a whereabouts IPPool: `offset` in its range, for `podref`.
    pub fn allocation(mut self, offset: u32, address: &str, podref: &str) -> Self {
        if let Some(KindPart::IpPool(pool)) = self.event.part.as_mut() {
            pool.allocations.push(IpPoolAllocation {
                offset: offset.to_string(),
                address: address.to_owned(),
                container_id: format!("c-{offset}"),
                podref: podref.to_owned(),
                ifname: "net1".into(),
            });
        }
        self
    }

    /// Adds an entry to a SpiderIPPool: `address` for pod `pod` (`namespace/name`) with uid.
    pub fn entry(mut self, address: &str, pod: &str, pod_uid: &str) -> Self {
        if let Some(KindPart::SpiderIpPool(pool)) = self.event.part.as_mut() {
            pool.allocations.push(SpiderAllocation {
                address: address.to_owned(),
                pod: pod.to_owned(),
                pod_uid: pod_uid.to_owned(),
            });
            pool.allocated_ip_count = Some(pool.allocations.len() as i64);
        }
        self
    }

    /// Adds an address from `pool` to a SpiderEndpoint (`ipv4` with its prefix length).
    pub fn endpoint_ip(mut self, ipv4: &str, pool: &str) -> Self {
        if let Some(KindPart::SpiderEndpoint(endpoint)) = self.event.part.as_mut() {
            endpoint.addresses.push(SpiderEndpointAddress {
                interface: "eth0".into(),
                ipv4: ipv4.to_owned(),
                ipv4_pool: pool.to_owned(),
                ..SpiderEndpointAddress::default()
            });
        }
        self
    }

    /// Sets a SpiderEndpoint's owner controller type (`StatefulSet`, `VirtualMachineInstance`).
    pub fn owner_controller(mut self, kind: &str) -> Self {
        if let Some(KindPart::SpiderEndpoint(endpoint)) = self.event.part.as_mut() {
            endpoint.owner_controller_type = kind.to_owned();
        }
        self
    }

    /// Moves a Calico kind's event to the `projectcalico.org/v3` API group.
    pub fn in_calico_v3(mut self) -> Self {
        self.event.stream = match self.event.stream {
            Stream::CalicoIpamBlock => Stream::CalicoV3IpamBlock,
            Stream::CalicoIpamHandle => Stream::CalicoV3IpamHandle,
            Stream::CalicoBlockAffinity => Stream::CalicoV3BlockAffinity,
            Stream::CalicoIpPool => Stream::CalicoV3IpPool,
            stream => stream,
        };
        self
    }

    /// Makes a pod one on Calico's network: its sandbox `container_id` and its address.
    pub fn on_calico(mut self, container_id: &str, address: &str) -> Self {
        if let Some(KindPart::Pod(pod)) = self.event.part.as_mut() {
            pod.calico_container_id = container_id.to_owned();
            pod.pod_ips = vec![address.to_owned()];
        }
        self
    }

    /// Allocates ordinal `ordinal` of a Calico block (its address from the block's CIDR) to
    /// pod `pod` (`namespace/name`, or "" for none) under `handle_id`, at the block's next
    /// sequence number.
    pub fn calico_allocation(mut self, ordinal: u32, pod: &str, handle_id: &str) -> Self {
        if let Some(KindPart::CalicoBlock(block)) = self.event.part.as_mut() {
            block.sequence_number += 1;
            let address = calico_address(&block.cidr, ordinal);
            let (namespace, name) = pod.split_once('/').unwrap_or(("", ""));
            block.allocations.push(CalicoAllocation {
                ordinal: i64::from(ordinal),
                address,
                handle_id: handle_id.to_owned(),
                sequence_number: Some(block.sequence_number),
                namespace: namespace.to_owned(),
                pod: name.to_owned(),
                node: block
                    .affinity
                    .strip_prefix("host:")
                    .unwrap_or_default()
                    .to_owned(),
                ..CalicoAllocation::default()
            });
            block.allocations.sort_by_key(|a| a.ordinal);
        }
        self
    }

    /// Adds a used address of pod `owner` to a CiliumNode.
    pub fn cilium_used(mut self, address: &str, owner: &str) -> Self {
        if let Some(KindPart::CiliumNode(node)) = self.event.part.as_mut() {
            node.used.push(CiliumUsedAddress {
                address: address.to_owned(),
                owner: owner.to_owned(),
                resource: String::new(),
            });
            node.used.sort_by(|a, b| a.address.cmp(&b.address));
        }
        self
    }

    /// Soft-deletes a Calico object (`spec.deleted: true`).
    pub fn soft_deleted(mut self) -> Self {
        match self.event.part.as_mut() {
            Some(KindPart::CalicoBlock(block)) => block.deleted = true,
            Some(KindPart::CalicoHandle(handle)) => handle.deleted = true,
            Some(KindPart::CalicoAffinity(affinity)) => affinity.deleted = true,
            _ => {}
        }
        self
    }

    /// Sets the collector that saw the event.
    pub fn collector(mut self, collector_id: &str) -> Self {
        self.event.collector_id = collector_id.to_owned();
        self
    }

    /// The event, with this type.
    pub fn build(mut self, event_type: EventType) -> WatchEvent {
        self.event.event_type = event_type;
        self.event
    }

    /// Shorthands for the common types.
    pub fn added(self) -> WatchEvent {
        self.build(EventType::Added)
    }

    /// A MODIFIED event.
    pub fn modified(self) -> WatchEvent {
        self.build(EventType::Modified)
    }

    /// A DELETED event.
    pub fn deleted(self) -> WatchEvent {
        self.build(EventType::Deleted)
    }
}

/// The address of `ordinal` in an IPv4 block `cidr` (tests use IPv4 blocks).
fn calico_address(cidr: &str, ordinal: u32) -> String {
    let network: std::net::Ipv4Addr = cidr
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
    std::net::Ipv4Addr::from(u32::from(network).wrapping_add(ordinal)).to_string()
}

/// The kind of [`NextVersion`] that this build does not know.
pub const UNKNOWN_KIND: &str = "ANTREA_IP_POOL";
/// The field of [`NextVersion`] that this build does not know.
const UNKNOWN_FIELD: &str = "antrea_ip_pool";

/// A WatchEvent schema one version ahead of this build, for tests of what a newer collector
/// sends: today's schema with a kind this build does not know (`ANTREA_IP_POOL`, last of the
/// `Stream` symbols) and a field (`antrea_ip_pool`, an optional string).
pub struct NextVersion {
    /// The schema's JSON, as the collector publishes it.
    pub text: String,
    /// The parsed schema.
    pub schema: apache_avro::Schema,
    /// Its fingerprint, as its messages carry it.
    pub fingerprint: [u8; 8],
}

impl NextVersion {
    /// The synthetic next version.
    pub fn new() -> NextVersion {
        use crate::Record as _;
        let mut json: serde_json::Value =
            serde_json::from_str(WatchEvent::schemas().current().text)
                .expect("the bundled schema is JSON");
        let fields = json["fields"]
            .as_array_mut()
            .expect("a record schema has fields");
        if let Some(stream) = fields.iter_mut().find(|f| f["name"] == "stream") {
            if let Some(symbols) = stream["type"]["symbols"].as_array_mut() {
                symbols.push(UNKNOWN_KIND.into());
            }
        }
        fields.push(
            serde_json::json!({"name": UNKNOWN_FIELD, "type": ["null", "string"], "default": null}),
        );
        let text = json.to_string();
        let schema = apache_avro::Schema::parse_str(&text).expect("the next version parses");
        let fingerprint =
            crate::registry::fingerprint(&schema).expect("the next version has a canonical form");
        NextVersion {
            text,
            schema,
            fingerprint,
        }
    }

    /// `event`, single-object encoded with the next version (`antrea_ip_pool` unset).
    pub fn encode(&self, event: &WatchEvent) -> Vec<u8> {
        self.encode_value(self.value_of(event))
    }

    /// An `ANTREA_IP_POOL` event (a kind this build does not know) with `event`'s metadata
    /// and versions, single-object encoded with the next version.
    pub fn encode_unknown_kind(&self, event: &WatchEvent, pool: &str) -> Vec<u8> {
        use apache_avro::types::Value;
        let mut value = self.value_of(event);
        let unknown = self.stream_symbols() - 1;
        if let Value::Record(fields) = &mut value {
            for (name, v) in fields.iter_mut() {
                match name.as_str() {
                    "stream" => *v = Value::Enum(unknown, UNKNOWN_KIND.into()),
                    UNKNOWN_FIELD => *v = Value::Union(1, Box::new(Value::String(pool.to_owned()))),
                    // Every kind's part: none of today's.
                    "metadata"
                    | "raw_object"
                    | "remediation"
                    | "resource_version_num"
                    | "observed_at_ms" => {}
                    _ if matches!(v, Value::Union(..)) => {
                        *v = Value::Union(0, Box::new(Value::Null))
                    }
                    _ => {}
                }
            }
        }
        self.encode_value(value)
    }

    fn stream_symbols(&self) -> u32 {
        match &self.schema {
            apache_avro::Schema::Record(record) => record
                .fields
                .iter()
                .find(|f| f.name == "stream")
                .and_then(|f| match &f.schema {
                    apache_avro::Schema::Enum(e) => u32::try_from(e.symbols.len()).ok(),
                    _ => None,
                })
                .expect("the next version has the stream enum"),
            _ => unreachable!("the next version is a record"),
        }
    }

    fn value_of(&self, event: &WatchEvent) -> apache_avro::types::Value {
        use apache_avro::types::Value;
        let mut value = apache_avro::to_value(event).expect("an event converts to a value");
        if let Value::Record(fields) = &mut value {
            fields.push((UNKNOWN_FIELD.into(), Value::Union(0, Box::new(Value::Null))));
        }
        value
            .resolve(&self.schema)
            .expect("an event of today resolves to the next version")
    }

    fn encode_value(&self, value: apache_avro::types::Value) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(&crate::message::MAGIC);
        out.extend_from_slice(&self.fingerprint);
        apache_avro::writer::datum::GenericDatumWriter::builder(&self.schema)
            .build()
            .and_then(|writer| writer.write_value_ref(&mut out, &value))
            .expect("the value fits the schema");
        out
    }
}

impl Default for NextVersion {
    fn default() -> Self {
        NextVersion::new()
    }
}
