//! What a replay found, for a person (an incident-review report) or a program (JSON lines).

pub mod html;

use std::collections::HashMap;
use std::fmt::Write as _;

use ipaudit_schemas::kubernetes::format_timestamp_ms;
use ipaudit_schemas::{Actor, Alert, AlertStatus, Evidence};
use serde::Serialize;
use serde_json::json;

use crate::analysis::engine::Output;
use crate::analysis::reorder::EpochChange;
use crate::offline::replay::ReplayOutcome;

/// One alert's story: how it fired and, if it did, how it resolved.
#[derive(Debug, Clone)]
pub struct AlertHistory {
    /// The FIRING transition.
    pub fired: Alert,
    /// The RESOLVED transition.
    pub resolved: Option<Alert>,
}

impl AlertHistory {
    /// The latest transition.
    pub fn latest(&self) -> &Alert {
        self.resolved.as_ref().unwrap_or(&self.fired)
    }
}

/// Alerts (in the order they fired) and epoch changes.
#[derive(Debug, Default)]
pub struct Findings {
    /// Alerts in firing order.
    pub alerts: Vec<AlertHistory>,
    /// Epoch changes.
    pub epochs: Vec<EpochChange>,
}

impl Findings {
    /// Links every alert to its incident page under `ui_url` (a running analyzer's
    /// `--ui-url`): the reports then name each incident's live page.
    pub fn link_pages(&mut self, ui_url: &str) {
        for history in &mut self.alerts {
            let url = crate::incidents_api::incident_url(ui_url, &history.fired.alert_id);
            if let Some(resolved) = &mut history.resolved {
                resolved.url = Some(url.clone());
            }
            history.fired.url = Some(url);
        }
    }

    /// Folds outputs into per-alert histories. An alert that fires again after resolving
    /// gets a second history.
    pub fn from_outputs(outputs: &[Output]) -> Self {
        Self::fold(outputs.iter().cloned())
    }

    /// [`Findings::from_outputs`], taking the outputs: their alerts move into the
    /// histories rather than being copied (a replay's transitions can take hundreds of
    /// MiB; copied, they were held twice while the report was made).
    pub fn take(outputs: Vec<Output>) -> Self {
        Self::fold(outputs)
    }

    fn fold(outputs: impl IntoIterator<Item = Output>) -> Self {
        let mut findings = Findings::default();
        let mut open: HashMap<String, usize> = HashMap::new();
        for output in outputs {
            match output {
                Output::Alert(alert) if alert.status == AlertStatus::Firing => {
                    open.insert(alert.alert_id.clone(), findings.alerts.len());
                    findings.alerts.push(AlertHistory {
                        fired: alert,
                        resolved: None,
                    });
                }
                Output::Alert(alert) => {
                    if let Some(i) = open.remove(alert.alert_id.as_str()) {
                        findings.alerts[i].resolved = Some(alert);
                    }
                }
                Output::NewEpoch(change) => findings.epochs.push(change),
            }
        }
        findings
    }
}

