//! The collector end to end: simulated API server -> `collector run` (a process) -> a real
//! broker (tansu) -> read back from the topic. What the collector is for is completeness:
//! each test names a way to lose events and proves none is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ipaudit_schemas::{EventType, Stream, WatchEvent};
use ipaudit_tests::broker::Broker;
use ipaudit_tests::collector::{workspace_binary, CollectorProcess};
use ipaudit_tests::scenario::{ip, play_kube_ovn_seed, subnet};
use ipaudit_tests::seen_alerts;
use ipaudit_tests::world::World;
use kube_sim::{Kind, KubeSim, Mutation};
use serde_json::json;

fn stream_of(kind: Kind) -> Stream {
    match kind {
        Kind::Pod => Stream::Pod,
        Kind::Ip => Stream::Ip,
        Kind::Subnet => Stream::Subnet,
    }
}

fn type_of(name: &str) -> EventType {
    match name {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        _ => EventType::Deleted,
    }
}

/// (stream, object key, type, resourceVersion) of a mutation or an event.
type Key = (Stream, String, EventType, i64);

fn mutation_key(m: &Mutation) -> Key {
    (
        stream_of(m.kind),
        m.key.clone(),
        type_of(m.event_type),
        m.rv as i64,
    )
}

fn event_key(e: &WatchEvent) -> Key {
    (
        e.stream,
        e.object_key(),
        e.event_type,
        e.resource_version_num.unwrap_or(-1),
    )
}

/// Watch events (not markers, not relist items) by key, with how often each came.
fn watch_event_counts(events: &[WatchEvent]) -> BTreeMap<Key, usize> {
    let mut in_relist = BTreeSet::new();
    let mut counts = BTreeMap::new();
    for e in events {
        match e.event_type {
            EventType::SyncStart => {
                in_relist.insert(e.stream);
            }
            EventType::SyncEnd => {
                in_relist.remove(&e.stream);
            }
            EventType::Bookmark | EventType::DeletedOnRelist => {}
            _ if in_relist.contains(&e.stream) => {}
            _ => *counts.entry(event_key(e)).or_insert(0) += 1,
        }
    }
    counts
}

fn all_mutations_in(journal: &[Mutation]) -> impl Fn(&[WatchEvent]) -> bool + '_ {
    move |events| {
        let counts = watch_event_counts(events);
        journal
            .iter()
            .all(|m| counts.contains_key(&mutation_key(m)))
    }
}

fn missing(journal: &[Mutation], events: &[WatchEvent]) -> Vec<Key> {
    let counts = watch_event_counts(events);
    journal
        .iter()
        .map(mutation_key)
        .filter(|k| !counts.contains_key(k))
        .collect()
}

#[test]
fn the_kube_ovn_seed_arrives_exactly_once_in_per_stream_version_order() {
    let world = World::new("seed", None);
    let collector = world.collector();
    play_kube_ovn_seed(&world.sim, false);
    let journal = world.sim.journal();
    let events = world.events_until(Duration::from_secs(30), all_mutations_in(&journal));
    assert_eq!(
        missing(&journal, &events),
        Vec::<Key>::new(),
        "log:\n{}",
        collector.log_text()
    );
    let counts = watch_event_counts(&events);
    let expected: BTreeMap<Key, usize> = journal.iter().map(|m| (mutation_key(m), 1)).collect();
    assert_eq!(
        counts, expected,
        "every mutation exactly once, nothing else"
    );
    for stream in Stream::ALL {
        let versions: Vec<i64> = events
            .iter()
            .filter(|e| e.stream == stream && e.event_type.carries_object())
            .filter_map(|e| e.resource_version_num)
            .collect();
        assert!(
            versions.windows(2).all(|w| w[0] < w[1]),
            "{stream}: {versions:?}"
        );
        let sequences: Vec<i64> = events
            .iter()
            .filter(|e| e.stream == stream)
            .map(|e| e.sequence)
            .collect();
        assert!(
            sequences.windows(2).all(|w| w[1] == w[0] + 1),
            "{stream} sequences: {sequences:?}"
        );
    }
    assert!(events
        .iter()
        .all(|e| e.cluster_id == "lab" && e.observed_at_ms.is_some()));
}

