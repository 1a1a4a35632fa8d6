//! The Avro container reader (`ContainerReader<WatchEvent>`, its own block framing and the
//! specialised decoder for every known schema version) against apache-avro's generic
//! reader and schema resolution on the same bytes: the records both read agree, in order;
//! where apache-avro reads the whole file without an error, so does ours, with the same
//! records (ours reads on past what apache-avro stops at: concatenated files).
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use apache_avro::Reader;
use ipaudit_schemas::container::BlockError;
use ipaudit_schemas::registry::{DatumError, Record};
use ipaudit_schemas::{ContainerError, ContainerReader, WatchEvent};
use libfuzzer_sys::fuzz_target;

/// The records apache-avro reads before its first error, and whether it met one.
fn apache(bytes: &[u8]) -> (Vec<WatchEvent>, bool) {
    let set = WatchEvent::schemas();
    let Ok(reader) = Reader::new(bytes) else {
        return (Vec::new(), true);
    };
    if reader
        .writer_schema()
        .name()
        .map(|n| n.fullname(None))
        .as_deref()
        != Some(WatchEvent::NAME)
    {
        return (Vec::new(), true);
    }
    let mut records = Vec::new();
    for value in reader {
        match value
            .map_err(DatumError::from)
            .and_then(|value| set.resolve::<WatchEvent>(value))
        {
            Ok(event) => records.push(event),
            Err(_) => return (records, true),
        }
    }
    (records, false)
}

/// The errors by which our reader is stricter than apache-avro, by design (documented in
/// `schemas::datum` and `schemas::container`).
fn stricter(error: &ContainerError) -> bool {
    let ContainerError::Corrupt { source, .. } = error else {
        return false;
    };
    match source {
        BlockError::Datum(DatumError::Wire(wire)) => matches!(
            wire,
            ipaudit_schemas::datum::WireError::VarintOverflow { .. }
                | ipaudit_schemas::datum::WireError::BlockSize { .. }
                | ipaudit_schemas::datum::WireError::NegativeLength { .. }
        ),
        BlockError::Datum(DatumError::Truncated { .. }) => true,
        BlockError::TrailingBytes { .. } | BlockError::Varint | BlockError::BadHeader { .. } => {
            true
        }
        _ => false,
    }
}

fuzz_target!(|bytes: &[u8]| {
    common::write_seeds_if_asked(common::sample_containers);
    let (theirs, their_error) = apache(bytes);
    let Ok(reader) = ContainerReader::<WatchEvent, _>::new(bytes) else {
        assert!(
            theirs.is_empty(),
            "apache-avro read {} records of a file we refused",
            theirs.len()
        );
        return;
    };
    let mut ours = Vec::new();
    let mut first_error = None;
    // A reader that resumes after a corrupt block goes on; bound the loop by the input
    // (each item consumes at least one byte or ends the file).
    for item in reader.take(bytes.len() + 1) {
        match item {
            Ok(event) => {
                if first_error.is_none() {
                    ours.push(event)
                }
            }
            Err(error) => {
                if first_error.is_none() {
                    first_error = Some(error);
                }
            }
        }
    }
    let common = ours.len().min(theirs.len());
    assert_eq!(ours[..common], theirs[..common], "records differ");
    if !their_error {
        match &first_error {
            None => assert!(
                ours.len() >= theirs.len(),
                "we read {} records, apache-avro {}",
                ours.len(),
                theirs.len()
            ),
            Some(error) => assert!(
                stricter(error),
                "apache-avro read the file whole ({} records), we failed after {}: {error}",
                theirs.len(),
                ours.len()
            ),
        }
    }
});
