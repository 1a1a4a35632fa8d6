//! The decoder specialised to today's WatchEvent schema (`ipaudit_schemas::datum`) and the
//! container reader built on it, checked against apache-avro on the same bytes: generated
//! events of every kind, cut, flipped and random bytes, container files of both codecs.

use std::collections::BTreeMap;

use apache_avro::{
    reader::datum::GenericDatumReader, to_value, types::Value, writer::datum::GenericDatumWriter,
    Codec, DeflateSettings, Reader,
};
use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::container::{BlockError, ContainerReader, ContainerWriter};
use ipaudit_schemas::datum::{
    decode_watch_event, decode_watch_event_of, read_watch_event, read_watch_event_into, Fields,
    WireError, WireVersion, WATCH_EVENT_FINGERPRINT,
};
use ipaudit_schemas::{
    decode, encode, CalicoAffinityInfo, CalicoAllocation, CalicoBlockInfo, CalicoHandleBlock,
    CalicoHandleInfo, CalicoPoolInfo, CiliumEndpointInfo, CiliumNodeInfo, CiliumUsedAddress,
    ContainerError, DecodeError, EventType, IpInfo, IpPoolAllocation, IpPoolInfo,
    IpReservationInfo, KindPart, NetworkStatus, NodeInfo, ObjectMeta, OwnerReference,
    PodAllocation, PodInfo, Record, Remediation, RemediationOutcome, SpiderAllocation,
    SpiderEndpointAddress, SpiderEndpointInfo, SpiderIpPoolInfo, Stream, SubnetInfo, WatchEvent,
};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::select;

// ---- Generators: every field, empty and non-empty collections, unicode, every enum value.

/// Empty, short ASCII, any unicode (control characters, astral planes), and long enough
/// for a two-byte length.
fn text() -> BoxedStrategy<String> {
    prop_oneof![
        2 => Just(String::new()),
        4 => "[a-z0-9./-]{1,12}",
        3 => any::<String>(),
        1 => "\\PC{64,90}",
    ]
    .boxed()
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(text())
}

/// Small and extreme values: one-byte and ten-byte varints.
fn long() -> BoxedStrategy<i64> {
    prop_oneof![
        -70i64..70,
        any::<i64>(),
        Just(i64::MIN),
        Just(i64::MAX),
        1_600_000_000_000i64..1_900_000_000_000,
    ]
    .boxed()
}

fn opt_long() -> impl Strategy<Value = Option<i64>> {
    proptest::option::of(long())
}

/// A few arbitrary items, or many of the smallest possible: a count over one varint byte,
/// and blocks as tight as the bytes left (the decoder checks counts against them).
fn many<T: Clone + std::fmt::Debug + Default>(
    item: impl Strategy<Value = T>,
) -> impl Strategy<Value = Vec<T>> {
    prop_oneof![
        4 => vec(item, 0..4),
        1 => (20usize..80).prop_map(|n| vec![T::default(); n]),
    ]
}

fn texts() -> BoxedStrategy<Vec<String>> {
    many(text()).boxed()
}

fn string_map() -> BoxedStrategy<BTreeMap<String, String>> {
    prop_oneof![
        4 => btree_map(text(), text(), 0..4),
        1 => (20usize..80).prop_map(|n| (0..n).map(|i| (i.to_string(), String::new())).collect()),
    ]
    .boxed()
}

