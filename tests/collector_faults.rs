//! The collector under faults, end to end: simulated API server -> `collector run` (a
//! process) -> a real broker (Apache Kafka). Each test breaks something an operator can break
//! (an object too large for Kafka, a producer setting librdkafka refuses, an API that
//! fails, a Kafka outage longer than the outbox, a missing topic) and proves that nothing
//! is stuck behind it, nothing dies silently, and readiness says so.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ipaudit_schemas::{EventType, Stream, WatchEvent};
use ipaudit_tests::broker::{read_topic, topic_setting, Broker};
use ipaudit_tests::collector::{collector_command, CollectorProcess, CollectorSetup};
use ipaudit_tests::scenario::{ip, subnet};
use ipaudit_tests::world::World;
use kube_sim::{Kind, KubeSim, Mutation};
use serde_json::json;

/// (stream, object key, type, resourceVersion) of every mutation.
fn mutation_keys(journal: &[Mutation]) -> BTreeSet<(Stream, String, i64)> {
    journal
        .iter()
        .map(|m| (m.kind, m.key.clone(), m.rv as i64))
        .collect()
}

/// The same key of every event that carries an object.
fn event_keys(events: &[WatchEvent]) -> BTreeSet<(Stream, String, i64)> {
    events
        .iter()
        .filter(|e| e.event_type.carries_object() && e.event_type != EventType::DeletedOnRelist)
        .map(|e| {
            (
                e.stream,
                e.object_key(),
                e.resource_version_num.unwrap_or(-1),
            )
        })
        .collect()
}

fn missing_of(journal: &[Mutation], events: &[WatchEvent]) -> Vec<(Stream, String, i64)> {
    let seen = event_keys(events);
    mutation_keys(journal)
        .into_iter()
        .filter(|k| !seen.contains(k))
        .collect()
}

/// Creates `count` IPs named `<prefix>-<i>.churn` and moves each to another node.
fn churn(sim: &KubeSim, prefix: &str, count: usize) {
    paced_churn(sim, prefix, count, Duration::ZERO);
}

/// [`churn`], with a pause after each IP (a cluster's pace rather than a burst).
fn paced_churn(sim: &KubeSim, prefix: &str, count: usize, pause: Duration) {
    for i in 0..count {
        let name = format!("{prefix}-{i}.churn");
        sim.create(
            Kind::Ip,
            "",
            ip(
                &name,
                "churn-net",
                &format!("{prefix}-{i}"),
                "churn",
                &format!("10.99.{}.{}", i / 250, i % 250 + 1),
                "",
            ),
        )
        .expect("create");
        sim.update(Kind::Ip, "", &name, |o| {
            o["spec"]["nodeName"] = json!("node-2")
        })
        .expect("update");
        std::thread::sleep(pause);
    }
}

