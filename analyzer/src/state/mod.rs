//! The cluster as the events say it is: the live objects of every watched kind, one store
//! per stream, and the indexes the rules share, built from the IPAM model in
//! [`holdings`]: which records name which pool, which records hold an address for which
//! owner, and who holds each address. Each object only moves forward: an event older
//! than what is held is ignored.

pub mod holdings;

use std::collections::VecDeque;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use ipaudit_schemas::{is_kube_ovn_finalizer, EventType, KindPart, Stream, WatchEvent};

pub use holdings::{Holding, PoolRef};

/// The label by which a person reserves a kube-ovn IP by hand.
const IP_RESERVED_LABEL: &str = "ovn.kubernetes.io/ip_reserved";

/// A pointer to the event that last touched an object, for evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRef {
    /// Stream of the event.
    pub stream: Stream,
    /// Its type.
    pub event_type: EventType,
    /// Object name (`namespace/name` for namespaced kinds).
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

/// A live object of any watched kind. Kept small: a cluster holds hundreds of thousands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectRecord {
    /// metadata.uid.
    pub uid: String,
    /// metadata.finalizers.
    pub finalizers: Vec<String>,
    /// metadata.deletionTimestamp.
    pub deletion_ms: Option<i64>,
    /// Labelled `ovn.kubernetes.io/ip_reserved: "true"` (reserved by hand).
    pub reserved: bool,
    /// The version this object (this uid) was first seen at.
    pub first_rv: i64,
    /// The time it was first seen at.
    pub first_ms: Option<i64>,
    /// The first event that showed a deletionTimestamp.
    pub deletion_requested: Option<Box<EventRef>>,
    /// The latest event: the object's current version.
    pub last: EventRef,
    /// What the kind's converter read (boxed: the largest kind's part would otherwise
    /// size every record).
    part: Box<KindPart>,
}

impl ObjectRecord {
    /// What the kind's converter read.
    pub fn part(&self) -> &KindPart {
        &self.part
    }

    /// The object's resourceVersion, as sent.
    pub fn resource_version(&self) -> &str {
        &self.last.resource_version
    }

    /// The object's resourceVersion as a number (-1 when it is not one).
    pub fn rv(&self) -> i64 {
        self.last.rv
    }

    /// kube-ovn's finalizer (either name) and its index, if the object still has it.
    pub fn kube_ovn_finalizer(&self) -> Option<(usize, &str)> {
        self.finalizer_where(is_kube_ovn_finalizer)
    }

    /// The first finalizer that matches, with its index.
    pub fn finalizer_where(&self, matches: impl Fn(&str) -> bool) -> Option<(usize, &str)> {
        self.finalizers
            .iter()
            .enumerate()
            .find(|(_, f)| matches(f))
            .map(|(i, f)| (i, f.as_str()))
    }

    /// Whether deletion was requested.
    pub fn is_terminating(&self) -> bool {
        self.deletion_ms.is_some()
    }

    /// The pod's phase, for Pod records.
    pub fn phase(&self) -> Option<&str> {
        match self.part() {
            KindPart::Pod(pod) => Some(pod.phase.as_str()),
            _ => None,
        }
    }

    /// Whether a Pod record is live: it exists and has not finished (a terminating pod
    /// still holds its address).
    pub fn is_live_pod(&self) -> bool {
        !matches!(self.phase(), Some("Succeeded" | "Failed") | None)
    }
}

/// A record, by stream and name.
pub type RecordKey = (Stream, String);

/// The records behind one index entry: nearly always one (an address has one holder, an
/// owner one record per kind), so they live inline.
type Holders = SmallVec<[RecordKey; 1]>;

/// A holding that a record no longer holds, with the owner uid it belonged to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// What was held.
    pub holding: Holding,
    /// The owner's uid: the record's, or the one bound when the holding appeared.
    pub owner_uid: Option<String>,
}

/// What applying one event did.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The object is live after the event (it was added or changed).
    pub upserted: bool,
    /// The record held under this name before the event: the previous version, the
    /// deleted object, or the object a new uid replaced.
    pub before: Option<ObjectRecord>,
    /// Holdings the record had before and has no more.
    pub released: Vec<Released>,
    /// What the record names or holds may have changed (its part did).
    pub reindexed: bool,
    /// The event was older than what the state holds and changed nothing.
    pub stale: bool,
}

