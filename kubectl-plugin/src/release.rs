//! A guarded release from a check's report. Nothing is changed unless `--apply`; even then
//! only what the report and the live cluster still agree on:
//!
//! - the report must be of this cluster (kube-system uid, else API server URL) and younger
//!   than `--max-report-age`;
//! - each target is read again and acted on only if its uid and resourceVersion are still
//!   the report's, and every write carries that as a precondition (a JSON patch `test`, a
//!   DELETE precondition), so that an object changed in between is never hit;
//! - every change is made by the cleanups the collector's remediation makes
//!   ([`ipaudit_cleanup`]), with the same checks and preconditions;
//! - kube-ovn, an IP stuck terminating: kube-ovn's finalizer is removed (subnet still
//!   absent, a patch that tests the resourceVersion and the finalizer at its index);
//! - kube-ovn, an orphaned IP: deleted with uid and resourceVersion preconditions while its
//!   subnet is still absent; if kube-ovn's finalizer then holds it, it is released as above;
//! - whereabouts, an allocation whose pod is gone: removed from the IPPool with a JSON
//!   patch that tests the pool's resourceVersion and the allocation's podref, while the pod
//!   is still absent;
//! - spiderpool, a SpiderEndpoint stuck terminating whose pod is gone: spiderpool's
//!   finalizer is removed (pod still absent, a patch that tests the resourceVersion and the
//!   finalizer at its index);
//! - every other finding: reported, never changed.
//!
//! Actions are paced (`--rate`), printed, and each outcome is appended to a local log file
//! as one JSON line.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ipaudit_cleanup::{Cleanup, Mode, Planned, Target};
use ipaudit_runtime::clock::now_ms;
use ipaudit_schemas::kubernetes::format_timestamp_ms;
use ipaudit_schemas::{RemediationOutcome, Stream};
use kube::Client;
use serde_json::json;
use tracing::info_span;

use crate::cluster::ClusterIdentity;
use crate::report::{CheckReport, ReportFinding};

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
        Mode::Apply
    } else {
        Mode::DryRun
    };
    let mut last: Option<Instant> = None;
    let mut actions = Vec::new();
    let mut planned = Planned::default();
    // In the order the apply must take: a whereabouts reservation after the pool
    // allocations that back it (the sort is stable: the report's order otherwise).
    let mut steps: Vec<(&ReportFinding, Plan)> =
        report.findings.iter().map(|f| (f, plan(f))).collect();
    steps.sort_by_key(|(_, plan)| plan.after_allocations());
    for (finding, plan) in &steps {
        let span = info_span!("release", cluster = %live.cluster_id(), rule = %finding.alert.rule,
            object = %finding.alert.subject_name,
            resource_version = %finding.target.as_ref().map_or("", |t| t.resource_version.as_str()));
        let _entered = span.enter();
        if plan.touches_cluster() {
            if let Some(previous) = last {
                let wait = options.rate.interval().saturating_sub(previous.elapsed());
                tokio::time::sleep(wait).await;
            }
            last = Some(Instant::now());
        }
        let (verdict, reason) = run(client, mode, plan, &mut planned).await;
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
enum Plan {
    /// A cleanup of [`ipaudit_cleanup`].
    Clean(Cleanup),
    /// Nothing: only reported, for this reason.
    Report(String),
}

impl Plan {
    fn name(&self) -> &'static str {
        match self {
            Plan::Clean(cleanup) => cleanup.name(),
            Plan::Report(_) => "none",
        }
    }

    fn touches_cluster(&self) -> bool {
        !matches!(self, Plan::Report(_))
    }

    /// Whether it must come after the removal of pool allocations (a reservation's delete
    /// is refused while an allocation backs it).
    fn after_allocations(&self) -> bool {
        matches!(self, Plan::Clean(Cleanup::DeleteReservation { .. }))
    }
}

fn plan(finding: &ReportFinding) -> Plan {
    let alert = &finding.alert;
    if let Some(cleanup) = alert.cleanup.as_ref().and_then(Cleanup::of_alert) {
        return Plan::Clean(cleanup);
    }
    let Some(target) = &finding.target else {
        return Plan::Report("the snapshot holds no object to act on".into());
    };
    match (alert.rule.as_str(), target.stream, &target.address) {
        ("ip-orphaned", Stream::Ip, _) => Plan::Clean(Cleanup::DeleteOrphanedIp {
            target: Target {
                address: None,
                ..target.clone()
            },
        }),
        ("ip-without-pod", Stream::IpPool, Some(address)) => {
            Plan::Clean(Cleanup::RemovePoolAllocation {
                target: Target {
                address: None,
                ..target.clone()
            },
                address: address.clone(),
            })
        }
        (_, Stream::SpiderIpPool, _) => Plan::Report(
            "spiderpool: only reported (its controller's garbage collector releases pool entries of gone pods); see the fix".into(),
        ),
        _ => Plan::Report("no automatic cleanup for this finding; see its fix".into()),
    }
}

/// Runs one step of the plan, after those `planned` has noted (a dry run checks the
/// cluster as the apply would find it).
async fn run(client: &Client, mode: Mode, plan: &Plan, planned: &mut Planned) -> (Verdict, String) {
    match plan {
        Plan::Report(why) => (Verdict::ReportOnly, why.clone()),
        Plan::Clean(cleanup) => {
            let outcome = ipaudit_cleanup::apply_after(client, mode, cleanup, planned).await;
            planned.note(cleanup, &outcome);
            (Verdict::of(outcome.outcome), outcome.reason)
        }
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
