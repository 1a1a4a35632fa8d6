//! A decoder specialised to today's WatchEvent schema (`avro/watch_event.v4.avsc`): one
//! Avro binary datum straight into a [`WatchEvent`], sans I/O.
//!
//! apache-avro's serde path matches every field name as a string and allocates its way
//! through the schema tree; replay and live analysis decode millions of events, so the hot
//! path reads the fields in schema order from a byte slice instead. Everything else stays
//! with apache-avro: older versions (schema resolution), newer versions, other records.
//! The decoder is checked against apache-avro's output on generated events of every kind
//! (`tests/datum.rs`); it is used only while today's schema is the one it is written for
//! (fingerprint [`WATCH_EVENT_FINGERPRINT`]), and only for data of today's schema.
//!
//! Malformed input is a [`WireError`], never a panic; nothing is reserved for a length or
//! count the input does not have the bytes for (an array block's count is checked against
//! the bytes left before anything is reserved for it). The decoder refuses two kinds of
//! malformed data that apache-avro lets through: a varint whose tenth byte overflows 64
//! bits, and an array or map block whose declared byte size disagrees with its items.

use std::collections::BTreeMap;
use std::str::Utf8Error;

use crate::event::{
    EventType, IpInfo, IpPoolAllocation, IpPoolInfo, IpReservationInfo, KindPart, NetworkStatus,
    ObjectMeta, OwnerReference, PodAllocation, PodInfo, Remediation, RemediationOutcome,
    SpiderAllocation, SpiderEndpointAddress, SpiderEndpointInfo, SpiderIpPoolInfo, Stream,
    SubnetInfo, WatchEvent,
};

/// CRC-64-AVRO fingerprint of the schema this decoder is written for (WatchEvent v4), as
/// single-object headers carry it. A new schema version has another fingerprint: its data
/// goes to apache-avro until this decoder is brought up to date (a test fails meanwhile).
pub const WATCH_EVENT_FINGERPRINT: [u8; 8] = [0x1f, 0xa3, 0x3b, 0x5e, 0xb5, 0xd5, 0x1d, 0x63];

/// Why bytes are not a WatchEvent v4 datum. Offsets count from the start of the datum.
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

/// Decodes the WatchEvent v4 datum at the front of `input` and advances `input` past it
/// (a datum in a container block is followed by the next one); on error `input` is left
/// as it was.
#[inline]
pub fn read_watch_event(input: &mut &[u8]) -> Result<WatchEvent, WireError> {
    let mut cursor = Cursor {
        rest: input,
        total: input.len(),
    };
    // The result is returned as it is: a WatchEvent is some 500 bytes, not to be copied
    // out of one `Result` into another.
    let event = cursor.watch_event();
    if event.is_ok() {
        *input = cursor.rest;
    }
    event
}

/// Decodes `input` as exactly one WatchEvent v4 datum; bytes after it are an error.
pub fn decode_watch_event(mut input: &[u8]) -> Result<WatchEvent, WireError> {
    let event = read_watch_event(&mut input)?;
    if !input.is_empty() {
        return Err(WireError::TrailingBytes { extra: input.len() });
    }
    Ok(event)
}

const STREAMS: [Stream; 8] = [
    Stream::Pod,
    Stream::Ip,
    Stream::Subnet,
    Stream::IpPool,
    Stream::OverlappingRangeIpReservation,
    Stream::SpiderIpPool,
    Stream::SpiderEndpoint,
    Stream::Unknown,
];

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

/// The bytes not read yet, and the datum's length to turn them into offsets.
struct Cursor<'a> {
    rest: &'a [u8],
    total: usize,
}

type Result<T, E = WireError> = std::result::Result<T, E>;

