//! Records by a string their holdings carry: an address, or an owner's `namespace/name`.
//!
//! Nearly every holder holds one or two addresses (a kube-ovn IP, a pod, a whereabouts
//! reservation, a SpiderEndpoint). Those are kept as 8-byte entries in a table per kind,
//! the record's slot with 32 bits of the string's hash, and the string itself is not
//! copied: it is the
//! record's own, and a reader confirms a candidate against the record's holdings (see
//! [`HolderIndex::holders`]). A pool holds hundreds, and confirming against it would scan
//! them all, so pools' holdings keep their string, exactly, apart.
//!
//! An entry is added per holding and taken out per holding, so a record that holds one
//! string twice (or two strings of one hash) has two entries, and taking one out leaves
//! the other.

use hashbrown::HashTable;
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;
use smol_str::SmolStr;

use super::holdings;
use super::records::RecordId;
use super::records::{name_hash, table_hash, Slot, STREAMS, STREAM_ORDER};

/// A holder of a few strings: its slot in its kind's records and 32 bits of the string's
/// hash.
#[derive(Debug, Clone, Copy)]
struct Entry {
    hash: u32,
    slot: Slot,
}

/// Records by the strings their holdings carry (see the module).
#[derive(Debug, Default)]
pub(super) struct HolderIndex {
    /// Holders of a few strings, by kind, confirmed against their holdings when read.
    few: [HashTable<Entry>; STREAMS],
    /// Pools, by the string itself (few records, each holding many).
    pools: HashMap<SmolStr, HolderIds>,
}

/// The holders of one string: nearly always one.
pub(super) type HolderIds = SmallVec<[RecordId; 2]>;

impl HolderIndex {
    /// `id` holds `key` (once more).
    pub fn add(&mut self, key: &str, id: RecordId) {
        if holdings::is_pool(id.stream) {
            match self.pools.get_mut(key) {
                Some(holders) if holders.contains(&id) => {}
                Some(holders) => holders.push(id),
                None => {
                    self.pools
                        .insert(SmolStr::new(key), HolderIds::from_elem(id, 1));
                }
            }
            return;
        }
        let hash = name_hash(key);
        let entry = Entry {
            hash,
            slot: id.slot,
        };
        self.few[id.stream as usize].insert_unique(table_hash(hash), entry, |e| table_hash(e.hash));
    }

    /// `id` holds `key` once less.
    pub fn remove(&mut self, key: &str, id: RecordId) {
        if holdings::is_pool(id.stream) {
            if let Some(holders) = self.pools.get_mut(key) {
                holders.retain(|held| *held != id);
                if holders.is_empty() {
                    self.pools.remove(key);
                }
            }
            return;
        }
        let hash = name_hash(key);
        if let Ok(entry) = self.few[id.stream as usize]
            .find_entry(table_hash(hash), |e| e.hash == hash && e.slot == id.slot)
        {
            entry.remove();
        }
    }

    /// The records holding `key`, each once, in no order. `holds` confirms that a
    /// record that holds a few strings holds `key` (32 bits of hash can be shared).
    pub fn holders(&self, key: &str, holds: impl Fn(RecordId) -> bool) -> HolderIds {
        let mut ids = HolderIds::new();
        if let Some(pools) = self.pools.get(key) {
            ids.extend(pools.iter().copied());
        }
        let hash = name_hash(key);
        for (table, &stream) in self.few.iter().zip(&STREAM_ORDER) {
            if table.is_empty() {
                continue;
            }
            for entry in table.iter_hash(table_hash(hash)) {
                let id = RecordId {
                    stream,
                    slot: entry.slot,
                };
                if entry.hash == hash && !ids.contains(&id) && holds(id) {
                    ids.push(id);
                }
            }
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use ipaudit_schemas::Stream;

    use super::*;

    fn ip(slot: u32) -> RecordId {
        RecordId {
            stream: Stream::Ip,
            slot,
        }
    }

    fn pool(slot: u32) -> RecordId {
        RecordId {
            stream: Stream::IpPool,
            slot,
        }
    }

    #[test]
    fn a_candidate_counts_only_when_its_record_confirms_it_holds_the_string() {
        let mut index = HolderIndex::default();
        index.add("10.0.0.1", ip(1));
        index.add("10.0.0.1", ip(2));
        index.add("10.0.0.1", pool(7));
        let all = index.holders("10.0.0.1", |_| true);
        assert_eq!(all.as_slice(), [pool(7), ip(1), ip(2)]);
        // A pool is kept by its string: nothing to confirm.
        let confirmed = index.holders("10.0.0.1", |id| id == ip(2));
        assert_eq!(confirmed.as_slice(), [pool(7), ip(2)]);
        assert!(index.holders("10.0.0.2", |_| true).is_empty());
    }

    #[test]
    fn a_string_held_twice_by_one_record_stays_held_until_both_are_taken_out() {
        let mut index = HolderIndex::default();
        index.add("default/web-0", ip(3));
        index.add("default/web-0", ip(3));
        assert_eq!(index.holders("default/web-0", |_| true).as_slice(), [ip(3)]);
        index.remove("default/web-0", ip(3));
        assert_eq!(index.holders("default/web-0", |_| true).as_slice(), [ip(3)]);
        index.remove("default/web-0", ip(3));
        assert!(index.holders("default/web-0", |_| true).is_empty());
        // Taking out what is not there changes nothing.
        index.remove("default/web-0", ip(3));
        index.add("10.0.0.9", pool(1));
        index.remove("10.0.0.9", pool(2));
        assert_eq!(index.holders("10.0.0.9", |_| true).as_slice(), [pool(1)]);
    }

    #[test]
    fn many_holders_survive_the_table_growing() {
        let mut index = HolderIndex::default();
        let key_of = |slot: u32| format!("10.{}.{}.1", slot / 256, slot % 256);
        for slot in 0..10_000 {
            index.add(&key_of(slot), ip(slot));
        }
        for slot in (0..10_000).step_by(2) {
            index.remove(&key_of(slot), ip(slot));
        }
        for slot in 0..10_000u32 {
            let key = key_of(slot);
            let expected: &[RecordId] = if slot % 2 == 1 { &[ip(slot)] } else { &[] };
            let holders = index.holders(&key, |id| key_of(id.slot) == key);
            assert_eq!(holders.as_slice(), expected, "{key}");
        }
    }
}
