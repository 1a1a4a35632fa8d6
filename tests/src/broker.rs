//! The real broker of the tests: Apache Kafka (KRaft), run by `scripts/broker` from jars
//! fetched from Maven Central. `scripts/test` starts one node for the whole run and exports
//! its addresses (`IPAUDIT_TEST_BROKERS` and the `IPAUDIT_TEST_*` keys of
//! [`BrokerEnv`]); tests that stop, kill or restart a broker start their own with
//! [`Broker::start`] (or [`Broker::start_cluster`]), which calls the same script on a
//! directory of their own, so that both are set up alike.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::TopicPartitionList;

/// What `scripts/broker start` prints: `KEY=value` lines naming the listeners' addresses,
/// the TLS files and the SCRAM users (see the script's usage text).
#[derive(Debug, Clone, Default)]
pub struct BrokerEnv {
    values: BTreeMap<String, String>,
}

impl BrokerEnv {
    /// Parses the script's output.
    pub fn parse(text: &str) -> BrokerEnv {
        let values = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| k.starts_with("IPAUDIT_TEST_"))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        BrokerEnv { values }
    }

    /// The run's shared broker, from this process's environment (`scripts/test`), when it
    /// names every listener.
    pub fn from_process_env() -> Option<BrokerEnv> {
        let values: BTreeMap<String, String> = std::env::vars()
            .filter(|(k, v)| k.starts_with("IPAUDIT_TEST_") && !v.is_empty())
            .collect();
        let env = BrokerEnv { values };
        env.values
            .contains_key("IPAUDIT_TEST_BROKERS_SASL_SSL")
            .then_some(env)
    }

    /// One value; panics naming the key when the broker did not print it.
    pub fn get(&self, key: &str) -> &str {
        self.values
            .get(key)
            .unwrap_or_else(|| panic!("scripts/broker printed no {key}: {:?}", self.values))
    }

    /// The plaintext bootstrap addresses.
    pub fn plaintext(&self) -> &str {
        self.get("IPAUDIT_TEST_BROKERS")
    }

    /// The password of a SCRAM user the broker was formatted with (`admin`, a super
    /// user; `collector`, `analyzer`, `intruder`, without ACLs).
    pub fn scram_password(&self, user: &str) -> String {
        self.get("IPAUDIT_TEST_KAFKA_SCRAM_USERS")
            .split(',')
            .filter_map(|pair| pair.split_once(':'))
            .find(|(name, _)| *name == user)
            .map(|(_, password)| password.to_owned())
            .unwrap_or_else(|| panic!("the broker has no SCRAM user {user}"))
    }
}

/// A Kafka broker (one node, or a cluster of nodes) owned by a test, in a temporary
/// directory of its own: configuration, data (which survives [`Broker::stop`] and
/// [`Broker::restart`]), TLS files, logs and pids. Dropped, it is killed.
pub struct Broker {
    /// The plaintext bootstrap addresses (`127.0.0.1:PORT`, comma-separated).
    pub addr: String,
    /// Everything the script printed.
    pub env: BrokerEnv,
    nodes: usize,
    dir: tempfile::TempDir,
}

/// `scripts/broker` of the checkout the tests run from.
pub fn broker_script() -> PathBuf {
    crate::manifest_dir().join("../scripts/broker")
}

/// Runs `scripts/broker ARGS` to its end; its stdout, or a panic with its stderr.
fn script(args: &[&str]) -> String {
    let output = Command::new(broker_script())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", broker_script().display()));
    assert!(
        output.status.success(),
        "scripts/broker {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `scripts/broker install`, once per test process (fast when the jars are cached).
fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        script(&["install"]);
    });
}

/// A free TCP port on 127.0.0.1, never one this process handed out before. The port is
/// free when picked and bound by the program given it a moment later; the OS may offer a
/// port it just offered again, and two programs given the same one lose one (a collector of
/// the group-scale test died so in CI on 28 November: "Address already in use", while the
/// other answered its readiness probe).
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if given.insert(port) {
            return port;
        }
    }
}

/// The run's shared broker (from `scripts/test`): its plaintext addresses.
pub fn shared_broker() -> Option<String> {
    std::env::var("IPAUDIT_TEST_BROKERS")
        .ok()
        .filter(|s| !s.is_empty())
}

