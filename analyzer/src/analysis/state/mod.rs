//! The cluster as the events say it is: the live objects of every watched kind, one store
//! per stream, and the indexes the rules share, built from the IPAM model in
//! [`holdings`]: which records name which pool, which records hold an address for which
//! owner, and who holds each address. Each object only moves forward: an event older
//! than what is held is ignored.

mod finalizers;
mod holder_index;
pub mod holdings;
mod indexes;
mod millis;
mod name;
mod part;
mod records;
mod shared;
mod uid;

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

use ipaudit_schemas::{is_kube_ovn_finalizer, EventType, KindPart, ObjectMeta, Stream, WatchEvent};

pub use finalizers::Finalizers;
pub use holdings::{Holding, Holdings, PoolRef, Scope};
pub use indexes::ReleasedHolding;
pub use millis::Millis;
pub use name::Name;
pub use part::{IpPart, Part, PodPart};
pub use uid::{Uid, UidText};

use holder_index::HolderIds;
use indexes::{binds_owner_uid, Indexes, RecordId, SavedIndexes};
use records::Objects;
pub use records::Slot;

/// The label by which a person reserves a kube-ovn IP by hand.
pub(crate) const IP_RESERVED_LABEL: &str = "ovn.kubernetes.io/ip_reserved";

/// A pointer to the event that last touched an object, for evidence. Saved with its
/// resourceVersion as sent (see `SavedEventRef`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SavedEventRef", into = "SavedEventRef")]
pub struct EventRef {
    /// Stream of the event.
    pub stream: Stream,
    /// Its type.
    pub event_type: EventType,
    /// Object name (`namespace/name` for namespaced kinds), shared with the record's key.
    pub name: Name,
    /// Numeric resourceVersion, for ordering evidence.
    pub rv: i64,
    /// Event time.
    pub time_ms: Millis,
    /// The resourceVersion as sent, when it is not `rv` in decimal (an API server's always
    /// is: then nothing is kept beside the number).
    rv_text: Option<Box<SmolStr>>,
}

impl EventRef {
    /// Points at `event`.
    pub fn of(event: &WatchEvent) -> Self {
        EventRef::at(event, Name::from(event.object_key()))
    }

    /// Points at `event`, whose object is named `name`.
    fn at(event: &WatchEvent, name: Name) -> Self {
        let rv = event.resource_version_num.unwrap_or(-1);
        EventRef {
            stream: event.stream,
            event_type: event.event_type,
            name,
            rv,
            time_ms: Millis::from(event.event_time_ms()),
            rv_text: text_unless_decimal(&event.resource_version, rv),
        }
    }

    /// Its resourceVersion as sent.
    pub fn resource_version(&self) -> SmolStr {
        written_version(self.rv, self.rv_text.as_deref())
    }

    /// Its resourceVersion, to be written out only if needed: the engine takes one per
    /// event, and writing the number as text each time cost 1.6 % of a replay.
    pub fn version(&self) -> ResourceVersion {
        ResourceVersion {
            rv: self.rv,
            text: self.rv_text.clone(),
        }
    }

    /// Event time, Unix ms.
    pub fn time_ms(&self) -> Option<i64> {
        self.time_ms.get()
    }

    /// Dates the event no earlier than `floor_ms` (when known): see
    /// [`ClusterState::apply_located`]'s `history_ms`.
    fn not_before(&mut self, floor_ms: Option<i64>) {
        if let Some(floor) = floor_ms {
            let time = self.time_ms().map_or(floor, |t| t.max(floor));
            self.time_ms = Millis::from(Some(time));
        }
    }
}

/// A resourceVersion as sent: its number, and its text only when that is not the number
/// in decimal (an API server's always is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceVersion {
    rv: i64,
    text: Option<Box<SmolStr>>,
}

impl From<&str> for ResourceVersion {
    fn from(text: &str) -> Self {
        let rv = ipaudit_schemas::event::parse_resource_version(text).unwrap_or(-1);
        ResourceVersion {
            rv,
            text: text_unless_decimal(text, rv),
        }
    }
}

impl Default for ResourceVersion {
    /// None yet: written as `""`.
    fn default() -> Self {
        ResourceVersion::from("")
    }
}

impl std::fmt::Display for ResourceVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&written_version(self.rv, self.text.as_deref()))
    }
}

