//! `WatchEvent`: one watch event of a Pod, kube-ovn IP or Subnet, as the collector saw it.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The watch stream, one per watched kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Stream {
    /// core/v1 Pods.
    Pod,
    /// kubeovn.io/v1 IPs.
    Ip,
    /// kubeovn.io/v1 Subnets.
    Subnet,
}

impl Stream {
    /// Every stream, in schema order.
    pub const ALL: [Stream; 3] = [Stream::Pod, Stream::Ip, Stream::Subnet];

    /// The Kubernetes kind of the stream's objects.
    pub fn kind(self) -> &'static str {
        match self {
            Stream::Pod => "Pod",
            Stream::Ip => "IP",
            Stream::Subnet => "Subnet",
        }
    }

    /// The stream of a Kubernetes kind, if ipaudit watches it.
    pub fn from_kind(kind: &str) -> Option<Stream> {
        match kind {
            "Pod" => Some(Stream::Pod),
            "IP" => Some(Stream::Ip),
            "Subnet" => Some(Stream::Subnet),
            _ => None,
        }
    }

    /// Lower-case name, as used in metric labels and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Pod => "pod",
            Stream::Ip => "ip",
            Stream::Subnet => "subnet",
        }
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

/// One watch event (the Avro record `io.ipaudit.WatchEvent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Set when `stream` is IP.
    pub ip: Option<IpInfo>,
    /// Set when `stream` is SUBNET.
    pub subnet: Option<SubnetInfo>,
    /// Set when `stream` is POD.
    pub pod: Option<PodInfo>,
    /// The object as JSON, when raw capture is on (schema v2).
    #[serde(default)]
    pub raw_object: Option<String>,
    /// Set on REMEDIATION events (schema v3).
    #[serde(default)]
    pub remediation: Option<Remediation>,
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
            ip: None,
            subnet: None,
            pod: None,
            raw_object: None,
            remediation: None,
        }
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
            m.deletion_timestamp_ms,
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
