//! Avro object container files of WatchEvents, streamed record by record. A corrupt block
//! is reported with its offset and the reader resumes at the next sync marker; files
//! concatenated with `cat` are read whole.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ipaudit_schemas::{ContainerError, ContainerReader, WatchEvent};

use super::{unversioned_problem, Position, Problem, ProblemLog, SourceError, SourceItem};

/// Reads a container file; a corrupt block is reported and skipped.
pub struct AvroFileSource {
    path: PathBuf,
    log: ProblemLog,
    index: u64,
    reader: ContainerReader<WatchEvent, BufReader<File>>,
    total_bytes: u64,
}

impl AvroFileSource {
    /// Opens the file and reads its header.
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        let io = |source| SourceError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let total_bytes = file.metadata().map_err(io)?.len();
        let reader =
            ContainerReader::new(BufReader::with_capacity(1 << 20, file)).map_err(|source| {
                SourceError::Container {
                    path: path.to_owned(),
                    source,
                }
            })?;
        Ok(AvroFileSource {
            path: path.to_owned(),
            log: ProblemLog::new(path),
            index: 0,
            reader,
            total_bytes,
        })
    }

    /// File size.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes read so far.
    pub fn progress(&self) -> Arc<AtomicU64> {
        self.reader.bytes_read()
    }
}

impl Iterator for AvroFileSource {
    type Item = SourceItem;

    fn next(&mut self) -> Option<SourceItem> {
        loop {
            if let Some(item) = self.log.next_item() {
                return Some(item);
            }
            let Some(next) = self.reader.next() else {
                return self.log.finish();
            };
            match next {
                Ok(event) => {
                    let index = self.index;
                    self.index += 1;
                    let Some(message) = unversioned_problem(&event) else {
                        return Some(SourceItem::Event(event));
                    };
                    self.log.push(Problem {
                        path: self.path.clone(),
                        position: Position::Record {
                            index,
                            offset: self.reader.bytes_read().load(Ordering::Relaxed),
                        },
                        message,
                        skipped: true,
                        bytes: 0,
                    });
                }
                Err(error) => {
                    let (position, bytes) = match &error {
                        ContainerError::Corrupt {
                            index,
                            byte_offset,
                            skipped_bytes,
                            ..
                        } => (
                            Position::Record {
                                index: *index,
                                offset: *byte_offset,
                            },
                            *skipped_bytes,
                        ),
                        _ => (
                            Position::Record {
                                index: self.index,
                                offset: 0,
                            },
                            0,
                        ),
                    };
                    self.log.push(Problem {
                        path: self.path.clone(),
                        position,
                        message: error_chain(&error),
                        skipped: true,
                        bytes,
                    });
                }
            }
        }
    }
}

/// An error and its sources, in one line.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
