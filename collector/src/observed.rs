//! The collector's pipeline message: what a watcher hands on to be stored ([`Observed`]),
//! the change it makes to a stream's live set ([`LiveChange`]), and where a stream stands
//! ([`StreamState`]). Kept apart from the watcher so that the outbox, the file recorder,
//! the guard and remediation depend on the message, not on the watcher.

use std::collections::HashMap;

use ipaudit_schemas::WatchEvent;

use crate::watch::event::LiveObject;

/// Where a stream stands: the version to resume from, its last sequence number, and the
/// objects it knows to be live.
#[derive(Debug, Clone, Default)]
pub struct StreamState {
    /// resourceVersion to watch from; `None` means relist first.
    pub resume_from: Option<String>,
    /// Last sequence number given out.
    pub sequence: i64,
    /// Live objects by uid.
    pub live: HashMap<String, LiveObject>,
}

/// What an event changes in the set of live objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveChange {
    /// Nothing (markers).
    None,
    /// The object is live, at this version.
    Upsert(LiveObject),
    /// The object with this uid is gone.
    Remove(String),
}

/// One event to record, with the state change that goes with it.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The event.
    pub event: WatchEvent,
    /// Its effect on the live set.
    pub live: LiveChange,
    /// The version a restart may resume from once this event is stored (`None`: keep).
    pub resume_from: Option<String>,
}
