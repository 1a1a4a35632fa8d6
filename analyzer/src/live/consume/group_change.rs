//! A change of this member's partitions, applied before anything else of a turn: revoked
//! partitions checkpointed, handed over and dropped; assigned ones resumed from the
//! checkpoint, taken over from a handover, or left to be rebuilt; and a checkpointed
//! offset found outside the log, answered with a rebuild from the first snapshot after the
//! gap.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use ipaudit_runtime::telemetry::InternalEvent as _;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use tracing::info;

use super::{ConsumeLoop, LiveConfig, LiveError};
use crate::analysis::engine::Analyzer;
use crate::live::group::{GroupContext, GroupEvent, GroupShared};
use crate::live::metrics::Metrics;
use crate::live::start_offset::Start;
use crate::live::telemetry::{
    Failed, Failure, OffsetOutOfRange, SnapshotChoice, SnapshotRebuildStarted,
};

impl ConsumeLoop {
    /// Applies the group changes the rebalance callback left; a partition started without
    /// state here is checkpointed (and committed) at once, before anything of it is
    /// analysed (see `live::group`): a restart resumes from there.
    pub(super) fn on_group_change(
        &mut self,
        consumer: &StreamConsumer<GroupContext>,
    ) -> Result<(), LiveError> {
        let events = self.shared.take_events();
        if events.is_empty() {
            return Ok(());
        }
        let mut started_without_state = false;
        for event in events {
            match event {
                GroupEvent::Revoked(revoked) => self.on_revoked(revoked)?,
                GroupEvent::Assigned(starts) => {
                    started_without_state |= self.on_assigned(starts)?
                }
            }
        }
        let owned = &self.owned;
        self.at_end.retain(|partition| owned.contains(partition));
        if started_without_state {
            self.save()?;
            self.commit_offsets(consumer);
        }
        Ok(())
    }

    /// Checkpoints, hands over and drops the clusters of `revoked`.
    fn on_revoked(&mut self, revoked: Vec<i32>) -> Result<(), LiveError> {
        let states = self.save()?;
        // Whoever is given these partitions resumes here (when this write lands before it
        // reads; else from the write before, and reads the rest again).
        self.write_handovers(&revoked, true, states)?;
        if let Some(outgoing) = &self.outgoing {
            for partition in &revoked {
                outgoing.forget(*partition);
            }
        }
        for partition in revoked {
            self.owned.remove(&partition);
            self.metrics.partition_revoked(partition);
            self.drop_clusters_of(partition);
        }
        Ok(())
    }

    /// Restores the clusters of newly assigned partitions (from the checkpoint read at
    /// start, else from the store, or from a previous owner's handover). Returns whether a
    /// partition was assigned without state here (it starts at a handover, a snapshot or
    /// its start).
    fn on_assigned(&mut self, starts: Vec<(i32, Start)>) -> Result<bool, LiveError> {
        let mut without_state = false;
        let mut from_store = None;
        for (partition, start) in starts {
            self.owned.insert(partition);
            self.metrics.partition_assigned(partition);
            match start {
                Start::Checkpoint(_) => {}
                Start::Handover(_) => {
                    self.take_over(partition)?;
                    without_state = true;
                    continue;
                }
                Start::Snapshot(_) | Start::Beginning => {
                    // No state here: what the partition holds is rebuilt from `start`.
                    self.points.forget_partition(partition);
                    without_state = true;
                    continue;
                }
            }
            let waiting: Vec<String> = self
                .parked
                .keys()
                .filter(|c| self.partitions.belongs(c, partition))
                .cloned()
                .collect();
            for cluster in waiting {
                if let Some(analyzer) = self.parked.remove(&cluster) {
                    resume(&self.metrics, &mut self.analyzers, cluster, analyzer);
                }
            }
            // Clusters checkpointed here before the partition went away and came back.
            let states = match &from_store {
                Some(states) => states,
                None => from_store.insert(self.store.load_checkpoint(&self.config.topic)?.0),
            };
            for (cluster, bytes) in states {
                if self.analyzers.contains_key(cluster)
                    || self.partitions.partition_of(cluster) != Some(partition)
                {
                    continue;
                }
                match Analyzer::from_checkpoint(bytes, self.config.analyzer.clone()) {
                    Ok(analyzer) => resume(
                        &self.metrics,
                        &mut self.analyzers,
                        cluster.clone(),
                        analyzer,
                    ),
                    Err(error) => Failed::new(Failure::ClusterCheckpoint, &error)
                        .partition(partition)
                        .about(cluster)
                        .emit(&self.metrics),
                }
            }
        }
        // Whatever is still parked belongs to partitions another instance owns.
        self.parked.clear();
        Ok(without_state)
    }

