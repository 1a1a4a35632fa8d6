//! Kafka messages: Avro single-object encoding (`C3 01`, 8-byte CRC-64-AVRO fingerprint,
//! then the datum), readable by any Avro implementation that knows the schema.

use crate::datum::Fields;
use crate::registry::{DatumError, Record};
use crate::writer_schemas::WriterSchemas;

/// The two magic bytes that open every single-object-encoded message.
pub const MAGIC: [u8; 2] = [0xC3, 0x01];
/// Magic plus fingerprint.
pub const HEADER_LEN: usize = 10;

/// Why a message could not be encoded.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode {record} as Avro")]
pub struct EncodeError {
    /// The record type.
    pub record: &'static str,
    /// What apache-avro said.
    #[source]
    pub source: apache_avro::Error,
}

/// Why bytes could not be decoded into a record. None of these is retryable: the bytes
/// are what they are; count them and dead-letter them.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than a header.
    #[error("message of {len} bytes is shorter than the 10-byte Avro single-object header")]
    TooShort {
        /// Bytes received.
        len: usize,
    },
    /// Not single-object encoded.
    #[error("message does not start with the Avro single-object magic C3 01 (found {found:02X?})")]
    BadMagic {
        /// The first two bytes.
        found: [u8; 2],
    },
    /// A fingerprint no version of the expected schema has.
    #[error("unknown schema fingerprint {fingerprint:016x} for {record}: written with a schema this build does not know")]
    UnknownFingerprint {
        /// The record type expected.
        record: &'static str,
        /// The fingerprint, as a little-endian integer.
        fingerprint: u64,
    },
    /// The datum does not match its schema (truncated, corrupt).
    #[error("malformed {record} datum (schema v{version})")]
    Malformed {
        /// The record type.
        record: &'static str,
        /// The writer's schema version.
        version: u32,
        /// What was wrong.
        #[source]
        source: DatumError,
    },
    /// The datum does not match the learnt schema it names (truncated, corrupt).
    #[error("malformed {record} datum (learnt schema {fingerprint:016x})")]
    MalformedLearnt {
        /// The record type.
        record: &'static str,
        /// The writer schema's fingerprint, as a little-endian integer.
        fingerprint: u64,
        /// What was wrong.
        #[source]
        source: DatumError,
    },
    /// Bytes left after a complete datum.
    #[error("{extra} unexpected bytes after a complete {record} datum")]
    TrailingBytes {
        /// The record type.
        record: &'static str,
        /// How many bytes were left.
        extra: usize,
    },
}

/// Encodes a record with today's schema, single-object framed.
pub fn encode<T: Record>(record: &T) -> Result<Vec<u8>, EncodeError> {
    let current = T::schemas().current();
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&current.fingerprint);
    apache_avro::writer::datum::GenericDatumWriter::builder(current.schema)
        .build()
        .and_then(|writer| writer.write_ser(&mut out, record))
        .map_err(|source| EncodeError {
            record: T::NAME,
            source,
        })?;
    Ok(out)
}

/// Encodes a record with version `version` (from 1) of its schema, for readers that do
/// not know today's: fields that version does not have are left out (the caller makes sure
/// they hold nothing it needs). A version this build does not have is today's.
pub fn encode_as<T: Record>(record: &T, version: u32) -> Result<Vec<u8>, EncodeError> {
    let set = T::schemas();
    let Some(older) = set
        .versions()
        .iter()
        .find(|v| v.version == version && !std::ptr::eq(*v, set.current()))
    else {
        return encode(record);
    };
    let error = |source| EncodeError {
        record: T::NAME,
        source,
    };
    let value = apache_avro::to_value(record)
        .and_then(|v| v.resolve(older.schema))
        .map_err(error)?;
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&older.fingerprint);
    apache_avro::writer::datum::GenericDatumWriter::builder(older.schema)
        .build()
        .and_then(|writer| writer.write_value_ref(&mut out, &value))
        .map_err(error)?;
    Ok(out)
}

/// Decodes a single-object-encoded record written with any known version of its schema.
pub fn decode<T: Record>(bytes: &[u8]) -> Result<T, DecodeError> {
    decode_with(bytes, &WriterSchemas::new())
}

/// [`decode`], also reading records written with a schema learnt from the schemas topic
/// (see [`crate::writer_schemas`]).
pub fn decode_with<T: Record>(bytes: &[u8], learnt: &WriterSchemas) -> Result<T, DecodeError> {
    match datum::<T>(bytes, learnt)? {
        Datum::OfThisBuild {
            index,
            version,
            mut body,
        } => {
            let record = T::schemas()
                .read_datum::<T>(index, &mut body)
                .map_err(|source| malformed::<T>(version, source))?;
            no_trailing_bytes::<T>(body)?;
            Ok(record)
        }
        Datum::Learnt { fingerprint, body } => read_learnt(learnt, fingerprint, body),
    }
}

