//! A document without the spaces that begin its lines, for the typed parse.
//!
//! kubectl's `-o json` indents every line, by four spaces a level: well over half of a
//! served Pod's bytes are indentation, and serde_json steps over whitespace a byte at a
//! time. Copying the document without it, eight bytes at a time, costs about half what
//! parsing the indentation does (BENCHMARKS.md, "sixth session").
//!
//! It is exact: JSON holds no raw line feed inside a string, so the spaces after a line
//! feed lie between tokens of a valid document, and the line feed itself is kept, so no two
//! tokens join. A document that is not valid JSON stays invalid: a raw line feed inside a
//! string is still there. Spaces are ASCII and follow a line feed, so whether the bytes are
//! UTF-8 does not change either.

const SPACES: u64 = u64::from_le_bytes(*b"        ");
const LINE_FEEDS: u64 = u64::from_le_bytes(*b"\n\n\n\n\n\n\n\n");
const LOW_BITS: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// `doc` without the spaces at the start of each line, written into `scratch` (grown when
/// too small, never shrunk here).
pub(super) fn unindented<'s>(doc: &[u8], scratch: &'s mut Vec<u8>) -> &'s [u8] {
    // Whole words are written past the end of what is kept: room for one.
    if scratch.len() < doc.len() + 8 {
        scratch.resize(doc.len() + 8, 0);
    }
    let out = &mut scratch[..];
    let (mut read, mut written) = (0, 0);
    'lines: loop {
        // The indentation: skipped.
        loop {
            let Some(word) = word_at(doc, read) else {
                read += doc[read..].iter().take_while(|&&b| b == b' ').count();
                break;
            };
            let not_spaces = word ^ SPACES;
            if not_spaces != 0 {
                read += first_marked_byte(not_spaces);
                break;
            }
            read += 8;
        }
        // The rest of the line, its line feed included: copied a word at a time.
        loop {
            let Some(word) = word_at(doc, read) else {
                let rest = &doc[read..];
                let line = memchr::memchr(b'\n', rest).map_or(rest.len(), |at| at + 1);
                out[written..written + line].copy_from_slice(&rest[..line]);
                (read, written) = (read + line, written + line);
                if read == doc.len() {
                    break 'lines;
                }
                continue 'lines;
            };
            out[written..written + 8].copy_from_slice(&word.to_le_bytes());
            // The classic test for a zero byte, on the word XOR line feeds: exact for the
            // lowest marked byte, which is the one used.
            let x = word ^ LINE_FEEDS;
            let line_feeds = x.wrapping_sub(LOW_BITS) & !x & HIGH_BITS;
            if line_feeds != 0 {
                let line = first_marked_byte(line_feeds) + 1;
                (read, written) = (read + line, written + line);
                continue 'lines;
            }
            (read, written) = (read + 8, written + 8);
        }
    }
    &scratch[..written]
}

/// The eight bytes at `at`, little-endian, if there are eight.
fn word_at(doc: &[u8], at: usize) -> Option<u64> {
    let bytes = doc.get(at..at + 8)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// Index of the lowest byte of `word` that is not zero (`word` is not zero).
fn first_marked_byte(word: u64) -> usize {
    (word.trailing_zeros() / 8) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn unindent(doc: &[u8]) -> Vec<u8> {
        unindented(doc, &mut Vec::new()).to_vec()
    }

    /// The reference: line by line.
    fn reference(doc: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for line in doc.split_inclusive(|&b| b == b'\n') {
            let indentation = line.iter().take_while(|&&b| b == b' ').count();
            out.extend_from_slice(&line[indentation..]);
        }
        out
    }

    #[test]
    fn the_spaces_that_begin_lines_go_and_the_rest_stays() {
        let doc = b"{\n    \"a\": \"x  y\",\n            \"b\": [\n        1\n    ]\n}\n";
        assert_eq!(
            unindent(doc),
            b"{\n\"a\": \"x  y\",\n\"b\": [\n1\n]\n}\n".to_vec()
        );
    }

    #[test]
    fn short_and_empty_documents_are_unchanged_but_for_indentation() {
        for doc in [
            &b""[..],
            b" ",
            b"       ",
            b"\n",
            b"  {}",
            b"{}\n  ",
            b"\n\n \n",
        ] {
            assert_eq!(
                unindent(doc),
                reference(doc),
                "{:?}",
                String::from_utf8_lossy(doc)
            );
        }
    }

    #[test]
    fn a_reused_scratch_holds_only_the_latest_document() {
        let mut scratch = Vec::new();
        let long = format!("{{\n{}\"a\": 1\n}}", " ".repeat(100));
        assert_eq!(unindented(long.as_bytes(), &mut scratch), b"{\n\"a\": 1\n}");
        assert_eq!(unindented(b"  [1]", &mut scratch), b"[1]");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Any bytes: the same as cutting line by line.
        #[test]
        fn any_text_loses_exactly_its_indentation(
            pieces in prop::collection::vec(
                prop_oneof![
                    Just(b" ".to_vec()),
                    Just(b"        ".to_vec()),
                    Just(b"\n".to_vec()),
                    Just(b"\r\n".to_vec()),
                    prop::collection::vec(any::<u8>(), 0..12),
                ],
                0..40,
            )
        ) {
            let doc = pieces.concat();
            prop_assert_eq!(unindent(&doc), reference(&doc));
        }

        /// Pretty-printed JSON, with line feeds and spaces put anywhere (also inside
        /// strings, which makes it invalid): valid and invalid alike, and the same value.
        #[test]
        fn json_stays_the_same_value_or_stays_invalid(
            value in prop::collection::vec((".{0,6}", any::<i32>(), any::<bool>()), 0..6),
            breaks in prop::collection::vec((any::<prop::sample::Index>(), 0usize..20), 0..3),
        ) {
            let value: serde_json::Value = value
                .into_iter()
                .map(|(k, n, b)| (k.clone(), serde_json::json!({"n": n, "b": b, "s": [k]})))
                .collect::<serde_json::Map<_, _>>()
                .into();
            let mut doc = serde_json::to_vec_pretty(&value).unwrap();
            for (at, spaces) in breaks {
                let at = at.index(doc.len() + 1);
                let insert = std::iter::once(b'\n').chain(std::iter::repeat_n(b' ', spaces));
                doc.splice(at..at, insert);
            }
            let parse = |d: &[u8]| serde_json::from_slice::<serde_json::Value>(d).ok();
            let stripped = unindent(&doc);
            prop_assert_eq!(parse(&stripped), parse(&doc));
            prop_assert_eq!(std::str::from_utf8(&stripped).is_ok(), std::str::from_utf8(&doc).is_ok());
        }
    }
}
