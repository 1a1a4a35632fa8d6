//! ipaudit's collector: every watch event of Pods and of the IPAM kinds the API server
//! serves (kube-ovn, whereabouts, spiderpool, Calico, Cilium, and Nodes for the last two:
//! the table `ipaudit_schemas::KINDS`), exactly as the API server sent it, into Kafka,
//! losing nothing across restarts, Kafka outages and expired watches.
//!
//! The pipeline, a room each:
//! - [`watch`]: which kinds ([`watch::discovery`], and whether RBAC allows them,
//!   [`watch::access`]), list + watch per stream with the relist diff, objects into
//!   `WatchEvent`s ([`watch::event`]);
//! - [`observed`]: the message the watchers hand on;
//! - [`ship`]: into the SQLite outbox ([`ship::writer`], [`ship::outbox`]) and to Kafka
//!   ([`ship::produce`], each writer schema published first by
//!   [`ship::publish_schemas`]), or into an Avro file ([`ship::record`]);
//! - [`remediate`]: the analyzer's cleanup commands, executed through the cleanup actions
//!   of `ipaudit_cleanup` (which `kubectl ipaudit release` runs too);
//! - [`admission`]: the validating webhook that refuses or warns about the deletion of a
//!   Subnet or pool that live allocations still name ([`admission::guard`] decides).
//!
//! [`app`] wires them; [`http`], [`health`], [`metrics`] and [`telemetry`] (one typed
//! event per fact, logged and counted together) are the operator's window.
//!
//! What needs Kafka or SQLite (`app`, `ship`, `remediate`, `watch::access`, the binary) is
//! behind the cargo feature `service`, on by default; `kubectl ipaudit` and the fuzz
//! targets build the rest without it.

pub mod admission;
#[cfg(feature = "service")]
pub mod app;
pub mod health;
pub mod http;
pub mod metrics;
pub mod observed;
#[cfg(feature = "service")]
pub mod remediate;
#[cfg(feature = "service")]
pub mod ship;
pub mod telemetry;
pub mod watch;
