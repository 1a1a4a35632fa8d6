//! kubectl watch output: `{"type": ..., "object": {...}}` documents, pretty-printed (as
//! `-o json` prints them) or one per line, concatenated from one or several kinds.
//!
//! kubectl first prints the initial list as ADDED events in no particular order, then the
//! watch events in order. Every listed version is at or below the list's version, and every
//! watch event is above it, so sorting each stream's leading run of ADDED events by version
//! orders the whole stream. That run is framed with `SYNC_START`/`SYNC_END`, as a
//! collector frames a list, so that the analyzer knows the list was complete.
//!
//! The file is streamed, never read whole: memory is bounded by one document and a few
//! dozen bytes per listed object, not by the length of the recording. A first pass cuts the
//! text where a line starts with `{` (`pieces`), names each piece's kind from its first
//! fields (`peek_head`), notes where each kind's documents lie (a few runs of byte ranges:
//! one per file concatenated into this one) and indexes each kind's initial list (each
//! listed document's version and place, `ListIndex`), so that the list is read in version
//! order without holding its events (whole and sorted only when the first fields do not
//! give the versions). Past a kind's initial list, it takes a piece whose first fields
//! name that kind, and that looks like one object, for one document without reading it
//! through (`Index::trusted`: the structure is checked once, by the second pass's parse);
//! any other piece it splits exactly (`Splitter`), reporting the broken documents
//! (`Checked`). Then one cursor per
//! kind reads its runs again, piece by piece, typed (`kubectl_typed`) where it can; a
//! piece the typed path does not take is split exactly, read generically where it must,
//! and what the first pass did not split is reported then (`Usable`). The cursors are
//! merged by resourceVersion.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ipaudit_schemas::convert::from_watch_document;
use ipaudit_schemas::kinds;
use ipaudit_schemas::kubernetes::FieldProblem;
use ipaudit_schemas::{EventType, Stream, WatchEvent};
use serde::Deserialize;

use super::kubectl_typed;
use super::{
    bump, counter, unversioned_problem, Position, Problem, ProblemLog, SourceError, SourceItem,
};

mod pieces;

use pieces::{Piece, Pieces};

/// The largest document kept for parsing. Kubernetes objects are at most a few MiB (etcd's
/// request limit is 1.5 MiB); a larger "document" is a broken one that never closes.
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

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
struct Cursor {
    offset: u64,
    line: u64,
    line_start: u64,
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
struct Found {
    position: Position,
    /// The cursor at its first byte, to read it again from there.
    at: Cursor,
    start: u64,
    end: u64,
    broken: Option<&'static str>,
}

/// A document from `at` to `end`.
fn found(at: Cursor, end: u64, broken: Option<&'static str>) -> Found {
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
static STRUCTURAL: [bool; 256] = {
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
static STRING_END: [bool; 256] = {
    let mut table = [false; 256];
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[b'\n' as usize] = true;
    table
};

/// String bytes looked at one by one before the splitter searches for the string's end.
const SHORT_STRING: usize = 32;

/// The document splitter, streaming: it holds the current document's bytes only (up to
/// [`MAX_DOCUMENT_BYTES`]) and forgets broken ones as it goes.
struct Splitter<R> {
    input: R,
    at: Cursor,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The open document: where it started, and whether it outgrew the cap.
    current: Option<(Cursor, bool)>,
    /// Text outside any document, since this cursor.
    garbage: Option<Cursor>,
    /// The bytes of the open (then just closed) document.
    doc: Vec<u8>,
}

impl<R: BufRead> Splitter<R> {
    fn new(input: R, at: Cursor) -> Self {
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
    fn next_document(&mut self) -> std::io::Result<Option<Found>> {
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

    fn at_end(&mut self) -> Option<Found> {
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

/// What the first pass needs of a document: its type and its object's kind.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    event_type: Cow<'a, str>,
    #[serde(borrow)]
    object: ObjectHead<'a>,
}

#[derive(Deserialize)]
struct ObjectHead<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
}

/// The stream a complete document belongs to, or why it is not an event of a known kind.
fn classify(doc: &[u8]) -> Result<Stream, String> {
    if let Ok(head) = serde_json::from_slice::<Head<'_>>(doc) {
        let known_type = matches!(
            &*head.event_type,
            "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK"
        );
        if let (true, Some(spec)) = (
            known_type,
            kinds::of_object(&head.object.api_version, &head.object.kind),
        ) {
            return Ok(spec.stream);
        }
    }
    // The rare path: the full conversion says exactly what is wrong.
    let value: serde_json::Value =
        serde_json::from_slice(doc).map_err(|e| format!("invalid JSON: {e}"))?;
    match from_watch_document(&value) {
        Ok(converted) => Ok(converted.event.stream),
        Err(e) => Err(e.to_string()),
    }
}

/// The stream of a complete document from its first fields alone: `type`, and `apiVersion`
/// and `kind` of `object`, which kubectl prints before the rest of the object, so that the
/// first pass does not read every document through. `None` when they are not plain
/// strings naming a known event type and kind (the full classification then decides). The
/// rest of the document is not checked here: the second pass reads it.
fn peek_stream(doc: &[u8]) -> Option<Stream> {
    peek_head(doc).map(|(stream, _)| stream)
}

/// [`peek_stream`], and whether the document is an ADDED event.
fn peek_head(doc: &[u8]) -> Option<(Stream, bool)> {
    let mut scan = Scan { text: doc, at: 0 };
    let (mut event_type, mut api_version, mut kind) = (None, None, None);
    scan.byte(b'{')?;
    loop {
        let key = scan.string()?;
        scan.byte(b':')?;
        match key {
            b"type" => event_type = Some(scan.string()?),
            b"object" => {
                scan.byte(b'{')?;
                let mut closed = false;
                while api_version.is_none() || kind.is_none() {
                    let key = scan.string()?;
                    scan.byte(b':')?;
                    match key {
                        b"apiVersion" => api_version = Some(scan.string()?),
                        b"kind" => kind = Some(scan.string()?),
                        _ => scan.value()?,
                    }
                    if scan.byte(b',').is_none() {
                        scan.byte(b'}')?;
                        closed = true;
                        break;
                    }
                }
                if event_type.is_some() {
                    break;
                }
                if !closed {
                    scan.close(1)?;
                }
            }
            _ => scan.value()?,
        }
        if event_type.is_some() && kind.is_some() {
            break;
        }
        if scan.byte(b',').is_none() {
            break;
        }
    }
    let event_type = event_type?;
    if !matches!(
        event_type,
        b"ADDED" | b"MODIFIED" | b"DELETED" | b"BOOKMARK"
    ) {
        return None;
    }
    let api_version = std::str::from_utf8(api_version.unwrap_or_default()).ok()?;
    let kind = std::str::from_utf8(kind.unwrap_or_default()).ok()?;
    kinds::of_object(api_version, kind).map(|spec| (spec.stream, event_type == b"ADDED"))
}

/// `object.metadata.resourceVersion` of a document, read without building anything, for
/// ordering an initial list before reading it. `None` when it is not there as a plain
/// string of a number (the list is then read and sorted whole, as the conversion reads
/// it).
fn peek_resource_version(doc: &[u8]) -> Option<i64> {
    let mut scan = Scan { text: doc, at: 0 };
    scan.byte(b'{')?;
    for key in [&b"object"[..], b"metadata"] {
        scan.find_key(key)?;
        scan.byte(b'{')?;
    }
    scan.find_key(b"resourceVersion")?;
    let rv = std::str::from_utf8(scan.string()?).ok()?;
    ipaudit_schemas::event::parse_resource_version(rv)
}

/// A cursor over JSON text that skips what it does not read.
struct Scan<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn skip_whitespace(&mut self) {
        while self
            .text
            .get(self.at)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.at += 1;
        }
    }

    fn byte(&mut self, expected: u8) -> Option<()> {
        self.skip_whitespace();
        (self.text.get(self.at) == Some(&expected)).then(|| self.at += 1)
    }

    /// A string without escapes, as its bytes.
    fn string(&mut self) -> Option<&'a [u8]> {
        self.byte(b'"')?;
        let rest = &self.text[self.at..];
        let end = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[end] != b'"' {
            return None;
        }
        self.at += end + 1;
        Some(&rest[..end])
    }

    /// Past the end of a string whose opening quote was read.
    fn skip_string(&mut self) -> Option<()> {
        loop {
            let rest = &self.text[self.at..];
            let end = memchr::memchr2(b'"', b'\\', rest)?;
            if rest[end] == b'"' {
                self.at += end + 1;
                return Some(());
            }
            self.at += end + 2;
        }
    }

    /// Past the `depth` open objects or arrays the cursor is in.
    fn close(&mut self, mut depth: usize) -> Option<()> {
        while depth > 0 {
            let b = *self.text.get(self.at)?;
            self.at += 1;
            match b {
                b'"' => self.skip_string()?,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth -= 1,
                _ => {}
            }
        }
        Some(())
    }

    /// Past the key `wanted` and its colon, in an object whose `{` was read; the values of
    /// the keys before it are skipped.
    fn find_key(&mut self, wanted: &[u8]) -> Option<()> {
        loop {
            let key = self.string()?;
            self.byte(b':')?;
            if key == wanted {
                return Some(());
            }
            self.value()?;
            self.byte(b',')?;
        }
    }

    /// Past one value.
    fn value(&mut self) -> Option<()> {
        self.skip_whitespace();
        let b = *self.text.get(self.at)?;
        self.at += 1;
        match b {
            b'"' => self.skip_string(),
            b'{' | b'[' => self.close(1),
            _ => {
                while self
                    .text
                    .get(self.at)
                    .is_some_and(|b| !matches!(b, b',' | b'}' | b']') && !b.is_ascii_whitespace())
                {
                    self.at += 1;
                }
                Some(())
            }
        }
    }
}

/// The byte ranges of one stream's documents, in file order.
#[derive(Debug, Clone, Copy)]
struct Run {
    from: Cursor,
    end: u64,
}

/// One document of an initial list, as the first pass found it.
#[derive(Debug, Clone, Copy)]
struct Listed {
    /// Its resourceVersion, read from its first fields.
    rv: i64,
    /// Where it starts.
    at: Cursor,
    /// Where it ends.
    end: u64,
}

/// What the first pass learnt of one stream's initial list (its leading run of ADDED
/// documents): where each document lies and its version, so that the list is read in
/// version order without being held (a few dozen bytes a listed object instead of its event).
#[derive(Debug)]
struct ListIndex {
    /// Still in the leading run.
    open: bool,
    /// Every listed document's version and type were read from its first fields.
    exact: bool,
    docs: Vec<Listed>,
}

impl ListIndex {
    fn new() -> Self {
        ListIndex {
            open: true,
            exact: true,
            docs: Vec::new(),
        }
    }

