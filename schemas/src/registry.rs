//! Every version of every ipaudit schema, with its fingerprint and a resolver to today's.
//!
//! Old versions stay here for ever: a reader of today's schema must read every one of them
//! (Avro schema resolution, tested in `tests/compatibility.rs`).

use std::sync::OnceLock;

use apache_avro::{
    from_value, rabin::Rabin, reader::datum::GenericDatumReader, types::Value,
    writer::datum::GenericDatumWriter, Schema,
};
use serde::{de::DeserializeOwned, Serialize};

use crate::datum::{Fields, WireVersion};
use crate::{Alert, CleanupCommand, WatchEvent};

/// One version of one schema.
pub struct SchemaVersion {
    /// Version number, from 1.
    pub version: u32,
    /// The `.avsc` text.
    pub text: &'static str,
    /// The parsed schema.
    pub schema: &'static Schema,
    /// CRC-64-AVRO (Rabin) fingerprint of its canonical form, as single-object headers carry it.
    pub fingerprint: [u8; 8],
}

/// All versions of one record's schema; the last one is current.
pub struct SchemaSet {
    versions: Vec<SchemaVersion>,
    /// A datum reader and writer for each version, by index in `versions`.
    codecs: Vec<(GenericDatumReader<'static>, GenericDatumWriter<'static>)>,
}

