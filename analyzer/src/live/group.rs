//! The analyzer's place in its consumer group. Each instance is a static member
//! (`group.instance.id`, by default the host name, which is the pod name of a
//! StatefulSet), so a restarted instance gets its partitions back at once, with the state
//! it checkpointed. The rebalance callback decides where each assigned partition starts:
//!
//! - at its previous owner's handover when the checkpoints topic has one newer than the
//!   state this instance has for it ([`crate::live::handover`]): the analysis resumes
//!   where that owner left it;
//! - at the checkpointed offset when this instance has state for it;
//! - else, with `--start-from snapshot`, at a snapshot: the latest one at or before the
//!   group's committed offset when the group consumed the partition before (a partition
//!   moved here from another instance, or a store lost), so that nothing after the last
//!   checkpoint is skipped, and at or before the rebuild point committed with it when
//!   alerts of the partition still fire ([`crate::live::rebuild_points`]); the
//!   partition's latest snapshot only when the group never consumed it;
//! - else at its start.
//!
//! A partition started without local state is checkpointed (and its offset committed) at
//! once, before anything is analysed: a restart then resumes where this start was, and
//! never from a later snapshot that would skip what came between.
//!
//! It then hands the change to the consume loop as a [`GroupEvent`]: the loop restores or
//! drops the clusters of those partitions (a revoked partition's clusters are checkpointed
//! and dropped, so they are no longer ticked). Which partition a cluster's events come in
//! is learned from the messages and kept in the store ([`PartitionMap`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ipaudit_runtime::telemetry::InternalEvent as _;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::{Offset, TopicPartitionList};
use rusqlite::{params, Connection};

use crate::analysis::engine::AnalyzerConfig;
use crate::live::handover::{HandoverReader, TakenOver};
use crate::live::metrics::Metrics;
use crate::live::start_offset::Start;
use crate::live::telemetry::{
    Failed, Failure, HandoverTaken, HandoverUnusable, PartitionsAssigned, PartitionsRevoked,
    SnapshotChoice, SnapshotRebuildStarted,
};

/// A change of this instance's partitions, for the consume loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupEvent {
    /// These partitions are now this instance's (the whole assignment).
    Assigned(Vec<(i32, Start)>),
    /// These partitions were taken away.
    Revoked(Vec<i32>),
}

/// What the rebalance callback shares with the consume loop.
#[derive(Clone)]
pub struct GroupShared {
    /// Next offset per partition this instance has state for (consumed or checkpointed).
    pub next: Arc<Mutex<HashMap<i32, i64>>>,
    /// Changes not yet applied by the loop.
    pub events: Arc<Mutex<Vec<GroupEvent>>>,
    /// Each partition's end, from librdkafka's statistics (for the lag).
    pub high_watermarks: Arc<Mutex<HashMap<i32, i64>>>,
    /// Partitions taken over from a handover, for the loop to put in place.
    pub taken: Arc<Mutex<HashMap<i32, TakenOver>>>,
}

impl GroupShared {
    /// Shared state starting from the checkpointed offsets.
    pub fn new(next: HashMap<i32, i64>) -> Self {
        GroupShared {
            next: Arc::new(Mutex::new(next)),
            events: Arc::default(),
            high_watermarks: Arc::default(),
            taken: Arc::default(),
        }
    }

    /// The next offset of each partition, as it is now.
    pub fn next_offsets(&self) -> HashMap<i32, i64> {
        self.next.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The next offset of `partition`, if this instance has one.
    pub fn next_of(&self, partition: i32) -> Option<i64> {
        self.next
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&partition)
            .copied()
    }

    /// `partition` goes on at `offset`.
    pub fn set_next(&self, partition: i32, offset: i64) {
        self.next
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(partition, offset);
    }

    /// `partition` has no next offset any more (its analysis is dropped).
    pub fn forget_next(&self, partition: i32) {
        self.next
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&partition);
    }

    /// The handover `partition` was taken over from, once.
    pub fn take_over(&self, partition: i32) -> Option<TakenOver> {
        self.taken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&partition)
    }

    /// Takes the changes to apply.
    pub fn take_events(&self) -> Vec<GroupEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// How to find where a partition without local state starts.
#[derive(Clone)]
pub struct SnapshotScan {
    /// How to reach the brokers.
    pub connection: ipaudit_runtime::kafka::Connection,
    /// The consumer group, whose committed offsets say whether it consumed a partition.
    pub group_id: String,
}

/// The consumer's context: assigns partitions where their state is (see the module doc).
pub struct GroupContext {
    /// The events topic.
    pub topic: String,
    /// Shared with the loop.
    pub shared: GroupShared,
    /// Without state, start at the latest snapshot (else at the beginning).
    pub snapshot: Option<SnapshotScan>,
    /// Where previous owners' handovers are read (`None`: nowhere).
    pub handover: Option<HandoverReader>,
    /// The analyses' settings (a handover's are restored with them).
    pub analyzer: AnalyzerConfig,
    /// Counters.
    pub metrics: Metrics,
}

