//! The live analyzer: the I/O around the [`crate::analysis`] core when it runs as a service,
//! fed by a Kafka consumer group, checkpointing to SQLite and delivering alerts to sinks.

pub mod catch_up;
pub mod consume;
pub mod db;
pub mod deadletters;
pub mod group;
pub mod handover;
pub mod http;
pub mod incidents;
pub mod metrics;
pub mod output_topics;
pub mod rebuild_points;
pub mod sinks;
pub mod start_offset;
pub mod store;
pub mod telemetry;
pub mod ui;
pub mod undecodable_log;
pub mod writer_schemas;

/// The analyzer's Kafka client id (broker logs and quotas name it).
pub(crate) const CLIENT_ID: &str = "ipaudit-analyzer";