    /// A document of this stream from `at` to `end`, ADDED or not (`None`: its type was
    /// not read), and its version as its first fields give it.
    fn note(
        &mut self,
        added: Option<bool>,
        version: impl FnOnce() -> Option<i64>,
        at: Cursor,
        end: u64,
    ) {
        if !self.open {
            return;
        }
        match (added, added.and_then(|_| version())) {
            (Some(true), Some(rv)) => self.docs.push(Listed { rv, at, end }),
            (Some(false), _) => self.open = false,
            // What the first fields do not say is left to the conversion: the list is
            // then read whole and sorted, as before there was an index of it.
            _ => {
                self.exact = false;
                self.open = false;
                self.docs = Vec::new();
            }
        }
    }

    /// How to read the list, or `None` to read it whole and sort it.
    fn plan(self) -> Option<ListPlan> {
        if !self.exact || self.docs.is_empty() {
            return None;
        }
        let end = self.docs.iter().map(|d| d.end).max().unwrap_or(0);
        let in_file_order = self.docs.windows(2).all(|w| w[0].rv <= w[1].rv);
        let mut docs = self.docs;
        if !in_file_order {
            // Stable: equal versions stay in file order, as the sort of whole events had it.
            docs.sort_by_key(|d| d.rv);
        }
        Some(ListPlan {
            docs,
            in_file_order,
            next: 0,
            end,
            last: None,
            ended: false,
            file: None,
            buffer: Vec::new(),
        })
    }
}

/// How a stream's initial list is read: in file order when its versions already are in
/// order (then it is read with the rest, in one pass), else document by document in
/// version order; framed with `SYNC_START`/`SYNC_END` either way, and never held.
struct ListPlan {
    /// The listed documents, in version order (file order among equal versions).
    docs: Vec<Listed>,
    in_file_order: bool,
    /// The next of `docs` to read (when not in file order).
    next: usize,
    /// Where the last listed document ends: this stream's documents before it are listed.
    end: u64,
    /// The last listed event handed on (as its `SYNC_END` marker), the highest version.
    last: Option<(Box<WatchEvent>, u64)>,
    /// `SYNC_END` was handed on.
    ended: bool,
    /// The file, and one document's bytes, when reading out of file order.
    file: Option<File>,
    buffer: Vec<u8>,
}

/// A marker of `event`'s stream at its version.
fn marker_at(event: &WatchEvent, event_type: EventType) -> Box<WatchEvent> {
    let mut marker = WatchEvent::new(event.stream, event_type, &event.resource_version);
    marker.cluster_id.clone_from(&event.cluster_id);
    Box::new(marker)
}

/// The pieces the first pass split exactly, as sorted, disjoint byte ranges: its
/// splitter read them and reported what was broken in them. The first pass took every
/// other piece, without reading it through, for one document of the stream its first
/// fields name; the second pass, which parses every piece anyway, reports what is broken
/// in those (see [`Usable::convert`]).
#[derive(Debug, Default)]
struct Checked(Vec<std::ops::Range<u64>>);

impl Checked {
    fn push(&mut self, range: std::ops::Range<u64>) {
        match self.0.last_mut() {
            Some(last) if last.end == range.start => last.end = range.end,
            _ => self.0.push(range),
        }
    }

    /// Whether the byte at `offset` lies in a piece the first pass split exactly.
    fn contains(&self, offset: u64) -> bool {
        let after = self.0.partition_point(|r| r.start <= offset);
        after > 0 && self.0[after - 1].end > offset
    }
}

/// What the first pass learnt of a file: each stream's runs and initial list, and where
/// it split exactly.
#[derive(Debug, Default)]
struct Index {
    streams: Vec<(Stream, Vec<Run>, ListIndex)>,
    /// The stream of the last document noted.
    last: Option<Stream>,
    checked: Checked,
}

impl Index {
    fn stream_at(&mut self, stream: Stream) -> usize {
        match self.streams.iter().position(|(s, _, _)| *s == stream) {
            Some(at) => at,
            None => {
                self.streams.push((stream, Vec::new(), ListIndex::new()));
                self.streams.len() - 1
            }
        }
    }

