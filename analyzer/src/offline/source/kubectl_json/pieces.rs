//! Text read in pieces cut where a line starts with `{`, so that neither pass splits
//! every document byte by byte: the first pass takes most pieces for one document on
//! their first fields, and the second reads each run of a kind back piece by piece.
//!
//! The splitter starts a new document at every `{` that begins a line, whatever it was
//! reading, so its view of the text after such a brace does not depend on anything
//! before it. A piece (the text from one such brace to the next) is therefore read by
//! the splitter exactly as the whole text would be; and when a piece parses as one JSON
//! object followed by whitespace, which is what kubectl prints, the splitter would find
//! exactly that document in it. The second pass tries that parse first and hands the
//! piece to the splitter only when it fails (see `StreamCursor::read`).
//!
//! Lines are not counted as pieces go by: a position is needed only for a problem, which
//! is rare, and [`Pieces::cursor_at`] counts the newlines up to it then, from the last
//! place whose line is known.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use memchr::memmem;

use super::splitter::Cursor;
use super::MAX_DOCUMENT_BYTES;

/// Bytes read from the file at a time.
const CHUNK: usize = 256 * 1024;

/// The most text a piece may hold before the reader gives up finding its end and lets
/// the splitter stream it (a document of at most [`MAX_DOCUMENT_BYTES`] and some space).
pub(super) const PIECE_LIMIT: usize = MAX_DOCUMENT_BYTES + CHUNK;

/// What comes next in a run.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Piece {
    /// The text from `start` up to the next line that starts with `{` (or the run's end),
    /// `len` bytes ([`Pieces::text`]).
    Text { start: u64, len: usize },
    /// No line starts with `{` within [`PIECE_LIMIT`] bytes of `start`: the text from
    /// there is left to a streaming splitter, and the reader resumes where it stops
    /// ([`Pieces::resume_at`]).
    Long { start: u64 },
}

/// One run's text, read in chunks and handed on in pieces.
pub(super) struct Pieces {
    file: File,
    /// The text from file offset `base` on.
    buffer: Vec<u8>,
    base: u64,
    /// The next piece starts at `buffer[next..]`.
    next: usize,
    /// Where the run ends.
    end: u64,
    /// The last place whose line is known.
    known: Cursor,
    /// The search for a line that starts with `{`, built once (building it costs about
    /// as much as searching one piece).
    line_brace: memmem::Finder<'static>,
}

impl Pieces {
    /// The run from `from` (a document's start, whose line the first pass knew) to `end`.
    pub fn open(path: &Path, from: Cursor, end: u64) -> io::Result<Self> {
        Self::of(File::open(path)?, from, end)
    }

    /// [`Pieces::open`] of a file already open.
    pub fn of(mut file: File, from: Cursor, end: u64) -> io::Result<Self> {
        file.seek(SeekFrom::Start(from.offset))?;
        Ok(Pieces {
            file,
            buffer: Vec::new(),
            base: from.offset,
            next: 0,
            end,
            known: from,
            line_brace: memmem::Finder::new(b"\n{"),
        })
    }

    /// Where the run ends.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The text of the piece handed on last.
    pub fn text(&self, len: usize) -> &[u8] {
        &self.buffer[self.next - len..self.next]
    }

    /// File offset of the end of what was read.
    fn read_to(&self) -> u64 {
        self.base + self.buffer.len() as u64
    }

