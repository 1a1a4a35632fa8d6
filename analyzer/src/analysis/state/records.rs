//! The live records of one kind: a name index over a slab. Records sit in one vector and
//! the index holds only each record's slot number (4 bytes an object; the name it is
//! found by is the record's own, `last.name`), so that the index stays small however large
//! a record is: a new version of an object is written into its slot, and a deleted
//! object's slot is reused by the next one. A caller that found a slot once (the engine,
//! once per event) reads and writes the record through it without hashing the name again.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use ipaudit_schemas::Stream;

use super::ObjectRecord;

/// Where a record sits in its kind's [`Records`]: valid until that record is removed.
pub type Slot = u32;

/// The live records of one kind, by name. Saved as a map from name to record.
#[derive(Default)]
pub struct Records {
    index: HashTable<Slot>,
    slots: Vec<Option<ObjectRecord>>,
    free: Vec<Slot>,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

fn hash(name: &str) -> u64 {
    FxBuildHasher.hash_one(name)
}

/// The name of the record in `slot` (empty for a free slot, which the index never holds).
fn name_in(slots: &[Option<ObjectRecord>], slot: Slot) -> &str {
    slots
        .get(slot as usize)
        .and_then(Option::as_ref)
        .map_or("", |r| &r.last.name)
}

impl Records {
    /// The slot of the record `name`.
    pub fn find(&self, name: &str) -> Option<Slot> {
        self.index
            .find(hash(name), |&slot| name_in(&self.slots, slot) == name)
            .copied()
    }

    /// The record in `slot`.
    pub fn at(&self, slot: Slot) -> Option<&ObjectRecord> {
        self.slots.get(slot as usize)?.as_ref()
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
        debug_assert_eq!(name_in(&self.slots, slot), &*record.last.name);
        self.slots.get_mut(slot as usize)?.replace(record)
    }

    /// Puts `record`, whose name [`Records::find`] did not find, into a free slot.
    pub fn insert_new(&mut self, record: ObjectRecord) -> Slot {
        let hash = hash(&record.last.name);
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(record);
                slot
            }
            None => {
                self.slots.push(Some(record));
                // More than 4 billion live objects of one kind do not fit in memory anyway.
                Slot::try_from(self.slots.len() - 1).unwrap_or(Slot::MAX)
            }
        };
        let slots = &self.slots;
        self.index
            .insert_unique(hash, slot, |&s| self::hash(name_in(slots, s)));
        slot
    }

    /// Takes the record in `slot` out.
    pub fn remove_at(&mut self, slot: Slot) -> Option<ObjectRecord> {
        let name_hash = hash(name_in(&self.slots, slot));
        let entry = self.index.find_entry(name_hash, |&s| s == slot).ok()?;
        entry.remove();
        let record = self.slots.get_mut(slot as usize)?.take();
        self.free.push(slot);
        record
    }

    /// The records with their names, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &ObjectRecord)> {
        self.slots
            .iter()
            .filter_map(Option::as_ref)
            .map(|r| (&r.last.name, r))
    }

    /// The names held, in no order.
    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
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
        let saved = rustc_hash::FxHashMap::<Arc<str>, ObjectRecord>::deserialize(deserializer)?;
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

/// How many streams there are (`Stream::Unknown` is the last).
const STREAMS: usize = Stream::Unknown as usize + 1;

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
const STREAM_ORDER: [Stream; STREAMS] = [
    Stream::Pod,
    Stream::Ip,
    Stream::Subnet,
    Stream::IpPool,
    Stream::OverlappingRangeIpReservation,
    Stream::SpiderIpPool,
    Stream::SpiderEndpoint,
    Stream::Unknown,
];

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
        assert_eq!(records.slots.len(), 2);
        assert_eq!(
            records
                .find("b")
                .and_then(|slot| records.remove_at(slot))
                .map(|r| r.rv()),
            Some(2)
        );
        assert!(records.get("b").is_none());
        records.insert(record("c", 4));
        assert_eq!(records.slots.len(), 2, "c took b's slot");
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
}