    /// Whether a document of `stream` noted next starts a run (the last one noted was of
    /// another stream).
    fn starts_run(&self, stream: Stream) -> bool {
        self.last != Some(stream)
    }

    /// A document of `stream` from `from` to `end`, which starts a run.
    fn push_run(&mut self, stream: Stream, from: Cursor, end: u64) {
        let at = self.stream_at(stream);
        self.streams[at].1.push(Run { from, end });
        self.last = Some(stream);
    }

    /// A document of `stream` ending at `end`, which continues its last run.
    fn extend_run(&mut self, stream: Stream, end: u64) {
        let at = self.stream_at(stream);
        if let Some(run) = self.streams[at].1.last_mut() {
            run.end = end;
        }
    }

    /// A document the splitter found: noted under its stream, or reported.
    fn note(&mut self, doc: &[u8], found: &Found, path: &Path, log: &mut ProblemLog) {
        let why = match found.broken {
            Some(why) => why.to_owned(),
            None => match stream_of(doc) {
                Ok((stream, added)) => {
                    let at = self.stream_at(stream);
                    let version = || peek_resource_version(doc);
                    self.streams[at].2.note(added, version, found.at, found.end);
                    if self.starts_run(stream) {
                        self.push_run(stream, found.at, found.end);
                    } else {
                        self.extend_run(stream, found.end);
                    }
                    return;
                }
                Err(why) => why,
            },
        };
        log.push(Problem {
            path: path.to_owned(),
            position: found.position,
            message: why,
            skipped: true,
            bytes: found.end - found.start,
        });
    }

    /// The stream of a piece that the first pass may take for one document without
    /// reading it through: its first fields name a stream whose initial list is over,
    /// and nothing shows a second document after the first (see [`one_object_likely`]).
    /// A stream's first documents, up to the end of its initial list, are split exactly:
    /// what the list holds, in which order, and where it ends must not depend on a
    /// document that is broken or shares its piece with another.
    fn trusted(&self, doc: &[u8]) -> Option<Stream> {
        if doc.len() > MAX_DOCUMENT_BYTES || !one_object_likely(doc) {
            return None;
        }
        let (stream, _) = peek_head(doc)?;
        self.streams
            .iter()
            .any(|(s, _, list)| *s == stream && !list.open)
            .then_some(stream)
    }
}

/// The stream of a complete document, as the first pass names it (from its first fields,
/// else by the full classification), and whether it is an ADDED event (`None` when the
/// first fields did not say); or why it is no event of a known kind.
fn stream_of(doc: &[u8]) -> Result<(Stream, Option<bool>), String> {
    match peek_head(doc) {
        Some((stream, added)) => Ok((stream, Some(added))),
        None => classify(doc).map(|stream| (stream, None)),
    }
}

/// Whether `doc` (a piece without the whitespace around it) looks like one JSON object:
/// it opens and closes with a brace, and every `}` and `]` before its last byte is
/// followed, past whitespace, by `,`, `}` or `]`, as in any JSON document outside
/// strings. Two documents on one line (a file concatenated to one whose last line was not
/// ended), or text after a document, break that. A piece that only looks like one object
/// is found out by the second pass, which parses it.
fn one_object_likely(doc: &[u8]) -> bool {
    if doc.first() != Some(&b'{') || doc.last() != Some(&b'}') {
        return false;
    }
    let body = &doc[..doc.len() - 1];
    memchr::memchr2_iter(b'}', b']', body).all(|at| {
        let next = body[at + 1..].iter().find(|b| !b.is_ascii_whitespace());
        matches!(next, None | Some(b',' | b'}' | b']'))
    })
}

/// The first pass: notes each stream's runs and indexes its initial list, reporting the
/// broken documents of the pieces it splits exactly. With `trust_heads`, a piece whose
/// first fields name a stream past its initial list, and that looks like one object, is
/// taken for one document of it without being split (see [`Index::trusted`]): the second
/// pass finds out the rest.
fn index(
    path: &Path,
    file: File,
    file_len: u64,
    log: &mut ProblemLog,
    trust_heads: bool,
) -> Result<Index, SourceError> {
    let io = |source| SourceError::Io {
        path: path.to_owned(),
        source,
    };
    let mut pieces = Pieces::of(file, Cursor::default(), file_len).map_err(io)?;
    let mut index = Index::default();
    while let Some(piece) = pieces.next_piece().map_err(io)? {
        match piece {
            Piece::Text { start, len } => {
                let (lead, doc) = trim_whitespace(pieces.text(len));
                let trusted = trust_heads.then(|| index.trusted(doc)).flatten();
                if let Some(stream) = trusted {
                    // The piece's end, past the whitespace after the document: where the
                    // splitter would end the document if it turned out broken.
                    let end = start + len as u64;
                    if index.starts_run(stream) {
                        let from = pieces.cursor_at(path, start + lead as u64).map_err(io)?;
                        index.push_run(stream, from, end);
                    } else {
                        index.extend_run(stream, end);
                    }
                    continue;
                }
                let at = pieces.cursor_at(path, start).map_err(io)?;
                let mut splitter = Splitter::new(pieces.text(len), at);
                while let Some(found) = splitter.next_document().map_err(io)? {
                    index.note(&splitter.doc, &found, path, log);
                }
                index.checked.push(start..start + len as u64);
            }
            Piece::Long { start } => {
                let at = pieces.cursor_at(path, start).map_err(io)?;
                let mut long = Long::open(path, at, file_len).map_err(io)?;
                loop {
                    let (found, over) = long.next().map_err(io)?;
                    if let Some(found) = found {
                        index.note(&long.splitter.doc, &found, path, log);
                    }
                    if over {
                        break;
                    }
                }
                index.checked.push(start..long.splitter.at.offset);
                pieces.resume_at(long.splitter.at).map_err(io)?;
            }
        }
    }
    Ok(index)
}

/// A document's event, with where the document starts and ends.
type Converted = (Box<WatchEvent>, u64, u64);

/// One stream's events, in order: its initial list in version order and framed, then the
/// rest.
struct StreamCursor {
    stream: Stream,
    runs: VecDeque<Run>,
    /// The run being read.
    pieces: Option<Pieces>,
    /// A stretch without a line that starts with `{`, being read.
    long: Option<Long>,
    /// The splitter reading a piece that the typed path did not take, a document a call
    /// (as it read the whole run before pieces: problems come in the same order).
    split: Option<Splitter<std::io::Cursor<Vec<u8>>>>,
    path: PathBuf,
    /// Where the first pass split the file exactly.
    checked: Arc<Checked>,
    /// Events ready, in order.
    ready: VecDeque<(Box<WatchEvent>, u64)>,
    /// The indexed initial list, read without holding it.
    list: Option<ListPlan>,
    /// Still reading the leading run of ADDED events to sort them (no index of the list).
    in_list: bool,
    done: bool,
    /// Tests: read each run with the splitter whole, as before pieces.
    #[cfg(test)]
    by_splitter: Option<Splitter<BufReader<std::io::Take<File>>>>,
    #[cfg(test)]
    whole_runs: bool,
}

impl StreamCursor {
    fn new(
        stream: Stream,
        runs: Vec<Run>,
        list: ListIndex,
        path: &Path,
        checked: Arc<Checked>,
    ) -> Self {
        let list = list.plan();
        StreamCursor {
            stream,
            runs: runs.into(),
            pieces: None,
            long: None,
            split: None,
            path: path.to_owned(),
            checked,
            ready: VecDeque::new(),
            in_list: list.is_none(),
            list,
            done: false,
            #[cfg(test)]
            by_splitter: None,
            #[cfg(test)]
            whole_runs: false,
        }
    }