fn owner_reference() -> BoxedStrategy<OwnerReference> {
    (
        text(),
        text(),
        text(),
        text(),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(
            |(api_version, kind, name, uid, controller)| OwnerReference {
                api_version,
                kind,
                name,
                uid,
                controller,
            },
        )
        .boxed()
}

fn object_meta() -> BoxedStrategy<ObjectMeta> {
    (
        (
            text(),
            text(),
            opt_text(),
            opt_long(),
            opt_long(),
            opt_long(),
        ),
        (
            texts(),
            many(owner_reference()),
            string_map(),
            string_map(),
            opt_long(),
            opt_long(),
        ),
    )
        .prop_map(
            |(
                (uid, name, namespace, generation, creation_timestamp_ms, deletion_timestamp_ms),
                (
                    finalizers,
                    owner_references,
                    labels,
                    annotations,
                    last_update_ms,
                    deletion_grace_period_seconds,
                ),
            )| ObjectMeta {
                uid,
                name,
                namespace,
                generation,
                creation_timestamp_ms,
                deletion_timestamp_ms,
                finalizers,
                owner_references,
                labels,
                annotations,
                last_update_ms,
                deletion_grace_period_seconds,
            },
        )
        .boxed()
}

fn ip_info() -> BoxedStrategy<IpInfo> {
    (
        (text(), texts(), text(), text(), text(), text()),
        (text(), text(), texts(), text(), text()),
    )
        .prop_map(
            |(
                (subnet, attach_subnets, pod_name, pod_namespace, node_name, ip_address),
                (v4_ip_address, v6_ip_address, attach_ips, mac_address, pod_type),
            )| IpInfo {
                subnet,
                attach_subnets,
                pod_name,
                pod_namespace,
                node_name,
                ip_address,
                v4_ip_address,
                v6_ip_address,
                attach_ips,
                mac_address,
                pod_type,
            },
        )
        .boxed()
}

fn subnet_info() -> BoxedStrategy<SubnetInfo> {
    (
        (text(), text(), text(), text(), text()),
        (opt_text(), opt_text(), opt_text(), opt_text()),
    )
        .prop_map(
            |(
                (cidr_block, vpc, provider, protocol, gateway),
                (v4_using_ips, v4_available_ips, v6_using_ips, v6_available_ips),
            )| SubnetInfo {
                cidr_block,
                vpc,
                provider,
                protocol,
                gateway,
                v4_using_ips,
                v4_available_ips,
                v6_using_ips,
                v6_available_ips,
            },
        )
        .boxed()
}

fn pod_info() -> BoxedStrategy<PodInfo> {
    let allocation = (text(), any::<bool>(), text(), text(), text(), text()).prop_map(
        |(provider, allocated, ip_address, mac_address, logical_switch, cidr)| PodAllocation {
            provider,
            allocated,
            ip_address,
            mac_address,
            logical_switch,
            cidr,
        },
    );
    let network = (text(), text(), texts(), text(), any::<bool>()).prop_map(
        |(name, interface, ips, mac, default)| NetworkStatus {
            name,
            interface,
            ips,
            mac,
            default,
        },
    );
    (
        text(),
        text(),
        texts(),
        many(allocation),
        many(network),
        any::<bool>(),
        any::<bool>(),
        text(),
    )
        .prop_map(
            |(
                phase,
                node_name,
                pod_ips,
                allocations,
                network_status,
                disruption_target,
                host_network,
                calico_container_id,
            )| PodInfo {
                phase,
                node_name,
                pod_ips,
                allocations,
                network_status,
                disruption_target,
                host_network,
                calico_container_id,
            },
        )
        .boxed()
}

fn node_info() -> BoxedStrategy<NodeInfo> {
    texts().prop_map(|pod_cidrs| NodeInfo { pod_cidrs }).boxed()
}

fn calico_block_info() -> BoxedStrategy<CalicoBlockInfo> {
    let allocation = (
        long(),
        text(),
        text(),
        opt_long(),
        (text(), text(), text(), text()),
        opt_long(),
    )
        .prop_map(
            |(
                ordinal,
                address,
                handle_id,
                sequence_number,
                (namespace, pod, node, r#type),
                released_at_ms,
            )| {
                CalicoAllocation {
                    ordinal,
                    address,
                    handle_id,
                    sequence_number,
                    namespace,
                    pod,
                    node,
                    r#type,
                    released_at_ms,
                }
            },
        );
    (text(), text(), many(allocation), long(), any::<bool>())
        .prop_map(
            |(cidr, affinity, allocations, sequence_number, deleted)| CalicoBlockInfo {
                cidr,
                affinity,
                allocations,
                sequence_number,
                deleted,
            },
        )
        .boxed()
}

fn calico_handle_info() -> BoxedStrategy<CalicoHandleInfo> {
    let block = (text(), long()).prop_map(|(cidr, count)| CalicoHandleBlock { cidr, count });
    (text(), many(block), any::<bool>())
        .prop_map(|(handle_id, blocks, deleted)| CalicoHandleInfo {
            handle_id,
            blocks,
            deleted,
        })
        .boxed()
}

fn calico_affinity_info() -> BoxedStrategy<CalicoAffinityInfo> {
    (text(), text(), text(), text(), any::<bool>())
        .prop_map(|(node, cidr, state, r#type, deleted)| CalicoAffinityInfo {
            node,
            cidr,
            state,
            r#type,
            deleted,
        })
        .boxed()
}

fn calico_pool_info() -> BoxedStrategy<CalicoPoolInfo> {
    (text(), opt_long(), any::<bool>(), texts())
        .prop_map(
            |(cidr, block_size, disabled, allowed_uses)| CalicoPoolInfo {
                cidr,
                block_size,
                disabled,
                allowed_uses,
            },
        )
        .boxed()
}

fn cilium_node_info() -> BoxedStrategy<CiliumNodeInfo> {
    let used = (text(), text(), text()).prop_map(|(address, owner, resource)| CiliumUsedAddress {
        address,
        owner,
        resource,
    });
    (texts(), texts(), many(used), text())
        .prop_map(
            |(pod_cidrs, allocated_cidrs, used, operator_error)| CiliumNodeInfo {
                pod_cidrs,
                allocated_cidrs,
                used,
                operator_error,
            },
        )
        .boxed()
}

fn cilium_endpoint_info() -> BoxedStrategy<CiliumEndpointInfo> {
    (opt_long(), texts(), text(), text(), text(), text())
        .prop_map(
            |(endpoint_id, addresses, node_ip, pod, container_id, state)| CiliumEndpointInfo {
                endpoint_id,
                addresses,
                node_ip,
                pod,
                container_id,
                state,
            },
        )
        .boxed()
}

fn ip_pool_info() -> BoxedStrategy<IpPoolInfo> {
    let allocation = (text(), text(), text(), text(), text()).prop_map(
        |(offset, address, container_id, podref, ifname)| IpPoolAllocation {
            offset,
            address,
            container_id,
            podref,
            ifname,
        },
    );
    (text(), many(allocation))
        .prop_map(|(range, allocations)| IpPoolInfo { range, allocations })
        .boxed()
}

fn ip_reservation_info() -> BoxedStrategy<IpReservationInfo> {
    (text(), text(), text(), text())
        .prop_map(
            |(address, podref, ifname, container_id)| IpReservationInfo {
                address,
                podref,
                ifname,
                container_id,
            },
        )
        .boxed()
}

fn spider_ip_pool_info() -> BoxedStrategy<SpiderIpPoolInfo> {
    let allocation =
        (text(), text(), text()).prop_map(|(address, pod, pod_uid)| SpiderAllocation {
            address,
            pod,
            pod_uid,
        });
    (text(), texts(), many(allocation), opt_long())
        .prop_map(
            |(subnet, ips, allocations, allocated_ip_count)| SpiderIpPoolInfo {
                subnet,
                ips,
                allocations,
                allocated_ip_count,
            },
        )
        .boxed()
}

fn spider_endpoint_info() -> BoxedStrategy<SpiderEndpointInfo> {
    let address = (text(), text(), text(), text(), text()).prop_map(
        |(interface, ipv4, ipv6, ipv4_pool, ipv6_pool)| SpiderEndpointAddress {
            interface,
            ipv4,
            ipv6,
            ipv4_pool,
            ipv6_pool,
        },
    );
    (text(), text(), many(address), text(), text())
        .prop_map(
            |(pod_uid, node, addresses, owner_controller_type, owner_controller_name)| {
                SpiderEndpointInfo {
                    pod_uid,
                    node,
                    addresses,
                    owner_controller_type,
                    owner_controller_name,
                }
            },
        )
        .boxed()
}

fn kind_part() -> BoxedStrategy<KindPart> {
    prop_oneof![
        pod_info().prop_map(|p| KindPart::Pod(Box::new(p))),
        ip_info().prop_map(|p| KindPart::Ip(Box::new(p))),
        subnet_info().prop_map(|p| KindPart::Subnet(Box::new(p))),
        ip_pool_info().prop_map(|p| KindPart::IpPool(Box::new(p))),
        ip_reservation_info().prop_map(|p| KindPart::IpReservation(Box::new(p))),
        spider_ip_pool_info().prop_map(|p| KindPart::SpiderIpPool(Box::new(p))),
        spider_endpoint_info().prop_map(|p| KindPart::SpiderEndpoint(Box::new(p))),
        node_info().prop_map(|p| KindPart::Node(Box::new(p))),
        calico_block_info().prop_map(|p| KindPart::CalicoBlock(Box::new(p))),
        calico_handle_info().prop_map(|p| KindPart::CalicoHandle(Box::new(p))),
        calico_affinity_info().prop_map(|p| KindPart::CalicoAffinity(Box::new(p))),
        calico_pool_info().prop_map(|p| KindPart::CalicoPool(Box::new(p))),
        cilium_node_info().prop_map(|p| KindPart::CiliumNode(Box::new(p))),
        cilium_endpoint_info().prop_map(|p| KindPart::CiliumEndpoint(Box::new(p))),
    ]
    .boxed()
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

/// The (canonical) stream of a part.
fn stream_of(part: &KindPart) -> Stream {
    match part {
        KindPart::Pod(_) => Stream::Pod,
        KindPart::Ip(_) => Stream::Ip,
        KindPart::Subnet(_) => Stream::Subnet,
        KindPart::IpPool(_) => Stream::IpPool,
        KindPart::IpReservation(_) => Stream::OverlappingRangeIpReservation,
        KindPart::SpiderIpPool(_) => Stream::SpiderIpPool,
        KindPart::SpiderEndpoint(_) => Stream::SpiderEndpoint,
        KindPart::Node(_) => Stream::Node,
        KindPart::CalicoBlock(_) => Stream::CalicoIpamBlock,
        KindPart::CalicoHandle(_) => Stream::CalicoIpamHandle,
        KindPart::CalicoAffinity(_) => Stream::CalicoBlockAffinity,
        KindPart::CalicoPool(_) => Stream::CalicoIpPool,
        KindPart::CiliumNode(_) => Stream::CiliumNode,
        KindPart::CiliumEndpoint(_) => Stream::CiliumEndpoint,
    }
}

/// The wire field a part is written to.
fn wire_field(part: &KindPart) -> &'static str {
    match part {
        KindPart::Pod(_) => "pod",
        KindPart::Ip(_) => "ip",
        KindPart::Subnet(_) => "subnet",
        KindPart::IpPool(_) => "ip_pool",
        KindPart::IpReservation(_) => "ip_reservation",
        KindPart::SpiderIpPool(_) => "spider_ip_pool",
        KindPart::SpiderEndpoint(_) => "spider_endpoint",
        KindPart::Node(_) => "node",
        KindPart::CalicoBlock(_) => "calico_block",
        KindPart::CalicoHandle(_) => "calico_handle",
        KindPart::CalicoAffinity(_) => "calico_affinity",
        KindPart::CalicoPool(_) => "calico_pool",
        KindPart::CiliumNode(_) => "cilium_node",
        KindPart::CiliumEndpoint(_) => "cilium_endpoint",
    }
}

fn remediation() -> BoxedStrategy<Remediation> {
    (
        text(),
        text(),
        text(),
        select(vec![
            RemediationOutcome::Applied,
            RemediationOutcome::DryRun,
            RemediationOutcome::Skipped,
            RemediationOutcome::Failed,
        ]),
        text(),
        opt_text(),
    )
        .prop_map(
            |(command_id, reason_alert_id, action, outcome, reason, finalizer)| Remediation {
                command_id,
                reason_alert_id,
                action,
                outcome,
                reason,
                finalizer,
            },
        )
        .boxed()
}

/// Any event. Mostly the part is of the event's stream, as collectors write them; sometimes
/// not (a reader keeps only the part of its stream), and sometimes there is none.
fn watch_event() -> BoxedStrategy<WatchEvent> {
    let part_and_stream = proptest::option::of(kind_part()).prop_flat_map(|part| {
        let matching = part.as_ref().map_or(Stream::Unknown, stream_of);
        (
            Just(part),
            prop_oneof![3 => Just(matching), 1 => select(STREAMS.to_vec())],
        )
    });
    (
        (text(), text(), long(), select(EVENT_TYPES.to_vec()), text()),
        (opt_long(), opt_long(), proptest::option::of(object_meta())),
        (
            part_and_stream,
            opt_text(),
            proptest::option::of(remediation()),
        ),
    )
        .prop_map(
            |(
                (cluster_id, collector_id, sequence, event_type, resource_version),
                (resource_version_num, observed_at_ms, metadata),
                ((part, stream), raw_object, remediation),
            )| WatchEvent {
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
                remediation: remediation.map(Box::new),
            },
        )
        .boxed()
}

// ---- The two decoders.

fn current_schema() -> &'static apache_avro::Schema {
    WatchEvent::schemas().current().schema
}

/// The datum as apache-avro's serde writer lays it out; with a target block size, arrays
/// and maps come in several blocks of the negative-count form (count, byte size, items).
fn encode_datum(event: &WatchEvent, target_block_size: Option<usize>) -> Vec<u8> {
    GenericDatumWriter::builder(current_schema())
        .maybe_target_block_size(target_block_size)
        .build()
        .unwrap()
        .write_ser_to_vec(event)
        .unwrap()
}

/// apache-avro's serde path on a whole datum (trailing bytes rejected, as `decode` does).
fn apache_decode(bytes: &[u8]) -> Result<WatchEvent, String> {
    let mut body = bytes;
    let event: WatchEvent = GenericDatumReader::builder(current_schema())
        .build()
        .unwrap()
        .read_deser(&mut body)
        .map_err(|e| e.to_string())?;
    if !body.is_empty() {
        return Err(format!("{} trailing bytes", body.len()));
    }
    Ok(event)
}

/// What a reader sees of an event: only the part of its stream.
fn as_read(mut event: WatchEvent) -> WatchEvent {
    if event.part.as_ref().map(stream_of) != Some(event.stream.canonical()) {
        event.part = None;
    }
    event
}

/// The capacity of every vector and string of an event: what it holds on to.
fn capacities(event: &WatchEvent) -> Vec<usize> {
    #[allow(clippy::ptr_arg)] // the vector's own capacity is measured too
    fn strings(v: &Vec<String>) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(v.capacity()).chain(v.iter().map(String::capacity))
    }
    let mut c = vec![
        event.cluster_id.capacity(),
        event.collector_id.capacity(),
        event.resource_version.capacity(),
    ];
    if let Some(m) = &event.metadata {
        c.extend([
            m.uid.capacity(),
            m.name.capacity(),
            m.owner_references.capacity(),
        ]);
        c.extend(strings(&m.finalizers));
        c.extend(m.labels.iter().map(|(k, v)| k.capacity() + v.capacity()));
    }
    match &event.part {
        Some(KindPart::Pod(p)) => {
            c.extend(strings(&p.pod_ips));
            c.extend([p.allocations.capacity(), p.network_status.capacity()]);
            c.extend(p.network_status.iter().flat_map(|n| strings(&n.ips)));
        }
        Some(KindPart::Ip(p)) => {
            c.extend(strings(&p.attach_subnets));
            c.extend(strings(&p.attach_ips));
        }
        Some(KindPart::IpPool(p)) => c.push(p.allocations.capacity()),
        Some(KindPart::SpiderIpPool(p)) => {
            c.extend(strings(&p.ips));
            c.push(p.allocations.capacity());
        }
        Some(KindPart::SpiderEndpoint(p)) => c.push(p.addresses.capacity()),
        _ => {}
    }
    c
}

