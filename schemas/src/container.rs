//! Recordings: Avro object container files of one record type, written with today's schema
//! and read back from any known version.
//!
//! Files of every kept schema version (null or deflate blocks) are framed here and each
//! record is read with [`Record::read_version`] (for WatchEvent, [`crate::datum`], which
//! reads every version directly); apache-avro writes every file, and reads the others:
//! versions newer than this build, codecs this module does not know.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use apache_avro::{Codec, DeflateSettings, Reader, Schema, Writer};
use libdeflater::{DecompressionError, Decompressor};

use crate::datum::Fields;
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
    /// A block or record could not be decoded. The reader skips to the next sync marker
    /// and goes on from there when it can (`resumed`); else the rest of the file is lost.
    #[error(
        "corrupt {record} block at byte {byte_offset} (after record {index}): {skipped_bytes} bytes skipped, {}",
        if *resumed { "reading resumed at the next sync marker" } else { "the rest of the file is skipped" }
    )]
    Corrupt {
        /// The record type.
        record: &'static str,
        /// Records read before the corrupt block (or record).
        index: u64,
        /// Where the corrupt block starts in the input.
        byte_offset: u64,
        /// Bytes of input skipped, from the block's start to where reading resumed.
        skipped_bytes: u64,
        /// Whether a later sync marker was found and reading goes on after it.
        resumed: bool,
        /// What was wrong.
        #[source]
        source: BlockError,
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
        limit_allocations();
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

/// The most bytes one block may hold, compressed or not, and the most apache-avro may
/// allocate for one length it reads (its `max_allocation_bytes`, set to this when a
/// container is opened), so that both readers accept the same files and a corrupt length
/// costs no more than this. Writers flush blocks of some KiB.
pub const MAX_BLOCK_BYTES: usize = 64 * 1024 * 1024;

/// Caps what apache-avro allocates for a length read from a file (once per process; the
/// first call wins, so every entry point of this module calls it).
pub fn limit_allocations() {
    apache_avro::util::max_allocation_bytes(MAX_BLOCK_BYTES);
}

/// What was wrong with a block of a container file.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    /// A record in the block is malformed.
    #[error(transparent)]
    Datum(#[from] DatumError),
    /// Reading the file failed.
    #[error("cannot read the block")]
    Io(#[source] std::io::Error),
    /// The file ends inside a block.
    #[error("the file ends inside a block")]
    Truncated,
    /// A block's record count or byte size is negative or too large.
    #[error(
        "block header declares {count} records in {size} bytes (at most {MAX_BLOCK_BYTES} bytes)"
    )]
    BadHeader {
        /// The record count.
        count: i64,
        /// The byte size.
        size: i64,
    },
    /// A block's record count or byte size exceeds 64 bits.
    #[error("block header holds an integer of more than 64 bits")]
    Varint,
    /// The 16 bytes after a block are not the file's sync marker.
    #[error("the block is not followed by the file's sync marker")]
    SyncMarker,
    /// Another container file follows (files concatenated with `cat`), of a schema version
    /// or codec this reader does not read in line.
    #[error("a concatenated container file that this reader cannot read in line (another schema version or codec)")]
    Concatenated,
    /// A deflate block does not inflate.
    #[error("deflate data does not inflate ({status})")]
    Inflate {
        /// What libdeflate said.
        status: String,
    },
    /// Bytes left in a block after the records it declares.
    #[error("{extra} bytes left in the block after its {count} records")]
    TrailingBytes {
        /// The records the block declares.
        count: u64,
        /// Bytes left.
        extra: usize,
    },
}

/// The input as apache-avro reads it when this module hands a file over: the header bytes
/// already read, then the rest.
type Replay<R> = std::io::Chain<std::io::Cursor<Vec<u8>>, CountingRead<R>>;

