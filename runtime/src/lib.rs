//! The runtime plumbing both of ipaudit's programs share, written once: how they reach
//! Kafka ([`kafka`]) and how they report what happens to them ([`telemetry`]). It does no
//! analysis and imports neither the collector nor the analyzer; the schemas crate stays
//! free of I/O.

pub mod kafka;
pub mod telemetry;
