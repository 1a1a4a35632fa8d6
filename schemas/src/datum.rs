//! A decoder specialised to the WatchEvent schema: one Avro binary datum of any kept
//! version (`avro/watch_event.v1.avsc` to `v5`) straight into today's [`WatchEvent`], sans
//! I/O.
//!
//! apache-avro's serde path matches every field name as a string and allocates its way
//! through the schema tree, and data of an older version goes through its `Value` tree and
//! schema resolution, several times slower again; replay and live analysis decode millions
//! of events, so the hot path reads the fields in the writer schema's order from a byte
//! slice instead, one reader per version (a const parameter: the checks for fields a
//! version lacks cost nothing at run time), filling what an older version lacks with the
//! defaults resolution would give. What the caller does not want ([`Fields`]: the raw
//! object, annotations, owner references, labels but a few) is checked as apache-avro
//! would check it and skipped, never copied. Everything else stays with apache-avro:
//! versions newer than this build, other records. The decoder is checked against
//! apache-avro's output on generated events of every kind and version, and on cut, flipped
//! and random bytes (`tests/datum.rs`); it is used only for the schema versions whose
//! fingerprints it was written for ([`WATCH_EVENT_FINGERPRINTS`]). A caller that reads
//! event after event hands the one before back ([`read_watch_event_into`]): its strings
//! and lists are filled in place, so that reading an event allocates next to nothing.
//!
//! Malformed input is a [`WireError`], never a panic; nothing is reserved for a length or
//! count the input does not have the bytes for (an array block's count is checked against
//! the bytes left before anything is reserved for it). The decoder refuses two kinds of
//! malformed data that apache-avro lets through: a varint whose tenth byte overflows 64
//! bits, and an array or map block whose declared byte size disagrees with its items.

use std::collections::BTreeMap;
use std::str::Utf8Error;

use crate::event::{
    CalicoAffinityInfo, CalicoAllocation, CalicoBlockInfo, CalicoHandleBlock, CalicoHandleInfo,
    CalicoPoolInfo, CiliumEndpointInfo, CiliumNodeInfo, CiliumUsedAddress, EventType, IpInfo,
    IpPoolAllocation, IpPoolInfo, IpReservationInfo, KindPart, NetworkStatus, NodeInfo, ObjectMeta,
    OwnerReference, PodAllocation, PodInfo, Remediation, RemediationOutcome, SpiderAllocation,
    SpiderEndpointAddress, SpiderEndpointInfo, SpiderIpPoolInfo, Stream, SubnetInfo, WatchEvent,
};

/// CRC-64-AVRO fingerprint of today's schema this decoder is written for (WatchEvent v5),
/// as single-object headers carry it. A new schema version has another fingerprint: its
/// data goes to apache-avro until this decoder is brought up to date (a test fails
/// meanwhile).
pub const WATCH_EVENT_FINGERPRINT: [u8; 8] = WATCH_EVENT_FINGERPRINTS[4];

/// CRC-64-AVRO fingerprints of the versions this decoder reads, v1 first: the version of
/// `schemas/avro/watch_event.v{N}.avsc` is its index plus one.
pub const WATCH_EVENT_FINGERPRINTS: [[u8; 8]; 5] = [
    [0x42, 0x76, 0x37, 0x77, 0x06, 0xf3, 0x63, 0x19],
    [0xb1, 0xad, 0x52, 0x42, 0x3b, 0xdd, 0x85, 0x0f],
    [0x85, 0x83, 0x66, 0xea, 0x9a, 0x6b, 0xc4, 0xa6],
    [0x1f, 0xa3, 0x3b, 0x5e, 0xb5, 0xd5, 0x1d, 0x63],
    [0x5c, 0x78, 0xd7, 0xa7, 0x6a, 0x08, 0xde, 0x10],
];

/// A WatchEvent schema version this decoder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WireVersion {
    /// `watch_event.v1.avsc`: three streams, seven event types.
    V1 = 1,
    /// v2 adds `raw_object` and `metadata.last_update_ms`.
    V2 = 2,
    /// v3 adds the REMEDIATION event type and `remediation`.
    V3 = 3,
    /// v4 adds the whereabouts and spiderpool kinds, the UNKNOWN stream and the pods'
    /// network-status and disruption target.
    V4 = 4,
    /// v5 (today's) adds Calico's kinds in both API groups, Cilium's and core Nodes, the
    /// pods' host network and Calico container id, and metadata's deletion grace period.
    V5 = 5,
}

impl WireVersion {
    /// Every version, oldest first.
    pub const ALL: [WireVersion; 5] = [Self::V1, Self::V2, Self::V3, Self::V4, Self::V5];

    /// The version with this number (1 to 5).
    pub fn from_number(number: u32) -> Option<Self> {
        Self::ALL.get((number as usize).checked_sub(1)?).copied()
    }

    /// The version whose schema has this fingerprint.
    pub fn of_fingerprint(fingerprint: &[u8]) -> Option<Self> {
        let index = WATCH_EVENT_FINGERPRINTS
            .iter()
            .position(|f| f[..] == *fingerprint)?;
        Some(Self::ALL[index])
    }

    /// The fingerprint of its schema.
    pub fn fingerprint(self) -> [u8; 8] {
        WATCH_EVENT_FINGERPRINTS[self as usize - 1]
    }
}

/// Which fields of a WatchEvent the caller wants. What is not wanted is read as far as the
/// schema requires (lengths, UTF-8, block sizes: the same errors as reading it) and left
/// out: the field is empty or `None` in the result. Replay and analysis want none of the
/// fields that can be large and that no rule reads ([`Fields::ANALYSIS`]); a collector or a
/// tool that shows or re-encodes events wants all of them ([`Fields::ALL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields {
    /// `raw_object`: the object as the API server sent it, when captured (v2 and later).
    pub raw_object: bool,
    /// `metadata.annotations`.
    pub annotations: bool,
    /// `metadata.owner_references`.
    pub owner_references: bool,
    /// `metadata.labels`: every label, or only those with one of these keys.
    pub labels: Labels,
    /// What a kind's part says that no rule reads: a pod's node and allocations (its
    /// addresses come from its network-status, its IPs and its IP records) and, of its
    /// network-status, the default network (the primary CNI's: its IP records hold those
    /// addresses) and every network's interface and MAC address; an IP's node, per-family
    /// addresses and MAC address (`ip_address` holds both families).
    pub part_details: bool,
}

