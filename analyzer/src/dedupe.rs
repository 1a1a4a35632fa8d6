//! Drops events seen before: two collectors, a replayed outbox or a relist deliver the same
//! event again. The key is (stream, uid, resourceVersion, type); memory is bounded by
//! forgetting the oldest keys first (a late duplicate past that window is still harmless:
//! the state ignores versions older than what it holds).
//!
//! Keys are kept as the numeric resourceVersion plus a 64-bit hash of the rest, so that
//! the hot path allocates nothing. A resourceVersion is one etcd write, shared by at most
//! a few events, so two different events would need the same version *and* a 64-bit
//! hash collision to be confused.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::hash::BuildHasher;

use ipaudit_schemas::WatchEvent;
use rustc_hash::{FxBuildHasher, FxHashSet};

/// The identity of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct EventKey {
    resource_version: i64,
    digest: u64,
}

impl EventKey {
    fn of(event: &WatchEvent) -> Self {
        let mut digest = FxBuildHasher.hash_one((event.stream, event.event_type, event.uid()));
        let resource_version = match event.resource_version_num {
            Some(rv) => rv,
            None => {
                digest ^= FxBuildHasher
                    .hash_one(event.resource_version.as_str())
                    .rotate_left(17);
                -1
            }
        };
        EventKey {
            resource_version,
            digest,
        }
    }
}

/// A bounded set of recently seen event keys.
#[derive(Debug, Serialize, Deserialize)]
pub struct Dedupe {
    seen: FxHashSet<EventKey>,
    order: VecDeque<EventKey>,
    capacity: usize,
    dropped: u64,
}

impl Dedupe {
    /// Remembers up to `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Dedupe {
            seen: FxHashSet::with_capacity_and_hasher(capacity.min(1 << 20), FxBuildHasher),
            order: VecDeque::with_capacity(capacity.min(1 << 20)),
            capacity: capacity.max(1),
            dropped: 0,
        }
    }

    /// Whether the event is new; markers (bookmarks, relist frames) always are.
    pub fn is_new(&mut self, event: &WatchEvent) -> bool {
        if !event.event_type.carries_object() {
            return true;
        }
        let key = EventKey::of(event);
        if self.seen.contains(&key) {
            self.dropped += 1;
            return false;
        }
        if self.order.len() == self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.seen.remove(&oldest);
            }
        }
        self.order.push_back(key);
        self.seen.insert(key);
        true
    }

    /// Duplicates dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::builders::EventBuilder;
    use ipaudit_schemas::Stream;

    #[test]
    fn the_same_event_twice_is_dropped_once() {
        let mut dedupe = Dedupe::new(10);
        let e = EventBuilder::ip("a", "s").rv(5).added();
        assert!(dedupe.is_new(&e));
        assert!(!dedupe.is_new(&e));
        assert_eq!(dedupe.dropped(), 1);
    }

    #[test]
    fn another_type_or_version_of_the_same_object_is_new() {
        let mut dedupe = Dedupe::new(10);
        assert!(dedupe.is_new(&EventBuilder::ip("a", "s").rv(5).added()));
        assert!(dedupe.is_new(&EventBuilder::ip("a", "s").rv(5).modified()));
        assert!(dedupe.is_new(&EventBuilder::ip("a", "s").rv(6).modified()));
        assert!(dedupe.is_new(&EventBuilder::ip("a", "s").uid("other").rv(6).modified()));
    }

    #[test]
    fn bookmarks_are_never_dropped() {
        let mut dedupe = Dedupe::new(10);
        let b = EventBuilder::bookmark(Stream::Ip, 9);
        assert!(dedupe.is_new(&b));
        assert!(dedupe.is_new(&b));
    }

    #[test]
    fn memory_is_bounded_by_forgetting_the_oldest() {
        let mut dedupe = Dedupe::new(2);
        let first = EventBuilder::ip("a", "s").rv(1).added();
        assert!(dedupe.is_new(&first));
        assert!(dedupe.is_new(&EventBuilder::ip("b", "s").rv(2).added()));
        assert!(dedupe.is_new(&EventBuilder::ip("c", "s").rv(3).added()));
        assert!(dedupe.is_new(&first), "forgotten after two newer keys");
    }
}
