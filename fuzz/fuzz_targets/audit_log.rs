//! The audit-log reader (`AuditLogSource`), plain and gzip. The first byte picks how the
//! rest is handed over: as a plain file, gzip-compressed (then it must read exactly as the
//! plain file: the same events, problems, requests and summary), or as it is (arbitrary
//! bytes, a broken gzip stream among them: an error or items, never a panic). Each line
//! gives at most one event, and the summary counts no more entries than there are lines.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use std::io::Write as _;

use flate2::write::GzEncoder;
use flate2::Compression;
use ipaudit_analyzer::offline::source::{AuditLogSource, SourceItem};
use libfuzzer_sys::fuzz_target;

/// Everything a reading gives: the items, the requests and the summary.
fn read(bytes: &[u8]) -> Option<(Vec<SourceItem>, String)> {
    let path = common::written("audit.log", bytes);
    let source = AuditLogSource::open(&[path], true).ok()?;
    let rest = format!("{:?} {:?}", source.requests(), source.summary());
    let summary = source.summary().clone();
    let items: Vec<SourceItem> = source.collect();
    let lines = bytes.split(|&b| b == b'\n').count() as u64;
    let events = items
        .iter()
        .filter(|i| matches!(i, SourceItem::Event(_)))
        .count() as u64;
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        assert!(
            summary.entries <= lines,
            "{} entries in {lines} lines",
            summary.entries
        );
        assert!(events <= lines, "{events} events from {lines} lines");
    }
    Some((items, rest))
}

fuzz_target!(|bytes: &[u8]| {
    let Some((&mode, text)) = bytes.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            read(text);
        }
        1 => {
            let plain = read(text);
            let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
            gz.write_all(text).expect("gzip into memory");
            let gz = gz.finish().expect("gzip into memory");
            let gunzipped = read(&gz);
            if text.starts_with(&[0x1f, 0x8b]) {
                // A gzip stream compressed again is read once: not the same text.
                return;
            }
            assert_eq!(
                plain, gunzipped,
                "the gzip file reads otherwise than the plain one"
            );
        }
        _ => {
            let mut raw = vec![0x1f, 0x8b];
            raw.extend_from_slice(text);
            read(&raw);
        }
    }
});
