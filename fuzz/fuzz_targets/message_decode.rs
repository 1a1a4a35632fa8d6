//! The analyzer's Kafka message decoding (`analyzer::live::consume`): a single-object
//! message decoded into the event decoded before, keeping the analysis' fields, with the
//! writer schemas learnt from the schemas topic (one of a newer collector here). It accepts
//! exactly what the full decode accepts and reads what a fresh decode reads; the full
//! decode of a message of this build's versions reads what apache-avro's generic decoding
//! and schema resolution read.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use std::sync::OnceLock;

use ipaudit_analyzer::offline::source::ANALYSIS_FIELDS;
use ipaudit_schemas::builders::NextVersion;
use ipaudit_schemas::message::HEADER_LEN;
use ipaudit_schemas::registry::Record;
use ipaudit_schemas::{decode_into_with, decode_with, WatchEvent, WriterSchemas};
use libfuzzer_sys::fuzz_target;

fn learnt() -> &'static WriterSchemas {
    static LEARNT: OnceLock<WriterSchemas> = OnceLock::new();
    LEARNT.get_or_init(|| {
        let next = NextVersion::new();
        let mut learnt = WriterSchemas::new();
        learnt
            .learn::<WatchEvent>(&next.fingerprint, next.text.as_bytes())
            .expect("the next version is learnt");
        learnt
    })
}

fuzz_target!(|bytes: &[u8]| {
    common::write_seeds_if_asked(|| {
        let next = NextVersion::new();
        let mut seeds: Vec<(String, Vec<u8>)> = common::versioned_messages()
            .into_iter()
            .enumerate()
            .map(|(i, (version, message))| (format!("v{version}-{i}"), message))
            .collect();
        for (i, event) in common::sample_events().iter().enumerate() {
            seeds.push((format!("next-{i}"), next.encode(event)));
        }
        seeds.push((
            "next-calico".into(),
            next.encode_unknown_kind(&common::sample_events()[0], "p1"),
        ));
        seeds
    });
    let learnt = learnt();
    let full = decode_with::<WatchEvent>(bytes, learnt);
    let mut fresh = WatchEvent::blank();
    let analysis = decode_into_with(bytes, &ANALYSIS_FIELDS, &mut fresh, learnt);
    assert_eq!(
        full.is_ok(),
        analysis.is_ok(),
        "full {full:?}, analysis {analysis:?}"
    );
    // Into an event decoded before, as the consumer does.
    let mut reused = match &full {
        Ok(event) => event.clone(),
        Err(_) => ipaudit_schemas::builders::EventBuilder::pod("ns", "p").added(),
    };
    let again = decode_into_with(bytes, &ANALYSIS_FIELDS, &mut reused, learnt);
    assert_eq!(again.is_ok(), analysis.is_ok());
    if analysis.is_ok() {
        assert_eq!(reused, fresh, "decoding into the event before differs");
    }
    // This build's versions: apache-avro's generic decoding and resolution.
    let set = WatchEvent::schemas();
    if bytes.len() >= HEADER_LEN && bytes[..2] == ipaudit_schemas::message::MAGIC {
        if let Some(index) = set.position_of_fingerprint(&bytes[2..HEADER_LEN]) {
            let mut body = &bytes[HEADER_LEN..];
            let theirs = set
                .read_datum_resolving::<WatchEvent>(index, &mut body)
                .ok()
                .filter(|_| body.is_empty());
            match (&full, theirs) {
                (Ok(ours), Some(theirs)) => assert_eq!(ours, &theirs),
                (Ok(ours), None) => panic!("apache-avro refused what we read: {ours:?}"),
                // The specialised decoder is stricter (varint overflow, block sizes).
                (Err(_), _) => {}
            }
        }
    }
});
