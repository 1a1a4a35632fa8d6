//! Exact takeover (issue 41, item 3) on Apache Kafka: a partition's handover written to
//! the checkpoints topic comes back whole, also for a cluster of 200,000 IPs; a write
//! cut short leaves the one before it readable and is tombstoned by the next; and a member
//! that takes a dead member's partition over delivers the transitions the dead one had not,
//! under the same `Idempotency-Key`, without a rebuild.

use std::time::{Duration, Instant};

use ipaudit_analyzer::analysis::engine::{Analyzer, AnalyzerConfig, Output};
use ipaudit_analyzer::live::handover::payload::{Key, Manifest, FORMAT};
use ipaudit_analyzer::live::handover::{
    ClusterState, Handover, HandoverError, HandoverReader, HandoverWriter, TakenOver,
};
use ipaudit_runtime::kafka::Connection;
use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::Stream;
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::{checkpoints_topic_of, create_checkpoints_topic, reader_from_start};
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::scenario::play_subnet_deleted_under_live_ip;
use ipaudit_tests::world::World;
use ipaudit_tests::{poll_until, wait_for};
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

/// A checkpoints topic of its own (two partitions) on the run's broker.
struct Topic {
    world: World,
    name: String,
}

fn topic(name: &str) -> Topic {
    let world = World::new(name, None);
    let events = format!("{}.handover-test", world.topic);
    world
        .runtime
        .block_on(create_checkpoints_topic(&world.brokers, &events, 2, 1));
    Topic {
        name: checkpoints_topic_of(&events),
        world,
    }
}

/// A record's key and value (`None`: a tombstone).
type Record = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Every record of partition 0 of `topic`: key and value (`None`: a tombstone).
fn records_of(brokers: &str, topic: &str) -> Vec<Record> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    let consumer = reader_from_start(config, "handover-test-reader", topic);
    let (_, high) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .unwrap();
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut next = 0;
    while next < high && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            next = message.offset() + 1;
            records.push((
                message.key().map(<[u8]>::to_vec),
                message.payload().map(<[u8]>::to_vec),
            ));
        }
    }
    records
}

/// One cluster's analysis holding `ips` kube-ovn IPs on one subnet.
fn analysis_of(ips: usize) -> Analyzer {
    let mut analyzer = Analyzer::new(AnalyzerConfig::default());
    let mut outputs: Vec<Output> = Vec::new();
    let mut rv = 1;
    analyzer.step(
        Box::new(EventBuilder::subnet("big").uid("subnet-big").rv(rv).added()),
        &mut outputs,
    );
    for n in 0..ips {
        rv += 1;
        let address = format!("10.{}.{}.{}", n >> 16, (n >> 8) & 255, n & 255);
        let event = EventBuilder::ip(&format!("pod-{n}.ns"), "big")
            .uid(&format!("ip-{n}"))
            .rv(rv)
            .ip_of("ns", &format!("pod-{n}"), &address, "")
            .added();
        analyzer.step(Box::new(event), &mut outputs);
    }
    analyzer.finish(None, &mut outputs);
    analyzer
}

fn handover_of(partition: i32, next_offset: i64, clusters: &[(&str, &Analyzer)]) -> Handover {
    Handover {
        format: FORMAT,
        partition,
        next_offset,
        clusters: clusters
            .iter()
            .map(|(id, analyzer)| ClusterState::new(id, analyzer.checkpoint()).unwrap())
            .collect(),
        undelivered: Vec::new(),
        points: Vec::new(),
    }
}

