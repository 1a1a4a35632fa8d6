//! Checkpoints: every analysis with the offsets and rebuild points it corresponds to, in
//! one SQLite transaction, then the offsets committed to Kafka and, when due, the
//! partitions' handovers written; the alert transitions of each turn stored for the
//! sinks; and the last of all that when the member stops.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ipaudit_runtime::telemetry::InternalEvent as _;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};

use super::{ConsumeLoop, LiveError};
use crate::analysis::engine::{Analyzer, AnalyzerConfig, Output};
use crate::live::group::GroupContext;
use crate::live::handover::{Checkpointed, PartitionAtCheckpoint};
use crate::live::metrics::Metrics;
use crate::live::rebuild_points;
use crate::live::store::{Store, StoreError};
use crate::live::telemetry::{CheckpointWritten, Failed, Failure};

/// How long a stopping analyzer waits for its last handovers to be written.
const HANDOVER_AT_STOP: Duration = Duration::from_secs(15);

impl ConsumeLoop {
    /// A checkpoint is due: written unless checkpoints took more than a tenth of the time
    /// lately (a checkpoint costs time in proportion to the state), then the offsets
    /// committed and the handovers that are due written.
    pub(super) fn on_checkpoint(
        &mut self,
        consumer: &StreamConsumer<GroupContext>,
    ) -> Result<(), LiveError> {
        let interval = self.config.checkpoint_interval;
        if self.last_checkpoint_cost * 10 > interval {
            self.last_checkpoint_cost = self.last_checkpoint_cost.saturating_sub(interval / 10);
            return Ok(());
        }
        let span = tracing::debug_span!("checkpoint", topic = %self.config.topic, clusters = self.analyzers.len());
        let _entered = span.enter();
        let started = std::time::Instant::now();
        let states = self.save()?;
        self.store
            .forget_resolved_incidents(self.config.incident_retention)?;
        self.last_checkpoint_cost = started.elapsed();
        if self.outgoing.as_mut().is_some_and(|o| o.due(started)) {
            let owned: Vec<i32> = self.owned.iter().copied().collect();
            self.write_handovers(&owned, false, states)?;
        }
        CheckpointWritten {
            clusters: self.analyzers.len(),
            took: self.last_checkpoint_cost,
        }
        .emit(&self.metrics);
        self.commit_offsets(consumer);
        for (cluster, analyzer) in &self.analyzers {
            self.metrics.analysis_problems(cluster, &analyzer.stats());
        }
        Ok(())
    }

    /// The last checkpoint, commit and handovers, when the member stops: the member that
    /// takes these partitions over resumes exactly here.
    pub(super) async fn on_stop(
        &mut self,
        consumer: &StreamConsumer<GroupContext>,
    ) -> Result<(), LiveError> {
        let states = self.save()?;
        self.commit_offsets(consumer);
        let owned: Vec<i32> = self.owned.iter().copied().collect();
        self.write_handovers(&owned, true, states)?;
        if let Some(outgoing) = self.outgoing.as_mut() {
            outgoing.finish(HANDOVER_AT_STOP).await;
        }
        Ok(())
    }

    /// Checkpoints every analysis with the offsets and rebuild points; returns the states
    /// written (for the handovers).
    pub(super) fn save(&mut self) -> Result<Checkpointed, StoreError> {
        let offsets = self.shared.next_offsets();
        let states: Vec<(String, Vec<u8>)> = self
            .analyzers
            .iter()
            .map(|(c, a)| (c.clone(), a.checkpoint()))
            .collect();
        self.store.checkpoint(
            &self.config.topic,
            states.iter().map(|(c, s)| (c.as_str(), s.as_slice())),
            &offsets,
            &self.points,
        )?;
        Ok(Arc::new(states))
    }