/// A resourceVersion as sent: `text` when it was kept (it is not `rv` in decimal), else
/// `rv` in decimal.
fn written_version(rv: i64, text: Option<&SmolStr>) -> SmolStr {
    match text {
        Some(text) => SmolStr::clone(text),
        None => SmolStr::new(itoa::Buffer::new().format(rv)),
    }
}

/// `text`, unless it is `rv` written in decimal (then the number says it all).
fn text_unless_decimal(text: &str, rv: i64) -> Option<Box<SmolStr>> {
    (itoa::Buffer::new().format(rv) != text).then(|| Box::new(SmolStr::new(text)))
}

/// [`EventRef`] as saved: with its resourceVersion as sent.
#[derive(Serialize, Deserialize)]
struct SavedEventRef {
    stream: Stream,
    event_type: EventType,
    name: Name,
    resource_version: SmolStr,
    rv: i64,
    time_ms: Option<i64>,
}

impl From<SavedEventRef> for EventRef {
    fn from(saved: SavedEventRef) -> Self {
        EventRef {
            stream: saved.stream,
            event_type: saved.event_type,
            name: saved.name,
            rv: saved.rv,
            time_ms: Millis::from(saved.time_ms),
            rv_text: text_unless_decimal(&saved.resource_version, saved.rv),
        }
    }
}

impl From<EventRef> for SavedEventRef {
    fn from(at: EventRef) -> Self {
        SavedEventRef {
            stream: at.stream,
            event_type: at.event_type,
            resource_version: at.resource_version(),
            time_ms: at.time_ms(),
            name: at.name,
            rv: at.rv,
        }
    }
}

/// A live object of any watched kind. Kept small: a cluster holds hundreds of thousands.
/// Saved as `SavedRecord`.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "ReadRecord")]
pub struct ObjectRecord {
    /// metadata.uid.
    pub uid: Uid,
    /// metadata.finalizers.
    pub finalizers: Finalizers,
    /// The version this object (this uid) was first seen at.
    pub first_rv: i64,
    /// The time it was first seen at.
    first_ms: Millis,
    /// Its deletion, once requested (apart: few objects are terminating at any time).
    deletion: Option<Box<Deletion>>,
    /// The latest event: the object's current version.
    pub last: EventRef,
    /// What the rules read of the kind's part.
    part: Part,
}

/// A requested deletion.
#[derive(Debug, Clone)]
struct Deletion {
    /// The first event that showed a deletionTimestamp.
    requested: EventRef,
    /// metadata.deletionTimestamp of the current version.
    timestamp_ms: Millis,
}

/// [`ObjectRecord`] as saved: with kube-ovn's reserved label beside the part, where a
/// record kept it before it moved into the IP's part. Written from borrowed fields,
/// read as [`ReadRecord`].
#[derive(Serialize, Deserialize)]
struct SavedRecord<U, F, M, E, L, P> {
    uid: U,
    finalizers: F,
    deletion_ms: M,
    reserved: bool,
    first_rv: i64,
    first_ms: M,
    deletion_requested: Option<E>,
    last: L,
    part: P,
}

/// A [`SavedRecord`] read back.
type ReadRecord = SavedRecord<Uid, Finalizers, Millis, EventRef, EventRef, KindPart>;

impl From<ReadRecord> for ObjectRecord {
    fn from(saved: ReadRecord) -> Self {
        let mut part = saved.part;
        ObjectRecord {
            uid: saved.uid,
            finalizers: saved.finalizers,
            first_rv: saved.first_rv,
            first_ms: saved.first_ms,
            deletion: Deletion::of(saved.deletion_requested, saved.deletion_ms, &saved.last),
            last: saved.last,
            part: Part::new(&mut part, saved.reserved, None),
        }
    }
}

impl Serialize for ObjectRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SavedRecord {
            uid: &self.uid,
            finalizers: &self.finalizers,
            deletion_ms: Millis::from(self.deletion_ms()),
            reserved: self.reserved(),
            first_rv: self.first_rv,
            first_ms: self.first_ms,
            deletion_requested: self.deletion_requested(),
            last: &self.last,
            part: &self.part,
        }
        .serialize(serializer)
    }
}

