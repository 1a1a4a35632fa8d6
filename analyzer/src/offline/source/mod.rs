//! Where recorded events come from: Avro container files (`collector record`, or exported
//! from Kafka), kubectl watch output (`kubectl get KIND -A --watch --output-watch-events
//! -o json`) and Kubernetes API server audit logs (JSON lines, plain or gzip). The format is
//! detected from the first bytes (and, for JSON, the first line).

pub mod audit_log;
mod avro_file;
mod kubectl_json;
mod kubectl_typed;

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ipaudit_schemas::container::CONTAINER_MAGIC;
use ipaudit_schemas::{ContainerError, Stream, WatchEvent};

pub use audit_log::{AuditLogSource, AuditSummary};
pub use avro_file::{AvroFileSource, ANALYSIS_FIELDS};
pub use kubectl_json::{split_documents, KubectlJsonSource, MAX_DOCUMENT_BYTES};

/// The kubectl reader's typed fast path on one complete watch document of `stream`: its
/// event when the fast path vouches for it (it reads it whole, exactly as the generic
/// conversion `ipaudit_schemas::convert::from_watch_document` would), else `None` (the
/// reader then takes the generic path). Public for the fuzz target that holds the two
/// paths to the same events (`fuzz/`); [`KubectlJsonSource`] is the reader.
pub fn kubectl_typed_event(stream: Stream, doc: &[u8]) -> Option<WatchEvent> {
    kubectl_typed::convert(stream, doc)
}

/// The formats `replay` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// Avro object container file of WatchEvents.
    AvroContainer,
    /// kubectl watch output: `{"type": ..., "object": ...}` documents.
    KubectlJson,
    /// API server audit log: `audit.k8s.io` Events, one per line (gzip-compressed or not).
    AuditLog,
}

/// Tells the format from the first bytes of a file (for gzip, of its decompressed text):
/// JSON whose first line is an `audit.k8s.io` Event is an audit log, other JSON kubectl
/// output. `head` should hold the first line whole.
pub fn detect_format(head: &[u8]) -> Option<InputFormat> {
    if head.starts_with(&CONTAINER_MAGIC) {
        return Some(InputFormat::AvroContainer);
    }
    let text = head.trim_ascii_start();
    if !text.starts_with(b"{") {
        return None;
    }
    let first_line = text.split(|&b| b == b'\n').next().unwrap_or(text);
    if audit_log::is_audit_line(first_line) {
        Some(InputFormat::AuditLog)
    } else {
        Some(InputFormat::KubectlJson)
    }
}

/// How many bytes of a file are read to detect its format: enough for the first line of
/// an audit log (an Event with its objects is rarely longer).
const DETECT_BYTES: usize = 256 * 1024;

/// The format of the file at `path` (see [`detect_format`]).
pub fn detect_file(path: &Path) -> Result<InputFormat, SourceError> {
    let io = SourceError::io(path);
    let (input, gzipped) = audit_log::reader(path).map_err(io)?;
    let mut head = Vec::with_capacity(4096);
    input
        .take(DETECT_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(io)?;
    match detect_format(&head) {
        // Only audit logs are read compressed (rotated API server logs are gzipped).
        Some(format) if !gzipped || format == InputFormat::AuditLog => Ok(format),
        _ => Err(SourceError::UnknownFormat {
            path: path.to_owned(),
        }),
    }
}

/// Why an input could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The file could not be opened or read.
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Neither an Avro container, kubectl JSON nor an audit log.
    #[error("{path}: not an Avro container file (starts with Obj\\x01), kubectl watch JSON (starts with {{) nor an audit.k8s.io log (JSON lines, plain or gzip)")]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// An Avro container file that cannot be opened.
    #[error("{path}: unreadable Avro container")]
    Container {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        #[source]
        source: ContainerError,
    },
}

impl SourceError {
    /// `Io` for `path`, as the argument of `map_err`: the path is copied only when an
    /// error is built, not for each read that succeeds.
    pub(crate) fn io(path: &Path) -> impl Fn(std::io::Error) -> SourceError + Copy + '_ {
        move |source| SourceError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// Where in a file something is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// A JSON document starting here (1-based line and column).
    Text {
        /// Line.
        line: u64,
        /// Column.
        column: u64,
        /// Byte offset.
        offset: u64,
    },
    /// The n-th record of an Avro container (0-based), about this byte offset.
    Record {
        /// Record index.
        index: u64,
        /// Byte offset.
        offset: u64,
    },
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Text {
                line,
                column,
                offset,
            } => {
                write!(f, "line {line}, column {column} (byte {offset})")
            }
            Position::Record { index, offset } => write!(f, "record {index} (about byte {offset})"),
        }
    }
}

/// Something in an input that was not (fully) usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub path: PathBuf,
    /// Where.
    pub position: Position,
    /// What was wrong.
    pub message: String,
    /// Whether the document was skipped (else it was kept without the bad fields).
    pub skipped: bool,
    /// How many bytes of input it covers (what was skipped, when it was).
    pub bytes: u64,
}

/// Problems of one input beyond the first [`MAX_LISTED_PROBLEMS`]: counted, not listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlisted {
    /// The file.
    pub path: PathBuf,
    /// How many problems.
    pub problems: u64,
    /// How many of them skipped a document or record.
    pub skipped: u64,
    /// Bytes those skipped.
    pub skipped_bytes: u64,
}

/// Problems listed with their position, per input; the rest are only counted, so that a
/// file of nothing but broken documents costs no memory per document.
pub const MAX_LISTED_PROBLEMS: u64 = 100;

