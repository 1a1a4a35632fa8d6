//! What a replay found, for a person (an incident-review report) or a program (JSON lines):
//! the alerts as [`crate::present`] shows them, and what the input held.

pub mod html;

use std::fmt::Write as _;

use serde_json::json;

use crate::offline::replay::ReplayOutcome;
use crate::present::{write_alert, write_alert_lines, Findings};

/// One JSON object per alert, one per line (`"record": "alert"`); then, when any input
/// was unusable, one `"record": "input"` line that says how much was skipped. Written
/// line by line to `out` (a replay may report tens of thousands of alerts: the report is
/// not held whole).
pub fn write_jsonl(
    mut out: impl std::io::Write,
    findings: &Findings,
    outcome: &ReplayOutcome,
) -> std::io::Result<()> {
    write_alert_lines(&mut out, findings)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::alerts::sample_alert;
    use crate::analysis::engine::Output;
    use ipaudit_schemas::AlertStatus;

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
