//! The indexes the rules share, kept in step with the records: which records name which
//! pool, which records hold an address for which owner, who holds each address, and
//! whose uid each whereabouts holding belongs to. Built from [`super::holdings`]; kept
//! apart from the records so that they can be updated while holdings are borrowed from
//! the records.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use smol_str::SmolStr;

use ipaudit_schemas::Stream;

use super::holder_index::HolderIndex;
use super::holdings::{self, Holding};
use super::records::RecordId;
use super::{pairs, RecordKey};

/// A holding that a record no longer holds, with the owner uid it belonged to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasedHolding {
    /// The address.
    pub address: String,
    /// `namespace/name` of its owner.
    pub owner: String,
    /// Where it was held (`ippool/kube-system/10.128.40.0-24`).
    pub scope: String,
    /// The subnet, pool or network it was held in.
    pub place: String,
    /// The owner's uid: the record's, or the one bound when the holding appeared.
    pub owner_uid: Option<String>,
}

/// The shared indexes. Only the bindings are saved: the rest is rebuilt from the records
/// (see [`super::ClusterState`]'s saved form).
#[derive(Debug, Default)]
pub(super) struct Indexes {
    /// Pools by kind and name: the records (IPs, SpiderEndpoints) naming each, and
    /// whether it is live, in one entry, so that a record's check of the pools it names
    /// finds them where adding it to the index just looked.
    pub pools: HashMap<Stream, HashMap<SmolStr, PoolEntry>>,
    /// IPAM records by the owners they hold addresses for.
    pub by_owner: HolderIndex,
    /// Records and pods by the addresses they hold.
    pub by_address: HolderIndex,
    /// whereabouts holdings carry no uid: the owner uid each of a record's addresses was
    /// bound to when it appeared.
    pub bindings: HashMap<RecordKey, AddressUids>,
}

/// A pool name's entry: kept while the pool is live or some record names it.
#[derive(Debug, Default)]
pub(super) struct PoolEntry {
    /// The records naming it.
    pub naming: HashSet<RecordId>,
    /// A pool of this name is held.
    pub live: bool,
}

/// The saved form of the indexes: the bindings (history: which pod each whereabouts
/// holding belonged to when it appeared). A checkpoint of an earlier release also holds
/// the other indexes by name; they are rebuilt from the records instead.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct SavedIndexes {
    #[serde(with = "pairs", default)]
    pub bindings: HashMap<RecordKey, AddressUids>,
}

/// The owner uids bound to one record's addresses, as (address, uid): nearly always one
/// (a reservation), but a whereabouts pool binds one per allocation, so past a few
/// entries a map by address keeps each lookup O(1). Saved as the list of pairs.
#[derive(Debug, Default)]
pub(super) struct AddressUids {
    list: SmallVec<[(String, String); 1]>,
    by_address: Option<HashMap<String, usize>>,
}

/// Past this many bindings, a record's are looked up by a map.
const BINDINGS_LISTED: usize = 8;

impl AddressUids {
    fn position(&self, address: &str) -> Option<usize> {
        match &self.by_address {
            Some(map) => map.get(address).copied(),
            None => self.list.iter().position(|(a, _)| a == address),
        }
    }

    fn get(&self, address: &str) -> Option<&str> {
        self.position(address).map(|i| self.list[i].1.as_str())
    }

    fn get_mut(&mut self, address: &str) -> Option<&mut String> {
        self.position(address).map(|i| &mut self.list[i].1)
    }

    fn push(&mut self, address: String, uid: String) {
        if let Some(map) = &mut self.by_address {
            map.insert(address.clone(), self.list.len());
        }
        self.list.push((address, uid));
        if self.by_address.is_none() && self.list.len() > BINDINGS_LISTED {
            self.by_address = Some(
                self.list
                    .iter()
                    .enumerate()
                    .map(|(i, (a, _))| (a.clone(), i))
                    .collect(),
            );
        }
    }

    fn remove(&mut self, address: &str) -> Option<String> {
        let index = self.position(address)?;
        let (_, uid) = self.list.swap_remove(index);
        if let Some(map) = &mut self.by_address {
            map.remove(address);
            if let Some((moved, _)) = self.list.get(index) {
                map.insert(moved.clone(), index);
            }
        }
        Some(uid)
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

impl Serialize for AddressUids {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.list.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AddressUids {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let pairs = Vec::<(String, String)>::deserialize(deserializer)?;
        let mut uids = AddressUids::default();
        for (address, uid) in pairs {
            uids.push(address, uid);
        }
        Ok(uids)
    }
}

/// Whether holdings of this kind carry no uid, so that one is bound to them.
pub(super) fn binds_owner_uid(stream: Stream) -> bool {
    matches!(
        stream,
        Stream::IpPool
            | Stream::OverlappingRangeIpReservation
            | Stream::CalicoIpamBlock
            | Stream::CalicoV3IpamBlock
            | Stream::CiliumNode
    )
}

/// Saves the indexes as [`SavedIndexes`]: their bindings.
pub(super) fn save<S: serde::Serializer>(
    indexes: &Indexes,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct SavedRef<'a> {
        #[serde(with = "pairs")]
        bindings: &'a HashMap<RecordKey, AddressUids>,
    }
    SavedRef {
        bindings: &indexes.bindings,
    }
    .serialize(serializer)
}

impl Indexes {
    /// The uid bound to `record`'s holding of `address`.
    pub fn bound_uid(&self, record: &RecordKey, address: &str) -> Option<&str> {
        self.bindings.get(record)?.get(address)
    }