/// Files of a known schema version are read here, block by block, each record with
/// [`Record::read_version`]; newer versions go through apache-avro's `Value` and schema
/// resolution, the only way it resolves.
#[allow(
    clippy::large_enum_variant,
    reason = "one per open file; the fast path stays unboxed"
)]
enum Records<T: Record, R: Read> {
    Known(Blocks<CountingRead<R>>, PhantomData<T>),
    // Boxed: the slow path, and apache-avro's reader is four times the size of `Blocks`.
    Resolving(Box<Reader<'static, Replay<R>>>, &'static SchemaSet),
}

/// Reads the records of a container file, resolving older schema versions to today's.
/// A corrupt block yields [`ContainerError::Corrupt`]; for files of a known schema version
/// the reader then resumes after the next sync marker, and container files of the same
/// version concatenated to this one (`cat a.avro b.avro`) are read on. Files read through
/// apache-avro (versions newer than this build) end at their first corrupt block. The
/// records before it are all returned.
pub struct ContainerReader<T: Record, R: Read> {
    records: Records<T, R>,
    /// The writer's version, by index in the record's [`SchemaSet`].
    version_index: usize,
    fields: Fields,
    count: Arc<AtomicU64>,
    index: u64,
    writer_version: Option<u32>,
    failed: bool,
}

impl<T: Record, R: Read> ContainerReader<T, R> {
    /// Reads the header of a container file; every field of every record will be read.
    pub fn new(input: R) -> Result<Self, ContainerError> {
        Self::with_fields(input, Fields::ALL)
    }