    /// The next event of this stream, with the file offset after it.
    fn next(
        &mut self,
        log: &mut ProblemLog,
    ) -> Result<Option<(Box<WatchEvent>, u64)>, SourceError> {
        loop {
            if !self.in_list || self.done {
                if let Some(ready) = self.ready.pop_front() {
                    return Ok(Some(ready));
                }
            }
            if self.done {
                return Ok(None);
            }
            if let Some(listed) = self.read_listed(log)? {
                self.hand_listed(listed);
                continue;
            }
            #[cfg(test)]
            let read = if self.whole_runs {
                self.read_whole_runs(log)?
            } else {
                self.read(log)?
            };
            #[cfg(not(test))]
            let read = self.read(log)?;
            match read {
                Some((event, start, end)) => {
                    if self
                        .list
                        .as_ref()
                        .is_some_and(|l| !l.ended && start < l.end)
                    {
                        // A listed document, read in file order.
                        self.hand_listed((event, end));
                        continue;
                    }
                    self.end_indexed_list();
                    if self.in_list && event.event_type != EventType::Added {
                        self.end_list();
                    }
                    self.ready.push_back((event, end));
                }
                None => {
                    self.done = true;
                    self.end_indexed_list();
                    if self.in_list {
                        self.end_list();
                    }
                }
            }
        }
    }

    /// Hands on a listed event, after `SYNC_START` if it is the first.
    fn hand_listed(&mut self, (event, end): (Box<WatchEvent>, u64)) {
        let Some(list) = &mut self.list else {
            return;
        };
        let marker = marker_at(&event, EventType::SyncEnd);
        match list.last.replace((marker, end)) {
            Some(_) => {}
            None => self
                .ready
                .push_back((marker_at(&event, EventType::SyncStart), end)),
        }
        self.ready.push_back((event, end));
    }

    /// The indexed list is over: `SYNC_END` at its highest version.
    fn end_indexed_list(&mut self) {
        if let Some(list) = &mut self.list {
            if !list.ended {
                list.ended = true;
                list.docs = Vec::new();
                list.buffer = Vec::new();
                list.file = None;
                if let Some(end) = list.last.take() {
                    self.ready.push_back(end);
                }
            }
        }
    }

    /// The initial list is complete: sort and frame it (the list was not indexed).
    fn end_list(&mut self) {
        self.in_list = false;
        let listed = self
            .ready
            .iter()
            .take_while(|(e, _)| e.event_type == EventType::Added)
            .count();
        if listed == 0 {
            return;
        }
        self.ready.make_contiguous()[..listed]
            .sort_by_key(|(e, _)| e.resource_version_num.unwrap_or(i64::MAX));
        let (first, first_end) = &self.ready[0];
        let start = (marker_at(first, EventType::SyncStart), *first_end);
        let (last, last_end) = &self.ready[listed - 1];
        let end = (marker_at(last, EventType::SyncEnd), *last_end);
        self.ready.insert(listed, end);
        self.ready.push_front(start);
    }

    /// The next listed event read out of file order, in version order; `None` when the list
    /// is read in file order or is over (its end is then marked).
    fn read_listed(
        &mut self,
        log: &mut ProblemLog,
    ) -> Result<Option<(Box<WatchEvent>, u64)>, SourceError> {
        let Some(list) = &mut self.list else {
            return Ok(None);
        };
        if list.in_file_order || list.ended {
            return Ok(None);
        }
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| SourceError::Io { path, source }
        };
        while let Some(doc) = list.docs.get(list.next).copied() {
            list.next += 1;
            let file = match &mut list.file {
                Some(file) => file,
                None => list
                    .file
                    .insert(File::open(&self.path).map_err(io(&self.path))?),
            };
            list.buffer.resize((doc.end - doc.at.offset) as usize, 0);
            file.seek(SeekFrom::Start(doc.at.offset))
                .map_err(io(&self.path))?;
            file.read_exact(&mut list.buffer).map_err(io(&self.path))?;
            // The first pass split every listed document exactly (see `Index::trusted`).
            let found = found(doc.at, doc.end, None);
            if let Some(event) = convert(self.stream, &self.path, &list.buffer, &found, log) {
                return Ok(Some((event, doc.end)));
            }
        }
        // Every listed document was read: the rest of the stream follows them in the file.
        self.end_indexed_list();
        Ok(None)
    }

    /// Where the initial list ends when it was read out of file order (0 when it was not):
    /// documents before it were read with it.
    fn read_already(&self) -> u64 {
        self.list
            .as_ref()
            .filter(|l| !l.in_file_order)
            .map_or(0, |l| l.end)
    }

    /// The next usable document of this stream in file order, converted, with where it
    /// starts and ends. Listed documents already read out of file order are passed over.
    ///
    /// A run is read in pieces (see `pieces`): a piece that the typed path reads as one
    /// document is one, exactly as the splitter would find it; any other piece goes
    /// through the splitter, and what is broken in it is reported here unless the first
    /// pass split it and reported it there (see `Usable::convert`).
    fn read(&mut self, log: &mut ProblemLog) -> Result<Option<Converted>, SourceError> {
        let path = self.path.clone();
        let io = move |source| SourceError::Io {
            path: path.clone(),
            source,
        };
        let read_already = self.read_already();
        let usable = Usable {
            stream: self.stream,
            path: &self.path,
            read_already,
            checked: &self.checked,
        };
        loop {
            if let Some(long) = &mut self.long {
                let (found, over) = long.next().map_err(&io)?;
                let read = found.and_then(|found| usable.convert(&long.splitter.doc, &found, log));
                if over {
                    let stop = long.splitter.at;
                    self.long = None;
                    if let Some(pieces) = &mut self.pieces {
                        pieces.resume_at(stop).map_err(&io)?;
                    }
                }
                match read {
                    Some(read) => return Ok(Some(read)),
                    None => continue,
                }
            }
            if let Some(splitter) = &mut self.split {
                let Some(found) = splitter.next_document().map_err(&io)? else {
                    self.split = None;
                    continue;
                };
                if let Some(converted) = usable.convert(&splitter.doc, &found, log) {
                    return Ok(Some(converted));
                }
                continue;
            }
            let pieces = match &mut self.pieces {
                Some(pieces) => pieces,
                None => {
                    let Some(run) = next_run(&mut self.runs, read_already) else {
                        return Ok(None);
                    };
                    let pieces = Pieces::open(&self.path, run.from, run.end).map_err(&io)?;
                    self.pieces.insert(pieces)
                }
            };
            let (start, len) = match pieces.next_piece().map_err(&io)? {
                None => {
                    self.pieces = None;
                    continue;
                }
                Some(Piece::Text { start, len }) => (start, len),
                Some(Piece::Long { start }) => {
                    let at = pieces.cursor_at(&self.path, start).map_err(&io)?;
                    self.long = Some(Long::open(&self.path, at, pieces.end()).map_err(&io)?);
                    continue;
                }
            };
            if start + len as u64 <= read_already {
                // Every document of it was read with the list, out of file order.
                continue;
            }
            let (lead, doc) = trim_whitespace(pieces.text(len));
            let piece_start = start;
            let start = start + lead as u64;
            // The splitter calls a longer document broken; one that starts before the
            // list's end shares its piece with listed ones: the splitter parts them.
            if doc.len() <= MAX_DOCUMENT_BYTES && start >= read_already {
                if let Some(event) = typed(self.stream, doc) {
                    return Ok(Some((event, start, start + doc.len() as u64)));
                }
            }
            let at = pieces.cursor_at(&self.path, piece_start).map_err(&io)?;
            let text = std::io::Cursor::new(pieces.text(len).to_vec());
            self.split = Some(Splitter::new(text, at));
        }
    }
}