/// A pod that is gone, and the event that says so.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Gone {
    /// Its uid.
    pub uid: String,
    /// Its DELETED event, or the event of the pod that replaced it under its name.
    pub at: EventRef,
}

const TOMBSTONES: usize = 65_536;
const GONE_PODS: usize = 65_536;

/// The cluster's live objects and the indexes over them.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ClusterState {
    objects: HashMap<Stream, HashMap<String, ObjectRecord>>,
    /// Records (IPs, SpiderEndpoints) by the pools they name.
    #[serde(with = "pairs")]
    naming: HashMap<PoolRef, HashSet<RecordKey>>,
    /// IPAM records by the owners they hold addresses for.
    by_owner: HashMap<String, Holders>,
    /// Records and pods by the addresses they hold.
    by_address: HashMap<String, Holders>,
    /// whereabouts holdings carry no uid: the owner uid bound when they appeared.
    #[serde(with = "pairs")]
    bindings: HashMap<(RecordKey, String), String>,
    /// The last deletion of each pool name.
    #[serde(with = "pairs")]
    pool_deletions: HashMap<PoolRef, EventRef>,
    /// The first complete list of each stream (`SYNC_END`).
    listed: HashMap<Stream, EventRef>,
    /// Recently gone pods by `namespace/name` (bounded; the latest per name).
    gone_pods: HashMap<String, Gone>,
    /// Names in the order they went, with the version that made them gone.
    gone_order: VecDeque<(String, i64)>,
    tombstones: HashMap<String, i64>,
    tombstone_order: VecDeque<String>,
}

impl ClusterState {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    /// The live record `name` of `stream`.
    pub fn get(&self, stream: Stream, name: &str) -> Option<&ObjectRecord> {
        self.objects.get(&stream)?.get(name)
    }

    /// The live records of `stream`, in no order.
    pub fn records(&self, stream: Stream) -> impl Iterator<Item = (&String, &ObjectRecord)> {
        self.objects.get(&stream).into_iter().flatten()
    }

    /// Live objects per stream.
    pub fn counts(&self) -> Vec<(Stream, usize)> {
        let mut counts: Vec<(Stream, usize)> =
            self.objects.iter().map(|(s, m)| (*s, m.len())).collect();
        counts.sort();
        counts
    }

    /// The live pool.
    pub fn pool(&self, pool: &PoolRef) -> Option<&ObjectRecord> {
        self.get(pool.stream, &pool.name)
    }

    /// Records naming `pool`, sorted.
    pub fn naming(&self, pool: &PoolRef) -> Vec<RecordKey> {
        let mut keys: Vec<RecordKey> = self
            .naming
            .get(pool)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    }

    /// Pools named by some record, sorted.
    pub fn named_pools(&self) -> Vec<PoolRef> {
        let mut pools: Vec<PoolRef> = self.naming.keys().cloned().collect();
        pools.sort();
        pools
    }

    /// The event that deleted `pool` last, if it is gone.
    pub fn pool_deletion(&self, pool: &PoolRef) -> Option<&EventRef> {
        self.pool_deletions.get(pool)
    }

    /// The first complete list of `stream`, if one was seen.
    pub fn listed(&self, stream: Stream) -> Option<&EventRef> {
        self.listed.get(&stream)
    }

    /// Whether the pool is certainly not there: its deletion was seen, or a complete list
    /// of its kind did not have it.
    pub fn pool_known_gone(&self, pool: &PoolRef) -> bool {
        self.pool(pool).is_none()
            && (self.pool_deletions.contains_key(pool) || self.listed.contains_key(&pool.stream))
    }

    /// IPAM records holding addresses for `owner` (`namespace/name`), sorted.
    pub fn held_for(&self, owner: &str) -> Vec<RecordKey> {
        let mut keys: Vec<RecordKey> = self
            .by_owner
            .get(owner)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    }

    /// Records and pods holding `address`, sorted.
    pub fn holders_of(&self, address: &str) -> Vec<RecordKey> {
        let mut keys: Vec<RecordKey> = self
            .by_address
            .get(address)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    }