    /// Reads the header of a container file; of each record, `fields` will be read (for
    /// WatchEvent; other records are read whole). Replay wants [`Fields::analysis`].
    pub fn with_fields(input: R, fields: Fields) -> Result<Self, ContainerError> {
        limit_allocations();
        let mut input = CountingRead::new(input);
        let count = input.counter();
        let set = T::schemas();
        let mut header_bytes = Vec::new();
        let header = read_header(&mut Tee {
            inner: &mut input,
            seen: &mut header_bytes,
        });
        if let Some(header) = header {
            let known = header
                .schema
                .as_ref()
                .and_then(|schema| set.position_of_schema(schema));
            if let (Some(version_index), Some(codec)) = (known, header.codec) {
                let mut blocks = Blocks::new(input, header.schema, header.sync, codec);
                // Offsets count from the start of the file.
                blocks.input.offset = header_bytes.len() as u64;
                return Ok(ContainerReader {
                    records: Records::Known(blocks, PhantomData),
                    version_index,
                    fields,
                    count,
                    index: 0,
                    writer_version: Some(set.versions()[version_index].version),
                    failed: false,
                });
            }
        }
        // Anything else (another version, a codec or a header this module does not read)
        // is apache-avro's to read or to refuse, from the first byte.
        let replay = std::io::Cursor::new(header_bytes).chain(input);
        // No reader schema: apache-avro's serde path panics when one is set.
        let inner = Reader::new(replay).map_err(ContainerError::Header)?;
        let writer_name = inner
            .writer_schema()
            .name()
            .map_or_else(|| "(unnamed)".to_owned(), |n| n.fullname(None));
        let writer_version = match set.position_of_schema(inner.writer_schema()) {
            Some(index) => Some(set.versions()[index].version),
            // A version newer than this build (the file carries its schema): resolved to
            // today's, with what this build does not know left out or defaulted.
            None if writer_name == T::NAME => None,
            None => {
                return Err(ContainerError::UnknownSchema {
                    expected: T::NAME,
                    found: writer_name,
                })
            }
        };
        Ok(ContainerReader {
            records: Records::Resolving(Box::new(inner), set),
            version_index: set.versions().len() - 1,
            fields,
            writer_version,
            count,
            index: 0,
            failed: false,
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

    fn corrupt(&mut self, source: BlockError) -> ContainerError {
        let (byte_offset, skipped_bytes, resumed) = match &mut self.records {
            Records::Known(blocks, _) => {
                let start = blocks.block_start;
                match blocks.recover(&source) {
                    Ok((skipped, resumed)) => (start, skipped, resumed),
                    Err(_) => (start, 0, false),
                }
            }
            Records::Resolving(..) => (self.count.load(Ordering::Relaxed), 0, false),
        };
        if !resumed {
            self.failed = true;
        }
        ContainerError::Corrupt {
            record: T::NAME,
            index: self.index,
            byte_offset,
            skipped_bytes,
            resumed,
            source,
        }
    }
}

impl<T: Record, R: Read> ContainerReader<T, R> {
    /// The next record, read into `into` (a record read before, whose allocations are
    /// reused: see [`Record::read_version_into`]); `None` at the end. After an error
    /// `into` may hold parts of two records.
    pub fn next_into(&mut self, into: &mut T) -> Option<Result<(), ContainerError>> {
        self.read_next(
            into,
            |index, body, fields, into| T::read_version_into(index, body, fields, into),
            |record, into| *into = record,
        )
    }

    /// The next record, read by `read` (into `sink`) from a block of a known version, or
    /// resolved from apache-avro's `Value` and handed to `wrap` (with `sink`).
    #[inline(always)]
    fn read_next<S, U>(
        &mut self,
        sink: &mut S,
        read: impl FnOnce(usize, &mut &[u8], &Fields, &mut S) -> Result<U, DatumError>,
        wrap: impl FnOnce(T, &mut S) -> U,
    ) -> Option<Result<U, ContainerError>> {
        if self.failed {
            return None;
        }
        let next = match &mut self.records {
            Records::Known(blocks, _) => {
                let mut body = match blocks.next_datum() {
                    Ok(Some(body)) => body,
                    Ok(None) => return None,
                    Err(source) => return Some(Err(self.corrupt(source))),
                };
                let before = body.len();
                match read(self.version_index, &mut body, &self.fields, sink) {
                    Ok(record) => {
                        let consumed = before - body.len();
                        blocks.consumed(consumed);
                        self.index += 1;
                        return Some(Ok(record));
                    }
                    Err(source) => return Some(Err(self.corrupt(source.into()))),
                }
            }
            Records::Resolving(values, set) => values
                .next()?
                .map_err(DatumError::from)
                .and_then(|value| set.resolve(value)),
        };
        match next {
            Ok(record) => {
                self.index += 1;
                Some(Ok(wrap(record, sink)))
            }
            Err(source) => Some(Err(self.corrupt(source.into()))),
        }
    }
}

impl<T: Record, R: Read> Iterator for ContainerReader<T, R> {
    type Item = Result<T, ContainerError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.read_next(
            &mut (),
            |index, body, fields, ()| T::read_version(index, body, fields),
            |record, ()| record,
        )
    }
}

/// What this module reads of a container header.
struct Header {
    /// The writer schema; `None` when it does not parse (apache-avro then says why).
    schema: Option<Schema>,
    /// The block codec; `None` for one this module does not decode.
    codec: Option<BlockCodec>,
    sync: [u8; 16],
}

/// The block codecs this module decodes.
#[derive(Debug, Clone, Copy)]
enum BlockCodec {
    Null,
    /// Raw DEFLATE (RFC 1951), no zlib wrapper.
    Deflate,
}

/// A reader that keeps a copy of what it read (the header, for apache-avro).
struct Tee<'a, R> {
    inner: &'a mut R,
    seen: &'a mut Vec<u8>,
}

impl<R: Read> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.seen.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// Reads `Obj\x01`, the metadata map and the sync marker; `None` for anything it cannot
/// read (apache-avro reads the same bytes again and reports the error).
fn read_header(input: &mut impl Read) -> Option<Header> {
    let mut magic = [0u8; 4];
    input.read_exact(&mut magic).ok()?;
    if magic != CONTAINER_MAGIC {
        return None;
    }
    let (mut schema, mut codec) = (None, Some(BlockCodec::Null));
    loop {
        let count = read_long(input).ok()??;
        if count == 0 {
            break;
        }
        if count < 0 {
            read_long(input).ok()??; // the block's byte size
        }
        for _ in 0..count.unsigned_abs() {
            let key = read_bytes(input)?;
            let value = read_bytes(input)?;
            match &key[..] {
                b"avro.schema" => {
                    schema = serde_json::from_slice(&value)
                        .ok()
                        .and_then(|json| Schema::parse(&json).ok());
                }
                b"avro.codec" => {
                    codec = match &value[..] {
                        b"null" => Some(BlockCodec::Null),
                        b"deflate" => Some(BlockCodec::Deflate),
                        _ => None,
                    }
                }
                _ => {}
            }
        }
    }
    let mut sync = [0u8; 16];
    input.read_exact(&mut sync).ok()?;
    Some(Header {
        schema,
        codec,
        sync,
    })
}

/// A length-prefixed byte string of the header, grown as its bytes arrive.
fn read_bytes(input: &mut impl Read) -> Option<Vec<u8>> {
    let len = u64::try_from(read_long(input).ok()??).ok()?;
    let mut bytes = Vec::new();
    input.take(len).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 == len).then_some(bytes)
}

