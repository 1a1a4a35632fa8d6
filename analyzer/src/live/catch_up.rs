//! How far behind the member is, and when it will be at the end: the lag of the partitions
//! it owns against the rate at which it consumes them, measured over windows of at least
//! [`WINDOW`]. Pure: the consume loop hands it the clock, what it consumed so far and the
//! lag, and says what it returns (the log line while catching up, and a gauge).

use std::time::{Duration, Instant};

/// The shortest window a rate is measured over.
pub const WINDOW: Duration = Duration::from_secs(5);

/// How often a member that is catching up says so.
pub const SAY_EVERY: Duration = Duration::from_secs(10);

/// Where the member stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Messages between the ends of its partitions and what it consumed.
    pub lag: i64,
    /// Messages consumed per second over the last window (smoothed).
    pub per_second: f64,
    /// Time to reach the end at that rate; `None` while nothing is consumed.
    pub remaining: Option<Duration>,
    /// Whether to say it in the log now (catching up, and not said for [`SAY_EVERY`]).
    pub say: bool,
}

/// The rate and the estimate, window by window.
#[derive(Debug, Default)]
pub struct CatchUp {
    window_start: Option<(Instant, u64)>,
    per_second: Option<f64>,
    said: Option<Instant>,
}

impl CatchUp {
    /// Takes `consumed` (every message consumed so far) and `lag` at `now`; returns the
    /// estimate each time a window closes.
    pub fn observe(&mut self, now: Instant, consumed: u64, lag: i64) -> Option<Estimate> {
        let Some((start, consumed_then)) = self.window_start else {
            self.window_start = Some((now, consumed));
            return None;
        };
        let elapsed = now.saturating_duration_since(start);
        if elapsed < WINDOW {
            return None;
        }
        self.window_start = Some((now, consumed));
        let rate = consumed.saturating_sub(consumed_then) as f64 / elapsed.as_secs_f64();
        // Smoothed: one slow window (a checkpoint, a rebalance) does not swing it.
        let per_second = match self.per_second {
            Some(before) => 0.5 * before + 0.5 * rate,
            None => rate,
        };
        self.per_second = Some(per_second);
        let lag = lag.max(0);
        let remaining = if lag == 0 {
            Some(Duration::ZERO)
        } else if per_second > 0.0 {
            Some(Duration::from_secs_f64(lag as f64 / per_second))
        } else {
            None
        };
        let say = lag > 0 && self.said.is_none_or(|said| now - said >= SAY_EVERY);
        if say {
            self.said = Some(now);
        }
        Some(Estimate {
            lag,
            per_second,
            remaining,
            say,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_the_lag_at_the_rate_of_the_last_windows_and_said_every_ten_seconds() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut catch_up = CatchUp::default();
        assert_eq!(catch_up.observe(at(0), 0, 1_000_000), None);
        assert_eq!(
            catch_up.observe(at(4), 400_000, 600_000),
            None,
            "window not closed"
        );
        let first = catch_up.observe(at(5), 500_000, 500_000).unwrap();
        assert_eq!(first.per_second, 100_000.0);
        assert_eq!(first.remaining, Some(Duration::from_secs(5)));
        assert!(first.say);
        // A slower window: the rate is smoothed, and it is not said again within 10 s.
        let second = catch_up.observe(at(10), 700_000, 300_000).unwrap();
        assert_eq!(second.per_second, 70_000.0);
        assert!(!second.say);
        let third = catch_up.observe(at(15), 900_000, 100_000).unwrap();
        assert!(third.say);
        // At the end: nothing left, nothing said.
        let end = catch_up.observe(at(20), 1_000_000, 0).unwrap();
        assert_eq!(end.remaining, Some(Duration::ZERO));
        assert!(!end.say);
    }

    #[test]
    fn a_member_that_consumes_nothing_has_no_estimate_while_behind() {
        let t0 = Instant::now();
        let mut catch_up = CatchUp::default();
        catch_up.observe(t0, 10, 50);
        let stuck = catch_up.observe(t0 + WINDOW, 10, 50).unwrap();
        assert_eq!(stuck.per_second, 0.0);
        assert_eq!(stuck.remaining, None);
        assert!(stuck.say);
    }
}