    /// Writes the handovers of `partitions` from `states` (the checkpoint just written):
    /// those whose analysis moved since their last write, or all of them with `force`.
    pub(super) fn write_handovers(
        &mut self,
        partitions: &[i32],
        force: bool,
        states: Checkpointed,
    ) -> Result<(), StoreError> {
        let Some(outgoing) = self.outgoing.as_mut() else {
            return Ok(());
        };
        let next = self.shared.next_offsets();
        let undelivered = self.store.undelivered(&self.sink_names)?;
        let mut picked = Vec::new();
        for partition in partitions {
            let Some(next_offset) = next.get(partition).copied() else {
                continue;
            };
            let of_partition =
                |cluster: &str| self.partitions.partition_of(cluster) == Some(*partition);
            let owed: Vec<ipaudit_schemas::Alert> = undelivered
                .iter()
                .filter(|a| of_partition(&a.cluster_id))
                .cloned()
                .collect();
            if !force && !outgoing.changed(*partition, next_offset, owed.len()) {
                continue;
            }
            picked.push(PartitionAtCheckpoint {
                partition: *partition,
                next_offset,
                clusters: states
                    .iter()
                    .enumerate()
                    .filter(|(_, (cluster, _))| of_partition(cluster))
                    .map(|(i, _)| i)
                    .collect(),
                undelivered: owed,
                points: self
                    .points
                    .rows()
                    .filter(|p| p.partition == *partition)
                    .collect(),
            });
        }
        outgoing.write(states, picked);
        Ok(())
    }

    /// Commits the checkpointed offsets of the owned partitions to Kafka, each with its
    /// rebuild point in the metadata when an alert of it fires: for lag tools, and for the
    /// member that takes a partition over without a handover (this member's own restart
    /// resumes from the store, not from Kafka).
    pub(super) fn commit_offsets(&self, consumer: &StreamConsumer<GroupContext>) {
        let next = self.shared.next_offsets();
        let mut list = TopicPartitionList::new();
        for partition in &self.owned {
            if let Some(offset) = next.get(partition) {
                let mut element = list.add_partition(&self.config.topic, *partition);
                let _ = element.set_offset(Offset::Offset(*offset));
                if let Some(point) = self.points.of_partition(*partition).filter(|p| p < offset) {
                    element.set_metadata(rebuild_points::to_metadata(point));
                }
            }
        }
        if list.count() > 0 {
            if let Err(error) = consumer.commit(&list, CommitMode::Async) {
                Failed::new(Failure::CommitOffsets, &error).emit(&self.metrics);
            }
        }
    }

    /// Puts the alert transitions of this turn in the store's outbox and wakes the sinks.
    pub(super) fn store_alerts(&mut self) -> Result<(), StoreError> {
        let alerts: Vec<_> = self
            .outputs
            .drain(..)
            .filter_map(|o| match o {
                Output::Alert(alert) => Some(alert),
                Output::NewEpoch(change) => {
                    Failed::new(Failure::NewEpoch, &format_args!("{change:?}"))
                        .about(&change.collector_id)
                        .emit(&self.metrics);
                    None
                }
            })
            .collect();
        for alert in &alerts {
            self.metrics.alert(alert);
        }
        if !alerts.is_empty() && self.store.add_transitions(&alerts)? > 0 {
            self.stored.notify_waiters();
        }
        Ok(())
    }
}

/// One analysis per cluster id.
type Analyses = HashMap<String, Analyzer>;

/// The analyses and offsets of the store's checkpoint. A checkpoint this build cannot
/// read (corrupt, or of a format it does not know) is set aside whole, with a warning, so
/// that every cluster is rebuilt from the topic rather than the process stopping at every
/// start: offsets without their analysis are worthless.
pub(super) fn restore_checkpoint(
    store: &mut Store,
    topic: &str,
    config: &AnalyzerConfig,
    metrics: &Metrics,
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
                store.set_aside_checkpoint(&reason)?;
                Failed::new(Failure::Checkpoint, &error)
                    .about(&cluster)
                    .emit(metrics);
                return Ok((HashMap::new(), HashMap::new()));
            }
        }
    }
    Ok((analyzers, offsets))
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
        let (analyzers, kept) =
            restore_checkpoint(&mut store, "t", &config, &Metrics::new()).unwrap();
        assert!(analyzers.is_empty() && kept.is_empty());
        let (states, kept) = store.load_checkpoint("t").unwrap();
        assert!(
            states.is_empty() && kept.is_empty(),
            "set aside, not read again"
        );
        store
            .checkpoint("t", [("a", &good[..])], &offsets, &Default::default())
            .unwrap();
        let (analyzers, kept) =
            restore_checkpoint(&mut store, "t", &config, &Metrics::new()).unwrap();
        assert_eq!(analyzers.len(), 1);
        assert_eq!(kept, offsets);
    }
}