    /// Reads the next chunk of the run after what the buffer holds, dropping the pieces
    /// already handed on; false at the run's end.
    fn read_more(&mut self) -> io::Result<bool> {
        let left = self.end.saturating_sub(self.read_to());
        if left == 0 {
            return Ok(false);
        }
        if self.next > 0 {
            self.buffer.drain(..self.next);
            self.base += self.next as u64;
            self.next = 0;
        }
        let wanted = CHUNK.min(usize::try_from(left).unwrap_or(CHUNK));
        let had = self.buffer.len();
        self.buffer.resize(had + wanted, 0);
        let mut filled = 0;
        while filled < wanted {
            match self.file.read(&mut self.buffer[had + filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buffer.truncate(had);
                    return Err(e);
                }
            }
        }
        self.buffer.truncate(had + filled);
        if filled == 0 {
            // The file is shorter than the first pass found it: it changed under us.
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file became shorter while it was read",
            ));
        }
        Ok(true)
    }

    /// The next piece of the run, or `None` at its end.
    pub fn next_piece(&mut self) -> io::Result<Option<Piece>> {
        // Where in `buffer[next..]` the search for the next line-starting brace goes on.
        let mut searched = 0;
        loop {
            let rest = &self.buffer[self.next..];
            // The piece's own first byte may be a line-starting brace: look after it.
            let from = searched.max(1).min(rest.len());
            let cut = self.line_brace.find(&rest[from..]).map(|at| from + at + 1);
            if let Some(len) = cut.filter(|len| *len <= PIECE_LIMIT) {
                return Ok(Some(self.take(len)));
            }
            if cut.is_some() || rest.len() > PIECE_LIMIT {
                let start = self.base + self.next as u64;
                return Ok(Some(Piece::Long { start }));
            }
            // The last byte may be the newline of a brace not read yet.
            searched = rest.len().saturating_sub(1);
            if !self.read_more()? {
                let len = self.buffer.len() - self.next;
                if len == 0 {
                    return Ok(None);
                }
                return Ok(Some(self.take(len)));
            }
            // `read_more` moved the piece to the front: `searched` still counts from it.
        }
    }

    fn take(&mut self, len: usize) -> Piece {
        let start = self.base + self.next as u64;
        self.next += len;
        Piece::Text { start, len }
    }

    /// Goes on from `at` (where a streaming splitter stopped, within the run, with the
    /// line it is on).
    pub fn resume_at(&mut self, at: Cursor) -> io::Result<()> {
        self.buffer.clear();
        self.next = 0;
        self.base = at.offset.min(self.end);
        if at.offset >= self.known.offset {
            self.known = at;
        }
        self.file.seek(SeekFrom::Start(self.base))?;
        Ok(())
    }

    /// The cursor at `offset` (at or after every place asked for before in this run),
    /// its line counted from the last one known.
    pub fn cursor_at(&mut self, path: &Path, offset: u64) -> io::Result<Cursor> {
        let mut cursor = self.known;
        if offset < cursor.offset {
            // Not expected (offsets only grow): count from the start of the file.
            cursor = Cursor::default();
        }
        // What the buffer holds is counted there; what it dropped is read again.
        if cursor.offset < self.base {
            let mut file = File::open(path)?;
            file.seek(SeekFrom::Start(cursor.offset))?;
            let upto = offset.min(self.base);
            let mut chunk = vec![0; CHUNK];
            while cursor.offset < upto {
                let want = usize::try_from(upto - cursor.offset)
                    .unwrap_or(CHUNK)
                    .min(CHUNK);
                let n = file.read(&mut chunk[..want])?;
                if n == 0 {
                    break;
                }
                count_lines(&mut cursor, &chunk[..n]);
            }
        }
        if cursor.offset < offset {
            let from = usize::try_from(cursor.offset - self.base).unwrap_or(usize::MAX);
            let to = usize::try_from(offset - self.base).unwrap_or(usize::MAX);
            if let Some(text) = self.buffer.get(from..to.min(self.buffer.len())) {
                count_lines(&mut cursor, text);
            }
        }
        cursor.offset = offset;
        self.known = cursor;
        Ok(cursor)
    }
}

/// Moves `cursor` over `text`, which starts at its offset.
fn count_lines(cursor: &mut Cursor, text: &[u8]) {
    for at in memchr::memchr_iter(b'\n', text) {
        cursor.line += 1;
        cursor.line_start = cursor.offset + at as u64 + 1;
    }
    cursor.offset += text.len() as u64;
}

