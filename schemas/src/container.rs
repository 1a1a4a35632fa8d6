//! Recordings: Avro object container files of one record type, written with today's schema
//! and read back from any known version.

use std::io::{Read, Write};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use apache_avro::{reader::ReaderDeser, Codec, DeflateSettings, Reader, Writer};

use crate::registry::{DatumError, Record, SchemaSet};

/// The magic that opens every Avro object container file.
pub const CONTAINER_MAGIC: [u8; 4] = *b"Obj\x01";

/// Why a container file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// The file header is missing or corrupt.
    #[error("not a readable Avro container file")]
    Header(#[source] apache_avro::Error),
    /// The file holds another record type.
    #[error("container holds records of schema {found}, not {expected}")]
    UnknownSchema {
        /// The record type expected.
        expected: &'static str,
        /// Name of the schema the file declares.
        found: String,
    },
    /// A block or record could not be decoded; the file ends here.
    #[error("corrupt {record} data at record {index} (about byte {byte_offset}); the rest of the file is skipped")]
    Corrupt {
        /// The record type.
        record: &'static str,
        /// Records read before the corrupt one.
        index: u64,
        /// Bytes consumed from the file when the error was found.
        byte_offset: u64,
        /// What was wrong.
        #[source]
        source: DatumError,
    },
    /// Writing failed.
    #[error("cannot write {record} container")]
    Write {
        /// The record type.
        record: &'static str,
        /// What apache-avro said.
        #[source]
        source: apache_avro::Error,
    },
}

/// Writes records of one type to a container file (deflate-compressed blocks).
pub struct ContainerWriter<T: Record, W: Write> {
    inner: Writer<'static, W>,
    _record: PhantomData<T>,
}

impl<T: Record, W: Write> ContainerWriter<T, W> {
    /// Starts a container on `out` with today's schema.
    pub fn new(out: W) -> Result<Self, ContainerError> {
        Self::with_codec(out, Codec::Deflate(DeflateSettings::default()))
    }

    /// Starts a container with a chosen block codec.
    pub fn with_codec(out: W, codec: Codec) -> Result<Self, ContainerError> {
        let inner = Writer::builder()
            .schema(T::schemas().current().schema)
            .writer(out)
            .codec(codec)
            .build()
            .map_err(|source| ContainerError::Write {
                record: T::NAME,
                source,
            })?;
        Ok(ContainerWriter {
            inner,
            _record: PhantomData,
        })
    }

    /// Appends one record (buffered into blocks).
    pub fn append(&mut self, record: &T) -> Result<(), ContainerError> {
        self.inner
            .append_ser(record)
            .map(drop)
            .map_err(|source| ContainerError::Write {
                record: T::NAME,
                source,
            })
    }

    /// Writes the records appended so far as a complete block, so that a reader sees them
    /// even if the process dies before [`ContainerWriter::finish`].
    pub fn flush(&mut self) -> Result<(), ContainerError> {
        self.inner
            .flush()
            .map(drop)
            .map_err(|source| ContainerError::Write {
                record: T::NAME,
                source,
            })
    }

    /// Writes the last block and returns the output.
    pub fn finish(self) -> Result<W, ContainerError> {
        self.inner
            .into_inner()
            .map_err(|source| ContainerError::Write {
                record: T::NAME,
                source,
            })
    }
}

/// Counts the bytes read through it; the count is shared so progress can be shown.
pub struct CountingRead<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> CountingRead<R> {
    /// Wraps a reader.
    pub fn new(inner: R) -> Self {
        CountingRead {
            inner,
            count: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A handle on the number of bytes read so far.
    pub fn counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.count)
    }
}

impl<R: Read> Read for CountingRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Today's version decodes on the serde path; older versions go through `Value` and schema
/// resolution, the only way apache-avro resolves.
enum Records<T: Record, R: Read> {
    Current(ReaderDeser<'static, CountingRead<R>, T>),
    Resolving(Reader<'static, CountingRead<R>>, &'static SchemaSet),
}

/// Reads the records of a container file, resolving older schema versions to today's.
/// The first corrupt block ends the iteration with [`ContainerError::Corrupt`]; the records
/// before it are all returned.
pub struct ContainerReader<T: Record, R: Read> {
    records: Records<T, R>,
    count: Arc<AtomicU64>,
    index: u64,
    writer_version: Option<u32>,
    failed: bool,
    _record: PhantomData<T>,
}

impl<T: Record, R: Read> ContainerReader<T, R> {
    /// Reads the header of a container file.
    pub fn new(input: R) -> Result<Self, ContainerError> {
        let input = CountingRead::new(input);
        let count = input.counter();
        let set = T::schemas();
        let current = set.current().schema;
        // No reader schema: apache-avro's serde path panics when one is set.
        let inner = Reader::new(input).map_err(ContainerError::Header)?;
        let writer_name = inner
            .writer_schema()
            .name()
            .map_or_else(|| "(unnamed)".to_owned(), |n| n.fullname(None));
        let (records, writer_version) = match set.position_of_schema(inner.writer_schema()) {
            Some(index) if std::ptr::eq(set.versions()[index].schema, current) => (
                Records::Current(inner.into_deser_iter()),
                Some(set.versions()[index].version),
            ),
            Some(index) => (
                Records::Resolving(inner, set),
                Some(set.versions()[index].version),
            ),
            // A version newer than this build (the file carries its schema): resolved to
            // today's, with what this build does not know left out or defaulted.
            None if writer_name == T::NAME => (Records::Resolving(inner, set), None),
            None => {
                return Err(ContainerError::UnknownSchema {
                    expected: T::NAME,
                    found: writer_name,
                })
            }
        };
        Ok(ContainerReader {
            records,
            writer_version,
            count,
            index: 0,
            failed: false,
            _record: PhantomData,
        })
    }

    /// The schema version the file was written with; `None` for a version newer than this
    /// build, read by resolution to today's.
    pub fn writer_version(&self) -> Option<u32> {
        self.writer_version
    }

    /// A handle on the number of bytes read from the input so far.
    pub fn bytes_read(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.count)
    }

    fn corrupt(&mut self, source: DatumError) -> ContainerError {
        self.failed = true;
        ContainerError::Corrupt {
            record: T::NAME,
            index: self.index,
            byte_offset: self.count.load(Ordering::Relaxed),
            source,
        }
    }
}

impl<T: Record, R: Read> Iterator for ContainerReader<T, R> {
    type Item = Result<T, ContainerError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let next = match &mut self.records {
            Records::Current(records) => records.next().map(|r| r.map_err(DatumError::from)),
            Records::Resolving(values, set) => values
                .next()
                .map(|value| value.map_err(DatumError::from).and_then(|v| set.resolve(v))),
        };
        match next? {
            Ok(record) => {
                self.index += 1;
                Some(Ok(record))
            }
            Err(source) => Some(Err(self.corrupt(source))),
        }
    }
}