#[cfg(test)]
impl StreamCursor {
    /// [`StreamCursor::read`] as it was before pieces: the splitter over each run whole.
    fn read_whole_runs(&mut self, log: &mut ProblemLog) -> Result<Option<Converted>, SourceError> {
        let io = |source| SourceError::Io {
            path: PathBuf::new(),
            source,
        };
        let read_already = self.read_already();
        let usable = Usable {
            stream: self.stream,
            path: &self.path,
            read_already,
            checked: &self.checked,
        };
        loop {
            let splitter = match &mut self.by_splitter {
                Some(splitter) => splitter,
                None => {
                    let Some(run) = next_run(&mut self.runs, read_already) else {
                        return Ok(None);
                    };
                    let mut file = File::open(&self.path).map_err(io)?;
                    file.seek(SeekFrom::Start(run.from.offset)).map_err(io)?;
                    let input = BufReader::new(file.take(run.end - run.from.offset));
                    self.by_splitter.insert(Splitter::new(input, run.from))
                }
            };
            let Some(found) = splitter.next_document().map_err(io)? else {
                self.by_splitter = None;
                continue;
            };
            if let Some(converted) = usable.convert(&splitter.doc, &found, log) {
                return Ok(Some(converted));
            }
        }
    }
}

/// The next of `runs` with documents after `read_already` (those before were read with
/// the list).
fn next_run(runs: &mut VecDeque<Run>, read_already: u64) -> Option<Run> {
    std::iter::from_fn(|| runs.pop_front()).find(|run| run.end > read_already)
}

/// A piece's document without the whitespace around it, and how much came before it.
fn trim_whitespace(text: &[u8]) -> (usize, &[u8]) {
    let lead = text
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(text.len());
    let rest = &text[lead..];
    let len = rest
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |last| last + 1);
    (lead, &rest[..len])
}

/// What the second pass makes of a document the splitter found in a stream's run.
struct Usable<'a> {
    stream: Stream,
    path: &'a Path,
    /// Documents before this offset were read with the list.
    read_already: u64,
    checked: &'a Checked,
}

impl Usable<'_> {
    /// The event of `found` (its bytes `doc`) with where it starts and ends; `None` when
    /// it is broken, was read with the list, or is unusable (then reported).
    ///
    /// Where the first pass split the file exactly, it reported the broken documents and
    /// those of no known stream, and put every other one in its stream's runs. Elsewhere
    /// it took a piece for one document of this stream from its first fields; this
    /// reports what it did not see, as it would have, and reads a document of another
    /// stream found there (two documents on one line, text between them) as that
    /// stream's, out of that stream's order (the engine orders events by version).
    fn convert(&self, doc: &[u8], found: &Found, log: &mut ProblemLog) -> Option<Converted> {
        if found.start < self.read_already {
            return None;
        }
        let checked = self.checked.contains(found.start);
        let stream = match (found.broken, checked) {
            (Some(_), true) => return None,
            (None, true) => Ok(self.stream),
            (Some(why), false) => Err(why.to_owned()),
            (None, false) => stream_of(doc).map(|(stream, _)| stream),
        }
        .map_err(|why| {
            log.push(Problem {
                path: self.path.to_owned(),
                position: found.position,
                message: why,
                skipped: true,
                bytes: found.end - found.start,
            })
        })
        .ok()?;
        convert(stream, self.path, doc, found, log).map(|event| (event, found.start, found.end))
    }
}

/// A stretch of text in which no line starts with `{` for longer than any document
/// (`Piece::Long`), read by a streaming splitter as the whole text would be. It reads on
/// until a document ends a piece's worth past where it started, so that pieces, which
/// take over again there, search each byte for a line start a bounded number of times
/// (stopping after one document would search the next 16 MiB again for each).
struct Long {
    splitter: Splitter<BufReader<std::io::Take<File>>>,
    /// Pieces may take over where a document ends at or past this offset.
    until: u64,
}

impl Long {
    /// The stretch from `at` to `end` (its run's or its file's end).
    fn open(path: &Path, at: Cursor, end: u64) -> std::io::Result<Self> {
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
    fn next(&mut self) -> std::io::Result<(Option<Found>, bool)> {
        let found = self.splitter.next_document()?;
        let over = found.is_none() || self.splitter.at.offset >= self.until;
        Ok((found, over))
    }
}

/// The event of a complete document of `stream` by the typed path, when it reads it and
/// the event is usable as it is.
fn typed(stream: Stream, doc: &[u8]) -> Option<Box<WatchEvent>> {
    if !kubectl_typed::reads(stream) {
        return None;
    }
    let event = kubectl_typed::convert(stream, doc)?;
    unversioned_problem(&event)
        .is_none()
        .then(|| Box::new(event))
}

/// A complete document of `stream` as an event, typed where it can be, else generically
/// (which names what is wrong); `None`, with the problem logged, when it is unusable.
fn convert(
    stream: Stream,
    path: &Path,
    doc: &[u8],
    found: &Found,
    log: &mut ProblemLog,
) -> Option<Box<WatchEvent>> {
    if let Some(event) = typed(stream, doc) {
        return Some(event);
    }
    let problem = |message: String, skipped: bool| Problem {
        path: path.to_owned(),
        position: found.position,
        message,
        skipped,
        bytes: found.end - found.start,
    };
    // The generic path, which says what is wrong. The first pass reported the documents
    // of no known stream, unless it took their stream from their first fields alone: then
    // they are reported here.
    let why = match classify(doc) {
        Ok(of) if of == stream => None,
        Ok(of) => Some(format!(
            "fields repeated with different values name two kinds ({} and {})",
            stream.kind(),
            of.kind()
        )),
        Err(why) => Some(why),
    };
    if let Some(why) = why {
        if peek_stream(doc) == Some(stream) {
            log.push(problem(why, true));
        }
        return None;
    }
    let converted = serde_json::from_slice::<serde_json::Value>(doc)
        .map_err(|e| format!("invalid JSON: {e}"))
        .and_then(|value| from_watch_document(&value).map_err(|e| e.to_string()));
    match converted {
        Ok(converted) => {
            if let Some(message) = unversioned_problem(&converted.event) {
                log.push(problem(message, true));
                return None;
            }
            if !converted.problems.is_empty() {
                log.push(problem(describe(&converted.problems), false));
            }
            Some(Box::new(converted.event))
        }
        Err(message) => {
            log.push(problem(message, true));
            None
        }
    }
}

/// The events of one kubectl recording, in resourceVersion order.
pub struct KubectlJsonSource {
    log: ProblemLog,
    cursors: Vec<StreamCursor>,
    heads: Vec<Option<(Box<WatchEvent>, u64)>>,
    started: bool,
    total_bytes: u64,
    progress: Arc<AtomicU64>,
}

impl KubectlJsonSource {
    /// Opens a recording: the first pass reads it through once.
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        Self::open_with(path, true)
    }

