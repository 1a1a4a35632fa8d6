//! What the live analyzer tells its operator, one typed event per fact: each struct's
//! [`InternalEvent::emit`] writes the log line (structured fields, inside the caller's span)
//! and moves the metric in [`Metrics`] together, so that no site logs a failure and forgets
//! to count it. Only the live path emits them: the pure core (engine, state, rules) and
//! replay stay free of logging per event, as their speed is a benchmark target.

use std::fmt::Display;
use std::time::Duration;

use ipaudit_runtime::telemetry::{EventLabels, InternalEvent};
use ipaudit_schemas::{EventType, Stream};
use tracing::{debug, info, trace, warn};

use crate::live::metrics::{KindLabels, Metrics, SinkFailureLabels};
use crate::live::start_offset::Start;
use crate::live::undecodable_log::{Line, Summary};
use crate::live::writer_schemas::{Lookup, SchemaTopicError};

/// A watch event was read from the events topic and handed to its cluster's analysis.
pub struct EventConsumed {
    /// Its stream.
    pub stream: Stream,
    /// Its type.
    pub event_type: EventType,
}

impl InternalEvent for EventConsumed {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        trace!(
            stream = self.stream.as_str(),
            event_type = self.event_type.as_str(),
            "event consumed"
        );
        metrics
            .events
            .get_or_create(&EventLabels::new(
                self.stream.as_str(),
                self.event_type.as_str(),
            ))
            .inc();
    }
}

/// A message of the events topic is no watch event (or empty): kept as a dead letter.
pub struct MessageUndecodable<'a> {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Why it does not decode.
    pub error: &'a dyn Display,
    /// What to log of it ([`crate::live::undecodable_log`]).
    pub line: Line,
}

impl InternalEvent for MessageUndecodable<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        match self.line {
            Line::First => {
                warn!(error = %self.error, partition = self.partition, offset = self.offset,
                "undecodable message kept as a dead letter (more like it, of this partition and schema, are summed up every 10 s)")
            }
            Line::Summary(summary) => UndecodableSummed(summary).log(),
            Line::Counted => {
                debug!(error = %self.error, partition = self.partition, offset = self.offset,
                "undecodable message kept as a dead letter")
            }
        }
        dead_letter(metrics, "message");
        metrics
            .input_problems
            .get_or_create(&KindLabels {
                kind: "undecodable".into(),
            })
            .inc();
    }
}

/// Undecodable messages of one partition and schema that were not logged one by one.
pub struct UndecodableSummed(pub Summary);

impl UndecodableSummed {
    /// Logs the summary (its messages were counted as they came).
    pub fn log(self) {
        let s = self.0;
        let fingerprint = s.fingerprint.map(|f| format!("{f:016x}"));
        warn!(
            partition = s.partition,
            fingerprint = fingerprint.as_deref().unwrap_or("none"),
            count = s.count,
            first_offset = s.first_offset,
            last_offset = s.last_offset,
            "more undecodable messages kept as dead letters"
        );
    }
}

/// The schemas topic was read for a message of a schema this build does not carry.
pub struct WriterSchemaLookedUp<'a> {
    /// The message's fingerprint, as its decode error prints it.
    pub fingerprint: u64,
    /// What the read learnt, or why it failed.
    pub outcome: Result<&'a Lookup, &'a SchemaTopicError>,
    /// Whether the fingerprint is known after it.
    pub found: bool,
}

impl InternalEvent for WriterSchemaLookedUp<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        let fingerprint = format!("{:016x}", self.fingerprint);
        let result = match self.outcome {
            Ok(lookup) => {
                for refused in &lookup.refused {
                    warn!(%refused, "schemas topic record refused");
                }
                if self.found {
                    info!(%fingerprint, learnt = lookup.learnt,
                        "writer schema learnt from the schemas topic: its messages are read by resolution to this build's schema");
                    "found"
                } else {
                    warn!(%fingerprint, learnt = lookup.learnt,
                        "the schemas topic has no schema for this fingerprint: its messages are kept as dead letters");
                    "not_found"
                }
            }
            Err(error) => {
                warn!(%fingerprint, error = %error,
                    "cannot read the schemas topic: messages of this schema are kept as dead letters");
                "failed"
            }
        };
        metrics
            .writer_schema_lookups
            .get_or_create(&crate::live::metrics::ResultLabels {
                result: result.into(),
            })
            .inc();
    }
}