/// A piece's document without the whitespace around it, and how much came before it.
pub(super) fn trim_whitespace(text: &[u8]) -> (usize, &[u8]) {
    let rest = text.trim_ascii_start();
    (text.len() - rest.len(), rest.trim_ascii_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces_of(text: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn all(path: &Path, from: u64, end: u64) -> Vec<(u64, String)> {
        let start = Cursor {
            offset: from,
            ..Cursor::default()
        };
        let mut pieces = Pieces::open(path, start, end).unwrap();
        let mut got = Vec::new();
        while let Some(piece) = pieces.next_piece().unwrap() {
            match piece {
                Piece::Text { start, len } => {
                    got.push((start, String::from_utf8(pieces.text(len).to_vec()).unwrap()))
                }
                Piece::Long { .. } => panic!("no piece here is long"),
            }
        }
        got
    }

    #[test]
    fn a_run_is_cut_where_a_line_starts_with_a_brace_and_nowhere_else() {
        let text = "{\"a\": {\n  \"b\": 1\n}}\n{\"c\": 2}{\"d\": 3}\n  {\"e\": 4}\n{\"f\": 5}";
        let (_dir, path) = pieces_of(text.as_bytes());
        let (c, f) = (text.find("{\"c\"").unwrap(), text.find("{\"f\"").unwrap());
        let got = all(&path, 0, text.len() as u64);
        assert_eq!(
            got,
            [
                (0, text[..c].to_owned()),
                (c as u64, "{\"c\": 2}{\"d\": 3}\n  {\"e\": 4}\n".to_owned()),
                (f as u64, "{\"f\": 5}".to_owned()),
            ]
        );
        assert_eq!(text[..c], *"{\"a\": {\n  \"b\": 1\n}}\n");
        // A run that starts within the file and ends before its end.
        let e_end = text.find('4').unwrap() + 2;
        assert_eq!(
            all(&path, c as u64, e_end as u64),
            [(c as u64, text[c..e_end].to_owned())]
        );
    }

    #[test]
    fn pieces_are_whole_across_reads() {
        let doc = format!("{{\"pad\": \"{}\"}}\n", "x".repeat(CHUNK / 3));
        let text = doc.repeat(10);
        let (_dir, path) = pieces_of(text.as_bytes());
        let got = all(&path, 0, text.len() as u64);
        assert_eq!(got.len(), 10);
        for (i, (start, piece)) in got.iter().enumerate() {
            assert_eq!(*start, (i * doc.len()) as u64);
            assert_eq!(*piece, doc);
        }
    }

    #[test]
    fn a_piece_longer_than_any_document_is_left_to_the_splitter() {
        let text = "{\"a\": \"".to_owned() + &"x".repeat(PIECE_LIMIT + 10) + "\"}\n{\"b\": 1}\n";
        let (_dir, path) = pieces_of(text.as_bytes());
        let mut pieces = Pieces::open(&path, Cursor::default(), text.len() as u64).unwrap();
        assert_eq!(pieces.next_piece().unwrap(), Some(Piece::Long { start: 0 }));
        let b = text.find("{\"b\"").unwrap() as u64;
        let at = pieces.cursor_at(&path, b).unwrap();
        pieces.resume_at(at).unwrap();
        let len = b"{\"b\": 1}\n".len();
        assert_eq!(
            pieces.next_piece().unwrap(),
            Some(Piece::Text { start: b, len })
        );
        assert_eq!(pieces.text(len), b"{\"b\": 1}\n");
        assert_eq!(pieces.next_piece().unwrap(), None);
    }

    #[test]
    fn a_cursor_is_counted_whether_its_text_was_dropped_or_is_held() {
        let line = format!("{{\"pad\": \"{}\"}}\n", "x".repeat(1000));
        let text = line.repeat(CHUNK / 500);
        let (_dir, path) = pieces_of(text.as_bytes());
        let mut pieces = Pieces::open(&path, Cursor::default(), text.len() as u64).unwrap();
        let mut starts = Vec::new();
        while let Some(Piece::Text { start, .. }) = pieces.next_piece().unwrap() {
            starts.push(start);
            if starts.len() % 97 == 0 {
                let cursor = pieces.cursor_at(&path, start).unwrap();
                assert_eq!(cursor.line, starts.len() as u64, "at {start}");
                assert_eq!(cursor.line_start, start);
            }
        }
        assert_eq!(starts.len(), CHUNK / 500);
    }

    /// Fragments of recordings as they come: whole documents pretty and compact, a brace
    /// opening a line inside a document, truncated ones, text between them, escapes,
    /// a backslash before a newline, form feeds, top-level arrays.
    fn fragment() -> impl proptest::strategy::Strategy<Value = &'static str> {
        proptest::sample::select(vec![
            "{\n    \"type\": \"ADDED\",\n    \"object\": {\"a\": \"}{\"}\n}\n",
            "{\"type\":\"MODIFIED\",\"object\":{\"b\":[1,{\"c\":\"\\\"{\"}]}}\n",
            "{\"x\": 1}{\"y\": 2}",
            "{\"a\":\n{\n\"b\": 1}}\n",
            "{\"cut\": \"abc\n",
            "{\"cut\": {\"deeper\": [\n",
            "{\"esc\": \"ends with \\\n",
            "{\"bare\": word}\n",
            "error: watch closed\n",
            "\n",
            "  ",
            "\u{c}",
            "[1, {\"in\": \"array\"}]\n",
            "}\n",
            "\"quote\n",
            "{\"ok\": \"\u{e9}\"}\r\n",
            "{\"\": \"\"}\n",
            "{\"\\\\\": 1}\n",
        ])
    }

    fn text_of(fragments: &[&str]) -> String {
        fragments.concat()
    }

    /// Every piece of `text`, as (start, bytes).
    fn cut(path: &Path, len: u64) -> Vec<(u64, Vec<u8>)> {
        let mut pieces = Pieces::open(path, Cursor::default(), len).unwrap();
        let mut got = Vec::new();
        while let Some(piece) = pieces.next_piece().unwrap() {
            let Piece::Text { start, len } = piece else {
                panic!("no piece here is long");
            };
            got.push((start, pieces.text(len).to_vec()));
        }
        got
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// The splitter finds the same documents, broken or whole, at the same places
        /// and lines, in the pieces one by one as in the whole text: what the second pass
        /// relies on to read a piece alone.
        #[test]
        fn the_splitter_reads_the_pieces_one_by_one_as_the_whole_text(
            fragments in proptest::collection::vec(fragment(), 0..24)
        ) {
            let text = text_of(&fragments);
            let (_dir, path) = pieces_of(text.as_bytes());
            let whole = super::super::split_documents(text.as_bytes());
            let mut pieces = Pieces::open(&path, Cursor::default(), text.len() as u64).unwrap();
            let mut by_piece = Vec::new();
            while let Some(Piece::Text { start, len }) = pieces.next_piece().unwrap() {
                let at = pieces.cursor_at(&path, start).unwrap();
                let mut splitter = super::super::splitter::Splitter::new(pieces.text(len), at);
                while let Some(found) = splitter.next_document().unwrap() {
                    by_piece.push(super::super::splitter::Document {
                        position: found.position,
                        range: found.start as usize..found.end as usize,
                        broken: found.broken,
                    });
                }
            }
            proptest::prop_assert_eq!(by_piece, whole, "{:?}", text);
        }

        /// A piece that parses as one JSON object, whitespace around it, is one whole
        /// document to the splitter, exactly that object: what lets the second pass take
        /// it without the splitter.
        #[test]
        fn a_piece_that_parses_as_one_object_is_that_document(
            fragments in proptest::collection::vec(fragment(), 0..24)
        ) {
            let text = text_of(&fragments);
            let (_dir, path) = pieces_of(text.as_bytes());
            for (start, piece) in cut(&path, text.len() as u64) {
                let (lead, doc) = super::trim_whitespace(&piece);
                let parses = doc.first() == Some(&b'{')
                    && serde_json::from_slice::<serde::de::IgnoredAny>(doc).is_ok();
                if !parses {
                    continue;
                }
                let found = super::super::split_documents(&piece);
                proptest::prop_assert_eq!(found.len(), 1, "{:?}", String::from_utf8_lossy(&piece));
                proptest::prop_assert_eq!(found[0].broken, None);
                proptest::prop_assert_eq!(found[0].range.clone(), lead..lead + doc.len());
                let _ = start;
            }
        }
    }
}
