//! Drains the outbox into Kafka: an idempotent, acks=all, zstd producer, key = cluster id,
//! rows sent in order and deleted only after Kafka acknowledged them. After a failure the
//! unacknowledged rows are sent again (a duplicate carries the same uid, resourceVersion
//! and type, which the analyzer drops); a fatal producer error recreates the producer.
//!
//! A row that Kafka or librdkafka refuses for good (too large, invalid: see
//! [`permanent_reason`]) moves to the outbox's quarantine table, counted and logged with
//! its object, so that the rows after it flow on. The events topic is created only when
//! asked (`--create-topic`); a missing topic is otherwise logged and makes the collector
//! unready, and the rows wait for it. A principal that Kafka does not allow to write the
//! topic (its authorizer refuses the topic, or the idempotent producer's id) stops the
//! producer with [`ProduceError::Denied`], naming the topic: no ACL appears by waiting.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipaudit_runtime::backoff::Backoff;
use ipaudit_runtime::kafka::topics::{self, is_denial, is_missing_topic, Lookup};
use ipaudit_runtime::kafka::{Delivery, TopicSpec};
use ipaudit_runtime::telemetry::InternalEvent as _;
use ipaudit_schemas::{decode, WatchEvent};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use tokio::sync::{watch, Notify};
use tracing::{debug_span, error, info, warn, Instrument as _};

use crate::health::Health;
use crate::metrics::Metrics;
use crate::ship::outbox::{Outbox, OutboxError, Quarantine, Row};
use crate::ship::publish_schemas::SchemaPublisher;
use crate::telemetry::{Failed, Failure};
use crate::telemetry::{KafkaBatchSent, RowQuarantined};

/// Where and how events go to Kafka.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// The brokers and how to reach them (TLS, SASL, the operator's librdkafka settings).
    pub connection: ipaudit_runtime::kafka::Connection,
    /// The events topic.
    pub topic: String,
    /// The compacted topic each writer schema goes to before its first event (`None`:
    /// none, `--schemas-topic ""`).
    pub schemas_topic: Option<String>,
    /// Message key: one cluster's history stays in one partition, in order.
    pub cluster_id: String,
    /// Create the topic when it is missing (`--create-topic`); `None`: never.
    pub create_topic: Option<TopicCreation>,
    /// The cleanup-commands topic this collector reads, when remediation is not off: it is
    /// checked (and created) with the others, so that a missing one makes the collector
    /// unready, naming it, instead of leaving the remediator subscribed to nothing.
    pub commands_topic: Option<String>,
}

pub use ipaudit_runtime::kafka::TopicCreation;

/// Why the producer stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    /// librdkafka refused the configuration; not retryable: fix the options.
    #[error("invalid Kafka producer configuration")]
    Config(#[source] KafkaError),
    /// The outbox failed; not retryable here: the disk or the file is broken.
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    /// The topic could not be created; retryable when the broker was unreachable.
    #[error("cannot create topic {topic}")]
    CreateTopic {
        /// The topic.
        topic: String,
        /// What Kafka said.
        #[source]
        source: KafkaError,
    },
    /// The topic's metadata could not be read; retryable (the broker may be down).
    #[error("cannot read the metadata of topic {topic}")]
    Metadata {
        /// The topic.
        topic: String,
        /// What Kafka said.
        #[source]
        source: KafkaError,
    },
    /// Kafka's authorizer refuses this collector's principal what it needs (write on the
    /// events topic); not retryable: grant it (deploy/kafka-acls.sh) or run as another
    /// principal.
    #[error(
        "Kafka denies this collector's principal {what} ({code}): grant it with kafka-acls (deploy/kafka-acls.sh), or run as a principal that has it"
    )]
    Denied {
        /// What is denied, e.g. "write on topic ipaudit.events".
        what: String,
        /// Kafka's error.
        code: RDKafkaErrorCode,
    },
    /// A blocking step of the producer panicked (a bug).
    #[error("the producer's outbox step failed: {0}")]
    Task(String),
}

/// The producer, or why librdkafka refuses its configuration: the runtime's producer
/// policy with a long message timeout, since every row waits in the outbox until Kafka
/// acknowledged it.
pub fn producer(config: &KafkaConfig) -> Result<FutureProducer, ProduceError> {
    config
        .connection
        .producer(CLIENT_ID, Delivery::Outbox)
        .create()
        .map_err(ProduceError::Config)
}

