//! Live analysis benchmark, two figures:
//!
//! 1. Throughput: a synthetic history (the replay benchmark's Avro file) produced to a
//!    topic, then drained by `analyzer run --exit-at-end` (decode, reorder, state, rules,
//!    checkpoints), and, one after the other in the same run, by the references:
//!    - a plain Rust consumer with the analyzer's fetch settings that decodes every message
//!      into the analysis' event type and does nothing else
//!      (`ipaudit_tests::reference::decode_all`), the main yardstick (issue 44);
//!    - `analyzer replay` of the same history as an Avro file (the whole process);
//!    - a plain librdkafka consumer in Python (confluent-kafka, no decoding), when
//!      python3 has it; the yardstick before issue 44.
//! 2. Latency: simulated API server -> collector -> broker -> analyzer -> webhook, from the
//!    moment a subnet is deleted under a live IP to the moment the webhook has the alert.
//!
//! ```sh
//! cargo build --profile dist -p ipaudit-analyzer -p ipaudit-collector -p ipaudit-tests --bins
//! target/dist/replay-bench generate --out /tmp/ipaudit-history.avro --events 200000 --ips 40000 --subnets 2000
//! pip install confluent-kafka   # optional: the Python reference
//! dir=$(mktemp -d); export $(scripts/broker start $dir | grep ^IPAUDIT_TEST_BROKERS=)
//! target/dist/live-bench /tmp/ipaudit-history.avro 50
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ipaudit_schemas::{encode, ContainerReader, WatchEvent};
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::{send_when_there_is_room, shared_or_start};
use ipaudit_tests::collector::workspace_binary;
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::reference::decode_all;
use ipaudit_tests::scenario::{ip, subnet};
use ipaudit_tests::world::World;
use kube_sim::Kind;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};

const DRAIN_PY: &str = r#"
import sys, time
from confluent_kafka import Consumer, TopicPartition
brokers, topic, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({"bootstrap.servers": brokers, "group.id": "plain-" + str(time.time()), "enable.auto.commit": False})
c.assign([TopicPartition(topic, 0, 0)])
start, n = time.time(), 0
while n < expected:
    for m in c.consume(num_messages=10000, timeout=1.0):
        if m.error() is None:
            n += 1
print(n, time.time() - start)
"#;

fn produce_history(
    brokers: &str,
    topic: &str,
    history: &Path,
    runtime: &tokio::runtime::Runtime,
) -> usize {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer");
    let reader = ContainerReader::<WatchEvent, _>::new(std::io::BufReader::new(
        std::fs::File::open(history).expect("history"),
    ))
    .expect("an Avro history");
    let mut sent = 0;
    runtime.block_on(async {
        let mut pending = Vec::new();
        for event in reader {
            let event = event.expect("record");
            let payload = encode(&event).expect("encode");
            let record = FutureRecord::to(topic)
                .key(event.cluster_id.as_str())
                .payload(&payload);
            pending.push(send_when_there_is_room(&producer, record));
            sent += 1;
            if pending.len() == 10_000 {
                for p in pending.drain(..) {
                    p.await
                        .expect("delivery result")
                        .map_err(|(e, _)| e)
                        .expect("delivered");
                }
            }
        }
        for p in pending {
            p.await
                .expect("delivery result")
                .map_err(|(e, _)| e)
                .expect("delivered");
        }
    });
    sent
}

/// The analyzer's checkpointed next offset (0 before the first checkpoint).
fn stored_offset(db: &Path) -> i64 {
    read_offset(db).unwrap_or(0)
}

