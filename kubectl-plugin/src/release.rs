//! A guarded release from a check's report. Nothing is changed unless `--apply`; even then
//! only what the report and the live cluster still agree on:
//!
//! - the report must be of this cluster (kube-system uid, else API server URL) and younger
//!   than `--max-report-age`;
//! - each target is read again and acted on only if its uid and resourceVersion are still
//!   the report's, and every write carries that as a precondition (a JSON patch `test`, a
//!   DELETE precondition), so that an object changed in between is never hit;
//! - kube-ovn, an IP stuck terminating: kube-ovn's finalizer is removed by the collector's
//!   own guarded remediation ([`ipaudit_collector::remediate::execute`]: subnet still
//!   absent, a patch that tests the resourceVersion and the finalizer at its index);
//! - kube-ovn, an orphaned IP: deleted with uid and resourceVersion preconditions while its
//!   subnet is still absent; if kube-ovn's finalizer then holds it, it is released as above;
//! - whereabouts, an allocation whose pod is gone: removed from the IPPool with a JSON
//!   patch that tests the pool's resourceVersion and the allocation's podref, while the pod
//!   is still absent;
//! - spiderpool, and every other finding: reported, never changed.
//!
//! Actions are paced (`--rate`), printed, and each outcome is appended to a local log file
//! as one JSON line.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ipaudit_analyzer::analysis::fix::is_object_name;
use ipaudit_collector::remediate::{execute, get, names_missing, Lookup, RemediationMode};
use ipaudit_runtime::clock::now_ms;
use ipaudit_schemas::convert::from_object_of;
use ipaudit_schemas::kubernetes::format_timestamp_ms;
use ipaudit_schemas::{
    is_kube_ovn_finalizer, CleanupAction, CleanupCommand, EventType, KindPart, RemediationOutcome,
    Stream,
};
use kube::Client;
use serde_json::{json, Value};
use tracing::info_span;

use crate::cluster::ClusterIdentity;
use crate::report::{CheckReport, ReportFinding, Target};

/// How to release.
#[derive(Debug, Clone)]
pub struct ReleaseOptions {
    /// Change the cluster (else only check and say what would be done).
    pub apply: bool,
    /// Refuse a report older than this.
    pub max_report_age: Duration,
    /// At most this many targets per second.
    pub rate: Rate,
    /// Every outcome is appended here, one JSON line each.
    pub log_file: PathBuf,
}

/// A pace: `count` per `per`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// How many.
    pub count: u32,
    /// In how long.
    pub per: Duration,
}

impl Rate {
    /// The pause between two actions.
    pub fn interval(&self) -> Duration {
        self.per / self.count.max(1)
    }
}

impl std::str::FromStr for Rate {
    type Err = String;

    /// `5/s`, `100/m`, `10` (per second).
    fn from_str(text: &str) -> Result<Self, String> {
        let (count, unit) = text.split_once('/').unwrap_or((text, "s"));
        let count: u32 = count
            .trim()
            .parse()
            .ok()
            .filter(|c| *c > 0)
            .ok_or_else(|| format!("{text:?}: expected a positive count, e.g. 5/s or 100/m"))?;
        let per = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            other => return Err(format!("{other:?}: the unit is s, m or h (e.g. 5/s)")),
        };
        Ok(Rate { count, per })
    }
}

/// Why a release did not start. [`ReleaseError::Log`] may pass on a retry (disk space,
/// permissions fixed); the others need another report.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// The report is of another cluster.
    #[error("refused: {0}")]
    OtherCluster(String),
    /// The report is too old for its resourceVersions to mean anything.
    #[error("refused: the report was taken at {taken_at}, {age} ago, longer than --max-report-age {max}: run check again")]
    TooOld {
        /// When it was taken.
        taken_at: String,
        /// Its age.
        age: humantime::Duration,
        /// The limit.
        max: humantime::Duration,
    },
    /// The log file cannot be opened or written.
    #[error("cannot append to the release log {path}")]
    Log {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// What happened to one finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The change was made.
    Applied,
    /// Every check passed; the change would be made with `--apply`.
    DryRun,
    /// Not acted on, with a reason (changed since the report, healed, not supported).
    Skipped,
    /// Only reported: no cleanup is done for this kind of finding.
    ReportOnly,
    /// The API server did not answer as expected.
    Failed,
}