    /// What the record holds now.
    pub fn holdings_of(&self, key: &RecordKey) -> Vec<Holding> {
        self.get(key.0, &key.1)
            .map(|r| holdings::holdings(&key.1, r.part(), r.reserved))
            .unwrap_or_default()
    }

    /// The owner uid of a holding: the record's, or the one bound when it appeared.
    pub fn owner_uid<'a>(&'a self, record: &RecordKey, holding: &'a Holding) -> Option<&'a str> {
        holding.owner_uid.as_deref().or_else(|| {
            self.bindings
                .get(&(record.clone(), holding.address.clone()))
                .map(String::as_str)
        })
    }

    /// The live Pod `namespace/name`.
    pub fn pod(&self, name: &str) -> Option<&ObjectRecord> {
        self.get(Stream::Pod, name)
    }

    /// Since when the owner pod (by name, and uid when known) is gone: `None` while it
    /// exists, or when nothing says it is gone (no deletion seen, no complete list).
    pub fn owner_gone_since(&self, owner: &str, uid: Option<&str>) -> Option<&EventRef> {
        let gone = self
            .gone_pods
            .get(owner)
            .filter(|g| uid.is_none_or(|u| u == g.uid));
        match self.pod(owner) {
            Some(pod) if uid.is_none_or(|u| u == pod.uid) => None,
            // A pod of that name with another uid replaced it.
            Some(_) => gone.map(|g| &g.at).or(self.listed.get(&Stream::Pod)),
            None => gone.map(|g| &g.at).or(self.listed.get(&Stream::Pod)),
        }
    }

    /// Whether the owner of a holding keeps its address on purpose: the record says so,
    /// or its SpiderEndpoint (named after the pod or the VM) does.
    pub fn is_kept(&self, holding: &Holding) -> bool {
        holding.kept
            || self
                .get(Stream::SpiderEndpoint, &holding.owner)
                .is_some_and(|endpoint| match endpoint.part() {
                    KindPart::SpiderEndpoint(e) => {
                        holdings::spiderpool_kept(&e.owner_controller_type)
                    }
                    _ => false,
                })
    }

    /// Applies one event, in resourceVersion order.
    pub fn apply(&mut self, event: WatchEvent) -> Applied {
        if event.event_type == EventType::SyncEnd {
            self.listed
                .entry(event.stream)
                .or_insert_with(|| EventRef::of(&event));
        }
        if !event.event_type.carries_object() || event.stream == Stream::Unknown {
            return Applied::default();
        }
        let rv = event.resource_version_num.unwrap_or(-1);
        let uid = event.uid();
        if self.tombstones.get(uid).is_some_and(|dead| rv <= *dead) {
            return stale();
        }
        let name = event.object_key();
        let held = self
            .get(event.stream, &name)
            .map(|r| (r.uid.clone(), r.rv()));
        let same_object = held.as_ref().is_some_and(|(u, _)| u == uid);
        if same_object && held.as_ref().is_some_and(|(_, r)| rv <= *r) {
            return stale();
        }
        let stream = event.stream;
        if event.event_type.is_deletion() {
            if held.is_some() && !same_object {
                // The deletion of an object this state never held under this name.
                return stale();
            }
            self.bury(uid, rv);
            let at = EventRef::of(&event);
            if holdings::is_pool(stream) {
                self.pool_deletions
                    .insert(PoolRef::new(stream, &name), at.clone());
            }
            if stream == Stream::Pod {
                self.remember_gone_pod(&name, uid, at);
            }
            let before = self.objects.entry(stream).or_default().remove(&name);
            let released = match &before {
                Some(record) => self.unindex(&(stream, name), record, None),
                None => Vec::new(),
            };
            return Applied {
                before,
                released,
                reindexed: true,
                ..Applied::default()
            };
        }
        let record = self.record_of(event, &name, held.is_some() && same_object);
        if let (Some((old_uid, _)), false) = (&held, same_object) {
            if stream == Stream::Pod {
                // A new uid under a held name: the old pod is gone even if its deletion
                // was missed.
                let old_uid = old_uid.clone();
                self.remember_gone_pod(&name, &old_uid, record.last.clone());
            }
        }
        if holdings::is_pool(stream) {
            self.pool_deletions.remove(&PoolRef::new(stream, &name));
        }
        let key = (stream, name);
        let before = self
            .objects
            .entry(stream)
            .or_default()
            .insert(key.1.clone(), record);
        let (reindexed, released) = self.reindex(&key, before.as_ref());
        Applied {
            upserted: true,
            before,
            released,
            reindexed,
            stale: false,
        }
    }

