//! Round trips, old versions read by today's schema, and bad input as typed errors.

use apache_avro::{to_value, types::Value, Schema};
use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::container::{ContainerReader, ContainerWriter};
use ipaudit_schemas::datum::{decode_watch_event_of, Fields, WireVersion};
use ipaudit_schemas::{
    decode, decode_into, encode, Alert, AlertStatus, Cleanup, CleanupAction, CleanupCommand,
    ContainerError, DecodeError, EventType, Evidence, OwnerReference, Record, Severity, Stream,
    WatchEvent,
};
use proptest::prelude::*;

fn rich_ip_event() -> WatchEvent {
    let mut event = EventBuilder::ip("vm-1.ns.net1.ns.ovn", "subnet-x")
        .rv(4711)
        .at(1_700_000_000_123)
        .deleting(1_700_000_000_000)
        .attach_subnets(&["attach-a"])
        .ip_of("ns", "virt-launcher-vm-1", "10.16.0.9", "VirtualMachine")
        .modified();
    let meta = event.metadata.as_mut().unwrap();
    meta.owner_references.push(OwnerReference {
        api_version: "kubevirt.io/v1".into(),
        kind: "VirtualMachineInstance".into(),
        name: "vm-1".into(),
        uid: "owner-uid".into(),
        controller: Some(true),
    });
    meta.annotations
        .insert("ovn.kubernetes.io/allocated".into(), "true".into());
    meta.last_update_ms = Some(1_700_000_000_100);
    event.raw_object = Some("{\"kind\":\"IP\"}".into());
    event
}

fn sample_alert() -> Alert {
    Alert {
        alert_id: "a1b2".into(),
        cluster_id: "prod-1".into(),
        rule: "ip-stuck-terminating".into(),
        severity: Severity::Critical,
        status: AlertStatus::Resolved,
        subject_kind: "IP".into(),
        subject_name: "vm-1.ns".into(),
        subject_uid: "uid-1".into(),
        subnet: Some("subnet-x".into()),
        summary: "stuck".into(),
        fix: Some("kubectl patch ip vm-1.ns ...".into()),
        epoch: 0,
        fired_at_ms: 1,
        resolved_at_ms: Some(2),
        fired_resource_version: "10".into(),
        resolved_resource_version: Some("12".into()),
        evidence: vec![Evidence {
            stream: Stream::Subnet,
            event_type: EventType::Deleted,
            name: "subnet-x".into(),
            resource_version: "10".into(),
            time_ms: None,
            what: "subnet deleted".into(),
            actor: Some(ipaudit_schemas::Actor {
                user: "kubernetes-admin".into(),
                user_agent: Some("kubectl/v1.33.0".into()),
                source_ips: vec!["10.0.0.1".into()],
                impersonated_user: None,
            }),
        }],
        cleanup: Some(Cleanup {
            action: CleanupAction::RemoveFinalizer,
            target_stream: Stream::Ip,
            target_name: "vm-1.ns".into(),
            target_namespace: None,
            target_uid: "uid-1".into(),
            resource_version: "12".into(),
            finalizer: "kubeovn.io/kube-ovn-controller".into(),
            pool: "subnet-x".into(),
            address: None,
        }),
        url: None,
        namespace: Some("apps".into()),
    }
}

fn sample_command() -> CleanupCommand {
    CleanupCommand {
        command_id: "c1".into(),
        cluster_id: "prod-1".into(),
        action: CleanupAction::RemoveFinalizer,
        target_kind: "IP".into(),
        target_name: "vm-1.ns".into(),
        target_uid: "uid-1".into(),
        expected_resource_version: "12".into(),
        finalizer: Some("kubeovn.io/kube-ovn-controller".into()),
        subnet: "subnet-x".into(),
        reason_alert_id: "a1b2".into(),
        issued_at_ms: 3,
        alert_fired_at_ms: 2,
        target_namespace: None,
        address: None,
        signature: Some(format!("hmac-sha256={}", "ab".repeat(32))),
    }
}