impl ClientContext for GroupContext {
    /// librdkafka's errors, as its default logs them, but for the end of a partition: the
    /// consume loop asks for it (`enable.partition.eof`) and takes it from the consumer,
    /// where it is news, not an error.
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::Global(RDKafkaErrorCode::PartitionEOF)) {
            Failed::new(Failure::Librdkafka, &format_args!("{error}: {reason}"))
                .emit(&self.metrics);
        }
    }

    fn stats(&self, statistics: Statistics) {
        let Some(topic) = statistics.topics.get(&self.topic) else {
            return;
        };
        let mut high = self
            .shared
            .high_watermarks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for (partition, stats) in &topic.partitions {
            if *partition >= 0 && stats.hi_offset >= 0 {
                high.insert(*partition, stats.hi_offset);
            }
        }
    }
}

impl ConsumerContext for GroupContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let partitions: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let mut starts = Vec::new();
                for partition in partitions {
                    let start = self.start_of(partition);
                    let offset = match start {
                        Start::Checkpoint(n) | Start::Handover(n) | Start::Snapshot(n) => {
                            Offset::Offset(n)
                        }
                        Start::Beginning => Offset::Beginning,
                    };
                    if let Err(error) = tpl.set_partition_offset(&self.topic, partition, offset) {
                        Failed::new(Failure::StartOffset, &error)
                            .partition(partition)
                            .emit(&self.metrics);
                    }
                    starts.push((partition, start));
                }
                PartitionsAssigned { starts: &starts }.emit(&self.metrics);
                if let Err(error) = consumer.assign(tpl) {
                    Failed::new(Failure::Assignment, &error).emit(&self.metrics);
                }
                self.push(GroupEvent::Assigned(starts));
            }
            _ => {
                PartitionsRevoked {
                    partitions: &partitions,
                }
                .emit(&self.metrics);
                if let Err(error) = consumer.unassign() {
                    Failed::new(Failure::Assignment, &error).emit(&self.metrics);
                }
                self.push(GroupEvent::Revoked(partitions));
            }
        }
    }
}

impl GroupContext {
    fn push(&self, event: GroupEvent) {
        self.shared
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
    }

    /// Where `partition` starts: a newer handover, else its checkpoint, else a snapshot
    /// (see the module doc), else its start.
    fn start_of(&self, partition: i32) -> Start {
        let local = self.shared.next_of(partition);
        if let Some(next) = self.handover_of(partition, local) {
            return Start::Handover(next);
        }
        if let Some(next) = local {
            return Start::Checkpoint(next);
        }
        let Some(scan) = &self.snapshot else {
            return Start::Beginning;
        };
        // The scans block (they read the group's offsets and the partition's tail); the
        // callback runs inside the consumer's poll, which waits for the assignment anyway.
        let found = blocking(|| {
            let committed = crate::live::start_offset::committed_offset(
                &scan.connection,
                &self.topic,
                &scan.group_id,
                partition,
            )?;
            let (offset, point) = crate::live::start_offset::snapshot_offset_at_or_before(
                &scan.connection,
                &self.topic,
                partition,
                committed,
            )?;
            Ok::<_, KafkaError>((offset, committed, point))
        });
        match found {
            Ok((offset, committed, point)) => {
                let chosen = match (committed, point) {
                    (None, _) => SnapshotChoice::Latest,
                    (Some(c), Some(point)) => SnapshotChoice::BeforeFiring {
                        committed: c.next,
                        rebuild_from: point,
                    },
                    (Some(c), None) => SnapshotChoice::AtOrBefore(c.next),
                };
                SnapshotRebuildStarted {
                    partition,
                    offset,
                    chosen,
                }
                .emit(&self.metrics);
                self.shared.set_next(partition, offset);
                Start::Snapshot(offset)
            }
            Err(error) => {
                Failed::new(Failure::SnapshotScan, &error)
                    .partition(partition)
                    .emit(&self.metrics);
                Start::Beginning
            }
        }
    }
}

impl GroupContext {
    /// Reads `partition`'s handover when there is one newer than `local` (this member's
    /// own next offset for it), restores it and leaves it for the loop; where it goes on.
    fn handover_of(&self, partition: i32, local: Option<i64>) -> Option<i64> {
        let reader = self.handover.as_ref()?;
        let taken = match blocking(|| reader.take(partition, local)) {
            Ok(taken) => taken?,
            Err(error) => {
                HandoverUnusable {
                    partition,
                    error: &error,
                }
                .emit(&self.metrics);
                return None;
            }
        };
        match TakenOver::restore(taken, &self.analyzer) {
            Ok(over) => {
                HandoverTaken {
                    partition,
                    taken: &over,
                }
                .emit(&self.metrics);
                let next = over.next_offset;
                self.shared.set_next(partition, next);
                self.shared
                    .taken
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(partition, over);
                Some(next)
            }
            Err(error) => {
                HandoverUnusable {
                    partition,
                    error: &error,
                }
                .emit(&self.metrics);
                None
            }
        }
    }
}