impl Verdict {
    /// Lower-case name, as printed and logged.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Applied => "applied",
            Verdict::DryRun => "dry-run",
            Verdict::Skipped => "skipped",
            Verdict::ReportOnly => "report-only",
            Verdict::Failed => "failed",
        }
    }

    fn of(outcome: RemediationOutcome) -> Self {
        match outcome {
            RemediationOutcome::Applied => Verdict::Applied,
            RemediationOutcome::DryRun => Verdict::DryRun,
            RemediationOutcome::Skipped => Verdict::Skipped,
            RemediationOutcome::Failed => Verdict::Failed,
        }
    }
}

/// One finding's outcome.
#[derive(Debug, Clone)]
pub struct Action {
    /// The alert's rule.
    pub rule: String,
    /// The alert's id.
    pub alert_id: String,
    /// The target, described.
    pub target: String,
    /// What was (or would be) done: `remove-finalizer`, `delete`, `remove-allocation`, `none`.
    pub action: &'static str,
    /// How it went.
    pub verdict: Verdict,
    /// Why, for a person.
    pub reason: String,
}

/// The refusals, before anything is read: another cluster, too old.
pub fn vet(
    report: &CheckReport,
    live: &ClusterIdentity,
    max_age: Duration,
    now_ms: i64,
) -> Result<(), ReleaseError> {
    if let Some(why) = report.cluster.mismatch(live) {
        return Err(ReleaseError::OtherCluster(why));
    }
    let age = Duration::from_millis(u64::try_from(now_ms - report.taken_at_ms).unwrap_or(0));
    if age > max_age {
        return Err(ReleaseError::TooOld {
            taken_at: report.taken_at.clone(),
            age: Duration::from_secs(age.as_secs()).into(),
            max: max_age.into(),
        });
    }
    Ok(())
}

/// Vets the report, then handles every finding in order, printing each outcome to `out`
/// and appending it to the log file.
pub async fn release(
    client: &Client,
    live: &ClusterIdentity,
    report: &CheckReport,
    options: &ReleaseOptions,
    out: &mut dyn Write,
) -> Result<Vec<Action>, ReleaseError> {
    vet(report, live, options.max_report_age, now_ms())?;
    let log_error = |source| ReleaseError::Log {
        path: options.log_file.clone(),
        source,
    };
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&options.log_file)
        .map_err(log_error)?;
    let mode = if options.apply {
        RemediationMode::On
    } else {
        RemediationMode::DryRun
    };
    let mut last: Option<Instant> = None;
    let mut actions = Vec::new();
    for finding in &report.findings {
        let span = info_span!("release", cluster = %live.cluster_id(), rule = %finding.alert.rule,
            object = %finding.alert.subject_name,
            resource_version = %finding.target.as_ref().map_or("", |t| t.resource_version.as_str()));
        let _entered = span.enter();
        let plan = plan(finding);
        if plan.touches_cluster() {
            if let Some(previous) = last {
                let wait = options.rate.interval().saturating_sub(previous.elapsed());
                tokio::time::sleep(wait).await;
            }
            last = Some(Instant::now());
        }
        let (verdict, reason) = run(client, mode, report, finding, &plan).await;
        let action = Action {
            rule: finding.alert.rule.clone(),
            alert_id: finding.alert.alert_id.clone(),
            target: finding.target.as_ref().map_or_else(
                || {
                    format!(
                        "{} {}",
                        finding.alert.subject_kind, finding.alert.subject_name
                    )
                },
                Target::describe,
            ),
            action: plan.name(),
            verdict,
            reason,
        };
        let _ = writeln!(
            out,
            "{:<11} {:<17} {:<24} {}: {}",
            action.verdict.as_str(),
            action.action,
            action.rule,
            action.target,
            action.reason
        );
        let line = json!({
            "time": format_timestamp_ms(now_ms()),
            "mode": if options.apply { "apply" } else { "dry-run" },
            "cluster_server": live.server,
            "kube_system_uid": live.kube_system_uid,
            "report_taken_at": report.taken_at,
            "rule": action.rule,
            "alert_id": action.alert_id,
            "target": action.target,
            "uid": finding.target.as_ref().map(|t| t.uid.clone()),
            "resource_version": finding.target.as_ref().map(|t| t.resource_version.clone()),
            "action": action.action,
            "outcome": action.verdict.as_str(),
            "reason": action.reason,
        });
        writeln!(log, "{line}").map_err(log_error)?;
        actions.push(action);
    }
    log.flush().map_err(log_error)?;
    Ok(actions)
}

