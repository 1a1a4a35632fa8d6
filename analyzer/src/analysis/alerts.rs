//! The alert lifecycle: an alert fires once, stays active while its condition holds, and
//! resolves when the state heals. Ids are stable (a hash of cluster, rule, subject and
//! scope), so a replay, a restart or a second analyzer gives the same id and every sink
//! can drop duplicates.

use std::fmt::Write as _;

use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};

use ipaudit_schemas::{Alert, AlertStatus, Cleanup, Evidence, Severity};
use sha2::{Digest, Sha256};

use crate::analysis::state::ResourceVersion;

/// Where in history a transition happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moment {
    /// resourceVersion of the event that caused it (one is made per event, written out
    /// only for a transition).
    pub resource_version: ResourceVersion,
    /// Event time, Unix ms (0 when the input has no times at all).
    pub time_ms: i64,
    /// resourceVersion epoch.
    pub epoch: u64,
}

/// What a rule found: everything an alert says except its lifecycle.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The rule's name (the contract: alerts, Alertmanager labels, dashboards).
    pub rule: &'static str,
    /// How urgent.
    pub severity: Severity,
    /// Kind of the subject (IP, Subnet, Pod, an allocation...).
    pub subject_kind: &'static str,
    /// Name of the subject.
    pub subject_name: String,
    /// uid of the subject.
    pub subject_uid: String,
    /// What, besides the subject, makes this alert one of its own (the subnet for
    /// kube-ovn alerts, an address or a scope for others); part of the id.
    pub scope: Option<String>,
    /// The subnet or pool involved, for people and labels.
    pub subnet: Option<String>,
    /// The namespace of the pod whose address the finding is about, for labels and
    /// routing; `None` for a pool's own finding.
    pub namespace: Option<String>,
    /// One sentence for a person.
    pub summary: String,
    /// The fix to suggest, for a person.
    pub fix: Option<String>,
    /// The fix as a typed value, for cleanup commands.
    pub cleanup: Option<Cleanup>,
    /// The events that prove it.
    pub evidence: Vec<Evidence>,
}

/// The stable id of an alert.
pub fn alert_id(cluster_id: &str, rule: &str, subject_uid: &str, scope: Option<&str>) -> String {
    let mut hasher = Sha256::new();
    for part in [cluster_id, rule, subject_uid, scope.unwrap_or("")] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    let mut id = String::with_capacity(16);
    for b in &digest[..8] {
        // Writing to a String cannot fail.
        let _ = write!(id, "{b:02x}");
    }
    id
}

/// The active alerts of one cluster.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct AlertBook {
    active: HashMap<String, Alert>,
    by_subject: HashMap<String, Vec<String>>,
}

impl AlertBook {
    /// No alert active.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the alert with this id is firing.
    pub fn is_firing(&self, id: &str) -> bool {
        self.active.contains_key(id)
    }

    /// Whether any alert about this subject is active (cheap: no id is computed).
    pub fn has_active_for_subject(&self, subject_uid: &str) -> bool {
        self.by_subject.contains_key(subject_uid)
    }

    /// Whether an alert of `rule` about this subject is active (allocates nothing).
    pub fn is_firing_about(&self, rule: &str, subject_uid: &str) -> bool {
        self.by_subject.get(subject_uid).is_some_and(|ids| {
            ids.iter()
                .filter_map(|id| self.active.get(id))
                .any(|a| a.rule == rule)
        })
    }

    /// Ids of the active alerts about this subject.
    pub fn active_for_subject(&self, subject_uid: &str) -> Vec<String> {
        self.by_subject
            .get(subject_uid)
            .cloned()
            .unwrap_or_default()
    }

    /// The active alert with this id.
    pub fn get(&self, id: &str) -> Option<&Alert> {
        self.active.get(id)
    }

    /// Every active alert (no particular order).
    pub fn iter(&self) -> impl Iterator<Item = &Alert> {
        self.active.values()
    }

    /// Active alerts.
    pub fn len(&self) -> usize {
        self.active.len()
    }

    /// Whether none is active.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }

    /// Fires `finding` unless it already fires; returns the FIRING transition.
    pub fn fire(&mut self, cluster_id: &str, finding: Finding, at: &Moment) -> Option<Alert> {
        let id = alert_id(
            cluster_id,
            finding.rule,
            &finding.subject_uid,
            finding.scope.as_deref(),
        );
        if self.active.contains_key(&id) {
            return None;
        }
        let mut evidence = finding.evidence;
        evidence.sort_by_key(|e| version_order(&e.resource_version));
        let mut alert = Alert {
            alert_id: id.clone(),
            cluster_id: cluster_id.to_owned(),
            rule: finding.rule.to_owned(),
            severity: finding.severity,
            status: AlertStatus::Firing,
            subject_kind: finding.subject_kind.to_owned(),
            subject_name: finding.subject_name,
            subject_uid: finding.subject_uid.clone(),
            subnet: finding.subnet,
            summary: finding.summary,
            fix: finding.fix,
            epoch: at.epoch as i64,
            fired_at_ms: at.time_ms,
            resolved_at_ms: None,
            fired_resource_version: at.resource_version.to_string(),
            resolved_resource_version: None,
            evidence,
            cleanup: finding.cleanup,
            url: None,
            namespace: finding.namespace,
        };
        // Every sink (report, webhooks, Alertmanager, the alerts topic) gets a vetted fix,
        // which says why when the alert carries no cleanup.
        crate::analysis::fix::vet(&mut alert);
        crate::analysis::fix::explain_report_only(&mut alert);
        self.by_subject
            .entry(finding.subject_uid)
            .or_default()
            .push(id.clone());
        self.active.insert(id, alert.clone());
        Some(alert)
    }

