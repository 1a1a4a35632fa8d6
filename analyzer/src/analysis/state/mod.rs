//! The cluster as the events say it is: the live objects of every watched kind, one store
//! per stream, and the indexes the rules share, built from the IPAM model in
//! [`holdings`]: which records name which pool, which records hold an address for which
//! owner, and who holds each address. Each object only moves forward: an event older
//! than what is held is ignored.
//!
//! The rooms: [`ClusterState`] and what the rules ask of it are here; a record and its
//! saved form are `object_record` (with `event_ref`, where it was last seen, and `part`,
//! what its kind says); applying an event is `apply`; what is remembered of what is gone
//! (tombstones, gone pods, pool deletions) is `memory`; the stores and indexes are
//! `records` (slots and `RecordId`s), `indexes`, `holder_index` and `holdings`.

mod apply;
pub mod calico;
mod event_ref;
mod finalizers;
mod holder_index;
pub mod holdings;
mod indexes;
mod memory;
mod millis;
mod name;
mod object_record;
mod part;
mod records;
mod shared;
mod uid;

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};

use ipaudit_schemas::Stream;

pub use event_ref::{EventRef, ResourceVersion};
pub use finalizers::Finalizers;
pub use holdings::{Holding, Holdings, PoolRef, Scope};
pub use indexes::ReleasedHolding;
pub use millis::Millis;
pub use name::Name;
pub use object_record::ObjectRecord;
pub use part::{CalicoBlockPart, IpPart, Part, PodPart};
pub use uid::{Uid, UidText};

use holder_index::HolderIds;
use indexes::{binds_owner_uid, Indexes, SavedIndexes};
use records::Objects;
use records::RecordId;
pub use records::Slot;

/// The label by which a person reserves a kube-ovn IP by hand.
pub(crate) const IP_RESERVED_LABEL: &str = "ovn.kubernetes.io/ip_reserved";

/// A record, by stream and name. The name is shared: every index entry of a record
/// points at one allocation.
pub type RecordKey = (Stream, Name);

/// An event pointed at, and where the record it is about sits, if one is held.
#[derive(Debug, Clone)]
pub struct Located {
    /// The event, for evidence.
    pub at: EventRef,
    slot: Option<Slot>,
}

/// What applying one event did.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The record the event was about (`None` for markers and stale events).
    pub key: Option<RecordKey>,
    /// Where the record now sits (`None` when the event removed it).
    slot: Option<Slot>,
    /// The record held under this name before the event: the previous version, the
    /// deleted object, or the object a new uid replaced.
    pub before: Option<ObjectRecord>,
    /// Holdings the record had before and has no more.
    pub released: Vec<ReleasedHolding>,
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

/// The cluster's live objects and the indexes over them. Saved without the indexes but
/// their bindings: the rest is rebuilt from the records when read back.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(from = "Saved")]
pub struct ClusterState {
    objects: Objects,
    #[serde(serialize_with = "indexes::save")]
    indexes: Indexes,
    /// The last deletion of each pool name, by kind (bounded: auto-created pools get new
    /// names all the time).
    pool_deletions: HashMap<Stream, HashMap<String, EventRef>>,
    /// Pool deletions in the order they came, to forget the oldest.
    #[serde(default)]
    pool_deletion_order: VecDeque<(Stream, String, i64)>,
    /// The first complete list of each stream (`SYNC_END`).
    listed: HashMap<Stream, EventRef>,
    /// Recently gone pods by `namespace/name` (bounded; the latest per name).
    gone_pods: HashMap<Name, Gone>,
    /// Names in the order they went, with the version that made them gone.
    gone_order: VecDeque<(Name, i64)>,
    tombstones: HashMap<String, i64>,
    tombstone_order: VecDeque<String>,
    /// Objects held when versions last went backwards (an etcd restore): their next event
    /// is applied whatever its version, since versions of two epochs do not compare.
    #[serde(default)]
    from_earlier_epoch: rustc_hash::FxHashSet<RecordKey>,
    /// Some gone pod went before history had any time (a recording whose first events
    /// show none): it is dated at the first time history learns.
    #[serde(default)]
    undated_gone_pods: bool,
    /// Where a `namespace/name` is put together to look a record up without allocating.
    #[serde(skip)]
    scratch: String,
}