/// Which labels [`Fields`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Labels {
    /// Every label.
    All,
    /// Only labels with one of these keys.
    Only(&'static [&'static str]),
}

impl Fields {
    /// Every field: the event exactly as written.
    pub const ALL: Fields = Fields {
        raw_object: true,
        annotations: true,
        owner_references: true,
        labels: Labels::All,
        part_details: true,
    };

    /// What analysis reads: no raw object, annotations, owner references or part
    /// details, and only the labels with one of these keys (the rules read kube-ovn's
    /// `ip_reserved` label).
    pub const fn analysis(labels: &'static [&'static str]) -> Fields {
        Fields {
            raw_object: false,
            annotations: false,
            owner_references: false,
            labels: Labels::Only(labels),
            part_details: false,
        }
    }

    /// What analysis reads, with no labels at all.
    pub const ANALYSIS: Fields = Fields::analysis(&[]);
}

impl Default for Fields {
    fn default() -> Self {
        Fields::ALL
    }
}

/// Why bytes are not a WatchEvent datum. Offsets count from the start of the datum.
/// None is retryable: the bytes are what they are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The input ends inside the datum.
    #[error("datum is truncated: it ends at byte {offset} inside {field}")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Where the input ended.
        offset: usize,
    },
    /// A varint runs over ten bytes or 64 bits.
    #[error("{field}: the integer at byte {offset} exceeds 64 bits")]
    VarintOverflow {
        /// The field being read.
        field: &'static str,
        /// Where the integer starts.
        offset: usize,
    },
    /// A string length or a block byte size is negative.
    #[error("{field}: negative length {length} at byte {offset}")]
    NegativeLength {
        /// The field being read.
        field: &'static str,
        /// The length found.
        length: i64,
        /// Where the length starts.
        offset: usize,
    },
    /// A union branch other than 0 (null) and 1 (the value).
    #[error("{field}: union branch {index} at byte {offset}; the schema has 0 (null) and 1")]
    UnionBranch {
        /// The field being read.
        field: &'static str,
        /// The branch found.
        index: i64,
        /// Where the branch index starts.
        offset: usize,
    },
    /// An enum symbol index out of range.
    #[error("{field}: symbol {index} at byte {offset}; the enum has {symbols} symbols")]
    EnumSymbol {
        /// The field being read.
        field: &'static str,
        /// The index found.
        index: i64,
        /// How many symbols the enum has.
        symbols: usize,
        /// Where the index starts.
        offset: usize,
    },
    /// A boolean byte other than 0 and 1.
    #[error("{field}: byte {byte:#04x} at {offset} is not a boolean (0 or 1)")]
    Boolean {
        /// The field being read.
        field: &'static str,
        /// The byte found.
        byte: u8,
        /// Where it is.
        offset: usize,
    },
    /// A string that is not UTF-8.
    #[error("{field}: the string at byte {offset} is not UTF-8")]
    Utf8 {
        /// The field being read.
        field: &'static str,
        /// Where the string's bytes start.
        offset: usize,
        /// What was wrong with it.
        #[source]
        source: Utf8Error,
    },
    /// An array or map block claims more items than the bytes left could hold.
    #[error("{field}: a block of {count} items at byte {offset} cannot fit in the {remaining} bytes left")]
    BlockCount {
        /// The field being read.
        field: &'static str,
        /// The item count found.
        count: u64,
        /// Bytes left after the count.
        remaining: usize,
        /// Where the count starts.
        offset: usize,
    },
    /// A block's declared byte size (negative-count form) differs from its items' size.
    #[error(
        "{field}: the block at byte {offset} declares {declared} bytes; its items take {actual}"
    )]
    BlockSize {
        /// The field being read.
        field: &'static str,
        /// The byte size declared.
        declared: u64,
        /// The bytes its items took.
        actual: usize,
        /// Where the block's items start.
        offset: usize,
    },
    /// Bytes left after a complete datum where the whole input is one datum.
    #[error("{extra} unexpected bytes after a complete datum")]
    TrailingBytes {
        /// How many bytes were left.
        extra: usize,
    },
}

/// Decodes the WatchEvent v5 datum at the front of `input`, every field, and advances
/// `input` past it (a datum in a container block is followed by the next one); on error
/// `input` is left as it was.
#[inline]
pub fn read_watch_event(input: &mut &[u8]) -> Result<WatchEvent, WireError> {
    read_watch_event_of(WireVersion::V5, &Fields::ALL, input)
}

/// Decodes the datum of WatchEvent schema `version` at the front of `input` into today's
/// [`WatchEvent`], keeping `fields`, and advances `input` past it; on error `input` is
/// left as it was. What an older version lacks is filled as schema resolution does (the
/// schemas' defaults: `None`, empty, `false`).
#[inline]
pub fn read_watch_event_of(
    version: WireVersion,
    fields: &Fields,
    input: &mut &[u8],
) -> Result<WatchEvent, WireError> {
    let mut event = WatchEvent::blank();
    read_watch_event_into(version, fields, input, &mut event)?;
    Ok(event)
}

/// [`read_watch_event_of`] into `event`, an event read before (or a default one): every
/// field is overwritten, and its strings and lists are filled in place, so that reading
/// an event like the one before allocates nothing (replay hands the events it analysed
/// back to be read into again). The result is the same as a fresh read's, capacities
/// aside. On error `input` is left as it was and `event` holds parts of both: read into
/// it again or drop it.
#[inline]
pub fn read_watch_event_into(
    version: WireVersion,
    fields: &Fields,
    input: &mut &[u8],
    event: &mut WatchEvent,
) -> Result<(), WireError> {
    match version {
        WireVersion::V5 => read::<5>(fields, input, event),
        WireVersion::V4 => read::<4>(fields, input, event),
        WireVersion::V3 => read::<3>(fields, input, event),
        WireVersion::V2 => read::<2>(fields, input, event),
        WireVersion::V1 => read::<1>(fields, input, event),
    }
}

#[inline(always)]
fn read<const V: u8>(
    fields: &Fields,
    input: &mut &[u8],
    event: &mut WatchEvent,
) -> Result<(), WireError> {
    let mut cursor = Cursor::<V>::new(input, fields, true);
    if cursor.watch_event(event).is_ok() {
        *input = cursor.rest;
        return Ok(());
    }
    // Checked together, a bad skipped string is found late, and an error met after it
    // would be reported in its place: read again, checking one by one, for the error the
    // bytes give in order, at its place.
    read_checking_each::<V>(fields, input, event)
}

