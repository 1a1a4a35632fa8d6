//! Undecodable messages are logged by summary, not one line each: a topic written with a
//! schema this build does not know holds little else, and 200,000 identical lines would
//! bury everything around them. Per partition and writer fingerprint (the schema the
//! message names in its header; none for a message without one), the first message is
//! logged whole, then how many followed, at most every [`SUMMARY_EVERY`], as Vector
//! rate-limits its internal logs. Each message still gets its dead-letter record and is
//! counted in `ipaudit_analyzer_input_problems_total{kind="undecodable"}`.
//!
//! Pure: the caller passes the time, and logs what it is told to.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The shortest time between two lines about one (partition, fingerprint).
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// Which undecodable messages are alike: the partition and the writer's fingerprint.
pub type Kind = (i32, Option<u64>);

/// What to log about an undecodable message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// The first of its kind (or the first since a quiet spell): log it whole.
    First,
    /// Log a summary of those not logged since the last line, this one included.
    Summary(Summary),
    /// Nothing now: it is counted for the next summary.
    Counted,
}

/// Messages of one kind that were not logged one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The partition.
    pub partition: i32,
    /// The writer's fingerprint, if the messages had a header.
    pub fingerprint: Option<u64>,
    /// How many.
    pub count: u64,
    /// The offset of the first of them.
    pub first_offset: i64,
    /// The offset of the last of them.
    pub last_offset: i64,
}

#[derive(Debug)]
struct Window {
    logged_at: Instant,
    /// Messages since the last line: count, first and last offsets.
    unlogged: Option<(u64, i64, i64)>,
}

/// The summaries being kept, by kind of message.
#[derive(Debug, Default)]
pub struct UndecodableLog {
    windows: HashMap<Kind, Window>,
}

impl UndecodableLog {
    /// An undecodable message of `kind` at `offset`, seen at `now`: what to log.
    pub fn see(&mut self, kind: Kind, offset: i64, now: Instant) -> Line {
        let Some(window) = self.windows.get_mut(&kind) else {
            self.windows.insert(
                kind,
                Window {
                    logged_at: now,
                    unlogged: None,
                },
            );
            return Line::First;
        };
        let (count, first, _) = window.unlogged.unwrap_or((0, offset, offset));
        window.unlogged = Some((count + 1, first, offset));
        if now.duration_since(window.logged_at) < SUMMARY_EVERY {
            return Line::Counted;
        }
        window.logged_at = now;
        Line::Summary(take_summary(kind, window).unwrap_or(Summary {
            partition: kind.0,
            fingerprint: kind.1,
            count: 1,
            first_offset: offset,
            last_offset: offset,
        }))
    }

    /// The summaries due at `now` (kinds with messages not logged for [`SUMMARY_EVERY`]),
    /// so that the last of a burst is told without waiting for another message; kinds
    /// quiet for as long are forgotten, so that the next message is logged whole again.
    pub fn due(&mut self, now: Instant) -> Vec<Summary> {
        let mut due = Vec::new();
        self.windows.retain(|kind, window| {
            if now.duration_since(window.logged_at) < SUMMARY_EVERY {
                return true;
            }
            match take_summary(*kind, window) {
                Some(summary) => {
                    window.logged_at = now;
                    due.push(summary);
                    true
                }
                None => false,
            }
        });
        due.sort_by_key(|s| (s.partition, s.fingerprint));
        due
    }
}

fn take_summary(kind: Kind, window: &mut Window) -> Option<Summary> {
    let (count, first_offset, last_offset) = window.unlogged.take()?;
    Some(Summary {
        partition: kind.0,
        fingerprint: kind.1,
        count,
        first_offset,
        last_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: Kind = (3, Some(0xfeed));

    #[test]
    fn the_first_message_is_logged_the_rest_summed_up_at_most_every_ten_seconds() {
        let start = Instant::now();
        let mut log = UndecodableLog::default();
        assert_eq!(log.see(KIND, 100, start), Line::First);
        let mut lines = Vec::new();
        // 200,000 messages over 25 seconds.
        for i in 1..200_000i64 {
            let at = start + Duration::from_micros(125 * i as u64);
            match log.see(KIND, 100 + i, at) {
                Line::Counted => {}
                line => lines.push(line),
            }
        }
        assert_eq!(lines.len(), 2, "{lines:?}");
        let Line::Summary(first) = lines[0] else {
            panic!("{lines:?}")
        };
        assert_eq!((first.partition, first.fingerprint), KIND);
        assert_eq!(first.first_offset, 101);
        assert_eq!(first.count, (first.last_offset - 100) as u64);
        let end = start + Duration::from_secs(40);
        let rest = log.due(end);
        let told: u64 = lines
            .iter()
            .filter_map(|l| match l {
                Line::Summary(s) => Some(s.count),
                _ => None,
            })
            .chain(rest.iter().map(|s| s.count))
            .sum();
        assert_eq!(told, 199_999, "every message but the first is in a summary");
        assert_eq!(rest[0].last_offset, 100 + 199_999);
    }

    #[test]
    fn partitions_and_fingerprints_are_summed_up_apart_and_a_quiet_kind_starts_over() {
        let start = Instant::now();
        let mut log = UndecodableLog::default();
        assert_eq!(log.see((0, Some(1)), 5, start), Line::First);
        assert_eq!(log.see((0, Some(2)), 6, start), Line::First);
        assert_eq!(log.see((1, Some(1)), 7, start), Line::First);
        assert_eq!(log.see((0, None), 8, start), Line::First);
        assert_eq!(log.see((0, Some(1)), 9, start), Line::Counted);
        let later = start + SUMMARY_EVERY;
        let due = log.due(later);
        assert_eq!(due.len(), 1);
        assert_eq!(
            (due[0].partition, due[0].fingerprint, due[0].count),
            (0, Some(1), 1)
        );
        // Quiet for another interval: forgotten, and logged whole when it comes back.
        assert!(log.due(later + SUMMARY_EVERY).is_empty());
        assert_eq!(
            log.see((0, Some(1)), 10, later + SUMMARY_EVERY * 2),
            Line::First
        );
    }
}
