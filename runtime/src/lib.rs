//! The runtime plumbing both of ipaudit's programs share, written once: how they reach
//! Kafka (`kafka`), open SQLite files (`sqlite`), wait between retries ([`backoff`]),
//! stop ([`shutdown`]), read the wall clock ([`clock`]), read secrets from files
//! ([`secret`]), parse durations and sizes in flags ([`parse`]), write their completions,
//! man pages and flag reference ([`generate`]), serve `/metrics`, `/healthz` and `/readyz`
//! ([`http`]), list a kind from the API server in pages (`kube`), and report what happens
//! to them ([`telemetry`]). It does no analysis and imports neither the collector nor the
//! analyzer; the schemas crate stays free of I/O.
//!
//! `kafka`, `sqlite` and `kube` are behind cargo features of their names, so that what
//! reads bytes without doing I/O (the readers the fuzz targets build) links neither
//! librdkafka, nor SQLite, nor a Kubernetes client.

pub mod backoff;
pub mod clock;
pub mod generate;
pub mod http;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kube")]
pub mod kube;
pub mod parse;
pub mod secret;
pub mod shutdown;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod telemetry;