/// [`ClusterState`] as saved (see there).
#[derive(Deserialize)]
struct Saved {
    objects: Objects,
    indexes: SavedIndexes,
    pool_deletions: HashMap<Stream, HashMap<String, EventRef>>,
    #[serde(default)]
    pool_deletion_order: VecDeque<(Stream, String, i64)>,
    listed: HashMap<Stream, EventRef>,
    gone_pods: HashMap<Name, Gone>,
    gone_order: VecDeque<(Name, i64)>,
    tombstones: HashMap<String, i64>,
    tombstone_order: VecDeque<String>,
    #[serde(default)]
    from_earlier_epoch: rustc_hash::FxHashSet<RecordKey>,
    #[serde(default)]
    undated_gone_pods: bool,
}

impl From<Saved> for ClusterState {
    fn from(saved: Saved) -> Self {
        let mut state = ClusterState {
            objects: saved.objects,
            indexes: Indexes {
                bindings: saved.indexes.bindings,
                ..Indexes::default()
            },
            pool_deletions: saved.pool_deletions,
            pool_deletion_order: saved.pool_deletion_order,
            listed: saved.listed,
            gone_pods: saved.gone_pods,
            gone_order: saved.gone_order,
            tombstones: saved.tombstones,
            tombstone_order: saved.tombstone_order,
            from_earlier_epoch: saved.from_earlier_epoch,
            undated_gone_pods: saved.undated_gone_pods,
            scratch: String::new(),
        };
        let ClusterState {
            objects, indexes, ..
        } = &mut state;
        for (stream, records) in objects.iter() {
            for (slot, record) in records.slots() {
                if holdings::is_pool(stream) {
                    indexes.set_pool_live(stream, &record.last.name, true);
                }
                let held = holdings::holdings(&record.last.name, record);
                let id = RecordId { stream, slot };
                indexes.add(id, &holdings::pool_names(record.part()), &held);
            }
        }
        state
    }
}

impl ClusterState {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    /// The live record `name` of `stream`.
    pub fn get(&self, stream: Stream, name: &str) -> Option<&ObjectRecord> {
        self.objects.of(stream).get(name)
    }

    /// The live records of `stream`, in no order.
    pub fn records(&self, stream: Stream) -> impl Iterator<Item = (&Name, &ObjectRecord)> {
        self.objects.of(stream).iter()
    }

    /// The live pool.
    pub fn pool(&self, pool: &PoolRef) -> Option<&ObjectRecord> {
        self.get(pool.stream, &pool.name)
    }

    /// Whether the pool `name` of `stream` is live: [`ClusterState::get`] of a pool,
    /// answered by the entry that also lists the records naming it.
    pub fn pool_live(&self, stream: Stream, name: &str) -> bool {
        self.indexes.pool_live(stream, name)
    }

    /// Records naming `pool`, sorted.
    pub fn naming(&self, pool: &PoolRef) -> Vec<RecordKey> {
        let ids = self
            .indexes
            .pools
            .get(&pool.stream)
            .and_then(|by_name| by_name.get(pool.name.as_str()));
        self.sorted_keys(ids.into_iter().flat_map(|entry| entry.naming.iter()))
    }