/// A checkpointed offset lies outside the partition's log (retention deleted what it
/// points to, or the topic was recreated): the partition is rebuilt from `start`.
pub struct OffsetOutOfRange {
    /// The partition.
    pub partition: i32,
    /// Where it starts again.
    pub start: Start,
}

impl InternalEvent for OffsetOutOfRange {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(partition = self.partition, start = ?self.start,
            "checkpointed offset is outside the log; rebuilding the partition");
        metrics
            .offset_out_of_range
            .get_or_create(&crate::live::metrics::partition_labels(self.partition))
            .inc();
    }
}

/// A partition without local state starts at its latest snapshot.
pub struct SnapshotRebuildStarted {
    /// The partition.
    pub partition: i32,
    /// The offset of the snapshot's start.
    pub offset: i64,
    /// Which snapshot it is.
    pub chosen: SnapshotChoice,
}

/// Why a rebuild starts at the snapshot it starts at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotChoice {
    /// The group never consumed the partition: its latest snapshot.
    Latest,
    /// The group consumed it up to this committed offset: the latest snapshot at or
    /// before it.
    AtOrBefore(i64),
    /// Alerts of the partition still fire: the latest snapshot at or before the rebuild
    /// point committed with the offset, so that they fire again under their ids.
    BeforeFiring {
        /// The committed offset.
        committed: i64,
        /// The rebuild point committed with it.
        rebuild_from: i64,
    },
    /// What the checkpoint pointed to was deleted: the first snapshot after the gap.
    FirstAfterGap,
}

impl InternalEvent for SnapshotRebuildStarted {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        let (partition, offset) = (self.partition, self.offset);
        match self.chosen {
            SnapshotChoice::Latest => info!(
                partition,
                offset, "no local state: rebuilding from the latest snapshot"
            ),
            SnapshotChoice::AtOrBefore(committed) => info!(
                partition,
                offset,
                committed,
                "no local state: rebuilding from the snapshot at or before the group's committed offset"
            ),
            SnapshotChoice::BeforeFiring {
                committed,
                rebuild_from,
            } => info!(
                partition,
                offset,
                committed,
                rebuild_from,
                "no local state: rebuilding from the snapshot at or before the rebuild point of the alerts still firing"
            ),
            SnapshotChoice::FirstAfterGap => info!(
                partition,
                offset, "rebuilding from the first snapshot after the gap"
            ),
        }
        metrics
            .rebuilds
            .get_or_create(&crate::live::metrics::partition_labels(self.partition))
            .inc();
    }
}

/// The group gave this instance partitions.
pub struct PartitionsAssigned<'a> {
    /// Each partition and where it starts.
    pub starts: &'a [(i32, Start)],
}

impl InternalEvent for PartitionsAssigned<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        info!(starts = ?self.starts, "partitions assigned");
        metrics.assigned(self.starts.len());
    }
}

/// The group took this instance's partitions away (a rebalance).
pub struct PartitionsRevoked<'a> {
    /// The partitions.
    pub partitions: &'a [i32],
}

impl InternalEvent for PartitionsRevoked<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        info!(partitions = ?self.partitions, "partitions revoked");
        metrics.assigned(0);
    }
}

/// Every analysis and its offsets were written to the store.
pub struct CheckpointWritten {
    /// The clusters checkpointed.
    pub clusters: usize,
    /// How long it took.
    pub took: Duration,
}

impl InternalEvent for CheckpointWritten {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        debug!(clusters = self.clusters, took = ?self.took, "checkpoint written");
        metrics.checkpoint.observe(self.took.as_secs_f64());
    }
}

/// A delivery to a sink failed in a way that may pass: it is retried.
pub struct SinkDeliveryFailed<'a> {
    /// The sink's redacted name.
    pub sink: &'a str,
    /// What failed.
    pub error: &'a dyn Display,
    /// When it is tried again (`None`: at the next periodic re-send of firing alerts).
    pub retry_in: Option<Duration>,
}

