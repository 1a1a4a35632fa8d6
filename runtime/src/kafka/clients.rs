//! Every Kafka client of both programs is built here from the [`Connection`], with one
//! policy per kind of client; a program passes only what is its own (group id, static
//! membership instance id, client id, and settings no other client has).
//!
//! The policy:
//! - **Producers** are idempotent with `acks=all` (a write is acknowledged once every
//!   in-sync replica has it, and a retry never duplicates it), compress with zstd, batch
//!   for 5 ms, and never create a topic by asking for its metadata (creating topics is the
//!   operator's choice). `message.timeout.ms` is the one setting that follows the caller:
//!   [`Delivery::Outbox`] 300 s, [`Delivery::Awaited`] 30 s (see there).
//! - **Group consumers** commit by hand (`enable.auto.commit` and
//!   `enable.auto.offset.store` off: an offset is stored only after what it covers is
//!   durable downstream), with a 10 s session and 1 s heartbeats (a member that died
//!   without leaving is replaced after 10 s rather than Kafka's default 45 s), and static
//!   membership when an instance id is given (a restarted member gets its partitions back
//!   at once, without a rebalance of the others).
//! - **Readers** (assign-only consumers that scan a topic and commit nothing) take the
//!   connection alone, and **admin** clients too.
//! - **Both kinds of consumer** fetch again 100 ms after their queue was full
//!   (`fetch.queue.backoff.ms`, [`FETCH_QUEUE_BACKOFF_MS`]).
//!
//! In every case the connection's security settings and the operator's `--kafka-option`s
//! are applied last, so that an operator can override any of the above.

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, FromClientConfig, FromClientConfigAndContext};
use rdkafka::error::KafkaResult;

use crate::kafka::Connection;

/// How long a consumer postpones the next fetch of a partition whose queue is full
/// (`queued.min.messages` or `queued.max.messages.kbytes` reached). librdkafka's default,
/// 1 s, left a catch-up idle a fifth of its time: the analyzer drains the 100,000 queued
/// messages in about 200 ms, then waited for the rest of the second (BENCHMARKS.md, live
/// catch-up). Shorter than the time a full queue lasts, so that the next fetch is back
/// before the queue is empty; not 0, which makes librdkafka poll without pause.
pub const FETCH_QUEUE_BACKOFF_MS: &str = "100";

/// How a producer's caller waits for delivery, which sets how long librdkafka keeps
/// trying one message (`message.timeout.ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The message is kept in a durable outbox until acknowledged (the collector): 300 s,
    /// so that librdkafka rides out a broker outage itself (a shorter timeout with
    /// idempotence ends in fatal errors and producer rebuilds); a message that still times
    /// out is sent again from the outbox.
    Outbox,
    /// The caller awaits each acknowledgement and retries itself (alert sinks, commands,
    /// dead-letter replay): 30 s, so that a delivery that cannot succeed returns to the
    /// caller's retry loop, which also watches for shutdown.
    Awaited,
}

impl Delivery {
    /// `message.timeout.ms` for this kind of delivery.
    pub fn message_timeout_ms(self) -> u32 {
        match self {
            Delivery::Outbox => 300_000,
            Delivery::Awaited => 30_000,
        }
    }
}

/// Where a group consumer starts in a partition for which the group has no offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoOffset {
    /// From the start of the partition.
    Earliest,
    /// Fail rather than jump (the caller keeps offsets of its own and must not skip).
    Error,
}

/// A client's settings on their way to librdkafka: the policy of its kind, then the
/// program's own settings ([`ClientSettings::set`]), then, on creation, the connection.
#[must_use]
pub struct ClientSettings<'a> {
    connection: &'a Connection,
    config: ClientConfig,
}

impl<'a> ClientSettings<'a> {
    fn new(connection: &'a Connection, client_id: &str) -> Self {
        let mut config = ClientConfig::new();
        config.set("client.id", client_id);
        ClientSettings { connection, config }
    }

    /// A setting of the program's own (one no other client shares).
    pub fn set(mut self, key: &str, value: impl Into<String>) -> Self {
        self.config.set(key, value);
        self
    }

    /// The final configuration: the policy, the program's settings, then the
    /// connection's security settings and the operator's options.
    pub fn config(mut self) -> ClientConfig {
        self.connection.apply(&mut self.config);
        self.config
    }

    /// Creates the client (librdkafka checks the configuration here).
    pub fn create<T: FromClientConfig>(self) -> KafkaResult<T> {
        self.config().create()
    }

    /// Creates the client with a context (rebalance callbacks, statistics).
    pub fn create_with_context<C: ClientContext, T: FromClientConfigAndContext<C>>(
        self,
        context: C,
    ) -> KafkaResult<T> {
        self.config().create_with_context(context)
    }
}

