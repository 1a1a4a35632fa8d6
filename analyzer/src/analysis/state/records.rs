//! The live records of one kind: a name index over a slab. Records sit in fixed-size
//! chunks (growing never moves a record, and leaves at most one chunk unused) and the
//! index holds only each record's slot number with 32 bits of its name's hash (8 bytes an
//! object; the name is the record's own, `last.name`), so that the index stays small
//! however large a record is and grows without reading a single name: a new version of an
//! object is written into its slot, and a deleted object's slot is reused by the next
//! one. A caller that found a slot once (the engine, once per event) reads and writes the
//! record through it without hashing the name again.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use ipaudit_schemas::Stream;

use super::{Name, ObjectRecord};

/// Where a record sits in its kind's records: valid until that record is removed.
pub type Slot = u32;

/// A live record by where it sits, as the indexes hold it: 8 bytes, no name to hash or
/// share. Valid while the record lives: removing a record takes it out of every index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct RecordId {
    pub stream: Stream,
    pub slot: Slot,
}

/// Records a chunk holds (a power of two: a slot splits into chunk and place by shifts).
const CHUNK: usize = 1 << CHUNK_BITS;
const CHUNK_BITS: u32 = 12;

/// An index entry: a slot and the high half of its name's hash.
#[derive(Clone, Copy)]
struct Entry {
    slot: Slot,
    hash: u32,
}

/// The live records of one kind, by name. Saved as a map from name to record.
#[derive(Default)]
pub struct Records {
    index: HashTable<Entry>,
    chunks: Vec<Box<[Option<ObjectRecord>]>>,
    /// Slots handed out so far (the next new slot).
    used: u32,
    free: Vec<Slot>,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// 32 bits of a name's hash: what an index entry keeps.
pub(super) fn name_hash(name: &str) -> u32 {
    // The high half: FxHash mixes its last word into the top bits best.
    (FxBuildHasher.hash_one(name) >> 32) as u32
}

/// The table's hash of an entry, made from its 32 bits alone so that growing the table
/// reads no name (the multiplication spreads them over the bits the table uses).
pub(super) fn table_hash(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl Records {
    fn cell(&self, slot: Slot) -> Option<&Option<ObjectRecord>> {
        let chunk = self.chunks.get((slot >> CHUNK_BITS) as usize)?;
        chunk.get(slot as usize & (CHUNK - 1))
    }

    fn cell_mut(&mut self, slot: Slot) -> Option<&mut Option<ObjectRecord>> {
        let chunk = self.chunks.get_mut((slot >> CHUNK_BITS) as usize)?;
        chunk.get_mut(slot as usize & (CHUNK - 1))
    }

    /// The slot of the record `name`.
    pub fn find(&self, name: &str) -> Option<Slot> {
        let hash = name_hash(name);
        self.index
            .find(table_hash(hash), |e| {
                e.hash == hash && self.at(e.slot).is_some_and(|r| &*r.last.name == name)
            })
            .map(|e| e.slot)
    }

    /// The record in `slot`.
    pub fn at(&self, slot: Slot) -> Option<&ObjectRecord> {
        self.cell(slot)?.as_ref()
    }

    /// The record `name`.
    pub fn get(&self, name: &str) -> Option<&ObjectRecord> {
        self.at(self.find(name)?)
    }

    /// Puts `record` under its name (`record.last.name`); returns its slot and the record
    /// it replaced.
    pub fn insert(&mut self, record: ObjectRecord) -> (Slot, Option<ObjectRecord>) {
        match self.find(&record.last.name) {
            Some(slot) => (slot, self.replace(slot, record)),
            None => (self.insert_new(record), None),
        }
    }

    /// Writes `record` into `slot`, which [`Records::find`] gave for the record's name;
    /// returns the record it replaced.
    pub fn replace(&mut self, slot: Slot, record: ObjectRecord) -> Option<ObjectRecord> {
        debug_assert_eq!(
            self.at(slot).map(|r| &*r.last.name),
            Some(&*record.last.name)
        );
        self.cell_mut(slot)?.replace(record)
    }

    /// Puts `record`, whose name [`Records::find`] did not find, into a free slot.
    pub fn insert_new(&mut self, record: ObjectRecord) -> Slot {
        let hash = name_hash(&record.last.name);
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                if self.used as usize == self.chunks.len() * CHUNK {
                    self.chunks
                        .push(std::iter::repeat_with(|| None).take(CHUNK).collect());
                }
                self.used += 1;
                self.used - 1
            }
        };
        if let Some(cell) = self.cell_mut(slot) {
            *cell = Some(record);
        }
        self.index
            .insert_unique(table_hash(hash), Entry { slot, hash }, |e| {
                table_hash(e.hash)
            });
        slot
    }

    /// Takes the record in `slot` out.
    pub fn remove_at(&mut self, slot: Slot) -> Option<ObjectRecord> {
        let hash = name_hash(&self.at(slot)?.last.name);
        let entry = self
            .index
            .find_entry(table_hash(hash), |e| e.slot == slot)
            .ok()?;
        entry.remove();
        let record = self.cell_mut(slot)?.take();
        self.free.push(slot);
        record
    }

