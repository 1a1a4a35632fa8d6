//! Writer schemas this build does not carry, learnt from the wire: a newer collector
//! publishes each schema it writes with to the compacted schemas topic (`ipaudit.schemas`)
//! before its first message with it, keyed by the fingerprint its messages carry. A reader
//! that meets an unknown fingerprint learns the schema from there ([`WriterSchemas::learn`])
//! and reads those messages by Avro schema resolution to today's schema, as it reads a
//! recording of a newer collector: a kind it does not know arrives as
//! [`crate::Stream::Unknown`], counted and skipped by the analysis.
//!
//! A record of the topic has the 8 fingerprint bytes as key, exactly as single-object
//! messages carry them after their magic, and the schema's JSON (its `.avsc` text) as value.
//! It is trusted only as far as it checks: the key must be the schema's
//! own fingerprint, the schema must be of the record type read, and today's schema must be
//! able to read it. Anything else is refused with a [`WriterSchemaError`].

use std::collections::HashMap;

use apache_avro::schema_compatibility::SchemaCompatibility;
use apache_avro::{reader::datum::GenericDatumReader, writer::datum::GenericDatumWriter, Schema};

use crate::registry::{fingerprint, DatumError, Record};

/// The default name of the schemas topic.
pub const DEFAULT_TOPIC: &str = "ipaudit.schemas";

/// At most this many learnt schemas are kept: a schema is one per release of the
/// collector, so a topic with more holds something else (and each costs memory for good).
pub const MAX_LEARNT: usize = 256;

/// Why a record of the schemas topic was not learnt. None is retryable: the record is what
/// it is; log it, count it and go on with the others.
#[derive(Debug, thiserror::Error)]
pub enum WriterSchemaError {
    /// The key is not 8 bytes.
    #[error("schemas topic key of {len} bytes is no 8-byte fingerprint")]
    Key {
        /// The key's length.
        len: usize,
    },
    /// The value is not an Avro schema.
    #[error("schemas topic value under {fingerprint:016x} is no Avro schema")]
    Unparsable {
        /// The key, as a little-endian integer (as decode errors print it).
        fingerprint: u64,
        /// What apache-avro said.
        #[source]
        source: apache_avro::Error,
    },
    /// The schema has no Parsing Canonical Form apache-avro can compute (a field with a
    /// reserved key of an odd value, e.g. `"symbols": null`): no fingerprint to check.
    #[error("schemas topic schema under {fingerprint:016x} has no canonical form to fingerprint")]
    NoCanonicalForm {
        /// The key, as a little-endian integer.
        fingerprint: u64,
    },
    /// The schema's fingerprint is not its key.
    #[error("schema under key {key:016x} has fingerprint {computed:016x}")]
    FingerprintMismatch {
        /// The key.
        key: u64,
        /// The schema's own fingerprint.
        computed: u64,
    },
    /// The schema is another record type's.
    #[error("schema {fingerprint:016x} is of {found}, not {expected}")]
    OtherRecord {
        /// The record type read.
        expected: &'static str,
        /// The schema's name.
        found: String,
        /// The fingerprint.
        fingerprint: u64,
    },
    /// Today's schema cannot read data written with it.
    #[error(
        "schema {fingerprint:016x} of {record} cannot be read as this build's version: {reason}"
    )]
    Incompatible {
        /// The record type.
        record: &'static str,
        /// The fingerprint.
        fingerprint: u64,
        /// apache-avro's verdict.
        reason: String,
    },
    /// [`MAX_LEARNT`] schemas are known already.
    #[error("{MAX_LEARNT} writer schemas learnt already: schema {fingerprint:016x} is not kept")]
    Full {
        /// The fingerprint.
        fingerprint: u64,
    },
}

/// One learnt schema, with its datum codecs.
struct Learnt {
    record: &'static str,
    reader: GenericDatumReader<'static>,
    writer: GenericDatumWriter<'static>,
}

