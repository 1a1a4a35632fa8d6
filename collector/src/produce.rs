//! Drains the outbox into Kafka: an idempotent, acks=all, zstd producer, key = cluster id,
//! rows sent in order and deleted only after Kafka acknowledged them. After a failure the
//! unacknowledged rows are sent again (a duplicate carries the same uid, resourceVersion
//! and type, which the analyzer drops); a fatal producer error recreates the producer.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio::sync::{watch, Notify};
use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::outbox::{Outbox, OutboxError};

/// Where and how events go to Kafka.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// The brokers and how to reach them (TLS, SASL, the operator's librdkafka settings).
    pub connection: ipaudit_kafka::Connection,
    /// The events topic.
    pub topic: String,
    /// Message key: one cluster's history stays in one partition, in order.
    pub cluster_id: String,
    /// Create the topic when it is missing, with this many partitions.
    pub create_topic_partitions: Option<i32>,
}

/// Why the producer stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    /// librdkafka refused the configuration.
    #[error("invalid Kafka producer configuration")]
    Config(#[source] KafkaError),
    /// The outbox failed.
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    /// The topic could not be created.
    #[error("cannot create topic {topic}")]
    CreateTopic {
        /// The topic.
        topic: String,
        /// What Kafka said.
        #[source]
        source: KafkaError,
    },
}

/// The producer settings ipaudit relies on, then the operator's.
pub fn client_config(config: &KafkaConfig) -> ClientConfig {
    let mut client = ClientConfig::new();
    client
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.type", "zstd")
        .set("linger.ms", "5")
        // Outages longer than this fail the batch; it is then sent again from the outbox.
        .set("message.timeout.ms", "300000");
    config.connection.apply(&mut client);
    client
}

/// Creates the topic unless it exists.
pub async fn ensure_topic(config: &KafkaConfig, partitions: i32) -> Result<(), ProduceError> {
    let admin: AdminClient<DefaultClientContext> = client_config(config)
        .create()
        .map_err(ProduceError::Config)?;
    let topic = NewTopic::new(&config.topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics([&topic], &options)
        .await
        .map_err(|source| ProduceError::CreateTopic {
            topic: config.topic.clone(),
            source,
        })?;
    for result in results {
        match result {
            Ok(_) => info!(topic = %config.topic, partitions, "created topic"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => {
                return Err(ProduceError::CreateTopic {
                    topic,
                    source: KafkaError::AdminOp(code),
                });
            }
        }
    }
    Ok(())
}

/// Rows read from the outbox per round.
const BATCH: usize = 1_000;

/// Sends the outbox to Kafka until `shutdown` turns true and the outbox is empty (or
/// `drain_timeout` has passed since).
pub async fn run_producer(
    outbox_path: PathBuf,
    config: KafkaConfig,
    metrics: Metrics,
    stored: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
    drain_timeout: Duration,
) -> Result<(), ProduceError> {
    let outbox = Arc::new(Mutex::new(Outbox::connect(&outbox_path)?));
    let mut producer: FutureProducer = client_config(&config)
        .create()
        .map_err(ProduceError::Config)?;
    let mut backoff = Duration::from_millis(200);
    let mut draining_since: Option<Instant> = None;
    loop {
        if draining_since.is_none() && *shutdown.borrow() {
            draining_since = Some(Instant::now());
            info!("draining the outbox before exit");
        }
        let (rows, pending) =
            with_outbox(&outbox, |o| Ok((o.read_batch(BATCH)?, o.pending_rows()?))).await?;
        metrics.outbox_rows(pending);
        if rows.is_empty() {
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
        }
        if draining_since.is_some_and(|t| t.elapsed() > drain_timeout) {
            warn!(
                pending,
                "outbox not drained in time; the rows stay for the next start"
            );
            return Ok(());
        }
        let (acked_through, delivered, failed) = send_in_order(&producer, &config, &rows).await;
        if let Some(id) = acked_through {
            with_outbox(&outbox, move |o| o.delete_through(id)).await?;
        }
        metrics.kafka("delivered", delivered);
        if failed > 0 {
            metrics.kafka("failed", failed);
            if let Some((code, reason)) = producer.client().fatal_error() {
                warn!(?code, %reason, "fatal producer error; recreating the producer");
                producer = client_config(&config)
                    .create()
                    .map_err(ProduceError::Config)?;
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        } else {
            backoff = Duration::from_millis(200);
        }
    }
}

async fn with_outbox<T: Send + 'static>(
    outbox: &Arc<Mutex<Outbox>>,
    f: impl FnOnce(&Outbox) -> Result<T, OutboxError> + Send + 'static,
) -> Result<T, OutboxError> {
    let outbox = Arc::clone(outbox);
    tokio::task::spawn_blocking(move || {
        let guard = outbox.lock().unwrap_or_else(|e| e.into_inner());
        f(&guard)
    })
    .await
    .expect("outbox task does not panic")
}

/// Sends rows in order; returns the last id of the acknowledged prefix and the counts of
/// delivered and failed messages.
async fn send_in_order(
    producer: &FutureProducer,
    config: &KafkaConfig,
    rows: &[(i64, Vec<u8>)],
) -> (Option<i64>, u64, u64) {
    // Only a prefix of the rows is enqueued when enqueuing fails: nothing is sent out of order.
    let mut pending = Vec::with_capacity(rows.len());
    'rows: for (id, payload) in rows {
        let mut record = FutureRecord::to(&config.topic)
            .key(config.cluster_id.as_bytes())
            .payload(payload.as_slice());
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    pending.push((*id, delivery));
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    // Back-pressure, not an error: let librdkafka drain its queue.
                    record = back;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((error, _)) => {
                    warn!(%error, "cannot enqueue message");
                    break 'rows;
                }
            }
        }
    }
    let mut acked_through = None;
    let mut in_prefix = true;
    let (mut delivered, mut failed) = (0u64, (rows.len() - pending.len()) as u64);
    for (id, delivery) in pending {
        match delivery.await {
            Ok(Ok(_)) => {
                delivered += 1;
                if in_prefix {
                    acked_through = Some(id);
                }
            }
            Ok(Err((error, _))) => {
                if failed == 0 {
                    warn!(%error, "delivery failed; the rest of the outbox is sent again");
                }
                failed += 1;
                in_prefix = false;
            }
            Err(_) => {
                failed += 1;
                in_prefix = false;
            }
        }
    }
    (acked_through, delivered, failed)
}
