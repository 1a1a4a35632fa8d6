//! A handover read back into what the consume loop resumes from: analyses restored,
//! ready to be put in place when the partition's assignment reaches the loop.

use std::time::Duration;

use ipaudit_schemas::Alert;

use super::topic::{Taken, Write};
use crate::analysis::engine::{Analyzer, AnalyzerConfig, CheckpointError};
use crate::live::rebuild_points::PointRow;

/// A partition as its previous owner handed it over, its analyses restored.
pub struct TakenOver {
    /// Where the partition goes on.
    pub next_offset: i64,
    /// Every cluster's analysis.
    pub analyzers: Vec<(String, Analyzer)>,
    /// Transitions some sink of the previous owner had not delivered.
    pub undelivered: Vec<Alert>,
    /// The partition's rebuild points.
    pub points: Vec<PointRow>,
    /// The writes whose chunks the next write tombstones.
    pub writes: Vec<Write>,
    /// The previous owner.
    pub written_by: String,
    /// The handover's length.
    pub bytes: u64,
    /// How long reading and restoring took.
    pub took: Duration,
}

/// Why a handover read back cannot be resumed from.
#[derive(Debug, thiserror::Error)]
#[error("the handover's analysis of cluster {cluster} cannot be restored")]
pub struct RestoreError {
    cluster: String,
    #[source]
    source: CheckpointError,
}

impl TakenOver {
    /// Restores every analysis of `taken` with `config`; one that does not restore makes
    /// the whole handover unusable (a partition resumed without one of its clusters would
    /// analyse that cluster from the middle of its history).
    pub fn restore(taken: Taken, config: &AnalyzerConfig) -> Result<TakenOver, RestoreError> {
        let started = std::time::Instant::now();
        let handover = taken.handover;
        let mut analyzers = Vec::with_capacity(handover.clusters.len());
        for cluster in handover.clusters {
            let analyzer =
                Analyzer::from_checkpoint(cluster.state.get().as_bytes(), config.clone()).map_err(
                    |source| RestoreError {
                        cluster: cluster.cluster_id.clone(),
                        source,
                    },
                )?;
            analyzers.push((cluster.cluster_id, analyzer));
        }
        Ok(TakenOver {
            next_offset: handover.next_offset,
            analyzers,
            undelivered: handover.undelivered,
            points: handover.points,
            writes: taken.writes,
            written_by: taken.manifest.writer,
            bytes: taken.manifest.bytes,
            took: taken.took + started.elapsed(),
        })
    }
}
