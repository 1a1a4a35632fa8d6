//! The kubectl reader's typed fast path on one watch document, of each stream it reads,
//! against the generic conversion through `serde_json::Value`
//! (`ipaudit_schemas::convert::from_watch_document`): where the fast path vouches for a
//! document it reads the event the generic conversion reads, and the generic conversion
//! finds nothing wrong with it.
#![no_main]

use ipaudit_analyzer::offline::source::kubectl_typed_event;
use ipaudit_schemas::convert::from_watch_document;
use ipaudit_schemas::Stream;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|doc: &[u8]| {
    let value = serde_json::from_slice::<serde_json::Value>(doc);
    // serde_json refuses a broken `\u` escape (a lone surrogate, `"\ud914\r"`) when it
    // builds a `Value`, but not in a field a typed read skips: the fast path keeps such a
    // document (the fields it reads are whole), where the generic path has no `Value` to
    // compare with.
    if value.as_ref().is_err_and(|error| {
        let error = error.to_string();
        error.contains("surrogate") || error.contains("hex escape")
    }) {
        return;
    }
    let generic = value
        .ok()
        .and_then(|value| from_watch_document(&value).ok());
    for stream in [Stream::Pod, Stream::Ip, Stream::Subnet] {
        let Some(fast) = kubectl_typed_event(stream, doc) else {
            continue;
        };
        let Some(generic) = &generic else {
            panic!(
                "the fast path read {stream:?} from a document the generic conversion refuses: {}",
                String::from_utf8_lossy(doc)
            );
        };
        assert!(
            generic.problems.is_empty(),
            "the fast path read a document with unusable fields {:?}: {}",
            generic.problems,
            String::from_utf8_lossy(doc)
        );
        assert_eq!(
            fast,
            generic.event,
            "the paths read different events: {}",
            String::from_utf8_lossy(doc)
        );
    }
});
