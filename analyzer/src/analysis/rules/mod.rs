//! The detections. A rule is one file: it implements [`Rule`], owns its (serializable)
//! state and timers, and fires or resolves alerts through the [`Context`]; the engine only
//! dispatches every change of the cluster state, and the passing of event time, to every
//! rule. Rule names are a contract (alerts, Alertmanager labels, dashboards).
//!
//! Adding a rule: one file here implementing [`Rule`], and one line in [`all`].

/// `save` and `restore` for a rule whose whole self is its state (it derives serde's
/// `Serialize`, `Deserialize` and `Default`).
macro_rules! state_is_self {
    () => {
        fn save(&self) -> serde_json::Value {
            super::save_state(self)
        }

        fn restore(&mut self, saved: serde_json::Value) -> Result<(), serde_json::Error> {
            *self = super::restore_state(saved)?;
            Ok(())
        }
    };
}

mod allocation_records_disagree;
mod block_of_missing_node;
mod deadlines;
mod duplicate_ip;
mod handle_without_ip;
mod ip_orphaned;
mod ip_released_while_pod_alive;
mod ip_stuck_terminating;
mod ip_without_handle;
mod ip_without_pod;
mod subnet_deleted_before_ip;
mod subnet_stuck_terminating;

use ipaudit_schemas::kubernetes::format_timestamp_ms;
use ipaudit_schemas::{Alert, EventType, Evidence, Stream};
use serde::{Deserialize, Serialize};

use crate::analysis::alerts::{alert_id, AlertBook, Finding, Moment};
use crate::analysis::state::holdings::{self, Holdings};
use crate::analysis::state::{ClusterState, EventRef, ObjectRecord, RecordKey, ReleasedHolding};
use std::cell::OnceCell;

pub use deadlines::Deadlines;

/// Every rule, in the order they see each change.
pub fn all() -> Vec<Box<dyn Rule>> {
    vec![
        Box::new(subnet_deleted_before_ip::SubnetDeletedBeforeIp::default()),
        Box::new(ip_stuck_terminating::IpStuckTerminating::default()),
        Box::new(subnet_stuck_terminating::SubnetStuckTerminating::default()),
        Box::new(ip_orphaned::IpOrphaned),
        Box::new(ip_without_pod::IpWithoutPod::default()),
        Box::new(duplicate_ip::DuplicateIp::default()),
        Box::new(ip_released_while_pod_alive::IpReleasedWhilePodAlive),
        Box::new(allocation_records_disagree::AllocationRecordsDisagree::default()),
        Box::new(ip_without_handle::IpWithoutHandle::default()),
        Box::new(handle_without_ip::HandleWithoutIp::default()),
        Box::new(block_of_missing_node::BlockOfMissingNode::default()),
    ]
}

/// One detection.
pub trait Rule: Send {
    /// The rule's name, as alerts carry it.
    fn name(&self) -> &'static str;

    /// The cluster state changed (an object appeared, changed or went; a complete list
    /// of a kind ended).
    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>);

    /// Event time reached `now_ms`: timers that expired fire.
    fn on_time(&mut self, _ctx: &mut Context<'_>, _now_ms: i64) {}

    /// Whether a timer expired before `now_ms` (so that the engine calls `on_time`).
    fn has_due(&self, _now_ms: i64) -> bool {
        false
    }

    /// The rule's own state, for a checkpoint.
    fn save(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Restores what [`Rule::save`] returned.
    fn restore(&mut self, _saved: serde_json::Value) -> Result<(), serde_json::Error> {
        Ok(())
    }
}

/// Settings of the rules; every grace period runs on event time.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RuleConfig {
    /// How long a Subnet or pool may be terminating before `subnet-stuck-terminating`.
    pub subnet_terminating_grace_ms: i64,
    /// How long an allocation may outlive its pod before `ip-without-pod`, and a
    /// SpiderEndpoint stay terminating before `ip-stuck-terminating`.
    pub owner_grace_ms: i64,
    /// How long the two records of one allocation may disagree before
    /// `allocation-records-disagree`.
    pub records_grace_ms: i64,
    /// How long a Calico allocation may outlive its pod before `ip-without-pod`, and a node
    /// be gone while it still holds blocks or a CiliumNode's CIDRs before
    /// `block-of-missing-node`.
    #[serde(default = "defaults::calico_grace_ms")]
    pub calico_grace_ms: i64,
    /// How long a CiliumNode's used address may outlive its pod before `ip-without-pod`.
    #[serde(default = "defaults::cilium_grace_ms")]
    pub cilium_grace_ms: i64,
    /// How long a Calico allocation and its handle may disagree before `ip-without-handle`
    /// or `handle-without-ip`.
    #[serde(default = "defaults::handle_grace_ms")]
    pub handle_grace_ms: i64,
}

