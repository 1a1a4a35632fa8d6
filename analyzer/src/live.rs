//! `analyzer run`: the same core as replay, fed by a Kafka consumer group on
//! `ipaudit.events`. Offsets are not committed to Kafka: they are checkpointed in SQLite
//! with the analysis they correspond to, and a restart resumes from there (the rebalance
//! callback assigns partitions at the stored offsets). Alert transitions go to the store's
//! outbox as they happen, and from there to every sink.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipaudit_schemas::{decode, WatchEvent};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{watch, Notify};
use tracing::{info, warn};

use crate::engine::{Analyzer, AnalyzerConfig, Output};
use crate::sinks::{run_delivery, AlertSink};
use crate::store::{Store, StoreError};

/// How the live analyzer runs.
pub struct LiveConfig {
    /// bootstrap.servers.
    pub brokers: String,
    /// The events topic.
    pub topic: String,
    /// The consumer group.
    pub group_id: String,
    /// Extra librdkafka consumer settings.
    pub kafka_options: Vec<(String, String)>,
    /// Where the store lives.
    pub state_dir: PathBuf,
    /// The core's settings (one analysis per cluster id).
    pub analyzer: AnalyzerConfig,
    /// How often the analysis and offsets are checkpointed.
    pub checkpoint_interval: Duration,
    /// Where alerts go.
    pub sinks: Vec<AlertSink>,
    /// Stop once every assigned partition has been read to its end (catch-up runs and
    /// benchmarks), after a last checkpoint and delivery.
    pub exit_at_end: bool,
    /// Without local state, start at the latest snapshot in the topic (else at its start).
    pub start_at_snapshot: bool,
}

/// Why the live analyzer stopped.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// Kafka refused the consumer or the subscription.
    #[error("Kafka consumer")]
    Kafka(#[from] KafkaError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The state directory is unusable.
    #[error("cannot create state directory {path}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Assigns partitions at the offsets the checkpoint holds (librdkafka refuses a seek right
/// after assignment, so offsets go into the assignment itself).
struct CheckpointedOffsets {
    topic: String,
    next: Arc<Mutex<HashMap<i32, i64>>>,
}

impl ClientContext for CheckpointedOffsets {}

impl ConsumerContext for CheckpointedOffsets {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let next = self.next.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let partitions: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
                for partition in partitions {
                    let offset = next
                        .get(&partition)
                        .map_or(Offset::Beginning, |n| Offset::Offset(*n));
                    if let Err(error) = tpl.set_partition_offset(&self.topic, partition, offset) {
                        warn!(%error, partition, "cannot set the stored offset");
                    }
                }
                info!(assignment = ?tpl, "partitions assigned at the checkpointed offsets");
                if let Err(error) = consumer.assign(tpl) {
                    warn!(%error, "assign failed");
                }
            }
            _ => {
                if let Err(error) = consumer.unassign() {
                    warn!(%error, "unassign failed");
                }
            }
        }
    }
}

