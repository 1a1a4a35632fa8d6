//! The Avro container reader (`ContainerReader<WatchEvent>`, its own block framing and the
//! specialised decoder for every known schema version) against apache-avro's generic
//! reader and schema resolution on the same bytes: the records both read agree, in order;
//! where apache-avro reads the whole file without an error, so does ours, with the same
//! records (ours reads on past what apache-avro stops at: concatenated files, and blocks
//! after an empty one, where apache-avro ends the file).
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

/// A zigzag varint (an Avro long) at `at`: its value and the offset after it.
fn long(bytes: &[u8], mut at: usize) -> Option<(i64, usize)> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(at)?;
        at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((value >> 1) as i64 ^ -((value & 1) as i64), at));
        }
    }
    None
}

/// Where the first block with no record begins, if the file has one: apache-avro's reader
/// takes an empty block for the end of the file and reads nothing after it, where the
/// Avro specification allows a block of 0 objects and ours reads on.
fn first_empty_block(bytes: &[u8]) -> Option<usize> {
    let mut at = bytes.starts_with(b"Obj\x01").then_some(4)?;
    // The header's metadata map: blocks of (key, value) byte strings, ended by 0.
    loop {
        let (count, next) = long(bytes, at)?;
        at = next;
        if count == 0 {
            break;
        }
        if count < 0 {
            at = long(bytes, at)?.1;
        }
        for _ in 0..count.unsigned_abs() {
            for _ in 0..2 {
                let (len, next) = long(bytes, at)?;
                at = next.checked_add(usize::try_from(len).ok()?)?;
            }
        }
    }
    at = at.checked_add(16)?;
    while at < bytes.len() {
        let (count, next) = long(bytes, at)?;
        if count == 0 {
            return Some(at);
        }
        let (size, next) = long(bytes, next)?;
        at = next
            .checked_add(usize::try_from(size).ok()?)?
            .checked_add(16)?;
    }
    None
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
            Some(error) => {
                let after_an_empty_block = match (error, first_empty_block(bytes)) {
                    (ContainerError::Corrupt { byte_offset, .. }, Some(empty)) => {
                        *byte_offset >= empty as u64
                    }
                    _ => false,
                };
                assert!(
                    stricter(error) || after_an_empty_block,
                    "apache-avro read the file whole ({} records), we failed after {}: {error}",
                    theirs.len(),
                    ours.len()
                )
            }
        }
    }
});
