//! The topics a program writes or reads: whether each exists, and creating a missing one
//! with the settings the chart's topics Job gives it, when the operator asked for that
//! (`--create-topic`). The collector checks its events, schemas and commands topics; the
//! analyzer its alerts and commands topics. A topic found missing makes the program
//! unready, naming it, instead of retrying `UnknownTopic` behind a ready probe.

use std::time::Duration;

use clap::Args;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{Client, ClientContext, DefaultClientContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::RDKafkaErrorCode;

use super::Connection;

/// How missing topics are created (`--create-topic-partitions`, `--create-topic-replication`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicCreation {
    /// Partitions; -1: the broker's default (`num.partitions`).
    pub partitions: i32,
    /// Replication factor; -1: the broker's default (`default.replication.factor`).
    pub replication: i32,
}

/// The flags that create missing topics, the same in both programs.
#[derive(Debug, Clone, Args)]
pub struct TopicCreationArgs {
    /// Create the topics this program needs when they are missing: the collector's events
    /// and schemas topics and, with remediation on or a dry run, the commands topic; the
    /// analyzer's alerts topic and, with --cleanup-commands, the commands topic (a day's
    /// retention, as the chart's topics Job sets it). Without it a missing topic is logged
    /// as an error and /readyz answers 503, naming it; nothing is lost meanwhile.
    #[arg(long, env = "IPAUDIT_CREATE_TOPIC")]
    pub create_topic: bool,
    /// Partitions of a topic created by --create-topic (-1: the broker's num.partitions).
    #[arg(long, env = "IPAUDIT_CREATE_TOPIC_PARTITIONS", default_value_t = 1, value_parser = topic_count)]
    pub create_topic_partitions: i32,
    /// Replication factor of a topic created by --create-topic (-1: the broker's
    /// default.replication.factor).
    #[arg(long, env = "IPAUDIT_CREATE_TOPIC_REPLICATION", default_value_t = -1, value_parser = topic_count)]
    pub create_topic_replication: i32,
}

impl TopicCreationArgs {
    /// How to create missing topics, if the operator asked for it.
    pub fn creation(&self) -> Option<TopicCreation> {
        self.create_topic.then_some(TopicCreation {
            partitions: self.create_topic_partitions,
            replication: self.create_topic_replication,
        })
    }
}

/// A partition count or replication factor: at least 1, or -1 for the broker's default.
fn topic_count(text: &str) -> Result<i32, String> {
    match text.trim().parse::<i32>() {
        Ok(n) if n == -1 || n >= 1 => Ok(n),
        _ => Err(format!(
            "expected a number of at least 1, or -1 for the broker's default; got {text:?}"
        )),
    }
}

/// A topic as it is to be created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// Its name.
    pub name: String,
    /// Partitions; -1: the broker's default.
    pub partitions: i32,
    /// Replication factor; -1: the broker's default.
    pub replication: i32,
    /// Topic settings (`cleanup.policy`, `retention.ms`, …).
    pub settings: Vec<(&'static str, &'static str)>,
}

/// Retention of a commands topic a program creates, as the chart's topics Job sets it
/// (commands expire after the collector's `--remediate-max-age` anyway).
pub const COMMANDS_RETENTION_MS: &str = "86400000";

impl TopicSpec {
    /// A topic with `creation`'s partitions and replication, and no settings of its own.
    pub fn plain(name: &str, creation: TopicCreation) -> TopicSpec {
        TopicSpec {
            name: name.to_owned(),
            partitions: creation.partitions,
            replication: creation.replication,
            settings: Vec::new(),
        }
    }

    /// A compacted topic (the latest record per key is kept for ever): the schemas
    /// topic, the analyzer's checkpoints topic.
    pub fn compacted(name: &str, creation: TopicCreation) -> TopicSpec {
        TopicSpec {
            settings: vec![("cleanup.policy", "compact")],
            ..TopicSpec::plain(name, creation)
        }
    }

    /// The cleanup-commands topic: a day's retention.
    pub fn commands(name: &str, creation: TopicCreation) -> TopicSpec {
        TopicSpec {
            settings: vec![("retention.ms", COMMANDS_RETENTION_MS)],
            ..TopicSpec::plain(name, creation)
        }
    }
}

/// What the cluster's metadata says of a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// It exists, with partitions.
    Exists,
    /// It does not exist.
    Missing,
    /// Kafka's authorizer does not let this principal see it.
    Denied(RDKafkaErrorCode),
}

/// Whether Kafka's authorizer refused: the topic, or the cluster (the idempotent
/// producer's id, which Kafka grants to a principal with WRITE on some topic).
pub fn is_denial(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::TransactionalIdAuthorizationFailed
    )
}

/// Whether an error says the topic does not exist.
pub fn is_missing_topic(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic
    )
}

/// Looks `topic` up in the cluster's metadata. Blocking (up to `timeout`): call it from a
/// blocking task.
pub fn lookup<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    timeout: Duration,
) -> KafkaResult<Lookup> {
    let metadata = client.fetch_metadata(Some(topic), timeout)?;
    let mut found = metadata.topics().iter().filter(|t| t.name() == topic);
    Ok(match found.next() {
        Some(t) => match t.error().map(RDKafkaErrorCode::from) {
            Some(code) if is_denial(code) => Lookup::Denied(code),
            None if !t.partitions().is_empty() => Lookup::Exists,
            _ => Lookup::Missing,
        },
        None => Lookup::Missing,
    })
}

/// Creates `spec` unless it exists; returns whether this call created it.
pub async fn create(
    connection: &Connection,
    client_id: &str,
    spec: &TopicSpec,
) -> KafkaResult<bool> {
    let admin: AdminClient<DefaultClientContext> = connection.admin(client_id).create()?;
    let mut new_topic = NewTopic::new(
        &spec.name,
        spec.partitions,
        TopicReplication::Fixed(spec.replication),
    );
    for (key, value) in &spec.settings {
        new_topic = new_topic.set(key, value);
    }
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin.create_topics([&new_topic], &options).await?;
    let mut created = false;
    for result in results {
        match result {
            Ok(_) => created = true,
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(KafkaError::AdminOp(code)),
        }
    }
    Ok(created)
}