/// One JSON object per alert, one per line (`"record": "alert"`); then, when any input
/// was unusable, one `"record": "input"` line that says how much was skipped. Written
/// line by line to `out` (a replay may report tens of thousands of alerts: the report is
/// not held whole).
pub fn write_jsonl(
    mut out: impl std::io::Write,
    findings: &Findings,
    outcome: &ReplayOutcome,
) -> std::io::Result<()> {
    for history in &findings.alerts {
        serde_json::to_writer(&mut out, &AlertLine::of(history.latest()))?;
        out.write_all(b"\n")?;
    }
    if outcome.problem_count > 0 || outcome.nothing_read() {
        let line = json!({
            "record": "input",
            "events": outcome.stats.events_in,
            "problems": outcome.problem_count,
            "skipped": outcome.skipped,
            "skipped_bytes": outcome.skipped_bytes,
            "problems_listed": outcome.problems.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        });
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// An alert's JSON line, serialised from borrowed fields (a replay may report tens of
/// thousands of alerts: building `serde_json::Value`s for them took a twentieth of the
/// replay). The fields are in alphabetical order, as the lines always had them.
#[derive(Serialize)]
struct AlertLine<'a> {
    alert_id: &'a str,
    cluster_id: &'a str,
    epoch: i64,
    evidence: Vec<EvidenceLine<'a>>,
    fired_at: Option<String>,
    fired_resource_version: &'a str,
    fix: Option<&'a str>,
    record: &'static str,
    resolved_at: Option<String>,
    resolved_resource_version: Option<&'a str>,
    rule: &'a str,
    severity: &'static str,
    status: &'static str,
    subject_kind: &'a str,
    subject_name: &'a str,
    subject_uid: &'a str,
    subnet: Option<&'a str>,
    summary: &'a str,
    /// The incident's live page (`replay --ui-url`); absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
}

impl<'a> AlertLine<'a> {
    fn of(alert: &'a Alert) -> Self {
        AlertLine {
            alert_id: &alert.alert_id,
            cluster_id: &alert.cluster_id,
            epoch: alert.epoch,
            evidence: alert.evidence.iter().map(EvidenceLine::of).collect(),
            fired_at: time_or_null(alert.fired_at_ms),
            fired_resource_version: &alert.fired_resource_version,
            fix: alert.fix.as_deref(),
            record: "alert",
            resolved_at: alert.resolved_at_ms.and_then(time_or_null),
            resolved_resource_version: alert.resolved_resource_version.as_deref(),
            rule: &alert.rule,
            severity: alert.severity.as_str(),
            status: alert.status.as_str(),
            subject_kind: &alert.subject_kind,
            subject_name: &alert.subject_name,
            subject_uid: &alert.subject_uid,
            subnet: alert.subnet.as_deref(),
            summary: &alert.summary,
            url: alert.url.as_deref(),
        }
    }
}

/// An evidence entry of an [`AlertLine`], its fields in alphabetical order.
#[derive(Serialize)]
struct EvidenceLine<'a> {
    actor: Option<ActorLine<'a>>,
    name: &'a str,
    resource_version: &'a str,
    stream: &'static str,
    time: Option<String>,
    #[serde(rename = "type")]
    event_type: &'static str,
    what: &'a str,
}

impl<'a> EvidenceLine<'a> {
    fn of(evidence: &'a Evidence) -> Self {
        EvidenceLine {
            actor: evidence.actor.as_ref().map(ActorLine::of),
            name: &evidence.name,
            resource_version: &evidence.resource_version,
            stream: evidence.stream.as_str(),
            time: evidence.time_ms.and_then(time_or_null),
            event_type: evidence.event_type.as_str(),
            what: &evidence.what,
        }
    }
}

/// An evidence entry's actor: the audit log's names for it, in alphabetical order.
#[derive(Serialize)]
struct ActorLine<'a> {
    impersonated_user: Option<&'a str>,
    source_ips: &'a [String],
    user: &'a str,
    user_agent: Option<&'a str>,
}

impl<'a> ActorLine<'a> {
    fn of(actor: &'a Actor) -> Self {
        ActorLine {
            impersonated_user: actor.impersonated_user.as_deref(),
            source_ips: &actor.source_ips,
            user: &actor.user,
            user_agent: actor.user_agent.as_deref(),
        }
    }
}

/// Who made a request, for a person: `user (as impersonated) from ips, agent`.
pub fn actor_text(actor: &Actor) -> String {
    let mut text = actor.user.clone();
    if let Some(as_user) = &actor.impersonated_user {
        let _ = write!(text, " (as {as_user})");
    }
    if !actor.source_ips.is_empty() {
        let _ = write!(text, " from {}", actor.source_ips.join(", "));
    }
    if let Some(agent) = &actor.user_agent {
        let _ = write!(text, ", {agent}");
    }
    text
}

/// What the audit logs gave, for the report's header; `None` without audit input.
pub fn audit_text(outcome: &ReplayOutcome) -> Option<String> {
    let audit = outcome.audit.as_ref()?;
    let s = &audit.summary;
    let mut text = format!(
        "audit log: {} file(s), {} entries: {} write(s) of watched kinds used ({} with the object), skipped {} read(s), {} refused request(s), {} other stage(s), {} of other resources, {} other verb(s)",
        s.files, s.entries, s.writes, s.with_object, s.reads, s.refused, s.other_stages, s.other_resources, s.other_verbs
    );
    if audit.gave_events {
        if s.ordered_by_time > 0 {
            let _ = write!(
                text,
                "\n  {} event(s) whose resourceVersion the audit log does not give are ordered by audit time after the latest known version V, shown as rv V+n",
                s.ordered_by_time
            );
        }
    } else {
        text.push_str(
            "\n  events from the recordings; the audit log only names who made each request",
        );
    }
    let _ = write!(
        text,
        "\n  actors named for {} of {} evidence entries (matched by resourceVersion, else by kind, name and verb within {} ms)",
        audit.named.named,
        audit.named.evidence,
        crate::analysis::actors::MATCH_WINDOW_MS
    );
    Some(text)
}

