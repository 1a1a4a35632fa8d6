//! The collector end to end: simulated API server -> `collector run` (a process) -> a real
//! broker (Apache Kafka) -> read back from the topic. What the collector is for is completeness:
//! each test names a way to lose events and proves none is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use ipaudit_schemas::{kinds, EventType, KindPart, Stream, WatchEvent};
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::{partition_leader, Broker};
use ipaudit_tests::collector::{
    event_key, read_recording, watch_event_counts, CollectorProcess, EventKey,
};
use ipaudit_tests::poll_until;
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::scenario::{
    ip, play_kube_ovn_seed, play_subnet_deleted_under_live_ip, play_whereabouts_reconciler_race,
    subnet, subnet_leak_alert, WHEREABOUTS_NAMESPACE, WHEREABOUTS_NETWORK,
};
use ipaudit_tests::seen_alerts;
use ipaudit_tests::world::World;
use kube_sim::{Kind, KubeSim, Mutation};
use serde_json::json;

fn type_of(name: &str) -> EventType {
    match name {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        _ => EventType::Deleted,
    }
}

fn mutation_key(m: &Mutation) -> EventKey {
    (m.kind, m.key.clone(), type_of(m.event_type), m.rv as i64)
}

fn all_mutations_in(journal: &[Mutation]) -> impl Fn(&[WatchEvent]) -> bool + '_ {
    move |events| {
        let counts = watch_event_counts(events);
        journal
            .iter()
            .all(|m| counts.contains_key(&mutation_key(m)))
    }
}

fn missing(journal: &[Mutation], events: &[WatchEvent]) -> Vec<EventKey> {
    let counts = watch_event_counts(events);
    journal
        .iter()
        .map(mutation_key)
        .filter(|k| !counts.contains_key(k))
        .collect()
}

/// Reads the world's topic until every change the API server made is in it (at most
/// `timeout`); fails naming what is missing, with the collector's log. Returns the events.
fn every_change_arrives(
    world: &World,
    collector: &CollectorProcess,
    timeout: Duration,
) -> Vec<WatchEvent> {
    let journal = world.sim.journal();
    let events = world.events_until(timeout, all_mutations_in(&journal));
    assert_eq!(
        missing(&journal, &events),
        Vec::<EventKey>::new(),
        "log:\n{}",
        collector.log_text()
    );
    events
}

/// Nothing was quarantined, and the outbox empties within 10 s.
fn nothing_quarantined_and_the_outbox_empties(collector: &CollectorProcess) {
    assert_eq!(
        collector.counter("ipaudit_collector_quarantined_total"),
        0.0,
        "{}",
        collector.metrics()
    );
    let emptied = poll_until(Duration::from_secs(10), || {
        (collector.counter("ipaudit_collector_outbox_rows") == 0.0).then_some(())
    });
    assert!(
        emptied.is_some(),
        "the outbox empties: {}",
        collector.metrics()
    );
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
        Vec::<EventKey>::new(),
        "log:\n{}",
        collector.log_text()
    );
    let counts = watch_event_counts(&events);
    let expected: BTreeMap<EventKey, usize> =
        journal.iter().map(|m| (mutation_key(m), 1)).collect();
    assert_eq!(
        counts, expected,
        "every mutation exactly once, nothing else"
    );
    for stream in kinds::streams() {
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
            Vec::<EventKey>::new(),
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
    let mut broker = Broker::start();
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
    every_change_arrives(&world, &collector, Duration::from_secs(90));
}

