//! Writing the handovers of the partitions this member owns, from the consume loop
//! without holding it up: the loop picks what to write at a checkpoint, and a task of
//! its own builds and writes it, one write after another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipaudit_runtime::telemetry::InternalEvent as _;
use ipaudit_schemas::Alert;
use tokio::task::JoinHandle;

use super::payload::{ClusterState, Handover, FORMAT};
use super::topic::{HandoverError, HandoverWriter, Write};
use crate::live::metrics::Metrics;
use crate::live::rebuild_points::PointRow;
use crate::live::telemetry::{HandoverWriteFailed, HandoverWritten};

/// Every cluster's checkpoint bytes as the last checkpoint wrote them, shared with the
/// writing task.
pub type Checkpointed = Arc<Vec<(String, Vec<u8>)>>;

/// What one partition's handover is made of, picked at a checkpoint.
pub struct PartitionAtCheckpoint {
    /// The events partition.
    pub partition: i32,
    /// Its next offset, as checkpointed.
    pub next_offset: i64,
    /// Its clusters: places in the [`Checkpointed`] states.
    pub clusters: Vec<usize>,
    /// Transitions of those clusters some sink has not delivered.
    pub undelivered: Vec<Alert>,
    /// Its rebuild points.
    pub points: Vec<PointRow>,
}

/// The writes a takeover found of one partition.
type Inherited = (i32, Vec<Write>);

/// The handovers this member writes.
pub struct Outgoing {
    writer: Arc<tokio::sync::Mutex<HandoverWriter>>,
    interval: Duration,
    last: Option<Instant>,
    /// Per partition, what its last write carried: next offset and undelivered count.
    written: Arc<Mutex<HashMap<i32, (i64, usize)>>>,
    /// Writes found by takeovers, for the writer to tombstone.
    inherited: Arc<Mutex<Vec<Inherited>>>,
    tasks: Vec<JoinHandle<()>>,
    /// Whether the last write failed: a failure streak is logged once, not every interval.
    failing: Arc<AtomicBool>,
    /// How long the last periodic write took, building included.
    last_cost: Arc<Mutex<Duration>>,
    metrics: Metrics,
}

impl Outgoing {
    /// Writes through `writer` every `interval`.
    pub fn new(writer: HandoverWriter, interval: Duration, metrics: Metrics) -> Outgoing {
        Outgoing {
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            interval,
            last: None,
            written: Arc::default(),
            inherited: Arc::default(),
            tasks: Vec::new(),
            failing: Arc::default(),
            last_cost: Arc::default(),
            metrics,
        }
    }

    /// Whether the periodic write is due (and the previous one done): `interval` after the
    /// last, or ten times what the last cost when that is longer, so that periodic writes
    /// take at most a tenth of the time, as checkpoints do. A large state written while
    /// catching up would otherwise take a share of the cores from the catch-up itself; a
    /// member that takes over from an older handover reads a little more of the topic.
    pub fn due(&mut self, now: Instant) -> bool {
        self.tasks.retain(|t| !t.is_finished());
        let cost = *self.last_cost.lock().unwrap_or_else(|e| e.into_inner());
        self.tasks.is_empty() && paced(now, self.last, self.interval, cost)
    }

    /// Whether `partition`'s analysis moved since its last write: a new offset, or
    /// transitions still owed.
    pub fn changed(&self, partition: i32, next_offset: i64, undelivered: usize) -> bool {
        let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        match written.get(&partition) {
            Some((offset, owed)) => *offset != next_offset || *owed > 0 || undelivered > 0,
            None => true,
        }
    }

    /// The chunks of `writes` of `partition` (found by a takeover) are tombstoned by its
    /// next write.
    pub fn inherit(&self, partition: i32, writes: Vec<Write>) {
        self.inherited
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((partition, writes));
    }