impl InternalEvent for SinkDeliveryFailed<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        match self.retry_in {
            Some(retry_in) => {
                warn!(sink = %self.sink, error = %self.error, ?retry_in, "delivery failed; retrying")
            }
            None => {
                warn!(sink = %self.sink, error = %self.error, "re-sending a firing alert failed")
            }
        }
        sink_failure(metrics, self.sink, "transient");
    }
}

/// A sink refused a transition for good (or it could not be read back from the store):
/// it is dead-lettered and the next ones go on.
pub struct TransitionDeadLettered<'a> {
    /// The sink's redacted name.
    pub sink: &'a str,
    /// The transition's id (`seq N` when it could not be read).
    pub transition: &'a str,
    /// Why.
    pub error: &'a dyn Display,
}

impl InternalEvent for TransitionDeadLettered<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(sink = %self.sink, transition = %self.transition, error = %self.error,
            "the transition cannot be delivered; dead-lettered, the next ones go on");
        sink_failure(metrics, self.sink, "permanent");
        dead_letter(metrics, "transition");
    }
}

fn sink_failure(metrics: &Metrics, sink: &str, kind: &str) {
    metrics
        .sink_failures
        .get_or_create(&SinkFailureLabels {
            sink: sink.into(),
            kind: kind.into(),
        })
        .inc();
}

fn dead_letter(metrics: &Metrics, kind: &str) {
    metrics
        .dead_letters
        .get_or_create(&KindLabels { kind: kind.into() })
        .inc();
}

/// A partition's handover was written to the checkpoints topic.
pub struct HandoverWritten(pub crate::live::handover::Written);

impl InternalEvent for HandoverWritten {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        let w = self.0;
        debug!(
            partition = w.partition,
            bytes = w.bytes,
            chunks = w.chunks,
            tombstones = w.tombstones,
            took = ?w.took,
            "handover written"
        );
        metrics.handovers_written.inc();
        metrics.handover_written_bytes.inc_by(w.bytes as u64);
    }
}

/// A partition's handover could not be written: the next interval writes it again (a
/// member that takes the partition over meanwhile resumes from an older one, or from a
/// snapshot).
pub struct HandoverWriteFailed<'a> {
    /// The partition.
    pub partition: i32,
    /// Why.
    pub error: &'a crate::live::handover::HandoverError,
    /// Whether the write before failed too: a failure streak (a missing topic, Kafka down)
    /// is logged as a warning once, then at debug level; each failure is counted.
    pub repeated: bool,
}

impl InternalEvent for HandoverWriteFailed<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        if self.repeated {
            debug!(
                partition = self.partition,
                error = %self.error,
                reason = self.error.kind(),
                "cannot write the partition's handover (still)"
            );
        } else {
            warn!(
                partition = self.partition,
                error = %self.error,
                reason = self.error.kind(),
                "cannot write the partition's handover; writing it again at the next interval (further failures at debug level until one succeeds)"
            );
        }
        metrics
            .handover_failures
            .get_or_create(&KindLabels {
                kind: "write".into(),
            })
            .inc();
    }
}

/// A partition was taken over from its previous owner's handover.
pub struct HandoverTaken<'a> {
    /// The partition.
    pub partition: i32,
    /// What was taken.
    pub taken: &'a crate::live::handover::TakenOver,
}

impl InternalEvent for HandoverTaken<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        let t = self.taken;
        info!(
            partition = self.partition,
            offset = t.next_offset,
            clusters = t.analyzers.len(),
            undelivered = t.undelivered.len(),
            written_by = %t.written_by,
            bytes = t.bytes,
            took = ?t.took,
            "taking the partition over from its previous owner's handover"
        );
        metrics.handovers_taken.inc();
    }
}

/// A partition's handover could not be taken: it is rebuilt from a snapshot (or its
/// start) instead.
pub struct HandoverUnusable<'a> {
    /// The partition.
    pub partition: i32,
    /// Why.
    pub error: &'a dyn Display,
}

