//! The live records of one kind: a name index over a slab. Records sit in one vector and
//! the index maps each name to a slot, so that the index stays small (a name and a slot
//! number per object) however large a record is: growing it moves 24 bytes per object
//! instead of the whole record, a new version of an object is written into its slot, and a
//! deleted object's slot is reused by the next one.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::ObjectRecord;

/// The live records of one kind, by name. Saved as a map from name to record.
#[derive(Debug, Default)]
pub struct Records {
    index: HashMap<Arc<str>, u32>,
    slots: Vec<Option<ObjectRecord>>,
    free: Vec<u32>,
}

impl Records {
    /// The record `name`.
    pub fn get(&self, name: &str) -> Option<&ObjectRecord> {
        let slot = *self.index.get(name)?;
        self.slots.get(slot as usize)?.as_ref()
    }

    /// The record `name` with its shared name.
    pub fn get_key_value(&self, name: &str) -> Option<(&Arc<str>, &ObjectRecord)> {
        let (name, slot) = self.index.get_key_value(name)?;
        Some((name, self.slots.get(*slot as usize)?.as_ref()?))
    }

    /// Puts `record` under `name`; returns the record it replaced.
    pub fn insert(&mut self, name: Arc<str>, record: ObjectRecord) -> Option<ObjectRecord> {
        if let Some(slot) = self.index.get(&name) {
            return self.slots[*slot as usize].replace(record);
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(record);
                slot
            }
            None => {
                self.slots.push(Some(record));
                // More than 4 billion live objects of one kind do not fit in memory anyway.
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        self.index.insert(name, slot);
        None
    }

    /// Takes the record `name` out.
    pub fn remove(&mut self, name: &str) -> Option<ObjectRecord> {
        let slot = self.index.remove(name)?;
        let record = self.slots.get_mut(slot as usize)?.take();
        self.free.push(slot);
        record
    }

    /// The records with their names, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &ObjectRecord)> {
        self.index.iter().filter_map(|(name, slot)| {
            self.slots
                .get(*slot as usize)
                .and_then(Option::as_ref)
                .map(|r| (name, r))
        })
    }

    /// The names held, in no order.
    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.index.keys()
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
        let saved = HashMap::<Arc<str>, ObjectRecord>::deserialize(deserializer)?;
        let mut records = Records::default();
        for (name, record) in saved {
            records.insert(name, record);
        }
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::state::ClusterState;
    use ipaudit_schemas::builders::EventBuilder;
    use ipaudit_schemas::Stream;

    fn record(name: &str, rv: i64) -> ObjectRecord {
        let mut state = ClusterState::new();
        state.apply(EventBuilder::subnet(name).rv(rv).added());
        state.get(Stream::Subnet, name).cloned().unwrap()
    }

    #[test]
    fn a_deleted_records_slot_is_reused_and_replacing_keeps_one_slot() {
        let mut records = Records::default();
        assert!(records.insert("a".into(), record("a", 1)).is_none());
        assert!(records.insert("b".into(), record("b", 2)).is_none());
        let old = records.insert("a".into(), record("a", 3));
        assert_eq!(old.map(|r| r.rv()), Some(1));
        assert_eq!(records.slots.len(), 2);
        assert_eq!(records.remove("b").map(|r| r.rv()), Some(2));
        assert!(records.get("b").is_none());
        records.insert("c".into(), record("c", 4));
        assert_eq!(records.slots.len(), 2, "c took b's slot");
        let mut names: Vec<&str> = records.iter().map(|(n, _)| &**n).collect();
        names.sort();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(records.get("a").map(ObjectRecord::rv), Some(3));
    }

    #[test]
    fn records_are_saved_as_a_map_by_name_and_read_back() {
        let mut records = Records::default();
        records.insert("a".into(), record("a", 1));
        records.insert("b".into(), record("b", 2));
        records.remove("a");
        let json = serde_json::to_value(&records).unwrap();
        assert_eq!(json.as_object().map(|m| m.len()), Some(1));
        assert!(json.get("b").is_some());
        let back: Records = serde_json::from_value(json).unwrap();
        assert_eq!(back.get("b").map(ObjectRecord::rv), Some(2));
        assert_eq!(back.len(), 1);
    }
}
