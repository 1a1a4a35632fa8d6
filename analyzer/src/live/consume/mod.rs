//! `analyzer run`: the same core as replay, fed by a Kafka consumer group on
//! `ipaudit.events`. Offsets are checkpointed in SQLite with the analysis they correspond
//! to, and a restart resumes from there (the rebalance callback assigns partitions at the
//! stored offsets, see [`crate::live::group`]); after each checkpoint they are also committed to
//! Kafka, with each partition's rebuild point ([`crate::live::rebuild_points`]), for lag
//! monitors and for the member that takes a partition over without state (it rebuilds from
//! a snapshot at or before them), and each partition's handover is written for the member
//! that takes it over ([`crate::live::handover`]). Alert transitions go to the store's
//! outbox as they happen, and from there to every sink. `/metrics`, `/healthz` and
//! `/readyz` are served on `--listen`.
//!
//! [`run`] sets the member up; the loop is `ConsumeLoop`, which owns its state and has
//! one method per thing that can happen: a group change (before anything else of a turn,
//! `group_change`), a message or the end of a partition (`message`), an offset out
//! of range (`group_change`), the clock's tick, a checkpoint and the stop
//! (`checkpoint`).

mod checkpoint;
mod group_change;
mod message;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt as _, StreamExt as _};
use ipaudit_runtime::kafka::NoOffset;
use ipaudit_runtime::telemetry::InternalEvent as _;
use ipaudit_schemas::{WatchEvent, WriterSchemas};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::{watch, Notify};
use tracing::info;

use crate::analysis::engine::{Analyzer, AnalyzerConfig, Output};
use crate::live::catch_up::CatchUp;
use crate::live::group::{GroupContext, GroupShared, PartitionMap, SnapshotScan};
use crate::live::handover::{HandoverError, HandoverReader, HandoverWriter, Outgoing};
use crate::live::metrics::Metrics;
use crate::live::output_topics::{watch_output_topics, OutputTopics};
use crate::live::rebuild_points::RebuildPoints;
use crate::live::sinks::{run_delivery, AlertSink, DeliveryConfig};
use crate::live::store::{Store, StoreError};
use crate::live::telemetry::{CatchingUp, Failed, Failure};
use crate::live::ui::UiConfig;
use crate::live::undecodable_log::UndecodableLog;
use crate::live::writer_schemas::SchemaTopic;
use crate::live::CLIENT_ID;