/// What a finding calls for.
enum Plan<'a> {
    /// kube-ovn: remove the finalizer of a stuck IP.
    RemoveFinalizer(&'a ipaudit_schemas::Cleanup),
    /// kube-ovn: delete an orphaned IP.
    DeleteOrphanedIp(&'a Target),
    /// whereabouts: remove an allocation of a pool.
    RemoveAllocation(&'a Target, &'a str),
    /// Nothing: only reported, for this reason.
    Report(String),
}

impl Plan<'_> {
    fn name(&self) -> &'static str {
        match self {
            Plan::RemoveFinalizer(_) => "remove-finalizer",
            Plan::DeleteOrphanedIp(_) => "delete",
            Plan::RemoveAllocation(..) => "remove-allocation",
            Plan::Report(_) => "none",
        }
    }

    fn touches_cluster(&self) -> bool {
        !matches!(self, Plan::Report(_))
    }
}

fn plan(finding: &ReportFinding) -> Plan<'_> {
    let alert = &finding.alert;
    if let Some(cleanup) = &alert.cleanup {
        if cleanup.action == CleanupAction::RemoveFinalizer && cleanup.target_stream == Stream::Ip {
            return Plan::RemoveFinalizer(cleanup);
        }
    }
    let Some(target) = &finding.target else {
        return Plan::Report("the snapshot holds no object to act on".into());
    };
    match (alert.rule.as_str(), target.stream, &target.address) {
        ("ip-orphaned", Stream::Ip, _) => Plan::DeleteOrphanedIp(target),
        ("ip-without-pod", Stream::IpPool, Some(address)) => Plan::RemoveAllocation(target, address),
        (_, Stream::SpiderIpPool | Stream::SpiderEndpoint, _) => Plan::Report(
            "spiderpool: only reported (its controller releases what its pods no longer hold); see the fix".into(),
        ),
        _ => Plan::Report("no automatic cleanup for this finding; see its fix".into()),
    }
}

async fn run(
    client: &Client,
    mode: RemediationMode,
    report: &CheckReport,
    finding: &ReportFinding,
    plan: &Plan<'_>,
) -> (Verdict, String) {
    match plan {
        Plan::Report(why) => (Verdict::ReportOnly, why.clone()),
        Plan::RemoveFinalizer(cleanup) => {
            let command = command(report, finding, cleanup, &cleanup.resource_version);
            if let Err(error) = command.check_names() {
                return (Verdict::Skipped, format!("refused: {error}"));
            }
            let outcome = execute(client, mode, &command).await;
            (Verdict::of(outcome.outcome), outcome.reason)
        }
        Plan::DeleteOrphanedIp(target) => {
            delete_orphaned_ip(client, mode, report, finding, target).await
        }
        Plan::RemoveAllocation(target, address) => {
            remove_allocation(client, mode, target, address).await
        }
    }
}

/// The collector's cleanup command for a finalizer removal at `rv`.
fn command(
    report: &CheckReport,
    finding: &ReportFinding,
    cleanup: &ipaudit_schemas::Cleanup,
    rv: &str,
) -> CleanupCommand {
    CleanupCommand {
        command_id: finding.alert.alert_id.clone(),
        cluster_id: report.cluster.cluster_id(),
        action: CleanupAction::RemoveFinalizer,
        target_kind: "IP".into(),
        target_name: cleanup.target_name.clone(),
        target_uid: cleanup.target_uid.clone(),
        expected_resource_version: rv.to_owned(),
        finalizer: Some(cleanup.finalizer.clone()),
        subnet: cleanup.pool.clone(),
        reason_alert_id: finding.alert.alert_id.clone(),
        issued_at_ms: now_ms(),
        alert_fired_at_ms: finding.alert.fired_at_ms,
        signature: None,
    }
}

