//! The watch stream as the collector reads it: lines of the API server's watch response,
//! each decoded as kube's client decodes it (`kube::core::WatchEvent<serde_json::Value>`)
//! and turned into the collector's event (an object's through the kind of its apiVersion
//! and kind, a bookmark's marker). Every event made ships intact.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use ipaudit_schemas::{kinds, EventType, Stream};
use kube::core::WatchEvent as KubeEvent;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn stream_of(object: &Value) -> Stream {
    let field = |name| object.get(name).and_then(Value::as_str).unwrap_or_default();
    kinds::of_object(field("apiVersion"), field("kind")).map_or(Stream::Pod, |k| k.stream)
}

fuzz_target!(|bytes: &[u8]| {
    let stamp = common::stamp(false);
    for (sequence, line) in bytes.split(|&b| b == b'\n').enumerate() {
        // kube's LinesCodec hands on UTF-8 lines only.
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        let line = line.strip_suffix('\r').unwrap_or(line);
        let Ok(event) = serde_json::from_str::<KubeEvent<Value>>(line) else {
            continue;
        };
        let (event_type, object) = match event {
            KubeEvent::Added(o) => (EventType::Added, o),
            KubeEvent::Modified(o) => (EventType::Modified, o),
            KubeEvent::Deleted(o) => (EventType::Deleted, o),
            KubeEvent::Bookmark(b) => {
                let rv = b.metadata.resource_version;
                let marker = stamp.marker(Stream::Pod, EventType::Bookmark, &rv, sequence as i64);
                common::ships_intact(&marker);
                continue;
            }
            KubeEvent::Error(_) => continue,
        };
        let stream = stream_of(&object);
        if let Ok((event, _)) = stamp.object_event(stream, event_type, &object, sequence as i64) {
            common::ships_intact(&event);
        }
    }
});
