//! The runtime plumbing both of ipaudit's programs share, written once: how they reach
//! Kafka ([`kafka`]), open SQLite files ([`sqlite`]), wait between retries ([`backoff`]),
//! stop ([`shutdown`]), read the wall clock ([`clock`]), parse durations and sizes in
//! flags ([`parse`]), write their completions, man pages and flag reference ([`generate`]), serve `/metrics`, `/healthz` and `/readyz` ([`http`]), list a kind
//! from the API server in pages (`kube`, behind the cargo feature of that name), and
//! report what happens to them ([`telemetry`]). It does no analysis and imports neither
//! the collector nor the analyzer; the schemas crate stays free of I/O.

pub mod backoff;
pub mod clock;
pub mod generate;
pub mod http;
pub mod kafka;
#[cfg(feature = "kube")]
pub mod kube;
pub mod parse;
pub mod shutdown;
pub mod sqlite;
pub mod telemetry;