    /// The record for an upserted object; what the previous version of the same object
    /// knew (first sighting, first deletion request) carries over.
    fn record_of(&self, mut event: WatchEvent, name: &str, same_object: bool) -> ObjectRecord {
        let last = EventRef::of(&event);
        let meta = event.metadata.take().unwrap_or_default();
        let previous = same_object.then(|| self.get(event.stream, name)).flatten();
        let deletion_ref = meta.deletion_timestamp_ms.map(|_| Box::new(last.clone()));
        let part = event
            .part
            .take()
            .or_else(|| KindPart::empty(event.stream))
            .unwrap_or(KindPart::Pod(Default::default()));
        ObjectRecord {
            uid: meta.uid,
            finalizers: meta.finalizers,
            deletion_ms: meta.deletion_timestamp_ms,
            reserved: meta
                .labels
                .get(IP_RESERVED_LABEL)
                .is_some_and(|v| v == "true"),
            first_rv: previous.map_or(last.rv, |p| p.first_rv),
            first_ms: previous.map_or(last.time_ms, |p| p.first_ms),
            deletion_requested: previous
                .and_then(|p| p.deletion_requested.clone())
                .or(deletion_ref),
            part: Box::new(part),
            last,
        }
    }

    fn remember_gone_pod(&mut self, name: &str, uid: &str, at: EventRef) {
        if self.gone_order.len() == GONE_PODS {
            if let Some((oldest, rv)) = self.gone_order.pop_front() {
                // Only if that name did not go again since.
                if self.gone_pods.get(&oldest).is_some_and(|g| g.at.rv == rv) {
                    self.gone_pods.remove(&oldest);
                }
            }
        }
        self.gone_order.push_back((name.to_owned(), at.rv));
        self.gone_pods.insert(
            name.to_owned(),
            Gone {
                uid: uid.to_owned(),
                at,
            },
        );
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

    /// Updates the indexes from `before` to the record now under `key`; returns whether
    /// anything indexed may have changed, and what the record no longer holds.
    fn reindex(&mut self, key: &RecordKey, before: Option<&ObjectRecord>) -> (bool, Vec<Released>) {
        let Some(after) = self.get(key.0, &key.1) else {
            return (false, Vec::new());
        };
        let unchanged = before.is_some_and(|b| {
            b.uid == after.uid && b.reserved == after.reserved && b.part() == after.part()
        });
        if unchanged {
            // The common case (status churn): nothing an index holds changed.
            return (false, Vec::new());
        }
        let new_pools = holdings::pools_named(after.part());
        let new_holdings = holdings::holdings(&key.1, after.part(), after.reserved);
        let replaced = before.is_some_and(|b| b.uid != after.uid);
        let released = match before {
            Some(before) => {
                let keep = (!replaced).then_some(new_holdings.as_slice());
                self.unindex(key, before, keep)
            }
            None => Vec::new(),
        };
        for pool in new_pools {
            self.naming.entry(pool).or_default().insert(key.clone());
        }
        let record_holds = holdings::is_record_holding(key.0);
        for holding in &new_holdings {
            add_to(&mut self.by_address, &holding.address, key);
            if record_holds {
                add_to(&mut self.by_owner, &holding.owner, key);
            }
        }
        self.bind_new_holdings(key, &new_holdings);
        if key.0 == Stream::Pod {
            self.bind_holdings_to_pod(&key.1);
        }
        (true, released)
    }

    /// Takes `record`'s entries out of the indexes, except the holdings in `keep` (the
    /// ones the record's next version still has); returns the holdings it let go.
    fn unindex(
        &mut self,
        key: &RecordKey,
        record: &ObjectRecord,
        keep: Option<&[Holding]>,
    ) -> Vec<Released> {
        for pool in holdings::pools_named(record.part()) {
            if let Some(set) = self.naming.get_mut(&pool) {
                set.remove(key);
                if set.is_empty() {
                    self.naming.remove(&pool);
                }
            }
        }
        let old = holdings::holdings(&key.1, record.part(), record.reserved);
        let mut released = Vec::new();
        for holding in &old {
            remove_from(&mut self.by_address, &holding.address, key);
            remove_from(&mut self.by_owner, &holding.owner, key);
            let still_held = keep.is_some_and(|k| {
                k.iter()
                    .any(|h| h.address == holding.address && h.owner == holding.owner)
            });
            let bound = if still_held {
                None
            } else {
                self.bindings
                    .remove(&(key.clone(), holding.address.clone()))
            };
            if !still_held && holdings::is_record_holding(key.0) {
                released.push(Released {
                    owner_uid: holding.owner_uid.clone().or(bound),
                    holding: holding.clone(),
                });
            }
        }
        released
    }

    /// whereabouts holdings that just appeared belong to the live pod of their podref.
    fn bind_new_holdings(&mut self, key: &RecordKey, new: &[Holding]) {
        if !matches!(
            key.0,
            Stream::IpPool | Stream::OverlappingRangeIpReservation
        ) {
            return;
        }
        for holding in new {
            let binding = (key.clone(), holding.address.clone());
            if self.bindings.contains_key(&binding) {
                continue;
            }
            if let Some(pod) = self.pod(&holding.owner) {
                let uid = pod.uid.clone();
                self.bindings.insert(binding, uid);
            }
        }
    }

    /// A pod appeared or changed: whereabouts holdings of its name that found no pod yet
    /// are its; so are those bound to an earlier pod of its name whose address this pod
    /// shows in its network-status (a StatefulSet pod re-created under its name gets its
    /// allocation back, which whereabouts' own reconciler checks the same way).
    fn bind_holdings_to_pod(&mut self, pod_name: &str) {
        let records: Vec<RecordKey> = self
            .by_owner
            .get(pod_name)
            .into_iter()
            .flatten()
            .filter(|k| matches!(k.0, Stream::IpPool | Stream::OverlappingRangeIpReservation))
            .cloned()
            .collect();
        if records.is_empty() {
            return;
        }
        let Some(pod) = self.pod(pod_name) else {
            return;
        };
        let uid = pod.uid.clone();
        let shown: Vec<String> = holdings::holdings(pod_name, pod.part(), false)
            .into_iter()
            .map(|h| h.address)
            .collect();
        for record in records {
            for holding in self.holdings_of(&record) {
                if holding.owner != pod_name {
                    continue;
                }
                let shows_it = shown.contains(&holding.address);
                let binding = self
                    .bindings
                    .entry((record.clone(), holding.address))
                    .or_insert_with(|| uid.clone());
                if shows_it {
                    binding.clone_from(&uid);
                }
            }
        }
    }
}

fn stale() -> Applied {
    Applied {
        stale: true,
        ..Applied::default()
    }
}

fn add_to(index: &mut HashMap<String, Holders>, entry: &str, key: &RecordKey) {
    match index.get_mut(entry) {
        Some(holders) if holders.contains(key) => {}
        Some(holders) => holders.push(key.clone()),
        None => {
            index.insert(entry.to_owned(), SmallVec::from_elem(key.clone(), 1));
        }
    }
}

fn remove_from(index: &mut HashMap<String, Holders>, entry: &str, key: &RecordKey) {
    if let Some(holders) = index.get_mut(entry) {
        holders.retain(|k| k != key);
        if holders.is_empty() {
            index.remove(entry);
        }
    }
}

/// Maps whose keys are not strings, as lists of pairs (JSON objects need string keys).
mod pairs {
    use std::collections::HashMap;
    use std::hash::{BuildHasher, Hash};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<K, V, H, S>(map: &HashMap<K, V, H>, serializer: S) -> Result<S::Ok, S::Error>
    where
        K: Serialize,
        V: Serialize,
        S: Serializer,
    {
        serializer.collect_seq(map.iter())
    }

