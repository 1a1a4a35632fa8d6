//! `CleanupCommand`: a request from the analyzer to a collector to clean one object up.

use serde::{Deserialize, Serialize};

/// What the collector is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CleanupAction {
    /// Strip kube-ovn's finalizer from the target.
    RemoveFinalizer,
    /// Patch a harmless annotation so that the controller handles the object again.
    Nudge,
}

/// A cleanup command (the Avro record `io.ipaudit.CleanupCommand`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupCommand {
    /// Stable id; a collector applies a command id at most once.
    pub command_id: String,
    /// Only the collector of this cluster acts on it.
    pub cluster_id: String,
    /// What to do.
    pub action: CleanupAction,
    /// Kind of the target.
    pub target_kind: String,
    /// Name of the target.
    pub target_name: String,
    /// uid the target must still have.
    pub target_uid: String,
    /// resourceVersion the target must still have.
    pub expected_resource_version: String,
    /// The finalizer to remove.
    pub finalizer: Option<String>,
    /// The subnet that must still be absent.
    pub subnet: String,
    /// The alert that asked for it.
    pub reason_alert_id: String,
    /// When the analyzer issued it, Unix ms.
    pub issued_at_ms: i64,
}
