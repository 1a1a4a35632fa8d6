//! Schemas by fingerprint over Kafka: a collector one schema version ahead of the analyzer
//! (a kind the analyzer does not know, a field it does not have) feeds an analyzer of
//! today through Apache Kafka. The collector's own shipping code (its outbox, its producer,
//! its schema publisher) publishes the next version's schema to the compacted schemas topic
//! before the first event written with it; the analyzer learns it there, reads the events
//! by resolution to its own schema, raises the seed's alerts, and counts and skips the kind
//! it does not know. When the schema could not be read (publication switched off), the
//! events are dead letters until `analyzer dead-letters replay --republish` puts them back
//! on the topic, once the schema is there.
//!
//! The next version's rows are stored in the outbox file as that collector stores them (one
//! encoded event per row); the shipping is the collector library's `run_producer`, as
//! `collector run` runs it, with the next version's schema added to what it publishes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ipaudit_collector::health::Health;
use ipaudit_collector::metrics::Metrics;
use ipaudit_collector::ship::outbox::Outbox;
use ipaudit_collector::ship::produce::{producer, run_producer, KafkaConfig, ProducerTask};
use ipaudit_collector::ship::publish_schemas::SchemaPublisher;
use ipaudit_runtime::kafka::Connection;
use ipaudit_schemas::builders::NextVersion;
use ipaudit_schemas::{Stream, WatchEvent};
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::{read_topic, schemas_topic_of};
use ipaudit_tests::collector::workspace_binary;
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::world::World;
use ipaudit_tests::{
    framed_like_a_collector, incident_files, kubectl_events, poll_until, wait_for,
};

/// The cluster of the newer collector.
const CLUSTER: &str = "next";
/// The seed's subnet deleted under a live IP, and that IP.
const SUBNET: &str = "kube-ovn-dangling-ips-control-net";
const LEAKED_IP: &str =
    "test-vm-1.kube-ovn-dangling-ips.kube-ovn-dangling-ips-control-net.kube-ovn-dangling-ips.ovn";

/// The kube-ovn seed as one collector of cluster `next` observed it (every stream, in
/// resourceVersion order, framed as its lists are), and a `ANTREA_IP_POOL` event (a kind of
/// the next version) in the middle; each single-object encoded with the next version.
fn seed_in_the_next_version(next: &NextVersion) -> Vec<Vec<u8>> {
    let mut events: Vec<WatchEvent> = incident_files("kube-ovn-seed")
        .iter()
        .flat_map(|f| kubectl_events(f))
        .collect();
    events.sort_by_key(|e| e.resource_version_num);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut sequences: HashMap<Stream, i64> = HashMap::new();
    let mut payloads: Vec<Vec<u8>> = framed_like_a_collector(events)
        .into_iter()
        .enumerate()
        .map(|(i, mut event)| {
            let sequence = sequences.entry(event.stream).or_insert(0);
            *sequence += 1;
            event.sequence = *sequence;
            event.cluster_id = CLUSTER.into();
            event.collector_id = "collector-next".into();
            event.observed_at_ms = Some(now_ms + i as i64);
            next.encode(&event)
        })
        .collect();
    let mut unknown = WatchEvent::new(Stream::Ip, ipaudit_schemas::EventType::Added, "1050");
    unknown.cluster_id = CLUSTER.into();
    unknown.collector_id = "collector-next".into();
    unknown.observed_at_ms = Some(now_ms);
    payloads.insert(
        payloads.len() / 2,
        next.encode_unknown_kind(&unknown, "pool-1"),
    );
    payloads
}

