//! Exponential backoff with jitter for every retry loop of both programs (a failed watch or
//! list, a Kafka send that failed, an alert delivery), built on `backon`'s
//! [`ExponentialBuilder`]. The jitter spreads the retries of many collectors (or sinks)
//! that failed at the same moment, so that they do not hit the API server or a webhook in
//! step.
//!
//! Bounds: the n-th delay after a success (n = 0, 1, …) lies in `[min·2ⁿ, min·2ⁿ⁺¹)`,
//! never above `max`; once the doubling reaches `max/2` the delays stay in `[max/2, max]`.
//! Each caller documents its own `min` and `max`.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// The delays of one retry loop: [`Backoff::next_delay`] after each failure,
/// [`Backoff::reset`] after a success.
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
    max: Duration,
}

impl Backoff {
    /// Delays from `min` doubling up to `max` (a `max` below `min` is taken as `min`).
    pub fn new(min: Duration, max: Duration) -> Backoff {
        let max = max.max(min);
        // Jitter adds up to one step again: the steps stop at max/2 so that a jittered
        // delay stays within max and the top delays are still spread.
        let builder = ExponentialBuilder::new()
            .with_min_delay(min)
            .with_max_delay((max / 2).max(min))
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Backoff {
            delays: builder.build(),
            builder,
            max,
        }
    }

    /// How long to wait before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        // without_max_times: the iterator never ends; `max` stands in should it.
        self.delays.next().unwrap_or(self.max).min(self.max)
    }

    /// Back to the shortest delay (call it after a success).
    pub fn reset(&mut self) {
        self.delays = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn delays_double_from_min_with_jitter_and_never_pass_max() {
        for _ in 0..50 {
            let mut backoff = Backoff::new(200 * MS, 5000 * MS);
            let delays: Vec<Duration> = (0..12).map(|_| backoff.next_delay()).collect();
            for (n, delay) in delays.iter().enumerate().take(4) {
                let step = 200 * MS * 2u32.pow(n as u32);
                assert!(*delay >= step && *delay < step * 2, "{n}: {delays:?}");
            }
            for delay in &delays[5..] {
                assert!(*delay >= 2500 * MS && *delay <= 5000 * MS, "{delays:?}");
            }
        }
    }

    #[test]
    fn the_delays_are_spread_not_equal() {
        let mut backoff = Backoff::new(100 * MS, 100_000 * MS);
        let firsts: Vec<Duration> = (0..20)
            .map(|_| {
                backoff.reset();
                backoff.next_delay()
            })
            .collect();
        assert!(firsts.iter().any(|d| *d != firsts[0]), "{firsts:?}");
    }

    #[test]
    fn reset_starts_again_from_min() {
        let mut backoff = Backoff::new(10 * MS, 10_000 * MS);
        for _ in 0..8 {
            backoff.next_delay();
        }
        assert!(backoff.next_delay() >= 1280 * MS);
        backoff.reset();
        assert!(backoff.next_delay() < 20 * MS);
    }

    #[test]
    fn a_max_below_min_gives_min() {
        let mut backoff = Backoff::new(100 * MS, 10 * MS);
        for _ in 0..5 {
            assert_eq!(backoff.next_delay(), 100 * MS);
        }
    }
}