/// [`decode`] into `into`, a record decoded before, keeping `fields` (of a WatchEvent;
/// other records are read whole): a record with a specialised decoder is filled in place,
/// reusing its allocations (see [`Record::read_version_into`]), so that a consumer that
/// hands each record back allocates next to nothing. On error `into` may hold parts of
/// two records.
pub fn decode_into<T: Record>(
    bytes: &[u8],
    fields: &Fields,
    into: &mut T,
) -> Result<(), DecodeError> {
    decode_into_with(bytes, fields, into, &WriterSchemas::new())
}

/// [`decode_into`], also reading records written with a schema learnt from the schemas
/// topic (those are read whole, through schema resolution: the slow path).
pub fn decode_into_with<T: Record>(
    bytes: &[u8],
    fields: &Fields,
    into: &mut T,
    learnt: &WriterSchemas,
) -> Result<(), DecodeError> {
    match datum::<T>(bytes, learnt)? {
        Datum::OfThisBuild {
            index,
            version,
            mut body,
        } => {
            T::read_version_into(index, &mut body, fields, into)
                .map_err(|source| malformed::<T>(version, source))?;
            no_trailing_bytes::<T>(body)
        }
        Datum::Learnt { fingerprint, body } => {
            *into = read_learnt(learnt, fingerprint, body)?;
            Ok(())
        }
    }
}

/// The fingerprint of a single-object message, when it has the header: what
/// [`DecodeError::UnknownFingerprint`] names, as the schemas topic keys it.
pub fn fingerprint_of(bytes: &[u8]) -> Option<[u8; 8]> {
    if bytes.len() >= HEADER_LEN && bytes[..2] == MAGIC {
        bytes[2..HEADER_LEN].try_into().ok()
    } else {
        None
    }
}

/// A message's datum, and the schema it was written with.
enum Datum<'a> {
    /// A version of this build's (index in the record's schemas, and number).
    OfThisBuild {
        index: usize,
        version: u32,
        body: &'a [u8],
    },
    /// A schema learnt from the schemas topic.
    Learnt {
        fingerprint: &'a [u8],
        body: &'a [u8],
    },
}

fn malformed<T: Record>(version: u32, source: DatumError) -> DecodeError {
    DecodeError::Malformed {
        record: T::NAME,
        version,
        source,
    }
}

fn read_learnt<T: Record>(
    learnt: &WriterSchemas,
    fingerprint: &[u8],
    mut body: &[u8],
) -> Result<T, DecodeError> {
    let record = learnt
        .read_datum::<T>(fingerprint, &mut body)
        .ok_or_else(|| unknown::<T>(fingerprint))?
        .map_err(|source| DecodeError::MalformedLearnt {
            record: T::NAME,
            fingerprint: fingerprint_number(fingerprint),
            source,
        })?;
    no_trailing_bytes::<T>(body)?;
    Ok(record)
}

fn fingerprint_number(fingerprint: &[u8]) -> u64 {
    u64::from_le_bytes(fingerprint.try_into().unwrap_or_default())
}

fn unknown<T: Record>(fingerprint: &[u8]) -> DecodeError {
    DecodeError::UnknownFingerprint {
        record: T::NAME,
        fingerprint: fingerprint_number(fingerprint),
    }
}

/// A message's schema and datum.
fn datum<'a, T: Record>(bytes: &'a [u8], learnt: &WriterSchemas) -> Result<Datum<'a>, DecodeError> {
    if bytes.len() < HEADER_LEN {
        return Err(DecodeError::TooShort { len: bytes.len() });
    }
    if bytes[..2] != MAGIC {
        return Err(DecodeError::BadMagic {
            found: [bytes[0], bytes[1]],
        });
    }
    let set = T::schemas();
    let fingerprint = &bytes[2..HEADER_LEN];
    let body = &bytes[HEADER_LEN..];
    match set.position_of_fingerprint(fingerprint) {
        Some(index) => Ok(Datum::OfThisBuild {
            index,
            version: set.versions()[index].version,
            body,
        }),
        None if learnt.knows::<T>(fingerprint) => Ok(Datum::Learnt { fingerprint, body }),
        None => Err(unknown::<T>(fingerprint)),
    }
}

/// Bytes after a complete datum are an error.
fn no_trailing_bytes<T: Record>(body: &[u8]) -> Result<(), DecodeError> {
    if body.is_empty() {
        Ok(())
    } else {
        Err(DecodeError::TrailingBytes {
            record: T::NAME,
            extra: body.len(),
        })
    }
}