/// The collector's Kafka client id (broker logs and quotas name it).
const CLIENT_ID: &str = "ipaudit-collector";

/// What a topic the collector creates is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicRole {
    /// The events topic: `--create-topic-partitions` partitions.
    Events,
    /// The schemas topic: one partition, compacted (one record per fingerprint is kept).
    Schemas,
    /// The cleanup-commands topic: `--create-topic-partitions` partitions, a day's
    /// retention (commands expire after `--remediate-max-age`), as the chart creates it.
    Commands,
}

/// How often topics found missing are looked up again while rows are delivered.
const TOPIC_RECHECK: Duration = Duration::from_secs(10);

/// Creates `topic` unless it exists.
pub async fn ensure_topic(
    config: &KafkaConfig,
    topic: &str,
    role: TopicRole,
    creation: TopicCreation,
) -> Result<(), ProduceError> {
    let spec = match role {
        TopicRole::Events => TopicSpec::plain(topic, creation),
        TopicRole::Schemas => TopicSpec {
            partitions: 1,
            ..TopicSpec::compacted(topic, creation)
        },
        TopicRole::Commands => TopicSpec::commands(topic, creation),
    };
    let created = topics::create(&config.connection, CLIENT_ID, &spec)
        .await
        .map_err(|source| ProduceError::CreateTopic {
            topic: topic.to_owned(),
            source,
        })?;
    if created {
        info!(
            %topic,
            partitions = spec.partitions,
            replication = spec.replication,
            ?role,
            "created topic (-1: the broker's default)"
        );
    }
    Ok(())
}

/// Whether the topic exists, from the broker's metadata; [`ProduceError::Denied`] when
/// Kafka does not let this principal see it.
pub async fn topic_exists(producer: &FutureProducer, topic: &str) -> Result<bool, ProduceError> {
    let client = producer.clone();
    let name = topic.to_owned();
    let lookup = tokio::task::spawn_blocking(move || {
        topics::lookup(client.client(), &name, Duration::from_secs(10))
    })
    .await
    .map_err(|e| ProduceError::Task(e.to_string()))?
    .map_err(|source| ProduceError::Metadata {
        topic: topic.to_owned(),
        source,
    })?;
    match lookup {
        Lookup::Exists => Ok(true),
        Lookup::Missing => Ok(false),
        Lookup::Denied(code) => Err(denied_write(topic, code)),
    }
}

fn denied_write(topic: &str, code: RDKafkaErrorCode) -> ProduceError {
    ProduceError::Denied {
        what: format!("write on topic {topic}"),
        code,
    }
}

/// The label (one of [`crate::metrics::QUARANTINE_REASONS`]) of an error that refuses one
/// message for good: sending the same bytes again cannot succeed, so the row is
/// quarantined. Everything else (broker down, leader moving, timeouts, a missing topic,
/// authorization) is retried.
pub fn permanent_reason(code: RDKafkaErrorCode) -> Option<&'static str> {
    Some(match code {
        // Larger than message.max.bytes: librdkafka refuses it when it is queued, a
        // broker (or a topic's max.message.bytes) when it arrives.
        RDKafkaErrorCode::MessageSizeTooLarge => "message_size_too_large",
        RDKafkaErrorCode::InvalidMessageSize => "invalid_message_size",
        RDKafkaErrorCode::MessageBatchTooLarge => "message_batch_too_large",
        RDKafkaErrorCode::InvalidMessage => "invalid_message",
        RDKafkaErrorCode::InvalidRecord => "invalid_record",
        RDKafkaErrorCode::InvalidTimestamp => "invalid_timestamp",
        _ => return None,
    })
}

/// Rows read from the outbox per round.
const BATCH: usize = 4_000;

/// Batches sent and not yet settled, at most: while the oldest waits for its
/// acknowledgements, the ones after it are already in librdkafka's queue, so that a drain
/// is not held to one batch per linger and round trip.
const IN_FLIGHT: usize = 8;