#[cold]
#[inline(never)]
fn read_checking_each<const V: u8>(
    fields: &Fields,
    input: &mut &[u8],
    event: &mut WatchEvent,
) -> Result<(), WireError> {
    let mut cursor = Cursor::<V>::new(input, fields, false);
    cursor.watch_event(event)?;
    *input = cursor.rest;
    Ok(())
}

/// Decodes `input` as exactly one WatchEvent v5 datum; bytes after it are an error.
pub fn decode_watch_event(input: &[u8]) -> Result<WatchEvent, WireError> {
    decode_watch_event_of(WireVersion::V5, &Fields::ALL, input)
}

/// Decodes `input` as exactly one datum of `version`, keeping `fields`; bytes after it
/// are an error.
pub fn decode_watch_event_of(
    version: WireVersion,
    fields: &Fields,
    mut input: &[u8],
) -> Result<WatchEvent, WireError> {
    let event = read_watch_event_of(version, fields, &mut input)?;
    if !input.is_empty() {
        return Err(WireError::TrailingBytes { extra: input.len() });
    }
    Ok(event)
}

const STREAMS: [Stream; 19] = Stream::ALL;

const EVENT_TYPES: [EventType; 8] = [
    EventType::Added,
    EventType::Modified,
    EventType::Deleted,
    EventType::Bookmark,
    EventType::SyncStart,
    EventType::SyncEnd,
    EventType::DeletedOnRelist,
    EventType::Remediation,
];

const OUTCOMES: [RemediationOutcome; 4] = [
    RemediationOutcome::Applied,
    RemediationOutcome::DryRun,
    RemediationOutcome::Skipped,
    RemediationOutcome::Failed,
];

/// An array or map block being read.
struct Block {
    /// Items in the block.
    count: usize,
    /// Its size in bytes, when written with a negative count.
    declared: Option<u64>,
    /// Offset of its first item.
    start: usize,
}

/// The bytes not read yet, the datum's length to turn them into offsets, and the fields
/// wanted; `V` is the writer's schema version.
struct Cursor<'a, const V: u8> {
    /// The whole datum (and what follows it).
    whole: &'a [u8],
    rest: &'a [u8],
    total: usize,
    fields: Fields,
    /// Whether skipped strings are checked together ([`Cursor::skip_str`]) rather than one
    /// by one.
    together: bool,
    /// The span (offsets) of skipped strings not checked yet: from the first one's start to
    /// the last one's end, with only ASCII bytes between them.
    unchecked: Option<(usize, usize)>,
}

type Result<T, E = WireError> = std::result::Result<T, E>;

/// A kind's part, as [`KindPart`] holds it.
trait KindPartOf: Default {
    fn wrap(part: Box<Self>) -> KindPart;
    /// The part's box, when it is of this kind.
    fn unwrap(part: KindPart) -> Option<Box<Self>>;
}

macro_rules! kind_part_of {
    ($($ty:ty => $variant:ident),* $(,)?) => {$(
        impl KindPartOf for $ty {
            fn wrap(part: Box<Self>) -> KindPart {
                KindPart::$variant(part)
            }
            fn unwrap(part: KindPart) -> Option<Box<Self>> {
                match part {
                    KindPart::$variant(part) => Some(part),
                    _ => None,
                }
            }
        }
    )*};
}

kind_part_of!(
    IpInfo => Ip,
    SubnetInfo => Subnet,
    PodInfo => Pod,
    IpPoolInfo => IpPool,
    IpReservationInfo => IpReservation,
    SpiderIpPoolInfo => SpiderIpPool,
    SpiderEndpointInfo => SpiderEndpoint,
    NodeInfo => Node,
    CalicoBlockInfo => CalicoBlock,
    CalicoHandleInfo => CalicoHandle,
    CalicoAffinityInfo => CalicoAffinity,
    CalicoPoolInfo => CalicoPool,
    CiliumNodeInfo => CiliumNode,
    CiliumEndpointInfo => CiliumEndpoint,
);

/// The kind parts of a datum being read: which one is kept, and the part of the event
/// read before, to read the kept one into when it is of the same kind.
struct Parts {
    /// The event's stream, canonical: both of a Calico kind's streams carry its part.
    stream: Stream,
    before: Option<KindPart>,
    kept: Option<KindPart>,
}

// Every multi-field structure below is read in schema order: as statements in that order
// where it is read in place, else as a struct expression whose fields are written in that
// order (Rust evaluates field initialisers in the order written).
impl<'a, const V: u8> Cursor<'a, V> {
    fn new(input: &'a [u8], fields: &Fields, together: bool) -> Self {
        Cursor {
            whole: input,
            rest: input,
            total: input.len(),
            fields: *fields,
            together,
            unchecked: None,
        }
    }

    fn offset(&self) -> usize {
        self.total - self.rest.len()
    }

    #[cold]
    fn truncated(&self, field: &'static str) -> WireError {
        WireError::Truncated {
            field,
            offset: self.total,
        }
    }

    /// A zigzag varint long. One-byte values (most lengths, indexes and flags) take the
    /// first branch; longer ones the second while ten bytes are left (any varint fits).
    #[inline(always)]
    fn long(&mut self, field: &'static str) -> Result<i64> {
        match self.rest {
            [byte, rest @ ..] if *byte < 0x80 => {
                self.rest = rest;
                Ok(unzigzag(u64::from(*byte)))
            }
            rest if rest.len() >= 10 => self.long_multi_byte(field),
            _ => self.long_near_end(field),
        }
    }

    #[inline]
    fn long_multi_byte(&mut self, field: &'static str) -> Result<i64> {
        let Some((bytes, _)) = self.rest.split_first_chunk::<10>() else {
            return self.long_near_end(field);
        };
        let mut value = 0u64;
        for (i, &byte) in bytes.iter().enumerate() {
            value |= u64::from(byte & 0x7F) << (7 * i);
            if byte < 0x80 {
                // The tenth byte holds bit 63 only; anything above overflows.
                if i == 9 && byte > 1 {
                    break;
                }
                self.rest = &self.rest[i + 1..];
                return Ok(unzigzag(value));
            }
        }
        Err(WireError::VarintOverflow {
            field,
            offset: self.offset(),
        })
    }