impl InternalEvent for HandoverUnusable<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(
            partition = self.partition,
            error = %self.error,
            "cannot take the partition over from its handover; rebuilding it instead"
        );
        metrics
            .handover_failures
            .get_or_create(&KindLabels {
                kind: "take".into(),
            })
            .inc();
    }
}

/// Where the member stands against the end of its partitions, each time the rate is
/// measured ([`crate::live::catch_up`]): the estimate as a gauge, and a log line every
/// ten seconds while it is behind.
pub struct CatchingUp(pub crate::live::catch_up::Estimate);

impl InternalEvent for CatchingUp {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        let e = self.0;
        let seconds = e.remaining.map_or(f64::INFINITY, |r| r.as_secs_f64());
        if e.say {
            match e.remaining {
                Some(remaining) => info!(
                    lag = e.lag,
                    events_per_second = e.per_second.round() as u64,
                    estimate = ?Duration::from_secs(remaining.as_secs()),
                    "catching up: at the end of the partitions in about the estimate at this rate"
                ),
                None => warn!(
                    lag = e.lag,
                    "behind the end of the partitions and consuming nothing"
                ),
            }
        }
        metrics.catch_up.set(seconds);
    }
}

/// A failure the analyzer logs and goes on from, by what failed: each is logged at WARN
/// (ERROR for [`Failure::IncidentPages`]) with its error and counted in
/// `ipaudit_analyzer_failures_total{failure}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The consumer returned an error the loop has no answer of its own for.
    Consumer,
    /// librdkafka reported an error of its own.
    Librdkafka,
    /// Offsets could not be committed to Kafka: lag monitors lag (the store still says
    /// where a restart resumes).
    CommitOffsets,
    /// An assigned partition's start offset could not be set.
    StartOffset,
    /// The rebalance callback could not assign or unassign partitions.
    Assignment,
    /// No snapshot could be found: the partition is read from its start.
    SnapshotScan,
    /// A partition's bounds could not be read (the out-of-range check).
    PartitionBounds,
    /// Partitions could not be assigned again at their rebuild offsets.
    Reassignment,
    /// One cluster's checkpoint could not be read: that cluster is rebuilt.
    ClusterCheckpoint,
    /// The checkpoint could not be read: set aside whole, every cluster rebuilt.
    Checkpoint,
    /// The store file was unreadable: moved aside, a fresh store started.
    StoreSetAside,
    /// A sink's delivery task stopped with an error.
    SinkStopped,
    /// The incident pages stopped serving.
    IncidentPages,
    /// An output topic could not be looked up or created now (looked up again later).
    OutputTopic,
    /// Resource versions went backwards: a new epoch starts (also an input problem).
    NewEpoch,
}

impl ipaudit_runtime::telemetry::FailureKind for Failure {
    fn label(self) -> &'static str {
        self.as_str()
    }
    fn says(self) -> &'static str {
        self.says_text()
    }
    fn is_error(self) -> bool {
        self == Failure::IncidentPages
    }
}

/// One failure the analyzer goes on from ([`Failure`]): logged and counted in
/// `ipaudit_analyzer_failures_total{failure}`.
pub type Failed<'a> = ipaudit_runtime::telemetry::Failed<'a, Failure, Metrics>;

impl Failure {
    /// Every failure, for the counters that exist from the start.
    pub const ALL: [Failure; 15] = [
        Failure::Consumer,
        Failure::Librdkafka,
        Failure::CommitOffsets,
        Failure::StartOffset,
        Failure::Assignment,
        Failure::SnapshotScan,
        Failure::PartitionBounds,
        Failure::Reassignment,
        Failure::ClusterCheckpoint,
        Failure::Checkpoint,
        Failure::StoreSetAside,
        Failure::SinkStopped,
        Failure::IncidentPages,
        Failure::OutputTopic,
        Failure::NewEpoch,
    ];

