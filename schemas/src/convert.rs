//! Watch documents and objects into `WatchEvent`s: the kind table ([`crate::kinds`]) picks
//! the converter, which reads the object leniently ([`crate::kubernetes`]).

use serde_json::{Map, Value};

use crate::event::{EventType, Stream, WatchEvent};
use crate::kinds::{self, KindSpec};
use crate::kubernetes::{FieldProblem, FieldReader, ObjectParts};

/// Why a document could not become an event at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A watch document must be `{"type": ..., "object": {...}}`.
    #[error("not a watch event: {0}")]
    NotAWatchEvent(&'static str),
    /// The watch event type is none of ADDED, MODIFIED, DELETED, BOOKMARK.
    #[error("unknown watch event type {0:?}")]
    UnknownType(String),
    /// The API server reported an error in the stream (e.g. 410 Gone).
    #[error("watch ERROR event: {0}")]
    WatchError(String),
    /// The object is of a kind ipaudit does not watch.
    #[error("object of kind {0:?} is none of the kinds ipaudit watches")]
    UnknownKind(String),
}

/// An event and what could not be read of its object.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// The event, with every field that could be read.
    pub event: WatchEvent,
    /// The fields that could not.
    pub problems: Vec<FieldProblem>,
}

/// Converts one watch document `{"type": T, "object": O}` (the Kubernetes watch wire format).
pub fn from_watch_document(document: &Value) -> Result<Converted, ConvertError> {
    let doc = document.as_object().ok_or(ConvertError::NotAWatchEvent(
        "the document is not a JSON object",
    ))?;
    let kind = doc
        .get("type")
        .and_then(Value::as_str)
        .ok_or(ConvertError::NotAWatchEvent("no string field \"type\""))?;
    let object = doc
        .get("object")
        .ok_or(ConvertError::NotAWatchEvent("no field \"object\""))?;
    let event_type = match kind {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => EventType::Bookmark,
        "ERROR" => {
            let message = object
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(ConvertError::WatchError(message.to_owned()));
        }
        other => return Err(ConvertError::UnknownType(other.to_owned())),
    };
    from_object(event_type, object)
}

/// Converts one object with the event type it came with; its `apiVersion` and `kind` name
/// the stream.
pub fn from_object(event_type: EventType, object: &Value) -> Result<Converted, ConvertError> {
    let text = |key| object.get(key).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let spec = kinds::of_object(api_version, kind).ok_or_else(|| {
        ConvertError::UnknownKind(if api_version.is_empty() {
            kind.to_owned()
        } else {
            format!("{api_version} {kind}")
        })
    })?;
    from_object_of(spec.stream, event_type, object)
}

/// Converts one object of a known stream (list items of built-in kinds carry no `kind`).
pub fn from_object_of(
    stream: Stream,
    event_type: EventType,
    object: &Value,
) -> Result<Converted, ConvertError> {
    let spec: &KindSpec = stream
        .spec()
        .ok_or_else(|| ConvertError::UnknownKind(stream.kind().to_owned()))?;
    let obj = object.as_object().ok_or(ConvertError::NotAWatchEvent(
        "\"object\" is not a JSON object",
    ))?;
    let mut fields = FieldReader::default();
    let empty = Map::new();
    let meta = fields.object(obj, "metadata").unwrap_or(&empty);
    let resource_version = fields.string(meta, "metadata.resourceVersion", "resourceVersion");
    let mut event = WatchEvent::new(stream, event_type, &resource_version);
    if event_type != EventType::Bookmark {
        event.metadata = Some(fields.metadata(meta));
        let parts = ObjectParts {
            meta,
            spec: fields.object(obj, "spec").unwrap_or(&empty),
            status: fields.object(obj, "status").unwrap_or(&empty),
        };
        event.part = Some((spec.convert)(&mut fields, &parts));
    }
    Ok(Converted {
        event,
        problems: fields.into_problems(),
    })
}