/// A zigzag varint long, byte by byte: `Ok(None)` at the end of the input before its first
/// byte.
fn read_long(input: &mut impl Read) -> Result<Option<i64>, BlockError> {
    let mut value = 0u64;
    for i in 0..10 {
        let mut byte = [0u8; 1];
        match input.read_exact(&mut byte) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return if i == 0 {
                    Ok(None)
                } else {
                    Err(BlockError::Truncated)
                };
            }
            Err(e) => return Err(BlockError::Io(e)),
        }
        // The tenth byte holds bit 63 only.
        if i == 9 && byte[0] > 1 {
            break;
        }
        value |= u64::from(byte[0] & 0x7F) << (7 * i);
        if byte[0] < 0x80 {
            return Ok(Some(((value >> 1) as i64) ^ -((value & 1) as i64)));
        }
    }
    Err(BlockError::Varint)
}

/// Input with bytes put back in front (what a resync read past the sync marker it found),
/// and the logical position in it.
struct PushBack<R> {
    inner: R,
    back: Vec<u8>,
    at: usize,
    offset: u64,
}

impl<R: Read> Read for PushBack<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = if self.at < self.back.len() {
            let n = buf.len().min(self.back.len() - self.at);
            buf[..n].copy_from_slice(&self.back[self.at..self.at + n]);
            self.at += n;
            if self.at == self.back.len() {
                self.back = Vec::new();
                self.at = 0;
            }
            n
        } else {
            self.inner.read(buf)?
        };
        self.offset += n as u64;
        Ok(n)
    }
}

impl<R> PushBack<R> {
    /// Puts `bytes` back to be read next.
    fn unread(&mut self, bytes: &[u8]) {
        let mut back = bytes.to_vec();
        back.extend_from_slice(&self.back[self.at..]);
        self.back = back;
        self.at = 0;
        self.offset -= bytes.len() as u64;
    }
}

/// The blocks of a container file of a known schema, and the position in the current one.
struct Blocks<R> {
    input: PushBack<R>,
    /// Where the current block starts.
    block_start: u64,
    /// The bytes of the current block's header (count and size).
    head: Vec<u8>,
    /// The bytes read where the sync marker should be.
    trailer: Vec<u8>,
    /// The schema of the first file: a file concatenated to it is read in line if it has
    /// the same.
    schema: Option<Schema>,
    sync: [u8; 16],
    codec: BlockCodec,
    /// A deflate block as read (reused).
    compressed: Vec<u8>,
    /// libdeflate's decompressor, reused across blocks: it inflates a whole block in one
    /// call, twice as fast as miniz_oxide's streaming inflater on our blocks (BENCHMARKS.md).
    inflater: Decompressor,
    /// The current block's records (reused; only `..len` is this block's).
    data: Vec<u8>,
    len: usize,
    pos: usize,
    /// The current block's record count, and how many of them are left.
    count: u64,
    left: u64,
}

