//! The cluster as the events say it is: live IPs, Subnets and Pods with the few fields the
//! rules need, an index of IPs by the subnets they name, and what the last deletion of each
//! subnet was. Each object only moves forward: an event older than what is held is ignored.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use ipaudit_schemas::{is_kube_ovn_finalizer, EventType, Stream, WatchEvent};

/// A pointer to the event that last touched an object, for evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRef {
    /// Stream of the event.
    pub stream: Stream,
    /// Its type.
    pub event_type: EventType,
    /// Object name (`namespace/name` for pods).
    pub name: String,
    /// Its resourceVersion as sent.
    pub resource_version: String,
    /// Numeric resourceVersion, for ordering evidence.
    pub rv: i64,
    /// Event time.
    pub time_ms: Option<i64>,
}

impl EventRef {
    /// Points at `event`.
    pub fn of(event: &WatchEvent) -> Self {
        EventRef {
            stream: event.stream,
            event_type: event.event_type,
            name: event.object_key(),
            resource_version: event.resource_version.clone(),
            rv: event.resource_version_num.unwrap_or(-1),
            time_ms: event.event_time_ms(),
        }
    }
}

/// A live kube-ovn IP.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IpRecord {
    /// metadata.uid.
    pub uid: String,
    /// Latest resourceVersion.
    pub rv: i64,
    /// The same, as sent.
    pub resource_version: String,
    /// spec.subnet.
    pub subnet: String,
    /// spec.attachSubnets.
    pub attach_subnets: Vec<String>,
    /// metadata.finalizers.
    pub finalizers: Vec<String>,
    /// metadata.deletionTimestamp.
    pub deletion_ms: Option<i64>,
    /// `namespace/pod` the IP belongs to.
    pub pod: String,
    /// spec.podType.
    pub pod_type: String,
    /// spec.ipAddress.
    pub address: String,
    /// The first event that showed a deletionTimestamp.
    pub deletion_requested: Option<EventRef>,
    /// The latest event.
    pub last: EventRef,
}

impl IpRecord {
    /// Every subnet the IP names: spec.subnet, then the attachment subnets.
    pub fn subnets(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.subnet.as_str())
            .chain(self.attach_subnets.iter().map(String::as_str))
            .filter(|s| !s.is_empty())
    }

    /// kube-ovn's finalizer (either name) and its index, if the IP still has it.
    pub fn kube_ovn_finalizer(&self) -> Option<(usize, &str)> {
        self.finalizers
            .iter()
            .enumerate()
            .find(|(_, f)| is_kube_ovn_finalizer(f))
            .map(|(i, f)| (i, f.as_str()))
    }
}

/// A live kube-ovn Subnet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubnetRecord {
    /// metadata.uid.
    pub uid: String,
    /// Latest resourceVersion.
    pub rv: i64,
    /// The same, as sent.
    pub resource_version: String,
    /// metadata.finalizers.
    pub finalizers: Vec<String>,
    /// metadata.deletionTimestamp.
    pub deletion_ms: Option<i64>,
    /// status.v4usingIPs (decimal text).
    pub v4_using_ips: Option<String>,
    /// status.v6usingIPs (decimal text).
    pub v6_using_ips: Option<String>,
    /// The first event that showed a deletionTimestamp.
    pub deletion_requested: Option<EventRef>,
    /// The latest event.
    pub last: EventRef,
}

/// A live Pod.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PodRecord {
    /// metadata.uid.
    pub uid: String,
    /// Latest resourceVersion.
    pub rv: i64,
    /// status.phase.
    pub phase: String,
    /// The latest event.
    pub last: EventRef,
}

/// An object taken out of the state.
#[derive(Debug, Clone)]
pub enum Removed {
    /// An IP.
    Ip(IpRecord),
    /// A Subnet.
    Subnet(SubnetRecord),
    /// A Pod.
    Pod(PodRecord),
}

/// What applying one event did.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The object is live after the event (it was added or changed).
    pub upserted: bool,
    /// The object that the event removed, or that a new object of the same name replaced.
    pub removed: Option<Removed>,
    /// The event was older than what the state holds and changed nothing.
    pub stale: bool,
}

const TOMBSTONES: usize = 65_536;

/// The cluster's live objects.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ClusterState {
    ips: HashMap<String, IpRecord>,
    subnets: HashMap<String, SubnetRecord>,
    pods: HashMap<String, PodRecord>,
    ips_by_subnet: HashMap<String, HashSet<String>>,
    subnet_deletions: HashMap<String, EventRef>,
    listed_streams: HashSet<Stream>,
    tombstones: HashMap<String, i64>,
    tombstone_order: VecDeque<String>,
}

impl ClusterState {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    /// The live IP of this name.
    pub fn ip(&self, name: &str) -> Option<&IpRecord> {
        self.ips.get(name)
    }

