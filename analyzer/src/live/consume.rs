//! `analyzer run`: the same core as replay, fed by a Kafka consumer group on
//! `ipaudit.events`. Offsets are checkpointed in SQLite with the analysis they correspond
//! to, and a restart resumes from there (the rebalance callback assigns partitions at the
//! stored offsets, see [`crate::live::group`]); after each checkpoint they are also committed to
//! Kafka, with each partition's rebuild point ([`crate::live::rebuild_points`]), for lag
//! monitors and for the member that takes a partition over without state (it rebuilds from
//! a snapshot at or before them). Alert transitions go to the store's outbox as they
//! happen, and from there to every sink. `/metrics`, `/healthz` and `/readyz` are served
//! on `--listen`.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipaudit_runtime::kafka::NoOffset;
use ipaudit_runtime::telemetry::InternalEvent as _;
use ipaudit_schemas::{decode_into_with, fingerprint_of, DecodeError, WatchEvent, WriterSchemas};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{watch, Notify};
use tracing::{info, warn};

use crate::analysis::engine::{Analyzer, AnalyzerConfig, Output};
use crate::analysis::ANALYSIS_FIELDS;
use crate::live::group::{GroupContext, GroupEvent, GroupShared, PartitionMap, SnapshotScan};
use crate::live::handover::{
    Checkpointed, HandoverError, HandoverReader, HandoverWriter, Outgoing, PartitionAtCheckpoint,
};
use crate::live::metrics::Metrics;
use crate::live::output_topics::{watch_output_topics, OutputTopics};
use crate::live::rebuild_points::{self, RebuildPoints};
use crate::live::sinks::{run_delivery, AlertSink, DeliveryConfig};
use crate::live::start_offset::Start;
use crate::live::store::{Store, StoreError};
use crate::live::telemetry::{
    CheckpointWritten, EventConsumed, MessageUndecodable, OffsetOutOfRange, SnapshotChoice,
    SnapshotRebuildStarted, UndecodableSummed, WriterSchemaLookedUp,
};
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