impl Deletion {
    /// The deletion of a record whose current version `last` shows `timestamp_ms`: first
    /// requested by `requested`, or by `last` itself when that is the first to show a
    /// timestamp. `None` while neither requested it.
    fn of(
        requested: Option<EventRef>,
        timestamp_ms: Millis,
        last: &EventRef,
    ) -> Option<Box<Deletion>> {
        let requested = requested.or_else(|| timestamp_ms.get().map(|_| last.clone()));
        requested.map(|requested| {
            Box::new(Deletion {
                requested,
                timestamp_ms,
            })
        })
    }
}

impl ObjectRecord {
    /// The first event that showed a deletionTimestamp.
    pub fn deletion_requested(&self) -> Option<&EventRef> {
        self.deletion.as_ref().map(|d| &d.requested)
    }

    /// Labelled `ovn.kubernetes.io/ip_reserved: "true"` (a kube-ovn IP reserved by hand).
    pub fn reserved(&self) -> bool {
        self.part.reserved()
    }

    /// What the rules read of the kind's part.
    pub fn part(&self) -> &Part {
        &self.part
    }

    /// The object's resourceVersion, as sent.
    pub fn resource_version(&self) -> SmolStr {
        self.last.resource_version()
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
            .map(|(i, f)| (i, &**f))
    }

    /// Whether deletion was requested.
    pub fn is_terminating(&self) -> bool {
        self.deletion_ms().is_some()
    }

    /// metadata.deletionTimestamp, Unix ms.
    pub fn deletion_ms(&self) -> Option<i64> {
        self.deletion.as_ref().and_then(|d| d.timestamp_ms.get())
    }

    /// The time it was first seen at.
    pub fn first_ms(&self) -> Option<i64> {
        self.first_ms.get()
    }

    /// The pod's phase, for Pod records.
    pub fn phase(&self) -> Option<&str> {
        match self.part() {
            Part::Pod(pod) => Some(pod.phase()),
            _ => None,
        }
    }

    /// Whether a Pod record is live: it exists and has not finished (a terminating pod
    /// still holds its address).
    pub fn is_live_pod(&self) -> bool {
        !matches!(self.phase(), Some("Succeeded" | "Failed") | None)
    }
}

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

