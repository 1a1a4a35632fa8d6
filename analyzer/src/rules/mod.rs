//! The detections. Each rule looks at the state after an event (or after time passed) and
//! fires or resolves alerts through the [`AlertBook`]; the rules hold no copy of the
//! cluster, only their own timers.

mod ip_stuck_terminating;
mod subnet_deleted_before_ip;
mod subnet_stuck_terminating;

use ipaudit_schemas::kubernetes::format_timestamp_ms;
use ipaudit_schemas::{Alert, EventType, Evidence, Severity, Stream};
use serde::{Deserialize, Serialize};

use crate::alerts::{AlertBook, Finding, Moment};
use crate::state::{Applied, ClusterState, EventRef, IpRecord, Removed};

pub use subnet_stuck_terminating::SubnetTimers;

/// The rules ipaudit knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// A Subnet's deletion came while IPs still named it.
    SubnetDeletedBeforeIp,
    /// An IP is terminating with kube-ovn's finalizer and its subnet is gone.
    IpStuckTerminating,
    /// A Subnet has been terminating for longer than the grace period.
    SubnetStuckTerminating,
}

impl Rule {
    /// The rule's name, as alerts carry it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::SubnetDeletedBeforeIp => "subnet-deleted-before-ip",
            Rule::IpStuckTerminating => "ip-stuck-terminating",
            Rule::SubnetStuckTerminating => "subnet-stuck-terminating",
        }
    }

    /// How urgent its alerts are.
    pub fn severity(self) -> Severity {
        match self {
            Rule::SubnetDeletedBeforeIp | Rule::IpStuckTerminating => Severity::Critical,
            Rule::SubnetStuckTerminating => Severity::Warning,
        }
    }
}

/// Settings of the rules.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RuleConfig {
    /// How long a Subnet may be terminating before `subnet-stuck-terminating` fires.
    pub subnet_terminating_grace_ms: i64,
}

impl Default for RuleConfig {
    fn default() -> Self {
        RuleConfig {
            subnet_terminating_grace_ms: 10 * 60 * 1_000,
        }
    }
}

/// What a rule works with for one step.
pub struct Context<'a> {
    /// The state after the event.
    pub state: &'a ClusterState,
    /// The active alerts.
    pub book: &'a mut AlertBook,
    /// Cluster the alerts are for.
    pub cluster_id: &'a str,
    /// Where in history this step is.
    pub at: Moment,
    /// Transitions produced.
    pub out: &'a mut Vec<Alert>,
}

impl Context<'_> {
    fn fire(&mut self, finding: Finding) {
        if let Some(alert) = self.book.fire(self.cluster_id, finding, &self.at) {
            self.out.push(alert);
        }
    }

    fn resolve(&mut self, id: &str, healed_by: Evidence) {
        if let Some(alert) = self.book.resolve(id, healed_by, &self.at) {
            self.out.push(alert);
        }
    }
}

/// Runs every rule on what one event changed.
pub fn on_applied(
    ctx: &mut Context<'_>,
    timers: &mut SubnetTimers,
    config: &RuleConfig,
    event: &EventRef,
    applied: &Applied,
) {
    match &applied.removed {
        Some(Removed::Ip(ip)) => {
            subnet_deleted_before_ip::on_ip_gone(ctx, ip, event);
            ip_stuck_terminating::on_ip_gone(ctx, ip, event);
        }
        Some(Removed::Subnet(subnet)) => {
            timers.on_subnet_gone(ctx, &subnet.uid, &event.name, event);
        }
        Some(Removed::Pod(_)) | None => {}
    }
    if event.event_type.is_deletion() && event.stream == Stream::Subnet {
        subnet_deleted_before_ip::on_subnet_deleted(ctx, event);
        for ip in ctx.state.ips_naming(&event.name) {
            ip_stuck_terminating::check(ctx, &ip, event);
        }
    }
    if event.event_type == EventType::SyncEnd && event.stream == Stream::Subnet {
        // A complete list of subnets: a terminating IP whose subnet it lacks is stuck,
        // whichever of the two lists came first.
        for ip in ctx.state.terminating_ips() {
            ip_stuck_terminating::check(ctx, &ip, event);
        }
    }
    if !applied.upserted {
        return;
    }
    match event.stream {
        Stream::Ip => {
            subnet_deleted_before_ip::recheck_ip(ctx, &event.name, event);
            ip_stuck_terminating::check(ctx, &event.name, event);
        }
        Stream::Subnet => {
            for ip in ctx.state.ips_naming(&event.name) {
                subnet_deleted_before_ip::recheck_ip(ctx, &ip, event);
                ip_stuck_terminating::check(ctx, &ip, event);
            }
            timers.on_subnet_changed(ctx.state, config, &event.name);
        }
        Stream::Pod => {}
    }
}

/// Evidence from an event, with what it shows.
fn evidence(event: &EventRef, what: String) -> Evidence {
    Evidence {
        stream: event.stream,
        event_type: event.event_type,
        name: event.name.clone(),
        resource_version: event.resource_version.clone(),
        time_ms: event.time_ms,
        what,
    }
}

/// How an IP is described in evidence and summaries.
fn describe_ip(ip: &IpRecord) -> String {
    let mut parts = Vec::new();
    if !ip.address.is_empty() {
        parts.push(ip.address.clone());
    }
    if !ip.pod.is_empty() {
        parts.push(format!("pod {}", ip.pod));
    }
    if !ip.pod_type.is_empty() {
        parts.push(ip.pod_type.clone());
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// The safe manual fix for an IP stuck on kube-ovn's finalizer: a JSON patch that only
/// applies to this exact version of the object and removes only that finalizer.
pub fn remove_finalizer_command(
    kind: &str,
    name: &str,
    resource_version: &str,
    index: usize,
    finalizer: &str,
) -> String {
    format!(
        "kubectl patch {kind} {name} --type=json -p '[{{\"op\":\"test\",\"path\":\"/metadata/resourceVersion\",\"value\":\"{resource_version}\"}},{{\"op\":\"test\",\"path\":\"/metadata/finalizers/{index}\",\"value\":\"{finalizer}\"}},{{\"op\":\"remove\",\"path\":\"/metadata/finalizers/{index}\"}}]'"
    )
}

fn time_text(ms: Option<i64>) -> String {
    ms.map_or_else(|| "an unknown time".to_owned(), format_timestamp_ms)
}

/// A duration for a person: "10 min", "90 s".
fn duration_text(ms: i64) -> String {
    if ms >= 60_000 && ms % 60_000 == 0 {
        format!("{} min", ms / 60_000)
    } else {
        format!("{} s", ms / 1_000)
    }
}