impl<R: Read> Blocks<R> {
    fn new(input: R, schema: Option<Schema>, sync: [u8; 16], codec: BlockCodec) -> Self {
        Blocks {
            schema,
            input: PushBack {
                inner: input,
                back: Vec::new(),
                at: 0,
                offset: 0,
            },
            block_start: 0,
            head: Vec::new(),
            trailer: Vec::new(),
            sync,
            codec,
            compressed: Vec::new(),
            inflater: Decompressor::new(),
            data: Vec::new(),
            len: 0,
            pos: 0,
            count: 0,
            left: 0,
        }
    }

    /// The bytes of the next record and those after it in its block, moving to the next
    /// block when this one is done; `None` at the end of the file. The caller reads one
    /// record and says how many bytes it took with [`Blocks::consumed`].
    fn next_datum(&mut self) -> Result<Option<&[u8]>, BlockError> {
        while self.left == 0 {
            if self.pos != self.len {
                return Err(BlockError::TrailingBytes {
                    count: self.count,
                    extra: self.len - self.pos,
                });
            }
            if !self.next_block()? {
                return Ok(None);
            }
        }
        Ok(Some(&self.data[self.pos..self.len]))
    }

    /// One record of `bytes` was read.
    fn consumed(&mut self, bytes: usize) {
        self.pos += bytes;
        self.left -= 1;
    }

    /// Reads the next block into `data`; `false` at the end of the file. A container
    /// header (files concatenated with `cat`) switches to that file's sync marker.
    fn next_block(&mut self) -> Result<bool, BlockError> {
        self.len = 0;
        self.pos = 0;
        self.left = 0;
        self.count = 0;
        // Every buffer `recover` searches holds this block's bytes or none: a stale copy of
        // the previous block could hold a sync marker before this block's start.
        self.head.clear();
        self.data.clear();
        self.compressed.clear();
        self.trailer.clear();
        self.block_start = self.input.offset;
        let mut magic = Vec::with_capacity(4);
        (&mut self.input)
            .take(4)
            .read_to_end(&mut magic)
            .map_err(BlockError::Io)?;
        if magic == CONTAINER_MAGIC {
            self.next_file()?;
            self.block_start = self.input.offset;
        } else {
            self.input.unread(&magic);
        }
        let mut tee = Tee {
            inner: &mut self.input,
            seen: &mut self.head,
        };
        let Some(count) = read_long(&mut tee)? else {
            return Ok(false);
        };
        let size = read_long(&mut tee)?.ok_or(BlockError::Truncated)?;
        let (Ok(count_u), Ok(size_u)) = (u64::try_from(count), usize::try_from(size)) else {
            return Err(BlockError::BadHeader { count, size });
        };
        if size_u > MAX_BLOCK_BYTES {
            return Err(BlockError::BadHeader { count, size });
        }
        let raw = match self.codec {
            BlockCodec::Null => &mut self.data,
            BlockCodec::Deflate => &mut self.compressed,
        };
        // Grown as the bytes arrive, not reserved from the declared size.
        raw.clear();
        (&mut self.input)
            .take(size_u as u64)
            .read_to_end(raw)
            .map_err(BlockError::Io)?;
        if raw.len() != size_u {
            return Err(BlockError::Truncated);
        }
        (&mut self.input)
            .take(16)
            .read_to_end(&mut self.trailer)
            .map_err(BlockError::Io)?;
        if self.trailer.len() != 16 {
            return Err(BlockError::Truncated);
        }
        if self.trailer[..] != self.sync[..] {
            return Err(BlockError::SyncMarker);
        }
        self.len = match self.codec {
            BlockCodec::Null => size_u,
            BlockCodec::Deflate => inflate(&mut self.inflater, &self.compressed, &mut self.data)?,
        };
        self.pos = 0;
        self.count = count_u;
        self.left = count_u;
        Ok(true)
    }