/// How much input was unusable, in one sentence; `None` when all of it was read.
pub fn skipped_text(outcome: &ReplayOutcome) -> Option<String> {
    if outcome.problem_count == 0 {
        return None;
    }
    Some(format!(
        "{} input problem(s): {} document(s)/record(s) skipped ({} bytes of input), {} kept without unusable fields",
        outcome.problem_count,
        outcome.skipped,
        outcome.skipped_bytes,
        outcome.problem_count - outcome.skipped,
    ))
}

fn time_or_null(ms: i64) -> Option<String> {
    (ms > 0).then(|| format_timestamp_ms(ms))
}

/// The incident-review report.
pub fn render_text(findings: &Findings, outcome: &ReplayOutcome) -> String {
    let mut out = String::new();
    let firing = findings
        .alerts
        .iter()
        .filter(|h| h.resolved.is_none())
        .count();
    let range = outcome.rv_range.map_or_else(String::new, |(lo, hi)| {
        format!(", resourceVersions {lo}..{hi}")
    });
    let _ = writeln!(
        out,
        "ipaudit replay: {} events{range}; {} alert(s): {firing} firing, {} resolved",
        outcome.stats.events_in,
        findings.alerts.len(),
        findings.alerts.len() - firing,
    );
    let stats = &outcome.stats;
    if stats.duplicates + stats.stale + stats.reorder.late > 0 {
        let _ = writeln!(
            out,
            "  {} duplicate(s) dropped, {} stale event(s) ignored, {} late event(s)",
            stats.duplicates, stats.stale, stats.reorder.late
        );
    }
    if stats.reorder.forced > 0 {
        let _ = writeln!(
            out,
            "  {} event(s) released early: more than {} events were held waiting for a quiet stream",
            stats.reorder.forced,
            crate::analysis::reorder::MAX_HELD
        );
    }
    if let Some(text) = audit_text(outcome) {
        let _ = writeln!(out, "  {text}");
    }
    if let Some(text) = skipped_text(outcome) {
        let _ = writeln!(out, "  SKIPPED INPUT: {text}");
    }
    if stats.unknown_kinds > 0 {
        let _ = writeln!(
            out,
            "  {} event(s) of kinds this build does not know skipped (recorded by a newer collector: upgrade the analyzer to analyse them)",
            stats.unknown_kinds
        );
    }
    for problem in &outcome.problems {
        let _ = writeln!(out, "  input: {problem}");
    }
    for more in &outcome.unlisted {
        let _ = writeln!(
            out,
            "  input: {}: {} more problem(s) not listed ({} skipped, {} bytes)",
            more.path.display(),
            more.problems,
            more.skipped,
            more.skipped_bytes
        );
    }
    if outcome.nothing_read() {
        let _ = writeln!(out, "\nNo event could be read: nothing was analysed.");
        return out;
    }
    for change in &findings.epochs {
        let _ = writeln!(
            out,
            "\nEPOCH {}: {} stream of collector {:?} went back from resourceVersion {} to {} (etcd restore?); versions before and after are not compared: objects are tracked on, each from its first event in the new epoch",
            change.epoch, change.stream, change.collector_id, change.previous_rv, change.rv
        );
    }
    if findings.alerts.is_empty() {
        let _ = writeln!(out, "\nNo leak found.");
    }
    for history in &findings.alerts {
        write_alert(&mut out, history);
    }
    out
}