#[test]
fn watch_event_round_trips_as_a_message() {
    for event in [
        rich_ip_event(),
        EventBuilder::subnet("s").rv(3).using_ips(2).deleted(),
        EventBuilder::pod("ns", "p").rv(5).added(),
        EventBuilder::bookmark(Stream::Ip, 99),
    ] {
        let bytes = encode(&event).unwrap();
        assert_eq!(bytes[..2], [0xC3, 0x01]);
        assert_eq!(decode::<WatchEvent>(&bytes).unwrap(), event);
    }
}

#[test]
fn an_alert_about_a_calico_or_cilium_object_round_trips_with_its_evidence_kinds() {
    for stream in [
        Stream::CalicoIpamBlock,
        Stream::CalicoV3IpamHandle,
        Stream::CiliumEndpoint,
        Stream::Node,
    ] {
        let mut alert = sample_alert();
        for evidence in &mut alert.evidence {
            evidence.stream = stream;
        }
        if let Some(cleanup) = alert.cleanup.as_mut() {
            cleanup.target_stream = stream;
        }
        assert_eq!(
            decode::<Alert>(&encode(&alert).unwrap()).unwrap(),
            alert,
            "{stream:?}"
        );
    }
}

#[test]
fn alert_and_cleanup_command_round_trip_as_messages() {
    let alert = sample_alert();
    assert_eq!(decode::<Alert>(&encode(&alert).unwrap()).unwrap(), alert);
    let command = sample_command();
    assert_eq!(
        decode::<CleanupCommand>(&encode(&command).unwrap()).unwrap(),
        command
    );
}

#[test]
fn a_cleanup_command_written_with_schema_v1_is_read_unsigned_and_without_a_firing_time() {
    let v1 = &CleanupCommand::schemas().versions()[0];
    let mut value = to_value(sample_command()).unwrap();
    if let Value::Record(fields) = &mut value {
        fields.retain(|(name, _)| name != "alert_fired_at_ms" && name != "signature");
    }
    let mut bytes = vec![0xC3, 0x01];
    bytes.extend_from_slice(&v1.fingerprint);
    bytes.extend(
        apache_avro::writer::datum::GenericDatumWriter::builder(v1.schema)
            .build()
            .unwrap()
            .write_value_to_vec(value.resolve(v1.schema).unwrap())
            .unwrap(),
    );
    let read = decode::<CleanupCommand>(&bytes).unwrap();
    assert_eq!(read.alert_fired_at_ms, 0);
    assert_eq!(read.signature, None);
    assert_eq!(read.age_reference_ms(), 3, "its age counts from its issue");
    assert_eq!(
        read,
        CleanupCommand {
            alert_fired_at_ms: 0,
            target_namespace: None,
            address: None,
            signature: None,
            ..sample_command()
        }
    );
}

/// Encodes `event` with WatchEvent schema `version`, the way a collector of that version did.
fn encode_with(version: u32, event: &WatchEvent) -> Vec<u8> {
    let old = &WatchEvent::schemas().versions()[version as usize - 1];
    let mut value = to_value(event).unwrap();
    strip_fields_newer_than(version, &mut value);
    let resolved = value.resolve(old.schema).unwrap();
    let mut out = vec![0xC3, 0x01];
    out.extend_from_slice(&old.fingerprint);
    out.extend(
        apache_avro::writer::datum::GenericDatumWriter::builder(old.schema)
            .build()
            .unwrap()
            .write_value_to_vec(resolved)
            .unwrap(),
    );
    out
}

/// Fields added after each version: v2 added raw_object and last_update_ms, v3
/// remediation, v4 the whereabouts and spiderpool kinds and the pods' network-status.
fn strip_fields_newer_than(version: u32, value: &mut Value) {
    if let Value::Record(fields) = value {
        fields.retain(|(name, _)| match name.as_str() {
            "raw_object" | "last_update_ms" => version >= 2,
            "remediation" => version >= 3,
            "ip_pool" | "ip_reservation" | "spider_ip_pool" | "spider_endpoint"
            | "network_status" | "disruption_target" => version >= 4,
            _ => true,
        });
        for (_, v) in fields.iter_mut() {
            strip_fields_newer_than(version, v);
        }
    } else if let Value::Union(_, inner) = value {
        strip_fields_newer_than(version, inner);
    }
}