/// Why one datum could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DatumError {
    /// apache-avro could not decode it.
    #[error(transparent)]
    Avro(#[from] apache_avro::Error),
    /// The decoder specialised to today's schema could not decode it.
    #[error(transparent)]
    Wire(#[from] crate::datum::WireError),
    /// The data ended inside the datum. apache-avro's `Value` path can return a value for
    /// cut data; re-encoding tells: the value needs more bytes than were there.
    #[error("datum is truncated: it encodes to {needed} bytes, only {found} were there")]
    Truncated {
        /// Bytes the decoded value encodes to.
        needed: usize,
        /// Bytes consumed.
        found: usize,
    },
}

impl SchemaSet {
    fn build(texts: &[&'static str]) -> SchemaSet {
        let versions: Vec<SchemaVersion> = texts
            .iter()
            .enumerate()
            .map(|(index, text)| {
                // The .avsc files are compiled in and tested: failing to parse one is a bug.
                let schema = Schema::parse_str(text).expect("bundled .avsc parses");
                let schema: &'static Schema = Box::leak(Box::new(schema));
                let fingerprint = fingerprint(schema).expect("bundled .avsc has a canonical form");
                SchemaVersion {
                    version: index as u32 + 1,
                    text,
                    schema,
                    fingerprint,
                }
            })
            .collect();
        let codecs = versions
            .iter()
            .map(|v| {
                let reader = GenericDatumReader::builder(v.schema).build();
                let writer = GenericDatumWriter::builder(v.schema).build();
                (
                    reader.expect("bundled schemas resolve"),
                    writer.expect("bundled schemas resolve"),
                )
            })
            .collect();
        SchemaSet { versions, codecs }
    }

    /// Every version, oldest first.
    pub fn versions(&self) -> &[SchemaVersion] {
        &self.versions
    }

    /// Today's version.
    pub fn current(&self) -> &SchemaVersion {
        self.versions.last().expect("at least one version")
    }

    /// The version whose fingerprint this is, by index.
    pub fn position_of_fingerprint(&self, fingerprint: &[u8]) -> Option<usize> {
        self.versions
            .iter()
            .position(|v| v.fingerprint == fingerprint)
    }

    /// The version equal to a schema found in a file (compared by canonical form).
    pub fn position_of_schema(&self, schema: &Schema) -> Option<usize> {
        let canonical = canonical_form(schema)?;
        self.versions
            .iter()
            .position(|v| v.schema.canonical_form() == canonical)
    }

    /// Whether version `index` is today's.
    pub fn is_current(&self, index: usize) -> bool {
        index + 1 == self.versions.len()
    }

    /// Reads one datum written with version `index`, every field: with the record's own
    /// decoder where it has one for that version ([`Record::read_version`]), else with
    /// [`Record::read_current`] for today's schema and through `Value` and resolution for
    /// older ones.
    pub fn read_datum<T: Record>(&self, index: usize, body: &mut &[u8]) -> Result<T, DatumError> {
        T::read_version(index, body, &Fields::ALL)
    }

    /// Reads one datum of an older version `index` through apache-avro's `Value` and
    /// schema resolution to today's: the default of [`Record::read_version`], and the
    /// reference the specialised decoders of older versions are tested against.
    pub fn read_datum_resolving<T: Record>(
        &self,
        index: usize,
        body: &mut &[u8],
    ) -> Result<T, DatumError> {
        let (reader, writer) = &self.codecs[index];
        let value = read_value_whole(reader, writer, body)?;
        self.resolve(value)
    }

    /// Reads one datum of today's schema on apache-avro's serde path (it errors on
    /// truncation, where the `Value` path may not): the default [`Record::read_current`],
    /// and the reference the specialised decoders are tested against.
    pub fn read_current_serde<T: Record>(&self, body: &mut &[u8]) -> Result<T, DatumError> {
        let (reader, _) = self.codecs.last().expect("at least one version");
        Ok(reader.read_deser(body)?)
    }

    /// Turns a value of an older version into today's record.
    pub fn resolve<T: Record>(&self, value: Value) -> Result<T, DatumError> {
        Ok(from_value(&value.resolve(self.current().schema)?)?)
    }
}

/// Reads the datum at the front of `body` through apache-avro's `Value` (`reader`, and
/// `writer` of the same schema), advancing `body` past it; cut data is an error.
///
/// apache-avro reads a union whose branch index is not there (the data ends) as null, so a
/// datum cut before a union reads as a value. Re-encoding tells when the value needs more
/// bytes than were there, but not when the datum spent bytes that re-encoding does not (a
/// varint written longer than it needs, an array block with its byte size): so a datum
/// that ends exactly where the data does is read again with one byte more (branch 1),
/// which a complete datum never reaches.
pub(crate) fn read_value_whole(
    reader: &GenericDatumReader<'_>,
    writer: &GenericDatumWriter<'_>,
    body: &mut &[u8],
) -> Result<Value, DatumError> {
    let input = *body;
    let value = reader.read_value(body)?;
    let found = input.len() - body.len();
    let mut reencoded = Vec::with_capacity(found);
    writer.write_value_ref(&mut reencoded, &value)?;
    let needed = reencoded.len();
    // A writer may split arrays into more blocks than we do, never into fewer bytes.
    if needed > found {
        return Err(DatumError::Truncated { needed, found });
    }
    if body.is_empty() {
        let mut longer = Vec::with_capacity(found + 1);
        longer.extend_from_slice(input);
        longer.push(0x02);
        let mut rest = &longer[..];
        if !(reader.read_value(&mut rest).is_ok() && rest.len() == 1) {
            return Err(DatumError::Truncated {
                needed: found + 1,
                found,
            });
        }
    }
    Ok(value)
}

/// CRC-64-AVRO of the schema's Parsing Canonical Form, as Java and fastavro compute it.
///
/// apache-avro 0.22 keeps a logical type's primitive as `{"type":"long"}` in the canonical
/// form, where the specification strips it to `"long"`; its own fingerprint then differs
/// from every other implementation's. Canonical form holds no other braces around a lone
/// `type`, so the fix-up is exact.
/// `None` for a schema whose canonical form apache-avro cannot compute ([`canonical_form`]).
pub fn fingerprint(schema: &Schema) -> Option<[u8; 8]> {
    let mut canonical = canonical_form(schema)?;
    for primitive in [
        "null", "boolean", "int", "long", "float", "double", "bytes", "string",
    ] {
        canonical = canonical.replace(
            &format!("{{\"type\":\"{primitive}\"}}"),
            &format!("\"{primitive}\""),
        );
    }
    // The fixed-up form, parsed again, has no logical types left: its canonical form is
    // itself, and apache-avro's Rabin digest of it is the standard fingerprint.
    let plain = Schema::parse_str(&canonical).ok()?;
    plain.fingerprint::<Rabin>().bytes.try_into().ok()
}

/// The schema's Parsing Canonical Form, or `None` where apache-avro 0.22 would panic
/// computing it: on a value under a key the form keeps (`name`, `type`, `fields`,
/// `symbols`, `items`, `values`) that is no object, string or array, or a `size`,
/// `precision` or `scale` that is no integer. `Schema::parse` accepts such keys as custom
/// attributes of a field (`"symbols": null`, found by the avro_container fuzz target), and
/// schemas come from files and the schemas topic: the form of one must never stop a
/// reader.
pub fn canonical_form(schema: &Schema) -> Option<String> {
    fn computable(json: &serde_json::Value) -> bool {
        use serde_json::Value;
        match json {
            Value::Object(map) => map.iter().all(|(key, value)| match key.as_str() {
                "size" | "precision" | "scale" => {
                    value.as_i64().is_some()
                        || value.as_str().is_some_and(|s| s.parse::<i64>().is_ok())
                }
                "name" | "type" | "fields" | "symbols" | "items" | "values" => computable(value),
                _ => true,
            }),
            Value::String(_) => true,
            Value::Array(items) => items.iter().all(computable),
            _ => false,
        }
    }
    computable(&serde_json::to_value(schema).ok()?).then(|| schema.canonical_form())
}

/// A record type with Avro schemas under `schemas/avro/`.
pub trait Record: Serialize + DeserializeOwned + 'static {
    /// The record's full Avro name.
    const NAME: &'static str;
    /// Its schemas, every version.
    fn schemas() -> &'static SchemaSet;

    /// Reads the datum of today's schema at the front of `body`, advancing `body` past it.
    /// apache-avro's serde path unless the record has a decoder specialised to its schema.
    fn read_current(body: &mut &[u8]) -> Result<Self, DatumError> {
        Self::schemas().read_current_serde(body)
    }

    /// Reads the datum of schema version `index` (in [`SchemaSet::versions`]) at the front
    /// of `body`, advancing `body` past it. `fields` says what the caller wants of a
    /// WatchEvent; records without a specialised decoder read every field: today's
    /// version with [`Record::read_current`], older ones through `Value` and resolution.
    fn read_version(index: usize, body: &mut &[u8], fields: &Fields) -> Result<Self, DatumError> {
        let _ = fields;
        let set = Self::schemas();
        if set.is_current(index) {
            Self::read_current(body)
        } else {
            set.read_datum_resolving(index, body)
        }
    }

    /// [`Record::read_version`] into `into`, a record read before: records with a
    /// specialised decoder fill it in place, reusing its allocations (see
    /// [`crate::datum::read_watch_event_into`]). On error `into` may hold parts of both.
    fn read_version_into(
        index: usize,
        body: &mut &[u8],
        fields: &Fields,
        into: &mut Self,
    ) -> Result<(), DatumError> {
        *into = Self::read_version(index, body, fields)?;
        Ok(())
    }
}

macro_rules! record {
    ($ty:ty, $name:literal, [$($file:literal),+ $(,)?] $(, $read_current:item)*) => {
        impl Record for $ty {
            const NAME: &'static str = $name;
            fn schemas() -> &'static SchemaSet {
                static SET: OnceLock<SchemaSet> = OnceLock::new();
                SET.get_or_init(|| {
                    SchemaSet::build(&[$(include_str!(concat!("../avro/", $file))),+])
                })
            }
            $($read_current)*
        }
    };
}