#[test]
fn a_cluster_of_200000_ips_is_handed_over_in_chunks_and_restored_whole() {
    let topic = topic("handover-200k");
    let connection = Connection::plaintext(&topic.world.brokers);
    let analyzer = analysis_of(200_000);
    let ips = analyzer.state().records(Stream::Ip).count();
    assert_eq!(ips, 200_000);
    let handover = handover_of(1, 200_002, &[("big-cluster", &analyzer)]);
    let mut writer = HandoverWriter::new(&connection, &topic.name, "analyzer-0").unwrap();
    let written = topic
        .world
        .runtime
        .block_on(writer.write(&handover))
        .unwrap();
    assert!(written.chunks > 1, "{written:?}");
    let reader = HandoverReader::new(connection, &topic.name);
    let started = Instant::now();
    let taken = reader.take(1, None).unwrap().expect("a handover");
    let read = started.elapsed();
    assert_eq!(taken.manifest.chunks, written.chunks);
    assert_eq!(taken.manifest.writer, "analyzer-0");
    let over = TakenOver::restore(taken, &AnalyzerConfig::default()).unwrap();
    assert_eq!(over.next_offset, 200_002);
    let (cluster, restored) = &over.analyzers[0];
    assert_eq!(cluster, "big-cluster");
    assert_eq!(restored.state().records(Stream::Ip).count(), 200_000);
    assert_eq!(restored.stats(), analyzer.stats());
    eprintln!(
        "handover of 200,000 IPs: {} bytes in {} chunks, written in {:?}, read and restored in {:?} (read {read:?})",
        written.bytes, written.chunks, written.took, over.took
    );
    assert!(
        reader.take(1, Some(200_002)).unwrap().is_none(),
        "not newer than the state the member has"
    );
    assert!(
        reader.take(0, None).unwrap().is_none(),
        "partition 0 has none"
    );
}

#[test]
fn a_write_cut_short_leaves_the_one_before_readable_and_the_next_write_tombstones_it() {
    let topic = topic("handover-torn");
    let connection = Connection::plaintext(&topic.world.brokers);
    let small = analysis_of(3);
    let mut writer = HandoverWriter::new(&connection, &topic.name, "analyzer-0").unwrap();
    let runtime = &topic.world.runtime;
    runtime
        .block_on(writer.write(&handover_of(0, 10, &[("c", &small)])))
        .unwrap();
    // A writer that died after two chunks of its next write, before their manifest
    // (partition 0 of the events topic lives in partition 0 of this one).
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &topic.world.brokers)
        .create()
        .unwrap();
    let torn_generation = u64::MAX / 2;
    for index in 0..2 {
        let key = Key::Chunk {
            partition: 0,
            generation: torn_generation,
            index,
        }
        .encode();
        runtime
            .block_on(
                producer.send(
                    FutureRecord::to(&topic.name)
                        .partition(0)
                        .key(&key)
                        .payload(&b"{\"half\":"[..]),
                    Duration::from_secs(10),
                ),
            )
            .unwrap();
    }
    let reader = HandoverReader::new(connection.clone(), &topic.name);
    let taken = reader.take(0, None).unwrap().expect("the write before");
    assert_eq!(taken.handover.next_offset, 10);
    assert!(
        taken.writes.contains(&(torn_generation, 2)),
        "the torn write is found: {:?}",
        taken.writes
    );
    // The member that took over writes next: every chunk of both is tombstoned.
    let mut next = HandoverWriter::new(&connection, &topic.name, "analyzer-1").unwrap();
    next.inherit(0, taken.writes);
    let written = runtime
        .block_on(next.write(&handover_of(0, 20, &[("c", &small)])))
        .unwrap();
    assert_eq!(written.tombstones, 1 + 2, "{written:?}");
    let records = records_of(&topic.world.brokers, &topic.name);
    let torn_key = Key::Chunk {
        partition: 0,
        generation: torn_generation,
        index: 1,
    }
    .encode();
    assert!(
        records
            .iter()
            .any(|(key, value)| key.as_deref() == Some(torn_key.as_bytes()) && value.is_none()),
        "a tombstone for {torn_key}"
    );
    let again = reader.take(0, None).unwrap().expect("the new write");
    assert_eq!(again.handover.next_offset, 20);
    assert_eq!(again.manifest.writer, "analyzer-1");

    // A manifest whose chunks do not match is refused: the partition is rebuilt instead.
    let mut forged: Manifest = again.manifest.clone();
    forged.sha256 = "0".repeat(64);
    forged.next_offset = 30;
    runtime
        .block_on(
            producer.send(
                FutureRecord::to(&topic.name)
                    .partition(0)
                    .key(&Key::Manifest { partition: 0 }.encode())
                    .payload(&serde_json::to_vec(&forged).unwrap()),
                Duration::from_secs(10),
            ),
        )
        .unwrap();
    let refused = reader.take(0, None).unwrap_err();
    assert!(
        matches!(refused, HandoverError::Payload(_)) && !refused.is_retryable(),
        "{refused}"
    );
}

