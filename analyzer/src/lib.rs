//! ipaudit's analyzer: rebuilds the true order of kube-ovn IP, Subnet and Pod events and
//! finds the leaks IPAM controllers leave behind.
//!
//! Three trees, and the line between them is I/O:
//!
//! - [`analysis`]: the pure core, deterministic, no I/O and no wall clock.
//!   - [`analysis::dedupe`]: drops events seen before.
//!   - [`analysis::reorder`]: resourceVersion order across streams.
//!   - [`analysis::state`]: the cluster as the events say it is, and its indexes.
//!   - [`analysis::rules`]: the detections, one file each.
//!   - [`analysis::alerts`]: alert lifecycle and stable ids.
//!   - [`analysis::fix`]: the kubectl commands in a finding's fix.
//!   - [`analysis::actors`]: who made each request, from an audit log.
//!   - [`analysis::engine`]: the [`Analyzer`] driving all of the above, and its checkpoints.
//! - `live`: the analyzer as a service (cargo feature `live`).
//!   - [`live::consume`]: `analyzer run`, the Kafka consumer group loop.
//!   - [`live::group`]: the instance's place in its consumer group.
//!   - [`live::start_offset`]: where a new analyzer starts (the latest complete snapshot).
//!   - [`live::store`]: SQLite checkpoints and the alert outbox.
//!   - [`live::sinks`]: alert delivery (ledger, log, webhook, Alertmanager, Kafka, commands).
//!   - [`live::deadletters`]: what the live analyzer set aside, and re-driving it.
//!   - [`live::http`]: `/metrics`, `/healthz`, `/readyz`.
//!   - [`live::metrics`]: the live analyzer's Prometheus metrics.
//!   - the wall clock, for the I/O only, is [`ipaudit_runtime::clock`].
//! - [`offline`]: the analyzer over recorded files.
//!   - [`offline::source`]: Avro files, kubectl watch output, audit logs.
//!   - [`offline::replay`]: files merged by resourceVersion into the core.
//!   - [`offline::report`]: what a replay found, as text, JSON lines or HTML.
//! - [`present`]: how alerts are shown wherever they are shown (findings, an alert as
//!   text and JSON, the incident picture and its stylesheet): replay's report, the live
//!   incident pages and `kubectl ipaudit` use it.
//!
//! At the top: [`cli`] (flags the binary shares with `kubectl-ipaudit`), [`incidents_api`]
//! (the incident pages' query and links, which the alerts and `kubectl-ipaudit` use too)
//! and [`allocator`].
//!
//! `live` is behind the cargo feature of that name (on by default): without it the crate
//! links neither librdkafka nor SQLite nor an HTTP client, which is how the fuzz targets
//! build the readers and the analysis.

pub mod allocator;
pub mod analysis;
pub mod cli;
pub mod incidents_api;
#[cfg(feature = "live")]
pub mod live;
pub mod offline;
pub mod present;

pub use analysis::engine::{Analyzer, AnalyzerConfig, Output};

/// `println!` for the benchmark binaries, returning the error instead of panicking: their
/// output is often piped (`| head`), and a closed pipe then ends the run with a message.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        std::io::Write::write_fmt(
            &mut std::io::stdout(),
            format_args!("{}\n", format_args!($($arg)*)),
        )
    };
}