#[test]
fn watch_event_written_with_schema_v1_is_read_by_the_current_schema() {
    let event = rich_ip_event();
    let bytes = encode_with(1, &event);
    assert_ne!(
        bytes[2..10],
        encode(&event).unwrap()[2..10],
        "v1 has its own fingerprint"
    );
    let read = decode::<WatchEvent>(&bytes).unwrap();
    let mut expected = event;
    expected.raw_object = None;
    expected.metadata.as_mut().unwrap().last_update_ms = None;
    assert_eq!(read, expected);
}

#[test]
fn watch_event_written_with_schema_v2_is_read_by_the_current_schema() {
    let event = rich_ip_event();
    let read = decode::<WatchEvent>(&encode_with(2, &event)).unwrap();
    assert_eq!(read, event, "v2 had every field of this event");
}

#[test]
fn watch_events_written_with_schema_v3_are_read_by_the_current_schema() {
    let pod = EventBuilder::pod("default", "web-0").rv(7).added();
    for event in [rich_ip_event(), pod] {
        let read = decode::<WatchEvent>(&encode_with(3, &event)).unwrap();
        assert_eq!(read, event, "v3 had every field of this event");
    }
}

fn events_of_every_new_kind() -> Vec<WatchEvent> {
    vec![
        EventBuilder::ip_pool("kube-system", "10.128.40.0-24", "10.128.40.0/24")
            .allocation(45, "10.128.40.45", "default/web-0")
            .allocation(47, "10.128.40.47", "default/web-2")
            .rv(733533)
            .modified(),
        EventBuilder::reservation("kube-system", "fd00::10", "default/web-2")
            .rv(733534)
            .added(),
        EventBuilder::spider_pool("pool-a", "172.18.0.0/16")
            .entry("172.18.40.10", "default/api-7c9", "p1")
            .rv(12)
            .modified(),
        EventBuilder::spider_endpoint("default", "api-7c9", "p1")
            .endpoint_ip("172.18.40.10/16", "pool-a")
            .owner_controller("StatefulSet")
            .rv(13)
            .added(),
        EventBuilder::pod("default", "web-2")
            .network("default/whereabouts-conf", "10.128.40.47")
            .phase("Pending")
            .rv(14)
            .modified(),
    ]
}

#[test]
fn events_of_every_new_kind_round_trip_as_messages_and_in_containers() {
    let events = events_of_every_new_kind();
    for event in &events {
        assert_eq!(
            &decode::<WatchEvent>(&encode(event).unwrap()).unwrap(),
            event
        );
    }
    let mut writer = ContainerWriter::<WatchEvent, _>::new(Vec::new()).unwrap();
    for event in &events {
        writer.append(event).unwrap();
    }
    let bytes = writer.finish().unwrap();
    let read: Vec<WatchEvent> = ContainerReader::<WatchEvent, _>::new(&bytes[..])
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(read, events);
}

/// A schema one version ahead of this build: a kind this build does not know, and a field.
fn schema_of_a_newer_collector() -> Schema {
    ipaudit_schemas::builders::NextVersion::new().schema
}

#[test]
fn a_recording_by_a_newer_collector_reads_its_known_kinds_and_marks_new_ones_unknown() {
    let newer = schema_of_a_newer_collector();
    let mut writer = apache_avro::Writer::new(&newer, Vec::new()).unwrap();
    let known = rich_ip_event();
    let mut value = to_value(&known).unwrap();
    if let Value::Record(fields) = &mut value {
        fields.push((
            "antrea_ip_pool".into(),
            Value::Union(0, Box::new(Value::Null)),
        ));
    }
    writer
        .append_value(value.clone().resolve(&newer).unwrap())
        .unwrap();
    if let Value::Record(fields) = &mut value {
        for (name, v) in fields.iter_mut() {
            match name.as_str() {
                "stream" => *v = Value::Enum(Stream::ALL.len() as u32, "ANTREA_IP_POOL".into()),
                "ip" => *v = Value::Union(0, Box::new(Value::Null)),
                "antrea_ip_pool" => *v = Value::Union(1, Box::new(Value::String("p-1".into()))),
                _ => {}
            }
        }
    }
    writer.append_value(value.resolve(&newer).unwrap()).unwrap();
    let bytes = writer.into_inner().unwrap();
    let mut reader = ContainerReader::<WatchEvent, _>::new(&bytes[..]).unwrap();
    assert_eq!(
        reader.writer_version(),
        None,
        "a version newer than this build"
    );
    assert_eq!(reader.next().unwrap().unwrap(), known);
    let unknown = reader.next().unwrap().unwrap();
    assert_eq!(unknown.stream, Stream::Unknown);
    assert_eq!(unknown.resource_version, known.resource_version);
    assert!(unknown.part.is_none());
    assert!(reader.next().is_none());
    // Read into the event before, as replay reads: the same two events.
    let mut reader = ContainerReader::<WatchEvent, _>::new(&bytes[..]).unwrap();
    let mut into = WatchEvent::new(Stream::Pod, EventType::Added, "1");
    reader.next_into(&mut into).unwrap().unwrap();
    assert_eq!(into, known);
    reader.next_into(&mut into).unwrap().unwrap();
    assert_eq!(into, unknown);
    assert!(reader.next_into(&mut into).is_none());
}