/// The whole path: a member whose webhook fails holds a firing transition it has not
/// delivered; it dies; the member given its partition takes it over from the handover and
/// delivers that transition, under its key, without rebuilding from a snapshot.
#[test]
fn a_transition_the_dead_owner_never_delivered_is_delivered_by_the_member_that_takes_over() {
    let world = World::new("handover-undelivered", None);
    let receiver = Receiver::start(&world.runtime);
    let group = format!("ipaudit-handover-{}", std::process::id());
    let member = |instance: &str| {
        AnalyzerProcess::start(
            &world.brokers,
            &world.topic,
            &group,
            &world.dir.path().join(instance),
            &[
                "--instance-id",
                instance,
                "--handover-interval",
                "1s",
                "--webhook-url",
                &format!("{}/hook/{instance}", receiver.url),
            ],
        )
    };
    let _collector = world.collector();
    receiver.set_failing(true);
    let first = member("analyzer-a");
    play_subnet_deleted_under_live_ip(&world.sim, "gone", 7);
    let counter = |process: &AnalyzerProcess, name: &str| -> f64 {
        process
            .metrics()
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    // Stored, not delivered, and a handover written since.
    wait_for(
        "the firing transition waits in the outbox",
        Duration::from_secs(60),
        || {
            first
                .metrics()
                .lines()
                .any(|l| {
                    l.starts_with("ipaudit_analyzer_sink_backlog_transitions{")
                        && !l.ends_with(" 0")
                })
                .then_some(())
        },
    );
    let written = counter(&first, "ipaudit_analyzer_handovers_written_total ");
    wait_for(
        "a handover written with it",
        Duration::from_secs(30),
        || (counter(&first, "ipaudit_analyzer_handovers_written_total ") > written).then_some(()),
    );
    assert!(receiver.received("/hook/analyzer-a").is_empty());
    first.kill();
    receiver.set_failing(false);
    let second = member("analyzer-b");
    let delivered = poll_until(Duration::from_secs(60), || {
        let got = receiver.received("/hook/analyzer-b");
        (!got.is_empty()).then_some(got)
    })
    .unwrap_or_else(|| {
        panic!(
            "nothing delivered by the new owner; its log:\n{}",
            second.log_text()
        )
    });
    let firing = &delivered[0];
    assert_eq!(firing.body["rule"], "subnet-deleted-before-ip");
    assert_eq!(firing.body["status"], "FIRING");
    let key = firing
        .headers
        .get("idempotency-key")
        .cloned()
        .unwrap_or_default();
    assert!(
        key.starts_with(&format!(
            "{}/firing/",
            firing.body["alert_id"].as_str().unwrap_or_default()
        )),
        "the transition id as key: {key}"
    );
    let log = second.log_text();
    assert!(
        log.lines().any(|l| l
            .contains("taking the partition over from its previous owner's handover")
            && l.contains("undelivered=1")
            && l.contains("written_by=analyzer-a")),
        "the new owner took the handover with the transition; log:\n{log}"
    );
    assert!(!log.contains("rebuilding from"), "no rebuild; log:\n{log}");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        receiver.received("/hook/analyzer-b").len(),
        1,
        "delivered once"
    );
}