    /// The records with their names, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&Name, &ObjectRecord)> {
        self.chunks
            .iter()
            .flat_map(|chunk| chunk.iter())
            .filter_map(Option::as_ref)
            .map(|r| (&r.last.name, r))
    }

    /// The records with their slots, in no order.
    pub fn slots(&self) -> impl Iterator<Item = (Slot, &ObjectRecord)> {
        self.chunks
            .iter()
            .flat_map(|chunk| chunk.iter())
            .enumerate()
            .filter_map(|(slot, r)| Some((slot as Slot, r.as_ref()?)))
    }

    /// The names held, in no order.
    pub fn keys(&self) -> impl Iterator<Item = &Name> {
        self.iter().map(|(name, _)| name)
    }

    /// How many records are held.
    pub fn len(&self) -> usize {
        self.index.len()
    }
}

impl Serialize for Records {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (name, record) in self.iter() {
            map.serialize_entry(&**name, record)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Records {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let saved = rustc_hash::FxHashMap::<Name, ObjectRecord>::deserialize(deserializer)?;
        let mut records = Records::default();
        for (name, mut record) in saved {
            // The key is the record's name; a record says so itself from now on.
            record.last.name = name;
            records.insert(record);
        }
        Ok(records)
    }
}
/// The live records of every kind: one [`Records`] per stream, found without hashing.
/// Saved as a map from stream to records, as when it was a hash map.
#[derive(Debug, Default)]
pub struct Objects([Records; STREAMS]);

/// How many streams there are.
pub(super) const STREAMS: usize = Stream::ALL.len();

impl Objects {
    /// The records of `stream`.
    pub fn of(&self, stream: Stream) -> &Records {
        &self.0[stream as usize]
    }

    /// The records of `stream`, to change.
    pub fn of_mut(&mut self, stream: Stream) -> &mut Records {
        &mut self.0[stream as usize]
    }

    /// Every stream with its records.
    pub fn iter(&self) -> impl Iterator<Item = (Stream, &Records)> {
        STREAM_ORDER.iter().map(|&s| (s, self.of(s)))
    }
}

/// The streams in their index order.
pub(super) const STREAM_ORDER: [Stream; STREAMS] = Stream::ALL;

impl Serialize for Objects {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let held: Vec<(Stream, &Records)> = self.iter().filter(|(_, r)| r.len() > 0).collect();
        let mut map = serializer.serialize_map(Some(held.len()))?;
        for (stream, records) in held {
            map.serialize_entry(&stream, records)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Objects {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let saved = rustc_hash::FxHashMap::<Stream, Records>::deserialize(deserializer)?;
        let mut objects = Objects::default();
        for (stream, records) in saved {
            *objects.of_mut(stream) = records;
        }
        Ok(objects)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::state::ClusterState;
    use ipaudit_schemas::builders::EventBuilder;

    fn record(name: &str, rv: i64) -> ObjectRecord {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::subnet(name).rv(rv).added());
        state.get(Stream::Subnet, name).cloned().unwrap()
    }

    #[test]
    fn a_deleted_records_slot_is_reused_and_replacing_keeps_one_slot() {
        let mut records = Records::default();
        assert!(records.insert(record("a", 1)).1.is_none());
        assert!(records.insert(record("b", 2)).1.is_none());
        let (_, old) = records.insert(record("a", 3));
        assert_eq!(old.map(|r| r.rv()), Some(1));
        assert_eq!(records.used, 2);
        assert_eq!(
            records
                .find("b")
                .and_then(|slot| records.remove_at(slot))
                .map(|r| r.rv()),
            Some(2)
        );
        assert!(records.get("b").is_none());
        records.insert(record("c", 4));
        assert_eq!(records.used, 2, "c took b's slot");
        let mut names: Vec<&str> = records.iter().map(|(n, _)| &**n).collect();
        names.sort();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(records.get("a").map(ObjectRecord::rv), Some(3));
    }

    #[test]
    fn records_are_saved_as_a_map_by_name_and_read_back() {
        let mut records = Records::default();
        records.insert(record("a", 1));
        records.insert(record("b", 2));
        records.find("a").and_then(|slot| records.remove_at(slot));
        let json = serde_json::to_value(&records).unwrap();
        assert_eq!(json.as_object().map(|m| m.len()), Some(1));
        assert!(json.get("b").is_some());
        let back: Records = serde_json::from_value(json).unwrap();
        assert_eq!(back.get("b").map(ObjectRecord::rv), Some(2));
        assert_eq!(back.len(), 1);
    }

    #[test]
    fn every_stream_has_its_own_records_in_index_order() {
        for (i, stream) in STREAM_ORDER.iter().enumerate() {
            assert_eq!(*stream as usize, i, "{stream:?}");
        }
    }

    #[test]
    fn records_past_one_chunk_are_found_by_name_after_growth_and_reuse() {
        let template = record("x", 1);
        let named = |i: usize| {
            let mut r = template.clone();
            r.last.name = crate::analysis::state::Name::from(format!("ns/pod-{i}"));
            r.last.rv = i as i64;
            r
        };
        let mut records = Records::default();
        let n = CHUNK * 2 + 17;
        for i in 0..n {
            records.insert_new(named(i));
        }
        for i in (0..n).step_by(3) {
            let slot = records.find(&format!("ns/pod-{i}")).unwrap();
            assert_eq!(records.remove_at(slot).map(|r| r.rv()), Some(i as i64));
        }
        for i in (0..n).step_by(3) {
            records.insert_new(named(i + n));
        }
        assert_eq!(records.used as usize, n, "removed slots were reused");
        assert_eq!(records.len(), n);
        for i in 0..2 * n {
            let held = !i.is_multiple_of(3) && i < n || i >= n && (i - n).is_multiple_of(3);
            let found = records.get(&format!("ns/pod-{i}")).map(ObjectRecord::rv);
            assert_eq!(found, held.then_some(i as i64), "ns/pod-{i}");
        }
    }
}