    /// `partition` left this member: if it comes back, its first write is not skipped.
    pub fn forget(&self, partition: i32) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&partition);
    }

    /// Writes the handovers of `partitions` in a task of their own.
    pub fn write(&mut self, states: Checkpointed, partitions: Vec<PartitionAtCheckpoint>) {
        if partitions.is_empty() {
            // Nothing moved: a partition that does (or is assigned) is written at the
            // next checkpoint.
            return;
        }
        self.last = Some(Instant::now());
        let writer = Arc::clone(&self.writer);
        let written = Arc::clone(&self.written);
        let inherited = Arc::clone(&self.inherited);
        let metrics = self.metrics.clone();
        let failing = Arc::clone(&self.failing);
        let last_cost = Arc::clone(&self.last_cost);
        self.tasks.push(tokio::spawn(async move {
            let mut writer = writer.lock().await;
            let started = Instant::now();
            for (partition, writes) in
                std::mem::take(&mut *inherited.lock().unwrap_or_else(|e| e.into_inner()))
            {
                writer.inherit(partition, writes);
            }
            for picked in partitions {
                let (partition, next_offset) = (picked.partition, picked.next_offset);
                let owed = picked.undelivered.len();
                let result = match handover_of(&states, picked) {
                    Ok(handover) => writer.write(&handover).await,
                    Err(error) => Err(HandoverError::from(error)),
                };
                match result {
                    Ok(done) => {
                        if failing.swap(false, Ordering::Relaxed) {
                            tracing::info!(partition, "handovers are written again");
                        }
                        HandoverWritten(done).emit(&metrics);
                        written
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(partition, (next_offset, owed));
                    }
                    Err(error) => HandoverWriteFailed {
                        partition,
                        error: &error,
                        repeated: failing.swap(true, Ordering::Relaxed),
                    }
                    .emit(&metrics),
                }
            }
            *last_cost.lock().unwrap_or_else(|e| e.into_inner()) = started.elapsed();
        }));
    }

    /// Waits for the writes under way, at most `timeout`.
    pub async fn finish(&mut self, timeout: Duration) {
        let all = join(std::mem::take(&mut self.tasks));
        if tokio::time::timeout(timeout, all).await.is_err() {
            tracing::warn!(
                ?timeout,
                "handover writes still under way at shutdown: left unfinished"
            );
        }
    }
}

/// Whether a periodic write may start at `now`, the last having started at `last` and
/// cost `cost`: `interval` after it, or ten times its cost when that is longer.
fn paced(now: Instant, last: Option<Instant>, interval: Duration, cost: Duration) -> bool {
    last.is_none_or(|last| now.saturating_duration_since(last) >= interval.max(cost * 10))
}

async fn join(tasks: Vec<JoinHandle<()>>) {
    for task in tasks {
        let _ = task.await;
    }
}

fn handover_of(
    states: &Checkpointed,
    picked: PartitionAtCheckpoint,
) -> Result<Handover, super::payload::PayloadError> {
    let clusters = picked
        .clusters
        .iter()
        .filter_map(|i| states.get(*i))
        .map(|(cluster, bytes)| ClusterState::new(cluster, bytes.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Handover {
        format: FORMAT,
        partition: picked.partition,
        next_offset: picked.next_offset,
        clusters,
        undelivered: picked.undelivered,
        points: picked.points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periodic_writes_take_at_most_a_tenth_of_the_time() {
        let start = Instant::now();
        let interval = Duration::from_secs(10);
        let at = |secs| start + Duration::from_secs(secs);
        assert!(
            paced(start, None, interval, Duration::ZERO),
            "the first at once"
        );
        // A cheap write: every interval.
        assert!(!paced(
            at(9),
            Some(start),
            interval,
            Duration::from_millis(200)
        ));
        assert!(paced(
            at(10),
            Some(start),
            interval,
            Duration::from_millis(200)
        ));
        // A write of a large state that took 3 s: the next 30 s after it started.
        assert!(!paced(
            at(29),
            Some(start),
            interval,
            Duration::from_secs(3)
        ));
        assert!(paced(at(30), Some(start), interval, Duration::from_secs(3)));
    }
}