/// Ships `payloads` with the collector's producer, as the next version's `collector run`
/// does: stored in its outbox, then sent; returns once the outbox is drained.
fn ship_as_the_next_collector(world: &World, state: &Path, payloads: &[Vec<u8>], publish: bool) {
    std::fs::create_dir_all(state).expect("collector state dir");
    let path = state.join("outbox.db");
    drop(Outbox::open(&path, CLUSTER).expect("outbox"));
    {
        // The rows as the next version's writer stores them: one encoded event per row.
        let mut conn = rusqlite::Connection::open(&path).expect("outbox file");
        let tx = conn.transaction().expect("transaction");
        for payload in payloads {
            tx.execute("INSERT INTO outbox (payload) VALUES (?1)", [payload])
                .expect("row");
        }
        tx.commit().expect("commit");
    }
    let next = NextVersion::new();
    let schemas_topic = publish.then(|| schemas_topic_of(&world.topic));
    let config = KafkaConfig {
        connection: Connection::plaintext(&world.brokers),
        topic: world.topic.clone(),
        schemas_topic: schemas_topic.clone(),
        cluster_id: CLUSTER.into(),
        create_topic: None,
        commands_topic: None,
    };
    let (_stop, stopping) = tokio::sync::watch::channel(true);
    let task = ProducerTask {
        producer: producer(&config).expect("producer"),
        outbox_path: path.clone(),
        config,
        metrics: Metrics::new(&[]),
        health: Health::new(&[], Duration::from_secs(60), None),
        stored: Arc::new(tokio::sync::Notify::new()),
        // Already true: drain the outbox, then stop.
        shutdown: stopping,
        drain_timeout: Duration::from_secs(60),
        schemas: SchemaPublisher::new(schemas_topic)
            .with_writer_schema(&next.text)
            .expect("the next version parses"),
    };
    world
        .runtime
        .block_on(run_producer(task))
        .expect("the outbox drains into Kafka");
    let left = Outbox::open_existing(&path)
        .and_then(|o| o.size())
        .expect("outbox size");
    assert_eq!(left.rows, 0, "every row was acknowledged");
}

fn analyzer(world: &World, receiver: &Receiver, state: &Path) -> AnalyzerProcess {
    let process = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        // A group per test: members of one group on different topics share them out.
        &format!("group-of-{}", world.topic),
        state,
        &["--webhook-url", &format!("{}/hook", receiver.url)],
    );
    process.wait_joined(Duration::from_secs(30));
    process
}

/// The webhook's firing alerts of `rule` for the newer collector's cluster.
fn firing(receiver: &Receiver, rule: &str) -> Vec<serde_json::Value> {
    receiver
        .received("/hook")
        .into_iter()
        .map(|r| r.body)
        .filter(|b| b["cluster_id"] == CLUSTER && b["rule"] == rule && b["status"] == "FIRING")
        .collect()
}

#[test]
fn a_newer_collectors_events_reach_an_analyzer_of_today_through_the_schemas_topic() {
    let world = World::new("next-schema", None);
    let receiver = Receiver::start(&world.runtime);
    let next = NextVersion::new();
    let payloads = seed_in_the_next_version(&next);
    let analyzer = analyzer(&world, &receiver, &world.dir.path().join("analyzer"));

    ship_as_the_next_collector(&world, &world.dir.path().join("collector"), &payloads, true);

    // The schema is on its topic, under the fingerprint the events carry.
    let schemas = read_topic(
        &world.brokers,
        &schemas_topic_of(&world.topic),
        Duration::from_secs(10),
        |p| p.iter().any(|p| p == next.text.as_bytes()),
    );
    assert!(
        schemas.iter().any(|p| p == next.text.as_bytes()),
        "the next version's schema was published"
    );
    let events = read_topic(&world.brokers, &world.topic, Duration::from_secs(10), |p| {
        p.len() >= payloads.len()
    });
    assert!(
        events.iter().all(|p| p[2..10] == next.fingerprint),
        "every event is written with the next version"
    );

    let alert = wait_for(
        "the seed's alert from the next version's events",
        Duration::from_secs(30),
        || firing(&receiver, "subnet-deleted-before-ip").pop(),
    );
    assert_eq!(alert["subnet"], SUBNET);
    assert_eq!(alert["subject_name"], LEAKED_IP);
    let unknown_kind = "ipaudit_analyzer_input_problems_total{kind=\"unknown_kind\"}";
    let counted = poll_until(Duration::from_secs(15), || {
        (analyzer.value(unknown_kind) == 1.0).then_some(())
    });
    assert!(
        counted.is_some(),
        "the ANTREA_IP_POOL event counted as a kind this build does not know:\n{}",
        analyzer.metrics()
    );
    assert_eq!(
        analyzer.value("ipaudit_analyzer_writer_schema_lookups_total{result=\"found\"}"),
        1.0,
        "one read of the schemas topic for the whole stream"
    );
    assert_eq!(
        analyzer.value("ipaudit_analyzer_dead_letters_total{kind=\"message\"}"),
        0.0,
        "nothing set aside"
    );
    assert_eq!(
        firing(&receiver, "subnet-deleted-before-ip").len(),
        1,
        "the alert fired once"
    );
}