const TOMBSTONES: usize = 65_536;
const GONE_PODS: usize = 65_536;
const POOL_DELETIONS: usize = 16_384;

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

    /// Versions went backwards (a new epoch, see `reorder`): what is held stays, but no
    /// version of the new epoch is compared with one of before, so that the deletions after
    /// an etcd restore are not taken for stale events.
    pub fn start_epoch(&mut self) {
        self.tombstones.clear();
        self.tombstone_order.clear();
        self.from_earlier_epoch = self
            .objects
            .iter()
            .flat_map(|(stream, records)| records.keys().map(move |name| (stream, name.clone())))
            .collect();
    }

    /// Applies one event, in resourceVersion order, without a history clock: a deletion is
    /// dated by its event alone (the engine gives its clock to
    /// [`ClusterState::apply_located`]).
    pub fn apply(&mut self, mut event: WatchEvent) -> Applied {
        let located = self.locate(&event);
        self.apply_located(&mut event, located, None)
    }

    /// Points at `event` like [`EventRef::of`] and finds the record held under its name:
    /// the name is then shared with that record (only an object seen for the first time
    /// allocates its name), and applying the event looks nothing up again.
    pub fn locate(&mut self, event: &WatchEvent) -> Located {
        let (name, slot) = match &event.metadata {
            Some(meta) => {
                let key = match &meta.namespace {
                    Some(ns) if !ns.is_empty() => {
                        self.scratch.clear();
                        self.scratch.push_str(ns);
                        self.scratch.push('/');
                        self.scratch.push_str(&meta.name);
                        self.scratch.as_str()
                    }
                    _ => meta.name.as_str(),
                };
                let records = self.objects.of(event.stream);
                let slot = records.find(key);
                match slot.and_then(|s| records.at(s)) {
                    Some(held) => (held.last.name.clone(), slot),
                    None => (Name::from(key), None),
                }
            }
            None => (Name::from(""), None),
        };
        Located {
            at: EventRef::at(event, name),
            slot,
        }
    }

    /// The record an applied event left (`None` when it removed one, or changed nothing).
    pub fn applied_record(&self, applied: &Applied) -> Option<&ObjectRecord> {
        let (stream, _) = applied.key.as_ref()?;
        self.objects.of(*stream).at(applied.slot?)
    }

    /// [`ClusterState::apply`], with the event already located (the engine keeps its
    /// [`EventRef`] for the rules; the record shares its name). What the record keeps is
    /// copied or moved out of `event`; the rest is left for the event's next reading to
    /// reuse.
    ///
    /// `history_ms`: the time history had reached with the events before this one. A
    /// deletion that neither an observation time nor a deletion timestamp dates is
    /// remembered (a pod gone, a pool deleted) as no earlier than that: it came after
    /// them, while its object shows an older time only (a kubectl recording dates a
    /// DELETED object by its creation, or its last managedFields entry, when no deletion
    /// was requested), which would make a grace period from its going seem long over.
    /// A deletion timestamp is kept: it is when the deletion was asked for (and what an
    /// audit log's DELETE request is matched by).
    pub fn apply_located(
        &mut self,
        event: &mut WatchEvent,
        located: Located,
        history_ms: Option<i64>,
    ) -> Applied {
        let Located { mut at, slot } = located;
        if let (Some(now), true) = (history_ms, self.undated_gone_pods) {
            // Pods that went before history had a time went at the latest now: dated so,
            // a grace period from their going starts here instead of at the epoch.
            self.undated_gone_pods = false;
            for gone in self.gone_pods.values_mut() {
                if gone.at.time_ms().is_none() {
                    gone.at.not_before(Some(now));
                }
            }
        }
        if event.event_type == EventType::SyncEnd {
            self.listed
                .entry(event.stream)
                .or_insert_with(|| at.clone());
        }
        if !event.event_type.carries_object() || event.stream == Stream::Unknown {
            return Applied::default();
        }
        let rv = event.resource_version_num.unwrap_or(-1);
        let uid = event.uid();
        if self.tombstones.get(uid).is_some_and(|dead| rv <= *dead) {
            return stale();
        }
        let name = at.name.clone();
        let of_earlier_epoch = !self.from_earlier_epoch.is_empty()
            && self
                .from_earlier_epoch
                .remove(&(event.stream, name.clone()));
        let held = slot
            .and_then(|s| self.objects.of(event.stream).at(s))
            .map(|r| {
                let same_object = r.uid == *uid;
                Previous {
                    same_object,
                    uid: r.uid.clone(),
                    // Needed only when a new uid replaced it (a pod then counts as gone).
                    replaced_uid: (!same_object).then(|| r.uid.to_string()),
                    rv: r.rv(),
                    first_rv: r.first_rv,
                    first_ms: r.first_ms,
                    deletion_requested: r.deletion_requested().cloned(),
                    finalizers: r.finalizers.clone(),
                }
            });
        let same_object = held.as_ref().is_some_and(|p| p.same_object);
        if same_object && !of_earlier_epoch && held.as_ref().is_some_and(|p| rv <= p.rv) {
            return stale();
        }
        let stream = event.stream;
        if event.event_type.is_deletion() {
            if held.is_some() && !same_object {
                // The deletion of an object this state never held under this name.
                return stale();
            }
            self.bury(uid, rv);
            let dated_by_deletion = event.observed_at_ms.is_some()
                || event
                    .metadata
                    .as_ref()
                    .is_some_and(|m| m.deletion_timestamp_ms.is_some());
            if !dated_by_deletion {
                at.not_before(history_ms);
            }
            if holdings::is_pool(stream) {
                self.remember_pool_deletion(stream, &name, at.clone());
            }
            if stream == Stream::Pod {
                self.remember_gone_pod(uid, at);
            }
            let before = slot.and_then(|s| self.objects.of_mut(stream).remove_at(s));
            if before.is_some() && holdings::is_pool(stream) {
                self.indexes.set_pool_live(stream, &name, false);
            }
            let key: RecordKey = (stream, name);
            let released = match (&before, slot) {
                (Some(record), Some(slot)) => {
                    let pools = holdings::pool_names(record.part());
                    let held = holdings::holdings(&key.1, record);
                    let id = RecordId { stream, slot };
                    self.indexes.remove((id, &key), &pools, &held, &[])
                }
                _ => Vec::new(),
            };
            return Applied {
                key: Some(key),
                before,
                released,
                reindexed: true,
                ..Applied::default()
            };
        }
        let previous = held.as_ref().filter(|p| p.same_object);
        let like = slot
            .and_then(|s| self.objects.of(stream).at(s))
            .map(ObjectRecord::part);
        let record = record_of(event, at, previous, like);
        if let Some(replaced) = held.as_ref().filter(|p| !p.same_object) {
            if stream == Stream::Pod {
                // A new uid under a held name: the old pod is gone even if its deletion
                // was missed.
                let old_uid = replaced.replaced_uid.clone().unwrap_or_default();
                self.remember_gone_pod(&old_uid, record.last.clone());
            }
        }
        if holdings::is_pool(stream) {
            if let Some(deletions) = self.pool_deletions.get_mut(&stream) {
                deletions.remove(&*name);
            }
        }
        let key: RecordKey = (stream, record.last.name.clone());
        let records = self.objects.of_mut(stream);
        let (slot, before) = match slot {
            Some(slot) => (slot, records.replace(slot, record)),
            None => {
                if holdings::is_pool(stream) {
                    self.indexes.set_pool_live(stream, &key.1, true);
                }
                (records.insert_new(record), None)
            }
        };
        let (reindexed, released) = self.reindex(&key, slot, before.as_ref());
        Applied {
            key: Some(key),
            slot: Some(slot),
            before,
            released,
            reindexed,
            stale: false,
        }
    }

    fn remember_pool_deletion(&mut self, stream: Stream, name: &str, at: EventRef) {
        if self.pool_deletion_order.len() == POOL_DELETIONS {
            if let Some((stream, oldest, rv)) = self.pool_deletion_order.pop_front() {
                // Only if that pool was not deleted again since.
                if let Some(deletions) = self.pool_deletions.get_mut(&stream) {
                    if deletions.get(&oldest).is_some_and(|d| d.rv == rv) {
                        deletions.remove(&oldest);
                    }
                }
            }
        }
        self.pool_deletion_order
            .push_back((stream, name.to_owned(), at.rv));
        self.pool_deletions
            .entry(stream)
            .or_default()
            .insert(name.to_owned(), at);
    }

    /// `at` is the event that says so; its name is the pod's (and shared with its key).
    fn remember_gone_pod(&mut self, uid: &str, at: EventRef) {
        if self.gone_order.len() == GONE_PODS {
            if let Some((oldest, rv)) = self.gone_order.pop_front() {
                // Only if that name did not go again since.
                if self.gone_pods.get(&oldest).is_some_and(|g| g.at.rv == rv) {
                    self.gone_pods.remove(&oldest);
                }
            }
        }
        self.undated_gone_pods |= at.time_ms().is_none();
        self.gone_order.push_back((at.name.clone(), at.rv));
        self.gone_pods.insert(
            at.name.clone(),
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
    fn reindex(
        &mut self,
        key: &RecordKey,
        slot: Slot,
        before: Option<&ObjectRecord>,
    ) -> (bool, Vec<ReleasedHolding>) {
        let id = RecordId {
            stream: key.0,
            slot,
        };
        let released = {
            let Some(after) = self.objects.of(key.0).at(slot) else {
                return (false, Vec::new());
            };
            let unchanged = before.is_some_and(|b| b.uid == after.uid && b.part() == after.part());
            if unchanged {
                // The common case (status churn): nothing an index holds changed.
                return (false, Vec::new());
            }
            let new_pools = holdings::pool_names(after.part());
            let new_holdings = holdings::holdings(&key.1, after);
            let released = match before {
                Some(before) => {
                    let replaced = before.uid != after.uid;
                    let keep: &[Holding<'_>] = if replaced { &[] } else { &new_holdings };
                    let old_pools = holdings::pool_names(before.part());
                    let old = holdings::holdings(&key.1, before);
                    self.indexes.remove((id, key), &old_pools, &old, keep)
                }
                None => Vec::new(),
            };
            self.indexes.add(id, &new_pools, &new_holdings);
            if binds_owner_uid(key.0) {
                // whereabouts holdings that just appeared belong to the live pod of their
                // podref.
                let pods = self.objects.of(Stream::Pod);
                for holding in &new_holdings {
                    if let Some(pod) = pods.get(holding.owner.as_ref()) {
                        self.indexes
                            .bind(key, holding.address, &pod.uid.text(), false);
                    }
                }
            }
            released
        };
        if key.0 == Stream::Pod && self.holds_owner_binding_kinds() {
            self.bind_holdings_to_pod(&key.1);
        }
        (true, released)
    }

    /// Whether any record of a kind whose holdings are bound to pod uids is held: until
    /// one is, a pod has nothing to bind and its name need not be looked up.
    fn holds_owner_binding_kinds(&self) -> bool {
        Stream::ALL
            .iter()
            .any(|&stream| binds_owner_uid(stream) && self.objects.of(stream).len() > 0)
    }

    /// A pod appeared or changed: whereabouts holdings of its name that found no pod yet
    /// are its; so are those bound to an earlier pod of its name whose address this pod
    /// shows in its network-status (a StatefulSet pod re-created under its name gets its
    /// allocation back, which whereabouts' own reconciler checks the same way).
    fn bind_holdings_to_pod(&mut self, pod_name: &str) {
        let records: Vec<RecordKey> = self
            .owner_holders(pod_name, binds_owner_uid)
            .into_iter()
            .filter(|id| binds_owner_uid(id.stream))
            .filter_map(|id| self.key_of(id))
            .collect();
        if records.is_empty() {
            return;
        }
        let Some(pod) = self.objects.of(Stream::Pod).get(pod_name) else {
            return;
        };
        let shown = holdings::holdings(pod_name, pod);
        for record in records {
            let Some(held) = self.objects.of(record.0).get(&record.1) else {
                continue;
            };
            for holding in holdings::holdings(&record.1, held) {
                if holding.owner == pod_name {
                    let shows_it = shown.iter().any(|h| h.address == holding.address);
                    self.indexes
                        .bind(&record, holding.address, &pod.uid.text(), shows_it);
                }
            }
        }
    }
}

/// What a new version of an object keeps of the version before it.
struct Previous {
    same_object: bool,
    finalizers: Finalizers,
    /// The held object's uid (the new version's, when it is the same object).
    uid: Uid,
    replaced_uid: Option<String>,
    rv: i64,
    first_rv: i64,
    first_ms: Millis,
    deletion_requested: Option<EventRef>,
}

/// The record for an upserted object; what the previous version of the same object knew
/// (first sighting, first deletion request) carries over.
///
/// `like`: the part of the record held under its name, whose shared fields the new part
/// takes when they are alike.
fn record_of(
    event: &mut WatchEvent,
    last: EventRef,
    previous: Option<&Previous>,
    like: Option<&Part>,
) -> ObjectRecord {
    let no_meta;
    let meta = match &event.metadata {
        Some(meta) => meta,
        None => {
            no_meta = ObjectMeta::default();
            &no_meta
        }
    };
    let mut no_part;
    let part = match &mut event.part {
        Some(part) => part,
        None => {
            no_part = KindPart::empty(event.stream).unwrap_or(KindPart::Pod(Default::default()));
            &mut no_part
        }
    };
    drop_unread(part);
    let reserved = meta
        .labels
        .get(IP_RESERVED_LABEL)
        .is_some_and(|v| v == "true");
    let part = Part::new(part, reserved, like);
    ObjectRecord {
        uid: match previous {
            Some(p) => p.uid.clone(),
            None => Uid::new(&meta.uid),
        },
        finalizers: Finalizers::new_or_same(&meta.finalizers, previous.map(|p| &p.finalizers)),
        first_rv: previous.map_or(last.rv, |p| p.first_rv),
        first_ms: previous.map_or(last.time_ms, |p| p.first_ms),
        deletion: Deletion::of(
            previous.and_then(|p| p.deletion_requested.clone()),
            Millis::from(meta.deletion_timestamp_ms),
            &last,
        ),
        part,
        last,
    }
}

/// Frees what no rule reads of a part, so that a live object costs only what the analysis
/// needs (the event keeps everything; the record is not the audit log).
fn drop_unread(part: &mut KindPart) {
    // IPs and pods keep only what rules read: see `part`.
    if let KindPart::Subnet(subnet) = part {
        subnet.cidr_block = String::new();
        subnet.provider = String::new();
        subnet.protocol = String::new();
        subnet.gateway = String::new();
        subnet.v4_available_ips = None;
        subnet.v6_using_ips = None;
        subnet.v6_available_ips = None;
    }
}

fn stale() -> Applied {
    Applied {
        stale: true,
        ..Applied::default()
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