/// Creates, changes and deletes IPs for a while, from another thread.
fn churn(sim: &KubeSim, rounds: usize, pause: Duration) {
    let _ = sim.create(Kind::Subnet, "", subnet("churn-net", "10.99.0.0/16"));
    for i in 0..rounds {
        let name = format!("pod-{i}.churn");
        let _ = sim.create(
            Kind::Ip,
            "",
            ip(
                &name,
                "churn-net",
                &format!("pod-{i}"),
                "churn",
                &format!("10.99.{}.{}", i / 250, i % 250 + 1),
                "",
            ),
        );
        let _ = sim.update(Kind::Ip, "", &name, |o| {
            o["spec"]["nodeName"] = json!("node-2")
        });
        if i % 3 == 0 {
            let _ = sim.delete(Kind::Ip, "", &name);
            let _ = sim.remove_finalizers(Kind::Ip, "", &name);
        }
        std::thread::sleep(pause);
    }
}

#[test]
fn a_collector_killed_mid_stream_and_restarted_loses_nothing() {
    let world = World::new("sigkill", None);
    let collector = world.collector();
    std::thread::scope(|scope| {
        let sim = &world.sim;
        let changes = scope.spawn(move || churn(sim, 400, Duration::from_millis(10)));
        std::thread::sleep(Duration::from_millis(1_500));
        collector.kill();
        std::thread::sleep(Duration::from_millis(700));
        let restarted = world.collector();
        changes.join().expect("churn");
        let journal = world.sim.journal();
        let events = world.events_until(Duration::from_secs(60), all_mutations_in(&journal));
        assert_eq!(
            missing(&journal, &events),
            Vec::<Key>::new(),
            "log:\n{}",
            restarted.log_text()
        );
        // A duplicate is the same event again: one type per (uid, resourceVersion).
        let mut types: BTreeMap<(String, i64), BTreeSet<EventType>> = BTreeMap::new();
        for e in events
            .iter()
            .filter(|e| e.event_type.carries_object() && e.event_type != EventType::DeletedOnRelist)
        {
            types
                .entry((e.uid().to_owned(), e.resource_version_num.unwrap_or(-1)))
                .or_default()
                .insert(e.event_type);
        }
        let conflicting: Vec<_> = types.iter().filter(|(_, t)| t.len() > 1).collect();
        assert!(conflicting.is_empty(), "{conflicting:?}");
    });
}

#[test]
fn events_made_while_the_broker_is_down_for_30s_all_arrive() {
    let mut broker = Broker::start_persistent();
    let world = World::new("outage", Some(broker.addr.clone()));
    let collector = world.collector();
    std::thread::scope(|scope| {
        let sim = &world.sim;
        let changes = scope.spawn(move || churn(sim, 700, Duration::from_millis(50)));
        std::thread::sleep(Duration::from_secs(2));
        broker.stop();
        std::thread::sleep(Duration::from_secs(30));
        broker.restart();
        changes.join().expect("churn");
    });
    let journal = world.sim.journal();
    let events = world.events_until(Duration::from_secs(90), all_mutations_in(&journal));
    assert_eq!(
        missing(&journal, &events),
        Vec::<Key>::new(),
        "log:\n{}",
        collector.log_text()
    );
}