/// An IP whose JSON is about 2 MB (a huge annotation no converter keeps).
fn huge_ip(sim: &KubeSim, name: &str) {
    let mut object = ip(name, "churn-net", "huge", "churn", "10.98.0.1", "");
    object["metadata"]["annotations"] = json!({"example.com/blob": "x".repeat(2_000_000)});
    sim.create(Kind::Ip, "", object)
        .expect("create the huge IP");
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not after {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Churn, a 2 MB object, churn: every mutation but (perhaps) the huge one, read back.
fn play_churn_around_a_huge_object(world: &World) -> Vec<WatchEvent> {
    world
        .sim
        .create(Kind::Subnet, "", subnet("churn-net", "10.99.0.0/16"))
        .unwrap();
    churn(&world.sim, "before", 30);
    huge_ip(&world.sim, "huge.churn");
    churn(&world.sim, "after", 30);
    let journal = world.sim.journal();
    let others: Vec<Mutation> = journal
        .iter()
        .filter(|m| m.key != "huge.churn")
        .cloned()
        .collect();
    world.events_until(Duration::from_secs(60), |events| {
        missing_of(&others, events).is_empty()
    })
}

#[test]
fn a_2_mb_object_among_churn_is_recorded_without_its_raw_json_and_holds_nothing_back() {
    let world = World::new("huge-stripped", None);
    // Every object carries its raw JSON; the default --max-event-bytes (900 KiB) applies.
    let collector = CollectorProcess::start(&world.setup(), &["--raw-objects"]);
    let events = play_churn_around_a_huge_object(&world);
    let journal = world.sim.journal();
    assert_eq!(
        missing_of(&journal, &events),
        vec![],
        "log:\n{}",
        collector.log_text()
    );
    let huge = events
        .iter()
        .find(|e| e.object_key() == "huge.churn")
        .expect("the huge IP is recorded");
    assert!(huge.raw_object.is_none(), "recorded without its raw JSON");
    assert!(huge.resource_version_num.is_some() && huge.uid() != "");
    let after = events
        .iter()
        .find(|e| e.object_key() == "after-0.churn")
        .expect("the events after it arrive");
    assert!(after.raw_object.is_some(), "small objects keep theirs");
    assert_eq!(
        collector.counter("ipaudit_collector_raw_objects_omitted_total{stream=\"ip\"}"),
        1.0,
        "{}",
        collector.metrics()
    );
    let log = collector.log_text();
    assert!(
        log.contains("event recorded without its raw JSON") && log.contains("huge.churn"),
        "{log}"
    );
}

#[test]
fn a_2_mb_event_kafka_refuses_is_quarantined_the_rest_flows_on_and_resend_delivers_it() {
    let world = World::new("huge-quarantined", None);
    let state_dir = world.dir.path().display().to_string();
    // The event keeps its raw JSON (limit above it); librdkafka refuses messages above
    // 1,000,000 bytes when they are queued.
    let limits = [
        "--raw-objects",
        "--max-event-bytes",
        "4MiB",
        "--kafka-option",
        "message.max.bytes=1000000",
    ];
    let collector = CollectorProcess::start(&world.setup(), &limits);
    let events = play_churn_around_a_huge_object(&world);
    let journal = world.sim.journal();
    let missing = missing_of(&journal, &events);
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!(missing[0].1, "huge.churn");
    wait_until("the quarantine is counted", Duration::from_secs(10), || {
        collector.counter("ipaudit_collector_quarantined_total{reason=\"message_size_too_large\"}")
            == 1.0
    });
    let log = collector.log_text();
    assert!(
        log.contains("moved to quarantine") && log.contains("huge.churn"),
        "{log}"
    );
    assert!(collector.terminate(Duration::from_secs(30)), "clean exit");

    let listed = collector_command(&["outbox", "--state-dir", &state_dir, "quarantine", "list"]);
    assert!(listed.status.success(), "{listed:?}");
    let text = String::from_utf8_lossy(&listed.stdout).into_owned();
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.contains("huge.churn"))
        .unwrap_or_else(|| panic!("listed: {text}"))
        .split('\t')
        .collect();
    assert_eq!(row[2], "message_size_too_large", "{text}");
    assert_eq!(row[3], "ip", "{text}");
    assert!(row[6].parse::<u64>().unwrap() > 2_000_000, "{text}");
    let id = row[0].to_owned();

    let unknown = collector_command(&[
        "outbox",
        "--state-dir",
        &state_dir,
        "quarantine",
        "resend",
        "999",
    ]);
    assert!(!unknown.status.success(), "an unknown id is an error");
    let resent = collector_command(&[
        "outbox",
        "--state-dir",
        &state_dir,
        "quarantine",
        "resend",
        &id,
    ]);
    assert!(resent.status.success(), "{resent:?}");
    let listed = collector_command(&["outbox", "--state-dir", &state_dir, "quarantine", "list"]);
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).lines().count(),
        1,
        "only the header"
    );

    // With room for it (the broker takes it), the resent row is delivered.
    let restarted = CollectorProcess::start(
        &world.setup(),
        &[
            "--raw-objects",
            "--max-event-bytes",
            "4MiB",
            "--kafka-option",
            "message.max.bytes=4000000",
        ],
    );
    let events = world.events_until(Duration::from_secs(60), |events| {
        events.iter().any(|e| e.object_key() == "huge.churn")
    });
    let huge = events
        .iter()
        .find(|e| e.object_key() == "huge.churn")
        .unwrap_or_else(|| panic!("the resent event arrives; log:\n{}", restarted.log_text()));
    assert!(huge
        .raw_object
        .as_ref()
        .is_some_and(|r| r.len() > 2_000_000));
}