    /// Binds `record`'s holding of `address` to `uid`; `replace` rebinds a bound one.
    pub fn bind(&mut self, record: &RecordKey, address: &str, uid: &str, replace: bool) {
        let bound = self.bindings.entry(record.clone()).or_default();
        match bound.get_mut(address) {
            Some(old) if replace && old != uid => uid.clone_into(old),
            Some(_) => {}
            None => bound.push(address.to_owned(), uid.to_owned()),
        }
    }

    fn unbind(&mut self, record: &RecordKey, address: &str) -> Option<String> {
        let bound = self.bindings.get_mut(record)?;
        let uid = bound.remove(address)?;
        if bound.is_empty() {
            self.bindings.remove(record);
        }
        Some(uid)
    }

    /// Changes the entry of the pool `name` of `stream`, made if there is none.
    fn add_to_pool_entry(
        &mut self,
        stream: Stream,
        name: &str,
        change: impl FnOnce(&mut PoolEntry),
    ) {
        let by_name = self.pools.entry(stream).or_default();
        match by_name.get_mut(name) {
            Some(entry) => change(entry),
            None => {
                let mut entry = PoolEntry::default();
                change(&mut entry);
                by_name.insert(SmolStr::new(name), entry);
            }
        }
    }

    /// Changes the entry of the pool `name` of `stream`, if there is one, and drops it
    /// once the pool is not live and nothing names it.
    fn change_pool_entry(
        &mut self,
        stream: Stream,
        name: &str,
        change: impl FnOnce(&mut PoolEntry),
    ) {
        let Some(by_name) = self.pools.get_mut(&stream) else {
            return;
        };
        let Some(entry) = by_name.get_mut(name) else {
            return;
        };
        change(entry);
        if !entry.live && entry.naming.is_empty() {
            by_name.remove(name);
        }
    }

    /// Notes that the pool `name` of `stream` is held now (`live`) or no more.
    pub fn set_pool_live(&mut self, stream: Stream, name: &str, live: bool) {
        if live {
            self.add_to_pool_entry(stream, name, |entry| entry.live = true);
        } else {
            self.change_pool_entry(stream, name, |entry| entry.live = false);
        }
    }

    /// Whether the pool `name` of `stream` is held.
    pub fn pool_live(&self, stream: Stream, name: &str) -> bool {
        self.pools
            .get(&stream)
            .and_then(|by_name| by_name.get(name))
            .is_some_and(|entry| entry.live)
    }

    /// Adds what a record names and holds.
    pub fn add(&mut self, id: RecordId, pools: &[(Stream, &str)], held: &[Holding<'_>]) {
        for (stream, pool) in pools {
            self.add_to_pool_entry(*stream, pool, |entry| {
                entry.naming.insert(id);
            });
        }
        let record_holds = holdings::is_record_holding(id.stream);
        for holding in held {
            self.by_address.add(holding.address, id);
            if record_holds {
                self.by_owner.add(&holding.owner, id);
            }
        }
    }

    /// Takes out what a record named and held, except the holdings in `keep` (those its
    /// next version still has); returns the holdings it let go.
    pub fn remove(
        &mut self,
        (id, key): (RecordId, &RecordKey),
        pools: &[(Stream, &str)],
        held: &[Holding<'_>],
        keep: &[Holding<'_>],
    ) -> Vec<ReleasedHolding> {
        for (stream, pool) in pools {
            self.change_pool_entry(*stream, pool, |entry| {
                entry.naming.remove(&id);
            });
        }
        let mut released = Vec::new();
        // A pool keeps nearly all its allocations from one version to the next: look them
        // up by a set, not a scan per holding.
        let kept: Option<HashSet<(&str, &str)>> = (keep.len() > BINDINGS_LISTED)
            .then(|| keep.iter().map(|h| (h.address, h.owner.as_ref())).collect());
        for holding in held {
            self.by_address.remove(holding.address, id);
            if holdings::is_record_holding(id.stream) {
                self.by_owner.remove(&holding.owner, id);
            }
            let still_held = match &kept {
                Some(kept) => kept.contains(&(holding.address, holding.owner.as_ref())),
                None => keep
                    .iter()
                    .any(|h| h.address == holding.address && h.owner == holding.owner),
            };
            if still_held {
                continue;
            }
            let bound = self.unbind(key, holding.address);
            if holdings::is_record_holding(key.0) {
                released.push(ReleasedHolding {
                    address: holding.address.to_owned(),
                    owner: holding.owner.clone().into_owned(),
                    scope: holding.scope.to_string(),
                    place: holding.scope.place().to_owned(),
                    owner_uid: holding.owner_uid.map(str::to_owned).or(bound),
                });
            }
        }
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_with_many_bindings_finds_each_after_removals_and_saves_them_as_pairs() {
        let mut uids = AddressUids::default();
        let n = BINDINGS_LISTED * 4;
        for i in 0..n {
            uids.push(format!("10.0.0.{i}"), format!("uid-{i}"));
        }
        assert!(uids.by_address.is_some(), "past a few, looked up by a map");
        for i in (0..n).step_by(3) {
            assert_eq!(
                uids.remove(&format!("10.0.0.{i}")),
                Some(format!("uid-{i}"))
            );
        }
        for i in 0..n {
            let expected = (i % 3 != 0).then(|| format!("uid-{i}"));
            assert_eq!(
                uids.get(&format!("10.0.0.{i}")).map(str::to_owned),
                expected,
                "address {i}"
            );
        }
        let json = serde_json::to_string(&uids).unwrap();
        assert!(json.starts_with("[[\""), "a list of pairs: {json}");
        let back: AddressUids = serde_json::from_str(&json).unwrap();
        assert_eq!(back.get("10.0.0.1"), Some("uid-1"));
        assert_eq!(back.get("10.0.0.3"), None);
    }
}