/// Everything the producer task needs.
pub struct ProducerTask {
    /// A producer made with [`producer`] (so that a bad configuration fails at start).
    pub producer: FutureProducer,
    /// The outbox file.
    pub outbox_path: PathBuf,
    /// Kafka settings.
    pub config: KafkaConfig,
    /// Counters.
    pub metrics: Metrics,
    /// Readiness: delivery progress, a missing topic, the outbox's size.
    pub health: Health,
    /// Notified when the writer stored a batch.
    pub stored: Arc<Notify>,
    /// Turns true when the writer has stored its last event: drain, then stop.
    pub shutdown: watch::Receiver<bool>,
    /// How long the drain may take.
    pub drain_timeout: Duration,
    /// Publishes the writer schemas of the rows before the rows.
    pub schemas: SchemaPublisher,
}

/// Sends the outbox to Kafka until `shutdown` turns true and the outbox is empty (or
/// `drain_timeout` has passed since).
///
/// Up to [`IN_FLIGHT`] batches are sent ahead of the oldest unsettled one, and batches are
/// settled (deleted, refused rows quarantined) strictly in order. When a batch fails, the
/// batches after it are waited for and their rows sent again from the first unsettled
/// row, as the rows after a failed one of the same batch always were: a duplicate carries
/// the same uid, resourceVersion and type, which the analyzer drops.
#[tracing::instrument(name = "produce", skip_all, fields(cluster = %task.config.cluster_id, topic = %task.config.topic))]
pub async fn run_producer(task: ProducerTask) -> Result<(), ProduceError> {
    let ProducerTask {
        mut producer,
        outbox_path,
        config,
        metrics,
        health,
        stored,
        mut shutdown,
        drain_timeout,
        mut schemas,
    } = task;
    let outbox = Arc::new(Mutex::new(Outbox::connect(&outbox_path)?));
    check_or_create_topics(&producer, &config, &schemas, &health, &metrics).await?;
    let mut last_topic_check = Instant::now();
    // After a failed batch: 200 ms doubling to 5 s (rows wait safely in the outbox).
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut draining_since: Option<Instant> = None;
    // Every row up to here is settled (acknowledged or quarantined) and deleted.
    let mut settled_through = 0i64;
    // Every row up to here is sent or settled.
    let mut sent_through = 0i64;
    let mut in_flight: VecDeque<Sent> = VecDeque::with_capacity(IN_FLIGHT);
    loop {
        if draining_since.is_none() && *shutdown.borrow() {
            draining_since = Some(Instant::now());
            info!("draining the outbox before exit");
        }
        // Reads on while the window has room and the last send went through whole; a
        // batch cut short settles what it can first.
        let read_on = in_flight.len() < IN_FLIGHT && in_flight.back().is_none_or(|b| b.whole);
        if read_on {
            let busy = health.busy("producer");
            let (rows, size) = with_outbox(&outbox, move |o| {
                Ok((o.read_after(sent_through, BATCH)?, o.size()?))
            })
            .await?;
            drop(busy);
            metrics.outbox_size(size);
            health.outbox_size(size);
            health.rows_waiting(size.rows);
            if !rows.is_empty() {
                if draining_since.is_some_and(|t| t.elapsed() > drain_timeout) {
                    warn!(
                        pending = size.rows,
                        "outbox not drained in time; the rows stay for the next start"
                    );
                    return Ok(());
                }
                // Debug level: one span per batch, naming the outbox rows it carries.
                let span = debug_span!(
                    "batch",
                    rows = rows.len(),
                    first = rows.first().map(|r| r.id),
                    last = rows.last().map(|r| r.id)
                );
                if let Err(e) = schemas.publish_for(&producer, &rows).await {
                    match e.code() {
                        Some(code) if is_denial(code) => {
                            return Err(denied_write(schemas.topic().unwrap_or_default(), code))
                        }
                        Some(code) if is_missing_topic(code) => {
                            check_or_create_topics(&producer, &config, &schemas, &health, &metrics)
                                .await?;
                        }
                        _ => {}
                    }
                    // The rows wait for their schema: an analyzer older than this collector
                    // could read none of them without it.
                    Failed::new(Failure::SchemaNotPublished, &e).emit(&metrics);
                    KafkaBatchSent {
                        delivered: 0,
                        failed: rows.len() as u64,
                    }
                    .emit(&metrics);
                    if in_flight.is_empty() {
                        tokio::select! {
                            _ = tokio::time::sleep(backoff.next_delay()) => {}
                            _ = shutdown.changed() => {}
                        }
                        continue;
                    }
                } else {
                    let full = rows.len() == BATCH;
                    let sent = enqueue(&producer, &config, rows, &metrics, span.clone())
                        .instrument(span)
                        .await;
                    sent_through = sent.rows.last().map_or(sent_through, |r| r.id);
                    in_flight.push_back(sent);
                    if full {
                        // More may wait: read on if the window allows, else settle.
                        continue;
                    }
                }
            }
        }
        let Some(oldest) = in_flight.pop_front() else {
            if draining_since.is_some() {
                let _ = producer.flush(Duration::from_secs(5));
                return Ok(());
            }
            tokio::select! {
                _ = stored.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = shutdown.changed() => {}
            }
            continue;
        };
        let span = oldest.span.clone();
        let rows = oldest.rows;
        let outcomes = acknowledgements(oldest.outcomes, oldest.pending, &metrics)
            .instrument(span.clone())
            .await;
        let settled = settle_prefix(&rows, &outcomes);
        let delivered = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Delivered))
            .count() as u64;
        let failed = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Failed(_)))
            .count() as u64;
        if let Some((through, quarantined)) = settled {
            span.in_scope(|| {
                for row in &quarantined {
                    RowQuarantined {
                        cluster: &config.cluster_id,
                        outbox_id: row.outbox_id,
                        reason: row.reason,
                        error: &row.error,
                        stream: row.stream.as_deref(),
                        object: row.object.as_deref(),
                        resource_version: row.resource_version.as_deref(),
                        bytes: row.payload.len(),
                    }
                    .emit(&metrics);
                }
            });
            let busy = health.busy("producer");
            with_outbox(&outbox, move |o| o.settle(through, &quarantined)).await?;
            drop(busy);
            settled_through = through;
            health.delivered();
            health.topic_present(&config.topic);
            // A topic found missing that deliveries do not prove (the commands topic) is
            // looked up again now and then, so that readiness follows its creation.
            if health.any_topic_missing() && last_topic_check.elapsed() > TOPIC_RECHECK {
                last_topic_check = Instant::now();
                check_or_create_topics(&producer, &config, &schemas, &health, &metrics).await?;
            }
        }
        span.in_scope(|| KafkaBatchSent { delivered, failed }.emit(&metrics));
        if failed > 0 {
            // The batches after a failed one are sent again from its first unsettled row:
            // their outcomes are waited for (a producer is replaced only with nothing of
            // it in flight) and dropped.
            for later in in_flight.drain(..) {
                acknowledgements(later.outcomes, later.pending, &metrics).await;
            }
            sent_through = settled_through;
            if let Some(code) = outcomes.iter().find_map(|o| match o {
                Outcome::Failed(Some(code)) if is_denial(*code) => Some(*code),
                _ => None,
            }) {
                return Err(denied_write(&config.topic, code));
            }
            if outcomes
                .iter()
                .any(|o| matches!(o, Outcome::Failed(Some(code)) if is_missing_topic(*code)))
            {
                check_or_create_topics(&producer, &config, &schemas, &health, &metrics).await?;
            }
            if let Some((code, reason)) = producer.client().fatal_error() {
                if is_denial(code) {
                    error!(?code, %reason, "Kafka refuses this producer");
                    return Err(denied_write(&config.topic, code));
                }
                Failed::new(Failure::ProducerFatal, &format_args!("{code:?}: {reason}"))
                    .emit(&metrics);
                producer = self::producer(&config)?;
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => {}
                _ = shutdown.changed() => {}
            }
        } else {
            backoff.reset();
        }
    }
}

