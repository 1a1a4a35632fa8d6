//! The wall clock, for I/O only (stamping observations, ledgers, ages of commands): the
//! analyzer's pure core runs on event time and never reads it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock time in Unix milliseconds; 0 for a clock set before 1970 and `i64::MAX` far
/// past 2262, so that a broken clock gives a value rather than a panic.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_after_2020_and_does_not_go_backwards_between_two_reads() {
        let first = now_ms();
        let second = now_ms();
        assert!(first > 1_577_836_800_000, "{first}");
        assert!(second >= first);
    }
}