/// How the live analyzer runs.
pub struct LiveConfig {
    /// The brokers and how to reach them (TLS, SASL, the operator's librdkafka settings).
    pub connection: ipaudit_runtime::kafka::Connection,
    /// The events topic.
    pub topic: String,
    /// The schemas topic, read for messages of a schema this build does not carry
    /// (`None`: such messages are dead letters).
    pub schemas_topic: Option<String>,
    /// The consumer group.
    pub group_id: String,
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
    /// Static group membership (`group.instance.id`); `None`: dynamic membership.
    pub instance_id: Option<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served; `None`: nowhere.
    pub listen: Option<SocketAddr>,
    /// A sink seen for the first time gets the whole stored history, not only what comes
    /// after it was added.
    pub sink_from_beginning: bool,
    /// The counters (shared with the HTTP endpoint; a fresh set by default).
    pub metrics: Metrics,
    /// Where the incident pages are served; `None`: nowhere.
    pub ui: Option<UiConfig>,
    /// How long a resolved incident is kept for the pages.
    pub incident_retention: Duration,
    /// The pages' external address: delivered alerts link to their incident there.
    pub ui_url: Option<String>,
    /// The topics the analyzer writes (alerts, commands, checkpoints), looked up for
    /// `/readyz`.
    pub output_topics: OutputTopics,
    /// The compacted topic partitions are handed over through ([`crate::live::handover`]);
    /// `None`: none, a partition taken over is rebuilt from a snapshot.
    pub handover_topic: Option<String>,
    /// How often each owned partition's handover is written (when its analysis moved).
    pub handover_interval: Duration,
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
    /// The partition map in the store failed.
    #[error(transparent)]
    PartitionMap(#[from] crate::live::group::PartitionMapError),
    /// The handover producer cannot be created.
    #[error(transparent)]
    Handover(#[from] HandoverError),
    /// The incident pages cannot be served.
    #[error(transparent)]
    Ui(#[from] crate::live::ui::UiError),
    /// The metrics endpoint cannot listen.
    #[error("cannot serve metrics on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Kafka refuses this analyzer's principal what it needs: read on the events topic,
    /// or the consumer group. Not retried: nothing changes until an operator grants it
    /// (a silent retry loop would look like a quiet cluster).
    #[error(
        "Kafka denies this analyzer's principal {what} ({code}): grant it with kafka-acls, or run as a principal that has it"
    )]
    Denied {
        /// What is denied, e.g. "read on topic ipaudit.events".
        what: String,
        /// Kafka's error.
        code: RDKafkaErrorCode,
    },
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

/// Runs until `shutdown` resolves; checkpoints (and hands over) on the way out.
pub async fn run(
    mut config: LiveConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), LiveError> {
    let started = Instant::now();
    std::fs::create_dir_all(&config.state_dir).map_err(|source| LiveError::StateDir {
        path: config.state_dir.clone(),
        source,
    })?;
    let metrics = config.metrics.clone();
    let (stop, stop_rx) = watch::channel(false);
    if let Some(addr) = config.listen {
        let bound = crate::live::http::serve(addr, metrics.clone(), stop_rx.clone())
            .await
            .map_err(|source| LiveError::Listen { addr, source })?;
        info!(%bound, "serving /metrics, /healthz and /readyz");
    }
    tokio::spawn(watch_output_topics(
        config.connection.clone(),
        config.output_topics.clone(),
        metrics.clone(),
        stop_rx.clone(),
    ));
    let store_path = config.state_dir.join("analyzer.db");
    let (mut store, set_aside) = Store::open_or_set_aside(&store_path)?;
    if let Some((moved_to, error)) = &set_aside {
        Failed::new(Failure::StoreSetAside, error)
            .about(&moved_to.display())
            .emit(&metrics);
    }
    if let Some(ui) = &config.ui {
        let bound =
            crate::live::ui::serve(ui, &store_path, metrics.clone(), stop_rx.clone()).await?;
        info!(%bound, base_path = %ui.base_path, "serving the incident pages");
    }
    let partitions = PartitionMap::open(&store_path, &config.topic)?;
    let (restored, offsets) =
        checkpoint::restore_checkpoint(&mut store, &config.topic, &config.analyzer, &metrics)?;
    let points = store.load_rebuild_points(&config.topic)?;
    info!(
        clusters = restored.len(),
        ?offsets,
        "checkpoint read; clusters resume as their partitions are assigned"
    );
    let shared = GroupShared::new(offsets);
    let context = GroupContext {
        topic: config.topic.clone(),
        shared: shared.clone(),
        snapshot: config.start_at_snapshot.then(|| SnapshotScan {
            connection: config.connection.clone(),
            group_id: config.group_id.clone(),
        }),
        handover: config
            .handover_topic
            .as_deref()
            .map(|topic| HandoverReader::new(config.connection.clone(), topic)),
        analyzer: config.analyzer.clone(),
        metrics: metrics.clone(),
    };
    let consumer = consumer(&config, context)?;
    let outgoing = match &config.handover_topic {
        Some(topic) => {
            let writer_name = config
                .instance_id
                .clone()
                .unwrap_or_else(|| CLIENT_ID.to_owned());
            Some(Outgoing::new(
                HandoverWriter::new(&config.connection, topic, &writer_name)?,
                config.handover_interval,
                metrics.clone(),
            ))
        }
        None => None,
    };
    let sink_names: Vec<String> = config.sinks.iter().map(|s| s.name()).collect();

    let stored = Arc::new(Notify::new());
    let mut deliveries = Vec::new();
    let delivery = DeliveryConfig {
        store_path: store_path.clone(),
        from_beginning: config.sink_from_beginning,
        metrics: metrics.clone(),
        ui_url: config.ui_url.clone(),
        drain_at_stop: config.exit_at_end,
    };
    for sink in std::mem::take(&mut config.sinks) {
        deliveries.push(tokio::spawn(run_delivery(
            sink,
            delivery.clone(),
            Arc::clone(&stored),
            stop_rx.clone(),
        )));
    }
    let schema_topic = SchemaTopic::new(config.connection.clone(), config.schemas_topic.clone());
    let mut member = ConsumeLoop {
        config,
        metrics,
        store,
        partitions,
        points,
        shared,
        analyzers: HashMap::new(),
        parked: restored,
        owned: HashSet::new(),
        at_end: HashSet::new(),
        outputs: Vec::new(),
        spare: None,
        undecodable: UndecodableLog::default(),
        learnt: WriterSchemas::new(),
        schema_topic,
        outgoing,
        sink_names,
        stored,
        last_checkpoint_cost: Duration::ZERO,
        consumed: 0,
        catch_up: CatchUp::default(),
    };
    member.run(&consumer, shutdown).await?;
    // What this member did, for the operator and the group benchmark (per member).
    info!(
        messages = member.consumed,
        seconds = started.elapsed().as_secs_f64(),
        "stopped after its last checkpoint"
    );
    let _ = stop.send(true);
    for delivery in deliveries {
        if let Ok(Err(error)) = delivery.await {
            Failed::new(Failure::SinkStopped, &error).emit(&member.metrics);
        }
    }
    Ok(())
}

/// One member of the group at work: everything the loop keeps between turns.
struct ConsumeLoop {
    /// How it runs (its sinks moved to their delivery tasks).
    config: LiveConfig,
    metrics: Metrics,
    store: Store,
    /// Which partition each cluster's events come in.
    partitions: PartitionMap,
    /// Where a new owner of each partition must rebuild from.
    points: RebuildPoints,
    /// What the rebalance callback shares: next offsets, group changes, handovers taken.
    shared: GroupShared,
    /// One analysis per cluster of the partitions this member owns.
    analyzers: HashMap<String, Analyzer>,
    /// Clusters restored from the checkpoint, waiting for their partition: a cluster whose
    /// partition went to another instance is never ticked here.
    parked: HashMap<String, Analyzer>,
    /// The partitions this member owns.
    owned: HashSet<i32>,
    /// Owned partitions read to their end.
    at_end: HashSet<i32>,
    /// What the analyses produced this turn, stored at its end.
    outputs: Vec<Output>,
    /// Each message is decoded into the event analysed before (its strings reused), of
    /// the fields the analysis reads.
    spare: Option<Box<WatchEvent>>,
    undecodable: UndecodableLog,
    /// Newer collectors' schemas, learnt from the schemas topic when a message names one.
    learnt: WriterSchemas,
    schema_topic: SchemaTopic,
    /// The handovers this member writes (`None`: no checkpoints topic).
    outgoing: Option<Outgoing>,
    /// The sinks by their ledger names (whose undelivered transitions a handover carries).
    sink_names: Vec<String>,
    /// Wakes the sinks when transitions are stored.
    stored: Arc<Notify>,
    /// What the last checkpoint cost (checkpoints take at most a tenth of the time).
    last_checkpoint_cost: Duration,
    /// Messages consumed since the start, and how fast against the lag.
    consumed: u64,
    catch_up: CatchUp,
}

/// What woke the consume loop.
enum Turn<M> {
    /// The consumer returned a message or an error.
    Message(Result<M, KafkaError>),
    /// The wall clock ticked.
    Tick,
    /// A checkpoint is due.
    Checkpoint,
}

/// Messages taken in one turn at most, when librdkafka has them queued: enough that the
/// clocks and the store cost little per message, few enough that a checkpoint or a tick is
/// never held up by more than a few milliseconds of analysis.
const MESSAGES_PER_TURN: usize = 1_000;

/// Whether the loop goes on after a turn.
enum Next {
    Continue,
    Stop,
}

impl ConsumeLoop {
    /// Takes turns until `shutdown` resolves (or, with `--exit-at-end`, every partition is
    /// read to its end); then the last checkpoint and handovers.
    async fn run(
        &mut self,
        consumer: &StreamConsumer<GroupContext>,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), LiveError> {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let mut checkpoint = tokio::time::interval(self.config.checkpoint_interval);
        // One stream for the whole loop: a `recv` per message would register and drop a
        // waker each time.
        let mut messages = consumer.stream();
        loop {
            let turn = tokio::select! {
                message = messages.next() => Turn::Message(message.expect("a Kafka stream never ends")),
                _ = tick.tick() => Turn::Tick,
                _ = checkpoint.tick() => Turn::Checkpoint,
                _ = &mut shutdown => break,
            };
            let mut next = self.take_turn(consumer, turn).await?;
            // The messages librdkafka has already fetched are taken in the same turn, up to
            // `MESSAGES_PER_TURN`: the clocks are looked at and the turn's alerts stored
            // once for them all, not once per message.
            let mut taken = 1;
            while matches!(next, Next::Continue) && taken < MESSAGES_PER_TURN {
                let Some(Some(message)) = messages.next().now_or_never() else {
                    break;
                };
                next = self.take_turn(consumer, Turn::Message(message)).await?;
                taken += 1;
            }
            self.store_alerts()?;
            if let Next::Stop = next {
                break;
            }
        }
        self.on_stop(consumer).await
    }

    /// One turn: the group changes the consumer's poll made, then what woke the loop.
    async fn take_turn(
        &mut self,
        consumer: &StreamConsumer<GroupContext>,
        turn: Turn<BorrowedMessage<'_>>,
    ) -> Result<Next, LiveError> {
        // A rebalance happens inside the consumer's poll, and the message that poll
        // returns may be of a partition just assigned: its clusters are restored
        // before the message is analysed, never after (which would replace what it
        // changed).
        self.on_group_change(consumer)?;
        Ok(match turn {
            Turn::Message(Ok(message)) => {
                self.on_message(&message).await?;
                Next::Continue
            }
            Turn::Message(Err(KafkaError::PartitionEOF(partition))) => {
                self.on_partition_end(consumer, partition)
            }
            Turn::Message(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::AutoOffsetReset,
            ))) => {
                self.on_out_of_range(consumer)?;
                Next::Continue
            }
            Turn::Message(Err(KafkaError::MessageConsumption(
                code @ (RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::GroupAuthorizationFailed),
            ))) => {
                let what = if code == RDKafkaErrorCode::TopicAuthorizationFailed {
                    format!("read on topic {}", self.config.topic)
                } else {
                    format!("the consumer group {}", self.config.group_id)
                };
                return Err(LiveError::Denied { what, code });
            }
            Turn::Message(Err(error)) => {
                Failed::new(Failure::Consumer, &error).emit(&self.metrics);
                Next::Continue
            }
            Turn::Tick => {
                self.on_tick();
                Next::Continue
            }
            Turn::Checkpoint => {
                self.on_checkpoint(consumer)?;
                Next::Continue
            }
        })
    }