    /// Resolves the alert with this id, if it fires; returns the RESOLVED transition, whose
    /// evidence ends with the event that healed it.
    pub fn resolve(&mut self, id: &str, healed_by: Evidence, at: &Moment) -> Option<Alert> {
        let mut alert = self.active.remove(id)?;
        if let Some(ids) = self.by_subject.get_mut(&alert.subject_uid) {
            ids.retain(|i| i != id);
            if ids.is_empty() {
                self.by_subject.remove(&alert.subject_uid);
            }
        }
        // Restored from an older release's checkpoint, it may lack the note.
        crate::analysis::fix::explain_report_only(&mut alert);
        alert.status = AlertStatus::Resolved;
        alert.resolved_at_ms = Some(at.time_ms);
        alert.resolved_resource_version = Some(at.resource_version.to_string());
        alert.evidence.push(healed_by);
        Some(alert)
    }
}

/// How evidence versions sort: `V` and `V+n` (the n-th audit entry after version V: an
/// audit log never gives the version of a deletion by finalizer removal, see
/// `source::audit_log`) in that order; anything else last.
pub fn version_order(resource_version: &str) -> (i64, i64) {
    let (version, after) = match resource_version.split_once('+') {
        Some((version, after)) => (version, after.parse::<i64>().ok()),
        None => (resource_version, Some(0)),
    };
    match (version.parse::<i64>(), after) {
        (Ok(version), Some(after)) => (version, after),
        _ => (i64::MAX, 0),
    }
}

/// The identity of one alert transition: the same after a replay (the
/// key of the alert outbox and of every sink's delivery).
pub fn transition_id(alert: &Alert) -> String {
    format!(
        "{}/{}/{}",
        alert.alert_id,
        alert.status.as_str(),
        alert.fired_resource_version
    )
}

/// An alert about IP `id` with no evidence, for the tests of what stores, delivers and
/// counts alerts.
#[cfg(test)]
pub(crate) fn sample_alert(id: &str, rule: &str, status: AlertStatus, rv: &str) -> Alert {
    Alert {
        alert_id: id.into(),
        cluster_id: "c".into(),
        rule: rule.into(),
        severity: Severity::Critical,
        status,
        subject_kind: "IP".into(),
        subject_name: id.into(),
        subject_uid: id.into(),
        subnet: None,
        summary: String::new(),
        fix: None,
        epoch: 0,
        fired_at_ms: 1,
        resolved_at_ms: None,
        fired_resource_version: rv.into(),
        resolved_resource_version: None,
        evidence: Vec::new(),
        cleanup: None,
        url: None,
        namespace: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::{EventType, Stream};

    const STUCK: &str = "ip-stuck-terminating";

    fn finding() -> Finding {
        Finding {
            rule: STUCK,
            severity: Severity::Critical,
            subject_kind: "IP",
            subject_name: "a".into(),
            subject_uid: "uid-a".into(),
            scope: Some("s".into()),
            subnet: Some("s".into()),
            namespace: Some("apps".into()),
            summary: "stuck".into(),
            fix: None,
            cleanup: None,
            evidence: Vec::new(),
        }
    }

    fn at(rv: &str) -> Moment {
        Moment {
            resource_version: rv.into(),
            time_ms: 0,
            epoch: 0,
        }
    }

    fn healed() -> Evidence {
        Evidence {
            stream: Stream::Ip,
            event_type: EventType::Deleted,
            name: "a".into(),
            resource_version: "9".into(),
            time_ms: None,
            what: "gone".into(),
            actor: None,
        }
    }

    #[test]
    fn an_alert_fires_once_and_resolves_once() {
        let mut book = AlertBook::new();
        let fired = book.fire("c", finding(), &at("5")).expect("fires");
        assert!(book.fire("c", finding(), &at("6")).is_none());
        let resolved = book
            .resolve(&fired.alert_id, healed(), &at("9"))
            .expect("resolves");
        assert_eq!(resolved.status, AlertStatus::Resolved);
        assert_eq!(resolved.resolved_resource_version.as_deref(), Some("9"));
        assert!(book.resolve(&fired.alert_id, healed(), &at("10")).is_none());
        assert!(book.is_empty());
    }

    #[test]
    fn ids_are_stable_and_distinguish_rule_subject_subnet_and_cluster() {
        let id = alert_id("c", STUCK, "u", Some("s"));
        assert_eq!(id, alert_id("c", STUCK, "u", Some("s")));
        assert_eq!(id.len(), 16);
        for other in [
            alert_id("d", STUCK, "u", Some("s")),
            alert_id("c", "subnet-deleted-before-ip", "u", Some("s")),
            alert_id("c", STUCK, "v", Some("s")),
            alert_id("c", STUCK, "u", Some("t")),
        ] {
            assert_ne!(id, other);
        }
    }
}