/// Looks the events topic, the schemas topic and (with remediation) the commands topic up;
/// creates a missing one when that is allowed, else marks the collector unready. A broker
/// that cannot be reached now is not an error: the rows wait; a principal that may not see
/// a topic is ([`ProduceError::Denied`]).
async fn check_or_create_topics(
    producer: &FutureProducer,
    config: &KafkaConfig,
    schemas: &SchemaPublisher,
    health: &Health,
    metrics: &Metrics,
) -> Result<(), ProduceError> {
    let topics = std::iter::once((config.topic.as_str(), TopicRole::Events))
        .chain(schemas.topic().map(|t| (t, TopicRole::Schemas)))
        .chain(
            config
                .commands_topic
                .as_deref()
                .map(|t| (t, TopicRole::Commands)),
        );
    for (topic, role) in topics {
        match topic_exists(producer, topic).await {
            Ok(true) => health.topic_present(topic),
            Ok(false) => match config.create_topic {
                Some(creation) => match ensure_topic(config, topic, role, creation).await {
                    Ok(()) => health.topic_present(topic),
                    Err(e) => Failed::new(Failure::Topic, &e).about(&topic).emit(metrics),
                },
                None => {
                    match role {
                        TopicRole::Events => error!(
                            %topic,
                            "the events topic does not exist: create it (the Helm chart's topics Job, deploy/topics.yaml), or pass --create-topic; events wait in the outbox"
                        ),
                        TopicRole::Schemas => error!(
                            %topic,
                            "the schemas topic does not exist: create it (the Helm chart's topics Job, deploy/topics.yaml), pass --create-topic, or --schemas-topic \"\" if every analyzer is as new as this collector; events wait in the outbox"
                        ),
                        TopicRole::Commands => error!(
                            %topic,
                            "the commands topic does not exist: create it (the Helm chart's topics Job, deploy/topics.yaml), or pass --create-topic; no cleanup command can reach this collector"
                        ),
                    }
                    health.topic_missing(topic);
                }
            },
            Err(e @ ProduceError::Denied { .. }) => return Err(e),
            Err(e) => Failed::new(Failure::Topic, &e).about(&topic).emit(metrics),
        }
    }
    Ok(())
}

