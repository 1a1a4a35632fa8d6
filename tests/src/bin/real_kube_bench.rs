//! The collector against a real kube-apiserver (issue 42): `--ips` kube-ovn IPs and `--pods`
//! Pods (10,000 each by default) created through the API, then, `--rounds` times, a fresh
//! collector (`collector run --kinds pods,ips.kubeovn.io`, a fresh topic and outbox) lists
//! them into Kafka, a reference watcher of the same two streams on the same server lists
//! them too, and a burst of `--updates` merge-patches (an annotation, spread over the IPs
//! and the pods, `--writers` requests in flight) goes through the API while both watch.
//!
//! The reference is a plain kube-rs list (pages of 500, as the collector's) and watch of
//! IPs and Pods with the collector's own client settings
//! (`ipaudit_collector::app::watch_client`) that does nothing but count events; it runs
//! as a process of its own (this binary's hidden `reference` mode), as the collector does.
//!
//! Figures per round: the collector's events/s = the burst's MODIFIED events in Kafka over
//! the time from the burst's start to the last of them in Kafka (the topic is created with
//! `message.timestamp.type=LogAppendTime`: the broker's clock at append); the reference's =
//! the same events over the time to the last one it received; the writer's own rate (API
//! writes/s), which bounds both; the initial list's time (collector: process start until
//! both SYNC_END frames are in Kafka; reference: process start until both lists are read).
//! The live burst is bounded by the writer: both keep up with it. So each round also has a
//! drain: the collector stopped and the reference listed but not watching, `--updates` more
//! merge-patches are made; then the collector starts again and resumes its watches from
//! the versions its outbox kept, alone on the server until every event is in Kafka, and
//! after it the reference watches from its lists' versions; events/s from the first to the
//! last event of each. Nothing here asserts a speed: the checks are that every event came.
//!
//! ```sh
//! cargo build --profile dist -p ipaudit-collector -p ipaudit-tests --bins
//! target/dist/real-kube-bench --ips 10000 --pods 10000 --updates 50000 --rounds 3
//! ```
//! Uses `$IPAUDIT_TEST_KUBECONFIG` when set (its objects are named `rkb-*`, the pods in
//! namespace `rkb-bench`; run it on a server of its own: other writers' events would be
//! counted in the list figures), else starts a kube-apiserver of its own (`scripts/kube
//! start`); `$IPAUDIT_TEST_BROKERS` when set, else starts Apache Kafka (see scripts/broker).

use std::collections::HashMap;
use std::io::{BufRead, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{StreamExt, TryStreamExt};
use ipaudit_collector::app::{client as writer_client, watch_client, KubeSource};
use ipaudit_schemas::{decode, EventType, Stream, WatchEvent};
use ipaudit_tests::broker::{reader_from_start, shared_or_start};
use ipaudit_tests::collector::{http_get, CollectorProcess, CollectorSetup};
use ipaudit_tests::kube::KubeServer;
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchEvent as KubeEvent, WatchParams,
};
use kube::Client;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Message, Timestamp};
use serde_json::{json, Value};

/// Prefix of every object this benchmark writes.
const PREFIX: &str = "rkb";
/// Namespace of the pods.
const NAMESPACE: &str = "rkb-bench";
/// Objects a list page, as the collector lists.
const PAGE: u32 = 500;

struct Args {
    ips: usize,
    pods: usize,
    updates: usize,
    rounds: usize,
    writers: usize,
}

