//! The exact splitter: where each top-level JSON object of a recording starts and ends,
//! found a byte at a time outside strings, and why a broken one is broken (truncated,
//! too large, text that is no object). A `{` at the start of a line always opens a
//! document. `Long` reads a stretch without such a line with a streaming splitter.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::pieces;
use super::{Position, Problem, MAX_DOCUMENT_BYTES};

/// One top-level document found in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Where it starts.
    pub position: Position,
    /// Byte range in the input.
    pub range: std::ops::Range<usize>,
    /// Why it is not a complete JSON value, if it is not.
    pub broken: Option<&'static str>,
}

/// Splits text into top-level JSON objects. A `{` at the start of a line always opens a
/// new document (nested objects are indented, and compact output has one per line), so a
/// truncated document cannot swallow the next one.
pub fn split_documents(text: &[u8]) -> Vec<Document> {
    let mut splitter = Splitter::new(text, Cursor::default());
    let mut docs = Vec::new();
    while let Ok(Some(doc)) = splitter.next_document() {
        docs.push(Document {
            position: doc.position,
            range: doc.start as usize..doc.end as usize,
            broken: doc.broken,
        });
    }
    docs
}

/// Where a splitter starts: a byte offset and the line it is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cursor {
    pub(super) offset: u64,
    pub(super) line: u64,
    pub(super) line_start: u64,
}

impl Default for Cursor {
    fn default() -> Self {
        Cursor {
            offset: 0,
            line: 1,
            line_start: 0,
        }
    }
}

/// A document the splitter found; the bytes of a complete one are in `Splitter::doc`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Found {
    pub(super) position: Position,
    /// The cursor at its first byte, to read it again from there.
    pub(super) at: Cursor,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) broken: Option<&'static str>,
}

impl Found {
    /// The problem of this document of `path`, said by `message`; `skipped`: nothing of it
    /// was read.
    pub(super) fn problem(&self, path: &Path, message: String, skipped: bool) -> Problem {
        Problem {
            path: path.to_owned(),
            position: self.position,
            message,
            skipped,
            bytes: self.end - self.start,
        }
    }
}

/// A document from `at` to `end`.
pub(super) fn found(at: Cursor, end: u64, broken: Option<&'static str>) -> Found {
    Found {
        position: Position::Text {
            line: at.line,
            column: at.offset - at.line_start + 1,
            offset: at.offset,
        },
        at,
        start: at.offset,
        end,
        broken,
    }
}

/// The bytes that change the splitter's state inside a document, outside strings.
pub(super) static STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    let bytes = *b"\"{}[]\n";
    while i < bytes.len() {
        table[bytes[i] as usize] = true;
        i += 1;
    }
    table
};

/// The bytes that end a run of string content: its closing quote, an escape, or a raw
/// newline (which breaks the document).
pub(super) static STRING_END: [bool; 256] = {
    let mut table = [false; 256];
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[b'\n' as usize] = true;
    table
};

/// String bytes looked at one by one before the splitter searches for the string's end.
pub(super) const SHORT_STRING: usize = 32;

/// The document splitter, streaming: it holds the current document's bytes only (up to
/// [`MAX_DOCUMENT_BYTES`]) and forgets broken ones as it goes.
pub(super) struct Splitter<R> {
    pub(super) input: R,
    pub(super) at: Cursor,
    pub(super) depth: usize,
    pub(super) in_string: bool,
    pub(super) escaped: bool,
    /// The open document: where it started, and whether it outgrew the cap.
    pub(super) current: Option<(Cursor, bool)>,
    /// Text outside any document, since this cursor.
    pub(super) garbage: Option<Cursor>,
    /// The bytes of the open (then just closed) document.
    pub(super) doc: Vec<u8>,
}

impl<R: BufRead> Splitter<R> {
    pub(super) fn new(input: R, at: Cursor) -> Self {
        Splitter {
            input,
            at,
            depth: 0,
            in_string: false,
            escaped: false,
            current: None,
            garbage: None,
            doc: Vec::new(),
        }
    }