/// The run's shared broker, or one started here: its plaintext addresses, and the broker
/// when it is this caller's own (stopped when dropped: keep it alive while it serves).
pub fn shared_or_start() -> (String, Option<Broker>) {
    match shared_broker() {
        Some(addr) => (addr, None),
        None => {
            let broker = Broker::start();
            (broker.addr.clone(), Some(broker))
        }
    }
}

impl Broker {
    /// Starts one node (broker and controller).
    pub fn start() -> Broker {
        Self::start_nodes(1)
    }

    /// Starts `nodes` nodes, each a broker and a voter of one controller quorum; internal
    /// topics get replication 3 and `min.insync.replicas` 2 from three nodes on.
    pub fn start_cluster(nodes: usize) -> Broker {
        Self::start_nodes(nodes)
    }

    fn start_nodes(nodes: usize) -> Broker {
        install();
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("kafka");
        let path = path.to_str().expect("a UTF-8 temp dir");
        let out = if nodes == 1 {
            script(&["start", path])
        } else {
            script(&["start-cluster", path, &nodes.to_string()])
        };
        let env = BrokerEnv::parse(&out);
        Broker {
            addr: env.plaintext().to_owned(),
            env,
            nodes,
            dir,
        }
    }

    /// Its directory (`node-N/` with each node's data, `broker.log` and pid; `tls/`).
    pub fn dir(&self) -> PathBuf {
        self.dir.path().join("kafka")
    }

    /// How many nodes it has.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Node `node`'s log (1-based).
    pub fn log(&self, node: usize) -> String {
        std::fs::read_to_string(self.dir().join(format!("node-{node}/broker.log")))
            .unwrap_or_default()
    }

    /// Kills every node (SIGKILL: an outage, not a clean shutdown). The data stays.
    pub fn stop(&mut self) {
        script(&["kill", &self.dir_str()]);
    }

    /// Kills node `node` (1-based) only.
    pub fn kill_node(&mut self, node: usize) {
        script(&["kill", &self.dir_str(), &node.to_string()]);
    }

    /// Freezes every node (SIGSTOP): connections stay open and nothing answers.
    pub fn pause(&mut self) {
        script(&["pause", &self.dir_str()]);
    }

    /// Lets frozen nodes go on (SIGCONT).
    pub fn resume(&mut self) {
        script(&["resume", &self.dir_str()]);
    }

    /// Starts the nodes that are not running again, on the same ports and data, and waits
    /// until every node answers a Metadata request.
    pub fn restart(&mut self) {
        script(&["start", &self.dir_str()]);
    }

    fn dir_str(&self) -> String {
        self.dir().display().to_string()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = Command::new(broker_script())
            .args(["kill", &self.dir_str()])
            .output();
    }
}

/// Waits until something accepts connections on the port.
pub fn wait_for_port(port: u16, timeout: Duration) {
    assert!(
        port_opens(port, timeout),
        "nothing listens on port {port} after {timeout:?}"
    );
}