#[test]
fn a_remediation_event_round_trips() {
    let mut event = EventBuilder::ip("vm-1.ns", "s")
        .rv(9)
        .build(EventType::Remediation);
    event.remediation = Some(Box::new(ipaudit_schemas::Remediation {
        command_id: "c1".into(),
        reason_alert_id: "a1".into(),
        action: "REMOVE_FINALIZER".into(),
        outcome: ipaudit_schemas::RemediationOutcome::Skipped,
        reason: "uid changed".into(),
        finalizer: None,
    }));
    assert_eq!(
        decode::<WatchEvent>(&encode(&event).unwrap()).unwrap(),
        event
    );
}

#[test]
fn garbage_is_a_typed_error() {
    assert!(matches!(
        decode::<WatchEvent>(b"xy"),
        Err(DecodeError::TooShort { len: 2 })
    ));
    assert!(matches!(
        decode::<WatchEvent>(b"{\"type\":\"ADDED\"}"),
        Err(DecodeError::BadMagic { .. })
    ));
    let mut unknown = encode(&rich_ip_event()).unwrap();
    unknown[2..10].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    assert!(matches!(
        decode::<WatchEvent>(&unknown),
        Err(DecodeError::UnknownFingerprint {
            fingerprint: 0x0807060504030201,
            ..
        })
    ));
    // An alert is not an event: its fingerprint is unknown to WatchEvent.
    assert!(matches!(
        decode::<WatchEvent>(&encode(&sample_alert()).unwrap()),
        Err(DecodeError::UnknownFingerprint { .. })
    ));
}

#[test]
fn every_truncation_of_a_message_is_an_error() {
    for bytes in [
        encode(&rich_ip_event()).unwrap(),
        encode_with(1, &rich_ip_event()),
    ] {
        for cut in 0..bytes.len() {
            assert!(
                decode::<WatchEvent>(&bytes[..cut]).is_err(),
                "a message cut at {cut} of {} bytes decoded",
                bytes.len()
            );
        }
    }
}

#[test]
fn messages_decoded_into_the_event_before_read_as_decoded_afresh() {
    let mut events = events_of_every_new_kind();
    events.push(rich_ip_event());
    events.push(events_of_every_new_kind()[0].clone());
    let analysis = Fields::analysis(&["ovn.kubernetes.io/ip_reserved"]);
    let mut whole = WatchEvent::blank();
    let mut kept = WatchEvent::blank();
    // Each event as today's schema writes it and, for the kinds v3 knew, as v3 did.
    let v3_knew = |e: &WatchEvent| matches!(e.stream, Stream::Pod | Stream::Ip | Stream::Subnet);
    for (event, older) in events
        .iter()
        .flat_map(|e| [(e, false), (e, true)])
        .filter(|(e, older)| !older || v3_knew(e))
    {
        let bytes = if older {
            encode_with(3, event)
        } else {
            encode(event).unwrap()
        };
        decode_into(&bytes, &Fields::ALL, &mut whole).unwrap();
        assert_eq!(whole, decode::<WatchEvent>(&bytes).unwrap());
        // A cut message is an error, and the next message reads whole all the same.
        assert!(decode_into(&bytes[..bytes.len() - 1], &analysis, &mut kept).is_err());
        decode_into(&bytes, &analysis, &mut kept).unwrap();
        let datum = &bytes[ipaudit_schemas::message::HEADER_LEN..];
        let version = if older {
            WireVersion::V3
        } else {
            WireVersion::V5
        };
        assert_eq!(
            kept,
            decode_watch_event_of(version, &analysis, datum).unwrap()
        );
    }
    let mut bytes = encode(&rich_ip_event()).unwrap();
    bytes.push(0);
    assert!(matches!(
        decode_into(&bytes, &analysis, &mut kept),
        Err(DecodeError::TrailingBytes { extra: 1, .. })
    ));
    assert!(matches!(
        decode_into(&bytes[..4], &analysis, &mut kept),
        Err(DecodeError::TooShort { len: 4 })
    ));
}