/// Runs until `shutdown` resolves; checkpoints on the way out.
pub async fn run(
    mut config: LiveConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), LiveError> {
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
    let (mut store, _) = Store::open_or_set_aside(&store_path)?;
    if let Some(ui) = &config.ui {
        let bound = crate::live::ui::serve(ui, &store_path, stop_rx.clone()).await?;
        info!(%bound, base_path = %ui.base_path, "serving the incident pages");
    }
    let mut partitions = PartitionMap::open(&store_path, &config.topic)?;
    let (restored, offsets) = restore_checkpoint(&mut store, &config.topic, &config.analyzer)?;
    let mut points = store.load_rebuild_points(&config.topic)?;
    info!(
        clusters = restored.len(),
        ?offsets,
        "checkpoint read; clusters resume as their partitions are assigned"
    );
    // Restored clusters wait here until their partition is assigned: a cluster whose
    // partition went to another instance is never ticked here.
    let mut parked = restored;
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
    let mut outgoing = match &config.handover_topic {
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
    let mut analyzers: HashMap<String, Analyzer> = HashMap::new();
    let mut owned: HashSet<i32> = HashSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut checkpoint = tokio::time::interval(config.checkpoint_interval);
    let mut outputs = Vec::new();
    let mut at_end = HashSet::new();
    let mut last_checkpoint_cost = Duration::ZERO;
    // Each message is decoded into the event analysed before (its strings reused), of the
    // fields the analysis reads.
    let mut spare: Option<Box<WatchEvent>> = None;
    let mut undecodable = UndecodableLog::default();
    // Newer collectors' schemas, learnt from the schemas topic when a message names one.
    let mut learnt = WriterSchemas::new();
    let mut schema_topic =
        SchemaTopic::new(config.connection.clone(), config.schemas_topic.clone());
    // What a group change (or a partition dropped) touches, borrowed from the loop's state.
    macro_rules! group_state {
        () => {
            GroupState {
                store: &mut store,
                topic: &config.topic,
                analyzer_config: &config.analyzer,
                analyzers: &mut analyzers,
                parked: &mut parked,
                owned: &mut owned,
                partitions: &mut partitions,
                metrics: &metrics,
                shared: &shared,
                points: &mut points,
                outgoing: outgoing.as_mut(),
                sinks: &sink_names,
                stored: &stored,
            }
        };
    }
    loop {
        let turn = tokio::select! {
            message = consumer.recv() => Turn::Message(message),
            _ = tick.tick() => Turn::Tick,
            _ = checkpoint.tick() => Turn::Checkpoint,
            _ = &mut shutdown => break,
        };
        // A rebalance happens inside the consumer's poll, and the message that poll
        // returns may be of a partition just assigned: its clusters are restored before
        // the message is analysed, never after (which would replace what it changed).
        let group_events = shared.take_events();
        let group_changed = !group_events.is_empty();
        let mut started_without_state = false;
        for event in group_events {
            started_without_state |= apply_group_event(event, group_state!())?;
        }
        if group_changed {
            at_end.retain(|partition| owned.contains(partition));
        }
        if started_without_state {
            // Where a partition without state starts is kept before anything of it is
            // analysed (see `live::group`): a restart resumes from there.
            save(&mut store, &config.topic, &analyzers, &shared, &points)?;
            commit_offsets(&consumer, &config.topic, &owned, &shared, &points);
        }
        match turn {
            Turn::Message(Ok(message)) => {
                let (partition, offset) = (message.partition(), message.offset());
                let mut event = spare
                    .take()
                    .unwrap_or_else(|| Box::new(WatchEvent::blank()));
                let mut decoded = message.payload().map(|payload| {
                    decode_into_with(payload, &ANALYSIS_FIELDS, &mut *event, &learnt)
                });
                if let Some(Err(DecodeError::UnknownFingerprint { fingerprint, .. })) = decoded {
                    let payload = message.payload().unwrap_or_default();
                    if learn_writer_schema(&mut schema_topic, payload, &mut learnt, &metrics).await
                    {
                        tracing::debug!(fingerprint, "decoding again with the learnt schema");
                        decoded = Some(decode_into_with(
                            payload,
                            &ANALYSIS_FIELDS,
                            &mut *event,
                            &learnt,
                        ));
                    }
                }
                match decoded {
                    Some(Ok(())) => {
                        let span = tracing::debug_span!(
                            "consume",
                            partition,
                            offset,
                            cluster = %event.cluster_id,
                            stream = event.stream.as_str(),
                            object = %event.object_key(),
                            resource_version = %event.resource_version,
                        );
                        let _entered = span.enter();
                        EventConsumed {
                            stream: event.stream,
                            event_type: event.event_type,
                        }
                        .emit(&metrics);
                        if let Some(remediation) = event.remediation.as_deref() {
                            store.record_cleanup(remediation)?;
                        }
                        let cluster = event.cluster_id.clone();
                        if !analyzers.contains_key(&cluster) {
                            partitions.seen(&cluster, partition)?;
                            analyzers
                                .insert(cluster.clone(), Analyzer::new(config.analyzer.clone()));
                        }
                        if let Some(analyzer) = analyzers.get_mut(&cluster) {
                            let before = outputs.len();
                            let version = event.resource_version_num;
                            analyzer.step(event, &mut outputs);
                            spare = analyzer.take_spare();
                            points.turned(
                                &cluster,
                                (partition, offset),
                                version,
                                analyzer.lowest_held_rv(),
                                &outputs[before..],
                            );
                        }
                    }
                    Some(Err(error)) => {
                        spare = Some(event);
                        let fingerprint = message
                            .payload()
                            .and_then(fingerprint_of)
                            .map(u64::from_le_bytes);
                        MessageUndecodable {
                            partition,
                            offset,
                            error: &error,
                            line: undecodable.see((partition, fingerprint), offset, Instant::now()),
                        }
                        .emit(&metrics);
                        store.dead_letter(
                            &config.topic,
                            partition,
                            offset,
                            &error.to_string(),
                            message.payload(),
                        )?;
                    }
                    None => {
                        spare = Some(event);
                        MessageUndecodable {
                            partition,
                            offset,
                            error: &"empty message",
                            line: undecodable.see((partition, None), offset, Instant::now()),
                        }
                        .emit(&metrics);
                        store.dead_letter(
                            &config.topic,
                            partition,
                            offset,
                            "empty message",
                            None,
                        )?;
                    }
                }
                shared.set_next(partition, offset + 1);
                at_end.remove(&partition);
            }
            Turn::Message(Err(KafkaError::PartitionEOF(partition))) => {
                at_end.insert(partition);
                metrics.lag(partition, 0);
                let assigned = consumer
                    .assignment()
                    .map(|a| a.count())
                    .unwrap_or(usize::MAX);
                if config.exit_at_end && at_end.len() >= assigned {
                    info!("every assigned partition read to its end");
                    for analyzer in analyzers.values_mut() {
                        analyzer.finish(None, &mut outputs);
                    }
                    store_alerts(&mut store, &mut outputs, &stored, &metrics)?;
                    break;
                }
            }
            Turn::Message(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::AutoOffsetReset,
            ))) => {
                // A checkpointed offset outside the log (retention deleted what it
                // points to): the state it goes with cannot be continued.
                let out_of_range =
                    out_of_range_partitions(&consumer, &config.topic, &owned, &shared);
                let mut rebuilds = HashMap::new();
                for partition in out_of_range {
                    drop_partition(group_state!(), partition)?;
                    let start = rebuild_start(&config, partition, &metrics);
                    OffsetOutOfRange { partition, start }.emit(&metrics);
                    let offset = match start {
                        Start::Snapshot(n) | Start::Checkpoint(n) | Start::Handover(n) => {
                            shared.set_next(partition, n);
                            Offset::Offset(n)
                        }
                        Start::Beginning => Offset::Beginning,
                    };
                    rebuilds.insert(partition, offset);
                }
                if !rebuilds.is_empty() {
                    reassign(&consumer, &config.topic, &owned, &shared, &rebuilds);
                }
            }
            Turn::Message(Err(KafkaError::MessageConsumption(
                code @ (RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::GroupAuthorizationFailed),
            ))) => {
                let what = if code == RDKafkaErrorCode::TopicAuthorizationFailed {
                    format!("read on topic {}", config.topic)
                } else {
                    format!("the consumer group {}", config.group_id)
                };
                return Err(LiveError::Denied { what, code });
            }
            Turn::Message(Err(error)) => warn!(%error, "consumer error"),
            Turn::Tick => {
                // The wall clock reaches only the analyses of partitions read to their
                // end (see `Analyzer::tick`): in a catch-up, what is held waits for the
                // messages behind it, as it did when they were first read.
                let now = ipaudit_runtime::clock::now_ms();
                for (cluster, analyzer) in analyzers.iter_mut() {
                    let partition = partitions.partition_of(cluster);
                    if partition.is_none_or(|p| at_end.contains(&p)) {
                        let before = outputs.len();
                        analyzer.tick(now, &mut outputs);
                        let last = partition.and_then(|p| Some((p, shared.next_of(p)? - 1)));
                        if let Some(last) = last {
                            points.turned(
                                cluster,
                                last,
                                None,
                                analyzer.lowest_held_rv(),
                                &outputs[before..],
                            );
                        }
                    }
                }
                report_lag(&owned, &shared, &metrics);
                for summary in undecodable.due(Instant::now()) {
                    UndecodableSummed(summary).log();
                }
            }
            Turn::Checkpoint => {
                // A checkpoint costs time in proportion to the state: never spend more than
                // a tenth of the time on them.
                if last_checkpoint_cost * 10 <= config.checkpoint_interval {
                    let span = tracing::debug_span!("checkpoint", topic = %config.topic, clusters = analyzers.len());
                    let _entered = span.enter();
                    let started = std::time::Instant::now();
                    let states = save(&mut store, &config.topic, &analyzers, &shared, &points)?;
                    store.forget_resolved_incidents(config.incident_retention)?;
                    last_checkpoint_cost = started.elapsed();
                    let due = outgoing.as_mut().is_some_and(|o| o.due(started));
                    if let Some(outgoing) = outgoing.as_mut().filter(|_| due) {
                        let owned: Vec<i32> = owned.iter().copied().collect();
                        let picked = pick_handovers(
                            &owned,
                            false,
                            &states,
                            &partitions,
                            &shared,
                            &store,
                            &sink_names,
                            &points,
                            outgoing,
                        )?;
                        outgoing.write(states, picked);
                    }
                    CheckpointWritten {
                        clusters: analyzers.len(),
                        took: last_checkpoint_cost,
                    }
                    .emit(&metrics);
                    commit_offsets(&consumer, &config.topic, &owned, &shared, &points);
                    for (cluster, analyzer) in &analyzers {
                        metrics.analysis_problems(cluster, &analyzer.stats());
                    }
                } else {
                    last_checkpoint_cost =
                        last_checkpoint_cost.saturating_sub(config.checkpoint_interval / 10);
                }
            }
        }
        store_alerts(&mut store, &mut outputs, &stored, &metrics)?;
    }
    let states = save(&mut store, &config.topic, &analyzers, &shared, &points)?;
    commit_offsets(&consumer, &config.topic, &owned, &shared, &points);
    if let Some(outgoing) = outgoing.as_mut() {
        // The member that takes these partitions over resumes exactly here.
        let owned: Vec<i32> = owned.iter().copied().collect();
        let picked = pick_handovers(
            &owned,
            true,
            &states,
            &partitions,
            &shared,
            &store,
            &sink_names,
            &points,
            outgoing,
        )?;
        outgoing.write(states, picked);
        outgoing.finish(HANDOVER_AT_STOP).await;
    }
    let _ = stop.send(true);
    for delivery in deliveries {
        if let Ok(Err(error)) = delivery.await {
            warn!(%error, "a sink stopped with an error");
        }
    }
    Ok(())
}