fn write_alert(out: &mut String, history: &AlertHistory) {
    let alert = history.latest();
    let status = match &history.resolved {
        Some(r) => format!(
            "RESOLVED at resourceVersion {}",
            r.resolved_resource_version.as_deref().unwrap_or("?")
        ),
        None => "FIRING".to_owned(),
    };
    let _ = writeln!(
        out,
        "\n[{}] {} ({status})",
        alert.severity.as_str().to_uppercase(),
        alert.rule
    );
    let _ = writeln!(
        out,
        "  subject: {} {}{}",
        alert.subject_kind,
        alert.subject_name,
        alert
            .subnet
            .as_deref()
            .map_or_else(String::new, |s| format!("    subnet: {s}"))
    );
    let _ = writeln!(
        out,
        "  fired at resourceVersion {} ({}), alert id {}",
        history.fired.fired_resource_version,
        time_or_null(history.fired.fired_at_ms).unwrap_or_else(|| "no time recorded".into()),
        alert.alert_id
    );
    let _ = writeln!(out, "  {}", alert.summary);
    if let Some(url) = &alert.url {
        let _ = writeln!(out, "  page: {url}");
    }
    let _ = writeln!(out, "  timeline:");
    let stream_width = alert
        .evidence
        .iter()
        .map(|e| e.stream.as_str().len())
        .max()
        .unwrap_or(0)
        .max(6);
    for e in &alert.evidence {
        write_evidence(out, e, stream_width);
    }
    if let (Some(fix), None) = (&alert.fix, &history.resolved) {
        let _ = writeln!(out, "  fix:\n    {fix}");
    }
}

/// One timeline line; `stream_width` aligns the stream column within one alert.
fn write_evidence(out: &mut String, e: &Evidence, stream_width: usize) {
    let time = e
        .time_ms
        .and_then(time_or_null)
        .unwrap_or_else(|| "-".into());
    let _ = writeln!(
        out,
        "    {time:<24} rv {:<10} {:<stream_width$} {:<17} {}",
        e.resource_version,
        e.stream.as_str(),
        e.event_type.as_str(),
        e.what
    );
    if let Some(actor) = &e.actor {
        let _ = writeln!(out, "    {:<24}    by {}", "", actor_text(actor));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::alerts::sample_alert;

    #[test]
    fn with_the_pages_address_each_alert_of_the_text_and_json_reports_names_its_page() {
        let mut findings = Findings::from_outputs(&[Output::Alert(sample_alert(
            "0a1b",
            "ip-without-pod",
            AlertStatus::Firing,
            "10",
        ))]);
        let mut jsonl = Vec::new();
        write_jsonl(&mut jsonl, &findings, &ReplayOutcome::default()).unwrap();
        assert!(
            !String::from_utf8_lossy(&jsonl).contains("\"url\""),
            "no url without the address"
        );
        findings.link_pages("https://ops.example/ipaudit/");
        let mut text = String::new();
        write_alert(&mut text, &findings.alerts[0]);
        assert!(
            text.contains("  page: https://ops.example/ipaudit/incidents/0a1b\n"),
            "{text}"
        );
        let mut jsonl = Vec::new();
        write_jsonl(&mut jsonl, &findings, &ReplayOutcome::default()).unwrap();
        let first = jsonl.split(|b| *b == b'\n').next().unwrap();
        let line: serde_json::Value = serde_json::from_slice(first).unwrap();
        assert_eq!(line["url"], "https://ops.example/ipaudit/incidents/0a1b");
    }

    #[test]
    fn findings_fold_each_firing_with_its_resolution_whether_the_outputs_are_lent_or_taken() {
        let alert = |id: &str, status, rv: &str| {
            Output::Alert(sample_alert(id, "ip-without-pod", status, rv))
        };
        let outputs = vec![
            alert("a", AlertStatus::Firing, "10"),
            alert("b", AlertStatus::Firing, "11"),
            alert("a", AlertStatus::Resolved, "12"),
            alert("a", AlertStatus::Firing, "13"),
        ];
        let lent = Findings::from_outputs(&outputs);
        let taken = Findings::take(outputs);
        for findings in [&lent, &taken] {
            let story: Vec<(&str, &str, Option<&str>)> = findings
                .alerts
                .iter()
                .map(|h| {
                    (
                        h.fired.alert_id.as_str(),
                        h.fired.fired_resource_version.as_str(),
                        // The sample's version is its transition's.
                        h.resolved
                            .as_ref()
                            .map(|r| r.fired_resource_version.as_str()),
                    )
                })
                .collect();
            assert_eq!(
                story,
                [
                    ("a", "10", Some("12")),
                    ("b", "11", None),
                    ("a", "13", None)
                ],
                "an alert that fires again after resolving gets a second history"
            );
        }
    }
}