/// Whether something accepts connections on the port within `timeout`.
pub fn port_opens(port: u16, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// The schemas topic that goes with a test's events topic: each test has its own, as it
/// has its own events topic.
pub fn schemas_topic_of(events_topic: &str) -> String {
    format!("{events_topic}.schemas")
}

/// Creates the compacted schemas topic of `events_topic` (see [`schemas_topic_of`]), held
/// by `replicas` nodes, through a client configured by `config`.
pub async fn create_schemas_topic_via(config: ClientConfig, events_topic: &str, replicas: i32) {
    let topic = schemas_topic_of(events_topic);
    create_topic_with(
        config,
        &topic,
        1,
        replicas,
        &[("cleanup.policy", "compact")],
    )
    .await
}

/// The analyzer's default checkpoints topic for `events_topic` (`--checkpoints-topic`).
pub fn checkpoints_topic_of(events_topic: &str) -> String {
    format!("{events_topic}.checkpoints")
}

/// Creates the checkpoints topic of `events_topic` (compacted, `partitions` like the
/// events topic's) through a client configured by `config`.
pub async fn create_checkpoints_topic_via(
    config: ClientConfig,
    events_topic: &str,
    partitions: i32,
    replicas: i32,
) {
    let topic = checkpoints_topic_of(events_topic);
    create_topic_with(
        config,
        &topic,
        partitions,
        replicas,
        &[("cleanup.policy", "compact")],
    )
    .await
}

/// Creates the checkpoints topic of `events_topic` on `brokers` (plaintext).
pub async fn create_checkpoints_topic(
    brokers: &str,
    events_topic: &str,
    partitions: i32,
    replicas: i32,
) {
    create_checkpoints_topic_via(plain(brokers), events_topic, partitions, replicas).await
}

/// Creates the schemas topic of `events_topic` on `brokers` (plaintext).
pub async fn create_schemas_topic(brokers: &str, events_topic: &str, replicas: i32) {
    create_schemas_topic_via(plain(brokers), events_topic, replicas).await
}

/// Creates a topic (one partition) for one test.
pub async fn create_topic(brokers: &str, topic: &str) {
    create_topic_via(plain(brokers), topic).await
}

/// Creates a topic with `partitions` partitions for one test.
pub async fn create_partitioned_topic(brokers: &str, topic: &str, partitions: i32) {
    create_topic_in(plain(brokers), topic, partitions).await
}

/// A plaintext client configuration for `brokers`.
fn plain(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    config
}

/// Creates a topic (one partition) through a client configured by `config` (TLS, SASL).
pub async fn create_topic_via(config: ClientConfig, topic: &str) {
    create_topic_in(config, topic, 1).await
}

async fn create_topic_in(config: ClientConfig, topic: &str, partitions: i32) {
    create_topic_replicated(config, topic, partitions, 1).await
}

/// Creates a topic of one partition held by `replicas` nodes, `min.insync.replicas` one
/// less (a cluster that loses one node keeps taking `acks=all` writes).
pub async fn create_replicated_topic(brokers: &str, topic: &str, replicas: i32) {
    create_topic_replicated(plain(brokers), topic, 1, replicas).await
}

async fn create_topic_replicated(
    config: ClientConfig,
    topic: &str,
    partitions: i32,
    replicas: i32,
) {
    create_topic_with(config, topic, partitions, replicas, &[]).await
}

/// Creates a topic unless it exists, `min.insync.replicas` one less than `replicas`, with
/// the topic settings `settings` too.
async fn create_topic_with(
    config: ClientConfig,
    topic: &str,
    partitions: i32,
    replicas: i32,
    settings: &[(&str, &str)],
) {
    let admin: AdminClient<DefaultClientContext> = config.create().expect("admin client");
    let min_insync = (replicas - 1).max(1).to_string();
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replicas))
        .set("min.insync.replicas", &min_insync);
    for (key, value) in settings {
        new = new.set(key, value);
    }
    let results = admin
        .create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create topic");
    for result in results {
        if let Err((name, code)) = result {
            assert_eq!(
                code,
                rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists,
                "create {name}"
            );
        }
    }
}

/// Reads partition 0 of `topic` from the beginning until `done` holds for what was read,
/// or `timeout` passes. Returns the message payloads.
pub fn read_topic(
    brokers: &str,
    topic: &str,
    timeout: Duration,
    done: impl Fn(&[Vec<u8>]) -> bool,
) -> Vec<Vec<u8>> {
    read_topic_via(plain(brokers), topic, timeout, done)
}

/// A consumer of `config` in group `group` that commits nothing, assigned partition 0 of
/// `topic` from its start.
pub fn reader_from_start(mut config: ClientConfig, group: &str, topic: &str) -> BaseConsumer {
    let consumer: BaseConsumer = config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .expect("assignment");
    consumer.assign(&assignment).expect("assign");
    consumer
}

/// Hands `record` to `producer`, waiting while its queue is full; the delivery to await.
pub fn send_when_there_is_room<K, P>(
    producer: &rdkafka::producer::FutureProducer,
    mut record: rdkafka::producer::FutureRecord<'_, K, P>,
) -> rdkafka::producer::DeliveryFuture
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match producer.send_result(record) {
            Ok(delivery) => return delivery,
            Err((_, back)) => {
                record = back;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// [`read_topic`] through a client configured by `config` (TLS, SASL).
pub fn read_topic_via(
    config: ClientConfig,
    topic: &str,
    timeout: Duration,
    done: impl Fn(&[Vec<u8>]) -> bool,
) -> Vec<Vec<u8>> {
    let consumer = reader_from_start(
        config,
        &format!("test-reader-{}", std::process::id()),
        topic,
    );
    let deadline = Instant::now() + timeout;
    let mut payloads = Vec::new();
    // `done` reads everything read so far: it is asked when the reader has caught up
    // with the topic (or every 1,000 messages of a topic that keeps growing), not after
    // each message, which made reading thousands of events quadratic.
    let mut asked_at = None;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                payloads.push(message.payload().unwrap_or_default().to_vec());
                if payloads.len() - asked_at.unwrap_or(0) < 1_000 {
                    continue;
                }
            }
            Some(Err(e)) => eprintln!("consumer: {e}"),
            None => {}
        }
        if asked_at != Some(payloads.len()) {
            asked_at = Some(payloads.len());
            if done(&payloads) {
                break;
            }
        }
    }
    payloads
}