/// The errors by which the specialised decoder is stricter than apache-avro (see the
/// module's documentation): malformed data apache-avro lets through.
fn stricter_than_apache(error: &WireError) -> bool {
    matches!(
        error,
        WireError::VarintOverflow { .. } | WireError::BlockSize { .. }
    )
}

/// Both decoders on the same bytes: the specialised one accepts exactly what apache-avro
/// accepts (bar its documented strictness), with the same result.
fn assert_same_as_apache(bytes: &[u8]) -> Result<(), TestCaseError> {
    let ours = decode_watch_event(bytes);
    let theirs = apache_decode(bytes);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        (Err(e), Ok(_)) => prop_assert!(
            stricter_than_apache(e),
            "apache-avro accepted what the specialised decoder refused: {e}"
        ),
        (Ok(_), Err(e)) => prop_assert!(
            false,
            "the specialised decoder accepted what apache-avro refused: {e}"
        ),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn the_specialised_decoder_reads_what_apache_avro_reads(
        event in watch_event(),
        block in proptest::option::of(1usize..64),
    ) {
        let bytes = encode_datum(&event, block);
        let ours = decode_watch_event(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let theirs = apache_decode(&bytes).unwrap();
        prop_assert_eq!(&ours, &theirs);
        prop_assert_eq!(&ours, &as_read(event.clone()));
        if block.is_none() {
            // Events are held by the hundred thousand: no more memory than the serde path.
            prop_assert_eq!(capacities(&ours), capacities(&theirs));
        }
        // And through the public API, single-object framed.
        prop_assert_eq!(decode::<WatchEvent>(&encode(&event).unwrap()).unwrap(), as_read(event));
    }

    #[test]
    fn events_with_several_kind_fields_set_on_the_wire_keep_the_one_of_their_stream(
        event in watch_event(),
        extra in vec(kind_part(), 1..4),
    ) {
        let Value::Record(mut fields) = to_value(&event).unwrap() else {
            unreachable!("a WatchEvent is a record")
        };
        for part in extra {
            let field = wire_field(&part);
            let carrier = WatchEvent { stream: stream_of(&part), part: Some(part), ..event.clone() };
            let Value::Record(carrier) = to_value(&carrier).unwrap() else { unreachable!() };
            let value = carrier.into_iter().find(|(name, _)| name == field).unwrap().1;
            fields.iter_mut().find(|(name, _)| name == field).unwrap().1 = value;
        }
        let value = Value::Record(fields).resolve(current_schema()).unwrap();
        let bytes = GenericDatumWriter::builder(current_schema())
            .build()
            .unwrap()
            .write_value_to_vec(value)
            .unwrap();
        let ours = decode_watch_event(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(ours, apache_decode(&bytes).unwrap());
    }

    #[test]
    fn every_truncation_is_an_error(event in watch_event(), block in proptest::option::of(1usize..16)) {
        let bytes = encode_datum(&event, block);
        for cut in 0..bytes.len() {
            let error = decode_watch_event(&bytes[..cut]).unwrap_err();
            prop_assert!(
                matches!(error, WireError::Truncated { .. } | WireError::BlockCount { .. }),
                "cut at {} of {}: {}", cut, bytes.len(), error
            );
            let mut input = &bytes[..cut];
            prop_assert!(read_watch_event(&mut input).is_err());
        }
        let message = encode(&event).unwrap();
        for cut in 0..message.len() {
            prop_assert!(decode::<WatchEvent>(&message[..cut]).is_err());
        }
    }

    #[test]
    fn reading_into_the_event_before_gives_what_a_fresh_read_gives(
        events in vec(watch_event(), 1..6),
        cuts in vec(any::<prop::sample::Index>(), 6),
        analysis in any::<bool>(),
    ) {
        let fields = if analysis { Fields::analysis(WANTED_LABELS) } else { Fields::ALL };
        let mut into = WatchEvent::blank();
        for (event, cut) in events.iter().zip(&cuts) {
            let bytes = encode_datum(event, None);
            let fresh = decode_watch_event_of(WireVersion::V5, &fields, &bytes).unwrap();
            // A failed read leaves parts of two events behind: the next read overwrites
            // them all the same.
            let mut cut_input = &bytes[..cut.index(bytes.len())];
            let before = cut_input;
            prop_assert!(read_watch_event_into(WireVersion::V5, &fields, &mut cut_input, &mut into).is_err());
            prop_assert_eq!(cut_input, before, "a failed read consumes nothing");
            let mut input = &bytes[..];
            read_watch_event_into(WireVersion::V5, &fields, &mut input, &mut into).unwrap();
            prop_assert!(input.is_empty());
            prop_assert_eq!(&into, &fresh);
        }
    }

    #[test]
    fn flipped_bytes_never_panic_and_both_decoders_agree(
        event in watch_event(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode_datum(&event, None);
        for (index, value) in flips {
            let i = index.index(bytes.len());
            bytes[i] = value;
        }
        assert_same_as_apache(&bytes)?;
    }

    #[test]
    fn random_bytes_never_panic_and_both_decoders_agree(bytes in vec(any::<u8>(), 0..600)) {
        assert_same_as_apache(&bytes)?;
        let mut message = encode(&EventBuilder::pod("ns", "p").added()).unwrap()[..10].to_vec();
        message.extend_from_slice(&bytes);
        let _ = decode::<WatchEvent>(&message);
    }
}

// ---- Hand-made malformed data: typed errors, nothing reserved for lengths not there.

/// The bytes of a minimal event up to (not including) its metadata union.
fn prefix() -> Vec<u8> {
    // cluster_id "", collector_id "", sequence 0, stream POD, event_type ADDED,
    // resource_version "", resource_version_num null, observed_at_ms null.
    vec![0, 0, 0, 0, 0, 0, 0, 0]
}

/// A whole minimal event: every optional field null.
fn minimal() -> Vec<u8> {
    let mut bytes = prefix();
    bytes.extend([0; 17]);
    bytes
}

#[test]
fn a_minimal_datum_decodes_and_trailing_bytes_do_not() {
    let event = decode_watch_event(&minimal()).unwrap();
    assert_eq!(event, apache_decode(&minimal()).unwrap());
    let mut longer = minimal();
    longer.push(0);
    assert_eq!(
        decode_watch_event(&longer),
        Err(WireError::TrailingBytes { extra: 1 })
    );
    let mut input = &longer[..];
    assert_eq!(read_watch_event(&mut input).unwrap(), event);
    assert_eq!(input, [0], "read_watch_event stops after the datum");
    let mut message = encode(&event).unwrap();
    message.push(0);
    assert!(matches!(
        decode::<WatchEvent>(&message),
        Err(DecodeError::TrailingBytes { extra: 1, .. })
    ));
}

#[test]
fn huge_lengths_and_counts_are_errors_before_any_allocation() {
    // A string claiming 2^62 bytes.
    let mut bytes = vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01];
    bytes.extend([b'x'; 8]);
    assert!(matches!(
        decode_watch_event(&bytes),
        Err(WireError::Truncated {
            field: "cluster_id",
            ..
        })
    ));
    // finalizers claiming 2^62 items, then the negative-count form with i64::MIN.
    for count in [
        vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
        vec![
            0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0x02,
        ],
    ] {
        let mut bytes = prefix();
        bytes.extend([2, 0, 0, 0, 0, 0, 0]); // metadata: uid, name, 4 null unions
        bytes.extend(count);
        bytes.extend([0; 16]);
        assert!(
            matches!(
                decode_watch_event(&bytes),
                Err(WireError::BlockCount {
                    field: "metadata.finalizers",
                    ..
                })
            ),
            "{:?}",
            decode_watch_event(&bytes)
        );
    }
}

#[test]
fn malformed_values_are_typed_errors() {
    let at = |index: usize, value: u8| {
        let mut bytes = minimal();
        bytes[index] = value;
        decode_watch_event(&bytes).unwrap_err()
    };
    assert!(matches!(
        at(3, 38),
        WireError::EnumSymbol {
            field: "stream",
            index: 19,
            symbols: 19,
            ..
        }
    ));
    assert!(matches!(
        at(4, 1),
        WireError::EnumSymbol {
            field: "event_type",
            index: -1,
            ..
        }
    ));
    assert!(matches!(
        at(8, 4),
        WireError::UnionBranch {
            field: "metadata",
            index: 2,
            ..
        }
    ));
    assert!(matches!(
        at(0, 1),
        WireError::NegativeLength {
            field: "cluster_id",
            length: -1,
            ..
        }
    ));
    // An eleven-byte varint, and a tenth byte above bit 63.
    let mut bytes = vec![0, 0];
    bytes.extend([0xFF; 10]);
    bytes.extend([0; 20]);
    assert!(matches!(
        decode_watch_event(&bytes),
        Err(WireError::VarintOverflow {
            field: "sequence",
            offset: 2
        })
    ));
    let mut bytes = vec![0, 0];
    bytes.extend([0xFF; 9]);
    bytes.push(0x02);
    bytes.extend([0; 20]);
    assert!(matches!(
        decode_watch_event(&bytes),
        Err(WireError::VarintOverflow { .. })
    ));
    // Not UTF-8.
    let mut bytes = vec![2, 0xC3];
    bytes.extend(&minimal()[1..]);
    assert!(matches!(
        decode_watch_event(&bytes),
        Err(WireError::Utf8 {
            field: "cluster_id",
            offset: 1,
            ..
        })
    ));
    // A boolean byte of 2 (pod.disruption_target of an empty pod part).
    let mut bytes = prefix();
    bytes.extend([0, 0, 0, 2, 0, 0, 0, 0, 0, 2]);
    bytes.extend([0, 0]); // host_network, calico_container_id
    bytes.extend([0; 13]);
    assert!(matches!(
        decode_watch_event(&bytes),
        Err(WireError::Boolean {
            field: "pod.disruption_target",
            byte: 2,
            ..
        })
    ));
    bytes[17] = 1;
    assert_eq!(
        decode_watch_event(&bytes).unwrap(),
        apache_decode(&bytes).unwrap()
    );
}

#[test]
fn a_block_size_that_disagrees_with_its_items_is_an_error() {
    // metadata with finalizers as one negative-count block: [-1, size, "a"], then the end.
    let finalizers = |size: u8| {
        let mut bytes = prefix();
        bytes.extend([2, 0, 0, 0, 0, 0, 0]); // metadata: uid, name, 4 null unions
        bytes.extend([1, size, 2, b'a', 0]); // count -1, byte size, "a", end of array
                                             // owner_references, labels, annotations, last_update_ms, deletion_grace_period_seconds
        bytes.extend([0, 0, 0, 0, 0]);
        bytes.extend([0; 16]);
        bytes
    };
    let good = finalizers(4); // zigzag(2) = 4: the item "a" takes two bytes
    assert_eq!(
        decode_watch_event(&good).unwrap(),
        apache_decode(&good).unwrap()
    );
    assert_eq!(
        decode_watch_event(&good)
            .unwrap()
            .metadata
            .unwrap()
            .finalizers,
        ["a"]
    );
    assert!(matches!(
        decode_watch_event(&finalizers(6)),
        Err(WireError::BlockSize {
            declared: 3,
            actual: 2,
            ..
        })
    ));
}

#[test]
fn a_map_key_written_twice_keeps_its_last_value_as_on_the_serde_path() {
    // Annotations of 40 entries with the empty key, the last one with value "z": the
    // smallest entries there are, so that the block is as tight as its bytes allow.
    let mut bytes = prefix();
    bytes.extend([2, 0, 0, 0, 0, 0, 0]); // metadata: uid, name, 4 null unions
    bytes.extend([0, 0, 0]); // finalizers, owner_references, labels
    bytes.push(80); // 40 entries (zigzag)
    for _ in 0..39 {
        bytes.extend([0, 0]);
    }
    bytes.extend([0, 2, b'z', 0]); // the last entry, then the end of the map
                                   // last_update_ms, deletion_grace_period_seconds, then the sixteen unions after metadata
    bytes.extend([0; 18]);
    let event = decode_watch_event(&bytes).unwrap();
    assert_eq!(event, apache_decode(&bytes).unwrap());
    let annotations = event.metadata.unwrap().annotations;
    assert_eq!(
        annotations,
        BTreeMap::from([(String::new(), "z".to_owned())])
    );
}

#[test]
fn the_decoder_is_written_for_todays_schema() {
    assert_eq!(
        WatchEvent::schemas().current().fingerprint,
        WATCH_EVENT_FINGERPRINT,
        "a new WatchEvent schema version: bring src/datum.rs up to date (its data is read on \
         apache-avro's serde path until then), then its fingerprint"
    );
}

// ---- Container files: the same records as apache-avro's reader, both codecs.

fn codecs() -> [Codec; 2] {
    [Codec::Null, Codec::Deflate(DeflateSettings::default())]
}

/// A container of `events`, a block every `per_block` records.
fn container(events: &[WatchEvent], codec: Codec, per_block: usize) -> Vec<u8> {
    let mut writer = ContainerWriter::<WatchEvent, _>::with_codec(Vec::new(), codec).unwrap();
    for (i, event) in events.iter().enumerate() {
        writer.append(event).unwrap();
        if (i + 1) % per_block.max(1) == 0 {
            writer.flush().unwrap();
        }
    }
    writer.finish().unwrap()
}

fn apache_read_container(bytes: &[u8]) -> Vec<WatchEvent> {
    Reader::new(bytes)
        .unwrap()
        .into_deser_iter::<WatchEvent>()
        .map(Result::unwrap)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn containers_read_the_same_through_both_paths(
        events in vec(watch_event(), 0..30),
        per_block in 1usize..12,
    ) {
        for codec in codecs() {
            let bytes = container(&events, codec, per_block);
            let reader = ContainerReader::<WatchEvent, _>::new(&bytes[..]).unwrap();
            prop_assert_eq!(reader.writer_version(), Some(5));
            let counter = reader.bytes_read();
            let ours: Vec<WatchEvent> = reader.map(Result::unwrap).collect();
            prop_assert_eq!(&ours, &apache_read_container(&bytes));
            prop_assert_eq!(&ours, &events.iter().cloned().map(as_read).collect::<Vec<_>>());
            prop_assert_eq!(counter.load(std::sync::atomic::Ordering::Relaxed), bytes.len() as u64);
        }
    }

    #[test]
    fn flipped_container_bytes_never_panic(
        events in vec(watch_event(), 1..8),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        for codec in codecs() {
            let mut bytes = container(&events, codec, 3);
            for (index, value) in &flips {
                let i = index.index(bytes.len());
                bytes[i] = *value;
            }
            if let Ok(reader) = ContainerReader::<WatchEvent, _>::new(&bytes[..]) {
                // The reader resumes at the next sync marker after a corrupt block: it ends,
                // and each flipped byte costs at most its block (an error or two), never
                // more records than were written.
                let results: Vec<_> = reader.collect();
                let errors = results.iter().filter(|r| r.is_err()).count();
                prop_assert!(errors <= 2 * flips.len() + 1, "{} errors", errors);
                prop_assert!(results.len() - errors <= events.len());
            }
        }
    }
}

#[test]
fn a_container_cut_anywhere_gives_its_first_records_then_one_error() {
    let events: Vec<WatchEvent> = (0..12)
        .map(|i| {
            EventBuilder::ip(&format!("ip-{i}"), "subnet-a")
                .rv(i + 1)
                .added()
        })
        .collect();
    for codec in codecs() {
        let bytes = container(&events, codec, 4);
        // A file of no records is a header alone.
        let header_len = container(&[], codec, 4).len();
        for cut in 0..bytes.len() {
            let Ok(reader) = ContainerReader::<WatchEvent, _>::new(&bytes[..cut]) else {
                assert!(
                    cut < header_len,
                    "a complete header was refused (cut {cut})"
                );
                continue;
            };
            let results: Vec<_> = reader.collect();
            let read: Vec<WatchEvent> = results
                .iter()
                .take_while(|r| r.is_ok())
                .map(|r| r.as_ref().unwrap().clone())
                .collect();
            assert_eq!(read, events[..read.len()], "cut {cut}");
            assert!(
                read.len().is_multiple_of(4),
                "blocks are read whole (cut {cut})"
            );
            match &results[read.len()..] {
                [] => {}
                [Err(ContainerError::Corrupt { index, source, .. })] => {
                    assert_eq!(*index as usize, read.len());
                    assert!(
                        matches!(source, BlockError::Truncated),
                        "cut {cut}: {source}"
                    );
                }
                other => panic!("cut {cut}: {other:?}"),
            }
        }
    }
}

#[test]
fn a_container_with_arrays_in_several_blocks_reads_the_same_through_both_paths() {
    let mut pool = EventBuilder::ip_pool("kube-system", "10.0.0.0-24", "10.0.0.0/24").rv(7);
    for i in 0..50 {
        pool = pool.allocation(i, &format!("10.0.0.{i}"), "default/web");
    }
    let mut event = pool.modified();
    let meta = event.metadata.as_mut().unwrap();
    meta.labels
        .extend((0..20).map(|j| (format!("k{j}"), format!("v{j}"))));
    for codec in codecs() {
        let mut writer = apache_avro::Writer::builder()
            .schema(current_schema())
            .writer(Vec::new())
            .codec(codec)
            .block_size(64)
            .map_array_target_block_size(16)
            .build()
            .unwrap();
        for _ in 0..10 {
            writer.append_ser(&event).unwrap();
        }
        let bytes = writer.into_inner().unwrap();
        let ours: Vec<WatchEvent> = ContainerReader::<WatchEvent, _>::new(&bytes[..])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(ours.len(), 10);
        assert_eq!(ours, apache_read_container(&bytes));
    }
}

#[test]
fn a_sync_marker_mismatch_and_leftover_block_bytes_are_corrupt_blocks() {
    let events: Vec<WatchEvent> = (0..6)
        .map(|i| EventBuilder::pod("ns", &format!("p{i}")).rv(i + 1).added())
        .collect();
    let bytes = container(&events, Codec::Null, 3);
    // The last 16 bytes are the second block's sync marker.
    let mut bad_sync = bytes.clone();
    let last = bad_sync.len() - 1;
    bad_sync[last] ^= 0xFF;
    let results: Vec<_> = ContainerReader::<WatchEvent, _>::new(&bad_sync[..])
        .unwrap()
        .collect();
    assert_eq!(results.len(), 4);
    assert!(matches!(
        &results[3],
        Err(ContainerError::Corrupt {
            index: 3,
            source: BlockError::SyncMarker,
            ..
        })
    ));
    // A block declaring one record fewer than it holds.
    let first_block = bytes.len() - {
        let one = container(&events[3..], Codec::Null, 3);
        let empty = container(&[], Codec::Null, 3);
        one.len() - empty.len()
    };
    let second_block = &bytes[first_block..];
    assert_eq!(second_block[0], 6, "a block of 3 records (zigzag 6)");
    let mut fewer = bytes.clone();
    fewer[first_block] = 4;
    let results: Vec<_> = ContainerReader::<WatchEvent, _>::new(&fewer[..])
        .unwrap()
        .collect();
    assert_eq!(results.len(), 6);
    assert!(matches!(
        &results[5],
        Err(ContainerError::Corrupt {
            index: 5,
            source: BlockError::TrailingBytes { count: 2, .. },
            ..
        })
    ));
}

// ---- Every kept schema version, and the fields a caller does not want.

/// The event as a collector of schema `version` wrote it: what that version lacks left out
/// (the same stripping as `tests/codec.rs`), then resolved to that version's schema.
fn old_value(version: WireVersion, event: &WatchEvent) -> Value {
    fn strip(version: WireVersion, value: &mut Value, top: bool) {
        if let Value::Record(fields) = value {
            fields.retain(|(name, _)| match name.as_str() {
                "raw_object" | "last_update_ms" => version >= WireVersion::V2,
                "remediation" => version >= WireVersion::V3,
                "ip_pool" | "ip_reservation" | "spider_ip_pool" | "spider_endpoint"
                | "network_status" | "disruption_target" => version >= WireVersion::V4,
                // `node` is also a field of parts: only the event's own is v5's.
                "node" if !top => true,
                "node"
                | "calico_block"
                | "calico_handle"
                | "calico_affinity"
                | "calico_pool"
                | "cilium_node"
                | "cilium_endpoint"
                | "host_network"
                | "calico_container_id" => version >= WireVersion::V5,
                _ => true,
            });
            for (_, v) in fields.iter_mut() {
                strip(version, v, false);
            }
        } else if let Value::Union(_, inner) = value {
            strip(version, inner, false);
        }
    }
    let mut value = to_value(event).unwrap();
    strip(version, &mut value, true);
    value.resolve(schema_of(version)).unwrap()
}

fn schema_of(version: WireVersion) -> &'static apache_avro::Schema {
    WatchEvent::schemas().versions()[version as usize - 1].schema
}

/// The datum of `event` written with schema `version`; arrays and maps in blocks of the
/// negative-count form when a target block size is given.
fn encode_as(version: WireVersion, event: &WatchEvent, block: Option<usize>) -> Vec<u8> {
    GenericDatumWriter::builder(schema_of(version))
        .maybe_target_block_size(block)
        .build()
        .unwrap()
        .write_value_to_vec(old_value(version, event))
        .unwrap()
}

/// apache-avro's reading of an older version (`Value`, then resolution to today's, as the
/// registry did before the specialised decoder read every version) or its serde path for
/// today's; the whole input is one datum.
fn apache_decode_as(version: WireVersion, bytes: &[u8]) -> Result<WatchEvent, String> {
    if version == WireVersion::V5 {
        return apache_decode(bytes);
    }
    let mut body = bytes;
    let event: WatchEvent = WatchEvent::schemas()
        .read_datum_resolving(version as usize - 1, &mut body)
        .map_err(|e| e.to_string())?;
    if !body.is_empty() {
        return Err(format!("{} trailing bytes", body.len()));
    }
    Ok(event)
}

/// An event a collector of `version` could have written: a stream and an event type that
/// version has (older enums are a prefix of today's).
fn event_of(version: WireVersion) -> BoxedStrategy<WatchEvent> {
    watch_event()
        .prop_map(move |mut event| {
            if version < WireVersion::V4
                && !matches!(event.stream, Stream::Pod | Stream::Ip | Stream::Subnet)
            {
                event.stream = Stream::Ip;
            }
            if version < WireVersion::V5 && event.stream > Stream::Unknown {
                event.stream = Stream::Pod;
            }
            if version < WireVersion::V3 && event.event_type == EventType::Remediation {
                event.event_type = EventType::Bookmark;
            }
            event
        })
        .boxed()
}

fn any_version() -> impl Strategy<Value = WireVersion> {
    select(WireVersion::ALL.to_vec())
}

/// What analysis keeps of an event read whole, with labels of `keys` kept.
fn analysis_view(mut event: WatchEvent, keys: &[&str]) -> WatchEvent {
    event.raw_object = None;
    match &mut event.part {
        Some(ipaudit_schemas::KindPart::Pod(pod)) => {
            pod.node_name.clear();
            pod.allocations.clear();
            pod.network_status.retain(|network| !network.default);
            for network in &mut pod.network_status {
                network.interface.clear();
                network.mac.clear();
            }
        }
        Some(ipaudit_schemas::KindPart::Ip(ip)) => {
            ip.node_name.clear();
            ip.v4_ip_address.clear();
            ip.v6_ip_address.clear();
            ip.mac_address.clear();
        }
        _ => {}
    }
    if let Some(meta) = &mut event.metadata {
        meta.annotations.clear();
        meta.owner_references.clear();
        meta.labels.retain(|k, _| keys.contains(&k.as_str()));
    }
    event
}

/// apache-avro's `Value` path (older versions) can return a datum cut short as complete:
/// the last union read at the end of the input comes back null, and a varint cut by the
/// end of the input reads as whole (the truncation trap of CRATE-FACTS). The registry's
/// re-encoding check catches most such cuts, not those where a longer-than-needed varint
/// earlier in the datum makes up the difference. The specialised decoder says truncated,
/// rightly: that is the one disagreement allowed, and only at the end of the input.
fn value_path_reads_a_cut_datum(version: WireVersion, bytes: &[u8], error: &WireError) -> bool {
    version < WireVersion::V5
        && matches!(error, WireError::Truncated { offset, .. } if *offset == bytes.len())
}

const WANTED_LABELS: &[&str] = &["ovn.kubernetes.io/ip_reserved", ""];

/// Both decoders on the same bytes of `version`: the specialised one accepts exactly what
/// apache-avro accepts (bar its documented strictness), with the same result; and reading
/// with the analysis fields gives the same error, or the analysis view of the same event.
fn assert_version_same_as_apache(version: WireVersion, bytes: &[u8]) -> Result<(), TestCaseError> {
    let ours = decode_watch_event_of(version, &Fields::ALL, bytes);
    let theirs = apache_decode_as(version, bytes);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        (Err(e), Ok(_)) => prop_assert!(
            stricter_than_apache(e) || value_path_reads_a_cut_datum(version, bytes, e),
            "{version:?}: apache-avro accepted what the specialised decoder refused: {e}"
        ),
        (Ok(_), Err(e)) => prop_assert!(
            false,
            "{version:?}: the specialised decoder accepted what apache-avro refused: {e}"
        ),
    }
    let analysis = decode_watch_event_of(version, &Fields::analysis(WANTED_LABELS), bytes);
    prop_assert_eq!(analysis, ours.map(|e| analysis_view(e, WANTED_LABELS)));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_schema_version_reads_as_apache_avro_resolves_it(
        (version, event) in any_version().prop_flat_map(|v| (Just(v), event_of(v))),
        block in proptest::option::of(1usize..64),
    ) {
        let bytes = encode_as(version, &event, block);
        let ours = decode_watch_event_of(version, &Fields::ALL, &bytes)
            .map_err(|e| TestCaseError::fail(format!("{version:?}: {e}")))?;
        prop_assert_eq!(&ours, &apache_decode_as(version, &bytes).unwrap());
        // And through the public API, single-object framed with that version's fingerprint.
        let mut message = vec![0xC3, 0x01];
        message.extend_from_slice(&version.fingerprint());
        message.extend_from_slice(&bytes);
        prop_assert_eq!(decode::<WatchEvent>(&message).unwrap(), ours);
    }

    #[test]
    fn fields_not_wanted_are_left_out_and_the_rest_is_the_same(
        (version, event) in any_version().prop_flat_map(|v| (Just(v), event_of(v))),
        block in proptest::option::of(1usize..64),
        reserved in any::<bool>(),
    ) {
        let mut event = event;
        if reserved {
            if let Some(meta) = &mut event.metadata {
                meta.labels.insert("ovn.kubernetes.io/ip_reserved".into(), "true".into());
            }
        }
        let bytes = encode_as(version, &event, block);
        let whole = decode_watch_event_of(version, &Fields::ALL, &bytes).unwrap();
        let analysis = decode_watch_event_of(version, &Fields::analysis(WANTED_LABELS), &bytes).unwrap();
        prop_assert_eq!(&analysis, &analysis_view(whole.clone(), WANTED_LABELS));
        let bare = decode_watch_event_of(version, &Fields::ANALYSIS, &bytes).unwrap();
        prop_assert_eq!(bare, analysis_view(whole, &[]));
    }

    #[test]
    fn every_version_with_flipped_bytes_never_panics_and_both_decoders_agree(
        (version, event) in any_version().prop_flat_map(|v| (Just(v), event_of(v))),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode_as(version, &event, None);
        for (index, value) in flips {
            let i = index.index(bytes.len());
            bytes[i] = value;
        }
        assert_version_same_as_apache(version, &bytes)?;
    }

    #[test]
    fn every_version_with_random_bytes_never_panics_and_both_decoders_agree(
        version in any_version(),
        bytes in vec(any::<u8>(), 0..600),
    ) {
        assert_version_same_as_apache(version, &bytes)?;
    }
}