/// The defaults of [`RuleConfig`], also for settings saved before they existed.
mod defaults {
    /// Calico's own leak grace period (kube-controllers' `leakGracePeriod`).
    pub fn calico_grace_ms() -> i64 {
        15 * 60 * 1_000
    }

    /// Cilium's IPAM expiration (10 min) plus its `status.ipam.used` write lag (15 s),
    /// rounded up.
    pub fn cilium_grace_ms() -> i64 {
        11 * 60 * 1_000
    }

    /// Seconds of handle-before-block and block-before-handle are normal.
    pub fn handle_grace_ms() -> i64 {
        60 * 1_000
    }
}

impl RuleConfig {
    /// How long an allocation held by a record of `stream` may outlive its pod before
    /// `ip-without-pod`.
    pub fn owner_grace_of(&self, stream: Stream) -> i64 {
        match stream.canonical() {
            Stream::CalicoIpamBlock => self.calico_grace_ms,
            Stream::CiliumNode => self.cilium_grace_ms,
            _ => self.owner_grace_ms,
        }
    }
}

impl Default for RuleConfig {
    fn default() -> Self {
        RuleConfig {
            subnet_terminating_grace_ms: 10 * 60 * 1_000,
            owner_grace_ms: 10 * 60 * 1_000,
            records_grace_ms: 5 * 60 * 1_000,
            calico_grace_ms: defaults::calico_grace_ms(),
            cilium_grace_ms: defaults::cilium_grace_ms(),
            handle_grace_ms: defaults::handle_grace_ms(),
        }
    }
}

/// One change of the cluster state, as rules see it.
pub struct Change<'a> {
    /// The event that caused it.
    pub event: &'a EventRef,
    /// The record it is about (`None` for markers).
    pub record: Option<&'a RecordKey>,
    /// The record under this name before the event.
    pub before: Option<&'a ObjectRecord>,
    /// The record under this name after the event.
    pub after: Option<&'a ObjectRecord>,
    /// Holdings the record had before and has no more.
    pub released: &'a [ReleasedHolding],
    /// Whether what the record names or holds may have changed (else only its status,
    /// version or metadata did).
    pub reindexed: bool,
    /// What the record held before and holds after, computed once for all rules.
    pub(crate) held_before: OnceCell<Holdings<'a>>,
    pub(crate) held_after: OnceCell<Holdings<'a>>,
}

impl<'a> Change<'a> {
    /// The stream of the change.
    pub fn stream(&self) -> Stream {
        self.event.stream
    }

    /// The record's key.
    pub fn key(&self) -> RecordKey {
        match self.record {
            Some(key) => key.clone(),
            None => (self.event.stream, self.event.name.clone()),
        }
    }

    /// Whether a complete list of the stream just ended.
    pub fn is_list_end(&self) -> bool {
        self.event.event_type == EventType::SyncEnd
    }

    /// The object that went: deleted, or replaced by a new uid under its name.
    pub fn removed(&self) -> Option<&ObjectRecord> {
        let before = self.before?;
        match self.after {
            Some(after) if after.uid == before.uid => None,
            _ => Some(before),
        }
    }

    /// Whether an object now exists under this name that did not before: it is new, or a
    /// new uid replaced the old one. (A status update of a live object did not appear: rules
    /// that rescan what names a pool do it only then, so that a pool's status churn costs
    /// nothing per record naming it.)
    pub fn appeared(&self) -> bool {
        match (self.before, self.after) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(before), Some(after)) => before.uid != after.uid,
        }
    }

    /// Whether the change is a deletion event.
    pub fn is_deletion(&self) -> bool {
        self.event.event_type.is_deletion()
    }

    /// What the record held before the change.
    pub fn held_before(&self) -> &Holdings<'a> {
        let event: &'a EventRef = self.event;
        self.held_before
            .get_or_init(|| held(&event.name, self.before))
    }

    /// What the record holds after the change.
    pub fn held_after(&self) -> &Holdings<'a> {
        let event: &'a EventRef = self.event;
        self.held_after
            .get_or_init(|| held(&event.name, self.after))
    }
}

