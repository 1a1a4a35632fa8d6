//! Live analysis benchmarks, one subcommand each:
//!
//! 1. `throughput HISTORY`: a synthetic history (the replay benchmark's Avro file)
//!    produced to a topic, then drained by `analyzer run --exit-at-end` (decode, reorder,
//!    state, rules, checkpoints), and, one after the other in the same run, by the
//!    references:
//!    - a plain Rust consumer with the analyzer's fetch settings that decodes every message
//!      into the analysis' event type and does nothing else
//!      (`ipaudit_tests::reference::decode_all`), the main yardstick (issue 44);
//!    - `analyzer replay` of the same history as an Avro file (the whole process);
//!    - a plain librdkafka consumer in Python (confluent-kafka, no decoding), when
//!      python3 has it; the yardstick before issue 44.
//! 2. `latency`: simulated API server -> collector -> broker -> analyzer -> webhook, from
//!    the moment a subnet is deleted under a live IP to the moment the webhook has the
//!    alert; `--at-once` incidents are played together, in waves.
//! 3. `group HISTORY`: the catch-up of a consumer group. A history spread over many
//!    clusters (`replay-bench generate --clusters 30`) is produced to a topic of one
//!    partition and drained by one `analyzer run --exit-at-end` (the single-partition
//!    figure, the reference), then to a topic of `--partitions` partitions and drained by
//!    `--members` members of one group started together; each member's events per
//!    second, of wall time and of its own CPU time, against the single member's.
//!
//! ```sh
//! cargo build --profile dist -p ipaudit-analyzer -p ipaudit-collector -p ipaudit-tests --bins
//! target/dist/replay-bench generate --out /tmp/ipaudit-history.avro --events 200000 --ips 40000 --subnets 2000
//! pip install confluent-kafka   # optional: the Python reference
//! dir=$(mktemp -d); export $(scripts/broker start $dir | grep ^IPAUDIT_TEST_BROKERS=)
//! target/dist/live-bench throughput /tmp/ipaudit-history.avro
//! target/dist/live-bench latency --incidents 1000 --at-once 10
//! target/dist/replay-bench generate --out /tmp/ipaudit-30.avro --events 3000000 --ips 120000 --subnets 6000 --clusters 30
//! target/dist/live-bench group /tmp/ipaudit-30.avro --partitions 12 --members 3
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use ipaudit_schemas::{encode, ContainerReader, WatchEvent};
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::{send_when_there_is_room, shared_or_start};
use ipaudit_tests::collector::workspace_binary;
use ipaudit_tests::measure::{read_measured, Measured};
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

#[derive(Debug, Parser)]
#[command(about = "Live analysis benchmarks: catch-up, incident latency, a group's catch-up")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// `analyzer run --exit-at-end` over HISTORY in one partition, against the decoding
    /// consumer, `analyzer replay` of the file and (when python3 has confluent-kafka) a
    /// consumer that decodes nothing.
    Throughput {
        /// An Avro history (`replay-bench generate`).
        history: PathBuf,
    },
    /// Subnet deleted under a live IP at the simulated API server, to the webhook's alert.
    Latency {
        /// Incidents in all.
        #[arg(long, default_value_t = 100)]
        incidents: usize,
        /// Incidents played together (their subnets deleted one after the other, then
        /// every alert awaited) in each wave.
        #[arg(long, default_value_t = 1)]
        at_once: usize,
    },
    /// The catch-up of `--members` members of one group over HISTORY in `--partitions`
    /// partitions, against one member over the same events in one partition.
    Group {
        /// An Avro history spread over several clusters (`replay-bench generate
        /// --clusters N`): a topic's partitions are filled by cluster.
        history: PathBuf,
        /// Partitions of the group's topic.
        #[arg(long, default_value_t = 12)]
        partitions: i32,
        /// Members of the group.
        #[arg(long, default_value_t = 3)]
        members: usize,
    },
}