    /// Puts in place the analyses of `partition` as its previous owner handed them over
    /// (read by the rebalance callback), with its rebuild points, and the transitions that
    /// owner had not delivered into this member's outbox, under their own ids.
    fn take_over(&mut self, partition: i32) -> Result<(), LiveError> {
        self.points.forget_partition(partition);
        let Some(over) = self.shared.take_over(partition) else {
            return Ok(());
        };
        self.points.adopt(over.points);
        for (cluster, analyzer) in over.analyzers {
            // Whatever this member checkpointed of it before is older than the handover.
            self.parked.remove(&cluster);
            self.partitions.seen(&cluster, partition)?;
            resume(&self.metrics, &mut self.analyzers, cluster, analyzer);
        }
        if !over.undelivered.is_empty() && self.store.add_transitions(&over.undelivered)? > 0 {
            self.stored.notify_waiters();
        }
        if let Some(outgoing) = &self.outgoing {
            outgoing.inherit(partition, over.writes);
        }
        Ok(())
    }

    /// Drops the analyses of `partition`'s clusters from memory.
    fn drop_clusters_of(&mut self, partition: i32) {
        let gone: Vec<String> = self
            .analyzers
            .keys()
            .filter(|c| self.partitions.partition_of(c) == Some(partition))
            .cloned()
            .collect();
        for cluster in gone {
            self.analyzers.remove(&cluster);
            self.metrics.cluster_dropped(&cluster);
        }
    }

    /// A checkpointed offset outside the log (retention deleted what it points to): the
    /// state it goes with cannot be continued, so the partition is dropped and rebuilt.
    pub(super) fn on_out_of_range(
        &mut self,
        consumer: &StreamConsumer<GroupContext>,
    ) -> Result<(), LiveError> {
        let out_of_range = out_of_range_partitions(
            consumer,
            &self.config.topic,
            &self.owned,
            &self.shared,
            &self.metrics,
        );
        let mut rebuilds = HashMap::new();
        for partition in out_of_range {
            self.drop_partition(partition)?;
            let start = rebuild_start(&self.config, partition, &self.metrics);
            OffsetOutOfRange { partition, start }.emit(&self.metrics);
            let offset = match start {
                Start::Snapshot(n) | Start::Checkpoint(n) | Start::Handover(n) => {
                    self.shared.set_next(partition, n);
                    Offset::Offset(n)
                }
                Start::Beginning => Offset::Beginning,
            };
            rebuilds.insert(partition, offset);
        }
        if !rebuilds.is_empty() {
            reassign(
                consumer,
                &self.config.topic,
                &self.owned,
                &self.shared,
                &rebuilds,
                &self.metrics,
            );
        }
        Ok(())
    }

    /// Drops a partition's clusters (memory and checkpoint) before it is rebuilt.
    fn drop_partition(&mut self, partition: i32) -> Result<(), LiveError> {
        self.drop_clusters_of(partition);
        self.shared.forget_next(partition);
        self.points.forget_partition(partition);
        // The rebuilt analyses overwrite the dropped ones at the next checkpoint (same ids).
        self.save()?;
        Ok(())
    }
}

/// Puts a restored analysis in place.
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
            Failed::new(Failure::SnapshotScan, &error)
                .partition(partition)
                .emit(metrics);
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
    metrics: &Metrics,
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
            Err(error) => Failed::new(Failure::PartitionBounds, &error)
                .partition(*partition)
                .emit(metrics),
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
    metrics: &Metrics,
) {
    let next = shared.next_offsets();
    let mut list = TopicPartitionList::new();
    for partition in owned {
        let offset = rebuilds.get(partition).copied().unwrap_or_else(|| {
            next.get(partition)
                .map_or(Offset::Beginning, |n| Offset::Offset(*n))
        });
        if let Err(error) = list.add_partition_offset(topic, *partition, offset) {
            Failed::new(Failure::StartOffset, &error)
                .partition(*partition)
                .emit(metrics);
        }
    }
    if let Err(error) = consumer.assign(&list) {
        Failed::new(Failure::Reassignment, &error).emit(metrics);
    }
}