fn args() -> Args {
    let mut args = Args {
        ips: 10_000,
        pods: 10_000,
        updates: 50_000,
        rounds: 3,
        writers: 48,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{flag} needs a number"));
        match flag.as_str() {
            "--ips" => args.ips = value,
            "--pods" => args.pods = value,
            "--updates" => args.updates = value,
            "--rounds" => args.rounds = value,
            "--writers" => args.writers = value,
            other => {
                panic!("unknown flag {other} (--ips N --pods N --updates N --rounds N --writers N)")
            }
        }
    }
    assert!(
        args.ips > 0 && args.pods > 0,
        "--ips and --pods must be > 0"
    );
    args
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn ip_resource() -> ApiResource {
    ApiResource {
        group: "kubeovn.io".into(),
        version: "v1".into(),
        api_version: "kubeovn.io/v1".into(),
        kind: "IP".into(),
        plural: "ips".into(),
    }
}

fn core_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn pod_name(i: usize) -> String {
    format!("{PREFIX}-pod-{i}")
}

/// kube-ovn names a pod's IP `POD.NAMESPACE`.
fn ip_name(i: usize) -> String {
    format!("{}.{NAMESPACE}", pod_name(i))
}

fn address(i: usize) -> String {
    format!("10.{}.{}.{}", i / 65_536 % 256, i / 256 % 256, i % 256)
}

fn is_ours(name: &str) -> bool {
    name.starts_with(PREFIX)
}

// ---------------------------------------------------------------------------------------
// The reference watcher (a process of its own).

/// Counts the MODIFIED events of the benchmark's objects on both streams.
#[derive(Default)]
struct Seen {
    modified: AtomicU64,
    first_ms: AtomicI64,
    last_ms: AtomicI64,
    events: AtomicU64,
}

/// Lists every object of `api` in pages of [`PAGE`]; (objects, the list's resourceVersion).
async fn list_all(api: &Api<DynamicObject>) -> (usize, String) {
    let mut params = ListParams::default().limit(PAGE);
    let mut count = 0;
    let mut version = None;
    loop {
        let page = api.list(&params).await.expect("list");
        count += page.items.len();
        if version.is_none() {
            version = page.metadata.resource_version.clone();
        }
        match page.metadata.continue_.as_deref() {
            Some(token) if !token.is_empty() => params = params.continue_token(token),
            _ => break,
        }
    }
    (count, version.expect("a list's resourceVersion"))
}

/// Watches `api` from `version` for ever (again from the last version when a watch ends),
/// counting events; says `ready` once the first watch is open.
async fn watch_counting(
    api: Api<DynamicObject>,
    mut version: String,
    seen: Arc<Seen>,
    ready: tokio::sync::mpsc::Sender<()>,
) {
    let params = WatchParams::default().timeout(290);
    let mut ready = Some(ready);
    loop {
        let stream = api.watch(&params, &version).await.expect("watch");
        if let Some(ready) = ready.take() {
            let _ = ready.send(()).await;
        }
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let now = unix_ms();
            seen.events.fetch_add(1, Ordering::Relaxed);
            match event.expect("a watch event") {
                KubeEvent::Modified(object) => {
                    if object.metadata.name.as_deref().is_some_and(is_ours) {
                        if seen.modified.fetch_add(1, Ordering::Relaxed) == 0 {
                            seen.first_ms.store(now, Ordering::Relaxed);
                        }
                        seen.last_ms.fetch_max(now, Ordering::Relaxed);
                    }
                    version = object.metadata.resource_version.unwrap_or(version);
                }
                KubeEvent::Added(object) | KubeEvent::Deleted(object) => {
                    version = object.metadata.resource_version.unwrap_or(version);
                }
                KubeEvent::Bookmark(bookmark) => version = bookmark.metadata.resource_version,
                KubeEvent::Error(status) => panic!("watch error: {status:?}"),
            }
        }
    }
}

