//! The replay's incident-review report as one static HTML page: a summary of what was
//! read, an index of incidents, and each incident as [`crate::present::html`] draws it.
//!
//! The page is self-contained (inline CSS and SVG, no script, no external resource) so it
//! can be mailed, attached to a ticket or opened offline. The renderer is pure: findings
//! in, a `String` out.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::{audit_text, skipped_text};
use crate::offline::replay::ReplayOutcome;
use crate::present::html::{incident_section, incidents, index, legend, STYLESHEET};
use crate::present::Findings;

/// Input problems listed at the top of the page (all are counted).
const PROBLEMS_LISTED: usize = 50;

/// Renders the report as one self-contained HTML page.
pub fn render_html(findings: &Findings, outcome: &ReplayOutcome) -> String {
    let incidents = incidents(findings);
    let firing = findings
        .alerts
        .iter()
        .filter(|h| h.resolved.is_none())
        .count();
    let range = outcome.rv_range.map_or_else(String::new, |(lo, hi)| {
        format!(", resourceVersions {lo}..{hi}")
    });
    let summary = format!(
        "{} events{range}; {} alert(s): {firing} firing, {} resolved; {} incident(s)",
        outcome.stats.events_in,
        findings.alerts.len(),
        findings.alerts.len() - firing,
        incidents.len(),
    );
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "ipaudit replay: " (summary) }
                style { (PreEscaped(STYLESHEET)) }
            }
            body {
                header {
                    h1 { "ipaudit replay" }
                    p #summary data-alerts=(findings.alerts.len()) data-firing=(firing) { (summary) }
                    (input_notes(outcome))
                    @for change in &findings.epochs {
                        p.epoch {
                            "Epoch " (change.epoch) ": the " (change.stream.as_str())
                            " stream of collector " (change.collector_id)
                            " went back from resourceVersion " (change.previous_rv) " to "
                            (change.rv) " (etcd restore?); versions before and after are not compared."
                        }
                    }
                }
                @if outcome.nothing_read() {
                    p.verdict { "No event could be read: nothing was analysed." }
                } @else if incidents.is_empty() {
                    p.verdict #no-leak { "No leak found." }
                } @else {
                    (legend())
                    (index(&incidents))
                    @for (n, incident) in incidents.iter().enumerate() {
                        @if incident.firing() {
                            (incident_section(n + 1, incident))
                        } @else {
                            details.healed {
                                summary { "Incident " (n + 1) ": healed (all its alerts resolved)" }
                                (incident_section(n + 1, incident))
                            }
                        }
                    }
                }
            }
        }
    };
    page.into_string()
}

