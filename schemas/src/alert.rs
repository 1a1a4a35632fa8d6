//! `Alert`: one transition (firing or resolved) of an ipaudit alert, with its evidence.

use serde::{Deserialize, Serialize};

use crate::command::CleanupAction;
use crate::event::{EventType, Stream};

/// How urgent an alert is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Severity {
    /// Worth knowing.
    Info,
    /// Needs a look.
    Warning,
    /// Needs action: addresses are lost until someone acts.
    Critical,
}

impl Severity {
    /// Lower-case name, as Alertmanager and reports use it.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// Where an alert is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AlertStatus {
    /// The condition holds.
    Firing,
    /// The state healed.
    Resolved,
}

impl AlertStatus {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }
}

/// One event that proves an alert.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// Stream of the event.
    pub stream: Stream,
    /// Type of the event.
    pub event_type: EventType,
    /// Object name (`namespace/name` for namespaced kinds).
    pub name: String,
    /// resourceVersion of the event.
    pub resource_version: String,
    /// Event time, Unix ms.
    pub time_ms: Option<i64>,
    /// What happened, for a person.
    pub what: String,
    /// Who made the API request behind this event, when an audit log entry matched it
    /// (schema v3).
    #[serde(default)]
    pub actor: Option<Actor>,
}

/// Who made an API request, as the Kubernetes audit log names them (the Avro record
/// `io.ipaudit.Actor`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// `user.username` of the request.
    pub user: String,
    /// `userAgent` of the request.
    #[serde(default)]
    pub user_agent: Option<String>,
    /// `sourceIPs` of the request.
    #[serde(default)]
    pub source_ips: Vec<String>,
    /// `impersonatedUser.username`, when the request impersonated someone.
    #[serde(default)]
    pub impersonated_user: Option<String>,
}

/// A transition of one alert (the Avro record `io.ipaudit.Alert`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    /// Stable id: same rule, cluster and subject give the same id.
    pub alert_id: String,
    /// Cluster the events came from.
    pub cluster_id: String,
    /// Rule name, e.g. `subnet-deleted-before-ip`.
    pub rule: String,
    /// How urgent.
    pub severity: Severity,
    /// Firing or resolved.
    pub status: AlertStatus,
    /// Kind of the object the alert is about.
    pub subject_kind: String,
    /// Name of that object.
    pub subject_name: String,
    /// uid of that object.
    pub subject_uid: String,
    /// The subnet involved.
    pub subnet: Option<String>,
    /// One sentence for a person.
    pub summary: String,
    /// Suggested fix.
    pub fix: Option<String>,
    /// resourceVersion epoch.
    pub epoch: i64,
    /// Event time the alert fired, Unix ms.
    pub fired_at_ms: i64,
    /// Event time it resolved, Unix ms.
    pub resolved_at_ms: Option<i64>,
    /// resourceVersion at which it fired.
    pub fired_resource_version: String,
    /// resourceVersion at which it resolved.
    pub resolved_resource_version: Option<String>,
    /// The events that prove it, in resourceVersion order.
    pub evidence: Vec<Evidence>,
    /// The cleanup that ends the leak, as a typed value (schema v2).
    #[serde(default)]
    pub cleanup: Option<Cleanup>,
    /// The alert's incident page, set by the sinks of an analyzer that knows its pages'
    /// address (`--ui-url`); the analysis leaves it empty (schema v5).
    #[serde(default)]
    pub url: Option<String>,
    /// The namespace of the pod whose address the alert is about, for routing by
    /// namespace; `None` for a pool's own alert (schema v6).
    #[serde(default)]
    pub namespace: Option<String>,
}

/// A cleanup as a typed value: what to change on which exact version of which object.
/// Cleanup commands are built from it, never from an alert's text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleanup {
    /// What to do.
    pub action: CleanupAction,
    /// The kind of the target.
    pub target_stream: Stream,
    /// Name of the target.
    pub target_name: String,
    /// Namespace of the target; `None` for cluster-scoped kinds.
    pub target_namespace: Option<String>,
    /// uid the target must still have.
    pub target_uid: String,
    /// resourceVersion the target must still have.
    pub resource_version: String,
    /// The finalizer to remove.
    pub finalizer: String,
    /// The subnet or pool whose absence makes the finalizer unremovable (REMOVE_FINALIZER);
    /// the pool the target is (REMOVE_ALLOCATION).
    pub pool: String,
    /// The address whose allocation to remove (REMOVE_ALLOCATION; alert v4).
    #[serde(default)]
    pub address: Option<String>,
}