/// Runs blocking work from inside the async consume loop without starving the runtime's
/// other tasks (on a multi-threaded runtime; elsewhere it simply runs).
pub fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// This instance's member id in the group: `--instance-id`, else the host name (a
/// StatefulSet pod's name, stable across restarts). An empty value means dynamic
/// membership.
pub fn default_instance_id() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

/// Which partition each cluster's events come in, kept in the store file so that a
/// restarted instance restores only the clusters of the partitions it is given.
pub struct PartitionMap {
    conn: Connection,
    path: PathBuf,
    topic: String,
    known: HashMap<String, i32>,
}

/// Why the partition map failed (not retryable: the disk or file is broken).
#[derive(Debug, thiserror::Error)]
pub enum PartitionMapError {
    /// The store file cannot be opened ([`crate::live::db`]).
    #[error(transparent)]
    Open(#[from] crate::live::db::DbError),
    /// SQLite failed (the file, what was being done, SQLite's error).
    #[error(transparent)]
    Sqlite(#[from] ipaudit_runtime::sqlite::SqliteError),
}

impl PartitionMap {
    /// Opens the map of `topic` in the store file.
    pub fn open(path: &Path, topic: &str) -> Result<Self, PartitionMapError> {
        let err =
            ipaudit_runtime::sqlite::failed::<PartitionMapError>(path, "read the partition map");
        let conn = crate::live::db::open(path, ipaudit_runtime::sqlite::Durability::Full)?;
        let known = {
            let mut stmt = conn
                .prepare("SELECT cluster_id, partition FROM cluster_partitions WHERE topic = ?1")
                .map_err(&err)?;
            let rows = stmt
                .query_map([topic], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(&err)?;
            rows.collect::<Result<HashMap<_, _>, _>>().map_err(&err)?
        };
        Ok(PartitionMap {
            conn,
            path: path.to_owned(),
            topic: topic.to_owned(),
            known,
        })
    }

    /// The partition a cluster's events were last seen in.
    pub fn partition_of(&self, cluster: &str) -> Option<i32> {
        self.known.get(cluster).copied()
    }

    /// Records that `cluster`'s events come in `partition` (a write only when it changes).
    pub fn seen(&mut self, cluster: &str, partition: i32) -> Result<(), PartitionMapError> {
        if self.known.get(cluster) == Some(&partition) {
            return Ok(());
        }
        self.conn
            .execute(
                "INSERT INTO cluster_partitions (topic, cluster_id, partition) VALUES (?1, ?2, ?3)
                 ON CONFLICT (topic, cluster_id) DO UPDATE SET partition = excluded.partition",
                params![self.topic, cluster, partition],
            )
            .map_err(ipaudit_runtime::sqlite::failed::<PartitionMapError>(
                &self.path,
                "write the partition map",
            ))?;
        self.known.insert(cluster.to_owned(), partition);
        Ok(())
    }

    /// Whether `cluster` belongs to `partition`; a cluster of unknown partition (a
    /// checkpoint older than this map) belongs to whichever partition comes first.
    pub fn belongs(&self, cluster: &str, partition: i32) -> bool {
        self.partition_of(cluster).is_none_or(|p| p == partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_of_a_cluster_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        let mut map = PartitionMap::open(&path, "events").unwrap();
        map.seen("prod", 2).unwrap();
        map.seen("lab", 0).unwrap();
        drop(map);
        let map = PartitionMap::open(&path, "events").unwrap();
        assert_eq!(map.partition_of("prod"), Some(2));
        assert!(map.belongs("lab", 0) && !map.belongs("lab", 2));
        assert!(map.belongs("never-seen", 7));
        let other = PartitionMap::open(&path, "other-topic").unwrap();
        assert_eq!(other.partition_of("prod"), None);
    }

    #[test]
    fn a_partition_with_state_starts_at_its_checkpoint_and_one_without_at_the_beginning() {
        let context = GroupContext {
            topic: "events".into(),
            shared: GroupShared::new(HashMap::from([(0, 42)])),
            snapshot: None,
            handover: None,
            analyzer: AnalyzerConfig::default(),
            metrics: Metrics::new(),
        };
        assert_eq!(context.start_of(0), Start::Checkpoint(42));
        assert_eq!(context.start_of(1), Start::Beginning);
    }
}