    pub fn deserialize<'de, K, V, H, D>(deserializer: D) -> Result<HashMap<K, V, H>, D::Error>
    where
        K: Deserialize<'de> + Eq + Hash,
        V: Deserialize<'de>,
        H: BuildHasher + Default,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(deserializer)?
            .into_iter()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::builders::EventBuilder;

    fn subnet(name: &str) -> PoolRef {
        PoolRef::new(Stream::Subnet, name)
    }

    fn ip_key(name: &str) -> RecordKey {
        (Stream::Ip, name.to_owned())
    }

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
        assert_eq!(state.naming(&subnet("s1")), [ip_key("a"), ip_key("b")]);
        assert_eq!(state.naming(&subnet("s2")), [ip_key("a")]);
        state.apply(EventBuilder::ip("a", "s3").rv(3).modified());
        assert_eq!(state.naming(&subnet("s1")), [ip_key("b")]);
        assert_eq!(state.naming(&subnet("s3")), [ip_key("a")]);
        state.apply(EventBuilder::ip("b", "s1").rv(4).deleted());
        assert!(state.naming(&subnet("s1")).is_empty());
    }

    #[test]
    fn an_older_version_of_an_object_changes_nothing() {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::ip("a", "s1").rv(5).added());
        let applied = state.apply(EventBuilder::ip("a", "s2").rv(4).modified());
        assert!(applied.stale);
        assert_eq!(state.naming(&subnet("s1")), [ip_key("a")]);
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
        assert!(state.get(Stream::Ip, "a").is_none());
    }

    #[test]
    fn a_recreated_object_replaces_the_old_one() {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::ip("a", "s1").uid("old").rv(5).added());
        let applied = state.apply(EventBuilder::ip("a", "s1").uid("new").rv(9).added());
        assert_eq!(applied.before.map(|r| r.uid), Some("old".to_owned()));
        assert_eq!(
            state.get(Stream::Ip, "a").map(|r| r.uid.as_str()),
            Some("new")
        );
    }

    #[test]
    fn the_first_deletion_request_and_first_sighting_are_kept() {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::subnet("s").rv(1).added());
        state.apply(EventBuilder::subnet("s").rv(2).deleting(1000).modified());
        state.apply(EventBuilder::subnet("s").rv(3).deleting(1000).modified());
        let record = state.get(Stream::Subnet, "s").unwrap();
        assert_eq!(record.deletion_requested.as_ref().map(|r| r.rv), Some(2));
        assert_eq!(record.rv(), 3);
        assert_eq!(record.first_rv, 1);
    }

    #[test]
    fn a_pool_deletion_is_remembered_until_it_comes_back() {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::subnet("s").rv(1).added());
        state.apply(EventBuilder::subnet("s").rv(2).deleted());
        assert_eq!(state.pool_deletion(&subnet("s")).map(|r| r.rv), Some(2));
        assert!(state.pool_known_gone(&subnet("s")));
        state.apply(EventBuilder::subnet("s").uid("again").rv(3).added());
        assert!(state.pool_deletion(&subnet("s")).is_none());
    }

    #[test]
    fn a_whereabouts_allocation_belongs_to_the_pod_that_existed_when_it_appeared() {
        let mut state = ClusterState::new();
        let pool = || EventBuilder::ip_pool("kube-system", "10.0.0.0-24", "10.0.0.0/24");
        state.apply(
            EventBuilder::pod("default", "web-2")
                .uid("web-2-a")
                .rv(1)
                .added(),
        );
        state.apply(
            pool()
                .allocation(47, "10.0.0.47", "default/web-2")
                .rv(2)
                .added(),
        );
        // The pod is replaced; the allocation stays the old pod's.
        state.apply(
            EventBuilder::pod("default", "web-2")
                .uid("web-2-b")
                .rv(3)
                .added(),
        );
        let applied = state.apply(pool().rv(4).modified());
        assert_eq!(applied.released.len(), 1);
        assert_eq!(applied.released[0].holding.address, "10.0.0.47");
        assert_eq!(applied.released[0].owner_uid.as_deref(), Some("web-2-a"));
    }

    #[test]
    fn an_allocation_without_its_pod_yet_belongs_to_the_next_pod_of_its_name() {
        let mut state = ClusterState::new();
        let record = (Stream::IpPool, "kube-system/10.0.0.0-24".to_owned());
        state.apply(
            EventBuilder::ip_pool("kube-system", "10.0.0.0-24", "10.0.0.0/24")
                .allocation(5, "10.0.0.5", "default/a")
                .rv(1)
                .added(),
        );
        let holding = state.holdings_of(&record).remove(0);
        assert_eq!(state.owner_uid(&record, &holding), None);
        state.apply(EventBuilder::pod("default", "a").uid("a-1").rv(2).added());
        assert_eq!(state.owner_uid(&record, &holding), Some("a-1"));
        assert_eq!(state.held_for("default/a"), std::slice::from_ref(&record));
        assert_eq!(state.holders_of("10.0.0.5"), [record]);
    }

    #[test]
    fn a_pod_recreated_under_its_name_that_shows_the_address_gets_the_allocation_back() {
        let mut state = ClusterState::new();
        let record = (Stream::IpPool, "kube-system/p".to_owned());
        state.apply(
            EventBuilder::pod("default", "web-0")
                .uid("w-1")
                .rv(1)
                .added(),
        );
        state.apply(
            EventBuilder::ip_pool("kube-system", "p", "10.0.0.0/24")
                .allocation(5, "10.0.0.5", "default/web-0")
                .rv(2)
                .added(),
        );
        state.apply(
            EventBuilder::pod("default", "web-0")
                .uid("w-1")
                .rv(3)
                .deleted(),
        );
        state.apply(
            EventBuilder::pod("default", "web-0")
                .uid("w-2")
                .phase("Pending")
                .rv(4)
                .added(),
        );
        let holding = state.holdings_of(&record).remove(0);
        assert_eq!(
            state.owner_uid(&record, &holding),
            Some("w-1"),
            "not yet: no network-status"
        );
        state.apply(
            EventBuilder::pod("default", "web-0")
                .uid("w-2")
                .network("default/net", "10.0.0.5")
                .rv(5)
                .modified(),
        );
        assert_eq!(state.owner_uid(&record, &holding), Some("w-2"));
    }

    #[test]
    fn a_pod_is_gone_since_its_deletion_or_since_a_list_that_lacked_it() {
        let mut state = ClusterState::new();
        assert!(
            state.owner_gone_since("default/x", None).is_none(),
            "nothing known"
        );
        state.apply(
            EventBuilder::pod("default", "a")
                .uid("a-1")
                .rv(1)
                .at(10)
                .added(),
        );
        state.apply(
            EventBuilder::pod("default", "a")
                .uid("a-1")
                .rv(2)
                .at(20)
                .deleted(),
        );
        assert_eq!(
            state
                .owner_gone_since("default/a", Some("a-1"))
                .map(|e| e.rv),
            Some(2)
        );
        let mut end = EventBuilder::marker(Stream::Pod, EventType::SyncEnd, 3);
        end.observed_at_ms = Some(30);
        state.apply(end);
        assert_eq!(
            state.owner_gone_since("default/x", None).map(|e| e.rv),
            Some(3)
        );
        state.apply(
            EventBuilder::pod("default", "a")
                .uid("a-2")
                .rv(4)
                .at(40)
                .added(),
        );
        assert!(state.owner_gone_since("default/a", None).is_none());
        assert_eq!(
            state
                .owner_gone_since("default/a", Some("a-1"))
                .map(|e| e.rv),
            Some(2)
        );
    }

    #[test]
    fn the_state_survives_a_checkpoint() {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::pod("default", "a").uid("a-1").rv(1).added());
        state.apply(
            EventBuilder::ip_pool("kube-system", "p", "10.0.0.0/24")
                .allocation(5, "10.0.0.5", "default/a")
                .rv(2)
                .added(),
        );
        state.apply(EventBuilder::ip("x", "s").rv(3).added());
        let json = serde_json::to_string(&state).unwrap();
        let back: ClusterState = serde_json::from_str(&json).unwrap();
        let record = (Stream::IpPool, "kube-system/p".to_owned());
        let holding = back.holdings_of(&record).remove(0);
        assert_eq!(back.owner_uid(&record, &holding), Some("a-1"));
        assert_eq!(back.naming(&subnet("s")), [ip_key("x")]);
    }
}
