//! ipaudit's collector: every watch event of Pods and of the IPAM kinds the API server
//! serves (kube-ovn, whereabouts, spiderpool: the table `ipaudit_schemas::KINDS`), exactly
//! as the API server sent it, into Kafka, losing nothing across restarts, Kafka outages
//! and expired watches.
//!
//! The pipeline, one module each: [`discovery`] (which kinds) -> [`watch`] (list + watch
//! per stream, relist diff) ->
//! [`event`] (objects into `WatchEvent`s) -> [`observed`] (the message) -> [`writer`] -> [`outbox`] (SQLite) ->
//! [`produce`] (Kafka, each writer schema published first by [`publish_schemas`]); or [`record`] (an Avro file) instead of the last two.
//! [`remediate`] obeys the analyzer's cleanup commands through [`cleanup`], the cleanup
//! actions `kubectl ipaudit release` runs too. [`app`] wires them; [`http`], [`metrics`] and [`telemetry`] (one typed event per fact,
//! logged and counted together) are the operator's window. [`guard`] and
//! [`admission`] refuse or warn about the deletion of a Subnet or pool that live
//! allocations still name (the validating webhook).
//!
//! What needs Kafka or SQLite (`app`, `outbox`, `produce`, `publish_schemas`, `writer`,
//! `record`, `remediate`, the binary) is behind the cargo feature `service`, on by
//! default; `kubectl ipaudit` and the fuzz targets build the rest without it.

#[cfg(feature = "service")]
pub mod access;
pub mod admission;
#[cfg(feature = "service")]
pub mod app;

pub mod discovery;
pub mod event;
pub mod guard;
pub mod health;
pub mod http;
pub mod metrics;
pub mod observed;
#[cfg(feature = "service")]
pub mod outbox;
#[cfg(feature = "service")]
pub mod produce;
#[cfg(feature = "service")]
pub mod publish_schemas;
#[cfg(feature = "service")]
pub mod record;
#[cfg(feature = "service")]
pub mod remediate;
pub mod telemetry;
pub mod watch;
#[cfg(feature = "service")]
pub mod writer;
