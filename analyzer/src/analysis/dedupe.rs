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
///
/// Events nearly always come in version order, so most keys arrive above every key held:
/// those are certainly new and join a queue kept in version order, where a later duplicate
/// is found by binary search. Only a key that arrives below the queue's last version (a
/// late stream, a redelivery) goes to a hash set. Both forget the oldest arrivals first.
#[derive(Debug)]
pub struct Dedupe {
    /// Keys that arrived in version order, with their arrival number.
    in_order: VecDeque<(EventKey, u64)>,
    /// Keys that arrived below the queue's last version.
    scattered: FxHashSet<EventKey>,
    /// The scattered keys in arrival order, with their arrival number.
    scattered_order: VecDeque<(EventKey, u64)>,
    arrivals: u64,
    capacity: usize,
    dropped: u64,
}

/// The saved form (the one of earlier releases): every key, and the keys in arrival order.
#[derive(Serialize, Deserialize)]
struct Saved {
    seen: FxHashSet<EventKey>,
    order: VecDeque<EventKey>,
    capacity: usize,
    dropped: u64,
}

impl Serialize for Dedupe {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut order: Vec<(EventKey, u64)> = self
            .in_order
            .iter()
            .chain(&self.scattered_order)
            .copied()
            .collect();
        order.sort_by_key(|(_, arrival)| *arrival);
        Saved {
            seen: order.iter().map(|(k, _)| *k).collect(),
            order: order.into_iter().map(|(k, _)| k).collect(),
            capacity: self.capacity,
            dropped: self.dropped,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Dedupe {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let saved = Saved::deserialize(deserializer)?;
        let mut dedupe = Dedupe::empty(saved.capacity);
        for key in saved.order {
            if !dedupe.contains(&key) {
                dedupe.remember(key);
            }
        }
        dedupe.dropped = saved.dropped;
        Ok(dedupe)
    }
}

impl Dedupe {
    /// Remembers up to `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        let mut dedupe = Dedupe::empty(capacity);
        dedupe.in_order.reserve(capacity.min(1 << 20));
        dedupe
    }

    fn empty(capacity: usize) -> Self {
        Dedupe {
            in_order: VecDeque::new(),
            scattered: FxHashSet::default(),
            scattered_order: VecDeque::new(),
            arrivals: 0,
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
        if self.contains(&key) {
            self.dropped += 1;
            return false;
        }
        self.remember(key);
        true
    }

    fn contains(&self, key: &EventKey) -> bool {
        if !self.scattered.is_empty() && self.scattered.contains(key) {
            return true;
        }
        let rv = key.resource_version;
        if self
            .in_order
            .back()
            .is_none_or(|(last, _)| rv > last.resource_version)
        {
            // Above every key in the queue: the common case costs one comparison.
            return false;
        }
        let from = self
            .in_order
            .partition_point(|(k, _)| k.resource_version < rv);
        self.in_order
            .range(from..)
            .take_while(|(k, _)| k.resource_version == rv)
            .any(|(k, _)| k == key)
    }

    fn remember(&mut self, key: EventKey) {
        if self.in_order.len() + self.scattered_order.len() >= self.capacity {
            self.forget_oldest();
        }
        let arrival = self.arrivals;
        self.arrivals += 1;
        if self
            .in_order
            .back()
            .is_none_or(|(last, _)| key.resource_version >= last.resource_version)
        {
            self.in_order.push_back((key, arrival));
        } else {
            self.scattered.insert(key);
            self.scattered_order.push_back((key, arrival));
        }
    }

    fn forget_oldest(&mut self) {
        let queued = self.in_order.front().map(|(_, a)| *a);
        let scattered = self.scattered_order.front().map(|(_, a)| *a);
        if scattered.is_some_and(|s| queued.is_none_or(|q| s < q)) {
            // A key is held once at most (only a key not held is remembered).
            if let Some((key, _)) = self.scattered_order.pop_front() {
                self.scattered.remove(&key);
            }
        } else {
            self.in_order.pop_front();
        }
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
    fn a_duplicate_is_dropped_whether_its_key_came_in_version_order_or_late() {
        let mut dedupe = Dedupe::new(100);
        for rv in [5, 7, 9, 6, 8, 12, 3] {
            assert!(dedupe.is_new(&EventBuilder::ip("a", "s").rv(rv).added()));
        }
        for rv in [3, 5, 6, 7, 8, 9, 12] {
            assert!(
                !dedupe.is_new(&EventBuilder::ip("a", "s").rv(rv).added()),
                "{rv}"
            );
        }
        assert_eq!(dedupe.dropped(), 7);
        assert!(dedupe.is_new(&EventBuilder::ip("b", "s").rv(7).added()));
    }

    #[test]
    fn the_oldest_arrival_is_forgotten_first_across_late_and_in_order_keys() {
        let mut dedupe = Dedupe::new(3);
        let e = |rv| EventBuilder::ip("a", "s").rv(rv).added();
        assert!(dedupe.is_new(&e(10)));
        assert!(dedupe.is_new(&e(4)), "late");
        assert!(dedupe.is_new(&e(11)));
        assert!(dedupe.is_new(&e(12)), "forgets 10");
        assert!(!dedupe.is_new(&e(4)));
        assert!(dedupe.is_new(&e(13)), "forgets 4");
        assert!(dedupe.is_new(&e(4)));
        assert!(dedupe.is_new(&e(10)));
    }

    #[test]
    fn the_keys_survive_a_checkpoint_in_arrival_order() {
        let mut dedupe = Dedupe::new(3);
        let e = |rv| EventBuilder::ip("a", "s").rv(rv).added();
        for rv in [10, 4, 11] {
            dedupe.is_new(&e(rv));
        }
        let json = serde_json::to_value(&dedupe).unwrap();
        assert_eq!(json["order"].as_array().map(Vec::len), Some(3));
        let mut back: Dedupe = serde_json::from_value(json).unwrap();
        assert!(!back.is_new(&e(4)));
        assert!(back.is_new(&e(12)), "forgets 10, the oldest");
        assert!(back.is_new(&e(10)));
        assert_eq!(back.dropped(), 1);
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