proptest! {
    // Every cut of every event: each case runs both decoders once per byte.
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_version_cut_anywhere_is_an_error_for_both_decoders(
        (version, event) in any_version().prop_flat_map(|v| (Just(v), event_of(v))),
    ) {
        let bytes = encode_as(version, &event, None);
        for cut in 0..bytes.len() {
            assert_version_same_as_apache(version, &bytes[..cut])?;
            prop_assert!(decode_watch_event_of(version, &Fields::ALL, &bytes[..cut]).is_err());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn containers_of_every_version_read_as_apache_avro_resolves_them(
        (version, events) in any_version().prop_flat_map(|v| (Just(v), vec(event_of(v), 0..20))),
        per_block in 1usize..8,
    ) {
        for codec in codecs() {
            let mut writer = apache_avro::Writer::builder()
                .schema(schema_of(version))
                .writer(Vec::new())
                .codec(codec)
                .build()
                .unwrap();
            for (i, event) in events.iter().enumerate() {
                writer.append_value(old_value(version, event)).unwrap();
                if (i + 1) % per_block == 0 {
                    writer.flush().unwrap();
                }
            }
            let bytes = writer.into_inner().unwrap();
            let theirs: Vec<WatchEvent> = Reader::new(&bytes[..])
                .unwrap()
                .map(|value| WatchEvent::schemas().resolve(value.unwrap()).unwrap())
                .collect();
            let reader = ContainerReader::<WatchEvent, _>::new(&bytes[..]).unwrap();
            prop_assert_eq!(reader.writer_version(), Some(version as u32));
            let ours: Vec<WatchEvent> = reader.map(Result::unwrap).collect();
            prop_assert_eq!(&ours, &theirs);
            let analysis: Vec<WatchEvent> = ContainerReader::<WatchEvent, _>::with_fields(
                &bytes[..],
                Fields::analysis(WANTED_LABELS),
            )
            .unwrap()
            .map(Result::unwrap)
            .collect();
            let expected: Vec<WatchEvent> =
                ours.into_iter().map(|e| analysis_view(e, WANTED_LABELS)).collect();
            prop_assert_eq!(&analysis, &expected);
            // Each read into the record before (as replay reads them), the same records.
            let mut reader = ContainerReader::<WatchEvent, _>::with_fields(
                &bytes[..],
                Fields::analysis(WANTED_LABELS),
            )
            .unwrap();
            let mut into = WatchEvent::blank();
            let reused: Vec<WatchEvent> = std::iter::from_fn(|| {
                reader.next_into(&mut into).map(|read| read.map(|()| into.clone()))
            })
            .map(Result::unwrap)
            .collect();
            prop_assert_eq!(reused, expected);
        }
    }
}

#[test]
fn the_decoder_knows_the_fingerprint_of_every_kept_version() {
    let set = WatchEvent::schemas();
    assert_eq!(set.versions().len(), WireVersion::ALL.len());
    for (v, version) in set.versions().iter().zip(WireVersion::ALL) {
        assert_eq!(v.fingerprint, version.fingerprint(), "{version:?}");
        assert_eq!(WireVersion::from_number(v.version), Some(version));
        assert_eq!(WireVersion::of_fingerprint(&v.fingerprint), Some(version));
    }
}

#[test]
fn older_versions_have_fewer_enum_symbols_than_todays() {
    // Stream 3 (IP_POOL) is not a v3 symbol, event type 7 (REMEDIATION) not a v2 one.
    let mut v3 = prefix();
    v3[3] = 6;
    v3.extend([0; 4]); // metadata, ip, subnet, pod
    v3.extend([0; 2]); // raw_object, remediation
    assert!(matches!(
        decode_watch_event_of(WireVersion::V3, &Fields::ALL, &v3),
        Err(WireError::EnumSymbol {
            field: "stream",
            index: 3,
            symbols: 3,
            ..
        })
    ));
    assert!(apache_decode_as(WireVersion::V3, &v3).is_err());
    let mut v2 = prefix();
    v2[4] = 14;
    v2.extend([0; 5]); // metadata, ip, subnet, pod, raw_object
    assert!(matches!(
        decode_watch_event_of(WireVersion::V2, &Fields::ALL, &v2),
        Err(WireError::EnumSymbol {
            field: "event_type",
            index: 7,
            symbols: 7,
            ..
        })
    ));
    assert!(apache_decode_as(WireVersion::V2, &v2).is_err());
    v2[4] = 12; // DELETED_ON_RELIST: the last v2 symbol
    assert_eq!(
        decode_watch_event_of(WireVersion::V2, &Fields::ALL, &v2).unwrap(),
        apache_decode_as(WireVersion::V2, &v2).unwrap()
    );
}

/// Skipped strings are checked for UTF-8 together (see `Cursor::skip_str`): the error is
/// still the one reading each string gives, at its place, even where the bytes after a
/// bad string would make the span look well-formed.
#[test]
fn a_skipped_string_that_is_not_utf8_is_reported_where_it_is_as_when_read() {
    let mut event = EventBuilder::pod("ns", "p").added();
    let meta = event.metadata.as_mut().unwrap();
    // "ab", then a 70-byte key: its two-byte length starts with 0x8C, a continuation byte.
    meta.annotations.insert("a".into(), "ab".into());
    meta.annotations.insert("b".repeat(70), "v".into());
    let good = encode_datum(&event, None);
    let at = good.windows(3).position(|w| w == [4, b'a', b'b']).unwrap() + 1;
    let mut bad = good.clone();
    bad[at + 1] = 0xC3; // "a", then a lead byte whose continuation never comes
    assert_eq!(bad[at + 2], 0x8C);
    let expected = |bytes: &[u8]| decode_watch_event_of(WireVersion::V5, &Fields::ALL, bytes);
    for fields in [Fields::ANALYSIS, Fields::ALL] {
        assert!(decode_watch_event_of(WireVersion::V5, &fields, &good).is_ok());
        let error = decode_watch_event_of(WireVersion::V5, &fields, &bad).unwrap_err();
        assert!(
            matches!(
                error,
                WireError::Utf8 {
                    field: "metadata.annotations",
                    offset,
                    ..
                } if offset == at
            ),
            "{error}"
        );
        assert_eq!(Err(error), expected(&bad));
        // A bad skipped string before a cut: the bad string is what is reported, first in
        // the bytes.
        let cut = &bad[..bad.len() - 3];
        assert!(matches!(
            decode_watch_event_of(WireVersion::V5, &fields, cut),
            Err(WireError::Utf8 { offset, .. }) if offset == at
        ));
    }
}