#[test]
fn a_producer_that_cannot_be_created_ends_the_process_non_zero_within_seconds() {
    let world = World::new("bad-producer", None);
    let mut collector = CollectorProcess::start_unready(
        &world.setup(),
        &["--kafka-option", "enable.idempotence=maybe"],
    );
    let status = collector
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("still running; log:\n{}", collector.log_text()));
    assert!(!status.success(), "{status:?}");
    let log = collector.log_text();
    // The start-up probe or the producer itself refuses it, naming the setting.
    assert!(
        log.contains("invalid Kafka") && log.contains("enable.idempotence"),
        "{log}"
    );
}

#[test]
fn a_remediator_that_stops_ends_the_process_non_zero() {
    let world = World::new("bad-remediator", None);
    // librdkafka refuses to subscribe to an empty topic name.
    let mut collector = CollectorProcess::start_unready(
        &world.setup(),
        &["--remediate", "dry-run", "--commands-topic", ""],
    );
    let status = collector
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("still running; log:\n{}", collector.log_text()));
    assert!(!status.success(), "{status:?}");
    let log = collector.log_text();
    assert!(log.contains("remediation stopped"), "{log}");
}

#[test]
fn a_watch_failing_longer_than_unready_after_turns_readyz_to_503_until_it_recovers() {
    let world = World::new("unready", None);
    let collector = CollectorProcess::start(&world.setup(), &["--unready-after", "3s"]);
    let failed_at = Instant::now();
    world.sim.fail_kind(Kind::Subnet);
    std::thread::sleep(Duration::from_millis(1_000));
    assert_eq!(
        collector.readyz().map(|r| r.0),
        Some(200),
        "a failure shorter than --unready-after is tolerated"
    );
    wait_until("readyz turns 503", Duration::from_secs(20), || {
        collector.readyz().is_some_and(|(code, body)| {
            code == 503 && body.contains("stream subnet has been failing")
        })
    });
    assert!(failed_at.elapsed() >= Duration::from_secs(3));
    let (_, body) = collector.readyz().unwrap();
    assert!(
        !body.contains("stream ip "),
        "only the failing stream: {body}"
    );
    world.sim.heal(Kind::Subnet);
    wait_until("readyz recovers", Duration::from_secs(30), || {
        collector.readyz().is_some_and(|(code, _)| code == 200)
    });
}

#[test]
fn a_full_outbox_pauses_the_watches_and_then_catches_up_with_nothing_lost() {
    let mut broker = Broker::start();
    let world = World::new("full", Some(broker.addr.clone()));
    let collector = CollectorProcess::start(&world.setup(), &["--outbox-max-bytes", "32KiB"]);
    world
        .sim
        .create(Kind::Subnet, "", subnet("churn-net", "10.99.0.0/16"))
        .unwrap();
    broker.stop();
    std::thread::scope(|scope| {
        let sim = &world.sim;
        let changes =
            scope.spawn(move || paced_churn(sim, "outage", 300, Duration::from_millis(5)));
        wait_until(
            "the outbox fills and readyz says so",
            Duration::from_secs(60),
            || {
                collector
                    .readyz()
                    .is_some_and(|(code, body)| code == 503 && body.contains("the outbox is full"))
            },
        );
        changes.join().expect("churn");
    });
    assert!(collector.counter("ipaudit_collector_outbox_full_total") >= 1.0);
    assert!(
        collector.counter("ipaudit_collector_watch_pauses_total{stream=\"ip\"}") >= 1.0,
        "{}",
        collector.metrics()
    );
    // Paused: the outbox stops growing (events in flight when it filled are stored: the
    // bound is soft), and it holds far from every change made meanwhile.
    let journal = world.sim.journal();
    std::thread::sleep(Duration::from_millis(500));
    let rows = collector.counter("ipaudit_collector_outbox_rows");
    std::thread::sleep(Duration::from_millis(1_000));
    let later = collector.counter("ipaudit_collector_outbox_rows");
    eprintln!(
        "outbox while paused: {rows} rows, {} bytes; {} mutations",
        collector.counter("ipaudit_collector_outbox_bytes"),
        journal.len()
    );
    assert_eq!(rows, later, "nothing is stored while paused");
    assert!(
        rows < journal.len() as f64,
        "paused before everything was stored: {rows} rows"
    );
    broker.restart();
    let events = world.events_until(Duration::from_secs(120), |events| {
        missing_of(&journal, events).is_empty()
    });
    assert_eq!(
        missing_of(&journal, &events),
        vec![],
        "log:\n{}",
        collector.log_text()
    );
    wait_until("ready again", Duration::from_secs(30), || {
        collector.readyz().is_some_and(|(code, _)| code == 200)
    });
}

