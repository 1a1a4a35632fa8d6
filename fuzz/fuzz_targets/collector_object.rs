//! The collector's conversion of an object the API server sent, for every kind of the kind
//! table (`ipaudit_schemas::KINDS`), from arbitrary JSON: an event or a typed error, never
//! a panic; the event ships intact (encodes, and decodes to itself), keeps the object's
//! JSON whenever a field was unusable, and names the object it came from.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use ipaudit_collector::watch::event::LiveObject;
use ipaudit_schemas::{EventType, KINDS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(object) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return;
    };
    let event_type = [EventType::Added, EventType::Modified, EventType::Deleted][bytes.len() % 3];
    let stamp = common::stamp(bytes.len().is_multiple_of(2));
    for spec in KINDS {
        let Ok((event, problems)) = stamp.object_event(spec.stream, event_type, &object, 7) else {
            continue;
        };
        assert_eq!(event.stream, spec.stream);
        assert_eq!(event.event_type, event_type);
        if !problems.is_empty() {
            assert!(
                event.raw_object.is_some(),
                "unusable fields {problems:?} but no raw object"
            );
        }
        if let Some(live) = LiveObject::of(&event) {
            assert_eq!(live.resource_version, event.resource_version);
        }
        common::ships_intact(&event);
    }
});