    /// The records `ids` stand for, sorted.
    fn sorted_keys<'a>(&self, ids: impl Iterator<Item = &'a RecordId>) -> Vec<RecordKey> {
        self.sorted_records(ids)
            .into_iter()
            .map(|(key, _)| key)
            .collect()
    }

    /// The records `ids` stand for, with their keys, sorted by key: read where they sit,
    /// without looking each up by name again.
    fn sorted_records<'a>(
        &self,
        ids: impl Iterator<Item = &'a RecordId>,
    ) -> Vec<(RecordKey, &ObjectRecord)> {
        let mut records: Vec<(RecordKey, &ObjectRecord)> = ids
            .filter_map(|id| {
                let record = self.objects.of(id.stream).at(id.slot)?;
                Some(((id.stream, record.last.name.clone()), record))
            })
            .collect();
        records.sort_by(|a, b| a.0.cmp(&b.0));
        records
    }

    /// The key of the record `id`.
    fn key_of(&self, id: RecordId) -> Option<RecordKey> {
        let record = self.objects.of(id.stream).at(id.slot)?;
        Some((id.stream, record.last.name.clone()))
    }

    /// Pools named by some record, sorted.
    pub fn named_pools(&self) -> Vec<PoolRef> {
        let mut pools: Vec<PoolRef> = self
            .indexes
            .pools
            .iter()
            .flat_map(|(stream, by_name)| {
                by_name
                    .iter()
                    .filter(|(_, entry)| !entry.naming.is_empty())
                    .map(|(name, _)| PoolRef::new(*stream, name))
            })
            .collect();
        pools.sort();
        pools
    }

    /// The event that deleted the pool `name` of `stream` last, if it is gone.
    pub fn pool_deletion(&self, stream: Stream, name: &str) -> Option<&EventRef> {
        self.pool_deletions.get(&stream)?.get(name)
    }

    /// The first complete list of `stream`, if one was seen.
    pub fn listed(&self, stream: Stream) -> Option<&EventRef> {
        self.listed.get(&stream)
    }

    /// Whether the pool `name` of `stream` is certainly not there: its deletion was seen,
    /// or a complete list of its kind did not have it.
    pub fn pool_known_gone(&self, stream: Stream, name: &str) -> bool {
        !self.pool_live(stream, name)
            && (self.pool_deletion(stream, name).is_some() || self.listed.contains_key(&stream))
    }

    /// The records of the kinds `of` takes holding addresses for `owner`, in no order
    /// (pools whatever their kind: they are not confirmed one by one).
    fn owner_holders(&self, owner: &str, of: impl Fn(Stream) -> bool) -> HolderIds {
        self.indexes.by_owner.holders(owner, |id| {
            of(id.stream) && self.holdings_by_id(id).iter().any(|h| h.owner == owner)
        })
    }

    /// The IPAM records holding addresses for `owner` (`namespace/name`), with their
    /// keys, sorted by key.
    pub fn records_held_for(&self, owner: &str) -> Vec<(RecordKey, &ObjectRecord)> {
        self.sorted_records(self.owner_holders(owner, |_| true).iter())
    }

    /// The records and pods holding `address`, with their keys, sorted by key.
    pub fn records_holding(&self, address: &str) -> Vec<(RecordKey, &ObjectRecord)> {
        self.sorted_records(self.address_holders(address).iter())
    }

    /// The records and pods holding `address`, in no order.
    fn address_holders(&self, address: &str) -> HolderIds {
        self.indexes.by_address.holders(address, |id| {
            self.holdings_by_id(id).iter().any(|h| h.address == address)
        })
    }

    /// What the record `id` holds now.
    fn holdings_by_id(&self, id: RecordId) -> Holdings<'_> {
        match self.objects.of(id.stream).at(id.slot) {
            Some(record) => holdings::holdings(&record.last.name, record),
            None => Holdings::new(),
        }
    }

    /// How many records and pods hold `address`.
    pub fn holder_count(&self, address: &str) -> usize {
        self.address_holders(address).len()
    }

    /// What the record holds now.
    pub fn holdings_of(&self, key: &RecordKey) -> Holdings<'_> {
        match self.objects.of(key.0).get(&key.1) {
            Some(record) => holdings::holdings(&record.last.name, record),
            None => Holdings::new(),
        }
    }

    /// The owner uid of a holding: the record's, or the one bound when it appeared.
    pub fn owner_uid<'a>(&'a self, record: &RecordKey, holding: &Holding<'a>) -> Option<&'a str> {
        match holding.owner_uid {
            Some(uid) => Some(uid),
            None if binds_owner_uid(record.0) => self.indexes.bound_uid(record, holding.address),
            None => None,
        }
    }

    /// The live Pod `namespace/name`.
    pub fn pod(&self, name: &str) -> Option<&ObjectRecord> {
        self.get(Stream::Pod, name)
    }

    /// Since when the owner pod (by name, and uid when known) is gone: `None` while it
    /// exists, or when nothing says it is gone (no deletion seen, no complete list).
    pub fn owner_gone_since(&self, owner: &str, uid: Option<&str>) -> Option<&EventRef> {
        if self
            .pod(owner)
            .is_some_and(|pod| uid.is_none_or(|u| u == pod.uid))
        {
            return None;
        }
        // Absent, or a pod of that name with another uid replaced it.
        self.gone_pods
            .get(owner)
            .filter(|g| uid.is_none_or(|u| u == g.uid))
            .map(|g| &g.at)
            .or(self.listed.get(&Stream::Pod))
    }

    /// Whether the owner of a holding keeps its address on purpose: the record says so,
    /// or its SpiderEndpoint (named after the pod or the VM) does.
    pub fn is_kept(&self, holding: &Holding<'_>) -> bool {
        holding.kept
            || self
                .get(Stream::SpiderEndpoint, &holding.owner)
                .is_some_and(|endpoint| match endpoint.part() {
                    Part::SpiderEndpoint(e) => holdings::spiderpool_kept(&e.owner_controller_type),
                    _ => false,
                })
    }
}