#[test]
fn events_of_an_unpublished_schema_are_dead_letters_until_replay_republishes_them() {
    let world = World::new("next-dead", None);
    let receiver = Receiver::start(&world.runtime);
    let next = NextVersion::new();
    let payloads = seed_in_the_next_version(&next);
    let state = world.dir.path().join("analyzer");
    let analyzer = analyzer(&world, &receiver, &state);

    // The newer collector with its schema publication off (`--schemas-topic ""`).
    ship_as_the_next_collector(&world, &world.dir.path().join("off"), &payloads, false);
    let dead_letters = "ipaudit_analyzer_dead_letters_total{kind=\"message\"}";
    let set_aside = poll_until(Duration::from_secs(30), || {
        (analyzer.value(dead_letters) == payloads.len() as f64).then_some(())
    });
    assert!(
        set_aside.is_some(),
        "{} of {} events set aside; log:\n{}",
        analyzer.value(dead_letters),
        payloads.len(),
        analyzer.log_text()
    );
    assert_eq!(
        analyzer.value("ipaudit_analyzer_writer_schema_lookups_total{result=\"not_found\"}"),
        1.0,
        "the schemas topic was read once, not once per message"
    );
    assert!(firing(&receiver, "subnet-deleted-before-ip").is_empty());

    // The collector publishes its schema as it ships its next event (a BOOKMARK) ...
    let mut bookmark = WatchEvent::new(Stream::Ip, ipaudit_schemas::EventType::Bookmark, "1200");
    bookmark.cluster_id = CLUSTER.into();
    bookmark.collector_id = "collector-next".into();
    ship_as_the_next_collector(
        &world,
        &world.dir.path().join("on"),
        &[next.encode(&bookmark)],
        true,
    );
    // The analyzer read the schemas topic for this fingerprint a moment ago: it reads it
    // again only after a minute (a stream of messages costs one read a minute, not one
    // each), so the bookmark is set aside too ...
    let all = payloads.len() + 1;
    wait_for("the bookmark set aside", Duration::from_secs(30), || {
        (analyzer.value(dead_letters) == all as f64).then_some(())
    });
    // ... and the operator re-drives the dead letters with the analyzer stopped, as after
    // an upgrade.
    assert!(
        analyzer.terminate(Duration::from_secs(30)),
        "the analyzer stops"
    );
    let output = std::process::Command::new(workspace_binary("analyzer"))
        .args(["dead-letters", "replay", "--republish"])
        .args(["--state-dir", &state.display().to_string()])
        .args(["--brokers", &world.brokers])
        .args(["--schemas-topic", &schemas_topic_of(&world.topic)])
        .output()
        .expect("analyzer dead-letters replay");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "republished {all} message(s), 0 still undecodable"
        )),
        "{stdout}"
    );
    let analyzer = self::analyzer(&world, &receiver, &state);
    let alert = wait_for(
        "the seed's alert from the republished events",
        Duration::from_secs(30),
        || firing(&receiver, "subnet-deleted-before-ip").pop(),
    );
    assert_eq!(alert["subnet"], SUBNET);
    wait_for(
        "the republished ANTREA_IP_POOL event counted as an unknown kind",
        Duration::from_secs(15),
        || {
            (analyzer.value("ipaudit_analyzer_input_problems_total{kind=\"unknown_kind\"}") == 1.0)
                .then_some(())
        },
    );
    let listed = std::process::Command::new(workspace_binary("analyzer"))
        .args(["dead-letters", "list"])
        .args(["--state-dir", &state.display().to_string()])
        .output()
        .expect("analyzer dead-letters list");
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains(&world.topic),
        "no message is left set aside: {}",
        String::from_utf8_lossy(&listed.stdout)
    );
}
