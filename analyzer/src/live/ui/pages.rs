//! The incident pages as HTML: pure functions from what the store holds to a page. Every
//! value from the cluster (object names, summaries, reasons) is interpolated by `maud`,
//! which escapes it; links are relative to the base path.

use ipaudit_schemas::kubernetes::format_timestamp_ms;
use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::incidents_api::IncidentFilter;
use crate::live::incidents::{IncidentPage, IncidentRecord, IncidentState};
use crate::present::html::{incident_markup, STYLESHEET};
use crate::present::AlertHistory;

/// What the pages add to the report's stylesheet.
const PAGE_CSS: &str = r#"
form.filters { display: flex; flex-wrap: wrap; gap: 6px 12px; align-items: end; margin: .8em 0; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: #57606a; }
table.incidents, table.log { border-collapse: collapse; margin: .6em 0; }
table.incidents td, table.incidents th, table.log td, table.log th { border: 1px solid #d0d7de; padding: 2px 8px; text-align: left; vertical-align: top; }
ul.counts { display: flex; flex-wrap: wrap; gap: 4px 18px; list-style: none; padding: 0; }
nav.paging a, nav.paging span { margin-right: 1em; }
.resolved { color: #2e7d32; font-weight: 600; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; }
dl.facts dt { color: #57606a; }
"#;

fn document(base: &str, title: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(STYLESHEET)) (PreEscaped(PAGE_CSS)) }
            }
            body {
                nav.top { a href={ (base) "/" } { "ipaudit incidents" } }
                (body)
            }
        }
    }
    .into_string()
}

fn time(ms: Option<i64>) -> String {
    ms.filter(|&ms| ms > 0)
        .map_or_else(|| "—".to_owned(), format_timestamp_ms)
}

/// The query string of `filter` (for links that keep the filters), with `page`.
fn query(filter: &IncidentFilter, page: Option<u32>) -> String {
    let mut filter = filter.clone();
    filter.page = page;
    serde_urlencoded::to_string(&filter).unwrap_or_default()
}