impl Connection {
    /// A producer with the policy above.
    pub fn producer(&self, client_id: &str, delivery: Delivery) -> ClientSettings<'_> {
        ClientSettings::new(self, client_id)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("compression.type", "zstd")
            .set("linger.ms", "5")
            .set(
                "message.timeout.ms",
                delivery.message_timeout_ms().to_string(),
            )
            // A broker with auto.create.topics.enable would otherwise create the topic
            // with its defaults on the first metadata request.
            .set("allow.auto.create.topics", "false")
    }

    /// A member of consumer group `group_id` that commits by hand; `instance_id` (when
    /// given and not empty) makes it a static member.
    pub fn group_consumer(
        &self,
        client_id: &str,
        group_id: &str,
        instance_id: Option<&str>,
        no_offset: NoOffset,
    ) -> ClientSettings<'_> {
        let mut settings = ClientSettings::new(self, client_id)
            .set("group.id", group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set(
                "auto.offset.reset",
                match no_offset {
                    NoOffset::Earliest => "earliest",
                    NoOffset::Error => "error",
                },
            )
            .set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "1000")
            .set("allow.auto.create.topics", "false")
            .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
        if let Some(instance) = instance_id.filter(|i| !i.is_empty()) {
            settings = settings.set("group.instance.id", instance);
        }
        settings
    }

    /// A consumer that is assigned partitions by its caller and commits nothing (scans of
    /// a topic). librdkafka wants a group id even then; `group_id` names the scan.
    pub fn reader(&self, client_id: &str, group_id: &str) -> ClientSettings<'_> {
        ClientSettings::new(self, client_id)
            .set("group.id", group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("allow.auto.create.topics", "false")
            .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
    }

    /// An admin client (topic metadata and creation).
    pub fn admin(&self, client_id: &str) -> ClientSettings<'_> {
        ClientSettings::new(self, client_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::{KafkaArgs, KafkaOption};

    fn connection() -> Connection {
        KafkaArgs {
            options: vec![KafkaOption::new("linger.ms", "50")],
            ..KafkaArgs::plaintext("k:9093")
        }
        .connection()
        .unwrap()
    }

    #[test]
    fn producers_are_idempotent_acks_all_and_their_timeout_follows_the_delivery() {
        let c = connection();
        let outbox = c.producer("ipaudit-collector", Delivery::Outbox).config();
        assert_eq!(outbox.get("enable.idempotence"), Some("true"));
        assert_eq!(outbox.get("acks"), Some("all"));
        assert_eq!(outbox.get("compression.type"), Some("zstd"));
        assert_eq!(outbox.get("message.timeout.ms"), Some("300000"));
        assert_eq!(outbox.get("allow.auto.create.topics"), Some("false"));
        assert_eq!(outbox.get("client.id"), Some("ipaudit-collector"));
        assert_eq!(outbox.get("bootstrap.servers"), Some("k:9093"));
        let awaited = c.producer("ipaudit-analyzer", Delivery::Awaited).config();
        assert_eq!(awaited.get("message.timeout.ms"), Some("30000"));
    }

    #[test]
    fn the_operators_options_override_the_policy() {
        let config = connection()
            .producer("ipaudit-collector", Delivery::Outbox)
            .config();
        assert_eq!(config.get("linger.ms"), Some("50"));
    }

    #[test]
    fn group_consumers_commit_by_hand_and_are_static_only_with_an_instance_id() {
        let c = connection();
        let config = c
            .group_consumer("ipaudit-analyzer", "g", Some("a-0"), NoOffset::Error)
            .set("fetch.wait.max.ms", "100")
            .config();
        assert_eq!(config.get("group.id"), Some("g"));
        assert_eq!(config.get("enable.auto.commit"), Some("false"));
        assert_eq!(config.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(config.get("auto.offset.reset"), Some("error"));
        assert_eq!(config.get("session.timeout.ms"), Some("10000"));
        assert_eq!(config.get("fetch.queue.backoff.ms"), Some("100"));
        assert_eq!(config.get("group.instance.id"), Some("a-0"));
        assert_eq!(config.get("fetch.wait.max.ms"), Some("100"));
        for instance in [None, Some("")] {
            let config = c
                .group_consumer("c", "g", instance, NoOffset::Earliest)
                .config();
            assert_eq!(config.get("group.instance.id"), None);
            assert_eq!(config.get("auto.offset.reset"), Some("earliest"));
        }
    }

    #[test]
    fn readers_commit_nothing_and_fetch_again_soon_after_a_full_queue() {
        let config = connection().reader("ipaudit-scan", "scan").config();
        assert_eq!(config.get("group.id"), Some("scan"));
        assert_eq!(config.get("enable.auto.commit"), Some("false"));
        assert_eq!(config.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(config.get("fetch.queue.backoff.ms"), Some("100"));
    }

    // A StreamConsumer spawns its wake-up task: it needs a runtime.
    #[tokio::test]
    async fn every_kind_of_client_is_accepted_by_librdkafka() {
        use rdkafka::admin::AdminClient;
        use rdkafka::client::DefaultClientContext;
        use rdkafka::consumer::{BaseConsumer, StreamConsumer};
        use rdkafka::producer::FutureProducer;
        let c = Connection::plaintext("127.0.0.1:1");
        let _: FutureProducer = c.producer("p", Delivery::Outbox).create().unwrap();
        let _: StreamConsumer = c
            .group_consumer("c", "g", Some("i"), NoOffset::Error)
            .create()
            .unwrap();
        let _: BaseConsumer = c.reader("r", "scan").create().unwrap();
        let _: AdminClient<DefaultClientContext> = c.admin("a").create().unwrap();
    }
}
