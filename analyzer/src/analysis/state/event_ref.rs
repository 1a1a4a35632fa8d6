//! Where an object was last seen: a pointer to an event (its stream, name, resourceVersion
//! and time), for evidence, and the resourceVersion as the API server wrote it.

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

use ipaudit_schemas::{EventType, Stream, WatchEvent};

use super::{Millis, Name};

/// A pointer to the event that last touched an object, for evidence. Saved with its
/// resourceVersion as sent (see `SavedEventRef`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SavedEventRef", into = "SavedEventRef")]
pub struct EventRef {
    /// Stream of the event.
    pub stream: Stream,
    /// Its type.
    pub event_type: EventType,
    /// Object name (`namespace/name` for namespaced kinds), shared with the record's key.
    pub name: Name,
    /// Numeric resourceVersion, for ordering evidence.
    pub rv: i64,
    /// Event time.
    pub time_ms: Millis,
    /// The resourceVersion as sent, when it is not `rv` in decimal (an API server's always
    /// is: then nothing is kept beside the number).
    pub(super) rv_text: Option<Box<SmolStr>>,
}

impl EventRef {
    /// Points at `event`.
    pub fn of(event: &WatchEvent) -> Self {
        EventRef::at(event, Name::from(event.object_key()))
    }

    /// Points at `event`, whose object is named `name`.
    pub(super) fn at(event: &WatchEvent, name: Name) -> Self {
        let rv = event.resource_version_num.unwrap_or(-1);
        EventRef {
            stream: event.stream,
            event_type: event.event_type,
            name,
            rv,
            time_ms: Millis::from(event.event_time_ms()),
            rv_text: text_unless_decimal(&event.resource_version, rv),
        }
    }

    /// Its resourceVersion as sent.
    pub fn resource_version(&self) -> SmolStr {
        written_version(self.rv, self.rv_text.as_deref())
    }

    /// Its resourceVersion, to be written out only if needed: the engine takes one per
    /// event, and writing the number as text each time cost 1.6 % of a replay.
    pub fn version(&self) -> ResourceVersion {
        ResourceVersion {
            rv: self.rv,
            text: self.rv_text.clone(),
        }
    }

    /// Event time, Unix ms.
    pub fn time_ms(&self) -> Option<i64> {
        self.time_ms.get()
    }

    /// Dates the event no earlier than `floor_ms` (when known): see
    /// [`ClusterState::apply_located`]'s `history_ms`.
    pub(super) fn not_before(&mut self, floor_ms: Option<i64>) {
        if let Some(floor) = floor_ms {
            let time = self.time_ms().map_or(floor, |t| t.max(floor));
            self.time_ms = Millis::from(Some(time));
        }
    }
}

/// A resourceVersion as sent: its number, and its text only when that is not the number
/// in decimal (an API server's always is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceVersion {
    pub(super) rv: i64,
    pub(super) text: Option<Box<SmolStr>>,
}

impl From<&str> for ResourceVersion {
    fn from(text: &str) -> Self {
        let rv = ipaudit_schemas::event::parse_resource_version(text).unwrap_or(-1);
        ResourceVersion {
            rv,
            text: text_unless_decimal(text, rv),
        }
    }
}

impl Default for ResourceVersion {
    /// None yet: written as `""`.
    fn default() -> Self {
        ResourceVersion::from("")
    }
}

impl std::fmt::Display for ResourceVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&written_version(self.rv, self.text.as_deref()))
    }
}

/// A resourceVersion as sent: `text` when it was kept (it is not `rv` in decimal), else
/// `rv` in decimal.
pub(super) fn written_version(rv: i64, text: Option<&SmolStr>) -> SmolStr {
    match text {
        Some(text) => SmolStr::clone(text),
        None => SmolStr::new(itoa::Buffer::new().format(rv)),
    }
}

/// `text`, unless it is `rv` written in decimal (then the number says it all).
pub(super) fn text_unless_decimal(text: &str, rv: i64) -> Option<Box<SmolStr>> {
    (itoa::Buffer::new().format(rv) != text).then(|| Box::new(SmolStr::new(text)))
}

/// [`EventRef`] as saved: with its resourceVersion as sent.
#[derive(Serialize, Deserialize)]
struct SavedEventRef {
    pub(super) stream: Stream,
    pub(super) event_type: EventType,
    pub(super) name: Name,
    pub(super) resource_version: SmolStr,
    pub(super) rv: i64,
    pub(super) time_ms: Option<i64>,
}

impl From<SavedEventRef> for EventRef {
    fn from(saved: SavedEventRef) -> Self {
        EventRef {
            stream: saved.stream,
            event_type: saved.event_type,
            name: saved.name,
            rv: saved.rv,
            time_ms: Millis::from(saved.time_ms),
            rv_text: text_unless_decimal(&saved.resource_version, saved.rv),
        }
    }
}

impl From<EventRef> for SavedEventRef {
    fn from(at: EventRef) -> Self {
        SavedEventRef {
            stream: at.stream,
            event_type: at.event_type,
            resource_version: at.resource_version(),
            time_ms: at.time_ms(),
            name: at.name,
            rv: at.rv,
        }
    }
}