/// A broker frozen (SIGSTOP: its connections stay open and nothing answers) for longer
/// than the producer's message timeout, then resumed: what timed out is sent again from
/// the outbox, so every change arrives, nothing is quarantined and the outbox empties.
#[test]
fn events_made_while_the_broker_is_frozen_past_the_message_timeout_all_arrive_none_quarantined() {
    let mut broker = Broker::start();
    let world = World::new("frozen", Some(broker.addr.clone()));
    // A 1.5 s message timeout (the collector's own is 300 s), so that a 3 s freeze outlasts
    // it. The freeze stays under the node's 4 s broker session: a single KRaft node frozen
    // longer fences itself, and its recovery after SIGCONT sometimes took over 90 s.
    let collector = CollectorProcess::start(
        &world.setup(),
        &["--kafka-option", "message.timeout.ms=1500"],
    );
    std::thread::scope(|scope| {
        let sim = &world.sim;
        let changes = scope.spawn(move || churn(sim, 400, Duration::from_millis(40)));
        std::thread::sleep(Duration::from_secs(2));
        broker.pause();
        std::thread::sleep(Duration::from_secs(3));
        broker.resume();
        changes.join().expect("churn");
    });
    every_change_arrives(&world, &collector, Duration::from_secs(90));
    assert!(
        collector.counter("ipaudit_collector_kafka_messages_total{result=\"failed\"}") >= 1.0,
        "the freeze outlasted the message timeout: deliveries failed and were sent again\n{}",
        collector.metrics()
    );
    nothing_quarantined_and_the_outbox_empties(&collector);
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
    // Every stream's stored version expired: each relists (the first frame of each stream
    // was its initial list).
    let streams = kinds::streams().count();
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
                >= 2 * streams
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
        collector.counter("ipaudit_collector_relists_total{stream=\"ip\",reason=\"expired\"}")
            >= 1.0,
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
        "spec": {"subnet": 42, "ipAddress": ["10.0.0.1"]}})).unwrap();
    world.sim.put_raw(Kind::Subnet, "", "odd", json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": "odd", "uid": "u-odd", "creationTimestamp": "yesterday"},
        "spec": "not an object", "status": {"v4usingIPs": 340282366920938463463374607431768211455u128.to_string()}})).unwrap();
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
    assert_eq!(missing(&journal, &events), Vec::<EventKey>::new());
    let broken = events
        .iter()
        .find(|e| e.object_key() == "broken.ns")
        .expect("recorded");
    assert_eq!(broken.uid(), "u-broken");
    assert!(broken.resource_version_num.is_some());
    match &broken.part {
        Some(KindPart::Ip(ip)) => assert_eq!(ip.subnet, "", "the number is not a subnet name"),
        other => panic!("an IP's part: {other:?}"),
    }
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
        collector.counter("ipaudit_collector_malformed_objects_total{stream=\"ip\"}"),
        1.0,
        "{}",
        collector.metrics()
    );
    assert_eq!(
        collector.counter("ipaudit_collector_malformed_objects_total{stream=\"subnet\"}"),
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
    assert_eq!(missing(&journal, &events), Vec::<EventKey>::new());
}

