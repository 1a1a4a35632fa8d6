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

use ipaudit_schemas::Fields;

/// The fields of an event the analysis reads, recorded or consumed: no raw object,
/// annotations or owner references, and of the labels only kube-ovn's `ip_reserved` (an
/// IP a user reserved by hand is not a leak). Decoders skip the rest.
pub const ANALYSIS_FIELDS: Fields = Fields::analysis(&[state::IP_RESERVED_LABEL]);