    /// [`KubectlJsonSource::open`]; without `trust_heads`, the first pass splits every
    /// piece exactly (the tests' reference).
    fn open_with(path: &Path, trust_heads: bool) -> Result<Self, SourceError> {
        let io = |source| SourceError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let total_bytes = file.metadata().map_err(io)?.len();
        let mut log = ProblemLog::new(path);
        let index = index(path, file, total_bytes, &mut log, trust_heads)?;
        let checked = Arc::new(index.checked);
        let cursors = index
            .streams
            .into_iter()
            .map(|(stream, runs, list)| {
                StreamCursor::new(stream, runs, list, path, Arc::clone(&checked))
            })
            .collect::<Vec<_>>();
        Ok(KubectlJsonSource {
            log,
            heads: cursors.iter().map(|_| None).collect(),
            cursors,
            started: false,
            total_bytes,
            progress: counter(0),
        })
    }

    /// Size of the text.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes handed on so far (approximate: events are reordered).
    pub fn progress(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.progress)
    }

    fn advance(&mut self, index: usize) {
        self.heads[index] = match self.cursors[index].next(&mut self.log) {
            Ok(next) => next,
            Err(error) => {
                // The file went away or became unreadable under us: say so, end the stream.
                self.log.push(Problem {
                    path: self.cursors[index].path.clone(),
                    position: Position::Text {
                        line: 0,
                        column: 0,
                        offset: 0,
                    },
                    message: super::avro_file::error_chain(&error),
                    skipped: true,
                    bytes: 0,
                });
                None
            }
        };
    }
}

fn describe(problems: &[FieldProblem]) -> String {
    let fields: Vec<String> = problems
        .iter()
        .map(|p| format!("{} ({})", p.path, p.problem))
        .collect();
    format!("unusable fields: {}", fields.join(", "))
}

impl Iterator for KubectlJsonSource {
    type Item = SourceItem;

    fn next(&mut self) -> Option<SourceItem> {
        if !self.started {
            self.started = true;
            for index in 0..self.cursors.len() {
                self.advance(index);
            }
        }
        loop {
            if let Some(item) = self.log.next_item() {
                return Some(item);
            }
            let next = self
                .heads
                .iter()
                .enumerate()
                .filter_map(|(i, h)| {
                    h.as_ref()
                        .map(|(e, _)| (e.resource_version_num.unwrap_or(i64::MAX), i))
                })
                .min();
            let Some((_, index)) = next else {
                return self.log.finish();
            };
            let Some((event, end)) = self.heads[index].take() else {
                continue;
            };
            bump(&self.progress, end);
            self.advance(index);
            return Some(SourceItem::Event(event));
        }
    }
}

#[cfg(test)]
mod tests {
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
    fn the_stream_is_named_by_the_first_fields_in_either_order() {
        let ip = br#"{"type": "ADDED", "object": {"apiVersion": "kubeovn.io/v1", "kind": "IP", "spec": {}}}"#;
        assert_eq!(peek_stream(ip), Some(Stream::Ip));
        let late_type = br#"{"object": {"metadata": {"a": ["}", {"b": "\"{"}]}, "kind": "Subnet", "apiVersion": "kubeovn.io/v1", "spec": {"x": 1}}, "type": "DELETED"}"#;
        assert_eq!(peek_stream(late_type), Some(Stream::Subnet));
        // Escapes, unknown types and kinds are left to the full classification.
        let escaped = br#"{"type": "ADD\u0045D", "object": {"apiVersion": "v1", "kind": "Pod"}}"#;
        assert_eq!(peek_stream(escaped), None);
        assert_eq!(classify(escaped), Ok(Stream::Pod));
        let error = br#"{"type": "ERROR", "object": {"kind": "Status", "code": 410}}"#;
        assert_eq!(peek_stream(error), None);
    }

    /// The problems among a source's items.
    fn problems_of(items: &[SourceItem]) -> Vec<&Problem> {
        items
            .iter()
            .filter_map(|i| match i {
                SourceItem::Problem(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_document_named_by_its_first_fields_but_broken_after_is_reported_once_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ips.json");
        let doc = |name: &str, rv: u64| {
            format!(
                "{{\n    \"type\": \"ADDED\",\n    \"object\": {{\"apiVersion\": \"kubeovn.io/v1\", \"kind\": \"IP\", \"metadata\": {{\"name\": {name}, \"resourceVersion\": \"{rv}\"}}}}\n}}\n"
            )
        };
        let text = doc("\"a\"", 5) + &doc("bare", 6) + &doc("\"c\"", 7);
        std::fs::write(&path, text).unwrap();
        let items: Vec<SourceItem> = KubectlJsonSource::open(&path).unwrap().collect();
        let events: Vec<_> = items
            .iter()
            .filter_map(|i| match i {
                SourceItem::Event(e) => Some(e.resource_version.as_str()),
                _ => None,
            })
            .collect();
        assert!(events.contains(&"5") && events.contains(&"7"), "{events:?}");
        let problems = problems_of(&items);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].skipped);
        assert!(
            problems[0].message.starts_with("invalid JSON"),
            "{}",
            problems[0].message
        );
        assert!(matches!(
            problems[0].position,
            Position::Text {
                line: 5,
                column: 1,
                ..
            }
        ));
    }

    /// An IP's watch document as kubectl prints it.
    fn ip_doc(event_type: &str, name: &str, rv: &str) -> String {
        format!(
            "{{\n    \"type\": \"{event_type}\",\n    \"object\": {{\n        \"apiVersion\": \"kubeovn.io/v1\",\n        \"kind\": \"IP\",\n        \"metadata\": {{\n            \"labels\": {{\"a\": \"}}\"}},\n            \"name\": \"{name}\",\n            \"resourceVersion\": \"{rv}\"\n        }}\n    }}\n}}\n"
        )
    }

    /// (type, version, name) of every event of a recording, and the most events any cursor
    /// held at once; `indexed: false` reads the initial lists whole and sorts them.
    fn read_recording(path: &Path, indexed: bool) -> (Vec<(EventType, String, String)>, usize) {
        let mut source = KubectlJsonSource::open(path).unwrap();
        if !indexed {
            for cursor in &mut source.cursors {
                cursor.list = None;
                cursor.in_list = true;
            }
        }
        let (mut events, mut most_held) = (Vec::new(), 0);
        while let Some(item) = source.next() {
            most_held = most_held.max(
                source
                    .cursors
                    .iter()
                    .map(|c| c.ready.len())
                    .max()
                    .unwrap_or(0),
            );
            if let SourceItem::Event(e) = item {
                let name = e
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default();
                events.push((e.event_type, e.resource_version, name));
            }
        }
        (events, most_held)
    }

    #[test]
    fn a_shuffled_initial_list_is_handed_on_in_version_order_without_being_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ips.json");
        let listed = [("c", "7"), ("a", "3"), ("d", "9"), ("b", "5"), ("e", "5")];
        let mut text: String = listed
            .iter()
            .map(|(n, rv)| ip_doc("ADDED", n, rv))
            .collect();
        text += &ip_doc("MODIFIED", "a", "12");
        text += &ip_doc("ADDED", "f", "13");
        std::fs::write(&path, &text).unwrap();
        let (events, most_held) = read_recording(&path, true);
        let got: Vec<(EventType, &str, &str)> = events
            .iter()
            .map(|(t, rv, n)| (*t, rv.as_str(), n.as_str()))
            .collect();
        use EventType::*;
        assert_eq!(
            got,
            [
                (SyncStart, "3", ""),
                (Added, "3", "a"),
                (Added, "5", "b"),
                (Added, "5", "e"),
                (Added, "7", "c"),
                (Added, "9", "d"),
                (SyncEnd, "9", ""),
                (Modified, "12", "a"),
                (Added, "13", "f"),
            ]
        );
        assert!(
            most_held <= 2,
            "the list was held: {most_held} events at once"
        );
        assert_eq!(
            read_recording(&path, false).0,
            events,
            "as the sort of the whole list"
        );
    }