/// Runs until `shutdown` resolves; checkpoints on the way out.
pub async fn run(
    config: LiveConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), LiveError> {
    std::fs::create_dir_all(&config.state_dir).map_err(|source| LiveError::StateDir {
        path: config.state_dir.clone(),
        source,
    })?;
    let store_path = config.state_dir.join("analyzer.db");
    let (mut store, _) = Store::open_or_set_aside(&store_path)?;
    let (mut analyzers, offsets) = restore_checkpoint(&mut store, &config.topic, &config.analyzer)?;
    let offsets = if analyzers.is_empty() && offsets.is_empty() && config.start_at_snapshot {
        rebuild_offsets(&config).await
    } else {
        info!(
            clusters = analyzers.len(),
            ?offsets,
            "resuming from the checkpoint"
        );
        offsets
    };
    let next = Arc::new(Mutex::new(offsets));
    let context = CheckpointedOffsets {
        topic: config.topic.clone(),
        next: Arc::clone(&next),
    };
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", &config.brokers)
        .set("group.id", &config.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "10000")
        // Alerts within seconds: do not let the broker hold a fetch for librdkafka's 500 ms.
        .set("fetch.wait.max.ms", "100")
        .set(
            "enable.partition.eof",
            if config.exit_at_end { "true" } else { "false" },
        );
    for (key, value) in &config.kafka_options {
        client.set(key, value);
    }
    let consumer: StreamConsumer<CheckpointedOffsets> = client.create_with_context(context)?;
    consumer.subscribe(&[&config.topic])?;

    let (stop, stop_rx) = watch::channel(false);
    let stored = Arc::new(Notify::new());
    let mut deliveries = Vec::new();
    for sink in config.sinks {
        deliveries.push(tokio::spawn(run_delivery(
            sink,
            store_path.clone(),
            Arc::clone(&stored),
            stop_rx.clone(),
        )));
    }
    let mut shutdown = std::pin::pin!(shutdown);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut checkpoint = tokio::time::interval(config.checkpoint_interval);
    let mut outputs = Vec::new();
    let mut at_end = std::collections::HashSet::new();
    let mut last_checkpoint_cost = Duration::ZERO;
    loop {
        tokio::select! {
            message = consumer.recv() => match message {
                Ok(message) => {
                    let (partition, offset) = (message.partition(), message.offset());
                    match message.payload().map(decode::<WatchEvent>) {
                        Some(Ok(event)) => {
                            let analyzer = analyzers
                                .entry(event.cluster_id.clone())
                                .or_insert_with(|| Analyzer::new(config.analyzer.clone()));
                            analyzer.step(event, &mut outputs);
                        }
                        Some(Err(error)) => {
                            warn!(%error, partition, offset, "undecodable message kept as a dead letter");
                            store.dead_letter(&config.topic, partition, offset, &error.to_string(), message.payload())?;
                        }
                        None => store.dead_letter(&config.topic, partition, offset, "empty message", None)?,
                    }
                    next.lock().unwrap_or_else(|e| e.into_inner()).insert(partition, offset + 1);
                    at_end.remove(&partition);
                }
                Err(KafkaError::PartitionEOF(partition)) => {
                    at_end.insert(partition);
                    let assigned = consumer.assignment().map(|a| a.count()).unwrap_or(usize::MAX);
                    if config.exit_at_end && at_end.len() >= assigned {
                        info!("every assigned partition read to its end");
                        for analyzer in analyzers.values_mut() {
                            analyzer.finish(None, &mut outputs);
                        }
                        store_alerts(&mut store, &mut outputs, &stored)?;
                        break;
                    }
                }
                Err(error) => warn!(%error, "consumer error"),
            },
            _ = tick.tick() => {
                let now = crate::live::now_ms();
                for analyzer in analyzers.values_mut() {
                    analyzer.tick(now, &mut outputs);
                }
            }
            _ = checkpoint.tick() => {
                // A checkpoint costs time in proportion to the state: never spend more than
                // a tenth of the time on them.
                if last_checkpoint_cost * 10 <= config.checkpoint_interval {
                    let started = std::time::Instant::now();
                    save(&mut store, &config.topic, &analyzers, &next)?;
                    last_checkpoint_cost = started.elapsed();
                } else {
                    last_checkpoint_cost = last_checkpoint_cost.saturating_sub(config.checkpoint_interval / 10);
                }
            }
            _ = &mut shutdown => break,
        }
        store_alerts(&mut store, &mut outputs, &stored)?;
    }
    save(&mut store, &config.topic, &analyzers, &next)?;
    let _ = stop.send(true);
    for delivery in deliveries {
        if let Ok(Err(error)) = delivery.await {
            warn!(%error, "a sink stopped with an error");
        }
    }
    Ok(())
}

/// One analysis per cluster id.
type Analyses = HashMap<String, Analyzer>;

/// The analyses and offsets of the store's checkpoint. A checkpoint this build cannot
/// read (corrupt, or of a format it does not know) is set aside whole, with a warning, so
/// that every cluster is rebuilt from the topic rather than the process stopping at every
/// start: offsets without their analysis are worthless.
fn restore_checkpoint(
    store: &mut Store,
    topic: &str,
    config: &AnalyzerConfig,
) -> Result<(Analyses, HashMap<i32, i64>), StoreError> {
    let (states, offsets) = store.load_checkpoint(topic)?;
    let mut analyzers = HashMap::new();
    for (cluster, state) in states {
        match Analyzer::restore(&state, config.clone()) {
            Ok(analyzer) => {
                analyzers.insert(cluster, analyzer);
            }
            Err(error) => {
                let reason = format!("cluster {cluster}: {error}");
                let moved = store.set_aside_checkpoint(&reason)?;
                warn!(%error, %cluster, clusters = moved, "cannot read the checkpoint: set aside; rebuilding from the topic");
                return Ok((HashMap::new(), HashMap::new()));
            }
        }
    }
    Ok((analyzers, offsets))
}