/// How long a stopping analyzer waits for its last handovers to be written.
const HANDOVER_AT_STOP: Duration = Duration::from_secs(15);

/// What woke the consume loop.
enum Turn<M> {
    /// The consumer returned a message or an error.
    Message(Result<M, KafkaError>),
    /// The wall clock ticked.
    Tick,
    /// A checkpoint is due.
    Checkpoint,
}

/// Reads the schemas topic for the schema `payload` names, unless it was read for it
/// lately; whether the schema is known now.
async fn learn_writer_schema(
    schema_topic: &mut SchemaTopic,
    payload: &[u8],
    learnt: &mut WriterSchemas,
    metrics: &Metrics,
) -> bool {
    let Some(fingerprint) = fingerprint_of(payload) else {
        return false;
    };
    let number = u64::from_le_bytes(fingerprint);
    match schema_topic.learn_for(fingerprint, learnt).await {
        Ok(None) => false,
        Ok(Some(lookup)) => {
            let found = learnt.knows::<WatchEvent>(&fingerprint);
            WriterSchemaLookedUp {
                fingerprint: number,
                outcome: Ok(&lookup),
                found,
            }
            .emit(metrics);
            found
        }
        Err(error) => {
            WriterSchemaLookedUp {
                fingerprint: number,
                outcome: Err(&error),
                found: false,
            }
            .emit(metrics);
            false
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

/// What applying a group change touches.
struct GroupState<'a> {
    store: &'a mut Store,
    topic: &'a str,
    analyzer_config: &'a AnalyzerConfig,
    analyzers: &'a mut HashMap<String, Analyzer>,
    parked: &'a mut HashMap<String, Analyzer>,
    owned: &'a mut HashSet<i32>,
    partitions: &'a mut PartitionMap,
    metrics: &'a Metrics,
    shared: &'a GroupShared,
    points: &'a mut RebuildPoints,
    outgoing: Option<&'a mut Outgoing>,
    sinks: &'a [String],
    stored: &'a Notify,
}

impl GroupState<'_> {
    /// Checkpoints every analysis this member holds (see [`save`]).
    fn save(&mut self) -> Result<Checkpointed, StoreError> {
        save(
            self.store,
            self.topic,
            self.analyzers,
            self.shared,
            self.points,
        )
    }
}

/// Restores the clusters of newly assigned partitions (from the checkpoint read at start,
/// else from the store), and checkpoints and drops those of revoked ones. Returns whether
/// a partition was assigned without state here (it starts at a snapshot or its start).
fn apply_group_event(event: GroupEvent, mut state: GroupState<'_>) -> Result<bool, LiveError> {
    let mut without_state = false;
    match event {
        GroupEvent::Revoked(revoked) => {
            let states = state.save()?;
            if let Some(outgoing) = state.outgoing.as_deref_mut() {
                // Whoever is given these partitions resumes here (when this write lands
                // before it reads; else from the write before, and reads the rest again).
                let picked = pick_handovers(
                    &revoked,
                    true,
                    &states,
                    state.partitions,
                    state.shared,
                    state.store,
                    state.sinks,
                    state.points,
                    outgoing,
                )?;
                outgoing.write(states, picked);
                for partition in &revoked {
                    outgoing.forget(*partition);
                }
            }
            for partition in revoked {
                state.owned.remove(&partition);
                state.metrics.partition_revoked(partition);
                let gone: Vec<String> = state
                    .analyzers
                    .keys()
                    .filter(|c| state.partitions.partition_of(c) == Some(partition))
                    .cloned()
                    .collect();
                for cluster in gone {
                    state.analyzers.remove(&cluster);
                    state.metrics.cluster_dropped(&cluster);
                }
            }
        }
        GroupEvent::Assigned(starts) => {
            let mut from_store = None;
            for (partition, start) in starts {
                state.owned.insert(partition);
                state.metrics.partition_assigned(partition);
                if let Start::Handover(_) = start {
                    take_over(&mut state, partition)?;
                    without_state = true;
                    continue;
                }
                if !matches!(start, Start::Checkpoint(_)) {
                    // No state here: what the partition holds is rebuilt from `start`.
                    state.points.forget_partition(partition);
                    without_state = true;
                    continue;
                }
                let waiting: Vec<String> = state
                    .parked
                    .keys()
                    .filter(|c| state.partitions.belongs(c, partition))
                    .cloned()
                    .collect();
                for cluster in waiting {
                    if let Some(analyzer) = state.parked.remove(&cluster) {
                        resume(state.metrics, state.analyzers, cluster, analyzer);
                    }
                }
                // Clusters checkpointed here before the partition went away and came back.
                let states = match &from_store {
                    Some(states) => states,
                    None => from_store.insert(state.store.load_checkpoint(state.topic)?.0),
                };
                for (cluster, bytes) in states {
                    if state.analyzers.contains_key(cluster)
                        || state.partitions.partition_of(cluster) != Some(partition)
                    {
                        continue;
                    }
                    match Analyzer::from_checkpoint(bytes, state.analyzer_config.clone()) {
                        Ok(analyzer) => {
                            resume(state.metrics, state.analyzers, cluster.clone(), analyzer)
                        }
                        Err(error) => {
                            warn!(%error, %cluster, partition, "cannot read this cluster's checkpoint")
                        }
                    }
                }
            }
            // Whatever is still parked belongs to partitions another instance owns.
            state.parked.clear();
        }
    }
    Ok(without_state)
}

/// Puts in place the analyses of `partition` as its previous owner handed them over
/// (read by the rebalance callback), with its rebuild points, and the transitions that
/// owner had not delivered into this member's outbox, under their own ids.
fn take_over(state: &mut GroupState<'_>, partition: i32) -> Result<(), LiveError> {
    state.points.forget_partition(partition);
    let Some(over) = state.shared.take_over(partition) else {
        return Ok(());
    };
    state.points.adopt(over.points);
    for (cluster, analyzer) in over.analyzers {
        // Whatever this member checkpointed of it before is older than the handover.
        state.parked.remove(&cluster);
        state.partitions.seen(&cluster, partition)?;
        resume(state.metrics, state.analyzers, cluster, analyzer);
    }
    if !over.undelivered.is_empty() && state.store.add_transitions(&over.undelivered)? > 0 {
        state.stored.notify_waiters();
    }
    if let Some(outgoing) = state.outgoing.as_deref() {
        outgoing.inherit(partition, over.writes);
    }
    Ok(())
}

/// What the handovers of `partitions` are made of at this checkpoint: those whose
/// analysis moved since their last write, or all of them with `force`.
#[allow(clippy::too_many_arguments)]
fn pick_handovers(
    partitions: &[i32],
    force: bool,
    states: &Checkpointed,
    cluster_partitions: &PartitionMap,
    shared: &GroupShared,
    store: &Store,
    sinks: &[String],
    points: &RebuildPoints,
    outgoing: &Outgoing,
) -> Result<Vec<PartitionAtCheckpoint>, StoreError> {
    let next = shared.next_offsets();
    let undelivered = store.undelivered(sinks)?;
    let mut picked = Vec::new();
    for partition in partitions {
        let Some(next_offset) = next.get(partition).copied() else {
            continue;
        };
        let clusters: Vec<usize> = states
            .iter()
            .enumerate()
            .filter(|(_, (cluster, _))| {
                cluster_partitions.partition_of(cluster) == Some(*partition)
            })
            .map(|(i, _)| i)
            .collect();
        let owed: Vec<ipaudit_schemas::Alert> = undelivered
            .iter()
            .filter(|a| cluster_partitions.partition_of(&a.cluster_id) == Some(*partition))
            .cloned()
            .collect();
        if !force && !outgoing.changed(*partition, next_offset, owed.len()) {
            continue;
        }
        picked.push(PartitionAtCheckpoint {
            partition: *partition,
            next_offset,
            clusters,
            undelivered: owed,
            points: points
                .rows()
                .filter(|p| p.partition == *partition)
                .collect(),
        });
    }
    Ok(picked)
}

fn resume(
    metrics: &Metrics,
    analyzers: &mut HashMap<String, Analyzer>,
    cluster: String,
    analyzer: Analyzer,
) {
    for alert in analyzer.active_alerts().iter() {
        metrics.alert(alert);
    }
    metrics.analysis_restored(&cluster, &analyzer.stats());
    info!(%cluster, "cluster resumed from the checkpoint");
    analyzers.insert(cluster, analyzer);
}

/// Drops a partition's clusters (memory and checkpoint) before it is rebuilt.
fn drop_partition(mut state: GroupState<'_>, partition: i32) -> Result<(), LiveError> {
    let gone: Vec<String> = state
        .analyzers
        .keys()
        .filter(|c| state.partitions.partition_of(c) == Some(partition))
        .cloned()
        .collect();
    for cluster in &gone {
        state.analyzers.remove(cluster);
        state.metrics.cluster_dropped(cluster);
    }
    state.shared.forget_next(partition);
    state.points.forget_partition(partition);
    // The rebuilt analyses overwrite the dropped ones at the next checkpoint (same ids).
    state.save()?;
    Ok(())
}

/// Where a partition whose offset is outside the log starts again.
fn rebuild_start(config: &LiveConfig, partition: i32, metrics: &Metrics) -> Start {
    if !config.start_at_snapshot {
        return Start::Beginning;
    }
    let found = crate::live::group::blocking(|| {
        crate::live::start_offset::first_snapshot_offset(
            &config.connection,
            &config.topic,
            partition,
        )
    });
    match found {
        Ok(offset) => {
            SnapshotRebuildStarted {
                partition,
                offset,
                chosen: SnapshotChoice::FirstAfterGap,
            }
            .emit(metrics);
            Start::Snapshot(offset)
        }
        Err(error) => {
            warn!(%error, partition, "cannot find a snapshot after the gap; reading the partition from its start");
            Start::Beginning
        }
    }
}

/// The owned partitions whose next offset lies outside [log start, log end].
fn out_of_range_partitions(
    consumer: &StreamConsumer<GroupContext>,
    topic: &str,
    owned: &HashSet<i32>,
    shared: &GroupShared,
) -> Vec<i32> {
    let next = shared.next_offsets();
    let mut out = Vec::new();
    for partition in owned {
        let Some(offset) = next.get(partition).copied() else {
            continue;
        };
        let marks = crate::live::group::blocking(|| {
            consumer.fetch_watermarks(topic, *partition, Duration::from_secs(10))
        });
        match marks {
            Ok((low, high)) if offset < low || offset > high => out.push(*partition),
            Ok(_) => {}
            Err(error) => warn!(%error, partition, "cannot read the partition's bounds"),
        }
    }
    out
}

/// Assigns the owned partitions again, `rebuilds` at their rebuild offset and the others
/// at their next offset. A partition whose fetch stopped at an offset outside the log is in
/// an error state in which librdkafka refuses a seek ("Erroneous state"); a new
/// assignment starts its fetch afresh.
fn reassign(
    consumer: &StreamConsumer<GroupContext>,
    topic: &str,
    owned: &HashSet<i32>,
    shared: &GroupShared,
    rebuilds: &HashMap<i32, Offset>,
) {
    let next = shared.next_offsets();
    let mut list = TopicPartitionList::new();
    for partition in owned {
        let offset = rebuilds.get(partition).copied().unwrap_or_else(|| {
            next.get(partition)
                .map_or(Offset::Beginning, |n| Offset::Offset(*n))
        });
        if let Err(error) = list.add_partition_offset(topic, *partition, offset) {
            warn!(%error, partition, "cannot set the rebuild offset");
        }
    }
    if let Err(error) = consumer.assign(&list) {
        warn!(%error, "cannot assign the partitions again at their rebuild offsets");
    }
}

/// Sets each owned partition's lag from its end (librdkafka's statistics) and the next
/// offset to consume.
fn report_lag(owned: &HashSet<i32>, shared: &GroupShared, metrics: &Metrics) {
    let high = shared
        .high_watermarks
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let next = shared.next_offsets();
    for partition in owned {
        if let (Some(high), Some(next)) = (high.get(partition), next.get(partition)) {
            metrics.lag(*partition, high - next);
        }
    }
}

/// Commits the checkpointed offsets of the owned partitions to Kafka, each with its
/// rebuild point in the metadata when an alert of it fires: for lag tools, and for the
/// member that takes a partition over without state (this member's own restart resumes
/// from the store, not from Kafka).
fn commit_offsets(
    consumer: &StreamConsumer<GroupContext>,
    topic: &str,
    owned: &HashSet<i32>,
    shared: &GroupShared,
    points: &RebuildPoints,
) {
    let next = shared.next_offsets();
    let mut list = TopicPartitionList::new();
    for partition in owned {
        if let Some(offset) = next.get(partition) {
            let mut element = list.add_partition(topic, *partition);
            let _ = element.set_offset(Offset::Offset(*offset));
            if let Some(point) = points.of_partition(*partition).filter(|p| p < offset) {
                element.set_metadata(rebuild_points::to_metadata(point));
            }
        }
    }
    if list.count() > 0 {
        if let Err(error) = consumer.commit(&list, CommitMode::Async) {
            warn!(%error, "cannot commit offsets to Kafka (lag monitors will lag)");
        }
    }
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
        match Analyzer::from_checkpoint(&state, config.clone()) {
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

/// Puts the alert transitions of `outputs` in the store's outbox and wakes the sinks.
fn store_alerts(
    store: &mut Store,
    outputs: &mut Vec<Output>,
    stored: &Notify,
    metrics: &Metrics,
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
    for alert in &alerts {
        metrics.alert(alert);
    }
    if !alerts.is_empty() && store.add_transitions(&alerts)? > 0 {
        stored.notify_waiters();
    }
    Ok(())
}

/// Checkpoints every analysis with the offsets and rebuild points; returns the states
/// written (for the handovers).
fn save(
    store: &mut Store,
    topic: &str,
    analyzers: &HashMap<String, Analyzer>,
    shared: &GroupShared,
    points: &RebuildPoints,
) -> Result<Checkpointed, StoreError> {
    let offsets = shared.next_offsets();
    let states: Vec<(String, Vec<u8>)> = analyzers
        .iter()
        .map(|(c, a)| (c.clone(), a.checkpoint()))
        .collect();
    store.checkpoint(
        topic,
        states.iter().map(|(c, s)| (c.as_str(), s.as_slice())),
        &offsets,
        points,
    )?;
    Ok(Arc::new(states))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_checkpoint_is_set_aside_whole_and_rebuilt_from_the_topic() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("analyzer.db")).unwrap();
        let config = AnalyzerConfig::default();
        let good = Analyzer::new(config.clone()).checkpoint();
        // The shape of a checkpoint written before issue 8 (per-kind maps, no rules).
        let old = br#"{"dedupe":{},"state":{"ips":{},"subnets":{},"pods":{}},"timers":{}}"#;
        let offsets = HashMap::from([(0, 42)]);
        store
            .checkpoint(
                "t",
                [("a", &good[..]), ("b", &old[..])],
                &offsets,
                &Default::default(),
            )
            .unwrap();
        let (analyzers, kept) = restore_checkpoint(&mut store, "t", &config).unwrap();
        assert!(analyzers.is_empty() && kept.is_empty());
        let (states, kept) = store.load_checkpoint("t").unwrap();
        assert!(
            states.is_empty() && kept.is_empty(),
            "set aside, not read again"
        );
        store
            .checkpoint("t", [("a", &good[..])], &offsets, &Default::default())
            .unwrap();
        let (analyzers, kept) = restore_checkpoint(&mut store, "t", &config).unwrap();
        assert_eq!(analyzers.len(), 1);
        assert_eq!(kept, offsets);
    }
}
