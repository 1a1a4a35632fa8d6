//! The second pass: one cursor per kind reads its runs again, piece by piece, typed
//! (`kubectl_typed`) where it can; a piece the typed path does not take is split exactly
//! and read generically where it must, and what the first pass did not split is reported
//! then (`Usable`). Its initial list is read in version order (`ListPlan`).

use std::collections::VecDeque;
use std::fs::File;
#[cfg(test)]
use std::io::BufReader;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ipaudit_schemas::convert::from_watch_document;
use ipaudit_schemas::kubernetes::FieldProblem;
use ipaudit_schemas::{EventType, Stream, WatchEvent};

use super::first_pass::{Checked, Run};
use super::head::{classify, peek_stream, stream_of};
use super::list::{marker_at, ListIndex, ListPlan};
use super::pieces::{trim_whitespace, Piece, Pieces};
use super::splitter::{found, Found, Long, Splitter};
use super::{kubectl_typed, unversioned_problem, ProblemLog, SourceError, MAX_DOCUMENT_BYTES};

/// A document's event, with where the document starts and ends.
pub(super) type Converted = (Box<WatchEvent>, u64, u64);

/// One stream's events, in order: its initial list in version order and framed, then the
/// rest.
pub(super) struct StreamCursor {
    pub(super) stream: Stream,
    pub(super) runs: VecDeque<Run>,
    /// The run being read.
    pub(super) pieces: Option<Pieces>,
    /// A stretch without a line that starts with `{`, being read.
    pub(super) long: Option<Long>,
    /// The splitter reading a piece that the typed path did not take, a document a call
    /// (as it read the whole run before pieces: problems come in the same order).
    pub(super) split: Option<Splitter<std::io::Cursor<Vec<u8>>>>,
    pub(super) path: PathBuf,
    /// Where the first pass split the file exactly.
    pub(super) checked: Arc<Checked>,
    /// Events ready, in order.
    pub(super) ready: VecDeque<(Box<WatchEvent>, u64)>,
    /// The indexed initial list, read without holding it.
    pub(super) list: Option<ListPlan>,
    /// Still reading the leading run of ADDED events to sort them (no index of the list).
    pub(super) in_list: bool,
    pub(super) done: bool,
    /// Tests: read each run with the splitter whole, as before pieces.
    #[cfg(test)]
    pub(super) by_splitter: Option<Splitter<BufReader<std::io::Take<File>>>>,
    #[cfg(test)]
    pub(super) whole_runs: bool,
}

impl StreamCursor {
    pub(super) fn new(
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
    pub(super) fn next(
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
    pub(super) fn hand_listed(&mut self, (event, end): (Box<WatchEvent>, u64)) {
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
    pub(super) fn end_indexed_list(&mut self) {
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
    pub(super) fn end_list(&mut self) {
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
    pub(super) fn read_listed(
        &mut self,
        log: &mut ProblemLog,
    ) -> Result<Option<(Box<WatchEvent>, u64)>, SourceError> {
        let Some(list) = &mut self.list else {
            return Ok(None);
        };
        if list.in_file_order || list.ended {
            return Ok(None);
        }
        let io = SourceError::io(&self.path);
        while let Some(doc) = list.docs.get(list.next).copied() {
            list.next += 1;
            let file = match &mut list.file {
                Some(file) => file,
                None => list.file.insert(File::open(&self.path).map_err(io)?),
            };
            list.buffer.resize((doc.end - doc.at.offset) as usize, 0);
            file.seek(SeekFrom::Start(doc.at.offset)).map_err(io)?;
            file.read_exact(&mut list.buffer).map_err(io)?;
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
    pub(super) fn read_already(&self) -> u64 {
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
    pub(super) fn read(&mut self, log: &mut ProblemLog) -> Result<Option<Converted>, SourceError> {
        let io = SourceError::io(&self.path);
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
    pub(super) fn read_whole_runs(
        &mut self,
        log: &mut ProblemLog,
    ) -> Result<Option<Converted>, SourceError> {
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
pub(super) fn next_run(runs: &mut VecDeque<Run>, read_already: u64) -> Option<Run> {
    std::iter::from_fn(|| runs.pop_front()).find(|run| run.end > read_already)
}

/// What the second pass makes of a document the splitter found in a stream's run.
pub(super) struct Usable<'a> {
    pub(super) stream: Stream,
    pub(super) path: &'a Path,
    /// Documents before this offset were read with the list.
    pub(super) read_already: u64,
    pub(super) checked: &'a Checked,
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
    pub(super) fn convert(
        &self,
        doc: &[u8],
        found: &Found,
        log: &mut ProblemLog,
    ) -> Option<Converted> {
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
        .map_err(|why| log.push(found.problem(self.path, why, true)))
        .ok()?;
        convert(stream, self.path, doc, found, log).map(|event| (event, found.start, found.end))
    }
}

/// The event of a complete document of `stream` by the typed path, when it reads it and
/// the event is usable as it is.
pub(super) fn typed(stream: Stream, doc: &[u8]) -> Option<Box<WatchEvent>> {
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
pub(super) fn convert(
    stream: Stream,
    path: &Path,
    doc: &[u8],
    found: &Found,
    log: &mut ProblemLog,
) -> Option<Box<WatchEvent>> {
    if let Some(event) = typed(stream, doc) {
        return Some(event);
    }
    let problem = |message: String, skipped: bool| found.problem(path, message, skipped);
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

pub(super) fn describe(problems: &[FieldProblem]) -> String {
    let fields: Vec<String> = problems
        .iter()
        .map(|p| format!("{} ({})", p.path, p.problem))
        .collect();
    format!("unusable fields: {}", fields.join(", "))
}