/// `/`: the filters, the counts per rule, one page of incidents and the links to the
/// others.
/// `unanswered`: the other members whose incidents are missing (they did not answer).
pub(super) fn list_page(
    base: &str,
    filter: &IncidentFilter,
    page: &IncidentPage,
    unanswered: &[String],
) -> String {
    let firing: u64 = page.counts.iter().map(|c| c.firing).sum();
    let pages = page.total.div_ceil(u64::from(page.per_page)).max(1);
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let state = filter.state.as_deref().unwrap_or("all");
    let body = html! {
        h1 { "Incidents" }
        p #summary data-total=(page.total) data-firing=(firing) {
            (page.total) " incident(s) match, " (firing) " firing"
        }
        @if !unanswered.is_empty() {
            p.note #unanswered {
                "Without the incidents of " (unanswered.join(", "))
                ": they did not answer."
            }
        }
        form.filters method="get" action={ (base) "/" } {
            label { "cluster" input type="text" name="cluster" value=(value(&filter.cluster)); }
            label { "rule" input type="text" name="rule" value=(value(&filter.rule)); }
            label { "namespace" input type="text" name="namespace" value=(value(&filter.namespace)); }
            label { "subnet or pool" input type="text" name="pool" value=(value(&filter.pool)); }
            label { "state"
                select name="state" {
                    @for s in ["all", "firing", "resolved"] {
                        option value=(s) selected[s == state] { (s) }
                    }
                }
            }
            label { "fired since (RFC 3339)" input type="text" name="since" value=(value(&filter.since)); }
            label { "fired until" input type="text" name="until" value=(value(&filter.until)); }
            label { "subject or address" input type="search" name="q" value=(value(&filter.q)); }
            button type="submit" { "Filter" }
            a href={ (base) "/" } { "clear" }
        }
        @if !page.counts.is_empty() {
            ul.counts {
                @for count in &page.counts {
                    @let by_rule = IncidentFilter { rule: Some(count.rule.clone()), ..filter.clone() };
                    li data-rule=(count.rule) data-firing=(count.firing) data-resolved=(count.resolved) {
                        a href={ (base) "/?" (query(&by_rule, None)) } { strong { (count.rule) } }
                        ": " (count.firing) " firing, " (count.resolved) " resolved"
                    }
                }
            }
        }
        @if page.items.is_empty() {
            p #empty { "No incident matches." }
        } @else {
            table.incidents {
                thead { tr {
                    th { "state" } th { "severity" } th { "rule" } th { "cluster" } th { "subject" }
                    th { "namespace" } th { "subnet or pool" } th { "address" } th { "fired" } th { "resolved" }
                } }
                tbody {
                    @for item in &page.items {
                        tr.incident data-alert-id=(item.alert_id) data-state=(item.state.as_str()) data-rule=(item.rule) {
                            td.(item.state.as_str()) { (item.state.as_str()) }
                            td { span.(item.severity) { (item.severity) } }
                            td { (item.rule) }
                            td { (item.cluster_id) }
                            td {
                                a.subject href={ (base) "/incidents/" (item.alert_id) } title=(item.summary) {
                                    (item.subject_kind) " " (item.subject_name)
                                }
                            }
                            td { (item.namespace.as_deref().unwrap_or("")) }
                            td { (item.pool.as_deref().unwrap_or("")) }
                            td { (item.address.as_deref().unwrap_or("")) }
                            td { (time(Some(item.fired_at_ms))) }
                            td { (time(item.resolved_at_ms)) }
                        }
                    }
                }
            }
        }
        nav.paging {
            @if page.page > 1 {
                a rel="prev" href={ (base) "/?" (query(filter, Some(page.page - 1))) } { "← newer" }
            }
            span { "page " (page.page) " of " (pages) }
            @if u64::from(page.page) < pages {
                a rel="next" href={ (base) "/?" (query(filter, Some(page.page + 1))) } { "older →" }
            }
        }
    };
    document(base, "ipaudit incidents", body)
}

/// `/incidents/<id>`: what the alert says, the report's timeline and event table of its
/// evidence, the fix, and what happened to it (fired, delivered, cleanup, resolved).
/// `peer`: the other member it was read from, when this one does not hold it.
pub(super) fn incident_page(base: &str, record: &IncidentRecord, peer: Option<&str>) -> String {
    let s = &record.summary;
    let history = AlertHistory {
        fired: record.fired.clone(),
        resolved: record.resolved.clone(),
    };
    let body = html! {
        h1 {
            (s.rule) " "
            span.(s.severity) { (s.severity.to_uppercase()) }
            " " span.(s.state.as_str()) #state data-state=(s.state.as_str()) { (s.state.as_str()) }
        }
        p.summary { (s.summary) }
        @if let Some(peer) = peer {
            p.note #from-peer data-peer=(peer) {
                "Recorded by the analyzer at " (peer) " (another member of the group), read from it."
            }
        }
        dl.facts {
            dt { "alert id" } dd #alert-id { (s.alert_id) }
            dt { "cluster" } dd { (s.cluster_id) }
            dt { "subject" } dd { (s.subject_kind) " " (s.subject_name) }
            @if let Some(ns) = &s.namespace { dt { "namespace" } dd { (ns) } }
            @if let Some(pool) = &s.pool { dt { "subnet or pool" } dd { (pool) } }
            @if let Some(address) = &s.address { dt { "address" } dd { (address) } }
            dt { "fired" } dd { (time(Some(s.fired_at_ms))) " at resourceVersion " (record.fired.fired_resource_version) }
            @if s.state == IncidentState::Resolved {
                dt { "resolved" } dd {
                    (time(s.resolved_at_ms)) " at resourceVersion "
                    (record.resolved.as_ref().and_then(|r| r.resolved_resource_version.as_deref()).unwrap_or("?"))
                }
            }
        }
        (incident_markup(std::slice::from_ref(&history)))
        h2 { "What happened to it" }
        table.log {
            thead { tr { th { "when" } th { "what" } th { "detail" } } }
            tbody {
                @for entry in &record.log {
                    tr data-what=(entry.what) {
                        td { (time(Some(entry.at_ms))) }
                        td { (entry.what) }
                        td { (entry.detail) }
                    }
                }
            }
        }
    };
    document(
        base,
        &format!("ipaudit: {} {}", s.rule, s.subject_name),
        body,
    )
}

