//! ipaudit's analyzer: rebuilds the true order of kube-ovn IP, Subnet and Pod events and
//! finds the leaks IPAM controllers leave behind.
//!
//! The pipeline, one module each: [`source`] (recorded files) -> [`dedupe`] ->
//! [`reorder`] (resourceVersion order across streams) -> [`state`] (the live cluster) ->
//! [`rules`] -> [`alerts`] (lifecycle and stable ids) -> [`report`]; [`actors`] names who
//! made each request from an audit log. [`engine`] drives
//! the core for live and offline use alike; [`replay`] drives it over files, [`live`] over
//! a Kafka consumer group, with [`store`] (SQLite checkpoints and alert outbox) and
//! [`sinks`] (log, webhook, Alertmanager). [`cli`] holds the flags its binary shares with
//! `kubectl-ipaudit`.

pub mod actors;
pub mod alerts;
pub mod allocator;
pub mod cli;
pub mod clock;
pub mod deadletters;
pub mod dedupe;
pub mod engine;
pub mod fix;
pub mod group;
pub mod http;
pub mod live;
pub mod metrics;
pub mod reorder;
pub mod replay;
pub mod report;
pub mod rules;
pub mod sinks;
pub mod snapshot;
pub mod source;
pub mod state;
pub mod store;
pub mod telemetry;

pub use engine::{Analyzer, AnalyzerConfig, Output};