fn main() {
    let (brokers, _own) = shared_or_start();
    match Cli::parse().bench {
        Bench::Throughput { history } => throughput(&brokers, &history),
        Bench::Latency { incidents, at_once } => latency(&brokers, incidents, at_once.max(1)),
        Bench::Group {
            history,
            partitions,
            members,
        } => group(&brokers, &history, partitions, members.max(1)),
    }
}

fn throughput(brokers: &str, history: &Path) {
    let world = World::new("bench", Some(brokers.to_owned()));
    let sent = produce_history(brokers, &world.topic, history, &world.runtime);
    let receiver = Receiver::start(&world.runtime);
    let state = world.dir.path().join("analyzer-throughput");
    let started = Instant::now();
    let mut analyzer = AnalyzerProcess::start(
        brokers,
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
    let (decoded, decode_time) = decode_all(brokers, &world.topic, sent);
    assert_eq!(decoded, sent, "the reference decoded every event");
    let d = sent as f64 / decode_time.as_secs_f64();
    let replay_started = Instant::now();
    let replayed = Command::new(workspace_binary("analyzer"))
        .args(["replay", "--format", "jsonl"])
        .arg(history)
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
        .args(["-c", DRAIN_PY, brokers, &world.topic, &sent.to_string()])
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
}

/// One incident in play: its subnet, and when the subnet was deleted.
struct Incident {
    net: String,
    deleted: Instant,
}

fn latency(brokers: &str, incidents: usize, at_once: usize) {
    let world = World::new("latency", Some(brokers.to_owned()));
    let receiver = Receiver::start(&world.runtime);
    let _collector = world.collector();
    let _analyzer = AnalyzerProcess::start(
        brokers,
        &world.topic,
        "bench-latency",
        &world.dir.path().join("analyzer"),
        &[
            "--no-log-alerts",
            "--webhook-url",
            &format!("{}/hook", receiver.url),
        ],
    );
    std::thread::sleep(Duration::from_secs(5));
    let mut latencies = Vec::new();
    let mut next = 0;
    while next < incidents {
        let wave: Vec<usize> = (next..incidents.min(next + at_once)).collect();
        next += wave.len();
        for &i in &wave {
            let net = format!("net-{i}");
            world
                .sim
                .create(Kind::Subnet, "", subnet(&net, "10.3.0.0/24"))
                .expect("subnet");
            world
                .sim
                .create(
                    Kind::Ip,
                    "",
                    ip(&format!("vm-{i}.ns"), &net, "vm", "ns", "10.3.0.9", ""),
                )
                .expect("ip");
        }
        std::thread::sleep(Duration::from_millis(100));
        let mut in_play: Vec<Incident> = wave
            .iter()
            .map(|i| {
                let net = format!("net-{i}");
                let deleted = Instant::now();
                world.sim.delete(Kind::Subnet, "", &net).expect("delete");
                world
                    .sim
                    .remove_finalizers(Kind::Subnet, "", &net)
                    .expect("finalize");
                Incident { net, deleted }
            })
            .collect();
        while !in_play.is_empty() {
            let received = receiver.received("/hook");
            in_play.retain(|incident| {
                let alert = received
                    .iter()
                    .find(|r| r.body["subnet"] == incident.net.as_str());
                match alert {
                    Some(alert) => {
                        latencies.push(alert.at.duration_since(incident.deleted));
                        false
                    }
                    None => {
                        assert!(
                            incident.deleted.elapsed() < Duration::from_secs(30),
                            "no alert for {}",
                            incident.net
                        );
                        true
                    }
                }
            });
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    latencies.sort();
    println!(
        "latency: {incidents} incidents, {at_once} at once, subnet deletion -> webhook: p50 {} ms, p99 {} ms, max {} ms",
        percentile(&latencies, 0.5).as_millis(),
        percentile(&latencies, 0.99).as_millis(),
        latencies[latencies.len() - 1].as_millis()
    );
}

/// What one member of a catch-up did: the messages it consumed and the time it ran (both
/// from its own last log line), and what the kernel accounted for it.
struct MemberRun {
    name: String,
    messages: u64,
    seconds: f64,
    usage: Measured,
}

impl MemberRun {
    fn per_second(&self) -> f64 {
        self.messages as f64 / self.seconds
    }

    fn per_cpu_second(&self) -> f64 {
        self.messages as f64 / self.usage.cpu.as_secs_f64()
    }
}

/// Starts `names.len()` members of one group on `topic` together, each catching up from
/// the beginning and exiting at the end; what each did.
fn catch_up(
    brokers: &str,
    topic: &str,
    group: &str,
    dir: &Path,
    names: &[String],
) -> Vec<MemberRun> {
    let started = Instant::now();
    let mut members: Vec<(AnalyzerProcess, PathBuf)> = names
        .iter()
        .map(|name| {
            let usage = dir.join(format!("{name}.usage"));
            let process = AnalyzerProcess::start_measured(
                brokers,
                topic,
                group,
                &dir.join(name),
                &[
                    "--start-from",
                    "beginning",
                    "--exit-at-end",
                    "--no-log-alerts",
                    "--instance-id",
                    name,
                ],
                &usage,
            );
            (process, usage)
        })
        .collect();
    let mut runs = Vec::new();
    for ((process, usage), name) in members.iter_mut().zip(names) {
        assert!(
            process.wait(Duration::from_secs(900)),
            "{name} did not finish; log:\n{}",
            process.log_text()
        );
        let log = process.log_text();
        let stop = log
            .lines()
            .rfind(|l| l.contains("stopped after its last checkpoint"))
            .unwrap_or_else(|| panic!("{name} logged no stop; log:\n{log}"));
        let field = |key: &str| -> f64 {
            stop.split_whitespace()
                .find_map(|word| word.strip_prefix(key)?.parse().ok())
                .unwrap_or_else(|| panic!("no {key} in {stop}"))
        };
        runs.push(MemberRun {
            name: name.clone(),
            messages: field("messages=") as u64,
            seconds: field("seconds="),
            usage: read_measured(usage, started.elapsed()),
        });
    }
    runs
}

fn group(brokers: &str, history: &Path, partitions: i32, members: usize) {
    // The reference: the same events in one partition, one member.
    let single = World::new("group-single", Some(brokers.to_owned()));
    let sent = produce_history(brokers, &single.topic, history, &single.runtime);
    let reference = catch_up(
        brokers,
        &single.topic,
        "bench-group-single",
        single.dir.path(),
        &["single".to_owned()],
    )
    .remove(0);
    assert_eq!(
        reference.messages, sent as u64,
        "the single member read every event"
    );
    let world = World::partitioned_on("group", brokers, partitions);
    let resent = produce_history(brokers, &world.topic, history, &world.runtime);
    let names: Vec<String> = (0..members).map(|m| format!("member-{m}")).collect();
    let started = Instant::now();
    let runs = catch_up(
        brokers,
        &world.topic,
        "bench-group",
        world.dir.path(),
        &names,
    );
    let whole = started.elapsed();
    let consumed: u64 = runs.iter().map(|r| r.messages).sum();
    assert!(
        consumed >= resent as u64,
        "the members read {consumed} of {resent} events"
    );
    let line = |run: &MemberRun| {
        format!(
            "{}: {} events in {:.2} s, {:.2} s of CPU: {:.0} events/s ({:.2} of the single member's), {:.0} per CPU second ({:.2})",
            run.name,
            run.messages,
            run.seconds,
            run.usage.cpu.as_secs_f64(),
            run.per_second(),
            run.per_second() / reference.per_second(),
            run.per_cpu_second(),
            run.per_cpu_second() / reference.per_cpu_second(),
        )
    };
    println!(
        "group: {sent} events; the reference, one partition and one member, {}",
        line(&reference)
    );
    for run in &runs {
        println!(
            "group: {partitions} partitions, {members} members; {}",
            line(run)
        );
    }
    println!(
        "group: every member done in {whole:.2?}: {:.0} events/s for the group ({:.2} of the single member's)",
        resent as f64 / whole.as_secs_f64(),
        resent as f64 / whole.as_secs_f64() / reference.per_second()
    );
}