#[test]
fn a_missing_topic_is_not_created_by_default_and_create_topic_creates_it() {
    let world = World::new("topics", None);
    let topic = format!("ipaudit.events.not-there.{}", std::process::id());
    let setup = CollectorSetup {
        topic: &topic,
        ..world.setup()
    };
    let mut collector = CollectorProcess::start_unready(&setup, &[]);
    wait_until(
        "readyz names the missing topic",
        Duration::from_secs(30),
        || {
            collector
                .readyz()
                .is_some_and(|(code, body)| code == 503 && body.contains("does not exist"))
        },
    );
    assert!(collector.is_running(), "the events wait in the outbox");
    assert!(
        collector
            .log_text()
            .contains("the events topic does not exist"),
        "{}",
        collector.log_text()
    );
    assert!(
        read_topic(&world.brokers, &topic, Duration::from_secs(2), |p| !p
            .is_empty())
        .is_empty(),
        "nothing was produced to it"
    );
    collector.kill();

    let created = CollectorProcess::start(
        &setup,
        &["--create-topic", "--create-topic-partitions", "1"],
    );
    world
        .sim
        .create(Kind::Subnet, "", subnet("after-create", "10.97.0.0/16"))
        .unwrap();
    let payloads = read_topic(&world.brokers, &topic, Duration::from_secs(30), |p| {
        p.iter().any(|p| {
            ipaudit_schemas::decode::<WatchEvent>(p).is_ok_and(|e| e.object_key() == "after-create")
        })
    });
    assert!(
        !payloads.is_empty(),
        "delivered to the created topic; log:\n{}",
        created.log_text()
    );
}

#[test]
fn a_remediating_collector_names_a_missing_commands_topic_and_create_topic_creates_it() {
    let world = World::new("commands-topic", None);
    let commands = format!("ipaudit.commands.not-there.{}", std::process::id());
    let group = format!("remediator-{commands}");
    let remediating = [
        "--remediate",
        "on",
        "--commands-topic",
        &commands,
        "--remediate-group",
        &group,
    ];
    let collector = CollectorProcess::start_unready(&world.setup(), &remediating);
    wait_until(
        "readyz names the missing commands topic",
        Duration::from_secs(30),
        || {
            collector
                .readyz()
                .is_some_and(|(code, body)| code == 503 && body.contains(&commands))
        },
    );
    assert!(
        collector
            .log_text()
            .contains("the commands topic does not exist"),
        "{}",
        collector.log_text()
    );
    collector.kill();

    let flags: Vec<&str> = remediating
        .iter()
        .copied()
        .chain(["--create-topic", "--create-topic-partitions", "1"])
        .collect();
    let created = CollectorProcess::start(&world.setup(), &flags);
    let retention = || {
        world
            .runtime
            .block_on(topic_setting(&world.brokers, &commands, "retention.ms"))
    };
    wait_until(
        "the commands topic is created",
        Duration::from_secs(30),
        || retention().is_some(),
    );
    assert_eq!(
        retention().as_deref(),
        Some("86400000"),
        "created with a day's retention, as the chart's topics Job does"
    );
    wait_until("ready", Duration::from_secs(30), || {
        created.readyz().is_some_and(|(code, _)| code == 200)
    });
}
