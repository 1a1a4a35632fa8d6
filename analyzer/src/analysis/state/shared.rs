//! Values that many records have alike (a finalizer list, the subnet and namespace of an
//! IP, the phase of a pod), kept once per process and shared through an `Arc`: 8 bytes a
//! record instead of a copy each. A value is found by a hash of its borrowed fields, so
//! that finding one builds nothing.
//!
//! A table is bounded: past its limit of distinct values (hostile or unusual input, a new
//! value per object) a value is held by its record alone, so the table cannot grow
//! without end. Values are never taken out: the ones worth sharing are few.

use std::sync::{Arc, Mutex};

use hashbrown::HashTable;

/// A process-wide table of shared values of one type (a `static`).
pub(super) struct SharedTable<T> {
    table: Mutex<HashTable<Arc<T>>>,
    limit: usize,
}

impl<T> SharedTable<T> {
    /// An empty table sharing at most `limit` values.
    pub const fn new(limit: usize) -> Self {
        SharedTable {
            table: Mutex::new(HashTable::new()),
            limit,
        }
    }

    /// The shared value with hash `hash` that `is` accepts, or the one `make` builds (then
    /// shared, while the table has room). `hash_of` hashes a held value as `hash` was made.
    pub fn get_or_make(
        &self,
        hash: u64,
        is: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
        hash_of: impl Fn(&T) -> u64,
    ) -> Arc<T> {
        // A panic elsewhere while the lock was held leaves the table whole: every change
        // to it is one call.
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(shared) = table.find(hash, |value| is(value)) {
            return Arc::clone(shared);
        }
        let value = Arc::new(make());
        if table.len() < self.limit {
            table.insert_unique(hash, Arc::clone(&value), |v| hash_of(v));
        }
        value
    }

    /// How many values are shared.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(n: u32) -> u64 {
        u64::from(n % 7)
    }

    #[test]
    fn equal_values_share_one_copy_and_past_the_limit_each_has_its_own() {
        let table: SharedTable<u32> = SharedTable::new(3);
        let get = |n: u32| table.get_or_make(hash(n), |v| *v == n, || n, |v| hash(*v));
        let a = get(10);
        let b = get(10);
        assert!(Arc::ptr_eq(&a, &b));
        // 17 has 10's hash: told apart by `is`.
        let c = get(17);
        assert_eq!((*a, *c), (10, 17));
        let d = get(4);
        assert_eq!(table.len(), 3);
        let e = get(5);
        let f = get(5);
        assert!(
            !Arc::ptr_eq(&e, &f),
            "past the limit, nothing more is shared"
        );
        assert_eq!((*d, *e, *f), (4, 5, 5));
        assert_eq!(table.len(), 3);
        assert!(Arc::ptr_eq(&get(17), &c), "the shared ones still are");
    }
}