/// The namespace of an owner named `namespace/name`, as every IPAM's records name pods.
pub(super) fn owner_namespace(owner: &str) -> Option<String> {
    owner
        .split_once('/')
        .map(|(namespace, _)| namespace)
        .filter(|namespace| !namespace.is_empty())
        .map(str::to_owned)
}

/// The namespace of the pod an object is about: a kube-ovn IP's `spec.namespace` (the IP
/// itself is cluster-scoped), else a namespaced object's own (`namespace/name`, as a
/// SpiderEndpoint shares its pod's).
pub(super) fn object_namespace(name: &str, record: &ObjectRecord) -> Option<String> {
    match record.part().ip() {
        Some(ip) => Some(ip.pod_namespace())
            .filter(|namespace| !namespace.is_empty())
            .map(str::to_owned),
        None => owner_namespace(name),
    }
}

fn held<'a>(name: &'a str, record: Option<&'a ObjectRecord>) -> Holdings<'a> {
    match record {
        Some(record) => holdings::holdings(name, record),
        None => Holdings::new(),
    }
}

/// What a rule works with for one step.
pub struct Context<'a> {
    /// The state after the change.
    pub state: &'a ClusterState,
    /// Rule settings.
    pub config: &'a RuleConfig,
    /// Cluster the alerts are for.
    pub cluster_id: &'a str,
    /// Event time of this step.
    pub now_ms: i64,
    pub(crate) book: &'a mut AlertBook,
    pub(crate) at: Moment,
    pub(crate) out: &'a mut Vec<Alert>,
}

impl Context<'_> {
    /// Fires `finding` unless it already fires.
    pub fn fire(&mut self, finding: Finding) {
        if let Some(alert) = self.book.fire(self.cluster_id, finding, &self.at) {
            self.out.push(alert);
        }
    }

    /// Fires `finding` as of `time_ms` (a deadline that passed before the clock noticed).
    pub fn fire_at(&mut self, finding: Finding, time_ms: i64) {
        let noticed_at = self.at.time_ms;
        self.at.time_ms = time_ms;
        self.fire(finding);
        self.at.time_ms = noticed_at;
    }

    /// Resolves the alert `id` if it fires; `healed_by` ends its evidence.
    pub fn resolve(&mut self, id: &str, healed_by: Evidence) {
        if let Some(alert) = self.book.resolve(id, healed_by, &self.at) {
            self.out.push(alert);
        }
    }

    /// The id of `rule`'s alert about `subject_uid` in `scope`.
    pub fn alert_id(&self, rule: &str, subject_uid: &str, scope: Option<&str>) -> String {
        alert_id(self.cluster_id, rule, subject_uid, scope)
    }

    /// Whether the alert `id` fires.
    pub fn is_firing(&self, id: &str) -> bool {
        self.book.is_firing(id)
    }

    /// Whether an alert of `rule` about `subject_uid` fires (allocates nothing).
    pub fn is_firing_about(&self, rule: &str, subject_uid: &str) -> bool {
        self.book.is_firing_about(rule, subject_uid)
    }

    /// The firing alerts of `rule` about `subject_uid`.
    pub fn firing_about(&self, rule: &str, subject_uid: &str) -> Vec<Alert> {
        if !self.book.is_firing_about(rule, subject_uid) {
            return Vec::new();
        }
        self.book
            .active_for_subject(subject_uid)
            .iter()
            .filter_map(|id| self.book.get(id))
            .filter(|a| a.rule == rule)
            .cloned()
            .collect()
    }

    /// Resolves every firing alert of `rule` about `subject_uid`, healed by the evidence
    /// `healed_by` makes (made only when one fires: most changes resolve nothing).
    pub fn resolve_all_about(
        &mut self,
        rule: &str,
        subject_uid: &str,
        healed_by: impl FnOnce() -> Evidence,
    ) {
        let firing = self.firing_about(rule, subject_uid);
        if firing.is_empty() {
            return;
        }
        let healed_by = healed_by();
        for alert in firing {
            self.resolve(&alert.alert_id, healed_by.clone());
        }
    }
}