#[test]
fn trailing_bytes_are_an_error() {
    let mut bytes = encode(&sample_command()).unwrap();
    bytes.push(0);
    assert!(matches!(
        decode::<CleanupCommand>(&bytes),
        Err(DecodeError::TrailingBytes { extra: 1, .. })
    ));
}

proptest! {
    #[test]
    fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..400), current in any::<bool>()) {
        let mut bytes = if current { encode(&rich_ip_event()).unwrap()[..10].to_vec() } else { Vec::new() };
        bytes.extend(body);
        let _ = decode::<WatchEvent>(&bytes);
    }

    #[test]
    fn flipped_bytes_never_panic(index in 10usize..200, value in any::<u8>()) {
        let mut bytes = encode(&rich_ip_event()).unwrap();
        let index = index % bytes.len();
        bytes[index] = value;
        let _ = decode::<WatchEvent>(&bytes);
    }
}

#[test]
fn container_round_trips_many_events() {
    let events: Vec<WatchEvent> = (0..2_000)
        .map(|i| EventBuilder::ip(&format!("ip-{i}"), "s").rv(i + 1).added())
        .collect();
    let mut writer = ContainerWriter::<WatchEvent, _>::new(Vec::new()).unwrap();
    for e in &events {
        writer.append(e).unwrap();
    }
    let bytes = writer.finish().unwrap();
    let reader = ContainerReader::<WatchEvent, _>::new(&bytes[..]).unwrap();
    assert_eq!(reader.writer_version(), Some(5));
    let read: Vec<WatchEvent> = reader.map(Result::unwrap).collect();
    assert_eq!(read, events);
}

#[test]
fn container_written_with_schema_v1_is_read_by_the_current_schema() {
    let v1: &'static Schema = WatchEvent::schemas().versions()[0].schema;
    let mut writer = apache_avro::Writer::new(v1, Vec::new()).unwrap();
    let event = rich_ip_event();
    let mut value = to_value(&event).unwrap();
    strip_fields_newer_than(1, &mut value);
    writer.append_value(value.resolve(v1).unwrap()).unwrap();
    let bytes = writer.into_inner().unwrap();
    let mut reader = ContainerReader::<WatchEvent, _>::new(&bytes[..]).unwrap();
    assert_eq!(reader.writer_version(), Some(1));
    let read = reader.next().unwrap().unwrap();
    assert_eq!(read.metadata.as_ref().unwrap().last_update_ms, None);
    assert_eq!(read.part, event.part);
    assert!(reader.next().is_none());
}

#[test]
fn a_corrupt_container_block_is_reported_at_its_offset_after_the_good_records() {
    let mut writer =
        ContainerWriter::<WatchEvent, _>::with_codec(Vec::new(), apache_avro::Codec::Null).unwrap();
    for i in 0..10 {
        writer
            .append(&EventBuilder::ip(&format!("ip-{i}"), "s").rv(i + 1).added())
            .unwrap();
    }
    let mut bytes = writer.finish().unwrap();
    // A second block whose body is garbage.
    let good_len = bytes.len();
    let mut second =
        ContainerWriter::<WatchEvent, _>::with_codec(Vec::new(), apache_avro::Codec::Null).unwrap();
    second.append(&rich_ip_event()).unwrap();
    drop(second);
    bytes.extend_from_slice(&[2, 200, 1]);
    bytes.extend(std::iter::repeat_n(0xFF, 64));
    let results: Vec<_> = ContainerReader::<WatchEvent, _>::new(&bytes[..])
        .unwrap()
        .collect();
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        10,
        "the good block is read"
    );
    match results.last() {
        Some(Err(ContainerError::Corrupt {
            index: 10,
            byte_offset,
            ..
        })) => {
            assert_eq!(*byte_offset, good_len as u64, "the corrupt block's start")
        }
        other => panic!("expected a corrupt-block error, got {other:?}"),
    }
}