    /// A varint within the last ten bytes of the datum: it may be cut.
    #[cold]
    fn long_near_end(&mut self, field: &'static str) -> Result<i64> {
        let mut value = 0u64;
        for (i, &byte) in self.rest.iter().enumerate() {
            value |= u64::from(byte & 0x7F) << (7 * i);
            if byte < 0x80 {
                self.rest = &self.rest[i + 1..];
                return Ok(unzigzag(value));
            }
        }
        Err(self.truncated(field))
    }

    /// A non-negative length, not checked against the bytes left.
    #[inline(always)]
    fn length(&mut self, field: &'static str) -> Result<u64> {
        let offset = self.offset();
        let length = self.long(field)?;
        u64::try_from(length).map_err(|_| WireError::NegativeLength {
            field,
            length,
            offset,
        })
    }

    #[inline(always)]
    fn bytes(&mut self, field: &'static str, length: u64) -> Result<&'a [u8]> {
        if length > self.rest.len() as u64 {
            return Err(self.truncated(field));
        }
        let (bytes, rest) = self.rest.split_at(length as usize);
        self.rest = rest;
        Ok(bytes)
    }

    #[inline(always)]
    fn str(&mut self, field: &'static str) -> Result<&'a str> {
        let (start, bytes) = self.raw_str(field)?;
        utf8(field, start, bytes)
    }

    /// A string read and dropped. Its UTF-8 check is put off and made on a span of them
    /// at once (the call per string costs more than the check of a short one): the span
    /// of skipped strings grows while only ASCII bytes (lengths, counts, flags, strings
    /// read) lie between them, so that the span is UTF-8 exactly when each of them is (an
    /// ASCII byte is never part of a longer character).
    #[inline(always)]
    fn skip_str(&mut self, field: &'static str) -> Result<()> {
        let (start, bytes) = self.raw_str(field)?;
        self.put_off_check(field, start, bytes)
    }

    /// A string's bytes, unchecked, and the offset they start at.
    #[inline(always)]
    fn raw_str(&mut self, field: &'static str) -> Result<(usize, &'a [u8])> {
        let length = self.length(field)?;
        let start = self.offset();
        Ok((start, self.bytes(field, length)?))
    }

    /// Puts off the check of the string just read, `bytes` at offset `start` (when
    /// skipped strings are checked together; else checks it now).
    #[inline(always)]
    fn put_off_check(&mut self, field: &'static str, start: usize, bytes: &[u8]) -> Result<()> {
        if !self.together {
            return utf8(field, start, bytes).map(drop);
        }
        let end = self.offset();
        match self.unchecked {
            Some((first, last)) if self.whole[last..start].is_ascii() => {
                self.unchecked = Some((first, end));
            }
            _ => {
                self.check_unchecked()?;
                self.unchecked = Some((start, end));
            }
        }
        Ok(())
    }

    /// Checks the span of skipped strings not checked yet. The error names the span, not
    /// the string: the caller reads the datum again to find which one it was.
    #[inline]
    fn check_unchecked(&mut self) -> Result<()> {
        if let Some((first, last)) = self.unchecked.take() {
            std::str::from_utf8(&self.whole[first..last]).map_err(|source| WireError::Utf8 {
                field: "skipped strings",
                offset: first,
                source,
            })?;
        }
        Ok(())
    }

    #[inline(always)]
    fn string(&mut self, field: &'static str) -> Result<String> {
        let mut string = String::new();
        self.string_into(field, &mut string)?;
        Ok(string)
    }

    /// [`Cursor::string`] into `into`, in its buffer when it has one.
    #[inline(always)]
    fn string_into(&mut self, field: &'static str, into: &mut String) -> Result<()> {
        // Empty strings (unset fields) are common: no validation, no copy.
        if let [0, rest @ ..] = self.rest {
            self.rest = rest;
            into.clear();
            return Ok(());
        }
        let text = self.str(field)?;
        if into.capacity() == 0 {
            // Exactly its length, as a fresh read gives (events are held by the hundred
            // thousand).
            *into = text.to_owned();
        } else {
            into.clear();
            into.push_str(text);
        }
        Ok(())
    }

    fn boolean(&mut self, field: &'static str) -> Result<bool> {
        match self.rest.first() {
            Some(0) => {
                self.rest = &self.rest[1..];
                Ok(false)
            }
            Some(1) => {
                self.rest = &self.rest[1..];
                Ok(true)
            }
            Some(&byte) => Err(WireError::Boolean {
                field,
                byte,
                offset: self.offset(),
            }),
            None => Err(self.truncated(field)),
        }
    }

    fn symbol<T: Copy>(&mut self, field: &'static str, symbols: &[T]) -> Result<T> {
        let offset = self.offset();
        let index = self.long(field)?;
        usize::try_from(index)
            .ok()
            .and_then(|i| symbols.get(i).copied())
            .ok_or(WireError::EnumSymbol {
                field,
                index,
                symbols: symbols.len(),
                offset,
            })
    }

    /// The branch of a `["null", T]` union: whether a value follows.
    #[inline(always)]
    fn present(&mut self, field: &'static str) -> Result<bool> {
        let offset = self.offset();
        match self.long(field)? {
            0 => Ok(false),
            1 => Ok(true),
            index => Err(WireError::UnionBranch {
                field,
                index,
                offset,
            }),
        }
    }

    #[inline(always)]
    fn optional<T>(
        &mut self,
        field: &'static str,
        read: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<Option<T>> {
        if self.present(field)? {
            read(self).map(Some)
        } else {
            Ok(None)
        }
    }

    #[inline(always)]
    fn optional_long(&mut self, field: &'static str) -> Result<Option<i64>> {
        self.optional(field, |c| c.long(field))
    }

    #[inline(always)]
    fn optional_string(&mut self, field: &'static str) -> Result<Option<String>> {
        self.optional(field, |c| c.string(field))
    }

    /// [`Cursor::optional_string`] into `into`, in its buffer when it has one.
    #[inline(always)]
    fn optional_string_into(
        &mut self,
        field: &'static str,
        into: &mut Option<String>,
    ) -> Result<()> {
        if self.present(field)? {
            self.string_into(field, into.get_or_insert_with(String::new))
        } else {
            *into = None;
            Ok(())
        }
    }

    /// Starts the next block of an array or map: `None` at the end (a zero count).
    /// `min_item_len` is the fewest bytes one item can take: the count is checked against
    /// the bytes left with it, so that what the caller reserves for the block is there.
    fn block(&mut self, field: &'static str, min_item_len: usize) -> Result<Option<Block>> {
        let offset = self.offset();
        let count = self.long(field)?;
        if count == 0 {
            return Ok(None);
        }
        // A negative count is followed by the block's size in bytes (so that readers can
        // skip it); `end_block` checks it against the items.
        let declared = if count < 0 {
            Some(self.length(field)?)
        } else {
            None
        };
        let remaining = self.rest.len();
        let count = count.unsigned_abs();
        if count > (remaining / min_item_len) as u64 {
            return Err(WireError::BlockCount {
                field,
                count,
                remaining,
                offset,
            });
        }
        Ok(Some(Block {
            count: count as usize,
            declared,
            start: self.offset(),
        }))
    }

    fn end_block(&self, field: &'static str, block: Block) -> Result<()> {
        match block.declared {
            Some(declared) if declared != (self.offset() - block.start) as u64 => {
                Err(WireError::BlockSize {
                    field,
                    declared,
                    actual: self.offset() - block.start,
                    offset: block.start,
                })
            }
            _ => Ok(()),
        }
    }

    /// Whether the next byte ends an array or map: most of them are empty.
    #[inline(always)]
    fn empty_collection(&mut self) -> bool {
        match self.rest {
            [0, rest @ ..] => {
                self.rest = rest;
                true
            }
            _ => false,
        }
    }

    #[inline]
    fn array<T>(
        &mut self,
        field: &'static str,
        min_item_len: usize,
        mut read: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        if self.empty_collection() {
            return Ok(Vec::new());
        }
        let mut items = Vec::new();
        while let Some(block) = self.block(field, min_item_len)? {
            // Exactly the first block's count (most arrays are one block), as the serde
            // path does: events are held by the hundred thousand, and `reserve` on an empty
            // vector rounds up to four items.
            if items.is_empty() {
                items.reserve_exact(block.count);
            } else {
                items.reserve(block.count);
            }
            for _ in 0..block.count {
                items.push(read(self)?);
            }
            self.end_block(field, block)?;
        }
        Ok(items)
    }

    #[inline]
    fn strings(&mut self, field: &'static str) -> Result<Vec<String>> {
        self.array(field, 1, |c| c.string(field))
    }

    /// [`Cursor::strings`] into `into`, in its strings' buffers as far as it has them.
    #[inline]
    fn strings_into(&mut self, field: &'static str, into: &mut Vec<String>) -> Result<()> {
        if self.empty_collection() {
            into.clear();
            return Ok(());
        }
        let mut count = 0;
        while let Some(block) = self.block(field, 1)? {
            // As `array` reserves for a fresh list.
            if into.capacity() == 0 {
                into.reserve_exact(block.count);
            }
            for _ in 0..block.count {
                match into.get_mut(count) {
                    Some(string) => self.string_into(field, string)?,
                    None => into.push(self.string(field)?),
                }
                count += 1;
            }
            self.end_block(field, block)?;
        }
        into.truncate(count);
        Ok(())
    }

    /// A `{"type": "map", "values": "string"}`. A key written twice keeps its last value,
    /// as serde's map visitor does.
    #[inline]
    fn string_map(&mut self, field: &'static str) -> Result<BTreeMap<String, String>> {
        let mut map = BTreeMap::new();
        if self.empty_collection() {
            return Ok(map);
        }
        while let Some(block) = self.block(field, 2)? {
            for _ in 0..block.count {
                let key = self.string(field)?;
                let value = self.string(field)?;
                map.insert(key, value);
            }
            self.end_block(field, block)?;
        }
        Ok(map)
    }

    /// A `["null", "string"]` read and dropped: checked, not copied.
    #[inline]
    fn skip_optional_string(&mut self, field: &'static str) -> Result<()> {
        if self.present(field)? {
            self.skip_str(field)?;
        }
        Ok(())
    }

    /// An array read and dropped: the same blocks and checks as [`Cursor::array`].
    #[inline]
    fn skip_array(
        &mut self,
        field: &'static str,
        min_item_len: usize,
        mut skip: impl FnMut(&mut Self) -> Result<()>,
    ) -> Result<()> {
        if self.empty_collection() {
            return Ok(());
        }
        while let Some(block) = self.block(field, min_item_len)? {
            for _ in 0..block.count {
                skip(self)?;
            }
            self.end_block(field, block)?;
        }
        Ok(())
    }

    /// A string map of which only the entries with one of `keys` are kept; the others are
    /// checked (as UTF-8) and dropped without a copy. A key written twice keeps its last
    /// value, as in [`Cursor::string_map`].
    #[inline]
    fn string_map_only(
        &mut self,
        field: &'static str,
        keys: &[&str],
    ) -> Result<BTreeMap<String, String>> {
        let mut map = BTreeMap::new();
        if self.empty_collection() {
            return Ok(map);
        }
        while let Some(block) = self.block(field, 2)? {
            for _ in 0..block.count {
                // Key, then value, checked in that order either way.
                let (key_start, key) = self.raw_str(field)?;
                if keys.iter().any(|wanted| wanted.as_bytes() == key) {
                    let key = utf8(field, key_start, key)?;
                    let value = self.str(field)?;
                    map.insert(key.to_owned(), value.to_owned());
                } else {
                    self.put_off_check(field, key_start, key)?;
                    self.skip_str(field)?;
                }
            }
            self.end_block(field, block)?;
        }
        Ok(map)
    }

    /// Reads every field into `event` (see [`read_watch_event_into`]).
    fn watch_event(&mut self, event: &mut WatchEvent) -> Result<()> {
        self.string_into("cluster_id", &mut event.cluster_id)?;
        self.string_into("collector_id", &mut event.collector_id)?;
        event.sequence = self.long("sequence")?;
        // Older versions have the first symbols of today's enums, in the same order.
        let symbols = match V {
            5.. => 19,
            4 => 8,
            _ => 3,
        };
        let stream = self.symbol("stream", &STREAMS[..symbols])?;
        event.stream = stream;
        event.event_type = self.symbol("event_type", &EVENT_TYPES[..if V >= 3 { 8 } else { 7 }])?;
        self.string_into("resource_version", &mut event.resource_version)?;
        event.resource_version_num = self.optional_long("resource_version_num")?;
        event.observed_at_ms = self.optional_long("observed_at_ms")?;
        if self.present("metadata")? {
            self.object_meta(event.metadata.get_or_insert_with(ObjectMeta::default))?;
        } else {
            event.metadata = None;
        }
        // One optional field per kind on the wire; the event keeps the one of its stream
        // (the serde path reads them all and does the same), read into the part of the
        // event before when that was of the same kind.
        let mut parts = Parts {
            stream: stream.canonical(),
            before: event.part.take(),
            kept: None,
        };
        self.part("ip", Stream::Ip, &mut parts, Self::ip)?;
        self.part(
            "subnet",
            Stream::Subnet,
            &mut parts,
            |c, subnet: &mut SubnetInfo| {
                *subnet = c.subnet()?;
                Ok(())
            },
        )?;
        self.part("pod", Stream::Pod, &mut parts, Self::pod)?;
        if V >= 2 && self.fields.raw_object {
            self.optional_string_into("raw_object", &mut event.raw_object)?;
        } else {
            if V >= 2 {
                self.skip_optional_string("raw_object")?;
            }
            event.raw_object = None;
        }
        event.remediation = if V >= 3 {
            self.optional("remediation", Self::remediation)?
        } else {
            None
        };
        // The whereabouts and spiderpool parts came with v4.
        if V >= 4 {
            self.part(
                "ip_pool",
                Stream::IpPool,
                &mut parts,
                |c, pool: &mut IpPoolInfo| {
                    *pool = c.ip_pool()?;
                    Ok(())
                },
            )?;
            self.part(
                "ip_reservation",
                Stream::OverlappingRangeIpReservation,
                &mut parts,
                |c, reservation: &mut IpReservationInfo| {
                    *reservation = c.ip_reservation()?;
                    Ok(())
                },
            )?;
            self.part(
                "spider_ip_pool",
                Stream::SpiderIpPool,
                &mut parts,
                |c, pool: &mut SpiderIpPoolInfo| {
                    *pool = c.spider_ip_pool()?;
                    Ok(())
                },
            )?;
            self.part(
                "spider_endpoint",
                Stream::SpiderEndpoint,
                &mut parts,
                |c, endpoint: &mut SpiderEndpointInfo| {
                    *endpoint = c.spider_endpoint()?;
                    Ok(())
                },
            )?;
        }
        // Nodes and the Calico and Cilium parts came with v5.
        if V >= 5 {
            self.part(
                "node",
                Stream::Node,
                &mut parts,
                |c, node: &mut NodeInfo| {
                    node.pod_cidrs = c.strings("node.pod_cidrs")?;
                    Ok(())
                },
            )?;
            self.part(
                "calico_block",
                Stream::CalicoIpamBlock,
                &mut parts,
                |c, block: &mut CalicoBlockInfo| {
                    *block = c.calico_block()?;
                    Ok(())
                },
            )?;
            self.part(
                "calico_handle",
                Stream::CalicoIpamHandle,
                &mut parts,
                |c, handle: &mut CalicoHandleInfo| {
                    *handle = c.calico_handle()?;
                    Ok(())
                },
            )?;
            self.part(
                "calico_affinity",
                Stream::CalicoBlockAffinity,
                &mut parts,
                |c, affinity: &mut CalicoAffinityInfo| {
                    *affinity = c.calico_affinity()?;
                    Ok(())
                },
            )?;
            self.part(
                "calico_pool",
                Stream::CalicoIpPool,
                &mut parts,
                |c, pool: &mut CalicoPoolInfo| {
                    *pool = c.calico_pool()?;
                    Ok(())
                },
            )?;
            self.part(
                "cilium_node",
                Stream::CiliumNode,
                &mut parts,
                |c, node: &mut CiliumNodeInfo| {
                    *node = c.cilium_node()?;
                    Ok(())
                },
            )?;
            self.part(
                "cilium_endpoint",
                Stream::CiliumEndpoint,
                &mut parts,
                |c, endpoint: &mut CiliumEndpointInfo| {
                    *endpoint = c.cilium_endpoint()?;
                    Ok(())
                },
            )?;
        }
        self.check_unchecked()?;
        event.part = parts.kept;
        Ok(())
    }

    /// One of the per-kind optional fields: read in any case (it must be well-formed),
    /// kept when it is of the event's stream, read into the part of the event before
    /// when that is of its kind.
    #[inline(always)]
    fn part<P: KindPartOf>(
        &mut self,
        field: &'static str,
        kind: Stream,
        parts: &mut Parts,
        read: impl FnOnce(&mut Self, &mut P) -> Result<()>,
    ) -> Result<()> {
        if !self.present(field)? {
            return Ok(());
        }
        if kind != parts.stream {
            return read(self, &mut P::default());
        }
        let mut part = parts.before.take().and_then(P::unwrap).unwrap_or_default();
        read(self, &mut part)?;
        parts.kept = Some(P::wrap(part));
        Ok(())
    }

    fn object_meta(&mut self, meta: &mut ObjectMeta) -> Result<()> {
        self.string_into("metadata.uid", &mut meta.uid)?;
        self.string_into("metadata.name", &mut meta.name)?;
        self.optional_string_into("metadata.namespace", &mut meta.namespace)?;
        meta.generation = self.optional_long("metadata.generation")?;
        meta.creation_timestamp_ms = self.optional_long("metadata.creation_timestamp_ms")?;
        meta.deletion_timestamp_ms = self.optional_long("metadata.deletion_timestamp_ms")?;
        self.strings_into("metadata.finalizers", &mut meta.finalizers)?;
        meta.owner_references = if self.fields.owner_references {
            // api_version, kind, name, uid: one byte each at least; controller's branch one.
            self.array("metadata.owner_references", 5, Self::owner_reference)?
        } else {
            self.skip_array("metadata.owner_references", 5, |c| {
                c.owner_reference_skipped().map(drop)
            })?;
            Vec::new()
        };
        meta.labels = match self.fields.labels {
            Labels::All => self.string_map("metadata.labels")?,
            Labels::Only(keys) => self.string_map_only("metadata.labels", keys)?,
        };
        meta.annotations = if self.fields.annotations {
            self.string_map("metadata.annotations")?
        } else {
            self.string_map_only("metadata.annotations", &[])?
        };
        meta.last_update_ms = if V >= 2 {
            self.optional_long("metadata.last_update_ms")?
        } else {
            None
        };
        meta.deletion_grace_period_seconds = if V >= 5 {
            self.optional_long("metadata.deletion_grace_period_seconds")?
        } else {
            None
        };
        Ok(())
    }

    /// An owner reference read and dropped: its strings checked, not copied.
    fn owner_reference_skipped(&mut self) -> Result<()> {
        const F: &str = "metadata.owner_references";
        for _ in 0..4 {
            self.skip_str(F)?;
        }
        self.optional(F, |c| c.boolean(F))?;
        Ok(())
    }

    fn owner_reference(&mut self) -> Result<OwnerReference> {
        const F: &str = "metadata.owner_references";
        Ok(OwnerReference {
            api_version: self.string(F)?,
            kind: self.string(F)?,
            name: self.string(F)?,
            uid: self.string(F)?,
            controller: self.optional(F, |c| c.boolean(F))?,
        })
    }

    fn ip(&mut self, ip: &mut IpInfo) -> Result<()> {
        self.string_into("ip.subnet", &mut ip.subnet)?;
        self.strings_into("ip.attach_subnets", &mut ip.attach_subnets)?;
        self.string_into("ip.pod_name", &mut ip.pod_name)?;
        self.string_into("ip.pod_namespace", &mut ip.pod_namespace)?;
        self.detail("ip.node_name", &mut ip.node_name)?;
        self.string_into("ip.ip_address", &mut ip.ip_address)?;
        self.detail("ip.v4_ip_address", &mut ip.v4_ip_address)?;
        self.detail("ip.v6_ip_address", &mut ip.v6_ip_address)?;
        self.strings_into("ip.attach_ips", &mut ip.attach_ips)?;
        self.detail("ip.mac_address", &mut ip.mac_address)?;
        self.string_into("ip.pod_type", &mut ip.pod_type)
    }

    /// A string of a part's details ([`Fields::part_details`]): read, or checked and left
    /// empty.
    #[inline(always)]
    fn detail(&mut self, field: &'static str, into: &mut String) -> Result<()> {
        if self.fields.part_details {
            self.string_into(field, into)
        } else {
            into.clear();
            self.skip_str(field)
        }
    }

    fn subnet(&mut self) -> Result<SubnetInfo> {
        Ok(SubnetInfo {
            cidr_block: self.string("subnet.cidr_block")?,
            vpc: self.string("subnet.vpc")?,
            provider: self.string("subnet.provider")?,
            protocol: self.string("subnet.protocol")?,
            gateway: self.string("subnet.gateway")?,
            v4_using_ips: self.optional_string("subnet.v4_using_ips")?,
            v4_available_ips: self.optional_string("subnet.v4_available_ips")?,
            v6_using_ips: self.optional_string("subnet.v6_using_ips")?,
            v6_available_ips: self.optional_string("subnet.v6_available_ips")?,
        })
    }

    fn pod(&mut self, pod: &mut PodInfo) -> Result<()> {
        self.string_into("pod.phase", &mut pod.phase)?;
        self.detail("pod.node_name", &mut pod.node_name)?;
        // Read for analysis too: the blocks of Calico hold a pod's status.podIPs.
        self.strings_into("pod.pod_ips", &mut pod.pod_ips)?;
        // Five strings and a boolean.
        pod.allocations = if self.fields.part_details {
            self.array("pod.allocations", 6, Self::pod_allocation)?
        } else {
            self.skip_array("pod.allocations", 6, Self::pod_allocation_skipped)?;
            Vec::new()
        };
        // Four strings (one of them the ips array's end) and a boolean.
        pod.network_status = if V < 4 {
            Vec::new()
        } else if self.fields.part_details {
            self.array("pod.network_status", 5, Self::network_status)?
        } else {
            self.networks_read("pod.network_status")?
        };
        pod.disruption_target = V >= 4 && self.boolean("pod.disruption_target")?;
        pod.host_network = V >= 5 && self.boolean("pod.host_network")?;
        if V >= 5 {
            self.string_into("pod.calico_container_id", &mut pod.calico_container_id)?;
        } else {
            pod.calico_container_id.clear();
        }
        Ok(())
    }

    /// A pod allocation read and dropped: its strings checked, not copied.
    fn pod_allocation_skipped(&mut self) -> Result<()> {
        const F: &str = "pod.allocations";
        self.skip_str(F)?;
        self.boolean(F)?;
        for _ in 0..4 {
            self.skip_str(F)?;
        }
        Ok(())
    }

    fn pod_allocation(&mut self) -> Result<PodAllocation> {
        const F: &str = "pod.allocations";
        Ok(PodAllocation {
            provider: self.string(F)?,
            allocated: self.boolean(F)?,
            ip_address: self.string(F)?,
            mac_address: self.string(F)?,
            logical_switch: self.string(F)?,
            cidr: self.string(F)?,
        })
    }

    /// The networks of a pod's network-status that rules read: only those other than the
    /// default (the primary CNI's, whose addresses its own records hold), without their
    /// interface and MAC address. The others are checked and dropped without a copy.
    fn networks_read(&mut self, field: &'static str) -> Result<Vec<NetworkStatus>> {
        const IPS: &str = "pod.network_status.ips";
        let mut kept = Vec::new();
        // The same blocks and checks as `network_status` read through `array`.
        self.skip_array(field, 5, |c| {
            let name = c.str(field)?;
            c.skip_str(field)?;
            let mut ips: smallvec::SmallVec<[&str; 2]> = smallvec::SmallVec::new();
            c.skip_array(IPS, 1, |c| {
                ips.push(c.str(IPS)?);
                Ok(())
            })?;
            c.skip_str(field)?;
            if !c.boolean(field)? {
                kept.push(NetworkStatus {
                    name: name.to_owned(),
                    ips: ips.iter().map(|ip| (*ip).to_owned()).collect(),
                    default: false,
                    ..NetworkStatus::default()
                });
            }
            Ok(())
        })?;
        Ok(kept)
    }

    fn network_status(&mut self) -> Result<NetworkStatus> {
        const F: &str = "pod.network_status";
        Ok(NetworkStatus {
            name: self.string(F)?,
            interface: self.string(F)?,
            ips: self.strings("pod.network_status.ips")?,
            mac: self.string(F)?,
            default: self.boolean(F)?,
        })
    }

    fn remediation(&mut self) -> Result<Box<Remediation>> {
        Ok(Box::new(Remediation {
            command_id: self.string("remediation.command_id")?,
            reason_alert_id: self.string("remediation.reason_alert_id")?,
            action: self.string("remediation.action")?,
            outcome: self.symbol("remediation.outcome", &OUTCOMES)?,
            reason: self.string("remediation.reason")?,
            finalizer: self.optional_string("remediation.finalizer")?,
        }))
    }

    fn ip_pool(&mut self) -> Result<IpPoolInfo> {
        Ok(IpPoolInfo {
            range: self.string("ip_pool.range")?,
            allocations: self.array("ip_pool.allocations", 5, |c| {
                const F: &str = "ip_pool.allocations";
                Ok(IpPoolAllocation {
                    offset: c.string(F)?,
                    address: c.string(F)?,
                    container_id: c.string(F)?,
                    podref: c.string(F)?,
                    ifname: c.string(F)?,
                })
            })?,
        })
    }

    fn ip_reservation(&mut self) -> Result<IpReservationInfo> {
        Ok(IpReservationInfo {
            address: self.string("ip_reservation.address")?,
            podref: self.string("ip_reservation.podref")?,
            ifname: self.string("ip_reservation.ifname")?,
            container_id: self.string("ip_reservation.container_id")?,
        })
    }

    fn spider_ip_pool(&mut self) -> Result<SpiderIpPoolInfo> {
        Ok(SpiderIpPoolInfo {
            subnet: self.string("spider_ip_pool.subnet")?,
            ips: self.strings("spider_ip_pool.ips")?,
            allocations: self.array("spider_ip_pool.allocations", 3, |c| {
                const F: &str = "spider_ip_pool.allocations";
                Ok(SpiderAllocation {
                    address: c.string(F)?,
                    pod: c.string(F)?,
                    pod_uid: c.string(F)?,
                })
            })?,
            allocated_ip_count: self.optional_long("spider_ip_pool.allocated_ip_count")?,
        })
    }

    fn spider_endpoint(&mut self) -> Result<SpiderEndpointInfo> {
        Ok(SpiderEndpointInfo {
            pod_uid: self.string("spider_endpoint.pod_uid")?,
            node: self.string("spider_endpoint.node")?,
            addresses: self.array("spider_endpoint.addresses", 5, |c| {
                const F: &str = "spider_endpoint.addresses";
                Ok(SpiderEndpointAddress {
                    interface: c.string(F)?,
                    ipv4: c.string(F)?,
                    ipv6: c.string(F)?,
                    ipv4_pool: c.string(F)?,
                    ipv6_pool: c.string(F)?,
                })
            })?,
            owner_controller_type: self.string("spider_endpoint.owner_controller_type")?,
            owner_controller_name: self.string("spider_endpoint.owner_controller_name")?,
        })
    }

    fn calico_block(&mut self) -> Result<CalicoBlockInfo> {
        Ok(CalicoBlockInfo {
            cidr: self.string("calico_block.cidr")?,
            affinity: self.string("calico_block.affinity")?,
            // An ordinal, six strings and two unions: nine bytes at least.
            allocations: self.array("calico_block.allocations", 9, |c| {
                const F: &str = "calico_block.allocations";
                Ok(CalicoAllocation {
                    ordinal: c.long(F)?,
                    address: c.string(F)?,
                    handle_id: c.string(F)?,
                    sequence_number: c.optional_long(F)?,
                    namespace: c.string(F)?,
                    pod: c.string(F)?,
                    node: c.string(F)?,
                    r#type: c.string(F)?,
                    released_at_ms: c.optional_long(F)?,
                })
            })?,
            sequence_number: self.long("calico_block.sequence_number")?,
            deleted: self.boolean("calico_block.deleted")?,
        })
    }

    fn calico_handle(&mut self) -> Result<CalicoHandleInfo> {
        Ok(CalicoHandleInfo {
            handle_id: self.string("calico_handle.handle_id")?,
            blocks: self.array("calico_handle.blocks", 2, |c| {
                const F: &str = "calico_handle.blocks";
                Ok(CalicoHandleBlock {
                    cidr: c.string(F)?,
                    count: c.long(F)?,
                })
            })?,
            deleted: self.boolean("calico_handle.deleted")?,
        })
    }

    fn calico_affinity(&mut self) -> Result<CalicoAffinityInfo> {
        Ok(CalicoAffinityInfo {
            node: self.string("calico_affinity.node")?,
            cidr: self.string("calico_affinity.cidr")?,
            state: self.string("calico_affinity.state")?,
            r#type: self.string("calico_affinity.type")?,
            deleted: self.boolean("calico_affinity.deleted")?,
        })
    }

    fn calico_pool(&mut self) -> Result<CalicoPoolInfo> {
        Ok(CalicoPoolInfo {
            cidr: self.string("calico_pool.cidr")?,
            block_size: self.optional_long("calico_pool.block_size")?,
            disabled: self.boolean("calico_pool.disabled")?,
            allowed_uses: self.strings("calico_pool.allowed_uses")?,
        })
    }

    fn cilium_node(&mut self) -> Result<CiliumNodeInfo> {
        Ok(CiliumNodeInfo {
            pod_cidrs: self.strings("cilium_node.pod_cidrs")?,
            allocated_cidrs: self.strings("cilium_node.allocated_cidrs")?,
            used: self.array("cilium_node.used", 3, |c| {
                const F: &str = "cilium_node.used";
                Ok(CiliumUsedAddress {
                    address: c.string(F)?,
                    owner: c.string(F)?,
                    resource: c.string(F)?,
                })
            })?,
            operator_error: self.string("cilium_node.operator_error")?,
        })
    }

    fn cilium_endpoint(&mut self) -> Result<CiliumEndpointInfo> {
        Ok(CiliumEndpointInfo {
            endpoint_id: self.optional_long("cilium_endpoint.endpoint_id")?,
            addresses: self.strings("cilium_endpoint.addresses")?,
            node_ip: self.string("cilium_endpoint.node_ip")?,
            pod: self.string("cilium_endpoint.pod")?,
            container_id: self.string("cilium_endpoint.container_id")?,
            state: self.string("cilium_endpoint.state")?,
        })
    }
}

/// `bytes`, the string at offset `offset` of `field`, as UTF-8.
#[inline(always)]
fn utf8<'a>(field: &'static str, offset: usize, bytes: &'a [u8]) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|source| WireError::Utf8 {
        field,
        offset,
        source,
    })
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}