/// `reference KUBECONFIG EXPECTED [wait]`: lists IPs and Pods, prints `listed START END IPS
/// PODS`, (with `wait`: waits for a line on stdin, then prints `go TIME`,) watches both from
/// the lists' versions, prints `watching`, then `done MODIFIED FIRST LAST EVENTS` once
/// EXPECTED MODIFIED events of the benchmark's objects came, and exits when stdin closes.
fn reference(kubeconfig: PathBuf, expected: u64, wait: bool) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async move {
        let client = watch_client(&KubeSource::Kubeconfig(kubeconfig))
            .await
            .expect("client");
        let ips: Api<DynamicObject> = Api::all_with(client.clone(), &ip_resource());
        let pods: Api<DynamicObject> = Api::all_with(client, &core_resource("Pod", "pods"));
        let start = unix_ms();
        let ((ip_count, ip_version), (pod_count, pod_version)) =
            tokio::join!(list_all(&ips), list_all(&pods));
        println!("listed {start} {} {ip_count} {pod_count}", unix_ms());
        std::io::stdout().flush().expect("stdout");
        if wait {
            tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).expect("stdin");
            })
            .await
            .expect("stdin");
            println!("go {}", unix_ms());
        }
        let seen = Arc::new(Seen::default());
        let (ready_tx, mut ready) = tokio::sync::mpsc::channel(2);
        tokio::spawn(watch_counting(
            ips,
            ip_version,
            seen.clone(),
            ready_tx.clone(),
        ));
        tokio::spawn(watch_counting(pods, pod_version, seen.clone(), ready_tx));
        for _ in 0..2 {
            ready.recv().await.expect("both watches open");
        }
        println!("watching");
        std::io::stdout().flush().expect("stdout");
        while seen.modified.load(Ordering::Relaxed) < expected {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!(
            "done {} {} {} {}",
            seen.modified.load(Ordering::Relaxed),
            seen.first_ms.load(Ordering::Relaxed),
            seen.last_ms.load(Ordering::Relaxed),
            seen.events.load(Ordering::Relaxed),
        );
        std::io::stdout().flush().expect("stdout");
        tokio::task::spawn_blocking(|| {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        })
        .await
        .expect("stdin");
    });
}

/// The reference watcher as a child process, its stdout lines on a channel.
struct Reference {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Reference {
    fn start(kubeconfig: &Path, expected: usize, wait: bool) -> Reference {
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .arg("reference")
            .arg(kubeconfig)
            .arg(expected.to_string())
            .args(wait.then_some("wait"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("reference watcher");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Reference { child, lines }
    }

    /// The next line starting with `word`, split on whitespace after it.
    fn expect(&mut self, word: &str, timeout: Duration) -> Vec<i64> {
        let line = self
            .lines
            .recv_timeout(timeout)
            .unwrap_or_else(|e| panic!("reference watcher: no `{word}` line ({e})"));
        let mut parts = line.split_whitespace();
        assert_eq!(parts.next(), Some(word), "reference watcher said {line:?}");
        parts.map(|p| p.parse().expect("a number")).collect()
    }

    /// Lets a reference started with `wait` watch.
    fn go(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        stdin.write_all(b"go\n").expect("write to the reference");
        stdin.flush().expect("flush");
    }

    fn stop(mut self) {
        drop(self.child.stdin.take());
        if !matches!(
            self.child.wait_timeout(Duration::from_secs(10)),
            Some(status) if status.success()
        ) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

trait WaitTimeout {
    fn wait_timeout(&mut self, timeout: Duration) -> Option<std::process::ExitStatus>;
}

impl WaitTimeout for Child {
    fn wait_timeout(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

// ---------------------------------------------------------------------------------------
// The writer.

async fn create_ignoring_conflict(api: &Api<DynamicObject>, object: Value) {
    let object: DynamicObject = serde_json::from_value(object).expect("an object");
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("create {:?}: {e}", object.metadata.name),
    }
}

/// Creates the namespace, the Subnet, the IPs and the Pods, `writers` requests in flight;
/// the time it took.
async fn load(client: &Client, args: &Args) -> Duration {
    let started = Instant::now();
    let namespaces: Api<DynamicObject> =
        Api::all_with(client.clone(), &core_resource("Namespace", "namespaces"));
    create_ignoring_conflict(
        &namespaces,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .await;
    let subnets: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource {
            kind: "Subnet".into(),
            plural: "subnets".into(),
            ..ip_resource()
        },
    );
    create_ignoring_conflict(
        &subnets,
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": format!("{PREFIX}-net")},
            "spec": {"cidrBlock": "10.0.0.0/8", "protocol": "IPv4", "provider": "ovn",
                "vpc": "ovn-cluster"}}),
    )
    .await;
    let ips: Api<DynamicObject> = Api::all_with(client.clone(), &ip_resource());
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &core_resource("Pod", "pods"));
    let subnet = format!("{PREFIX}-net");
    futures::stream::iter(0..args.ips.max(args.pods) * 2)
        .map(|n| {
            let (i, is_ip) = (n / 2, n % 2 == 0);
            let (ips, pods, subnet) = (&ips, &pods, &subnet);
            async move {
                if is_ip && i < args.ips {
                    let address = address(i);
                    create_ignoring_conflict(
                        ips,
                        json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
                            "metadata": {"name": ip_name(i),
                                "labels": {"ovn.kubernetes.io/subnet": subnet}},
                            "spec": {"subnet": subnet, "podName": pod_name(i),
                                "namespace": NAMESPACE, "ipAddress": address,
                                "v4IpAddress": address, "podType": "",
                                "nodeName": format!("node-{}", i % 7), "attachSubnets": []}}),
                    )
                    .await;
                } else if !is_ip && i < args.pods {
                    create_ignoring_conflict(
                        pods,
                        json!({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": pod_name(i), "namespace": NAMESPACE,
                                "annotations": {"ovn.kubernetes.io/allocated": "true",
                                    "ovn.kubernetes.io/ip_address": address(i),
                                    "ovn.kubernetes.io/logical_switch": subnet}},
                            "spec": {"containers": [{"name": "app",
                                "image": "registry.k8s.io/pause:3.10"}]}}),
                    )
                    .await;
                }
            }
        })
        .buffer_unordered(args.writers)
        .collect::<()>()
        .await;
    started.elapsed()
}

