//! Alerts as structured log lines.

use ipaudit_schemas::{Alert, AlertStatus};
use tracing::{info, warn};

/// Logs each transition.
#[derive(Debug, Default)]
pub struct LogSink;

impl LogSink {
    pub(super) fn deliver(&self, transition_id: &str, alert: &Alert) {
        let subnet = alert.subnet.as_deref().unwrap_or("");
        let namespace = alert.namespace.as_deref().unwrap_or("");
        let url = alert.url.as_deref().unwrap_or("");
        match alert.status {
            AlertStatus::Firing => warn!(
                cluster = %alert.cluster_id, rule = %alert.rule, severity = alert.severity.as_str(),
                subject = %alert.subject_name, namespace, subnet, resource_version = %alert.fired_resource_version,
                transition = transition_id, fix = alert.fix.as_deref().unwrap_or(""), url, "{}", alert.summary
            ),
            AlertStatus::Resolved => info!(
                cluster = %alert.cluster_id, rule = %alert.rule, subject = %alert.subject_name, namespace, subnet,
                resource_version = alert.resolved_resource_version.as_deref().unwrap_or(""),
                transition = transition_id, url, "resolved: {}", alert.summary
            ),
        }
    }
}
