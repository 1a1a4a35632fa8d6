//! Collector throughput and memory: a simulated API server holding `--objects` live IPs
//! (100k by default), a collector process that lists them, then `--changes` updates made
//! as fast as the server takes them. Measures events/s into the broker (`collector run`)
//! and into a file (`collector record`), and the collector's peak RSS.
//!
//! ```sh
//! cargo build --profile dist -p ipaudit-collector -p ipaudit-tests --bins
//! target/dist/collector-bench --objects 100000 --changes 100000
//! ```
//! Uses `$IPAUDIT_TEST_BROKERS` when set, else starts Apache Kafka (see scripts/broker).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ipaudit_schemas::{ContainerReader, WatchEvent};
use ipaudit_tests::broker::{create_topic, free_port, shared_or_start};
use ipaudit_tests::collector::{http_get, workspace_binary};
use ipaudit_tests::scenario::{ip, subnet};
use kube_sim::{Kind, KubeSim, SimConfig};
use serde_json::json;

struct Args {
    objects: usize,
    changes: usize,
}

fn args() -> Args {
    let mut args = Args {
        objects: 100_000,
        changes: 100_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{flag} needs a number"));
        match flag.as_str() {
            "--objects" => args.objects = value,
            "--changes" => args.changes = value,
            other => panic!("unknown flag {other} (--objects N --changes N)"),
        }
    }
    args
}

fn peak_rss_mib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib / 1024)
}

/// User + system CPU seconds a process has used.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < timeout,
            "{what}: not done after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

fn counter(port: u16, name: &str) -> f64 {
    http_get(port, "/metrics")
        .and_then(|(_, body)| {
            body.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        })
        .unwrap_or(0.0)
}

fn count_records(path: &Path) -> usize {
    std::fs::File::open(path)
        .ok()
        .and_then(|f| ContainerReader::<WatchEvent, _>::new(std::io::BufReader::new(f)).ok())
        .map_or(0, |r| r.take_while(Result::is_ok).count())
}

fn change_all(sim: &KubeSim, objects: usize, changes: usize) {
    for i in 0..changes {
        let name = format!("pod-{}.bench", i % objects);
        sim.update(Kind::Ip, "", &name, |o| {
            o["spec"]["nodeName"] = json!(format!("node-{}", i % 7))
        })
        .expect("update");
    }
}

fn main() {
    let args = args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    let (brokers, _broker) = shared_or_start();
    for mode in ["record", "kafka"] {
        let config = SimConfig {
            history_window: args.changes + 10,
            ..SimConfig::default()
        };
        let sim = runtime.block_on(KubeSim::start(config)).expect("sim");
        sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        sim.create(Kind::Subnet, "", subnet("bench-net", "10.0.0.0/8"))
            .expect("subnet");
        for i in 0..args.objects {
            let address = format!("10.{}.{}.{}", i / 65_536 % 256, i / 256 % 256, i % 256);
            sim.create(
                Kind::Ip,
                "",
                ip(
                    &format!("pod-{i}.bench"),
                    "bench-net",
                    &format!("pod-{i}"),
                    "bench",
                    &address,
                    "",
                ),
            )
            .expect("ip");
        }
        let port = free_port();
        let out = dir.path().join("bench.avro");
        let topic = format!("ipaudit.bench.{}", std::process::id());
        let state = dir.path().join(format!("state-{mode}"));
        let mut command = Command::new(workspace_binary("collector"));
        command.args([
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            "--cluster-id",
            "bench",
        ]);
        if mode == "record" {
            command
                .arg("record")
                .args(["--out", &out.display().to_string()]);
        } else {
            runtime.block_on(create_topic(&brokers, &topic));
            command.arg("run").args([
                "--brokers",
                &brokers,
                "--topic",
                &topic,
                "--state-dir",
                &state.display().to_string(),
            ]);
        }
        // The subcommand goes first; clap takes the shared flags after it.
        let mut argv: Vec<String> = command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let sub = argv
            .iter()
            .position(|a| a == "record" || a == "run")
            .expect("subcommand");
        let sub = argv.remove(sub);
        argv.insert(0, sub);
        argv.extend(["--listen".into(), format!("127.0.0.1:{port}")]);
        let mut child: Child = Command::new(workspace_binary("collector"))
            .args(&argv)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("collector");
        let listed = args.objects + 1;
        let stored = |expected: usize| -> bool {
            if mode == "record" {
                count_records(&out) >= expected
            } else {
                counter(
                    port,
                    "ipaudit_collector_kafka_messages_total{result=\"delivered\"}",
                ) >= expected as f64
            }
        };
        // Initial list: SYNC_START + objects + SYNC_END per stream (3 streams).
        let list_events = listed + 6;
        let list_time = wait_until("initial list", Duration::from_secs(600), || {
            stored(list_events)
        });
        let cpu_after_list = cpu_seconds(child.id()).unwrap_or(0.0);
        let started = Instant::now();
        change_all(&sim, args.objects, args.changes);
        let applied = started.elapsed();
        wait_until("changes", Duration::from_secs(600), || {
            stored(list_events + args.changes)
        });
        let change_time = started.elapsed();
        let rss = peak_rss_mib(child.id()).map_or_else(|| "?".into(), |m| m.to_string());
        let cpu = cpu_seconds(child.id()).unwrap_or(0.0);
        println!(
            "{mode:>6}: list of {listed} objects in {:.2?} ({:.0} events/s, collector {:.2} CPU s); \
             {} changes in {:.2?} ({:.0} events/s; the server took {:.2?} to apply them; collector {:.2} CPU s \
             = {:.0} events per CPU second); collector peak RSS {rss} MiB",
            list_time,
            list_events as f64 / list_time.as_secs_f64(),
            cpu_after_list,
            args.changes,
            change_time,
            args.changes as f64 / change_time.as_secs_f64(),
            applied,
            cpu - cpu_after_list,
            args.changes as f64 / (cpu - cpu_after_list).max(0.001),
        );
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
        sim.stop();
    }
}