record!(
    WatchEvent,
    "io.ipaudit.WatchEvent",
    [
        "watch_event.v1.avsc",
        "watch_event.v2.avsc",
        "watch_event.v3.avsc",
        "watch_event.v4.avsc",
        "watch_event.v5.avsc"
    ],
    // The hot path of replay and live analysis. The decoder is written for one schema
    // version: a newer current version falls back to the serde path until the decoder
    // is brought up to date (the fingerprint test in tests/datum.rs fails meanwhile).
    #[inline]
    fn read_current(body: &mut &[u8]) -> Result<Self, DatumError> {
        if Self::schemas().current().fingerprint == crate::datum::WATCH_EVENT_FINGERPRINT {
            Ok(crate::datum::read_watch_event(body)?)
        } else {
            Self::schemas().read_current_serde(body)
        }
    },
    // Every version whose fingerprint the decoder knows is read by it (versions are kept
    // in order, so version `index` has the decoder's fingerprint `index`); one it does not
    // know goes to apache-avro.
    #[inline]
    fn read_version(index: usize, body: &mut &[u8], fields: &Fields) -> Result<Self, DatumError> {
        match known_wire_version(index) {
            Some(version) => Ok(crate::datum::read_watch_event_of(version, fields, body)?),
            None => read_watch_event_elsewhere(index, body),
        }
    },
    #[inline]
    fn read_version_into(
        index: usize,
        body: &mut &[u8],
        fields: &Fields,
        into: &mut Self,
    ) -> Result<(), DatumError> {
        match known_wire_version(index) {
            Some(version) => Ok(crate::datum::read_watch_event_into(
                version, fields, body, into,
            )?),
            None => {
                *into = read_watch_event_elsewhere(index, body)?;
                Ok(())
            }
        }
    }
);