    /// The live Subnet of this name.
    pub fn subnet(&self, name: &str) -> Option<&SubnetRecord> {
        self.subnets.get(name)
    }

    /// Live IPs, Subnets and Pods.
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.ips.len(), self.subnets.len(), self.pods.len())
    }

    /// Names of the live IPs that name `subnet` (spec.subnet or an attachment subnet).
    pub fn ips_naming(&self, subnet: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .ips_by_subnet
            .get(subnet)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Names of the live IPs that have a deletionTimestamp, sorted.
    pub fn terminating_ips(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .ips
            .iter()
            .filter(|(_, ip)| ip.deletion_ms.is_some())
            .map(|(name, _)| name.clone())
            .collect();
        names.sort();
        names
    }

    /// The event that deleted `subnet` last, if it is gone.
    pub fn subnet_deletion(&self, subnet: &str) -> Option<&EventRef> {
        self.subnet_deletions.get(subnet)
    }

    /// Whether the subnet is certainly not there: its deletion was seen, or a complete
    /// list of subnets (a relist, `SYNC_END`) did not have it.
    pub fn subnet_known_gone(&self, name: &str) -> bool {
        !self.subnets.contains_key(name)
            && (self.subnet_deletions.contains_key(name)
                || self.listed_streams.contains(&Stream::Subnet))
    }

    /// Applies one event, in resourceVersion order.
    pub fn apply(&mut self, event: WatchEvent) -> Applied {
        if event.event_type == EventType::SyncEnd {
            self.listed_streams.insert(event.stream);
        }
        if !event.event_type.carries_object() {
            return Applied::default();
        }
        let rv = event.resource_version_num.unwrap_or(-1);
        let uid = event.uid();
        if self.tombstones.get(uid).is_some_and(|dead| rv <= *dead) {
            return Applied {
                stale: true,
                ..Applied::default()
            };
        }
        let name = event.object_key();
        let (held_uid, held_rv) = match self.held(event.stream, &name) {
            Some((u, r)) => (Some(u), r),
            None => (None, -1),
        };
        let same_object = held_uid.as_deref() == Some(uid);
        if same_object && rv <= held_rv {
            return Applied {
                stale: true,
                ..Applied::default()
            };
        }
        if event.event_type.is_deletion() {
            if held_uid.is_some() && !same_object {
                // The deletion of an object this state never held under this name.
                return Applied {
                    stale: true,
                    ..Applied::default()
                };
            }
            self.bury(uid, rv);
            let removed = self.remove(event.stream, &name);
            if event.stream == Stream::Subnet {
                self.subnet_deletions.insert(name, EventRef::of(&event));
            }
            return Applied {
                removed,
                ..Applied::default()
            };
        }
        // A new uid under a held name: the old object is gone even if its deletion was missed.
        let removed = if held_uid.is_some() && !same_object {
            self.remove(event.stream, &name)
        } else {
            None
        };
        self.upsert(event, name);
        Applied {
            upserted: true,
            removed,
            stale: false,
        }
    }

    fn held(&self, stream: Stream, name: &str) -> Option<(String, i64)> {
        match stream {
            Stream::Ip => self.ips.get(name).map(|r| (r.uid.clone(), r.rv)),
            Stream::Subnet => self.subnets.get(name).map(|r| (r.uid.clone(), r.rv)),
            Stream::Pod => self.pods.get(name).map(|r| (r.uid.clone(), r.rv)),
        }
    }

    fn bury(&mut self, uid: &str, rv: i64) {
        if uid.is_empty() {
            return;
        }
        if self.tombstone_order.len() == TOMBSTONES {
            if let Some(oldest) = self.tombstone_order.pop_front() {
                self.tombstones.remove(&oldest);
            }
        }
        self.tombstone_order.push_back(uid.to_owned());
        self.tombstones.insert(uid.to_owned(), rv);
    }

    fn remove(&mut self, stream: Stream, name: &str) -> Option<Removed> {
        match stream {
            Stream::Ip => {
                let record = self.ips.remove(name)?;
                self.unindex_ip(name, &record);
                Some(Removed::Ip(record))
            }
            Stream::Subnet => self.subnets.remove(name).map(Removed::Subnet),
            Stream::Pod => self.pods.remove(name).map(Removed::Pod),
        }
    }

    fn unindex_ip(&mut self, name: &str, record: &IpRecord) {
        for subnet in record.subnets() {
            if let Some(set) = self.ips_by_subnet.get_mut(subnet) {
                set.remove(name);
                if set.is_empty() {
                    self.ips_by_subnet.remove(subnet);
                }
            }
        }
    }

    fn upsert(&mut self, mut event: WatchEvent, name: String) {
        let last = EventRef::of(&event);
        let rv = last.rv;
        let meta = event.metadata.take().unwrap_or_default();
        let deletion_ref = meta.deletion_timestamp_ms.map(|_| last.clone());
        match event.stream {
            Stream::Ip => {
                let spec = event.ip.take().unwrap_or_default();
                let previous = self.ips.remove(&name);
                if let Some(previous) = &previous {
                    self.unindex_ip(&name, previous);
                }
                let record = IpRecord {
                    uid: meta.uid,
                    rv,
                    resource_version: event.resource_version,
                    subnet: spec.subnet,
                    attach_subnets: spec.attach_subnets,
                    finalizers: meta.finalizers,
                    deletion_ms: meta.deletion_timestamp_ms,
                    pod: if spec.pod_name.is_empty() {
                        String::new()
                    } else {
                        format!("{}/{}", spec.pod_namespace, spec.pod_name)
                    },
                    pod_type: spec.pod_type,
                    address: spec.ip_address,
                    deletion_requested: previous
                        .as_ref()
                        .and_then(|p| p.deletion_requested.clone())
                        .or(deletion_ref),
                    last,
                };
                for subnet in record.subnets() {
                    self.ips_by_subnet
                        .entry(subnet.to_owned())
                        .or_default()
                        .insert(name.clone());
                }
                self.ips.insert(name, record);
            }
            Stream::Subnet => {
                let status = event.subnet.take().unwrap_or_default();
                let previous = self.subnets.remove(&name);
                self.subnet_deletions.remove(&name);
                let record = SubnetRecord {
                    uid: meta.uid,
                    rv,
                    resource_version: event.resource_version,
                    finalizers: meta.finalizers,
                    deletion_ms: meta.deletion_timestamp_ms,
                    v4_using_ips: status.v4_using_ips,
                    v6_using_ips: status.v6_using_ips,
                    deletion_requested: previous
                        .and_then(|p| p.deletion_requested)
                        .or(deletion_ref),
                    last,
                };
                self.subnets.insert(name, record);
            }
            Stream::Pod => {
                let pod = event.pod.take().unwrap_or_default();
                self.pods.insert(
                    name,
                    PodRecord {
                        uid: meta.uid,
                        rv,
                        phase: pod.phase,
                        last,
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::builders::EventBuilder;

    #[test]
    fn ips_are_indexed_by_every_subnet_they_name() {
        let mut state = ClusterState::new();
        state.apply(
            EventBuilder::ip("a", "s1")
                .attach_subnets(&["s2"])
                .rv(1)
                .added(),
        );
        state.apply(EventBuilder::ip("b", "s1").rv(2).added());
        assert_eq!(state.ips_naming("s1"), ["a", "b"]);
        assert_eq!(state.ips_naming("s2"), ["a"]);
        state.apply(EventBuilder::ip("a", "s3").rv(3).modified());
        assert_eq!(state.ips_naming("s1"), ["b"]);
        assert_eq!(state.ips_naming("s3"), ["a"]);
        state.apply(EventBuilder::ip("b", "s1").rv(4).deleted());
        assert!(state.ips_naming("s1").is_empty());
    }

    #[test]
    fn an_older_version_of_an_object_changes_nothing() {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::ip("a", "s1").rv(5).added());
        let applied = state.apply(EventBuilder::ip("a", "s2").rv(4).modified());
        assert!(applied.stale);
        assert_eq!(state.ip("a").map(|r| r.subnet.as_str()), Some("s1"));
    }

    #[test]
    fn a_deleted_object_is_not_brought_back_by_a_late_event() {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::ip("a", "s1").rv(5).added());
        state.apply(EventBuilder::ip("a", "s1").rv(7).deleted());
        assert!(
            state
                .apply(EventBuilder::ip("a", "s1").rv(6).modified())
                .stale
        );
        assert!(state.ip("a").is_none());
    }

    #[test]
    fn a_recreated_object_replaces_the_old_one() {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::ip("a", "s1").uid("old").rv(5).added());
        let applied = state.apply(EventBuilder::ip("a", "s1").uid("new").rv(9).added());
        assert!(matches!(applied.removed, Some(Removed::Ip(ref r)) if r.uid == "old"));
        assert_eq!(state.ip("a").map(|r| r.uid.as_str()), Some("new"));
    }

    #[test]
    fn the_first_deletion_request_is_kept() {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::subnet("s").rv(1).added());
        state.apply(EventBuilder::subnet("s").rv(2).deleting(1000).modified());
        state.apply(EventBuilder::subnet("s").rv(3).deleting(1000).modified());
        let requested = state.subnet("s").and_then(|s| s.deletion_requested.clone());
        assert_eq!(requested.map(|r| r.rv), Some(2));
    }

    #[test]
    fn a_subnet_deletion_is_remembered_until_it_comes_back() {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::subnet("s").rv(1).added());
        state.apply(EventBuilder::subnet("s").rv(2).deleted());
        assert_eq!(state.subnet_deletion("s").map(|r| r.rv), Some(2));
        state.apply(EventBuilder::subnet("s").uid("again").rv(3).added());
        assert!(state.subnet_deletion("s").is_none());
    }
}