#[test]
fn a_container_of_another_record_type_is_refused() {
    let mut writer = ContainerWriter::<Alert, _>::new(Vec::new()).unwrap();
    writer.append(&sample_alert()).unwrap();
    let bytes = writer.finish().unwrap();
    assert!(matches!(
        ContainerReader::<WatchEvent, _>::new(&bytes[..]),
        Err(ContainerError::UnknownSchema { .. })
    ));
    assert!(matches!(
        ContainerReader::<WatchEvent, _>::new(&b"not avro"[..]),
        Err(ContainerError::Header(_))
    ));
}

#[test]
fn schema_files_are_self_contained_and_fingerprints_match_fastavros() {
    for set in [
        WatchEvent::schemas(),
        Alert::schemas(),
        CleanupCommand::schemas(),
    ] {
        for v in set.versions() {
            let reparsed = Schema::parse_str(v.text).unwrap();
            assert_eq!(reparsed.canonical_form(), v.schema.canonical_form());
        }
    }
    // Computed by fastavro (to_parsing_canonical_form + CRC-64-AVRO) for the .avsc files.
    let known: [(&[u8; 8], &str); 8] = [
        (
            &WatchEvent::schemas().versions()[0].fingerprint,
            "4276377706f36319",
        ),
        (
            &WatchEvent::schemas().versions()[1].fingerprint,
            "b1ad52423bdd850f",
        ),
        (
            &WatchEvent::schemas().versions()[2].fingerprint,
            "858366ea9a6bc4a6",
        ),
        (
            &WatchEvent::schemas().versions()[3].fingerprint,
            "1fa33b5eb5d51d63",
        ),
        (
            &Alert::schemas().versions()[0].fingerprint,
            "7c439695d966f1ad",
        ),
        (
            &Alert::schemas().versions()[1].fingerprint,
            "7eaf3ae7b5515569",
        ),
        (
            &CleanupCommand::schemas().versions()[0].fingerprint,
            "5fd0e20d3a4ccfa0",
        ),
        (
            &CleanupCommand::schemas().versions()[1].fingerprint,
            "5682cd94fbb2599e",
        ),
    ];
    for (fingerprint, hex) in known {
        let ours: String = fingerprint.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(ours, hex);
    }
}

/// A container of `blocks` blocks of `per_block` IP events each (rv 1, 2, ...), with the
/// byte range of each block (from its count to the end of its sync marker).
fn blocks_file(
    blocks: i64,
    per_block: i64,
    codec: apache_avro::Codec,
) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let mut writer = ContainerWriter::<WatchEvent, _>::with_codec(Vec::new(), codec).unwrap();
    for b in 0..blocks {
        for i in 0..per_block {
            let rv = b * per_block + i + 1;
            writer
                .append(&EventBuilder::ip(&format!("ip-{rv}"), "s").rv(rv).added())
                .unwrap();
        }
        writer.flush().unwrap();
    }
    let bytes = writer.finish().unwrap();
    let sync = bytes[bytes.len() - 16..].to_vec();
    let ends: Vec<usize> = bytes
        .windows(16)
        .enumerate()
        .filter(|(_, w)| *w == &sync[..])
        .map(|(i, _)| i + 16)
        .collect();
    // The first occurrence closes the header.
    let ranges = ends.windows(2).map(|w| w[0]..w[1]).collect();
    (bytes, ranges)
}

fn versions_and_errors(bytes: &[u8]) -> (Vec<i64>, Vec<ContainerError>) {
    let (mut versions, mut errors) = (Vec::new(), Vec::new());
    for item in ContainerReader::<WatchEvent, _>::new(bytes).unwrap() {
        match item {
            Ok(e) => versions.push(e.resource_version_num.unwrap()),
            Err(e) => errors.push(e),
        }
    }
    (versions, errors)
}