/// Writer schemas learnt from the schemas topic, by fingerprint.
#[derive(Default)]
pub struct WriterSchemas {
    by_fingerprint: HashMap<[u8; 8], Learnt>,
}

impl std::fmt::Debug for WriterSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(
                self.by_fingerprint
                    .keys()
                    .map(|k| format!("{:016x}", le(k))),
            )
            .finish()
    }
}

fn le(bytes: &[u8; 8]) -> u64 {
    u64::from_le_bytes(*bytes)
}

impl WriterSchemas {
    /// None learnt yet.
    pub fn new() -> WriterSchemas {
        WriterSchemas::default()
    }

    /// How many schemas were learnt.
    pub fn len(&self) -> usize {
        self.by_fingerprint.len()
    }

    /// Whether none was learnt.
    pub fn is_empty(&self) -> bool {
        self.by_fingerprint.is_empty()
    }

    /// Whether data with this fingerprint can be read (learnt, or of this build).
    pub fn knows<T: Record>(&self, fingerprint: &[u8]) -> bool {
        T::schemas().position_of_fingerprint(fingerprint).is_some()
            || <[u8; 8]>::try_from(fingerprint)
                .ok()
                .and_then(|f| self.by_fingerprint.get(&f))
                .is_some_and(|l| l.record == T::NAME)
    }

