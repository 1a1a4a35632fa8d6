//! The indexes the rules share, kept in step with the records: which records name which
//! pool, which records hold an address for which owner, who holds each address, and
//! whose uid each whereabouts holding belongs to. Built from [`super::holdings`]; kept
//! apart from the records so that they can be updated while holdings are borrowed from
//! the records.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use ipaudit_schemas::Stream;

use super::holdings::{self, Holding};
use super::{pairs, RecordKey};

/// The records behind one index entry: nearly always one (an address has one holder, an
/// owner one record per kind), so they live inline.
pub(super) type Holders = SmallVec<[RecordKey; 1]>;

/// A holding that a record no longer holds, with the owner uid it belonged to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
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

/// The shared indexes.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Indexes {
    /// Records (IPs, SpiderEndpoints) by the pools they name: kind, then pool name.
    pub naming: HashMap<Stream, HashMap<String, HashSet<RecordKey>>>,
    /// IPAM records by the owners they hold addresses for.
    pub by_owner: HashMap<String, Holders>,
    /// Records and pods by the addresses they hold.
    pub by_address: HashMap<String, Holders>,
    /// whereabouts holdings carry no uid: the owner uid each of a record's addresses was
    /// bound to when it appeared, as (address, uid).
    #[serde(with = "pairs")]
    pub bindings: HashMap<RecordKey, SmallVec<[(String, String); 1]>>,
}

/// Whether holdings of this kind carry no uid, so that one is bound to them.
pub(super) fn binds_owner_uid(stream: Stream) -> bool {
    matches!(
        stream,
        Stream::IpPool | Stream::OverlappingRangeIpReservation
    )
}

impl Indexes {
    /// The uid bound to `record`'s holding of `address`.
    pub fn bound_uid(&self, record: &RecordKey, address: &str) -> Option<&str> {
        self.bindings
            .get(record)?
            .iter()
            .find(|(a, _)| a == address)
            .map(|(_, uid)| uid.as_str())
    }

    /// Binds `record`'s holding of `address` to `uid`; `replace` rebinds a bound one.
    pub fn bind(&mut self, record: &RecordKey, address: &str, uid: &str, replace: bool) {
        let bound = self.bindings.entry(record.clone()).or_default();
        match bound.iter_mut().find(|(a, _)| a == address) {
            Some((_, old)) if replace && old != uid => uid.clone_into(old),
            Some(_) => {}
            None => bound.push((address.to_owned(), uid.to_owned())),
        }
    }

    fn unbind(&mut self, record: &RecordKey, address: &str) -> Option<String> {
        let bound = self.bindings.get_mut(record)?;
        let index = bound.iter().position(|(a, _)| a == address)?;
        let (_, uid) = bound.remove(index);
        if bound.is_empty() {
            self.bindings.remove(record);
        }
        Some(uid)
    }

    /// Adds what a record names and holds.
    pub fn add(&mut self, key: &RecordKey, pools: &[(Stream, &str)], held: &[Holding<'_>]) {
        for (stream, pool) in pools {
            let by_name = self.naming.entry(*stream).or_default();
            match by_name.get_mut(*pool) {
                Some(set) => {
                    set.insert(key.clone());
                }
                None => {
                    by_name.insert((*pool).to_owned(), HashSet::from_iter([key.clone()]));
                }
            }
        }
        let record_holds = holdings::is_record_holding(key.0);
        for holding in held {
            add_to(&mut self.by_address, holding.address, key);
            if record_holds {
                add_to(&mut self.by_owner, &holding.owner, key);
            }
        }
    }

    /// Takes out what a record named and held, except the holdings in `keep` (those its
    /// next version still has); returns the holdings it let go.
    pub fn remove(
        &mut self,
        key: &RecordKey,
        pools: &[(Stream, &str)],
        held: &[Holding<'_>],
        keep: &[Holding<'_>],
    ) -> Vec<Released> {
        for (stream, pool) in pools {
            if let Some(by_name) = self.naming.get_mut(stream) {
                if let Some(set) = by_name.get_mut(*pool) {
                    set.remove(key);
                    if set.is_empty() {
                        by_name.remove(*pool);
                    }
                }
            }
        }
        let mut released = Vec::new();
        for holding in held {
            remove_from(&mut self.by_address, holding.address, key);
            remove_from(&mut self.by_owner, &holding.owner, key);
            let still_held = keep
                .iter()
                .any(|h| h.address == holding.address && h.owner == holding.owner);
            if still_held {
                continue;
            }
            let bound = self.unbind(key, holding.address);
            if holdings::is_record_holding(key.0) {
                released.push(Released {
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
