//! The pure core of the analysis: events in, state changes and alert transitions out.
//! Nothing under this module does I/O or reads the wall clock: time is event time, and the
//! same events give the same answer, live or offline.

pub mod actors;
pub mod alerts;
pub mod dedupe;
pub mod engine;
pub mod fix;
pub mod reorder;
pub mod rules;
pub mod state;