/// What became of one row.
#[derive(Debug)]
enum Outcome {
    /// Acknowledged by Kafka.
    Delivered,
    /// Refused for good.
    Refused { reason: &'static str, error: String },
    /// Not delivered this time (not sent, or failed in a way a retry may fix).
    Failed(Option<RDKafkaErrorCode>),
}

/// The longest prefix of `rows` that is delivered or refused for good: the last id of it,
/// and its refused rows as quarantine entries.
fn settle_prefix(rows: &[Row], outcomes: &[Outcome]) -> Option<(i64, Vec<Quarantine>)> {
    let mut through = None;
    let mut quarantined = Vec::new();
    for (row, outcome) in rows.iter().zip(outcomes) {
        match outcome {
            Outcome::Delivered => {}
            Outcome::Refused { reason, error } => {
                let event = decode::<WatchEvent>(&row.payload).ok();
                quarantined.push(Quarantine {
                    outbox_id: row.id,
                    reason,
                    error: error.clone(),
                    stream: event.as_ref().map(|e| e.stream.as_str().to_owned()),
                    object: event.as_ref().map(WatchEvent::object_key),
                    resource_version: event.map(|e| e.resource_version),
                    payload: row.payload.clone(),
                });
            }
            Outcome::Failed(_) => break,
        }
        through = Some(row.id);
    }
    through.map(|t| (t, quarantined))
}

async fn with_outbox<T: Send + 'static>(
    outbox: &Arc<Mutex<Outbox>>,
    f: impl FnOnce(&mut Outbox) -> Result<T, OutboxError> + Send + 'static,
) -> Result<T, ProduceError> {
    let outbox = Arc::clone(outbox);
    tokio::task::spawn_blocking(move || {
        let mut guard = outbox.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    })
    .await
    .map_err(|e| ProduceError::Task(e.to_string()))?
    .map_err(ProduceError::from)
}

fn code_of(error: &KafkaError) -> Option<RDKafkaErrorCode> {
    error.rdkafka_error_code()
}

/// A batch handed to librdkafka, waiting for its acknowledgements.
struct Sent {
    rows: Vec<Row>,
    /// What became of each row so far: refused at once, or not delivered yet.
    outcomes: Vec<Outcome>,
    /// The acknowledgements to wait for, by place in `rows`.
    pending: Vec<(usize, DeliveryFuture)>,
    /// Whether every row was handed over (enqueuing did not stop at an error).
    whole: bool,
    /// The batch's span (debug level), for what its settling logs.
    span: tracing::Span,
}