/// With no local state: start every partition at its latest complete snapshot.
async fn rebuild_offsets(config: &LiveConfig) -> HashMap<i32, i64> {
    let (brokers, topic, options) = (
        config.brokers.clone(),
        config.topic.clone(),
        config.kafka_options.clone(),
    );
    let scan = tokio::task::spawn_blocking(move || -> Result<HashMap<i32, i64>, KafkaError> {
        let mut client = ClientConfig::new();
        client.set("bootstrap.servers", &brokers);
        for (key, value) in &options {
            client.set(key, value);
        }
        let consumer: BaseConsumer = client.create()?;
        let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
        let mut starts = HashMap::new();
        for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
            let offset = crate::snapshot::latest_snapshot_offset(
                &brokers,
                &topic,
                partition.id(),
                &options,
            )?;
            info!(
                partition = partition.id(),
                offset, "no local state: rebuilding from the latest snapshot"
            );
            starts.insert(partition.id(), offset);
        }
        Ok(starts)
    });
    match scan.await {
        Ok(Ok(starts)) => starts,
        Ok(Err(error)) => {
            warn!(%error, "cannot find the latest snapshot; reading the topic from the start");
            HashMap::new()
        }
        Err(error) => {
            warn!(%error, "snapshot scan failed; reading the topic from the start");
            HashMap::new()
        }
    }
}

/// Puts the alert transitions of `outputs` in the store's outbox and wakes the sinks.
fn store_alerts(
    store: &mut Store,
    outputs: &mut Vec<Output>,
    stored: &Notify,
) -> Result<(), StoreError> {
    let alerts: Vec<_> = outputs
        .drain(..)
        .filter_map(|o| match o {
            Output::Alert(alert) => Some(alert),
            Output::NewEpoch(change) => {
                warn!(
                    ?change,
                    "resourceVersions went backwards: a new epoch starts"
                );
                None
            }
        })
        .collect();
    if !alerts.is_empty() && store.add_transitions(&alerts)? > 0 {
        stored.notify_waiters();
    }
    Ok(())
}

fn save(
    store: &mut Store,
    topic: &str,
    analyzers: &HashMap<String, Analyzer>,
    next: &Mutex<HashMap<i32, i64>>,
) -> Result<(), StoreError> {
    let offsets = next.lock().unwrap_or_else(|e| e.into_inner()).clone();
    store.checkpoint(
        topic,
        analyzers.iter().map(|(c, a)| (c.as_str(), a.snapshot())),
        &offsets,
    )
}

/// Wall-clock time in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_checkpoint_is_set_aside_whole_and_rebuilt_from_the_topic() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("analyzer.db")).unwrap();
        let config = AnalyzerConfig::default();
        let good = Analyzer::new(config.clone()).snapshot();
        // The shape of a checkpoint written before issue 8 (per-kind maps, no rules).
        let old = br#"{"dedupe":{},"state":{"ips":{},"subnets":{},"pods":{}},"timers":{}}"#;
        let offsets = HashMap::from([(0, 42)]);
        store
            .checkpoint("t", [("a", good.clone()), ("b", old.to_vec())], &offsets)
            .unwrap();
        let (analyzers, kept) = restore_checkpoint(&mut store, "t", &config).unwrap();
        assert!(analyzers.is_empty() && kept.is_empty());
        let (states, kept) = store.load_checkpoint("t").unwrap();
        assert!(
            states.is_empty() && kept.is_empty(),
            "set aside, not read again"
        );
        store.checkpoint("t", [("a", good)], &offsets).unwrap();
        let (analyzers, kept) = restore_checkpoint(&mut store, "t", &config).unwrap();
        assert_eq!(analyzers.len(), 1);
        assert_eq!(kept, offsets);
    }
}
