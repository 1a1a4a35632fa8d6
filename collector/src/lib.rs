//! ipaudit's collector: every watch event of Pods, kube-ovn IPs and Subnets, exactly as
//! the API server sent it, into Kafka, losing nothing across restarts, Kafka outages and
//! expired watches.
//!
//! The pipeline, one module each: [`watch`] (list + watch per stream, relist diff) ->
//! [`event`] (objects into `WatchEvent`s) -> [`sink`] -> [`outbox`] (SQLite) ->
//! [`produce`] (Kafka); or [`record`] (an Avro file) instead of the last two.
//! [`app`] wires them; [`http`] and [`metrics`] are the operator's window.

pub mod app;
pub mod event;
pub mod http;
pub mod metrics;
pub mod outbox;
pub mod produce;
pub mod record;
pub mod remediate;
pub mod sink;
pub mod watch;