    /// The wall clock reaches only the analyses of partitions read to their end (see
    /// `Analyzer::tick`): in a catch-up, what is held waits for the messages behind it, as
    /// it did when they were first read.
    fn on_tick(&mut self) {
        let now = ipaudit_runtime::clock::now_ms();
        for (cluster, analyzer) in self.analyzers.iter_mut() {
            let partition = self.partitions.partition_of(cluster);
            if partition.is_none_or(|p| self.at_end.contains(&p)) {
                let before = self.outputs.len();
                analyzer.tick(now, &mut self.outputs);
                let last = partition.and_then(|p| Some((p, self.shared.next_of(p)? - 1)));
                if let Some(last) = last {
                    self.points.turned(
                        cluster,
                        last,
                        None,
                        analyzer.lowest_held_rv(),
                        &self.outputs[before..],
                    );
                }
            }
        }
        self.report_lag();
        for summary in self.undecodable.due(Instant::now()) {
            crate::live::telemetry::UndecodableSummed(summary).log();
        }
    }

    /// Sets each owned partition's lag from its end (librdkafka's statistics) and the next
    /// offset to consume, and the estimate of the time to reach the end
    /// ([`crate::live::catch_up`]).
    fn report_lag(&mut self) {
        let high = self
            .shared
            .high_watermarks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let next = self.shared.next_offsets();
        let mut lag = 0;
        for partition in &self.owned {
            if let (Some(high), Some(next)) = (high.get(partition), next.get(partition)) {
                self.metrics.lag(*partition, high - next);
                lag += (high - next).max(0);
            }
        }
        if let Some(estimate) = self.catch_up.observe(Instant::now(), self.consumed, lag) {
            CatchingUp(estimate).emit(&self.metrics);
        }
    }
}

/// The group consumer: manual offsets (the store holds them), static membership when an
/// instance id is given, statistics for the lag, and an error rather than a silent jump
/// when a checkpointed offset is outside the log.
fn consumer(
    config: &LiveConfig,
    context: GroupContext,
) -> Result<StreamConsumer<GroupContext>, KafkaError> {
    // The runtime's group-consumer policy (manual offsets, 10 s session, 1 s heartbeats,
    // static membership with an instance id), then what only this consumer needs.
    let consumer: StreamConsumer<GroupContext> = config
        .connection
        .group_consumer(
            CLIENT_ID,
            &config.group_id,
            config.instance_id.as_deref(),
            NoOffset::Error,
        )
        .set("statistics.interval.ms", "1000")
        // Alerts within seconds: do not let the broker hold a fetch for librdkafka's 500 ms.
        .set("fetch.wait.max.ms", "100")
        // The end of a partition is where the wall clock may release what is held (and,
        // with `exit_at_end`, where a catch-up run stops).
        .set("enable.partition.eof", "true")
        .create_with_context(context)?;
    consumer.subscribe(&[&config.topic])?;
    Ok(consumer)
}
