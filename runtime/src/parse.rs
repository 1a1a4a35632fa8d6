//! The clap value parsers of every ipaudit program's flags, so that a duration or a size
//! is written the same way everywhere (`--watch-timeout 290s`, `--outbox-max-bytes 1GiB`).

use std::time::Duration;

/// A duration such as `500ms`, `30s`, `10m`, `1h 30m` (humantime's syntax).
pub fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{e} (examples: 500ms, 30s, 10m, 1h)"))
}

/// A positive byte size: a whole number with an optional unit, `B`, `KiB`, `MiB`, `GiB`
/// (powers of 1024) or `KB`, `MB`, `GB` (powers of 1000), case-insensitive; `900KiB`, `1GiB`.
pub fn byte_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("expected a size such as 900KiB or 1GiB, got {text:?}"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown unit {other:?} (B, KiB, MiB, GiB, KB, MB, GB)"
            ))
        }
    };
    number
        .checked_mul(factor)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{text:?} is not a usable size"))
}

/// A duration in whole milliseconds, saturating at `i64::MAX` (the unit of event time).
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_humantime_units_and_refuse_bare_numbers() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration(" 290s "), Ok(Duration::from_secs(290)));
        assert_eq!(duration("1h 30m"), Ok(Duration::from_secs(5400)));
        let error = duration("10").unwrap_err();
        assert!(error.contains("examples"), "{error}");
        assert!(duration("ten minutes").is_err());
    }

    #[test]
    fn sizes_take_binary_and_decimal_units_in_any_case() {
        assert_eq!(byte_size("900KiB"), Ok(900 * 1024));
        assert_eq!(byte_size("1GiB"), Ok(1 << 30));
        assert_eq!(byte_size("2 mib"), Ok(2 << 20));
        assert_eq!(byte_size("5MB"), Ok(5_000_000));
        assert_eq!(byte_size("3kb"), Ok(3_000));
        assert_eq!(byte_size("7"), Ok(7));
        assert_eq!(byte_size("7B"), Ok(7));
    }

    #[test]
    fn sizes_refuse_zero_overflow_unknown_units_and_fractions() {
        assert!(byte_size("0").is_err());
        assert!(byte_size("99999999999999GiB").is_err());
        assert!(byte_size("3TiB").unwrap_err().contains("unknown unit"));
        assert!(byte_size("1.5GiB").is_err());
        assert!(byte_size("GiB").is_err());
        assert!(byte_size("").is_err());
    }

    #[test]
    fn millis_saturates() {
        assert_eq!(millis(Duration::from_secs(2)), 2000);
        assert_eq!(millis(Duration::MAX), i64::MAX);
    }
}
