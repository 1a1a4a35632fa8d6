//! How alerts are shown, wherever they are shown: the findings of a run (each alert's
//! story and the epoch changes), an alert as text and as a JSON line, and ([`html`]) the
//! incident picture and its stylesheet. Pure: outputs in, text out. The replay report
//! ([`crate::offline::report`]), the live incident pages ([`crate::live::ui`]) and
//! `kubectl ipaudit` all use it.

pub mod html;

use std::collections::HashMap;
use std::fmt::Write as _;

use ipaudit_schemas::kubernetes::format_timestamp_ms;
use ipaudit_schemas::{Actor, Alert, AlertStatus, Evidence};
use serde::Serialize;

use crate::analysis::engine::Output;
use crate::analysis::reorder::EpochChange;

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

/// One JSON object per alert (`"record": "alert"`), one per line, written to `out` as it
/// goes.
pub fn write_alert_lines(mut out: impl std::io::Write, findings: &Findings) -> std::io::Result<()> {
    for history in &findings.alerts {
        serde_json::to_writer(&mut out, &AlertLine::of(history.latest()))?;
        out.write_all(b"\n")?;
    }
    Ok(())
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

fn time_or_null(ms: i64) -> Option<String> {
    (ms > 0).then(|| format_timestamp_ms(ms))
}

/// One alert's story as the text report tells it.
pub fn write_alert(out: &mut String, history: &AlertHistory) {
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