// Every multi-field structure below is a struct expression whose fields are written in
// schema order: Rust evaluates field initialisers in the order written, so that is the
// order the bytes are read in.
impl<'a> Cursor<'a> {
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
        let length = self.length(field)?;
        let offset = self.offset();
        let bytes = self.bytes(field, length)?;
        std::str::from_utf8(bytes).map_err(|source| WireError::Utf8 {
            field,
            offset,
            source,
        })
    }

    #[inline(always)]
    fn string(&mut self, field: &'static str) -> Result<String> {
        // Empty strings (unset fields) are common: no validation, no copy.
        if let [0, rest @ ..] = self.rest {
            self.rest = rest;
            return Ok(String::new());
        }
        self.str(field).map(str::to_owned)
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

    fn watch_event(&mut self) -> Result<WatchEvent> {
        let cluster_id = self.string("cluster_id")?;
        let collector_id = self.string("collector_id")?;
        let sequence = self.long("sequence")?;
        let stream = self.symbol("stream", &STREAMS)?;
        let event_type = self.symbol("event_type", &EVENT_TYPES)?;
        let resource_version = self.string("resource_version")?;
        let resource_version_num = self.optional_long("resource_version_num")?;
        let observed_at_ms = self.optional_long("observed_at_ms")?;
        let metadata = self.optional("metadata", Self::object_meta)?;
        // One optional field per kind on the wire; the event keeps the one of its stream
        // (the serde path reads them all and does the same).
        let mut part = None;
        self.part("ip", Stream::Ip, stream, &mut part, Self::ip, KindPart::Ip)?;
        self.part(
            "subnet",
            Stream::Subnet,
            stream,
            &mut part,
            Self::subnet,
            KindPart::Subnet,
        )?;
        self.part(
            "pod",
            Stream::Pod,
            stream,
            &mut part,
            Self::pod,
            KindPart::Pod,
        )?;
        let raw_object = self.optional_string("raw_object")?;
        let remediation = self.optional("remediation", Self::remediation)?;
        self.part(
            "ip_pool",
            Stream::IpPool,
            stream,
            &mut part,
            Self::ip_pool,
            KindPart::IpPool,
        )?;
        self.part(
            "ip_reservation",
            Stream::OverlappingRangeIpReservation,
            stream,
            &mut part,
            Self::ip_reservation,
            KindPart::IpReservation,
        )?;
        self.part(
            "spider_ip_pool",
            Stream::SpiderIpPool,
            stream,
            &mut part,
            Self::spider_ip_pool,
            KindPart::SpiderIpPool,
        )?;
        self.part(
            "spider_endpoint",
            Stream::SpiderEndpoint,
            stream,
            &mut part,
            Self::spider_endpoint,
            KindPart::SpiderEndpoint,
        )?;
        Ok(WatchEvent {
            cluster_id,
            collector_id,
            sequence,
            stream,
            event_type,
            resource_version,
            resource_version_num,
            observed_at_ms,
            metadata,
            part,
            raw_object,
            remediation,
        })
    }

    /// One of the per-kind optional fields: read in any case (it must be well-formed),
    /// kept when it is of the event's stream.
    #[inline(always)]
    fn part<P>(
        &mut self,
        field: &'static str,
        kind: Stream,
        stream: Stream,
        part: &mut Option<KindPart>,
        read: impl FnOnce(&mut Self) -> Result<P>,
        wrap: impl FnOnce(Box<P>) -> KindPart,
    ) -> Result<()> {
        if self.present(field)? {
            let found = read(self)?;
            if kind == stream {
                *part = Some(wrap(Box::new(found)));
            }
        }
        Ok(())
    }

    fn object_meta(&mut self) -> Result<ObjectMeta> {
        Ok(ObjectMeta {
            uid: self.string("metadata.uid")?,
            name: self.string("metadata.name")?,
            namespace: self.optional_string("metadata.namespace")?,
            generation: self.optional_long("metadata.generation")?,
            creation_timestamp_ms: self.optional_long("metadata.creation_timestamp_ms")?,
            deletion_timestamp_ms: self.optional_long("metadata.deletion_timestamp_ms")?,
            finalizers: self.strings("metadata.finalizers")?,
            // api_version, kind, name, uid: one byte each at least; controller's branch one.
            owner_references: self.array("metadata.owner_references", 5, Self::owner_reference)?,
            labels: self.string_map("metadata.labels")?,
            annotations: self.string_map("metadata.annotations")?,
            last_update_ms: self.optional_long("metadata.last_update_ms")?,
        })
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

    fn ip(&mut self) -> Result<IpInfo> {
        Ok(IpInfo {
            subnet: self.string("ip.subnet")?,
            attach_subnets: self.strings("ip.attach_subnets")?,
            pod_name: self.string("ip.pod_name")?,
            pod_namespace: self.string("ip.pod_namespace")?,
            node_name: self.string("ip.node_name")?,
            ip_address: self.string("ip.ip_address")?,
            v4_ip_address: self.string("ip.v4_ip_address")?,
            v6_ip_address: self.string("ip.v6_ip_address")?,
            attach_ips: self.strings("ip.attach_ips")?,
            mac_address: self.string("ip.mac_address")?,
            pod_type: self.string("ip.pod_type")?,
        })
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

    fn pod(&mut self) -> Result<PodInfo> {
        Ok(PodInfo {
            phase: self.string("pod.phase")?,
            node_name: self.string("pod.node_name")?,
            pod_ips: self.strings("pod.pod_ips")?,
            // Five strings and a boolean.
            allocations: self.array("pod.allocations", 6, Self::pod_allocation)?,
            // Four strings (one of them the ips array's end) and a boolean.
            network_status: self.array("pod.network_status", 5, Self::network_status)?,
            disruption_target: self.boolean("pod.disruption_target")?,
        })
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

    fn remediation(&mut self) -> Result<Remediation> {
        Ok(Remediation {
            command_id: self.string("remediation.command_id")?,
            reason_alert_id: self.string("remediation.reason_alert_id")?,
            action: self.string("remediation.action")?,
            outcome: self.symbol("remediation.outcome", &OUTCOMES)?,
            reason: self.string("remediation.reason")?,
            finalizer: self.optional_string("remediation.finalizer")?,
        })
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
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}