#[test]
fn a_corrupt_block_size_is_skipped_to_the_next_sync_marker_and_reading_goes_on() {
    for codec in [
        apache_avro::Codec::Null,
        apache_avro::Codec::Deflate(Default::default()),
    ] {
        let (mut bytes, blocks) = blocks_file(3, 4, codec);
        assert_eq!(blocks.len(), 3);
        // The middle block's record count becomes a size of many bytes: it swallows the
        // third block unless the reader searches what it read for the sync marker.
        let middle = blocks[1].clone();
        bytes[middle.start] = 8; // count 4, as before
        bytes[middle.start + 1] = 0xFE; // a size varint of ...
        bytes.insert(middle.start + 2, 0x07); // ... 508 bytes: more than the block
        let (versions, errors) = versions_and_errors(&bytes);
        assert_eq!(versions, [1, 2, 3, 4, 9, 10, 11, 12], "{errors:?}");
        match &errors[..] {
            [ContainerError::Corrupt {
                index: 4,
                byte_offset,
                resumed: true,
                skipped_bytes,
                ..
            }] => {
                assert_eq!(*byte_offset, middle.start as u64);
                assert_eq!(*skipped_bytes, (middle.end - middle.start + 1) as u64);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_corrupt_record_loses_only_the_rest_of_its_block() {
    let (mut bytes, blocks) = blocks_file(3, 4, apache_avro::Codec::Null);
    // The first record's cluster id length becomes negative.
    let middle = blocks[1].clone();
    bytes[middle.start + 2] = 0x01;
    let (versions, errors) = versions_and_errors(&bytes);
    assert_eq!(versions, [1, 2, 3, 4, 9, 10, 11, 12]);
    assert!(
        matches!(
            &errors[..],
            [ContainerError::Corrupt {
                index: 4,
                resumed: true,
                ..
            }]
        ),
        "{errors:?}"
    );
    assert!(errors[0].to_string().contains("resumed"), "{}", errors[0]);
}

#[test]
fn garbage_after_the_last_block_is_reported_not_resumed() {
    let (mut bytes, _) = blocks_file(2, 2, apache_avro::Codec::Null);
    bytes.extend_from_slice(&[0x02, 0x7F, 0xAA, 0xBB]);
    let (versions, errors) = versions_and_errors(&bytes);
    assert_eq!(versions, [1, 2, 3, 4]);
    assert!(
        matches!(
            &errors[..],
            [ContainerError::Corrupt {
                index: 4,
                resumed: false,
                ..
            }]
        ),
        "{errors:?}"
    );
}

#[test]
fn concatenated_container_files_are_read_whole() {
    let (a, _) = blocks_file(2, 3, apache_avro::Codec::Null);
    let (b, _) = blocks_file(1, 2, apache_avro::Codec::Deflate(Default::default()));
    let mut both = a.clone();
    both.extend_from_slice(&b);
    let (versions, errors) = versions_and_errors(&both);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(versions, [1, 2, 3, 4, 5, 6, 1, 2]);
}

#[test]
fn a_block_declaring_more_than_the_cap_is_refused_without_allocating_it() {
    let (mut bytes, blocks) = blocks_file(1, 1, apache_avro::Codec::Null);
    let start = blocks[0].start;
    // count 1, size 2^40 (zigzag varint).
    let mut header = vec![0x02];
    let mut z: u64 = 1 << 41;
    while z >= 0x80 {
        header.push((z as u8) | 0x80);
        z >>= 7;
    }
    header.push(z as u8);
    bytes.splice(start..start + 2, header);
    let (versions, errors) = versions_and_errors(&bytes);
    assert!(versions.is_empty());
    assert!(
        matches!(
            &errors[..],
            [ContainerError::Corrupt {
                source: ipaudit_schemas::container::BlockError::BadHeader { .. },
                ..
            }]
        ),
        "{errors:?}"
    );
}

#[test]
fn a_message_of_a_newer_schema_decodes_once_its_schema_is_learnt_and_a_new_kind_reads_as_unknown() {
    use ipaudit_schemas::builders::NextVersion;
    use ipaudit_schemas::{decode_into_with, decode_with, WriterSchemas};
    let next = NextVersion::new();
    let known = rich_ip_event();
    let message = next.encode(&known);
    let unknown_kind = next.encode_unknown_kind(&known, "pool-1");
    let mut learnt = WriterSchemas::new();
    assert!(matches!(
        decode_with::<WatchEvent>(&message, &learnt),
        Err(DecodeError::UnknownFingerprint { .. })
    ));
    assert!(learnt
        .learn::<WatchEvent>(&next.fingerprint, next.text.as_bytes())
        .unwrap());
    assert_eq!(decode_with::<WatchEvent>(&message, &learnt).unwrap(), known);
    let unknown = decode_with::<WatchEvent>(&unknown_kind, &learnt).unwrap();
    assert_eq!(unknown.stream, Stream::Unknown);
    assert_eq!(unknown.resource_version, known.resource_version);
    assert!(unknown.part.is_none());
    let mut into = WatchEvent::blank();
    decode_into_with(&message, &Fields::ALL, &mut into, &learnt).unwrap();
    assert_eq!(into, known);
    // Cut anywhere, a message of a learnt schema is an error, never a record.
    for cut in 10..message.len() {
        assert!(
            decode_with::<WatchEvent>(&message[..cut], &learnt).is_err(),
            "cut at {cut}"
        );
    }
    // Without the learnt schemas the build's own decoder still refuses it.
    assert!(decode::<WatchEvent>(&message).is_err());
}

#[test]
fn a_block_header_cut_short_after_a_block_whose_data_held_the_sync_marker_is_reported_not_searched_in_that_data(
) {
    // Found by the avro_container fuzz target: the search for the next sync marker looked
    // at the previous block's bytes too, found the marker inside them, and "unread" more
    // than had been read since the block began (an overflow; wrapped, it re-read the
    // previous block's bytes).
    let (mut bytes, _) = blocks_file(1, 2, apache_avro::Codec::Null);
    let sync = bytes[bytes.len() - 16..].to_vec();
    // A block of one record whose data starts with a negative length (an error in the
    // datum, the block itself whole) and holds the sync marker and 8 bytes more.
    let mut data = vec![0x01];
    data.extend_from_slice(&sync);
    data.extend_from_slice(&[0; 8]);
    bytes.push(0x02); // count 1
    bytes.push((data.len() as u8) << 1); // size
    bytes.extend_from_slice(&data);
    bytes.extend_from_slice(&sync);
    // Then a block header cut after its count.
    bytes.push(0x02);
    let (versions, errors) = versions_and_errors(&bytes);
    assert_eq!(versions, [1, 2]);
    match &errors[..] {
        [ContainerError::Corrupt { resumed: true, .. }, ContainerError::Corrupt {
            resumed: false,
            skipped_bytes: 1,
            ..
        }] => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_container_whose_schema_has_a_field_attribute_apache_avro_cannot_put_in_canonical_form_is_read_without_a_panic(
) {
    // Found by the avro_container fuzz target: apache-avro parses `"symbols": null` on a
    // field as a custom attribute, and then panics computing the schema's canonical form.
    let schema = apache_avro::Schema::parse_str(
        r#"{"type":"record","name":"R","fields":[{"name":"f","type":"long","symbols":null}]}"#,
    )
    .expect("apache-avro parses it");
    assert_eq!(ipaudit_schemas::registry::canonical_form(&schema), None);
    assert_eq!(ipaudit_schemas::registry::fingerprint(&schema), None);
    // A recording whose header carries it: the field's `"default":null` becomes
    // `"symbols":null`, as long, so that the header's lengths stay right.
    let (mut bytes, _) = blocks_file(1, 1, apache_avro::Codec::Null);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let field = r#""name":"generation","type":["null","long"],"default":null"#;
    let at = text
        .find(field)
        .expect("the schema has metadata.generation")
        + field.len();
    let symbols = r#""symbols":null"#;
    bytes[at - symbols.len()..at].copy_from_slice(symbols.as_bytes());
    let (versions, _) = match ContainerReader::<WatchEvent, _>::new(&bytes[..]) {
        Ok(_) => versions_and_errors(&bytes),
        Err(_) => (Vec::new(), Vec::new()),
    };
    assert!(versions.len() <= 1);
}
