//! fastavro (Python, PyPI) reads the container files and messages ipaudit writes.
//! Needs `python3` with `fastavro` (`pip install fastavro`; the test script installs it).

use std::process::Command;

use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{encode, ContainerWriter, Record, Stream, WatchEvent};

#[test]
fn fastavro_reads_the_same_records_ipaudit_wrote() {
    let mut events = vec![
        EventBuilder::subnet("net-1")
            .rv(10)
            .at(1_700_000_000_000)
            .using_ips(3)
            .added(),
        EventBuilder::ip("vm-1.ns", "net-1")
            .rv(11)
            .at(1_700_000_000_001)
            .ip_of("ns", "vm-1", "10.0.0.5", "VirtualMachine")
            .attach_subnets(&["att"])
            .deleting(1_700_000_000_000)
            .modified(),
        EventBuilder::pod("ns", "virt-launcher-vm-1").rv(12).added(),
        EventBuilder::bookmark(Stream::Ip, 13),
    ];
    events[1].raw_object = Some("{\"kind\":\"IP\"}".into());
    events[1]
        .metadata
        .as_mut()
        .unwrap()
        .annotations
        .insert("ovn.kubernetes.io/allocated".into(), "true".into());
    let dir = tempfile::tempdir().unwrap();
    let container = dir.path().join("events.avro");
    let mut writer =
        ContainerWriter::<WatchEvent, _>::new(std::fs::File::create(&container).unwrap()).unwrap();
    for e in &events {
        writer.append(e).unwrap();
    }
    writer.finish().unwrap();
    let message = dir.path().join("message.bin");
    std::fs::write(&message, encode(&events[0]).unwrap()).unwrap();
    let expected = dir.path().join("expected.json");
    std::fs::write(&expected, serde_json::to_vec(&events).unwrap()).unwrap();
    let schema = dir.path().join("schema.avsc");
    std::fs::write(&schema, WatchEvent::schemas().current().text).unwrap();

    // The checkout the test runs from (cargo and nextest say so), not necessarily the one
    // it was compiled in: CI's build cache is shared between checkouts.
    let script = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(
            || env!("CARGO_MANIFEST_DIR").into(),
            std::path::PathBuf::from,
        )
        .join("interop/fastavro_reads_ipaudit.py");
    let output = Command::new("python3")
        .args([
            script.as_ref(),
            container.as_os_str(),
            message.as_os_str(),
            expected.as_os_str(),
            schema.as_os_str(),
        ])
        .output()
        .expect("python3 runs (install python3 and `pip install fastavro`)");
    assert!(
        output.status.success(),
        "fastavro disagreed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