#[test]
fn deletions_missed_while_the_watch_was_cut_and_versions_expired_arrive_as_deleted_on_relist() {
    let world = World::new("relist", None);
    let collector = world.collector();
    world
        .sim
        .create(Kind::Subnet, "", subnet("doomed", "10.7.0.0/24"))
        .unwrap();
    let ips: Vec<String> = (0..3).map(|i| format!("pod-{i}.doomed")).collect();
    for (i, name) in ips.iter().enumerate() {
        world
            .sim
            .create(
                Kind::Ip,
                "",
                ip(
                    name,
                    "doomed",
                    &format!("pod-{i}"),
                    "ns",
                    &format!("10.7.0.{}", i + 2),
                    "",
                ),
            )
            .unwrap();
    }
    let journal = world.sim.journal();
    world.events_until(Duration::from_secs(30), all_mutations_in(&journal));
    world.sim.pause();
    for name in &ips {
        world.sim.delete(Kind::Ip, "", name).unwrap();
        world.sim.remove_finalizers(Kind::Ip, "", name).unwrap();
    }
    world.sim.delete(Kind::Subnet, "", "doomed").unwrap();
    world
        .sim
        .remove_finalizers(Kind::Subnet, "", "doomed")
        .unwrap();
    world.sim.expire_history();
    world.sim.resume();
    // Every stream's stored version expired: each relists (the first three frames were
    // the initial lists).
    let gone = |events: &[WatchEvent]| {
        events
            .iter()
            .filter(|e| e.event_type == EventType::DeletedOnRelist)
            .count()
            >= 4
            && events
                .iter()
                .filter(|e| e.event_type == EventType::SyncEnd)
                .count()
                >= 6
    };
    let events = world.events_until(Duration::from_secs(30), gone);
    let mut deleted: Vec<(Stream, String)> = events
        .iter()
        .filter(|e| e.event_type == EventType::DeletedOnRelist)
        .map(|e| (e.stream, e.object_key()))
        .collect();
    deleted.sort();
    let mut expected: Vec<(Stream, String)> = ips.iter().map(|n| (Stream::Ip, n.clone())).collect();
    expected.push((Stream::Subnet, "doomed".into()));
    assert_eq!(deleted, expected, "log:\n{}", collector.log_text());
    assert!(
        !events.iter().any(|e| e.event_type == EventType::Deleted),
        "the deletions were never watched"
    );
    // Each DELETED_ON_RELIST sits inside its stream's SYNC_START..SYNC_END, at the list's version.
    for dor in events
        .iter()
        .filter(|e| e.event_type == EventType::DeletedOnRelist)
    {
        let end = events
            .iter()
            .find(|e| {
                e.stream == dor.stream
                    && e.event_type == EventType::SyncEnd
                    && e.sequence > dor.sequence
            })
            .expect("a SYNC_END follows");
        assert_eq!(end.resource_version, dor.resource_version);
    }
    assert!(
        collector.counter("ipaudit_relists_total{stream=\"ip\",reason=\"expired\"}") >= 1.0,
        "{}",
        collector.metrics()
    );
}

#[test]
fn malformed_objects_are_recorded_with_what_could_be_read_and_counted() {
    let world = World::new("malformed", None);
    let mut collector = world.collector();
    world.sim.put_raw(Kind::Ip, "", "broken.ns", json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
        "metadata": {"name": "broken.ns", "uid": "u-broken", "finalizers": "kubeovn.io/kube-ovn-controller", "labels": ["x"]},
        "spec": {"subnet": 42, "ipAddress": ["10.0.0.1"]}}));
    world.sim.put_raw(Kind::Subnet, "", "odd", json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": "odd", "uid": "u-odd", "creationTimestamp": "yesterday"},
        "spec": "not an object", "status": {"v4usingIPs": 340282366920938463463374607431768211455u128.to_string()}}));
    world
        .sim
        .create(
            Kind::Ip,
            "",
            ip("fine.ns", "net", "fine", "ns", "10.0.0.2", ""),
        )
        .unwrap();
    let journal = world.sim.journal();
    let events = world.events_until(Duration::from_secs(30), all_mutations_in(&journal));
    assert_eq!(missing(&journal, &events), Vec::<Key>::new());
    let broken = events
        .iter()
        .find(|e| e.object_key() == "broken.ns")
        .expect("recorded");
    assert_eq!(broken.uid(), "u-broken");
    assert!(broken.resource_version_num.is_some());
    assert_eq!(broken.ip.as_ref().map(|i| i.subnet.as_str()), Some(""));
    assert!(broken
        .raw_object
        .as_deref()
        .is_some_and(|raw| raw.contains("\"subnet\":42")));
    let odd = events
        .iter()
        .find(|e| e.object_key() == "odd")
        .expect("recorded");
    assert!(odd.raw_object.is_some());
    let fine = events
        .iter()
        .find(|e| e.object_key() == "fine.ns")
        .expect("recorded");
    assert!(fine.raw_object.is_none());
    assert_eq!(
        collector.counter("ipaudit_malformed_objects_total{stream=\"ip\"}"),
        1.0,
        "{}",
        collector.metrics()
    );
    assert_eq!(
        collector.counter("ipaudit_malformed_objects_total{stream=\"subnet\"}"),
        1.0
    );
    assert!(collector.is_running());
}