    /// Its label.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Consumer => "consumer",
            Failure::Librdkafka => "librdkafka",
            Failure::CommitOffsets => "commit_offsets",
            Failure::StartOffset => "start_offset",
            Failure::Assignment => "assignment",
            Failure::SnapshotScan => "snapshot_scan",
            Failure::PartitionBounds => "partition_bounds",
            Failure::Reassignment => "reassignment",
            Failure::ClusterCheckpoint => "cluster_checkpoint",
            Failure::Checkpoint => "checkpoint",
            Failure::StoreSetAside => "store_set_aside",
            Failure::SinkStopped => "sink_stopped",
            Failure::IncidentPages => "incident_pages",
            Failure::OutputTopic => "output_topic",
            Failure::NewEpoch => "new_epoch",
        }
    }

    fn says_text(self) -> &'static str {
        match self {
            Failure::Consumer => "consumer error",
            Failure::Librdkafka => "librdkafka error",
            Failure::CommitOffsets => "cannot commit offsets to Kafka (lag monitors will lag)",
            Failure::StartOffset => "cannot set the start offset",
            Failure::Assignment => "cannot assign or unassign the partitions",
            Failure::SnapshotScan => "cannot find a snapshot; reading the partition from its start",
            Failure::PartitionBounds => "cannot read the partition's bounds",
            Failure::Reassignment => "cannot assign the partitions again at their rebuild offsets",
            Failure::ClusterCheckpoint => "cannot read this cluster's checkpoint; rebuilding it from the topic",
            Failure::Checkpoint => "cannot read the checkpoint: set aside; rebuilding from the topic",
            Failure::StoreSetAside => "the store file is unreadable: moved aside; starting a fresh store and rebuilding the analysis",
            Failure::SinkStopped => "a sink stopped with an error",
            Failure::IncidentPages => "the incident pages stopped",
            Failure::OutputTopic => "cannot look the topic up or create it now; retrying",
            Failure::NewEpoch => "resourceVersions went backwards: a new epoch starts",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_moves_its_own_series() {
        let metrics = Metrics::new();
        EventConsumed {
            stream: Stream::Ip,
            event_type: EventType::Added,
        }
        .emit(&metrics);
        MessageUndecodable {
            partition: 0,
            offset: 9,
            error: &"not avro",
            line: crate::live::undecodable_log::Line::First,
        }
        .emit(&metrics);
        OffsetOutOfRange {
            partition: 1,
            start: Start::Beginning,
        }
        .emit(&metrics);
        SnapshotRebuildStarted {
            partition: 2,
            offset: 40,
            chosen: SnapshotChoice::Latest,
        }
        .emit(&metrics);
        PartitionsAssigned {
            starts: &[(0, Start::Beginning), (1, Start::Checkpoint(3))],
        }
        .emit(&metrics);
        CheckpointWritten {
            clusters: 1,
            took: Duration::from_millis(3),
        }
        .emit(&metrics);
        SinkDeliveryFailed {
            sink: "log",
            error: &"refused",
            retry_in: Some(Duration::from_secs(1)),
        }
        .emit(&metrics);
        TransitionDeadLettered {
            sink: "webhook:http://h",
            transition: "t1",
            error: &"400",
        }
        .emit(&metrics);
        let text = metrics.encode();
        for expected in [
            "ipaudit_analyzer_events_total{stream=\"ip\",type=\"ADDED\"} 1",
            "ipaudit_analyzer_dead_letters_total{kind=\"message\"} 1",
            "ipaudit_analyzer_dead_letters_total{kind=\"transition\"} 1",
            "ipaudit_analyzer_input_problems_total{kind=\"undecodable\"} 1",
            "ipaudit_analyzer_offset_out_of_range_total{partition=\"1\"} 1",
            "ipaudit_analyzer_snapshot_rebuilds_total{partition=\"2\"} 1",
            "ipaudit_analyzer_assigned_partitions 2",
            "ipaudit_analyzer_checkpoint_duration_seconds_count 1",
            "ipaudit_analyzer_sink_failures_total{sink=\"log\",kind=\"transient\"} 1",
            "ipaudit_analyzer_sink_failures_total{sink=\"webhook:http://h\",kind=\"permanent\"} 1",
        ] {
            assert!(text.contains(expected), "{expected} missing in:\n{text}");
        }
        assert!(metrics.is_ready());
        PartitionsRevoked {
            partitions: &[0, 1],
        }
        .emit(&metrics);
        assert!(metrics
            .encode()
            .contains("ipaudit_analyzer_assigned_partitions 0"));
    }
}