/// An incident this analyzer's store does not hold.
pub(super) fn not_found_page(base: &str, alert_id: &str) -> String {
    let body = html! {
        h1 { "No such incident here" }
        p #not-found {
            "This analyzer's store holds no incident " code { (alert_id) } ". "
            "It may have resolved longer ago than the retention (--incident-retention), "
            "or been recorded by another analyzer of the consumer group."
        }
    };
    document(base, "ipaudit: no such incident", body)
}

/// A request the pages cannot answer, and why.
pub(super) fn problem_page(base: &str, problem: &str) -> String {
    let body = html! {
        h1 { "Cannot show this" }
        p #problem { (problem) }
    };
    document(base, "ipaudit: cannot show this", body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::incidents::{IncidentSummary, LogEntry, RuleCount};
    use ipaudit_schemas::AlertStatus;

    fn summary(id: &str, subject: &str) -> IncidentSummary {
        IncidentSummary {
            alert_id: id.into(),
            cluster_id: "c1".into(),
            rule: "ip-orphaned".into(),
            severity: "critical".into(),
            state: IncidentState::Firing,
            subject_kind: "IP".into(),
            subject_name: subject.into(),
            namespace: None,
            pool: None,
            address: None,
            summary: "summary".into(),
            fired_at_ms: 1,
            resolved_at_ms: None,
        }
    }

    #[test]
    fn a_hostile_subject_stays_text_in_the_list_and_the_incident_page() {
        let hostile = "<script>alert(1)</script>\"><img src=x>";
        let listed = IncidentPage {
            items: vec![summary("a1", hostile)],
            total: 1,
            page: 1,
            per_page: 50,
            counts: vec![RuleCount {
                rule: "ip-orphaned".into(),
                firing: 1,
                resolved: 0,
            }],
        };
        let html = list_page("/p", &IncidentFilter::default(), &listed, &[]);
        assert!(!html.contains("<script>") && !html.contains("<img"));
        let mut fired =
            crate::analysis::alerts::sample_alert("a1", "ip-orphaned", AlertStatus::Firing, "7");
        fired.subject_name = hostile.into();
        let record = IncidentRecord {
            summary: summary("a1", hostile),
            fired,
            resolved: None,
            log: vec![LogEntry {
                at_ms: 1,
                what: "cleanup".into(),
                detail: hostile.into(),
            }],
        };
        let html = incident_page("/p", &record, None);
        assert!(!html.contains("<script>") && !html.contains("<img"));
        assert!(html.contains("&lt;script&gt;"));
    }

    #[test]
    fn links_keep_the_filters_and_the_base_path() {
        let filter = IncidentFilter {
            rule: Some("ip-orphaned".into()),
            q: Some("10.0.0.1 & more".into()),
            per_page: Some(1),
            ..Default::default()
        };
        let listed = IncidentPage {
            items: vec![summary("a1", "x")],
            total: 3,
            page: 1,
            per_page: 1,
            counts: Vec::new(),
        };
        let html = list_page("/ipaudit", &filter, &listed, &[]);
        assert!(html.contains("href=\"/ipaudit/incidents/a1\""));
        assert!(
            html.contains("href=\"/ipaudit/?rule=ip-orphaned&amp;q=10.0.0.1+%26+more&amp;page=2&amp;per_page=1\""),
            "{html}"
        );
        assert!(!html.contains("rel=\"prev\""), "no page before the first");
    }
}