/// Skipped input and problems, as the text report says them.
fn input_notes(outcome: &ReplayOutcome) -> Markup {
    let stats = &outcome.stats;
    html! {
        @if stats.duplicates + stats.stale + stats.reorder.late > 0 {
            p.note {
                (stats.duplicates) " duplicate(s) dropped, " (stats.stale)
                " stale event(s) ignored, " (stats.reorder.late) " late event(s)"
            }
        }
        @if let Some(text) = audit_text(outcome) {
            @for line in text.lines() {
                p.note.audit { (line.trim()) }
            }
        }
        @if let Some(text) = skipped_text(outcome) {
            p.note.skipped { "Skipped input: " (text) }
        }
        @if stats.unknown_kinds > 0 {
            p.note {
                (stats.unknown_kinds)
                " event(s) of kinds this build does not know skipped (upgrade the analyzer to analyse them)"
            }
        }
        @if !outcome.problems.is_empty() {
            details.problems {
                summary { (outcome.problem_count) " input problem(s)" }
                ul {
                    @for problem in outcome.problems.iter().take(PROBLEMS_LISTED) {
                        li { (problem.to_string()) }
                    }
                    @if outcome.problems.len() > PROBLEMS_LISTED {
                        li { (outcome.problems.len() - PROBLEMS_LISTED) " more listed in the text report" }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::present::html::{object_id, MarkKind};
    use crate::present::AlertHistory;
    use ipaudit_schemas::{Actor, Alert, AlertStatus, EventType, Evidence, Severity, Stream};

    fn evidence(
        stream: Stream,
        event_type: EventType,
        name: &str,
        rv: &str,
        what: &str,
    ) -> Evidence {
        Evidence {
            stream,
            event_type,
            name: name.into(),
            resource_version: rv.into(),
            time_ms: Some(1_700_000_000_000 + rv.parse::<i64>().unwrap_or(0) * 1_000),
            what: what.into(),
            actor: None,
        }
    }

    fn alert(rule: &str, subject: &str, fired_rv: &str, evidence: Vec<Evidence>) -> Alert {
        Alert {
            alert_id: format!("{rule}-{subject}"),
            cluster_id: "c".into(),
            rule: rule.into(),
            severity: Severity::Critical,
            status: AlertStatus::Firing,
            subject_kind: "IP".into(),
            subject_name: subject.into(),
            subject_uid: format!("uid-{subject}"),
            subnet: Some("net1".into()),
            summary: format!("{subject} leaked"),
            fix: Some(format!("kubectl delete ip {subject}")),
            epoch: 0,
            fired_at_ms: 1,
            resolved_at_ms: None,
            fired_resource_version: fired_rv.into(),
            resolved_resource_version: None,
            evidence,
            cleanup: None,
            url: None,
            namespace: None,
        }
    }

    fn firing(alert: Alert) -> AlertHistory {
        AlertHistory {
            fired: alert,
            resolved: None,
        }
    }

    fn seed(ip: &str) -> Findings {
        let added = evidence(Stream::Ip, EventType::Added, ip, "10", "IP added");
        let deleted = evidence(
            Stream::Subnet,
            EventType::Deleted,
            "net1",
            "20",
            "Subnet net1 deleted",
        );
        let mut terminating = evidence(
            Stream::Ip,
            EventType::Modified,
            ip,
            "30",
            "IP marked for deletion; finalizer keeps it",
        );
        terminating.actor = Some(Actor {
            user: "alice@example.com".into(),
            user_agent: Some("kubectl/v1.33".into()),
            source_ips: vec!["10.0.0.7".into()],
            impersonated_user: None,
        });
        Findings {
            alerts: vec![
                firing(alert(
                    "subnet-deleted-before-ip",
                    ip,
                    "20",
                    vec![added, deleted.clone()],
                )),
                firing(alert(
                    "ip-stuck-terminating",
                    ip,
                    "30",
                    vec![deleted, terminating],
                )),
            ],
            epochs: Vec::new(),
        }
    }

    #[test]
    fn alerts_sharing_an_object_form_one_incident_with_a_lane_per_object() {
        let findings = seed("ip1");
        let incidents = incidents(&findings);
        assert_eq!(incidents.len(), 1);
        let lanes: Vec<String> = incidents[0]
            .lanes
            .iter()
            .map(|(k, _)| object_id(k))
            .collect();
        assert_eq!(lanes, ["subnet/net1", "ip/ip1"]);
        // The subnet's DELETED is cited by both alerts but drawn once.
        assert_eq!(incidents[0].marks.len(), 3);
    }

    #[test]
    fn the_first_alerts_firing_event_is_the_highlighted_cause() {
        let findings = seed("ip1");
        let incident = &incidents(&findings)[0];
        let causes: Vec<&str> = incident
            .marks
            .iter()
            .filter(|m| m.cause)
            .map(|m| m.evidence.resource_version.as_str())
            .collect();
        assert_eq!(causes, ["20"]);
        let html = render_html(&findings, &read(5));
        assert!(
            html.contains(r#"data-rv="20" data-time="2023-11-14T22:13:40Z" data-cause="true""#),
            "{html}"
        );
    }

    #[test]
    fn marks_say_what_the_event_did_to_the_object() {
        let cases = [
            (EventType::Added, "IP added", MarkKind::Created),
            (
                EventType::Modified,
                "IP marked for deletion at 12:00",
                MarkKind::DeletionRequested,
            ),
            (
                EventType::Modified,
                "finalizer x removed by hand",
                MarkKind::FinalizerRemoved,
            ),
            (EventType::Deleted, "gone", MarkKind::Deleted),
            (EventType::Modified, "labels changed", MarkKind::Changed),
            (
                EventType::Modified,
                "Subnet a is terminating: finalizer never removed",
                MarkKind::DeletionRequested,
            ),
            (
                EventType::Modified,
                "Pod ns/web (uid 1) is Pending, not terminating",
                MarkKind::Changed,
            ),
            (
                EventType::Modified,
                "SpiderEndpoint ns/a no longer terminating",
                MarkKind::Changed,
            ),
        ];
        for (event_type, what, kind) in cases {
            let e = evidence(Stream::Ip, event_type, "x", "1", what);
            assert_eq!(MarkKind::of(&e), kind, "{what}");
        }
    }

    #[test]
    fn hostile_names_and_actors_are_escaped_everywhere() {
        let hostile = r#"ip"><script>alert(1)</script><img src=x onerror=alert(2)>&amp;"#;
        let mut findings = seed(hostile);
        if let Some(actor) = findings.alerts[1].fired.evidence[1].actor.as_mut() {
            actor.user = "</title><script>x</script>".into();
        }
        let html = render_html(&findings, &read(5));
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("&amp;amp;"));
    }

    #[test]
    fn the_actor_is_written_beside_its_mark() {
        let html = render_html(&seed("ip1"), &read(5));
        assert!(html.contains(r#"data-actor="alice@example.com""#), "{html}");
        assert!(html.contains("alice@exa…"), "{html}");
        assert!(html.contains("alice@example.com from 10.0.0.7, kubectl/v1.33"));
    }

    #[test]
    fn an_incident_whose_alerts_all_resolved_is_collapsed() {
        let mut findings = seed("ip1");
        for history in &mut findings.alerts {
            let mut resolved = history.fired.clone();
            resolved.status = AlertStatus::Resolved;
            resolved.resolved_resource_version = Some("40".into());
            resolved.evidence.push(evidence(
                Stream::Ip,
                EventType::Deleted,
                "ip1",
                "40",
                "IP ip1 is gone (DELETED)",
            ));
            history.resolved = Some(resolved);
        }
        let html = render_html(&findings, &read(5));
        assert!(
            html.contains(r#"<details class="healed"><summary>Incident 1: healed"#),
            "{html}"
        );
        assert!(!html.contains("<h3>Fix</h3>"));
    }

    /// A replay that read `events` events.
    fn read(events: u64) -> ReplayOutcome {
        ReplayOutcome {
            stats: crate::analysis::engine::AnalyzerStats {
                events_in: events,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn no_alert_says_no_leak() {
        let html = render_html(&Findings::default(), &read(3));
        assert!(html.contains("No leak found."));
        assert!(html.starts_with("<!DOCTYPE html>"));
    }
}