    #[test]
    fn a_document_on_the_line_of_the_last_listed_one_is_read_after_the_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ips.json");
        // A list out of version order (read document by document), its last document
        // followed on the same line by the first watch event.
        let mut text = ip_doc("ADDED", "b", "5") + &ip_doc("ADDED", "a", "3");
        text.pop();
        text += &ip_doc("MODIFIED", "a", "12");
        std::fs::write(&path, &text).unwrap();
        let (events, _) = read_recording(&path, true);
        let got: Vec<(EventType, &str)> =
            events.iter().map(|(t, rv, _)| (*t, rv.as_str())).collect();
        use EventType::*;
        assert_eq!(
            got,
            [
                (SyncStart, "3"),
                (Added, "3"),
                (Added, "5"),
                (SyncEnd, "5"),
                (Modified, "12")
            ]
        );
        assert_eq!(
            read_recording(&path, false).0,
            events,
            "as the sort of the whole list"
        );
    }

    #[test]
    fn initial_lists_in_any_order_read_as_the_sort_of_the_whole_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recording.json");
        // Permutations of a list, a watch after it, and a second file of the same kind
        // concatenated (a second list run); in some, a version the first fields cannot
        // give (an escaped key), so the list is read whole.
        for seed in 0..24u64 {
            let mut rvs: Vec<u64> = (1..=12).map(|i| i * 10 % 37).collect();
            let mut state = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            for i in (1..rvs.len()).rev() {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                rvs.swap(i, (state >> 33) as usize % (i + 1));
            }
            let mut text: String = rvs
                .iter()
                .enumerate()
                .map(|(i, rv)| ip_doc("ADDED", &format!("ip-{i}"), &rv.to_string()))
                .collect();
            if seed % 4 == 3 {
                text = text.replacen("\"resourceVersion\"", "\"resource\\u0056ersion\"", 1);
            }
            text += &ip_doc("MODIFIED", "ip-1", "100");
            text += &ip_doc("DELETED", "ip-2", "101");
            text += "{\"type\": \"ADDED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"p\", \"namespace\": \"n\", \"resourceVersion\": \"50\"}}}\n";
            text += &ip_doc("ADDED", "ip-late", "4");
            std::fs::write(&path, &text).unwrap();
            let (indexed, most_held) = read_recording(&path, true);
            let (whole, _) = read_recording(&path, false);
            assert_eq!(indexed, whole, "seed {seed}");
            assert_eq!(
                indexed
                    .iter()
                    .filter(|e| e.0 == EventType::SyncStart)
                    .count(),
                2
            );
            if seed % 4 != 3 {
                assert!(most_held <= 2, "seed {seed}: {most_held} held");
            }
        }
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

    #[test]
    fn a_document_longer_than_the_limit_is_reported_once_and_the_run_goes_on_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ips.json");
        let big = format!(
            "{{\"type\": \"MODIFIED\", \"object\": {{\"apiVersion\": \"kubeovn.io/v1\", \"kind\": \"IP\", \"metadata\": {{\"name\": \"big\", \"resourceVersion\": \"6\"}}, \"pad\": \"{}\"}}}}\n",
            "x".repeat(MAX_DOCUMENT_BYTES + (1 << 20))
        );
        let text = ip_doc("ADDED", "a", "5") + &big + &ip_doc("MODIFIED", "a", "7");
        std::fs::write(&path, &text).unwrap();
        let items: Vec<SourceItem> = KubectlJsonSource::open(&path).unwrap().collect();
        let versions: Vec<&str> = items
            .iter()
            .filter_map(|i| match i {
                SourceItem::Event(e) if e.event_type.carries_object() => {
                    Some(e.resource_version.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(versions, ["5", "7"]);
        let problems = problems_of(&items);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].message, "document larger than 16 MiB");
        // After the first document's 12 lines.
        assert!(matches!(
            problems[0].position,
            Position::Text {
                line: 13,
                column: 1,
                ..
            }
        ));
    }

    /// Pieces of recordings: documents of two kinds, ADDED (lists out of order) and not,
    /// pretty and compact, some on one line, and what breaks them.
    fn recording_piece() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let doc = (
            prop::sample::select(vec!["ADDED", "ADDED", "MODIFIED", "DELETED"]),
            prop::sample::select(vec!["IP", "Pod"]),
            0u32..40,
            0u8..3,
        )
            .prop_map(|(event_type, kind, rv, layout)| {
                let api = if kind == "IP" { "kubeovn.io/v1" } else { "v1" };
                let doc = format!(
                    "{{\"type\": \"{event_type}\", \"object\": {{\"apiVersion\": \"{api}\", \"kind\": \"{kind}\", \"metadata\": {{\"name\": \"n{rv}\", \"namespace\": \"ns\", \"resourceVersion\": \"{rv}\"}}, \"spec\": {{\"subnet\": \"s\"}}}}}}"
                );
                match layout {
                    0 => {
                        let value: serde_json::Value = serde_json::from_str(&doc).unwrap();
                        serde_json::to_string_pretty(&value).unwrap() + "\n"
                    }
                    1 => doc + "\n",
                    // The next document follows on the same line.
                    _ => doc,
                }
            });
        let odd = prop::sample::select(vec![
            "{\"type\": \"ADDED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"cut\n",
            "{\"type\": \"MODIFIED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": bare}}}\n",
            "{\"type\": \"MODIFIED\", \"object\": {\"apiVersion\": \"kubeovn.io/v1\", \"kind\": \"IP\", \"metadata\": {\"name\": \"x\", \"resourceVersion\": \"7\"}, \"spec\": {\"subnet\": 5}}}\n",
            "error: watch closed\n",
            "{\"a\":\n{\n\"b\": 1}}\n",
            "{\"esc\": \"ends with \\\n",
            "\u{c}\n",
            // Broken after first fields that name a stream, yet ending in a brace: what the
            // first pass takes for a document without splitting it.
            "{\"type\": \"MODIFIED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"t\", \"resourceVersion\": \"8\"}}\n",
            "{\"type\": \"ADDED\", \"object\": {\"apiVersion\": \"kubeovn.io/v1\", \"kind\": \"IP\", \"metadata\": {\"name\": \"t\", \"resourceVersion\": \"9\"}}\n",
            "{\"type\": \"MODIFIED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"x\", \"namespace\": \"ns\", \"resourceVersion\": \"11\"}}}}\n",
        ])
        .prop_map(str::to_owned);
        prop_oneof![6 => doc, 1 => odd]
    }

    /// Every item of a recording, in order, read in pieces or each run whole.
    fn items_of(path: &Path, whole_runs: bool) -> Vec<String> {
        let mut source = KubectlJsonSource::open(path).unwrap();
        for cursor in &mut source.cursors {
            cursor.whole_runs = whole_runs;
        }
        source.map(|item| format!("{item:?}")).collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Read in pieces, a recording gives the items, in the order, that reading each run
        /// whole with the splitter gave: events, lists and their markers, problems with
        /// their places.
        #[test]
        fn runs_read_in_pieces_give_what_runs_read_whole_gave(
            pieces in proptest::collection::vec(recording_piece(), 0..30)
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("recording.json");
            let text = pieces.concat();
            std::fs::write(&path, &text).unwrap();
            proptest::prop_assert_eq!(items_of(&path, false), items_of(&path, true), "{:?}", text);
        }

        /// A first pass that takes pieces for documents by their first fields gives the
        /// events, in the order, that one splitting every piece gave, and the same problems
        /// at the same places (reported later: by the second pass, when it reaches them).
        #[test]
        fn a_first_pass_trusting_first_fields_reads_as_one_splitting_everything(
            pieces in proptest::collection::vec(recording_piece(), 0..30)
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("recording.json");
            let text = pieces.concat();
            std::fs::write(&path, &text).unwrap();
            let (trusting, exact) = (read_all(&path, true), read_all(&path, false));
            proptest::prop_assert_eq!(trusting, exact, "{:?}", text);
        }
    }

    /// Every event of a recording in order, and its problems sorted by place.
    fn read_all(path: &Path, trust_heads: bool) -> (Vec<String>, Vec<String>) {
        let (mut events, mut problems) = (Vec::new(), Vec::new());
        for item in KubectlJsonSource::open_with(path, trust_heads).unwrap() {
            match item {
                SourceItem::Problem(p) => problems.push((p.position, format!("{p:?}"))),
                other => events.push(format!("{other:?}")),
            }
        }
        problems.sort_by_key(|(position, _)| match position {
            Position::Text { offset, .. } => *offset,
            _ => u64::MAX,
        });
        (events, problems.into_iter().map(|(_, p)| p).collect())
    }

    fn pod_doc(event_type: &str, name: &str, rv: &str) -> String {
        format!(
            "{{\"type\": \"{event_type}\", \"object\": {{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"{name}\", \"namespace\": \"ns\", \"resourceVersion\": \"{rv}\"}}}}}}"
        )
    }

    #[test]
    fn initial_lists_and_broken_documents_read_as_with_a_first_pass_splitting_everything() {
        let p = |t: &str, n: &str, rv: &str| pod_doc(t, n, rv);
        let broken_listed = |rv: &str| {
            format!("{{\"type\": \"ADDED\", \"object\": {{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"t\"{rv}}}}}\n")
        };
        let unversioned = "{\"type\": \"MODIFIED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"u\", \"namespace\": \"ns\"}}}\n";
        let recordings = [
            // Two documents of a kind with text between them, in its initial list.
            format!("{}\n{}, {}\n", p("ADDED", "a", "5"), p("ADDED", "b", "9"), p("MODIFIED", "b", "10")),
            format!("{}\n{}, {}\n", p("ADDED", "a", "5"), p("ADDED", "b", "9"), p("ADDED", "c", "3")),
            format!(
                "{}\n{}], {}\n{}\n",
                p("ADDED", "a", "5"),
                p("ADDED", "b", "3"),
                p("MODIFIED", "b", "10"),
                p("ADDED", "c", "4")
            ),
            // A broken document ending in a brace, in an initial list.
            format!("{}\n{}{unversioned}{}\n", p("ADDED", "a", "5"), broken_listed(""), p("ADDED", "c", "3")),
            format!("{}{unversioned}{}\n", broken_listed(", \"resourceVersion\": \"9\""), p("ADDED", "c", "3")),
            // ... of a kind seen nowhere before, with versions equal across kinds after it.
            format!(
                "{{\"type\": \"ADDED\", \"object\": {{\"apiVersion\": \"kubeovn.io/v1\", \"kind\": \"IP\", \"metadata\": {{\"name\": \"t\", \"resourceVersion\": \"9\"}}}}\n{}\n{}",
                p("MODIFIED", "p", "5"),
                ip_doc("MODIFIED", "ip", "5")
            ),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recording.json");
        for text in recordings {
            std::fs::write(&path, &text).unwrap();
            assert_eq!(read_all(&path, true), read_all(&path, false), "{text}");
        }
    }

    #[test]
    fn a_stretch_longer_than_a_piece_without_a_line_starting_with_a_brace_is_read_through_once() {
        // Documents indented by a space: no line starts with `{` for 17 MiB. Reading them
        // one per streaming splitter, each searching the next 16 MiB for a line start
        // again, took minutes.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pods.json");
        let pad = "x".repeat(900);
        let mut text = p_line("ADDED", "a", 1, "") + "\n";
        let mut rv = 2;
        while text.len() < pieces::PIECE_LIMIT + (1 << 20) {
            text += " ";
            text += &p_line("MODIFIED", "a", rv, &pad);
            text += "\n";
            rv += 1;
        }
        text += &p_line("MODIFIED", "a", rv, "");
        std::fs::write(&path, &text).unwrap();
        let (events, problems) = read_all(&path, true);
        assert!(problems.is_empty(), "{problems:?}");
        // SYNC_START and SYNC_END around the first.
        assert_eq!(events.len() as u64, rv + 2);
        assert_eq!((events, problems), read_all(&path, false));
    }

    /// A Pod's watch document on one line, with `pad` in an annotation.
    fn p_line(event_type: &str, name: &str, rv: u64, pad: &str) -> String {
        format!(
            "{{\"type\": \"{event_type}\", \"object\": {{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"{name}\", \"namespace\": \"ns\", \"resourceVersion\": \"{rv}\", \"annotations\": {{\"pad\": \"{pad}\"}}}}}}}}"
        )
    }

    #[test]
    fn a_document_taken_on_its_first_fields_but_truncated_is_reported_once_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pods.json");
        let mut cut = pod_doc("MODIFIED", "b", "6");
        cut.pop();
        let text = [
            pod_doc("ADDED", "a", "4"),
            pod_doc("MODIFIED", "a", "5"),
            cut,
            pod_doc("MODIFIED", "a", "7"),
        ]
        .join("\n");
        std::fs::write(&path, &text).unwrap();
        let (events, problems) = read_all(&path, true);
        assert_eq!(events.len(), 5, "SYNC_START, 4, SYNC_END, 5, 7: {events:?}");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("document is truncated"),
            "{}",
            problems[0]
        );
        assert!(
            problems[0].contains("line: 3, column: 1"),
            "{}",
            problems[0]
        );
        assert_eq!((events, problems), read_all(&path, false));
    }

    #[test]
    fn documents_of_two_kinds_with_text_between_them_on_one_line_are_both_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recording.json");
        // `]` and `,` may follow a closing brace inside a document: the first pass cannot
        // tell this piece from one document without reading it through.
        let text = [
            pod_doc("ADDED", "a", "4"),
            pod_doc("MODIFIED", "a", "5"),
            pod_doc("MODIFIED", "a", "6") + "], " + &ip_doc("MODIFIED", "ip", "7"),
            pod_doc("MODIFIED", "a", "8"),
        ]
        .join("\n");
        std::fs::write(&path, &text).unwrap();
        let items: Vec<SourceItem> = KubectlJsonSource::open(&path).unwrap().collect();
        let modified: Vec<(Stream, &str)> = items
            .iter()
            .filter_map(|i| match i {
                SourceItem::Event(e) if e.event_type == EventType::Modified => {
                    Some((e.stream, e.resource_version.as_str()))
                }
                _ => None,
            })
            .collect();
        use Stream::*;
        assert_eq!(modified, [(Pod, "5"), (Pod, "6"), (Ip, "7"), (Pod, "8")]);
        let problems: Vec<String> = problems_of(&items)
            .iter()
            .map(|p| format!("{p:?}"))
            .collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("text that is not a JSON object"),
            "{}",
            problems[0]
        );
    }
}