/// The partition each message key of `keys` was written to in `topic` (of `partitions`
/// partitions), read from the start of every partition until each key was seen or
/// `timeout` passed (a key never seen is missing from the answer).
pub fn partitions_of_keys(
    brokers: &str,
    topic: &str,
    partitions: i32,
    keys: &[String],
    timeout: Duration,
) -> BTreeMap<String, i32> {
    let consumer: BaseConsumer = plain(brokers)
        .set("group.id", format!("test-keys-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition, rdkafka::Offset::Beginning)
            .expect("assignment");
    }
    consumer.assign(&assignment).expect("assign");
    let deadline = Instant::now() + timeout;
    let mut found = BTreeMap::new();
    while found.len() < keys.len() && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
            if keys.contains(&key) {
                found.insert(key, message.partition());
            }
        }
    }
    found
}

/// The value of the setting `key` of `topic` (its own, or the broker's default), or `None`
/// when the topic does not exist.
pub async fn topic_setting(brokers: &str, topic: &str, key: &str) -> Option<String> {
    let admin: AdminClient<DefaultClientContext> = plain(brokers).create().expect("admin");
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .describe_configs(&[rdkafka::admin::ResourceSpecifier::Topic(topic)], &options)
        .await
        .expect("describe configs");
    let resource = results.into_iter().next()?.ok()?;
    resource.get(key).and_then(|entry| entry.value.clone())
}

/// The low and high watermarks of partition `partition` of `topic`: its first offset and
/// the offset after its last message.
pub fn watermarks(brokers: &str, topic: &str, partition: i32) -> (i64, i64) {
    let consumer: BaseConsumer = plain(brokers)
        .set(
            "group.id",
            format!("test-watermarks-{}", std::process::id()),
        )
        .create()
        .expect("consumer");
    consumer
        .fetch_watermarks(topic, partition, Duration::from_secs(10))
        .expect("watermarks")
}

/// Deletes the records of partition `partition` of `topic` before offset `before` (what
/// retention does to old segments, through the admin API); returns the new low watermark.
pub async fn delete_records(brokers: &str, topic: &str, partition: i32, before: i64) -> i64 {
    let admin: AdminClient<DefaultClientContext> = plain(brokers).create().expect("admin");
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(topic, partition, rdkafka::Offset::Offset(before))
        .expect("offsets");
    let result = admin
        .delete_records(&offsets, &AdminOptions::new())
        .await
        .expect("delete records");
    let element = result
        .find_partition(topic, partition)
        .expect("the partition in the result");
    element.error().expect("records deleted");
    match element.offset() {
        rdkafka::Offset::Offset(low) => low,
        other => panic!("low watermark after deleting: {other:?}"),
    }
}

/// Produces one message and waits for the broker's acknowledgement.
pub async fn produce(brokers: &str, topic: &str, key: &[u8], payload: &[u8]) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("producer");
    producer
        .send(
            FutureRecord::to(topic).key(key).payload(payload),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)
        .expect("message acknowledged");
}

/// The node (its `node.id`, 1-based as `scripts/broker` numbers them) that leads
/// `partition` of `topic`.
pub fn partition_leader(brokers: &str, topic: &str, partition: i32) -> i32 {
    let consumer: BaseConsumer = plain(brokers).create().expect("metadata client");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .and_then(|t| t.partitions().iter().find(|p| p.id() == partition))
        .map(|p| p.leader())
        .filter(|leader| *leader >= 0)
        .unwrap_or_else(|| panic!("no leader for {topic}/{partition}"))
}