/// The specialised decoder's version for WatchEvent schema version `index`, if it was
/// written for it (versions are kept in order, so version `index` has the decoder's
/// fingerprint `index`).
#[inline]
fn known_wire_version(index: usize) -> Option<WireVersion> {
    let set = WatchEvent::schemas();
    WireVersion::ALL
        .get(index)
        .filter(|v| v.fingerprint() == set.versions()[index].fingerprint)
        .copied()
}

/// A WatchEvent version the specialised decoder does not know: apache-avro reads it.
#[cold]
fn read_watch_event_elsewhere(index: usize, body: &mut &[u8]) -> Result<WatchEvent, DatumError> {
    let set = WatchEvent::schemas();
    if set.is_current(index) {
        set.read_current_serde(body)
    } else {
        set.read_datum_resolving(index, body)
    }
}
record!(
    Alert,
    "io.ipaudit.Alert",
    [
        "alert.v1.avsc",
        "alert.v2.avsc",
        "alert.v3.avsc",
        "alert.v4.avsc",
        "alert.v5.avsc",
        "alert.v6.avsc",
        "alert.v7.avsc"
    ]
);
record!(
    CleanupCommand,
    "io.ipaudit.CleanupCommand",
    [
        "cleanup_command.v1.avsc",
        "cleanup_command.v2.avsc",
        "cleanup_command.v3.avsc"
    ]
);

#[cfg(test)]
mod tests {
    use super::*;

    /// WatchEvent v1, every optional field null: cluster_id, collector_id, sequence, stream,
    /// event_type, resource_version, then six null unions (resource_version_num to pod).
    const MINIMAL_V1: [u8; 12] = [0; 12];

    #[test]
    fn a_datum_cut_at_a_union_is_truncated_even_when_a_longer_varint_hides_the_missing_byte() {
        let set = WatchEvent::schemas();
        let mut whole = &MINIMAL_V1[..];
        assert!(set
            .read_datum_resolving::<WatchEvent>(0, &mut whole)
            .is_ok());
        // sequence 0 written in two bytes (0x80 0x00), and the last union's branch cut:
        // as long as the minimal datum, which it re-encodes to.
        let mut cut = vec![0, 0, 0x80, 0x00];
        cut.extend_from_slice(&MINIMAL_V1[3..11]);
        assert_eq!(cut.len(), MINIMAL_V1.len());
        let result = set.read_datum_resolving::<WatchEvent>(0, &mut &cut[..]);
        assert!(
            matches!(
                result,
                Err(DatumError::Truncated {
                    needed: 13,
                    found: 12
                })
            ),
            "{result:?}"
        );
        // Complete, with the longer varint, it reads.
        let mut longer = vec![0, 0, 0x80, 0x00];
        longer.extend_from_slice(&MINIMAL_V1[3..]);
        assert!(set
            .read_datum_resolving::<WatchEvent>(0, &mut &longer[..])
            .is_ok());
    }
}
