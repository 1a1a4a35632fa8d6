//! The kubectl recording reader whole (`KubectlJsonSource`: pieces, first pass, splitter,
//! initial-list index, second pass, typed and generic conversion, merge) on a recording,
//! against the generic conversion of each document the exact splitter finds
//! (`split_documents`, then `serde_json::Value` and `from_watch_document`): every event it
//! hands on (but the SYNC_START/SYNC_END frames it adds) is the generic conversion of one
//! document of the text, no document gives two events, and lists are framed in pairs.
//! Memory stays within libFuzzer's `-rss_limit_mb` (scripts/fuzz sets it).
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use std::collections::HashMap;

use ipaudit_analyzer::offline::source::{split_documents, KubectlJsonSource, SourceItem};
use ipaudit_schemas::convert::from_watch_document;
use ipaudit_schemas::{EventType, WatchEvent};
use libfuzzer_sys::fuzz_target;

/// An event as comparable text (events hold no floats; Debug is exact).
fn key(event: &WatchEvent) -> String {
    format!("{event:?}")
}

fuzz_target!(|text: &[u8]| {
    let mut reference: HashMap<String, usize> = HashMap::new();
    for doc in split_documents(text) {
        let Some(bytes) = text.get(doc.range.clone()) else {
            panic!("a document range {:?} outside the text", doc.range);
        };
        if let Some(converted) = serde_json::from_slice::<serde_json::Value>(bytes)
            .ok()
            .and_then(|v| from_watch_document(&v).ok())
        {
            *reference.entry(key(&converted.event)).or_default() += 1;
        }
    }
    let path = common::written("recording.json", text);
    let source = KubectlJsonSource::open(&path).expect("a written file opens");
    let mut open_lists = 0i64;
    for item in source {
        let SourceItem::Event(event) = item else {
            continue;
        };
        match event.event_type {
            EventType::SyncStart => open_lists += 1,
            EventType::SyncEnd => {
                open_lists -= 1;
                assert!(open_lists >= 0, "SYNC_END without SYNC_START");
            }
            _ => {
                let key = key(&event);
                let Some(left) = reference.get_mut(&key).filter(|n| **n > 0) else {
                    panic!("an event no document gives (or more than the documents give): {key}");
                };
                *left -= 1;
            }
        }
    }
});
