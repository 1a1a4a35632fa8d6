//! Avro object container files of WatchEvents, streamed record by record. A corrupt block
//! is reported with its offset and the reader resumes at the next sync marker; files
//! concatenated with `cat` are read whole. Of each event only what the analysis reads is
//! decoded ([`ANALYSIS_FIELDS`]): a recording's raw objects and annotations are most of
//! its bytes, and no rule reads them.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ipaudit_schemas::{ContainerError, ContainerReader, WatchEvent};

pub use crate::analysis::ANALYSIS_FIELDS;

use super::{unversioned_problem, Position, Problem, ProblemLog, SourceError, SourceItem};

/// Reads a container file; a corrupt block is reported and skipped.
pub struct AvroFileSource {
    path: PathBuf,
    log: ProblemLog,
    index: u64,
    reader: ContainerReader<WatchEvent, BufReader<File>>,
    total_bytes: u64,
    /// An event handed back once analysed ([`AvroFileSource::recycle`]): the next one is
    /// read into it, reusing its strings.
    spare: Option<Box<WatchEvent>>,
}

impl AvroFileSource {
    /// Opens the file and reads its header.
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        let io = SourceError::io(path);
        let file = File::open(path).map_err(io)?;
        let total_bytes = file.metadata().map_err(io)?.len();
        let reader =
            ContainerReader::with_fields(BufReader::with_capacity(1 << 20, file), ANALYSIS_FIELDS)
                .map_err(|source| SourceError::Container {
                    path: path.to_owned(),
                    source,
                })?;
        Ok(AvroFileSource {
            path: path.to_owned(),
            log: ProblemLog::new(path),
            index: 0,
            reader,
            total_bytes,
            spare: None,
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

    /// Takes back an event this source gave and the analysis is done with: the next
    /// event is read into it, so that reading one allocates next to nothing.
    pub fn recycle(&mut self, event: Box<WatchEvent>) {
        self.spare = Some(event);
    }
}

impl Iterator for AvroFileSource {
    type Item = SourceItem;

    fn next(&mut self) -> Option<SourceItem> {
        loop {
            if let Some(item) = self.log.next_item() {
                return Some(item);
            }
            let mut event = self
                .spare
                .take()
                .unwrap_or_else(|| Box::new(WatchEvent::blank()));
            let Some(next) = self.reader.next_into(&mut event) else {
                return self.log.finish();
            };
            match next {
                Ok(()) => {
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
                    self.spare = Some(event);
                }
                Err(error) => {
                    self.spare = Some(event);
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

#[cfg(test)]
mod tests {
    use ipaudit_schemas::builders::EventBuilder;
    use ipaudit_schemas::ContainerWriter;

    use super::*;

    #[test]
    fn a_recording_is_read_with_the_reserved_label_and_without_raw_objects_or_annotations() {
        let mut ip = EventBuilder::ip("vm-1.ns", "subnet-a").rv(5).added();
        ip.raw_object = Some(r#"{"kind":"IP"}"#.into());
        let meta = ip.metadata.as_mut().expect("a builder's IP has metadata");
        meta.labels
            .insert("ovn.kubernetes.io/ip_reserved".into(), "true".into());
        meta.annotations
            .insert("ovn.kubernetes.io/allocated".into(), "true".into());
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("history.avro");
        let file = File::create(&path).expect("create the recording");
        let mut writer = ContainerWriter::new(file).expect("a container");
        writer.append(&ip).expect("append");
        writer.finish().expect("finish");

        let read: Vec<WatchEvent> = AvroFileSource::open(&path)
            .expect("open")
            .filter_map(|item| match item {
                SourceItem::Event(event) => Some(*event),
                _ => None,
            })
            .collect();
        let [event] = &read[..] else {
            panic!("one event, got {read:?}")
        };
        let meta = event.metadata.as_ref().expect("metadata");
        assert_eq!(
            meta.labels
                .get("ovn.kubernetes.io/ip_reserved")
                .map(String::as_str),
            Some("true")
        );
        assert_eq!(meta.labels.len(), 1, "only the label a rule reads");
        assert!(meta.annotations.is_empty());
        assert_eq!(event.raw_object, None);
        assert_eq!(event.part, ip.part, "the kind's part is read whole");
    }
}
