//! The real Kafka-protocol broker of the tests: tansu, started as a process on 127.0.0.1.
//! `scripts/test` starts one for the whole run and exports `IPAUDIT_TEST_BROKERS`; tests
//! that stop and restart a broker start their own.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::TopicPartitionList;

/// A tansu broker process owned by a test.
pub struct Broker {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    port: u16,
    /// The port in its metadata: `port`, or a TLS terminator's in front of it.
    advertised_port: u16,
    /// Extra `tansu broker` arguments (e.g. `--authentication`).
    args: Vec<String>,
    storage: String,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// The tansu binary: `$IPAUDIT_TANSU`, else on `PATH`, else `~/.cargo/bin/tansu`.
pub fn tansu_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("IPAUDIT_TANSU") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("tansu"))
        .find(|p| p.is_file());
    on_path.unwrap_or_else(|| {
        let home = std::env::var_os("HOME").unwrap_or_default();
        Path::new(&home).join(".cargo/bin/tansu")
    })
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The run's shared broker (from `scripts/test`), else a private one for this process.
pub fn shared_broker() -> Option<String> {
    std::env::var("IPAUDIT_TEST_BROKERS")
        .ok()
        .filter(|s| !s.is_empty())
}

impl Broker {
    /// Starts a broker keeping its data in memory.
    pub fn start_in_memory() -> Broker {
        Self::start_with("memory://tansu/".into())
    }

    /// Starts a broker keeping its data in a SQLite file, so that it survives a restart.
    pub fn start_persistent() -> Broker {
        Self::start_with("sqlite://broker.db".into())
    }

    fn start_with(storage: String) -> Broker {
        let mut broker = Self::configured(storage);
        broker.restart();
        broker
    }

    /// A broker not yet started, advertising its own port.
    pub(crate) fn configured(storage: String) -> Broker {
        let port = free_port();
        let dir = tempfile::tempdir().expect("temp dir");
        Broker {
            addr: format!("127.0.0.1:{port}"),
            port,
            advertised_port: port,
            args: Vec::new(),
            storage,
            dir,
            child: None,
        }
    }

    /// Advertises `port` (where a TLS terminator forwards to this broker) and adds `args`
    /// to the broker's command line; takes effect at the next [`Broker::restart`].
    pub(crate) fn advertise(&mut self, port: u16, args: &[&str]) {
        self.advertised_port = port;
        self.args = args.iter().map(|a| (*a).to_owned()).collect();
    }

    /// The port the broker listens on (plaintext).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its scratch directory (storage, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stops the broker process (SIGKILL: an outage, not a clean shutdown).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the broker again on the same port and storage.
    pub fn restart(&mut self) {
        self.stop();
        let binary = tansu_binary();
        assert!(
            binary.is_file(),
            "tansu not found at {}: run scripts/test, which installs it (cargo install --locked tansu --version 0.6.0 --features dynostore,libsql)",
            binary.display()
        );
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let advertised = format!("tcp://127.0.0.1:{}", self.advertised_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("broker.log"))
            .expect("broker log");
        // tansu reads a .env from its working directory: give it an empty one of its own.
        let child = Command::new(&binary)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &advertised,
            ])
            .args(["--storage-engine", &self.storage])
            .args(&self.args)
            .current_dir(self.dir.path())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start tansu");
        self.child = Some(child);
        wait_for_port(self.port, Duration::from_secs(30));
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
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

/// Creates a topic (one partition) for one test.
pub async fn create_topic(brokers: &str, topic: &str) {
    create_topic_via(plain(brokers), topic).await
}

/// A plaintext client configuration for `brokers`.
fn plain(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    config
}

/// Creates a topic (one partition) through a client configured by `config` (TLS, SASL).
pub async fn create_topic_via(config: ClientConfig, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = config.create().expect("admin client");
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(1));
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

/// [`read_topic`] through a client configured by `config` (TLS, SASL).
pub fn read_topic_via(
    mut config: ClientConfig,
    topic: &str,
    timeout: Duration,
    done: impl Fn(&[Vec<u8>]) -> bool,
) -> Vec<Vec<u8>> {
    let consumer: BaseConsumer = config
        .set("group.id", format!("test-reader-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .expect("assignment");
    consumer.assign(&assignment).expect("assign");
    let deadline = Instant::now() + timeout;
    let mut payloads = Vec::new();
    while Instant::now() < deadline && !done(&payloads) {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => payloads.push(message.payload().unwrap_or_default().to_vec()),
            Some(Err(e)) => eprintln!("consumer: {e}"),
            None => {}
        }
    }
    payloads
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