/// The problems of one input as it is read: the first [`MAX_LISTED_PROBLEMS`] waiting to be
/// handed on, the others counted.
#[derive(Debug)]
pub(crate) struct ProblemLog {
    pending: std::collections::VecDeque<Problem>,
    listed: u64,
    unlisted: Unlisted,
    finished: bool,
}

impl ProblemLog {
    pub(crate) fn new(path: &Path) -> Self {
        ProblemLog {
            pending: std::collections::VecDeque::new(),
            listed: 0,
            unlisted: Unlisted {
                path: path.to_owned(),
                problems: 0,
                skipped: 0,
                skipped_bytes: 0,
            },
            finished: false,
        }
    }

    /// Notes a problem where it was made.
    pub(crate) fn push(&mut self, problem: Problem) {
        if self.listed < MAX_LISTED_PROBLEMS {
            self.listed += 1;
            self.pending.push_back(problem);
        } else {
            self.unlisted.problems += 1;
            if problem.skipped {
                self.unlisted.skipped += 1;
                self.unlisted.skipped_bytes += problem.bytes;
            }
        }
    }

    /// The next listed problem to hand on.
    pub(crate) fn next_item(&mut self) -> Option<SourceItem> {
        self.pending.pop_front().map(SourceItem::Problem)
    }

    /// At the end of the input: the count of problems not listed, once.
    pub(crate) fn finish(&mut self) -> Option<SourceItem> {
        if let Some(item) = self.next_item() {
            return Some(item);
        }
        if self.finished || self.unlisted.problems == 0 {
            return None;
        }
        self.finished = true;
        Some(SourceItem::Unlisted(self.unlisted.clone()))
    }
}

/// Why an event cannot be ordered: its resourceVersion is not a decimal number (etcd's
/// revisions are). Such an event is skipped, never applied out of order.
pub(crate) fn unversioned_problem(event: &WatchEvent) -> Option<String> {
    let raw = &event.resource_version;
    let numeric = !raw.is_empty() && raw.len() <= 19 && raw.bytes().all(|b| b.is_ascii_digit());
    let consistent = event
        .resource_version_num
        .is_some_and(|n| numeric && raw.parse::<i64>().ok() == Some(n));
    (!consistent).then(|| {
        format!(
            "resourceVersion {raw:?} is not a decimal number (or disagrees with the parsed {:?}): the event cannot be ordered",
            event.resource_version_num
        )
    })
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.skipped {
            "skipped"
        } else {
            "kept without bad fields"
        };
        write!(
            f,
            "{}: {}: {} ({verdict})",
            self.path.display(),
            self.position,
            self.message
        )
    }
}

/// What a source yields.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceItem {
    /// An event, boxed once here: it is handed on as a pointer through the merge, the
    /// reorder buffer and the state (moving 400 bytes at each stage cost more than one
    /// allocation).
    Event(Box<WatchEvent>),
    /// A problem, with its position.
    Problem(Problem),
    /// Problems beyond the listed ones, counted (at the end of an input).
    Unlisted(Unlisted),
}

/// An opened input.
#[allow(clippy::large_enum_variant, reason = "one per input file")]
pub enum Source {
    /// An Avro container file.
    Avro(AvroFileSource),
    /// kubectl watch JSON.
    Kubectl(KubectlJsonSource),
    /// Audit logs, read together.
    Audit(AuditLogSource),
}

impl Source {
    /// Takes back an event it gave, once analysed ([`crate::analysis::engine::Analyzer::take_spare`]):
    /// an Avro file reads its next event into it; the other formats build theirs and drop it.
    pub fn recycle(&mut self, event: Box<WatchEvent>) {
        if let Source::Avro(source) = self {
            source.recycle(event);
        }
    }

    /// Opens a file, detecting its format.
    pub fn open(path: &Path) -> Result<Source, SourceError> {
        match detect_file(path)? {
            InputFormat::AvroContainer => Ok(Source::Avro(AvroFileSource::open(path)?)),
            InputFormat::KubectlJson => Ok(Source::Kubectl(KubectlJsonSource::open(path)?)),
            InputFormat::AuditLog => Ok(Source::Audit(AuditLogSource::open(
                &[path.to_owned()],
                true,
            )?)),
        }
    }

    /// Size of the input in bytes, for progress.
    pub fn total_bytes(&self) -> u64 {
        match self {
            Source::Avro(s) => s.total_bytes(),
            Source::Kubectl(s) => s.total_bytes(),
            Source::Audit(s) => s.total_bytes(),
        }
    }

    /// Whether it hands on its events in resourceVersion order (a kubectl recording: its
    /// initial lists sorted, its kinds merged), unless history itself went backwards.
    pub fn in_version_order(&self) -> bool {
        matches!(self, Source::Kubectl(_))
    }

    /// Bytes consumed so far, for progress.
    pub fn progress(&self) -> Arc<AtomicU64> {
        match self {
            Source::Avro(s) => s.progress(),
            Source::Kubectl(s) => s.progress(),
            Source::Audit(s) => s.progress(),
        }
    }
}

impl Iterator for Source {
    type Item = SourceItem;

    fn next(&mut self) -> Option<SourceItem> {
        match self {
            Source::Avro(s) => s.next(),
            Source::Kubectl(s) => s.next(),
            Source::Audit(s) => s.next(),
        }
    }
}

/// A shared byte counter for progress.
pub(crate) fn counter(value: u64) -> Arc<AtomicU64> {
    Arc::new(AtomicU64::new(value))
}

pub(crate) fn bump(counter: &AtomicU64, to: u64) {
    counter.store(to, Ordering::Relaxed);
}