    /// The header of a container file concatenated to this one (its magic already read).
    fn next_file(&mut self) -> Result<(), BlockError> {
        let header = read_header(&mut std::io::Cursor::new(CONTAINER_MAGIC).chain(&mut self.input))
            .ok_or(BlockError::Truncated)?;
        match (header.schema, header.codec) {
            (Some(schema), Some(codec)) if self.schema_matches(&schema) => {
                self.sync = header.sync;
                self.codec = codec;
                Ok(())
            }
            _ => Err(BlockError::Concatenated),
        }
    }

    /// Whether a concatenated file's schema is the one this reader reads.
    fn schema_matches(&self, schema: &Schema) -> bool {
        self.schema.as_ref().is_some_and(|mine| {
            Some(mine.canonical_form()) == crate::registry::canonical_form(schema)
        })
    }

    /// After an error in the current block: skips to the next block, or, when the block's
    /// framing itself is broken, to just after the next sync marker. Returns the bytes
    /// skipped since the block's start and whether reading can go on.
    fn recover(&mut self, error: &BlockError) -> std::io::Result<(u64, bool)> {
        let framed = matches!(
            error,
            BlockError::Datum(_) | BlockError::Inflate { .. } | BlockError::TrailingBytes { .. }
        );
        self.len = 0;
        self.pos = 0;
        self.left = 0;
        if framed {
            // The block was read whole and its sync marker matched: the next one follows.
            return Ok((self.input.offset - self.block_start, true));
        }
        // Everything read since the block started, in order, is searched first: a corrupt
        // size may have swallowed the blocks after it.
        let mut seen = std::mem::take(&mut self.head);
        if !matches!(error, BlockError::BadHeader { .. } | BlockError::Varint) {
            let raw = match self.codec {
                BlockCodec::Null => &self.data,
                BlockCodec::Deflate => &self.compressed,
            };
            seen.extend_from_slice(raw);
            seen.extend_from_slice(&self.trailer);
        }
        let found = seen
            .windows(16)
            .position(|w| w == self.sync)
            .map(|at| at + 16);
        if let Some(after) = found {
            self.input.unread(&seen[after..]);
            return Ok((self.input.offset - self.block_start, true));
        }
        // Then the input, through a window of the last 16 bytes.
        let keep = seen.len().min(15);
        let mut window: VecDeque<u8> = seen[seen.len() - keep..].iter().copied().collect();
        let mut buf = [0u8; 8192];
        loop {
            let n = match self.input.read(&mut buf) {
                Ok(0) => return Ok((self.input.offset - self.block_start, false)),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            for (i, &b) in buf[..n].iter().enumerate() {
                if window.len() == 16 {
                    window.pop_front();
                }
                window.push_back(b);
                if window.len() == 16 && window.iter().eq(self.sync.iter()) {
                    self.input.unread(&buf[i + 1..n]);
                    return Ok((self.input.offset - self.block_start, true));
                }
            }
        }
    }
}

/// Inflates raw DEFLATE `input` into `out`, reusing its allocation; returns the length.
/// libdeflate inflates whole buffers only: `out` starts at four times the input and
/// doubles while the output does not fit, up to [`MAX_BLOCK_BYTES`]; it keeps its size
/// for the next block, so the retries happen on the first blocks only.
fn inflate(
    inflater: &mut Decompressor,
    input: &[u8],
    out: &mut Vec<u8>,
) -> Result<usize, BlockError> {
    if out.len() < input.len().saturating_mul(4) {
        out.resize(input.len().saturating_mul(4).min(MAX_BLOCK_BYTES), 0);
    }
    loop {
        match inflater.deflate_decompress(input, out) {
            Ok(len) => return Ok(len),
            Err(DecompressionError::InsufficientSpace) if out.len() < MAX_BLOCK_BYTES => {
                let grown = out.len().saturating_mul(2).clamp(1024, MAX_BLOCK_BYTES);
                out.resize(grown, 0);
            }
            Err(DecompressionError::InsufficientSpace) => {
                return Err(BlockError::Inflate {
                    status: format!("more than {MAX_BLOCK_BYTES} bytes"),
                })
            }
            Err(other) => {
                return Err(BlockError::Inflate {
                    status: other.to_string(),
                })
            }
        }
    }
}
