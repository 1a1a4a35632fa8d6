//! Checkpoint restore (`Analyzer::from_checkpoint`, what the live analyzer does with the
//! store's checkpoint at start): an analysis or a typed error, never a panic; a restored
//! analysis checkpoints to what restores to itself (compared as JSON, arrays as
//! multisets: sets are saved in hash order), and goes on
//! analysing: events, a tick and the end of input on a restored state never panic.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use ipaudit_analyzer::{Analyzer, AnalyzerConfig};
use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{EventType, Stream, WatchEvent};
use libfuzzer_sys::fuzz_target;

/// Events that touch every part of the state: an IP, its subnet, its pod, a pool.
fn events() -> Vec<WatchEvent> {
    vec![
        EventBuilder::subnet("net1")
            .uid("s1")
            .rv(10)
            .at(1_000)
            .added(),
        EventBuilder::pod("ns", "a")
            .uid("p1")
            .rv(11)
            .at(2_000)
            .added(),
        EventBuilder::ip("a.ns", "net1")
            .uid("i1")
            .rv(12)
            .at(3_000)
            .added(),
        EventBuilder::pod("ns", "a")
            .uid("p1")
            .rv(13)
            .at(4_000)
            .deleted(),
        EventBuilder::ip_pool("kube-system", "pool1", "10.9.0.0/24")
            .uid("w1")
            .allocation(1, "10.9.0.1", "ns/a")
            .rv(14)
            .at(5_000)
            .added(),
        EventBuilder::subnet("net1")
            .uid("s1")
            .rv(15)
            .at(6_000)
            .deleted(),
        EventBuilder::marker(Stream::Ip, EventType::SyncStart, 16),
        EventBuilder::marker(Stream::Ip, EventType::SyncEnd, 16),
    ]
}

/// The JSON of a checkpoint, key order aside and every array sorted: hash sets are
/// saved as arrays in their iteration order, which differs between two equal sets.
fn json(bytes: &[u8]) -> serde_json::Value {
    fn canonical(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Array(items) => {
                items.iter_mut().for_each(canonical);
                items.sort_by_cached_key(|item| item.to_string());
            }
            serde_json::Value::Object(map) => map.values_mut().for_each(canonical),
            _ => {}
        }
    }
    let mut value = serde_json::from_slice(bytes).expect("a checkpoint is JSON");
    canonical(&mut value);
    value
}

fuzz_target!(|bytes: &[u8]| {
    common::write_seeds_if_asked(|| {
        // The checkpoint of an analysis after each event.
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        let mut seeds = Vec::new();
        for (i, event) in common::sample_events()
            .into_iter()
            .chain(events())
            .enumerate()
        {
            analyzer.step(event, &mut out);
            seeds.push((format!("checkpoint-{i}"), analyzer.checkpoint()));
        }
        seeds
    });
    let config = AnalyzerConfig::default();
    let Ok(mut analyzer) = Analyzer::from_checkpoint(bytes, config.clone()) else {
        return;
    };
    let saved = analyzer.checkpoint();
    let restored = Analyzer::from_checkpoint(&saved, config).expect("a checkpoint restores");
    assert_eq!(
        json(&restored.checkpoint()),
        json(&saved),
        "a checkpoint does not restore to itself"
    );
    let mut out = Vec::new();
    for event in events() {
        analyzer.step(event, &mut out);
    }
    analyzer.tick(10_000, &mut out);
    analyzer.finish(Some(20_000), &mut out);
});