fn read_offset(db: &Path) -> Result<i64, ()> {
    let out = Command::new("python3")
        .args(["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); r=c.execute('select coalesce(max(next_offset),0) from offsets').fetchone(); print(r[0])"])
        .arg(db)
        .output()
        .map_err(drop)?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(drop)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let history = PathBuf::from(
        args.next()
            .expect("usage: live-bench HISTORY.avro [INCIDENTS]"),
    );
    let incidents: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(50);
    let (brokers, _own) = shared_or_start();

    // 1. Throughput.
    let world = World::new("bench", Some(brokers.clone()));
    let sent = produce_history(&brokers, &world.topic, &history, &world.runtime);
    let receiver = Receiver::start(&world.runtime);
    let state = world.dir.path().join("analyzer-throughput");
    let started = Instant::now();
    let mut analyzer = AnalyzerProcess::start(
        &brokers,
        &world.topic,
        "bench-throughput",
        &state,
        &[
            "--start-from",
            "beginning",
            "--exit-at-end",
            "--no-log-alerts",
            "--webhook-url",
            &format!("{}/hook", receiver.url),
        ],
    );
    assert!(
        analyzer.wait(Duration::from_secs(600)),
        "analyzer did not finish; log:\n{}",
        analyzer.log_text()
    );
    let analyzer_time = started.elapsed();
    assert_eq!(
        stored_offset(&state.join("analyzer.db")),
        sent as i64,
        "read every event"
    );
    let a = sent as f64 / analyzer_time.as_secs_f64();
    let (decoded, decode_time) = decode_all(&brokers, &world.topic, sent);
    assert_eq!(decoded, sent, "the reference decoded every event");
    let d = sent as f64 / decode_time.as_secs_f64();
    let replay_started = Instant::now();
    let replayed = Command::new(workspace_binary("analyzer"))
        .args(["replay", "--format", "jsonl"])
        .arg(&history)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("analyzer replay");
    let replay_time = replay_started.elapsed();
    assert!(
        matches!(replayed.code(), Some(0 | 1)),
        "analyzer replay failed: {replayed}"
    );
    let r = sent as f64 / replay_time.as_secs_f64();
    println!(
        "throughput: {sent} events; analyzer run {:.2?} ({a:.0} events/s, whole process: start, group join, catch-up, last checkpoint); \
         decoding consumer {:.2?} ({d:.0} events/s): ratio {:.2}; analyzer replay of the file {:.2?} ({r:.0} events/s, whole process): ratio {:.2}",
        analyzer_time,
        decode_time,
        a / d,
        replay_time,
        a / r
    );
    let drain = Command::new("python3")
        .args(["-c", DRAIN_PY, &brokers, &world.topic, &sent.to_string()])
        .output();
    let plain = drain.ok().and_then(|drain| {
        String::from_utf8_lossy(&drain.stdout)
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<f64>().ok())
    });
    match plain {
        Some(plain) => {
            let b = sent as f64 / plain;
            println!(
                "second reference: confluent-kafka drain without decoding {plain:.2}s ({b:.0} events/s); ratio analyzer/plain = {:.2}",
                a / b
            );
        }
        None => println!("second reference skipped: python3 with confluent-kafka not found"),
    }

    // 2. Latency, API change to webhook.
    let latency_world = World::new("latency", Some(brokers.clone()));
    let receiver = Receiver::start(&latency_world.runtime);
    let _collector = latency_world.collector();
    let _analyzer = AnalyzerProcess::start(
        &brokers,
        &latency_world.topic,
        "bench-latency",
        &latency_world.dir.path().join("analyzer"),
        &[
            "--no-log-alerts",
            "--webhook-url",
            &format!("{}/hook", receiver.url),
        ],
    );
    std::thread::sleep(Duration::from_secs(5));
    let mut latencies = Vec::new();
    for i in 0..incidents {
        let net = format!("net-{i}");
        latency_world
            .sim
            .create(Kind::Subnet, "", subnet(&net, "10.3.0.0/24"))
            .expect("subnet");
        latency_world
            .sim
            .create(
                Kind::Ip,
                "",
                ip(&format!("vm-{i}.ns"), &net, "vm", "ns", "10.3.0.9", ""),
            )
            .expect("ip");
        std::thread::sleep(Duration::from_millis(100));
        let deleted = Instant::now();
        latency_world
            .sim
            .delete(Kind::Subnet, "", &net)
            .expect("delete");
        latency_world
            .sim
            .remove_finalizers(Kind::Subnet, "", &net)
            .expect("finalize");
        let at = loop {
            if let Some(r) = receiver
                .received("/hook")
                .into_iter()
                .find(|r| r.body["subnet"] == net.as_str())
            {
                break r.at;
            }
            assert!(
                deleted.elapsed() < Duration::from_secs(30),
                "no alert for {net}"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        latencies.push(at.duration_since(deleted));
    }
    latencies.sort();
    println!(
        "latency: {incidents} incidents, subnet deletion -> webhook: p50 {} ms, p99 {} ms, max {} ms",
        percentile(&latencies, 0.5).as_millis(),
        percentile(&latencies, 0.99).as_millis(),
        latencies[latencies.len() - 1].as_millis()
    );
}