#[test]
fn sigterm_drains_the_outbox_and_exits_cleanly() {
    let world = World::new("sigterm", None);
    let collector = world.collector();
    play_kube_ovn_seed(&world.sim, true);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        collector.terminate(Duration::from_secs(30)),
        "exit code 0 after SIGTERM"
    );
    let journal = world.sim.journal();
    let events = world.events_until(Duration::from_secs(20), all_mutations_in(&journal));
    assert_eq!(missing(&journal, &events), Vec::<Key>::new());
}

#[test]
fn collector_record_replays_with_the_same_findings_as_the_kubectl_recording() {
    let world = World::new("record", None);
    let recording = world.dir.path().join("seed.avro");
    let record_log = std::fs::File::create(world.dir.path().join("record.log")).unwrap();
    let mut record = Command::new(workspace_binary("collector"))
        .args([
            "record",
            "--kubeconfig",
            &world.kubeconfig.display().to_string(),
            "--cluster-id",
            "lab",
        ])
        .args(["--out", &recording.display().to_string()])
        .stderr(record_log)
        .spawn()
        .expect("collector record");
    let mut kubectl = Vec::new();
    let mut files = Vec::new();
    for kind in ["pods", "ips", "subnets"] {
        let file = world.dir.path().join(format!("{kind}.json"));
        kubectl.push(
            Command::new("kubectl")
                .args(["--kubeconfig", &world.kubeconfig.display().to_string()])
                .args([
                    "get",
                    kind,
                    "-A",
                    "--watch",
                    "--output-watch-events",
                    "-o",
                    "json",
                ])
                .stdout(std::fs::File::create(&file).unwrap())
                .stderr(Stdio::null())
                .spawn()
                .expect("kubectl is installed"),
        );
        files.push(file);
    }
    std::thread::sleep(Duration::from_secs(2));
    play_kube_ovn_seed(&world.sim, false);
    std::thread::sleep(Duration::from_secs(2));
    for mut k in kubectl {
        let _ = k.kill();
        let _ = k.wait();
    }
    let _ = Command::new("kill")
        .args(["-TERM", &record.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while record.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(record.wait().unwrap().success());
    let findings = |paths: &[PathBuf]| {
        let outcome = ipaudit_analyzer::replay::replay(paths, &Default::default()).expect("replay");
        seen_alerts(&outcome.outputs)
    };
    let from_collector = findings(&[recording]);
    let from_kubectl = findings(&files);
    assert_eq!(from_collector, from_kubectl);
    let rules: Vec<&str> = from_collector.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(rules, ["subnet-deleted-before-ip", "ip-stuck-terminating"]);
}

#[test]
fn a_snapshot_interval_relists_every_stream_periodically() {
    let world = World::new("snapshot", None);
    let collector = CollectorProcess::start(&world.setup(), &["--snapshot-interval", "1s"]);
    world
        .sim
        .create(Kind::Subnet, "", subnet("kept", "10.8.0.0/24"))
        .unwrap();
    let frames = |events: &[WatchEvent]| {
        Stream::ALL.iter().all(|s| {
            events
                .iter()
                .filter(|e| e.stream == *s && e.event_type == EventType::SyncEnd)
                .count()
                >= 3
        })
    };
    let events = world.events_until(Duration::from_secs(20), frames);
    assert!(frames(&events), "log:\n{}", collector.log_text());
    // Each snapshot lists the live subnet again; none of it is a deletion.
    let listed = events
        .iter()
        .filter(|e| e.object_key() == "kept" && e.event_type == EventType::Added)
        .count();
    assert!(
        listed >= 2,
        "the subnet is in the later snapshots: {listed}"
    );
    assert!(!events
        .iter()
        .any(|e| e.event_type == EventType::DeletedOnRelist));
    assert!(
        collector.counter("ipaudit_relists_total{stream=\"subnet\",reason=\"snapshot\"}") >= 1.0
    );
}