    /// The next document, complete or broken; `None` at the end of the input.
    pub(super) fn next_document(&mut self) -> std::io::Result<Option<Found>> {
        loop {
            let chunk = match self.input.fill_buf() {
                Ok(chunk) => chunk,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                return Ok(self.at_end());
            }
            // Bytes of the open document in this chunk start here.
            let mut copy_from = 0usize;
            let mut result = None;
            let mut used = chunk.len();
            let base = self.at.offset;
            let mut i = 0usize;
            while i < chunk.len() {
                if self.in_string && !self.escaped {
                    // Jump to what ends the string. Most are short (keys, names, values of
                    // a few bytes), where looking at each byte is quicker than setting up
                    // a vector search; the long ones get the search.
                    let rest = &chunk[i..];
                    let near = rest
                        .iter()
                        .take(SHORT_STRING)
                        .position(|b| STRING_END[usize::from(*b)]);
                    let end = match near {
                        Some(j) => Some(j),
                        None if rest.len() <= SHORT_STRING => None,
                        None => memchr::memchr3(b'"', b'\\', b'\n', &rest[SHORT_STRING..])
                            .map(|j| j + SHORT_STRING),
                    };
                    match end {
                        None => {
                            i = chunk.len();
                            continue;
                        }
                        Some(j) => i += j,
                    }
                }
                if !self.in_string && self.depth > 0 {
                    // Inside a document, only these bytes change the state.
                    while chunk.get(i).is_some_and(|b| !STRUCTURAL[usize::from(*b)]) {
                        i += 1;
                    }
                    if i == chunk.len() {
                        continue;
                    }
                }
                let b = chunk[i];
                let offset = base + i as u64;
                if b == b'\n' {
                    // A raw newline cannot be inside a JSON string: the document is broken.
                    self.in_string = false;
                    self.escaped = false;
                    self.at.line += 1;
                    self.at.line_start = offset + 1;
                    i += 1;
                    continue;
                }
                if self.in_string {
                    match (self.escaped, b) {
                        (true, _) => self.escaped = false,
                        (false, b'\\') => self.escaped = true,
                        (false, b'"') => self.in_string = false,
                        _ => {}
                    }
                    i += 1;
                    continue;
                }
                let at_line_start = offset == self.at.line_start;
                let here = Cursor { offset, ..self.at };
                match b {
                    b' ' | b'\t' | b'\r' | b',' | b':' if self.depth > 0 => {}
                    b'{' if self.depth == 0 || at_line_start => {
                        if let Some((start, _)) = self.current.take() {
                            // Not consumed: it opens the next document on the next call.
                            self.depth = 0;
                            self.doc.clear();
                            result = Some(found(start, offset, Some("document is truncated")));
                            used = i;
                            break;
                        }
                        if let Some(start) = self.garbage.take() {
                            result =
                                Some(found(start, offset, Some("text that is not a JSON object")));
                            used = i;
                            break;
                        }
                        self.current = Some((here, false));
                        self.doc.clear();
                        copy_from = i;
                        self.depth = 1;
                    }
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' if self.depth > 0 => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            used = i + 1;
                            if let Some((start, oversized)) = self.current.take() {
                                let broken = if oversized
                                    || self.doc.len() + (i + 1 - copy_from) > MAX_DOCUMENT_BYTES
                                {
                                    self.doc.clear();
                                    Some("document larger than 16 MiB")
                                } else {
                                    self.doc.extend_from_slice(&chunk[copy_from..=i]);
                                    None
                                };
                                result = Some(found(start, offset + 1, broken));
                            }
                            break;
                        }
                    }
                    b'"' if self.depth > 0 => self.in_string = true,
                    b if b.is_ascii_whitespace() => {}
                    _ if self.depth == 0 && self.garbage.is_none() => {
                        self.garbage = Some(here);
                    }
                    _ => {}
                }
                i += 1;
            }
            self.at.offset = base + used as u64;
            if result.is_none() {
                if let Some((_, oversized)) = &mut self.current {
                    if !*oversized {
                        if self.doc.len() + (chunk.len() - copy_from) > MAX_DOCUMENT_BYTES {
                            *oversized = true;
                            self.doc = Vec::new();
                        } else {
                            self.doc.extend_from_slice(&chunk[copy_from..]);
                        }
                    }
                }
            }
            self.input.consume(used);
            if result.is_some() {
                return Ok(result);
            }
        }
    }

    pub(super) fn at_end(&mut self) -> Option<Found> {
        if let Some((start, _)) = self.current.take() {
            self.doc.clear();
            self.depth = 0;
            return Some(found(start, self.at.offset, Some("document is truncated")));
        }
        let start = self.garbage.take()?;
        Some(found(
            start,
            self.at.offset,
            Some("text that is not a JSON object"),
        ))
    }
}