/// The burst: `updates` merge-patches of an annotation, alternately an IP and a Pod, each
/// to a value of its own (so that each changes its object: one MODIFIED event each);
/// (start, end) in Unix ms. `tag` makes the values of each burst new.
async fn burst(client: &Client, args: &Args, tag: &str) -> (i64, i64) {
    let ips: Api<DynamicObject> = Api::all_with(client.clone(), &ip_resource());
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &core_resource("Pod", "pods"));
    let params = PatchParams::default();
    let start = unix_ms();
    futures::stream::iter(0..args.updates)
        .map(|n| {
            let (ips, pods, params) = (&ips, &pods, &params);
            async move {
                let patch = Patch::Merge(json!({"metadata": {"annotations":
                    {"bench.ipaudit.io/update": format!("{tag}-{n}")}}}));
                let (api, name) = if n % 2 == 0 {
                    (ips, ip_name(n / 2 % args.ips))
                } else {
                    (pods, pod_name(n / 2 % args.pods))
                };
                api.patch(&name, params, &patch)
                    .await
                    .map(|_| ())
                    .map_err(|e| anyhow::anyhow!("patch {name}: {e}"))
            }
        })
        .buffer_unordered(args.writers)
        .try_collect::<()>()
        .await
        .expect("every patch applied");
    (start, unix_ms())
}

// ---------------------------------------------------------------------------------------
// Kafka: what the collector delivered.

/// What the topic holds so far, with the broker's append times.
#[derive(Default, Debug)]
struct Delivered {
    messages: u64,
    /// Listed (ADDED) objects of each stream, until its SYNC_END.
    listed: HashMap<Stream, u64>,
    /// Append time of each stream's first SYNC_END.
    sync_end_ms: HashMap<Stream, i64>,
    /// The latest observed_at_ms of a listed object.
    list_observed_ms: i64,
    /// MODIFIED events of the benchmark's objects.
    modified: u64,
    first_modified_ms: i64,
    last_modified_ms: i64,
    /// The latest observed_at_ms (when the collector received it) of those.
    last_modified_observed_ms: i64,
    /// (append, observed) times of each of those, in topic order.
    modified_ms: Vec<(i64, i64)>,
    /// SYNC_END frames (a relist adds some).
    sync_ends: u64,
    /// Whether every message carried a LogAppendTime.
    all_log_append_time: bool,
}

