//! Draining a backlog: an outbox holding `--rows` events (1,000,000 by default, as after a
//! long Kafka outage) is handed to a `collector run` process, which sends them all to the
//! broker. Prints the time from the collector's start until the outbox is empty (every
//! row acknowledged), and the rate. `--collector PATH` runs another build of the
//! collector (e.g. the main branch's, for a comparison in the same run). Then, in the same
//! run, the reference (issue 44): the records the collector wrote, sent again to a new
//! topic by a plain Rust producer with the collector's policy, waiting once at the end
//! (`ipaudit_tests::reference::send_like_the_collector`).
//!
//! ```sh
//! cargo build -p ipaudit-collector -p ipaudit-tests --bins
//! dir=$(mktemp -d); export $(scripts/broker start $dir | grep ^IPAUDIT_TEST_BROKERS=)
//! target/debug/outbox-drain-bench --rows 1000000
//! scripts/pair-bench -n 3 --timeout 3600 --vs 'target/debug/outbox-drain-bench --collector /tmp/main-collector' -- target/debug/outbox-drain-bench
//! scripts/broker stop $dir
//! ```
//! The outbox is written with the schema every build reads (the `outbox` and `meta`
//! tables); a build that keeps more (the outbox's size) adds it when it opens the file.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ipaudit_schemas::convert::from_object;
use ipaudit_schemas::{encode, EventType};
use ipaudit_tests::broker::{
    create_schemas_topic, create_topic, free_port, schemas_topic_of, shared_or_start,
};
use ipaudit_tests::collector::{http_get, workspace_binary};
use ipaudit_tests::reference::send_like_the_collector;
use ipaudit_tests::scenario::{ip, subnet};
use kube_sim::{Kind, KubeSim, SimConfig};

struct Args {
    rows: usize,
    collector: PathBuf,
}

fn args() -> Args {
    let mut args = Args {
        rows: 1_000_000,
        collector: workspace_binary("collector"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--rows" => args.rows = value.parse().expect("--rows N"),
            "--collector" => args.collector = PathBuf::from(value),
            other => panic!("unknown flag {other} (--rows N --collector PATH)"),
        }
    }
    args
}

/// A typical IP event, encoded as the collector stores it.
fn payload(i: usize) -> Vec<u8> {
    let mut object = ip(
        &format!("pod-{i}.bench"),
        "bench-net",
        &format!("pod-{i}"),
        "bench",
        "10.1.2.3",
        "",
    );
    object["apiVersion"] = "kubeovn.io/v1".into();
    object["kind"] = "IP".into();
    object["metadata"]["uid"] = format!("uid-{i}").into();
    object["metadata"]["resourceVersion"] = (1_000 + i).to_string().into();
    let mut event = from_object(EventType::Modified, &object)
        .expect("an IP converts")
        .event;
    event.cluster_id = "bench".into();
    event.collector_id = "bench".into();
    event.sequence = i as i64 + 1;
    event.observed_at_ms = Some(1_700_000_000_000);
    encode(&event).expect("encodes")
}

fn fill(path: &std::path::Path, rows: usize) {
    let mut conn = rusqlite::Connection::open(path).expect("outbox");
    conn.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, payload BLOB NOT NULL);
         CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         INSERT INTO meta (key, value) VALUES ('cluster_id', 'bench');",
    )
    .expect("schema");
    let samples: Vec<Vec<u8>> = (0..1_000).map(payload).collect();
    let tx = conn.transaction().expect("begin");
    {
        let mut insert = tx
            .prepare("INSERT INTO outbox (payload) VALUES (?1)")
            .expect("insert");
        for i in 0..rows {
            insert.execute([&samples[i % samples.len()]]).expect("row");
        }
    }
    tx.commit().expect("commit");
}

fn gauge(port: u16, name: &str) -> Option<f64> {
    http_get(port, "/metrics").and_then(|(_, body)| {
        body.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    })
}

fn main() {
    let args = args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let (brokers, _broker) = shared_or_start();
    let sim = runtime
        .block_on(KubeSim::start(SimConfig::default()))
        .expect("sim");
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    sim.create(Kind::Subnet, "", subnet("bench-net", "10.0.0.0/8"))
        .expect("subnet");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    let filled = Instant::now();
    fill(&state.join("outbox.db"), args.rows);
    let filled = filled.elapsed();
    let topic = format!("ipaudit.drain.{}", std::process::id());
    runtime.block_on(create_topic(&brokers, &topic));
    // Its own schemas topic: the collector holds every row until the schema is there.
    runtime.block_on(create_schemas_topic(&brokers, &topic, 1));
    let port = free_port();
    let started = Instant::now();
    let mut child = Command::new(&args.collector)
        .arg("run")
        .args(["--kubeconfig", &kubeconfig.display().to_string()])
        .args([
            "--cluster-id",
            "bench",
            "--brokers",
            &brokers,
            "--topic",
            &topic,
            "--schemas-topic",
            &schemas_topic_of(&topic),
        ])
        .args(["--state-dir", &state.display().to_string()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("collector");
    // The list adds a few events of its own (markers, the subnet): done when the outbox
    // is empty and at least the backlog was delivered.
    let delivered = "ipaudit_collector_kafka_messages_total{result=\"delivered\"}";
    loop {
        let sent = http_get(port, "/metrics").and_then(|(_, body)| {
            body.lines()
                .find(|l| l.starts_with(delivered))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        });
        if sent.is_some_and(|n| n >= args.rows as f64)
            && gauge(port, "ipaudit_collector_outbox_rows") == Some(0.0)
        {
            break;
        }
        assert!(
            matches!(child.try_wait(), Ok(None)),
            "the collector exited before draining"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3_600),
            "not drained after an hour"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let drained = started.elapsed();
    println!(
        "{} rows (filled in {filled:.2?}) drained in {drained:.2?}: {:.0} rows/s ({})",
        args.rows,
        args.rows as f64 / drained.as_secs_f64(),
        args.collector.display()
    );
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let (sent, took) = send_like_the_collector(&brokers, &topic, 0, &runtime);
    let collector_rate = args.rows as f64 / drained.as_secs_f64();
    let reference_rate = sent as f64 / took.as_secs_f64();
    println!(
        "reference: a plain producer with the collector's policy sent the {sent} records in {took:.2?}: {reference_rate:.0} records/s; ratio collector/reference = {:.2}",
        collector_rate / reference_rate
    );
}
