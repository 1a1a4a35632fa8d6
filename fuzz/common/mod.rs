//! What several targets share.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

/// A file of this process for a reader that reads paths, rewritten for each input:
/// `$IPAUDIT_FUZZ_TMP` (scripts/fuzz points it at /dev/shm when there is one), else the
/// temporary directory.
pub fn scratch(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let base = std::env::var_os("IPAUDIT_FUZZ_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("ipaudit-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    });
    dir.join(name)
}

/// `bytes` written to the scratch file `name`.
pub fn written(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, bytes).expect("the scratch file is written");
    path
}

/// What the collector ships of an event must read back as that event: encoded with
/// today's schema, decoded by any reader (the analyzer, `replay`).
pub fn ships_intact(event: &ipaudit_schemas::WatchEvent) {
    let bytes = ipaudit_schemas::encode(event).expect("every event the collector makes encodes");
    let back = ipaudit_schemas::decode::<ipaudit_schemas::WatchEvent>(&bytes)
        .expect("every event the collector encodes decodes");
    assert_eq!(&back, event, "the event changed through Avro");
}

/// The collector's stamp (fixed, so that events compare).
pub fn stamp(raw_objects: bool) -> ipaudit_collector::watch::event::Stamp {
    ipaudit_collector::watch::event::Stamp {
        cluster_id: "fuzz".into(),
        collector_id: "fuzz-0".into(),
        raw_objects,
    }
}

/// With `IPAUDIT_FUZZ_WRITE_SEEDS=<dir>` (scripts/fuzz seeds), writes the target's
/// generated seeds there and exits; else nothing (checked once per process).
pub fn write_seeds_if_asked(seeds: impl FnOnce() -> Vec<(String, Vec<u8>)>) {
    static ASKED: OnceLock<Option<std::ffi::OsString>> = OnceLock::new();
    let Some(dir) = ASKED.get_or_init(|| std::env::var_os("IPAUDIT_FUZZ_WRITE_SEEDS")) else {
        return;
    };
    let dir = std::path::Path::new(dir);
    std::fs::create_dir_all(dir).expect("the seed directory");
    for (name, bytes) in seeds() {
        std::fs::write(dir.join(name), bytes).expect("a seed is written");
    }
    std::process::exit(0);
}

/// Events of every kind, with most fields set: what the seeds are made of.
pub fn sample_events() -> Vec<ipaudit_schemas::WatchEvent> {
    use ipaudit_schemas::builders::EventBuilder;
    use ipaudit_schemas::{EventType, Stream};
    vec![
        EventBuilder::subnet("net1")
            .uid("s1")
            .rv(10)
            .at(1_000)
            .finalizers(&["kube-ovn-controller"])
            .added(),
        EventBuilder::pod("ns", "a")
            .uid("p1")
            .rv(11)
            .at(2_000)
            .network("ovn", "10.0.0.2")
            .phase("Running")
            .added(),
        EventBuilder::ip("a.ns", "net1")
            .uid("i1")
            .rv(12)
            .at(3_000)
            .attach_subnets(&["net2"])
            .owned_by("Subnet", "net1")
            .added(),
        EventBuilder::pod("ns", "a")
            .uid("p1")
            .rv(13)
            .at(4_000)
            .deleting(4_000)
            .deleted(),
        EventBuilder::ip_pool("kube-system", "pool1", "10.9.0.0/24")
            .uid("w1")
            .allocation(1, "10.9.0.1", "ns/a")
            .rv(14)
            .at(5_000)
            .added(),
        EventBuilder::reservation("kube-system", "10.9.0.1", "ns/a")
            .uid("r1")
            .rv(15)
            .at(5_500)
            .added(),
        EventBuilder::spider_pool("spool1", "10.8.0.0/24")
            .uid("sp1")
            .entry("10.8.0.1", "ns/a", "p1")
            .rv(16)
            .at(6_000)
            .modified(),
        EventBuilder::spider_endpoint("ns", "a", "p1")
            .uid("se1")
            .endpoint_ip("10.8.0.1", "spool1")
            .owner_controller("StatefulSet")
            .rv(17)
            .at(6_500)
            .added(),
        EventBuilder::subnet("net1")
            .uid("s1")
            .rv(18)
            .at(7_000)
            .deleted(),
        EventBuilder::bookmark(Stream::Ip, 19),
        EventBuilder::marker(Stream::Ip, EventType::SyncStart, 20),
        EventBuilder::marker(Stream::Ip, EventType::SyncEnd, 20),
    ]
}

/// The sample events single-object encoded with each schema version that holds them:
/// (version, message).
pub fn versioned_messages() -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    for event in sample_events() {
        for version in 1..=4 {
            if let Ok(message) = ipaudit_schemas::encode_as(&event, version) {
                out.push((version, message));
            }
        }
    }
    out
}

/// Container files of the sample events, one per schema version and codec.
pub fn sample_containers() -> Vec<(String, Vec<u8>)> {
    use apache_avro::{Codec, DeflateSettings, Writer};
    use ipaudit_schemas::registry::Record as _;
    use ipaudit_schemas::WatchEvent;
    let mut out = Vec::new();
    for (version, schema) in WatchEvent::schemas().versions().iter().enumerate() {
        for (codec_name, codec) in [
            ("null", Codec::Null),
            ("deflate", Codec::Deflate(DeflateSettings::default())),
        ] {
            let mut writer = Writer::builder()
                .schema(schema.schema)
                .writer(Vec::new())
                .codec(codec)
                .build()
                .expect("a writer");
            for event in sample_events() {
                if let Ok(value) =
                    apache_avro::to_value(&event).and_then(|v| v.resolve(schema.schema))
                {
                    writer.append_value(value).expect("appends");
                }
            }
            let bytes = writer.into_inner().expect("a container");
            out.push((format!("v{}-{codec_name}.avro", version + 1), bytes));
        }
    }
    out
}
