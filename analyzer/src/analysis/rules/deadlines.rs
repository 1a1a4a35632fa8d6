//! Timers on event time, for rules that wait out a grace period: one deadline per key,
//! taken in deadline order. Serializable with the rule that owns it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Deadlines (Unix ms, event time) by key.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Deadlines {
    by_key: BTreeMap<String, i64>,
    order: BTreeSet<(i64, String)>,
}

impl Deadlines {
    /// Sets (or moves) the deadline of `key`.
    pub fn set(&mut self, key: &str, at_ms: i64) {
        if let Some(old) = self.by_key.insert(key.to_owned(), at_ms) {
            self.order.remove(&(old, key.to_owned()));
        }
        self.order.insert((at_ms, key.to_owned()));
    }

    /// Sets the deadline of `key` unless it has one.
    pub fn set_if_absent(&mut self, key: &str, at_ms: i64) {
        if !self.by_key.contains_key(key) {
            self.set(key, at_ms);
        }
    }

    /// Forgets `key`.
    pub fn cancel(&mut self, key: &str) {
        if let Some(at) = self.by_key.remove(key) {
            self.order.remove(&(at, key.to_owned()));
        }
    }

    /// Whether some key starting with `prefix` has a deadline.
    pub fn has_key_prefix(&self, prefix: &str) -> bool {
        self.by_key
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .next()
            .is_some_and(|(k, _)| k.starts_with(prefix))
    }

    /// Whether no deadline is set.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Takes every key whose deadline is before `now_ms`, earliest first.
    pub fn take_due(&mut self, now_ms: i64) -> Vec<(i64, String)> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.order.first() {
            if *at >= now_ms {
                break;
            }
            if let Some((at, key)) = self.order.pop_first() {
                self.by_key.remove(&key);
                due.push((at, key));
            }
        }
        due
    }

    /// Whether a deadline is before `now_ms` (cheap: the engine asks after every event).
    pub fn any_due(&self, now_ms: i64) -> bool {
        self.order.first().is_some_and(|(at, _)| *at < now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_due_in_deadline_order_once() {
        let mut d = Deadlines::default();
        d.set("b", 20);
        d.set("a", 10);
        d.set_if_absent("a", 5);
        d.set("c", 30);
        d.cancel("c");
        assert!(!d.any_due(10), "a deadline at 10 is not before 10");
        assert_eq!(d.take_due(25), [(10, "a".into()), (20, "b".into())]);
        assert!(d.take_due(100).is_empty());
    }
}
