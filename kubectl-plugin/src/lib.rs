//! `kubectl ipaudit`: the analyzer's rules on one snapshot of a live cluster, and a guarded
//! release of what that snapshot found. Nothing here is a second implementation: the kinds
//! come from the collector's discovery, objects become events with the collector's
//! conversion, the analyzer's engine, rules and report judge them, and the release runs
//! the collector's guarded finalizer removal.
//!
//! The pipeline, one module each: [`cluster`] (kubeconfig, and which cluster it is) ->
//! [`snapshot`] (paged lists of every served kind, as events) -> [`check`] (the rules;
//! [`calicoctl`], their Calico findings in `calicoctl ipam check`'s categories) ->
//! [`report`] (the report file) -> [`release`] (guarded cleanup from a report); and
//! [`incidents`], a running analyzer's incidents from its API.

pub mod calicoctl;
pub mod check;
pub mod cluster;
pub mod incidents;
pub mod release;
pub mod report;
pub mod snapshot;