#[test]
fn collector_record_replays_with_the_same_findings_as_the_kubectl_recording() {
    let world = World::new("record", None);
    let recording = world.dir.path().join("seed.avro");
    let record = CollectorProcess::record(&world.kubeconfig, &recording, &[]);
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
    assert!(
        record.terminate(Duration::from_secs(20)),
        "collector record exits cleanly on SIGTERM"
    );
    let findings = |paths: &[PathBuf]| {
        let outcome =
            ipaudit_analyzer::offline::replay::replay(paths, &Default::default()).expect("replay");
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
        kinds::streams().all(|s| {
            events
                .iter()
                .filter(|e| e.stream == s && e.event_type == EventType::SyncEnd)
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
        collector.counter("ipaudit_collector_relists_total{stream=\"subnet\",reason=\"snapshot\"}")
            >= 1.0
    );
}

#[test]
fn a_periodic_snapshot_keeps_every_event_its_watch_has_yet_to_deliver() {
    // The IP watch runs 1.5 s behind the API server, so every snapshot (each second) is
    // taken while the IP's changes are still on their way in it: a snapshot listed past
    // them and a new watch from the list's version would record the IP deleted on relist,
    // its MODIFIED and DELETED never.
    let world = World::new("snapshot-lag", None);
    world
        .sim
        .delay_watch_events(Kind::Ip, Duration::from_millis(1_500));
    let collector = CollectorProcess::start(&world.setup(), &["--snapshot-interval", "1s"]);
    world
        .sim
        .create(Kind::Subnet, "", subnet("lag", "10.9.0.0/24"))
        .unwrap();
    world
        .sim
        .create(
            Kind::Ip,
            "",
            ip("p.ns", "lag", "p", "ns", "10.9.0.5", "pod"),
        )
        .unwrap();
    world.sim.remove_finalizers(Kind::Ip, "", "p.ns").unwrap();
    world.sim.delete(Kind::Ip, "", "p.ns").unwrap();
    let journal = world.sim.journal();
    let deleted_at = journal.last().map(|m| m.rv as i64).unwrap_or_default();
    // Done once every change came as the watch's own event and a snapshot of IPs was
    // framed after the deletion.
    let done = |events: &[WatchEvent]| {
        all_mutations_in(&journal)(events)
            && events.iter().any(|e| {
                e.stream == Stream::Ip
                    && e.event_type == EventType::SyncEnd
                    && e.resource_version_num >= Some(deleted_at)
            })
    };
    let events = world.events_until(Duration::from_secs(30), done);
    assert_eq!(
        missing(&journal, &events),
        vec![],
        "log:\n{}",
        collector.log_text()
    );
    let relist_deletions: Vec<EventKey> = events
        .iter()
        .filter(|e| e.event_type == EventType::DeletedOnRelist)
        .map(event_key)
        .collect();
    assert_eq!(relist_deletions, vec![], "the watch said what happened");
    assert!(
        collector.counter("ipaudit_collector_relists_total{stream=\"ip\",reason=\"snapshot\"}")
            >= 2.0,
        "{}",
        collector.metrics()
    );
    assert_eq!(
        collector
            .counter("ipaudit_collector_relists_total{stream=\"ip\",reason=\"snapshot_fallback\"}"),
        0.0
    );
}

/// The allocation offsets of each IPPool state recorded, in order.
fn pool_allocations(events: &[WatchEvent]) -> Vec<Vec<String>> {
    events
        .iter()
        .filter_map(|e| match &e.part {
            Some(KindPart::IpPool(pool)) => {
                Some(pool.allocations.iter().map(|a| a.offset.clone()).collect())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_collector_on_a_cluster_with_only_whereabouts_records_the_reconciler_race_and_replay_finds_it()
{
    let world = World::serving(
        "whereabouts",
        &[Kind::Pod, Kind::IpPool, Kind::OverlappingRangeIpReservation],
    );
    let recording = world.dir.path().join("whereabouts.avro");
    // No --kinds: discovery finds pods and whereabouts' two kinds, and nothing of kube-ovn.
    let record = CollectorProcess::record(&world.kubeconfig, &recording, &[]);
    let log = record.log.clone();
    let seed = play_whereabouts_reconciler_race(&world.sim);
    let journal = world.sim.journal();
    // Stop once the last change is recorded: the sink flushes every batch to the file.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !all_mutations_in(&journal)(&read_recording(&recording))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        record.terminate(Duration::from_secs(20)),
        "collector record exits cleanly on SIGTERM"
    );
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        log.contains("watching")
            && log.contains("ippools.whereabouts.cni.cncf.io/v1alpha1")
            && !log.contains("kubeovn.io"),
        "the watched kinds are logged at start:\n{log}"
    );
    let events = read_recording(&recording);

    // Exactly the three served streams, each listed once, and every change exactly once.
    let streams: BTreeSet<Stream> = events.iter().map(|e| e.stream).collect();
    assert_eq!(
        streams,
        BTreeSet::from([
            Stream::Pod,
            Stream::IpPool,
            Stream::OverlappingRangeIpReservation
        ])
    );
    assert_eq!(
        missing(&journal, &events),
        Vec::<EventKey>::new(),
        "log:\n{log}"
    );
    let expected: BTreeMap<EventKey, usize> =
        journal.iter().map(|m| (mutation_key(m), 1)).collect();
    assert_eq!(watch_event_counts(&events), expected);

    // The pool: 45, 46, 47 allocated; 47 removed by the reconciler's patch; 47 again.
    let pool_key = format!("{WHEREABOUTS_NAMESPACE}/{}", seed.pool);
    let pool_events: Vec<&WatchEvent> = events
        .iter()
        .filter(|e| e.stream == Stream::IpPool && e.event_type.carries_object())
        .collect();
    assert!(pool_events.iter().all(|e| e.object_key() == pool_key));
    let types: Vec<EventType> = pool_events.iter().map(|e| e.event_type).collect();
    assert_eq!(
        types,
        [
            EventType::Added,
            EventType::Modified,
            EventType::Modified,
            EventType::Modified,
            EventType::Modified,
            EventType::Modified
        ]
    );
    let owned: Vec<WatchEvent> = pool_events.into_iter().cloned().collect();
    assert_eq!(
        pool_allocations(&owned),
        [
            vec![],
            vec!["45"],
            vec!["45", "46"],
            vec!["45", "46", "47"],
            vec!["45", "46"],
            vec!["45", "46", "47"],
        ]
    );
    let podref_47 = |e: &WatchEvent| match &e.part {
        Some(KindPart::IpPool(pool)) => pool
            .allocations
            .iter()
            .find(|a| a.address == seed.address)
            .map(|a| a.podref.clone()),
        _ => None,
    };
    assert_eq!(
        owned.iter().filter_map(podref_47).collect::<Vec<_>>(),
        ["default/web-2", "default/web-3"]
    );

    // The reservation of 10.128.40.47: web-2's, deleted, then web-3's.
    let reservations: Vec<(EventType, String)> = events
        .iter()
        .filter(|e| {
            e.stream == Stream::OverlappingRangeIpReservation
                && e.object_key() == format!("{WHEREABOUTS_NAMESPACE}/{}", seed.address)
                && e.event_type.carries_object()
        })
        .map(|e| match &e.part {
            Some(KindPart::IpReservation(r)) => (e.event_type, r.podref.clone()),
            other => panic!("a reservation's part: {other:?}"),
        })
        .collect();
    assert_eq!(
        reservations,
        [
            (EventType::Added, "default/web-2".to_owned()),
            (EventType::Deleted, "default/web-2".to_owned()),
            (EventType::Added, "default/web-3".to_owned()),
        ]
    );

    // Both pods end Running with 10.128.40.47 on the whereabouts network.
    for pod in [seed.released_pod, seed.second_pod] {
        let last = events
            .iter()
            .rev()
            .find(|e| e.stream == Stream::Pod && e.object_key() == format!("default/{pod}"))
            .expect("the pod is recorded");
        assert_eq!(last.event_type, EventType::Modified);
        match &last.part {
            Some(KindPart::Pod(info)) => {
                assert_eq!(info.phase, "Running");
                assert!(
                    info.network_status
                        .iter()
                        .any(|n| n.name == WHEREABOUTS_NETWORK
                            && n.ips.iter().any(|ip| ip == seed.address)),
                    "{pod}: {:?}",
                    info.network_status
                );
            }
            other => panic!("a pod's part: {other:?}"),
        }
    }
    // web-2 was Pending, without network-status, when its allocation was removed.
    let released_at = owned
        .windows(2)
        .find(|w| podref_47(&w[0]).is_some() && podref_47(&w[1]).is_none())
        .and_then(|w| w[1].resource_version_num)
        .expect("the release is recorded");
    let web_2_then = events
        .iter()
        .rev()
        .filter(|e| e.stream == Stream::Pod && e.object_key() == "default/web-2")
        .find(|e| e.resource_version_num.is_some_and(|rv| rv < released_at))
        .expect("web-2 existed before the release");
    match &web_2_then.part {
        Some(KindPart::Pod(info)) => {
            assert_eq!(info.phase, "Pending");
            assert!(info.network_status.is_empty());
        }
        other => panic!("a pod's part: {other:?}"),
    }

    // Replay finds the race: the allocation released while web-2 was alive, and the
    // address then held by two running pods on one network.
    let outcome = ipaudit_analyzer::offline::replay::replay(
        std::slice::from_ref(&recording),
        &Default::default(),
    )
    .expect("replay");
    let alerts = seen_alerts(&outcome.outputs);
    let rules: BTreeSet<&str> = alerts.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(
        rules,
        BTreeSet::from(["duplicate-ip", "ip-released-while-pod-alive"]),
        "{alerts:#?}"
    );
    let released = alerts
        .iter()
        .find(|a| a.0 == "ip-released-while-pod-alive")
        .expect("fired");
    assert_eq!(released.1, "firing", "web-2 is still alive");
    assert_eq!(released.2, "default/web-2");
    let duplicate = alerts
        .iter()
        .find(|a| a.0 == "duplicate-ip")
        .expect("fired");
    assert_eq!(duplicate.1, "firing", "both pods still hold it");
    assert!(duplicate.2.contains(seed.address), "{duplicate:?}");
}

/// Runs `collector record` against `kubeconfig` until it exits (it must, with an error);
/// returns its stderr.
fn record_error(kubeconfig: &std::path::Path, out: &std::path::Path, extra: &[&str]) -> String {
    let output = Command::new(ipaudit_tests::collector::workspace_binary("collector"))
        .args(["record", "--cluster-id", "lab", "--duration", "20s"])
        .args(["--kubeconfig", &kubeconfig.display().to_string()])
        .args(["--out", &out.display().to_string()])
        .args(extra)
        .output()
        .expect("collector runs");
    assert!(
        !output.status.success(),
        "collector record {extra:?} refused"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_cluster_with_only_spiderpool_is_watched_and_kinds_it_does_not_serve_are_refused_by_name() {
    let world = World::serving(
        "spiderpool",
        &[Kind::Pod, Kind::SpiderIpPool, Kind::SpiderEndpoint],
    );
    let out = world.dir.path().join("refused.avro");
    let error = record_error(&world.kubeconfig, &out, &["--kinds", "ippools"]);
    assert!(
        error.contains("the API server does not serve ippools.whereabouts.cni.cncf.io/v1alpha1: is whereabouts installed?"),
        "{error}"
    );
    let error = record_error(&world.kubeconfig, &out, &["--kinds", "ipool"]);
    assert!(
        error.contains("unknown kind \"ipool\"; valid: pods, ips.kubeovn.io"),
        "{error}"
    );

    let recording = world.dir.path().join("spiderpool.avro");
    let record = CollectorProcess::record(&world.kubeconfig, &recording, &[]);
    assert_eq!(
        record.counter("ipaudit_collector_stream_watching{stream=\"spiderippool\"}"),
        1.0,
        "{}",
        record.metrics()
    );
    world
        .sim
        .create(
            Kind::SpiderIpPool,
            "",
            json!({"metadata": {"name": "pool-a", "finalizers": ["spiderpool.spidernet.io"]},
                "spec": {"subnet": "172.18.0.0/16", "ips": ["172.18.40.10-172.18.40.20"]}}),
        )
        .unwrap();
    let journal = world.sim.journal();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !all_mutations_in(&journal)(&read_recording(&recording))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(record.terminate(Duration::from_secs(20)));
    let events = read_recording(&recording);
    let streams: BTreeSet<Stream> = events.iter().map(|e| e.stream).collect();
    assert_eq!(
        streams,
        BTreeSet::from([Stream::Pod, Stream::SpiderIpPool, Stream::SpiderEndpoint])
    );
    assert_eq!(missing(&journal, &events), Vec::<EventKey>::new());

    // No IPAM at all: the error says what was looked for.
    let bare = world
        .runtime
        .block_on(KubeSim::start(kube_sim::SimConfig::serving(&[Kind::Pod])))
        .expect("simulated API server");
    let kubeconfig = world.dir.path().join("bare-kubeconfig");
    bare.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let error = record_error(&kubeconfig, &out, &[]);
    assert!(
        error.contains("the API server serves none of the IPAM kinds ipaudit watches (looked for ips.kubeovn.io/v1, ")
            && error.contains("is kube-ovn, whereabouts, spiderpool, calico or cilium installed?"),
        "{error}"
    );
}

/// Three Kafka nodes, the events topic held by all three with `min.insync.replicas` 2:
/// the leader of the events partition is SIGKILLed while the collector ships a churning
/// cluster. While the partition has no leader (about 7 s), /readyz answers 503 saying how
/// many rows have waited how long with nothing delivered, and 200 once they are. Every change arrives, in order per stream once the resends are dropped (by
/// their per-stream sequence, as the analyzer's dedupe does), nothing is quarantined or
/// left in the outbox, and the analyzer raises exactly the alerts of the incidents played
/// before and after the loss.
#[test]
fn the_events_partitions_leader_killed_mid_churn_loses_nothing_and_changes_no_alert() {
    let mut cluster = Broker::start_cluster(3);
    let world = World::replicated("broker-loss", &cluster.addr, 3);
    let receiver = Receiver::start(&world.runtime);
    // Unready after 1 s of rows waiting with nothing delivered: the loss shows on /readyz.
    let collector = CollectorProcess::start(&world.setup(), &["--unready-after", "1s"]);
    let analyzer = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("ipaudit-broker-loss-{}", std::process::id()),
        &world.dir.path().join("analyzer"),
        &["--webhook-url", &format!("{}/hook", receiver.url)],
    );
    let leader = partition_leader(&world.brokers, &world.topic, 0);
    std::thread::scope(|scope| {
        let sim = &world.sim;
        let changes = scope.spawn(move || {
            play_subnet_deleted_under_live_ip(sim, "before-loss", 41);
            churn(sim, 1_200, Duration::from_millis(3));
            play_subnet_deleted_under_live_ip(sim, "after-loss", 42);
        });
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            !changes.is_finished(),
            "the leader dies in the middle of the churn"
        );
        cluster.kill_node(leader as usize);
        // /readyz, each change of answer, until the changes are made and it is ready again.
        let killed = std::time::Instant::now();
        let mut answers: Vec<(Duration, u16, String)> = Vec::new();
        let recovered = |answers: &[(Duration, u16, String)]| {
            answers.iter().any(|(_, code, _)| *code == 503)
                && answers.last().is_some_and(|(_, code, _)| *code == 200)
        };
        while !(changes.is_finished() && recovered(&answers))
            && killed.elapsed() < Duration::from_secs(60)
        {
            if let Some((code, body)) = collector.readyz() {
                if answers
                    .last()
                    .is_none_or(|(_, c, b)| (*c, b) != (code, &body))
                {
                    answers.push((killed.elapsed(), code, body));
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("readyz after the kill: {answers:?}");
        let unready: Vec<&String> = answers
            .iter()
            .filter(|(_, code, _)| *code == 503)
            .map(|(_, _, body)| body)
            .collect();
        assert!(
            !unready.is_empty()
                && unready
                    .iter()
                    .all(|b| b.contains("rows have waited") && b.contains("nothing delivered to Kafka")),
            "while the partition had no leader, /readyz said the rows wait undelivered, and only that: {answers:?}"
        );
        assert!(
            recovered(&answers),
            "ready again once delivered: {answers:?}"
        );
        changes.join().expect("churn");
    });
    let events = every_change_arrives(&world, &collector, Duration::from_secs(120));
    let changes = world.sim.journal().len();
    assert!(changes > 2_500, "a churning cluster: {changes} changes");
    for stream in kinds::streams() {
        let mut seen = BTreeSet::new();
        let sequences: Vec<i64> = events
            .iter()
            .filter(|e| e.stream == stream && seen.insert(e.sequence))
            .map(|e| e.sequence)
            .collect();
        assert!(
            sequences.windows(2).all(|w| w[1] == w[0] + 1),
            "{stream}: every event once, in order, after resends are dropped: {sequences:?}"
        );
    }
    for subnet in ["before-loss", "after-loss"] {
        poll_until(Duration::from_secs(30), || {
            subnet_leak_alert(&receiver, subnet)
        })
        .unwrap_or_else(|| {
            panic!(
                "no alert for {subnet}; analyzer log:\n{}",
                analyzer.log_text()
            )
        });
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut alerts: Vec<(String, String)> = receiver
        .received("/hook")
        .iter()
        .map(|r| {
            (
                r.body["rule"].as_str().unwrap_or_default().to_owned(),
                r.body["subnet"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    alerts.sort();
    alerts.dedup();
    assert_eq!(
        alerts,
        [
            (
                "subnet-deleted-before-ip".to_owned(),
                "after-loss".to_owned()
            ),
            (
                "subnet-deleted-before-ip".to_owned(),
                "before-loss".to_owned()
            ),
        ],
        "the alerts of a run without the fault, nothing else"
    );
    nothing_quarantined_and_the_outbox_empties(&collector);
}