/// The live object, if it is still exactly the target (else the verdict that says why not).
async fn reread(client: &Client, path: &str, target: &Target) -> Result<Value, (Verdict, String)> {
    let kind = target.stream.kind();
    let plural = target.stream.spec().map_or("", |s| s.plural);
    let live = match get(client, path, plural, &target.name).await {
        Lookup::Found(object) => object,
        Lookup::Absent => return Err((Verdict::Skipped, format!("the {kind} no longer exists"))),
        Lookup::Failed(e) => return Err((Verdict::Failed, format!("cannot read the {kind}: {e}"))),
    };
    let field = |name: &str| {
        live.pointer(&format!("/metadata/{name}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (uid, rv) = (field("uid"), field("resourceVersion"));
    if uid != target.uid {
        return Err((
            Verdict::Skipped,
            format!(
                "uid changed: the {kind} was recreated ({uid} is not {})",
                target.uid
            ),
        ));
    }
    if rv != target.resource_version {
        return Err((
            Verdict::Skipped,
            format!(
                "resourceVersion changed ({rv} is not {}): the {kind} was updated since the report",
                target.resource_version
            ),
        ));
    }
    Ok(live)
}

/// The API path of one object of `stream`; `None` when a name is not a Kubernetes name
/// (names come from a file anyone can edit, and go into the URL path).
fn path_of(stream: Stream, namespace: Option<&str>, name: &str) -> Option<String> {
    let spec = stream.spec()?;
    let valid = is_object_name(name)
        && namespace.is_none_or(ipaudit_analyzer::analysis::fix::is_label_name)
        && namespace.is_some() == spec.namespaced;
    if !valid {
        return None;
    }
    let collection = spec.collection_path();
    Some(match namespace {
        Some(ns) => {
            let (prefix, plural) = collection.rsplit_once('/')?;
            format!("{prefix}/namespaces/{ns}/{plural}/{name}")
        }
        None => format!("{collection}/{name}"),
    })
}

fn object_path(target: &Target) -> Option<String> {
    path_of(target.stream, target.namespace.as_deref(), &target.name)
}

/// Ok when the object of `stream` named `name` is absent; else the verdict, with `present`
/// as the reason when it exists.
async fn require_absent(
    client: &Client,
    stream: Stream,
    namespace: Option<&str>,
    name: &str,
    present: String,
) -> Result<(), (Verdict, String)> {
    let (Some(path), Some(spec)) = (path_of(stream, namespace, name), stream.spec()) else {
        return Err((
            Verdict::Skipped,
            format!("refused: {name:?} is not a Kubernetes name"),
        ));
    };
    match get(client, &path, spec.plural, name).await {
        Lookup::Absent => Ok(()),
        Lookup::Found(_) => Err((Verdict::Skipped, present)),
        Lookup::Failed(e) => Err((
            Verdict::Failed,
            format!("cannot read {} {name}: {e}", spec.plural),
        )),
    }
}

async fn delete_orphaned_ip(
    client: &Client,
    mode: RemediationMode,
    report: &CheckReport,
    finding: &ReportFinding,
    target: &Target,
) -> (Verdict, String) {
    let Some(path) = object_path(target) else {
        return (
            Verdict::Skipped,
            format!("refused: {:?} is not a Kubernetes name", target.name),
        );
    };
    let live = match reread(client, &path, target).await {
        Ok(live) => live,
        Err(verdict) => return verdict,
    };
    if live
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return (Verdict::Skipped, "the IP is terminating already".into());
    }
    let subnet = live
        .pointer("/spec/subnet")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Err(verdict) = require_absent(
        client,
        Stream::Subnet,
        None,
        &subnet,
        format!("subnet {subnet} exists now: the IP is not orphaned"),
    )
    .await
    {
        return verdict;
    }
    if mode == RemediationMode::DryRun {
        return (
            Verdict::DryRun,
            format!("all checks passed; would delete it (uid {}, resourceVersion {}) and release kube-ovn's finalizer if it holds it", target.uid, target.resource_version),
        );
    }
    let options = json!({"apiVersion": "v1", "kind": "DeleteOptions",
        "preconditions": {"uid": target.uid, "resourceVersion": target.resource_version}});
    let request = http::Request::delete(&path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&options).unwrap_or_default());
    let request = match request {
        Ok(r) => r,
        Err(e) => return (Verdict::Failed, format!("cannot build the delete: {e}")),
    };
    let answer = match client.request::<Value>(request).await {
        Ok(answer) => answer,
        Err(kube::Error::Api(status))
            if status.code == 409 || names_missing(&status, "ips", &target.name) =>
        {
            return (
                Verdict::Skipped,
                format!(
                    "the IP changed while deleting ({}): {}",
                    status.code, status.message
                ),
            )
        }
        Err(e) => return (Verdict::Failed, format!("delete failed: {e}")),
    };
    // With kube-ovn's finalizer the IP is only marked; its subnet is gone, so kube-ovn
    // cannot release it: do what the stuck-IP cleanup does, at the version the delete made.
    let finalizer = answer
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .and_then(|f| {
            f.iter()
                .filter_map(Value::as_str)
                .find(|f| is_kube_ovn_finalizer(f))
        })
        .map(str::to_owned);
    let terminating = answer
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let (Some(finalizer), true) = (finalizer, terminating) else {
        return (
            Verdict::Applied,
            format!(
                "deleted (uid {}, resourceVersion {})",
                target.uid, target.resource_version
            ),
        );
    };
    let rv = answer
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let cleanup = ipaudit_schemas::Cleanup {
        action: CleanupAction::RemoveFinalizer,
        target_stream: Stream::Ip,
        target_name: target.name.clone(),
        target_namespace: None,
        target_uid: target.uid.clone(),
        resource_version: rv.to_owned(),
        finalizer,
        pool: subnet,
    };
    let outcome = execute(
        client,
        RemediationMode::On,
        &command(report, finding, &cleanup, rv),
    )
    .await;
    let verdict = Verdict::of(outcome.outcome);
    (
        verdict,
        format!(
            "deleted at resourceVersion {}; then {}",
            target.resource_version, outcome.reason
        ),
    )
}

async fn remove_allocation(
    client: &Client,
    mode: RemediationMode,
    target: &Target,
    address: &str,
) -> (Verdict, String) {
    let Some(path) = object_path(target) else {
        return (
            Verdict::Skipped,
            format!("refused: {:?} is not a Kubernetes name", target.name),
        );
    };
    let live = match reread(client, &path, target).await {
        Ok(live) => live,
        Err(verdict) => return verdict,
    };
    // The pool read by the same converter as every event, so the address means the same.
    let allocation = match from_object_of(Stream::IpPool, EventType::Modified, &live) {
        Ok(converted) => match converted.event.part {
            Some(KindPart::IpPool(pool)) => {
                pool.allocations.into_iter().find(|a| a.address == address)
            }
            _ => None,
        },
        Err(e) => return (Verdict::Failed, format!("cannot read the IPPool: {e}")),
    };
    let Some(allocation) = allocation else {
        return (
            Verdict::Skipped,
            format!("the IPPool no longer allocates {address}"),
        );
    };
    let (namespace, pod) = allocation
        .podref
        .split_once('/')
        .unwrap_or(("", &allocation.podref));
    if let Err(verdict) = require_absent(
        client,
        Stream::Pod,
        Some(namespace),
        pod,
        format!("pod {} exists now", allocation.podref),
    )
    .await
    {
        return verdict;
    }
    let offset = allocation.offset.replace('~', "~0").replace('/', "~1");
    if mode == RemediationMode::DryRun {
        return (
            Verdict::DryRun,
            format!("all checks passed; would remove allocation {} ({address} for {}) at resourceVersion {}", allocation.offset, allocation.podref, target.resource_version),
        );
    }
    let patch = json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": target.resource_version},
        {"op": "test", "path": format!("/spec/allocations/{offset}/podref"), "value": allocation.podref},
        {"op": "remove", "path": format!("/spec/allocations/{offset}")},
    ]);
    let request = http::Request::patch(&path)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(serde_json::to_vec(&patch).unwrap_or_default());
    let request = match request {
        Ok(r) => r,
        Err(e) => return (Verdict::Failed, format!("cannot build the patch: {e}")),
    };
    match client.request::<Value>(request).await {
        Ok(_) => (
            Verdict::Applied,
            format!(
                "removed allocation {} ({address} for {}) at resourceVersion {}",
                allocation.offset, allocation.podref, target.resource_version
            ),
        ),
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 422 => (
            Verdict::Skipped,
            format!(
                "the IPPool changed while patching ({}): {}",
                status.code, status.message
            ),
        ),
        Err(e) => (Verdict::Failed, format!("patch failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_reads_as_count_per_unit() {
        let rate: Rate = "5/s".parse().unwrap();
        assert_eq!(rate.interval(), Duration::from_millis(200));
        assert_eq!(
            "120/m".parse::<Rate>().unwrap().interval(),
            Duration::from_millis(500)
        );
        assert_eq!(
            "2".parse::<Rate>().unwrap().interval(),
            Duration::from_millis(500)
        );
        assert!("0/s".parse::<Rate>().is_err());
        assert!("5/d".parse::<Rate>().is_err());
    }
}