/// Maps whose keys are not strings, as lists of pairs (JSON objects need string keys).
pub(crate) mod pairs {
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
    use ipaudit_schemas::{EventType, KindPart};

    fn subnet(name: &str) -> PoolRef {
        PoolRef::new(Stream::Subnet, name)
    }

    /// The owner uid of the record's first holding.
    fn owner_of(state: &ClusterState, record: &RecordKey) -> Option<String> {
        let held = state.holdings_of(record);
        state.owner_uid(record, &held[0]).map(str::to_owned)
    }

    fn ip_key(name: &str) -> RecordKey {
        (Stream::Ip, name.into())
    }

    /// The keys of records handed over with them, each checked to be its record's.
    fn keys(records: Vec<(RecordKey, &ObjectRecord)>) -> Vec<RecordKey> {
        records
            .into_iter()
            .map(|(key, record)| {
                assert_eq!(key.1, record.last.name);
                key
            })
            .collect()
    }

    /// The keys of the records holding addresses for `owner`, sorted.
    fn held_for(state: &ClusterState, owner: &str) -> Vec<RecordKey> {
        keys(state.records_held_for(owner))
    }

    /// The keys of the records holding `address`, sorted.
    fn holders_of(state: &ClusterState, address: &str) -> Vec<RecordKey> {
        keys(state.records_holding(address))
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
    fn a_pool_is_live_from_its_addition_to_its_deletion_whether_or_not_records_name_it() {
        let mut state = ClusterState::new();
        assert!(!state.pool_live(Stream::Subnet, "s"));
        state.apply(EventBuilder::ip("a", "s").rv(1).added());
        assert!(!state.pool_live(Stream::Subnet, "s"), "named, not live");
        state.apply(EventBuilder::subnet("s").rv(2).added());
        assert!(state.pool_live(Stream::Subnet, "s"));
        assert!(
            !state.pool_live(Stream::IpPool, "s"),
            "a pool of another kind"
        );
        state.apply(EventBuilder::subnet("s").uid("again").rv(3).added());
        assert!(state.pool_live(Stream::Subnet, "s"), "replaced, still live");
        state.apply(EventBuilder::subnet("s").uid("again").rv(4).deleted());
        assert!(!state.pool_live(Stream::Subnet, "s"));
        assert_eq!(state.naming(&subnet("s")), [ip_key("a")], "still named");
        state.apply(EventBuilder::ip("a", "s").rv(5).deleted());
        state.apply(EventBuilder::subnet("t").rv(6).added());
        assert_eq!(
            state.named_pools(),
            [],
            "a live pool that nothing names is not named"
        );
        let back: ClusterState =
            serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
        assert!(
            back.pool_live(Stream::Subnet, "t"),
            "rebuilt from a checkpoint"
        );
        assert!(!back.pool_live(Stream::Subnet, "s"));
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
        assert_eq!(
            applied.before.map(|r| r.uid.to_string()),
            Some("old".to_owned())
        );
        assert_eq!(
            state
                .get(Stream::Ip, "a")
                .map(|r| r.uid.to_string())
                .as_deref(),
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
        assert_eq!(record.deletion_requested().map(|r| r.rv), Some(2));
        assert_eq!(record.rv(), 3);
        assert_eq!(record.first_rv, 1);
    }

    #[test]
    fn a_pool_deletion_is_remembered_until_it_comes_back() {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::subnet("s").rv(1).added());
        state.apply(EventBuilder::subnet("s").rv(2).deleted());
        assert_eq!(
            state.pool_deletion(Stream::Subnet, "s").map(|r| r.rv),
            Some(2)
        );
        assert!(state.pool_known_gone(Stream::Subnet, "s"));
        state.apply(EventBuilder::subnet("s").uid("again").rv(3).added());
        assert!(state.pool_deletion(Stream::Subnet, "s").is_none());
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
        assert_eq!(applied.released[0].address, "10.0.0.47");
        assert_eq!(applied.released[0].owner_uid.as_deref(), Some("web-2-a"));
    }

    #[test]
    fn an_allocation_without_its_pod_yet_belongs_to_the_next_pod_of_its_name() {
        let mut state = ClusterState::new();
        let record: RecordKey = (Stream::IpPool, "kube-system/10.0.0.0-24".into());
        state.apply(
            EventBuilder::ip_pool("kube-system", "10.0.0.0-24", "10.0.0.0/24")
                .allocation(5, "10.0.0.5", "default/a")
                .rv(1)
                .added(),
        );
        assert_eq!(owner_of(&state, &record).as_deref(), None);
        state.apply(EventBuilder::pod("default", "a").uid("a-1").rv(2).added());
        assert_eq!(owner_of(&state, &record).as_deref(), Some("a-1"));
        assert_eq!(held_for(&state, "default/a"), std::slice::from_ref(&record));
        assert_eq!(holders_of(&state, "10.0.0.5"), [record]);
    }

    #[test]
    fn a_pod_recreated_under_its_name_that_shows_the_address_gets_the_allocation_back() {
        let mut state = ClusterState::new();
        let record: RecordKey = (Stream::IpPool, "kube-system/p".into());
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
        assert_eq!(
            owner_of(&state, &record).as_deref(),
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
        assert_eq!(owner_of(&state, &record).as_deref(), Some("w-2"));
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
    fn a_record_keeps_what_the_rules_read_and_frees_the_rest() {
        let mut state = ClusterState::new();
        let mut event = EventBuilder::ip("a.default", "s1")
            .ip_of("default", "a", "10.0.0.5", "")
            .rv(1)
            .added();
        if let Some(KindPart::Ip(ip)) = &mut event.part {
            ip.node_name = "node-1".into();
            ip.mac_address = "00:00:00:aa:bb:cc".into();
        }
        state.apply(event);
        let record = state.get(Stream::Ip, "a.default").unwrap();
        let Part::Ip(ip) = record.part() else {
            panic!("an IP record");
        };
        assert_eq!(
            (ip.subnet(), ip.ip_address.as_str(), ip.pod_name()),
            ("s1", "10.0.0.5", "a")
        );
        // What no rule reads (node, MAC) is not kept at all: `IpPart` has no field for it.
        assert_eq!(ip.pod(), Some("default/a"));
        assert_eq!(holders_of(&state, "10.0.0.5").len(), 1);
    }

    #[test]
    fn a_record_takes_120_bytes() {
        // Of a million live objects, the records are the largest share: every 8 bytes here
        // are 8 MB.
        assert_eq!(std::mem::size_of::<Option<ObjectRecord>>(), 120);
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
        let mut reserved = EventBuilder::ip("r.default", "s")
            .ip_of("default", "r", "10.0.0.7", "")
            .rv(4)
            .added();
        if let Some(meta) = reserved.metadata.as_mut() {
            meta.labels.insert(IP_RESERVED_LABEL.into(), "true".into());
        }
        state.apply(reserved);
        let json = serde_json::to_string(&state).unwrap();
        let back: ClusterState = serde_json::from_str(&json).unwrap();
        let record: RecordKey = (Stream::IpPool, "kube-system/p".into());
        assert_eq!(owner_of(&back, &record).as_deref(), Some("a-1"));
        assert_eq!(
            back.naming(&subnet("s")),
            [ip_key("r.default"), ip_key("x")]
        );
        // The reserved label is saved beside the part, as before it moved into the IP's.
        assert!(json.contains(r#""reserved":true"#), "{json}");
        assert!(back
            .get(Stream::Ip, "r.default")
            .is_some_and(ObjectRecord::reserved));
        assert!(
            holders_of(&back, "10.0.0.7").is_empty(),
            "a reserved IP holds nothing"
        );
    }

    #[test]
    fn an_event_ref_keeps_a_version_text_only_when_it_is_not_the_decimal_of_its_number() {
        for (text, num, kept) in [
            ("1120", Some(1120), false),
            ("0", Some(0), false),
            ("-1", Some(-1), false),
            ("007", Some(7), true),
            ("+7", Some(7), true),
            ("12+3", None, true),
            ("", None, true),
        ] {
            let mut event = EventBuilder::subnet("s").rv(1).added();
            event.resource_version = text.into();
            event.resource_version_num = num;
            let at = EventRef::of(&event);
            assert_eq!(at.rv_text.is_some(), kept, "{text}");
            assert_eq!(at.resource_version(), text);
            assert_eq!(at.version().to_string(), text, "written out later");
            assert_eq!(ResourceVersion::from(text).to_string(), text, "read back");
            let json = serde_json::to_value(&at).unwrap();
            assert_eq!(json["resource_version"], text, "saved as sent");
            assert_eq!(serde_json::from_value::<EventRef>(json).unwrap(), at);
        }
        assert!(std::mem::size_of::<EventRef>() <= 56);
    }

    #[test]
    fn indexes_rebuilt_from_a_checkpoint_read_exactly_as_the_ones_kept_while_applying() {
        let mut state = ClusterState::new();
        let mut rv = 0;
        let mut next = || {
            rv += 1;
            rv
        };
        // IPs on two subnets, their pods, some deleted, some re-created, one moved.
        for i in 0..40 {
            let (ns, pod) = ("default", format!("web-{i}"));
            state.apply(
                EventBuilder::pod(ns, &pod)
                    .uid(&format!("p-{i}"))
                    .rv(next())
                    .added(),
            );
            state.apply(
                EventBuilder::ip(&format!("{pod}.{ns}"), if i % 2 == 0 { "s1" } else { "s2" })
                    .ip_of(ns, &pod, &format!("10.0.0.{i}"), "")
                    .rv(next())
                    .added(),
            );
        }
        for i in (0..40).step_by(3) {
            let (ns, pod) = ("default", format!("web-{i}"));
            state.apply(
                EventBuilder::ip(&format!("{pod}.{ns}"), "s1")
                    .rv(next())
                    .deleted(),
            );
            state.apply(
                EventBuilder::pod(ns, &pod)
                    .uid(&format!("p-{i}"))
                    .rv(next())
                    .deleted(),
            );
        }
        state.apply(
            EventBuilder::ip("web-1.default", "s3")
                .ip_of("default", "web-1", "10.0.9.1", "")
                .rv(next())
                .modified(),
        );
        state.apply(
            EventBuilder::ip_pool("kube-system", "p", "10.1.0.0/24")
                .allocation(5, "10.1.0.5", "default/web-4")
                .allocation(6, "10.0.0.5", "default/web-5")
                .rv(next())
                .added(),
        );
        let back: ClusterState =
            serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
        let pools = state.named_pools();
        assert!(pools.len() >= 3, "{pools:?}");
        assert_eq!(back.named_pools(), pools);
        for pool in &pools {
            assert_eq!(back.naming(pool), state.naming(pool), "{pool:?}");
        }
        for i in 0..40 {
            let owner = format!("default/web-{i}");
            assert_eq!(held_for(&back, &owner), held_for(&state, &owner), "{owner}");
            for address in [
                format!("10.0.0.{i}"),
                format!("10.1.0.{i}"),
                "10.0.9.1".into(),
            ] {
                assert_eq!(holders_of(&back, &address), holders_of(&state, &address));
                assert_eq!(back.holder_count(&address), state.holder_count(&address));
            }
        }
        assert_eq!(
            state.holder_count("10.0.0.5"),
            2,
            "an IP and a pool allocation"
        );
        let pool: RecordKey = (Stream::IpPool, "kube-system/p".into());
        assert_eq!(owner_of(&back, &pool), owner_of(&state, &pool));
    }
}