/// Reads the topic from its start in a thread until `stop`.
fn count_topic(
    brokers: &str,
    topic: &str,
    stop: Arc<AtomicBool>,
) -> (Arc<Mutex<Delivered>>, std::thread::JoinHandle<()>) {
    let delivered = Arc::new(Mutex::new(Delivered {
        all_log_append_time: true,
        ..Delivered::default()
    }));
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("fetch.wait.max.ms", "50");
    let consumer = reader_from_start(
        config,
        &format!("real-kube-bench-{}", std::process::id()),
        topic,
    );
    let shared = delivered.clone();
    let thread = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Some(message) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let message = match message {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("consumer: {e}");
                    continue;
                }
            };
            let appended = match message.timestamp() {
                Timestamp::LogAppendTime(ms) => ms,
                other => {
                    shared.lock().unwrap().all_log_append_time = false;
                    other.to_millis().unwrap_or_else(unix_ms)
                }
            };
            let event: WatchEvent =
                decode(message.payload().unwrap_or_default()).expect("every message decodes");
            let mut d = shared.lock().unwrap();
            d.messages += 1;
            let ours = event.metadata.as_ref().is_some_and(|m| is_ours(&m.name));
            match event.event_type {
                EventType::Added if !d.sync_end_ms.contains_key(&event.stream) => {
                    *d.listed.entry(event.stream).or_default() += 1;
                    d.list_observed_ms = d.list_observed_ms.max(event.observed_at_ms.unwrap_or(0));
                }
                EventType::SyncEnd => {
                    d.sync_ends += 1;
                    d.sync_end_ms.entry(event.stream).or_insert(appended);
                }
                EventType::Modified if ours => {
                    d.modified += 1;
                    if d.first_modified_ms == 0 {
                        d.first_modified_ms = appended;
                    }
                    d.last_modified_ms = d.last_modified_ms.max(appended);
                    d.last_modified_observed_ms = d
                        .last_modified_observed_ms
                        .max(event.observed_at_ms.unwrap_or(0));
                    d.modified_ms
                        .push((appended, event.observed_at_ms.unwrap_or(0)));
                }
                _ => {}
            }
        }
    });
    (delivered, thread)
}

/// The events topic, one partition, stamped by the broker at append.
async fn create_events_topic(brokers: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("admin client");
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(1))
        .set("message.timestamp.type", "LogAppendTime");
    let results = admin
        .create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create topic");
    for result in results {
        result.expect("topic created");
    }
}

/// User + system CPU seconds a process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            Some(fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?)
        })
        .map_or(0.0, |ticks| ticks / 100.0)
}