    /// Learns one record of the schemas topic (`key` the fingerprint, `value` the schema's
    /// JSON) as a writer schema of `T`. `Ok(true)`: learnt now; `Ok(false)`: known before
    /// (this build's own versions are known from the start).
    pub fn learn<T: Record>(
        &mut self,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool, WriterSchemaError> {
        let key: [u8; 8] = key
            .try_into()
            .map_err(|_| WriterSchemaError::Key { len: key.len() })?;
        if self.knows::<T>(&key) {
            return Ok(false);
        }
        let text = String::from_utf8_lossy(value);
        let schema = Schema::parse_str(&text).map_err(|source| WriterSchemaError::Unparsable {
            fingerprint: le(&key),
            source,
        })?;
        let computed = fingerprint(&schema).ok_or(WriterSchemaError::NoCanonicalForm {
            fingerprint: le(&key),
        })?;
        if computed != key {
            return Err(WriterSchemaError::FingerprintMismatch {
                key: le(&key),
                computed: le(&computed),
            });
        }
        let found = schema
            .name()
            .map_or_else(|| "(unnamed)".to_owned(), |n| n.fullname(None));
        if found != T::NAME {
            return Err(WriterSchemaError::OtherRecord {
                expected: T::NAME,
                found,
                fingerprint: le(&key),
            });
        }
        let incompatible = |reason: String| WriterSchemaError::Incompatible {
            record: T::NAME,
            fingerprint: le(&key),
            reason,
        };
        SchemaCompatibility::can_read(&schema, T::schemas().current().schema)
            .map_err(|e| incompatible(e.to_string()))?;
        if self.by_fingerprint.len() >= MAX_LEARNT {
            return Err(WriterSchemaError::Full {
                fingerprint: le(&key),
            });
        }
        // The codecs borrow their schema for as long as they live, which is as long as the
        // process: at most MAX_LEARNT schemas, each checked above, are leaked.
        let schema: &'static Schema = Box::leak(Box::new(schema));
        let reader = GenericDatumReader::builder(schema)
            .build()
            .map_err(|e| incompatible(e.to_string()))?;
        let writer = GenericDatumWriter::builder(schema)
            .build()
            .map_err(|e| incompatible(e.to_string()))?;
        self.by_fingerprint.insert(
            key,
            Learnt {
                record: T::NAME,
                reader,
                writer,
            },
        );
        Ok(true)
    }

    /// Reads one datum written with the learnt schema `fingerprint` as today's `T`; `None`
    /// when no schema of `T` was learnt under it.
    pub(crate) fn read_datum<T: Record>(
        &self,
        fingerprint: &[u8],
        body: &mut &[u8],
    ) -> Option<Result<T, DatumError>> {
        let learnt = <[u8; 8]>::try_from(fingerprint)
            .ok()
            .and_then(|f| self.by_fingerprint.get(&f))
            .filter(|l| l.record == T::NAME)?;
        Some(read_resolving(learnt, body))
    }
}

/// A datum of a learnt schema, through apache-avro's `Value` and resolution to today's.
fn read_resolving<T: Record>(learnt: &Learnt, body: &mut &[u8]) -> Result<T, DatumError> {
    // As for older versions: the `Value` path may return a value for cut data.
    let value = crate::registry::read_value_whole(&learnt.reader, &learnt.writer, body)?;
    T::schemas().resolve(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WatchEvent;

    fn schema_json_with_extra_field() -> String {
        let mut json: serde_json::Value =
            serde_json::from_str(WatchEvent::schemas().current().text).unwrap();
        json["fields"].as_array_mut().unwrap().push(
            serde_json::json!({"name": "extra", "type": ["null", "string"], "default": null}),
        );
        json.to_string()
    }

    #[test]
    fn a_schema_is_learnt_only_under_its_own_fingerprint() {
        let text = schema_json_with_extra_field();
        let own = fingerprint(&Schema::parse_str(&text).unwrap()).unwrap();
        let mut learnt = WriterSchemas::new();
        let mut wrong = own;
        wrong[0] ^= 1;
        assert!(matches!(
            learnt.learn::<WatchEvent>(&wrong, text.as_bytes()),
            Err(WriterSchemaError::FingerprintMismatch { .. })
        ));
        assert!(matches!(
            learnt.learn::<WatchEvent>(&own[..7], text.as_bytes()),
            Err(WriterSchemaError::Key { len: 7 })
        ));
        assert!(!learnt.knows::<WatchEvent>(&own));
        assert!(learnt.learn::<WatchEvent>(&own, text.as_bytes()).unwrap());
        assert!(learnt.knows::<WatchEvent>(&own));
        assert!(
            !learnt.learn::<WatchEvent>(&own, text.as_bytes()).unwrap(),
            "known now"
        );
        assert_eq!(learnt.len(), 1);
    }

    #[test]
    fn this_builds_own_versions_are_known_without_learning() {
        let mut learnt = WriterSchemas::new();
        let current = WatchEvent::schemas().current();
        assert!(learnt.knows::<WatchEvent>(&current.fingerprint));
        assert!(!learnt
            .learn::<WatchEvent>(&current.fingerprint, current.text.as_bytes())
            .unwrap());
        assert!(learnt.is_empty());
    }

    #[test]
    fn garbage_another_record_and_an_unreadable_schema_are_refused() {
        let mut learnt = WriterSchemas::new();
        assert!(matches!(
            learnt.learn::<WatchEvent>(&[1; 8], b"{not json"),
            Err(WriterSchemaError::Unparsable { .. })
        ));
        let other =
            r#"{"type":"record","name":"io.example.Other","fields":[{"name":"a","type":"int"}]}"#;
        let other_fp = fingerprint(&Schema::parse_str(other).unwrap()).unwrap();
        assert!(matches!(
            learnt.learn::<WatchEvent>(&other_fp, other.as_bytes()),
            Err(WriterSchemaError::OtherRecord { .. })
        ));
        // A WatchEvent whose cluster_id became an int: today's reader cannot take it.
        let mut json: serde_json::Value =
            serde_json::from_str(WatchEvent::schemas().current().text).unwrap();
        json["fields"][0]["type"] = "int".into();
        let text = json.to_string();
        let fp = fingerprint(&Schema::parse_str(&text).unwrap()).unwrap();
        assert!(matches!(
            learnt.learn::<WatchEvent>(&fp, text.as_bytes()),
            Err(WriterSchemaError::Incompatible { .. })
        ));
        assert!(learnt.is_empty());
    }
}
