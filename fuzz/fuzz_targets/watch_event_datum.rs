//! The specialised WatchEvent decoder (`ipaudit_schemas::datum`) against apache-avro on one
//! datum of each schema version (the first byte picks v1 to v4): apache-avro's serde path
//! for today's version, its generic `Value` and schema resolution for older ones. Both
//! accept the same bytes (but for the decoder's documented strictness) and read the same
//! event; the decoder reading only the analysis' fields accepts exactly what the full read
//! accepts, and reading into the event read before gives what a fresh read gives.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use ipaudit_analyzer::offline::source::ANALYSIS_FIELDS;
use ipaudit_schemas::datum::{
    decode_watch_event_of, read_watch_event_into, Fields, WireError, WireVersion,
};
use ipaudit_schemas::message::HEADER_LEN;
use ipaudit_schemas::registry::{DatumError, Record};
use ipaudit_schemas::WatchEvent;
use libfuzzer_sys::fuzz_target;

/// apache-avro on a whole datum of version `index` (trailing bytes refused, as ours).
fn apache(index: usize, mut body: &[u8]) -> Result<WatchEvent, String> {
    let set = WatchEvent::schemas();
    let event = if set.is_current(index) {
        set.read_current_serde::<WatchEvent>(&mut body)
    } else {
        set.read_datum_resolving::<WatchEvent>(index, &mut body)
    }
    .map_err(|e: DatumError| e.to_string())?;
    if !body.is_empty() {
        return Err(format!("{} trailing bytes", body.len()));
    }
    Ok(event)
}

fuzz_target!(|bytes: &[u8]| {
    common::write_seeds_if_asked(|| {
        common::versioned_messages()
            .into_iter()
            .enumerate()
            .map(|(i, (version, message))| {
                let mut seed = vec![version as u8 - 1];
                seed.extend_from_slice(&message[HEADER_LEN..]);
                (format!("v{version}-{i}"), seed)
            })
            .collect()
    });
    let Some((&selector, body)) = bytes.split_first() else {
        return;
    };
    let version = WireVersion::ALL[usize::from(selector & 3)];
    let ours = decode_watch_event_of(version, &Fields::ALL, body);
    let theirs = apache(version as usize - 1, body);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{version:?}: the decoders read different events"),
        (Err(_), Err(_)) => {}
        (Err(e), Ok(theirs)) => assert!(
            matches!(
                e,
                // A block's byte size that disagrees with its items, negative included.
                WireError::VarintOverflow { .. }
                    | WireError::BlockSize { .. }
                    | WireError::NegativeLength { .. }
            ),
            "{version:?}: apache-avro read what the specialised decoder refused: {e}; apache-avro read {theirs:?}"
        ),
        (Ok(_), Err(e)) => {
            panic!("{version:?}: the specialised decoder read what apache-avro refused: {e}")
        }
    }
    // The analysis' projection: the same errors, fields left out.
    let analysis = decode_watch_event_of(version, &ANALYSIS_FIELDS, body);
    assert_eq!(
        analysis.as_ref().err(),
        ours.as_ref().err(),
        "{version:?}: the analysis read and the full read disagree"
    );
    // Reading into the event read before (a pod's, all fields set) gives a fresh read.
    let mut into = match &ours {
        Ok(event) => event.clone(),
        Err(_) => WatchEvent::blank(),
    };
    into.cluster_id.push_str("left over");
    let mut input = body;
    let into_result = read_watch_event_into(version, &ANALYSIS_FIELDS, &mut input, &mut into);
    match (&analysis, into_result) {
        (Ok(fresh), Ok(())) if input.is_empty() => assert_eq!(&into, fresh),
        (Ok(_), Ok(())) => panic!("a whole datum read with bytes left"),
        (Err(WireError::TrailingBytes { .. }), Ok(())) => {}
        (Err(_), Err(_)) => assert_eq!(input, body, "a failed read consumed bytes"),
        (a, b) => panic!("{version:?}: into {b:?}, fresh {a:?}"),
    }
});