/// A gauge's value from the collector's /metrics on `port`.
fn gauge(port: u16, name: &str) -> f64 {
    http_get(port, "/metrics")
        .and_then(|(_, body)| {
            body.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        })
        .unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------
// One round.

/// The burst made while both watch.
struct Live {
    writer_rate: f64,
    collector_rate: f64,
    collector_observed_rate: f64,
    reference_rate: f64,
    collector_tail_ms: i64,
    reference_tail_ms: i64,
    peak_outbox_rows: f64,
    collector_cpu_s: f64,
    reference_cpu_s: f64,
}

/// The burst made while neither watches, then read by each alone.
struct Drain {
    writer_rate: f64,
    /// First to last of them in Kafka.
    collector_rate: f64,
    /// First to last of them received (observed_at_ms).
    collector_read_rate: f64,
    /// Process start to the last in Kafka.
    collector_from_start_rate: f64,
    /// First to last received.
    reference_rate: f64,
    /// Its watches asked for to the last received.
    reference_from_go_rate: f64,
    /// The whole process: start (its outbox's state read) and drain.
    collector_cpu_s: f64,
    reference_cpu_s: f64,
}

struct Round {
    live: Live,
    drain: Drain,
    collector_list_s: f64,
    collector_list_read_s: f64,
    reference_list_s: f64,
    reference_list_only_s: f64,
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < timeout,
            "{what}: not done after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_round(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    kubeconfig: &Path,
    brokers: &str,
    args: &Args,
    round: usize,
) -> Round {
    let dir = tempfile::tempdir().expect("temp dir");
    let topic = format!("ipaudit.real-kube-bench.{}.{round}", std::process::id());
    runtime.block_on(create_events_topic(brokers, &topic));
    let stop = Arc::new(AtomicBool::new(false));
    let (delivered, reader) = count_topic(brokers, &topic, stop.clone());

    // The collector's initial list, alone on the server.
    let spawned = unix_ms();
    let setup = CollectorSetup {
        kubeconfig,
        brokers,
        topic: &topic,
        state_dir: dir.path(),
        cluster_id: "bench",
    };
    let collector_flags = &["--kinds", "pods,ips.kubeovn.io", "--create-topic"];
    let mut collector = CollectorProcess::start_unready(&setup, collector_flags);
    wait_until(
        "the collector's list in Kafka",
        Duration::from_secs(600),
        || {
            assert!(collector.is_running(), "log:\n{}", collector.log_text());
            delivered.lock().unwrap().sync_end_ms.len() == 2
        },
    );
    collector.wait_ready(Duration::from_secs(60));
    let (collector_list_s, collector_list_read_s) = {
        let d = delivered.lock().unwrap();
        let listed: u64 = d.listed.values().sum();
        assert!(
            listed >= (args.ips + args.pods) as u64,
            "the collector listed {listed} objects: {d:?}"
        );
        let end = d.sync_end_ms.values().copied().max().unwrap_or(0);
        (
            (end - spawned) as f64 / 1000.0,
            (d.list_observed_ms - spawned) as f64 / 1000.0,
        )
    };

    // The reference's initial list, alone on the server too.
    let reference_spawned = unix_ms();
    let mut reference = Reference::start(kubeconfig, args.updates, false);
    let listed = reference.expect("listed", Duration::from_secs(600));
    assert!(
        (listed[2] + listed[3]) as usize >= args.ips + args.pods,
        "the reference listed {listed:?}"
    );
    let reference_list_s = (listed[1] - reference_spawned) as f64 / 1000.0;
    let reference_list_only_s = (listed[1] - listed[0]) as f64 / 1000.0;
    reference.expect("watching", Duration::from_secs(60));
    // Let both settle (the collector's outbox drained, its first bookmarks in).
    std::thread::sleep(Duration::from_secs(2));

    // The burst, both watching.
    let collector_cpu = cpu_seconds(collector.pid());
    let reference_cpu = cpu_seconds(reference.child.id());
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        let port = collector.metrics_port;
        std::thread::spawn(move || {
            let mut peak: f64 = 0.0;
            while sampling.load(Ordering::Relaxed) {
                peak = peak.max(gauge(port, "ipaudit_collector_outbox_rows"));
                std::thread::sleep(Duration::from_millis(200));
            }
            peak
        })
    };
    let (start, written) = runtime.block_on(burst(client, args, &round.to_string()));
    let done = reference.expect("done", Duration::from_secs(600));
    wait_until("the burst in Kafka", Duration::from_secs(600), || {
        delivered.lock().unwrap().modified >= args.updates as u64
    });
    sampling.store(false, Ordering::Relaxed);
    let peak_outbox_rows = sampler.join().expect("sampler");
    let collector_cpu_s = cpu_seconds(collector.pid()) - collector_cpu;
    let reference_cpu_s = cpu_seconds(reference.child.id()) - reference_cpu;
    reference.stop();
    assert!(
        collector.terminate(Duration::from_secs(30)),
        "the collector stopped cleanly"
    );
    assert_eq!(
        done[0], args.updates as i64,
        "the reference saw each update"
    );
    let n = args.updates as f64;
    let rate = |from: i64, to: i64| n / ((to - from).max(1) as f64 / 1000.0);
    let live = {
        let d = delivered.lock().unwrap();
        assert_eq!(
            d.modified, args.updates as u64,
            "one MODIFIED event in Kafka per update"
        );
        Live {
            writer_rate: rate(start, written),
            collector_rate: rate(start, d.last_modified_ms),
            collector_observed_rate: rate(start, d.last_modified_observed_ms),
            reference_rate: rate(start, done[2]),
            collector_tail_ms: d.last_modified_ms - written,
            reference_tail_ms: done[2] - written,
            peak_outbox_rows,
            collector_cpu_s,
            reference_cpu_s,
        }
    };

    // The drain: a second burst while neither watches, then each, alone on the server,
    // reads it from where it stopped (the collector from the version its outbox kept, the
    // reference from its lists'): how fast each takes in events the server already has,
    // unbounded by the writer.
    let mut reference = Reference::start(kubeconfig, args.updates, true);
    reference.expect("listed", Duration::from_secs(600));
    let (drain_start, drain_written) =
        runtime.block_on(burst(client, args, &format!("drain{round}")));
    let resumed = unix_ms();
    let mut collector = CollectorProcess::start_unready(&setup, collector_flags);
    wait_until("the drain in Kafka", Duration::from_secs(600), || {
        assert!(collector.is_running(), "log:\n{}", collector.log_text());
        let d = delivered.lock().unwrap();
        assert_eq!(
            d.sync_ends, 2,
            "the collector resumed its watches without a relist"
        );
        d.modified >= 2 * args.updates as u64
    });
    let drain_collector_cpu_s = cpu_seconds(collector.pid());
    assert!(
        collector.terminate(Duration::from_secs(30)),
        "the collector stopped cleanly"
    );
    reference.go();
    let go = reference.expect("go", Duration::from_secs(60))[0];
    let reference_cpu = cpu_seconds(reference.child.id());
    reference.expect("watching", Duration::from_secs(60));
    let drained = reference.expect("done", Duration::from_secs(600));
    let drain_reference_cpu_s = cpu_seconds(reference.child.id()) - reference_cpu;
    reference.stop();
    stop.store(true, Ordering::Relaxed);
    reader.join().expect("reader");
    let d = delivered.lock().unwrap();
    assert!(d.all_log_append_time, "the topic stamps LogAppendTime");
    assert_eq!(d.modified, 2 * args.updates as u64, "one event per update");
    assert_eq!(
        drained[0], args.updates as i64,
        "the reference saw each update"
    );
    let second = &d.modified_ms[args.updates..];
    let first_in = second.iter().map(|t| t.0).min().unwrap_or(0);
    let last_in = second.iter().map(|t| t.0).max().unwrap_or(0);
    let first_read = second.iter().map(|t| t.1).min().unwrap_or(0);
    let last_read = second.iter().map(|t| t.1).max().unwrap_or(0);
    Round {
        live,
        drain: Drain {
            writer_rate: rate(drain_start, drain_written),
            collector_rate: rate(first_in, last_in),
            collector_read_rate: rate(first_read, last_read),
            collector_from_start_rate: rate(resumed, last_in),
            reference_rate: rate(drained[1], drained[2]),
            reference_from_go_rate: rate(go, drained[2]),
            collector_cpu_s: drain_collector_cpu_s,
            reference_cpu_s: drain_reference_cpu_s,
        },
        collector_list_s,
        collector_list_read_s,
        reference_list_s,
        reference_list_only_s,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn main() {
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() == Some("reference") {
        let kubeconfig = PathBuf::from(argv.next().expect("reference KUBECONFIG EXPECTED"));
        let expected = argv
            .next()
            .and_then(|n| n.parse().ok())
            .expect("reference KUBECONFIG EXPECTED");
        reference(kubeconfig, expected, argv.next().as_deref() == Some("wait"));
        return;
    }
    let args = args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let kube = KubeServer::shared_or_start();
    let (brokers, _broker) = shared_or_start();
    // The writer's client retries a 429 as kube does by default.
    let client = runtime.block_on(async {
        writer_client(&KubeSource::Kubeconfig(kube.kubeconfig.clone()))
            .await
            .expect("client")
    });
    let loaded = runtime.block_on(load(&client, &args));
    let objects = args.ips + args.pods;
    println!(
        "load: {} IPs and {} pods created in {:.1?} ({:.0} creates/s, {} in flight)",
        args.ips,
        args.pods,
        loaded,
        objects as f64 / loaded.as_secs_f64(),
        args.writers
    );
    let mut rounds = Vec::new();
    for round in 1..=args.rounds {
        let r = run_round(&runtime, &client, &kube.kubeconfig, &brokers, &args, round);
        let (l, d) = (&r.live, &r.drain);
        println!(
            "round {round}, live: writer {:.0} writes/s; collector {:.0} events/s into Kafka \
             ({:.0} received), reference {:.0} events/s, ratio {:.3}; after the last write the \
             collector's last event was in Kafka {} ms later, the reference's received {} ms \
             later; peak outbox {} rows; CPU: collector {:.1} s, reference {:.1} s",
            l.writer_rate,
            l.collector_rate,
            l.collector_observed_rate,
            l.reference_rate,
            l.collector_rate / l.reference_rate,
            l.collector_tail_ms,
            l.reference_tail_ms,
            l.peak_outbox_rows,
            l.collector_cpu_s,
            l.reference_cpu_s,
        );
        println!(
            "round {round}, drain: writer {:.0} writes/s unwatched; collector {:.0} events/s \
             into Kafka ({:.0} received; {:.0} from its start), reference {:.0} events/s \
             ({:.0} from its watch request), ratio {:.3}; CPU: collector {:.1} s (start \
             included), reference {:.1} s",
            d.writer_rate,
            d.collector_rate,
            d.collector_read_rate,
            d.collector_from_start_rate,
            d.reference_rate,
            d.reference_from_go_rate,
            d.collector_rate / d.reference_rate,
            d.collector_cpu_s,
            d.reference_cpu_s,
        );
        println!(
            "round {round}, list: collector {:.2} s to Kafka ({:.2} s read), reference {:.2} \
             s ({:.2} s listing)",
            r.collector_list_s,
            r.collector_list_read_s,
            r.reference_list_s,
            r.reference_list_only_s,
        );
        rounds.push(r);
    }
    let m = |f: &dyn Fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    println!();
    println!(
        "Live burst (both watching; events/s from the burst's start to the last event)\n\n\
         | round | writer (writes/s) | collector (into Kafka) | reference | ratio \
         | collector tail (ms) | reference tail (ms) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (i, r) in rounds.iter().enumerate() {
        let l = &r.live;
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.3} | {} | {} |",
            i + 1,
            l.writer_rate,
            l.collector_rate,
            l.reference_rate,
            l.collector_rate / l.reference_rate,
            l.collector_tail_ms,
            l.reference_tail_ms,
        );
    }
    println!(
        "| median | {:.0} | {:.0} | {:.0} | {:.3} | {:.0} | {:.0} |",
        m(&|r| r.live.writer_rate),
        m(&|r| r.live.collector_rate),
        m(&|r| r.live.reference_rate),
        m(&|r| r.live.collector_rate / r.live.reference_rate),
        m(&|r| r.live.collector_tail_ms as f64),
        m(&|r| r.live.reference_tail_ms as f64),
    );
    println!(
        "\nDrain (the burst made unwatched, then read by each alone; events/s from the first \
         to the last event)\n\n\
         | round | writer (writes/s) | collector (into Kafka) | reference | ratio \
         | collector CPU (s) | reference CPU (s) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (i, r) in rounds.iter().enumerate() {
        let d = &r.drain;
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.3} | {:.1} | {:.1} |",
            i + 1,
            d.writer_rate,
            d.collector_rate,
            d.reference_rate,
            d.collector_rate / d.reference_rate,
            d.collector_cpu_s,
            d.reference_cpu_s,
        );
    }
    println!(
        "| median | {:.0} | {:.0} | {:.0} | {:.3} | {:.1} | {:.1} |",
        m(&|r| r.drain.writer_rate),
        m(&|r| r.drain.collector_rate),
        m(&|r| r.drain.reference_rate),
        m(&|r| r.drain.collector_rate / r.drain.reference_rate),
        m(&|r| r.drain.collector_cpu_s),
        m(&|r| r.drain.reference_cpu_s),
    );
    println!(
        "\nInitial list of {objects} objects (s, from process start)\n\n\
         | round | collector (SYNC_ENDs in Kafka) | reference (both lists read) |"
    );
    println!("|---|---|---|");
    for (i, r) in rounds.iter().enumerate() {
        println!(
            "| {} | {:.2} | {:.2} |",
            i + 1,
            r.collector_list_s,
            r.reference_list_s
        );
    }
    println!(
        "| median | {:.2} | {:.2} |",
        m(&|r| r.collector_list_s),
        m(&|r| r.reference_list_s),
    );
}