/// Evidence from an event, with what it shows.
pub(crate) fn evidence(event: &EventRef, what: String) -> Evidence {
    Evidence {
        stream: event.stream,
        event_type: event.event_type,
        name: event.name.to_string(),
        resource_version: event.resource_version().to_string(),
        time_ms: event.time_ms(),
        what,
        actor: None,
    }
}

/// "gone (DELETED)" for an event that ended an object.
pub(crate) fn gone_evidence(event: &EventRef, what: &str) -> Evidence {
    evidence(event, format!("{what} is gone ({})", event.event_type))
}

/// The safe manual fix for an object stuck on a finalizer: a JSON patch that only applies
/// to this exact version of the object and removes only that finalizer.
pub fn remove_finalizer_command(
    resource: &str,
    key: &str,
    resource_version: &str,
    index: usize,
    finalizer: &str,
) -> String {
    crate::analysis::fix::remove_finalizer(resource, key, resource_version, index, finalizer)
}

/// A time for a person.
pub(crate) fn time_text(ms: Option<i64>) -> String {
    ms.map_or_else(|| "an unknown time".to_owned(), format_timestamp_ms)
}

/// A duration for a person: "10 min", "90 s".
pub(crate) fn duration_text(ms: i64) -> String {
    if ms >= 60_000 && ms % 60_000 == 0 {
        format!("{} min", ms / 60_000)
    } else {
        format!("{} s", ms / 1_000)
    }
}

/// Saves a rule's state.
pub(crate) fn save_state<T: Serialize>(state: &T) -> serde_json::Value {
    // Rule states are plain data; serializing them cannot fail.
    serde_json::to_value(state).unwrap_or(serde_json::Value::Null)
}

/// Restores a rule's state (`null`: a checkpoint from before the rule existed).
pub(crate) fn restore_state<T: for<'de> Deserialize<'de> + Default>(
    saved: serde_json::Value,
) -> Result<T, serde_json::Error> {
    if saved.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(saved)
}

/// Runs events through the whole analyzer core and lists the alert transitions, for the
/// rules' tests.
#[cfg(test)]
pub(crate) mod testing {
    use ipaudit_schemas::WatchEvent;

    use crate::analysis::engine::{Analyzer, AnalyzerConfig, Output};

    /// `(rule, status, subject)` of every transition, in order, after `finish` at the
    /// latest event time.
    pub fn transitions(events: Vec<WatchEvent>) -> Vec<(String, String, String)> {
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        for e in events {
            analyzer.step(e, &mut out);
        }
        analyzer.finish(None, &mut out);
        out.into_iter()
            .filter_map(|o| match o {
                Output::Alert(a) => Some((a.rule, a.status.as_str().to_owned(), a.subject_name)),
                Output::NewEpoch(_) => None,
            })
            .collect()
    }

    /// One transition, for comparisons.
    pub fn t(rule: &str, status: &str, subject: &str) -> (String, String, String) {
        (rule.into(), status.into(), subject.into())
    }

    /// The transitions of `rule` only (other rules may see the same events).
    pub fn transitions_of(rule: &str, events: Vec<WatchEvent>) -> Vec<(String, String, String)> {
        transitions(events)
            .into_iter()
            .filter(|(name, _, _)| name == rule)
            .collect()
    }

    /// A pod of its own appearing at `at`: it moves event time and nothing else.
    pub fn tick(rv: i64, at: i64) -> WatchEvent {
        ipaudit_schemas::builders::EventBuilder::pod("default", &format!("tick-{rv}"))
            .rv(rv)
            .at(at)
            .added()
    }

    /// Complete (empty) lists of Calico's blocks and handles, then `events`: the handle
    /// rules judge only once both were listed.
    pub fn after_calico_lists(events: Vec<WatchEvent>) -> Vec<WatchEvent> {
        use ipaudit_schemas::{EventType, Stream};
        [Stream::CalicoIpamBlock, Stream::CalicoIpamHandle]
            .into_iter()
            .map(|stream| {
                ipaudit_schemas::builders::EventBuilder::marker(stream, EventType::SyncEnd, 0)
            })
            .chain(events)
            .collect()
    }

    /// A minute of event time, in ms.
    pub const MIN: i64 = 60_000;
}
