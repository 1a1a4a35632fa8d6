//! The first pass: cuts a recording into pieces where a line starts with `{`, notes where
//! each kind's documents lie (`Run`s) and indexes each kind's initial list; past a kind's
//! initial list it takes a piece that looks like one object for one document of the kind
//! its first fields name (`Index::trusted`), and splits every other piece exactly,
//! reporting the broken documents (`Checked` says where).

use std::fs::File;
use std::path::Path;

use ipaudit_schemas::Stream;

use super::head::{peek_head, peek_resource_version, stream_of};
use super::list::ListIndex;
use super::pieces::{trim_whitespace, Piece, Pieces};
use super::splitter::{Cursor, Found, Long, Splitter};
use super::{ProblemLog, SourceError, MAX_DOCUMENT_BYTES};

/// The byte ranges of one stream's documents, in file order.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    pub(super) from: Cursor,
    pub(super) end: u64,
}

/// The pieces the first pass split exactly, as sorted, disjoint byte ranges: its
/// splitter read them and reported what was broken in them. The first pass took every
/// other piece, without reading it through, for one document of the stream its first
/// fields name; the second pass, which parses every piece anyway, reports what is broken
/// in those (see `second_pass::Usable::convert`).
#[derive(Debug, Default)]
pub(super) struct Checked(Vec<std::ops::Range<u64>>);

impl Checked {
    fn push(&mut self, range: std::ops::Range<u64>) {
        match self.0.last_mut() {
            Some(last) if last.end == range.start => last.end = range.end,
            _ => self.0.push(range),
        }
    }

    /// Whether the byte at `offset` lies in a piece the first pass split exactly.
    pub(super) fn contains(&self, offset: u64) -> bool {
        let after = self.0.partition_point(|r| r.start <= offset);
        after > 0 && self.0[after - 1].end > offset
    }
}

/// What the first pass learnt of a file: each stream's runs and initial list, and where
/// it split exactly.
#[derive(Debug, Default)]
pub(super) struct Index {
    pub(super) streams: Vec<(Stream, Vec<Run>, ListIndex)>,
    /// The stream of the last document noted.
    last: Option<Stream>,
    pub(super) checked: Checked,
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
        log.push(found.problem(path, why, true));
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
pub(super) fn index(
    path: &Path,
    file: File,
    file_len: u64,
    log: &mut ProblemLog,
    trust_heads: bool,
) -> Result<Index, SourceError> {
    let io = SourceError::io(path);
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