/// A stretch of text in which no line starts with `{` for longer than any document
/// (`Piece::Long`), read by a streaming splitter as the whole text would be. It reads on
/// until a document ends a piece's worth past where it started, so that pieces, which
/// take over again there, search each byte for a line start a bounded number of times
/// (stopping after one document would search the next 16 MiB again for each).
pub(super) struct Long {
    pub(super) splitter: Splitter<BufReader<std::io::Take<File>>>,
    /// Pieces may take over where a document ends at or past this offset.
    pub(super) until: u64,
}

impl Long {
    /// The stretch from `at` to `end` (its run's or its file's end).
    pub(super) fn open(path: &Path, at: Cursor, end: u64) -> std::io::Result<Self> {
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(at.offset))?;
        let input = BufReader::with_capacity(256 * 1024, file.take(end - at.offset));
        Ok(Long {
            splitter: Splitter::new(input, at),
            until: at.offset + pieces::PIECE_LIMIT as u64,
        })
    }

    /// The next document (its bytes in `splitter.doc`), and whether pieces take over
    /// after it (at `splitter.at`).
    pub(super) fn next(&mut self) -> std::io::Result<(Option<Found>, bool)> {
        let found = self.splitter.next_document()?;
        let over = found.is_none() || self.splitter.at.offset >= self.until;
        Ok((found, over))
    }
}

#[cfg(test)]
mod tests {
    use std::io::BufReader;

    use super::*;

    fn ranges(text: &str) -> Vec<(String, Option<&'static str>)> {
        split_documents(text.as_bytes())
            .into_iter()
            .map(|d| (text[d.range].to_owned(), d.broken))
            .collect()
    }
    #[test]
    fn pretty_and_compact_documents_are_split() {
        let text = "{\n    \"type\": \"ADDED\",\n    \"object\": {\"a\": \"}{\"}\n}\n{\"type\":\"MODIFIED\",\"object\":{}}\n{\"type\":\"DELETED\",\"object\":{}}{\"type\":\"ADDED\",\"object\":{}}";
        let docs = ranges(text);
        assert_eq!(docs.len(), 4);
        assert!(docs.iter().all(|(_, broken)| broken.is_none()));
        assert!(docs[0].0.ends_with("}\n}"));
    }
    #[test]
    fn a_truncated_document_does_not_swallow_the_next() {
        let text = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"cut\n{\"type\":\"ADDED\",\"object\":{}}\n";
        let docs = ranges(text);
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].1, Some("document is truncated"));
        assert_eq!(
            docs[1],
            ("{\"type\":\"ADDED\",\"object\":{}}".to_owned(), None)
        );
    }
    #[test]
    fn text_between_documents_is_reported_with_its_line() {
        let text = "{\"a\":1}\nerror: watch closed\n{\"b\":2}\n";
        let docs = split_documents(text.as_bytes());
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[1].broken, Some("text that is not a JSON object"));
        assert!(matches!(
            docs[1].position,
            Position::Text {
                line: 2,
                column: 1,
                ..
            }
        ));
    }
    #[test]
    fn documents_split_across_read_buffers_are_whole() {
        let text = "{\"a\": \"x\"}\n".repeat(50) + "garbage\n{\"b\": [1, 2]}";
        let mut splitter = Splitter::new(
            BufReader::with_capacity(7, text.as_bytes()),
            Cursor::default(),
        );
        let mut docs = Vec::new();
        while let Some(found) = splitter.next_document().unwrap() {
            docs.push((
                found.broken,
                String::from_utf8(splitter.doc.clone()).unwrap(),
            ));
        }
        assert_eq!(docs.len(), 52);
        assert!(docs[..50]
            .iter()
            .all(|d| *d == (None, "{\"a\": \"x\"}".to_owned())));
        assert_eq!(docs[50].0, Some("text that is not a JSON object"));
        assert_eq!(docs[51], (None, "{\"b\": [1, 2]}".to_owned()));
    }
    #[test]
    fn a_document_that_never_closes_is_not_kept_whole() {
        let text = "{\"a\": ".to_owned() + &"[".repeat(MAX_DOCUMENT_BYTES + 10) + "\n{\"b\": 1}";
        let mut splitter = Splitter::new(BufReader::new(text.as_bytes()), Cursor::default());
        let first = splitter.next_document().unwrap().unwrap();
        assert_eq!(first.broken, Some("document is truncated"));
        assert!(splitter.doc.capacity() <= MAX_DOCUMENT_BYTES + (1 << 20));
        let second = splitter.next_document().unwrap().unwrap();
        assert_eq!(second.broken, None);
        assert_eq!(splitter.doc, b"{\"b\": 1}");
    }
}
