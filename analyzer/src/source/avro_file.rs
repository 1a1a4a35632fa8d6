//! Avro object container files of WatchEvents, streamed record by record.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ipaudit_schemas::{ContainerError, ContainerReader, WatchEvent};

use super::{Position, Problem, SourceError, SourceItem};

/// Reads a container file; a corrupt block is reported and ends the file.
pub struct AvroFileSource {
    path: PathBuf,
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
        match self.reader.next()? {
            Ok(event) => Some(SourceItem::Event(event)),
            Err(error) => {
                let position = match &error {
                    ContainerError::Corrupt {
                        index, byte_offset, ..
                    } => Position::Record {
                        index: *index,
                        offset: *byte_offset,
                    },
                    _ => Position::Record {
                        index: 0,
                        offset: 0,
                    },
                };
                Some(SourceItem::Problem(Problem {
                    path: self.path.clone(),
                    position,
                    message: error_chain(&error),
                    skipped: true,
                }))
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