/// Hands `rows` to librdkafka in order, without waiting for Kafka. Enqueuing stops at the
/// first error that is not back-pressure nor a refusal of that one row: nothing after it
/// is sent out of order.
async fn enqueue(
    producer: &FutureProducer,
    config: &KafkaConfig,
    rows: Vec<Row>,
    metrics: &Metrics,
    span: tracing::Span,
) -> Sent {
    let mut outcomes: Vec<Outcome> = Vec::with_capacity(rows.len());
    let mut pending = Vec::with_capacity(rows.len());
    let mut whole = true;
    'rows: for (index, row) in rows.iter().enumerate() {
        let mut record = FutureRecord::to(&config.topic)
            .key(config.cluster_id.as_bytes())
            .payload(row.payload.as_slice());
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    outcomes.push(Outcome::Failed(None));
                    pending.push((index, delivery));
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    // Back-pressure, not an error: let librdkafka drain its queue.
                    record = back;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((error, _)) => {
                    match code_of(&error).and_then(permanent_reason) {
                        Some(reason) => outcomes.push(Outcome::Refused {
                            reason,
                            error: error.to_string(),
                        }),
                        None => {
                            Failed::new(Failure::Enqueue, &error).emit(metrics);
                            whole = false;
                            break 'rows;
                        }
                    }
                    break;
                }
            }
        }
    }
    outcomes.resize_with(rows.len(), || Outcome::Failed(None));
    Sent {
        rows,
        outcomes,
        pending,
        whole,
        span,
    }
}

/// Waits for the acknowledgements of a [`Sent`] batch; returns what became of each row.
async fn acknowledgements(
    mut outcomes: Vec<Outcome>,
    pending: Vec<(usize, DeliveryFuture)>,
    metrics: &Metrics,
) -> Vec<Outcome> {
    let mut warned = false;
    for (index, delivery) in pending {
        outcomes[index] = match delivery.await {
            Ok(Ok(_)) => Outcome::Delivered,
            Ok(Err((error, _))) => match code_of(&error).and_then(permanent_reason) {
                Some(reason) => Outcome::Refused {
                    reason,
                    error: error.to_string(),
                },
                None => {
                    if !warned {
                        Failed::new(Failure::Delivery, &error).emit(metrics);
                        warned = true;
                    }
                    Outcome::Failed(code_of(&error))
                }
            },
            Err(_) => Outcome::Failed(None),
        };
    }
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_permanent_refusal_has_a_quarantine_reason_whose_series_starts_at_0() {
        use rdkafka::types::RDKafkaErrorCode as Code;
        for code in [
            Code::MessageSizeTooLarge,
            Code::InvalidMessageSize,
            Code::MessageBatchTooLarge,
            Code::InvalidMessage,
            Code::InvalidRecord,
            Code::InvalidTimestamp,
        ] {
            let reason = permanent_reason(code).expect("permanent");
            assert!(
                crate::metrics::QUARANTINE_REASONS.contains(&reason),
                "{reason}"
            );
        }
    }

    fn row(id: i64) -> Row {
        Row {
            id,
            payload: vec![1, 2, 3],
        }
    }

    fn refused() -> Outcome {
        Outcome::Refused {
            reason: "message_size_too_large",
            error: "too large".into(),
        }
    }

    #[test]
    fn a_refused_row_does_not_end_the_settled_prefix_but_a_failed_one_does() {
        let rows: Vec<Row> = (1..=5).map(row).collect();
        let outcomes = vec![
            Outcome::Delivered,
            refused(),
            Outcome::Delivered,
            Outcome::Failed(None),
            Outcome::Delivered,
        ];
        let (through, quarantined) = settle_prefix(&rows, &outcomes).unwrap();
        assert_eq!(through, 3);
        assert_eq!(quarantined.len(), 1);
        assert_eq!(quarantined[0].outbox_id, 2);
        assert!(quarantined[0].object.is_none(), "the bytes are no event");
        assert!(settle_prefix(&rows[..1], &[Outcome::Failed(None)]).is_none());
    }

    #[test]
    fn only_errors_about_the_message_itself_are_permanent() {
        assert_eq!(
            permanent_reason(RDKafkaErrorCode::MessageSizeTooLarge),
            Some("message_size_too_large")
        );
        for transient in [
            RDKafkaErrorCode::UnknownTopicOrPartition,
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::NotEnoughReplicas,
        ] {
            assert_eq!(permanent_reason(transient), None, "{transient:?}");
        }
    }
}
