//! The wall clock, for the I/O around the analysis only (sinks, the ledger, live ticks):
//! the pure core runs on event time and never reads it.

/// Wall-clock time in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
