//! Incidents: every alert the analyzer raised, as the operator's pages and API show it
//! (`analyzer run --ui-listen`), kept in the store file beside the transitions.
//!
//! One row per alert id holds its firing transition (with the evidence the timeline is
//! drawn from), its resolving one, and the columns the list filters on; a log beside it
//! says when it fired, was delivered to which sink, resolved, and what the collector did
//! with its cleanup command. Rows are written in the transaction that stores the
//! transition ([`crate::live::store::Store::add_transitions`]), so a transition replayed
//! after a crash is recorded once, like it is delivered once.
//!
//! Bounded: a resolved incident is forgotten `--incident-retention` after it resolved
//! (`forget_resolved_before`); a firing one stays while it fires (the analysis holds its
//! subject anyway).

use ipaudit_schemas::{Alert, AlertStatus, Remediation};
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Transaction};
use serde::Serialize;

use crate::incidents_api::IncidentFilter;

/// Where an incident is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IncidentState {
    /// Its alert fires.
    Firing,
    /// Its alert resolved.
    Resolved,
}

impl IncidentState {
    /// The lower-case name (a column value, a filter value, a CSS class).
    pub fn as_str(self) -> &'static str {
        match self {
            IncidentState::Firing => "firing",
            IncidentState::Resolved => "resolved",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "firing" => Some(IncidentState::Firing),
            "resolved" => Some(IncidentState::Resolved),
            _ => None,
        }
    }
}

/// One incident as the list shows it (and the API's list items).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct IncidentSummary {
    /// The alert's stable id; the page is `/incidents/<id>`.
    pub alert_id: String,
    /// The cluster.
    pub cluster_id: String,
    /// The rule that fired.
    pub rule: String,
    /// `info`, `warning` or `critical`.
    pub severity: String,
    /// Firing or resolved.
    pub state: IncidentState,
    /// Kind of the object the alert is about.
    pub subject_kind: String,
    /// Its name.
    pub subject_name: String,
    /// The namespace involved, when a namespaced object is.
    pub namespace: Option<String>,
    /// The subnet or pool involved.
    pub pool: Option<String>,
    /// The address involved, when the alert names one.
    pub address: Option<String>,
    /// One sentence for a person.
    pub summary: String,
    /// Event time it fired, Unix ms.
    pub fired_at_ms: i64,
    /// Event time it resolved, Unix ms.
    pub resolved_at_ms: Option<i64>,
}

/// One line of an incident's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LogEntry {
    /// When, wall clock, Unix ms.
    pub at_ms: i64,
    /// `fired`, `resolved`, `delivered` or `cleanup`.
    pub what: String,
    /// The sink, or the cleanup's outcome and reason.
    pub detail: String,
}

/// One incident whole: what the page and `/api/v1/incidents/<id>` show.
#[derive(Debug, Clone)]
pub struct IncidentRecord {
    /// The list's columns.
    pub summary: IncidentSummary,
    /// The firing transition (evidence, fix, cleanup).
    pub fired: Alert,
    /// The resolving transition.
    pub resolved: Option<Alert>,
    /// What happened to it, oldest first.
    pub log: Vec<LogEntry>,
}

/// A filter value that is not one the list understands (answered with 400, never
/// ignored: a silently ignored filter shows incidents the operator excluded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{parameter}: {problem}")]
pub struct FilterError {
    /// The query parameter.
    pub parameter: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

/// The filter as SQL conditions and their values (checked: a bad time is an error).
fn conditions(
    filter: &IncidentFilter,
) -> Result<(String, Vec<rusqlite::types::Value>), FilterError> {
    use rusqlite::types::Value;
    let mut sql = Vec::new();
    let mut values: Vec<Value> = Vec::new();
    for (column, value) in [
        ("cluster_id", &filter.cluster),
        ("rule", &filter.rule),
        ("namespace", &filter.namespace),
        ("pool", &filter.pool),
    ] {
        if let Some(v) = given(value) {
            sql.push(format!("{column} = ?"));
            values.push(Value::Text(v.to_owned()));
        }
    }
    match given(&filter.state) {
        None | Some("all") => {}
        Some(text) => {
            let state = IncidentState::parse(text).ok_or_else(|| FilterError {
                parameter: "state",
                problem: format!("{text:?} is not firing, resolved or all"),
            })?;
            sql.push("state = ?".to_owned());
            values.push(Value::Text(state.as_str().to_owned()));
        }
    }
    for (parameter, value, op) in [
        ("since", &filter.since, ">="),
        ("until", &filter.until, "<"),
    ] {
        if let Some(text) = given(value) {
            let ms = parse_time(text).ok_or_else(|| FilterError {
                parameter,
                problem: format!("{text:?} is not an RFC 3339 time (2026-11-28T06:00:00Z)"),
            })?;
            sql.push(format!("fired_at_ms {op} ?"));
            values.push(Value::Integer(ms));
        }
    }
    if let Some(text) = given(&filter.q) {
        let pattern = format!("%{}%", escape_like(text));
        sql.push(
            "(subject_name LIKE ? ESCAPE '\\' OR address LIKE ? ESCAPE '\\' \
                 OR summary LIKE ? ESCAPE '\\')"
                .to_owned(),
        );
        for _ in 0..3 {
            values.push(Value::Text(pattern.clone()));
        }
    }
    let clause = if sql.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", sql.join(" AND "))
    };
    Ok((clause, values))
}

/// A filter value given, trimmed; an empty one is none.
fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// RFC 3339 text as Unix ms.
fn parse_time(text: &str) -> Option<i64> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// `text` with LIKE's wildcards taken literally.
fn escape_like(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One page of the list, with what it was cut from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct IncidentPage {
    /// The incidents of this page: firing first, then resolved; the latest first.
    pub items: Vec<IncidentSummary>,
    /// How many incidents the filter matches in all.
    pub total: u64,
    /// This page's number, from 1.
    pub page: u32,
    /// Incidents per page.
    pub per_page: u32,
    /// Per rule: incidents the filter matches that fire, and that resolved.
    pub counts: Vec<RuleCount>,
}

/// How many incidents of one rule fire and resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RuleCount {
    /// The rule.
    pub rule: String,
    /// Firing.
    pub firing: u64,
    /// Resolved.
    pub resolved: u64,
}

const SUMMARY_COLUMNS: &str = "alert_id, cluster_id, rule, severity, state, subject_kind, \
    subject_name, namespace, pool, address, summary, fired_at_ms, resolved_at_ms";

fn summary_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<IncidentSummary> {
    let state: String = row.get(4)?;
    Ok(IncidentSummary {
        alert_id: row.get(0)?,
        cluster_id: row.get(1)?,
        rule: row.get(2)?,
        severity: row.get(3)?,
        state: IncidentState::parse(&state).unwrap_or(IncidentState::Firing),
        subject_kind: row.get(5)?,
        subject_name: row.get(6)?,
        namespace: row.get(7)?,
        pool: row.get(8)?,
        address: row.get(9)?,
        summary: row.get(10)?,
        fired_at_ms: row.get(11)?,
        resolved_at_ms: row.get(12)?,
    })
}

/// Why reading incidents failed.
#[derive(Debug, thiserror::Error)]
pub enum IncidentsError {
    /// A filter value is wrong (the request's fault: not retried).
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// SQLite failed (the disk or the file: retrying may help if it was busy).
    #[error("reading incidents from the store")]
    Store(#[from] rusqlite::Error),
}

/// The page of incidents `filter` asks for.
pub fn list(conn: &Connection, filter: &IncidentFilter) -> Result<IncidentPage, IncidentsError> {
    let (clause, values) = conditions(filter)?;
    let (page, per_page) = (filter.page(), filter.per_page());
    let total: i64 = conn.query_row(
        &format!("SELECT count(*) FROM incidents {clause}"),
        params_from_iter(values.iter()),
        |r| r.get(0),
    )?;
    let mut stmt = conn.prepare(&format!(
        "SELECT {SUMMARY_COLUMNS} FROM incidents {clause}
         ORDER BY state = 'firing' DESC, coalesce(resolved_at_ms, fired_at_ms) DESC, alert_id
         LIMIT {per_page} OFFSET {}",
        u64::from(page - 1) * u64::from(per_page)
    ))?;
    let items = stmt
        .query_map(params_from_iter(values.iter()), summary_of)?
        .collect::<Result<Vec<_>, _>>()?;
    let mut stmt = conn.prepare(&format!(
        "SELECT rule, sum(state = 'firing'), sum(state = 'resolved') FROM incidents {clause}
         GROUP BY rule ORDER BY rule"
    ))?;
    let counts = stmt
        .query_map(params_from_iter(values.iter()), |r| {
            Ok(RuleCount {
                rule: r.get(0)?,
                firing: count(r.get(1)?),
                resolved: count(r.get(2)?),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IncidentPage {
        items,
        total: count(total),
        page,
        per_page,
        counts,
    })
}

/// The lists of several stores (the members of a group, each asked for its first
/// `page * per_page` incidents under one filter) as the one list a single store of all
/// their incidents would give: merged in the list's order, an incident two stores hold
/// (the old and the new owner of its cluster, after a takeover) once, in its latest
/// state; totals and counts summed, less the incidents seen twice.
pub fn merge(lists: Vec<IncidentPage>, page: u32, per_page: u32) -> IncidentPage {
    let mut total = 0;
    let mut counts: Vec<RuleCount> = Vec::new();
    let mut latest: std::collections::HashMap<String, IncidentSummary> =
        std::collections::HashMap::new();
    for list in lists {
        total += list.total;
        for count in list.counts {
            match counts.iter_mut().find(|c| c.rule == count.rule) {
                Some(c) => {
                    c.firing += count.firing;
                    c.resolved += count.resolved;
                }
                None => counts.push(count),
            }
        }
        for item in list.items {
            let Some(held) = latest.get(&item.alert_id) else {
                latest.insert(item.alert_id.clone(), item);
                continue;
            };
            // Seen twice: counted once, in the state of its latest transition.
            total = total.saturating_sub(1);
            let (older, newer) = if last_change(&item) > last_change(held) {
                (held.clone(), item)
            } else {
                (item, held.clone())
            };
            if let Some(c) = counts.iter_mut().find(|c| c.rule == older.rule) {
                match older.state {
                    IncidentState::Firing => c.firing = c.firing.saturating_sub(1),
                    IncidentState::Resolved => c.resolved = c.resolved.saturating_sub(1),
                }
            }
            latest.insert(newer.alert_id.clone(), newer);
        }
    }
    let mut items: Vec<IncidentSummary> = latest.into_values().collect();
    // The order of `list`: firing first, then the latest change first, then the id.
    items.sort_by(|a, b| {
        (b.state == IncidentState::Firing)
            .cmp(&(a.state == IncidentState::Firing))
            .then(last_change(b).cmp(&last_change(a)))
            .then(a.alert_id.cmp(&b.alert_id))
    });
    counts.sort_by(|a, b| a.rule.cmp(&b.rule));
    let skip =
        usize::try_from(u64::from(page.max(1) - 1) * u64::from(per_page)).unwrap_or(usize::MAX);
    IncidentPage {
        items: items
            .into_iter()
            .skip(skip)
            .take(per_page as usize)
            .collect(),
        total,
        page: page.max(1),
        per_page,
        counts,
    }
}

/// When an incident last changed, in event time: the list's order.
fn last_change(item: &IncidentSummary) -> i64 {
    item.resolved_at_ms.unwrap_or(item.fired_at_ms)
}

/// A count SQLite gives as a signed integer.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The incident of `alert_id`, whole; `None` when this store has none of that id.
pub fn get(conn: &Connection, alert_id: &str) -> Result<Option<IncidentRecord>, IncidentsError> {
    let row = conn
        .query_row(
            &format!(
                "SELECT {SUMMARY_COLUMNS}, fired, resolved FROM incidents WHERE alert_id = ?1"
            ),
            [alert_id],
            |r| {
                let fired: Vec<u8> = r.get(13)?;
                let resolved: Option<Vec<u8>> = r.get(14)?;
                Ok((summary_of(r)?, fired, resolved))
            },
        )
        .optional()?;
    let Some((summary, fired, resolved)) = row else {
        return Ok(None);
    };
    // The store wrote these from `Alert`s: one that does not read back is a corrupt row,
    // shown as missing rather than failing the page.
    let Ok(fired) = serde_json::from_slice::<Alert>(&fired) else {
        return Ok(None);
    };
    let resolved = resolved.and_then(|r| serde_json::from_slice::<Alert>(&r).ok());
    let mut stmt = conn.prepare(
        "SELECT at_ms, what, detail FROM incident_log WHERE alert_id = ?1 ORDER BY at_ms, rowid",
    )?;
    let log = stmt
        .query_map([alert_id], |r| {
            Ok(LogEntry {
                at_ms: r.get(0)?,
                what: r.get(1)?,
                detail: r.get(2)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(IncidentRecord {
        summary,
        fired,
        resolved,
        log,
    }))
}

/// Records a new transition (in the caller's transaction, with the transition itself);
/// `json` is the transition as the store keeps it.
pub(crate) fn record_transition(
    tx: &Transaction<'_>,
    alert: &Alert,
    json: &[u8],
    now_ms: i64,
) -> rusqlite::Result<()> {
    match alert.status {
        AlertStatus::Firing => {
            // A firing transition starts the incident, or starts it again after it
            // resolved (the same alert id fires again): the earlier resolution is gone.
            tx.execute(
                "INSERT INTO incidents (alert_id, cluster_id, rule, severity, state, subject_kind,
                     subject_name, namespace, pool, address, summary, fired_at_ms, resolved_at_ms,
                     changed_at_ms, fired, resolved)
                 VALUES (?1, ?2, ?3, ?4, 'firing', ?5, ?6, ?7, ?8, ?9, ?10, ?11, NULL, ?12, ?13, NULL)
                 ON CONFLICT (alert_id) DO UPDATE SET state = 'firing', summary = excluded.summary,
                     fired_at_ms = excluded.fired_at_ms, resolved_at_ms = NULL,
                     changed_at_ms = excluded.changed_at_ms, fired = excluded.fired, resolved = NULL",
                params![
                    alert.alert_id,
                    alert.cluster_id,
                    alert.rule,
                    alert.severity.as_str(),
                    alert.subject_kind,
                    alert.subject_name,
                    namespace_of(alert),
                    alert.subnet.as_deref().or(alert.cleanup.as_ref().map(|c| c.pool.as_str()).filter(|p| !p.is_empty())),
                    address_of(alert),
                    alert.summary,
                    alert.fired_at_ms,
                    now_ms,
                    json,
                ],
            )?;
            log(
                tx,
                &alert.alert_id,
                now_ms,
                "fired",
                &format!("at resourceVersion {}", alert.fired_resource_version),
            )
        }
        AlertStatus::Resolved => {
            tx.execute(
                "UPDATE incidents SET state = 'resolved', resolved_at_ms = ?2, changed_at_ms = ?3,
                     resolved = ?4 WHERE alert_id = ?1",
                params![
                    alert.alert_id,
                    alert.resolved_at_ms.unwrap_or(alert.fired_at_ms),
                    now_ms,
                    json
                ],
            )?;
            let at = alert.resolved_resource_version.as_deref().unwrap_or("?");
            log(
                tx,
                &alert.alert_id,
                now_ms,
                "resolved",
                &format!("at resourceVersion {at}"),
            )
        }
    }
}

/// Records that `sink` took a transition of `alert_id`.
pub(crate) fn record_delivery(
    conn: &Connection,
    alert_id: &str,
    status: AlertStatus,
    sink: &str,
    now_ms: i64,
) -> rusqlite::Result<()> {
    log(
        conn,
        alert_id,
        now_ms,
        "delivered",
        &format!("{} to {sink}", status.as_str()),
    )
}

/// Records what a collector did with the cleanup command of an incident.
pub(crate) fn record_cleanup(
    conn: &Connection,
    remediation: &Remediation,
    now_ms: i64,
) -> rusqlite::Result<()> {
    let detail = format!(
        "{} {} (command {}): {}",
        remediation.action,
        remediation.outcome.as_str(),
        remediation.command_id,
        remediation.reason
    );
    // A collector re-emits an outcome it recorded when a command is delivered again:
    // keep one line per distinct outcome.
    let seen: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM incident_log WHERE alert_id = ?1 AND what = 'cleanup' AND detail = ?2)",
        params![remediation.reason_alert_id, detail],
        |r| r.get(0),
    )?;
    if seen {
        return Ok(());
    }
    log(
        conn,
        &remediation.reason_alert_id,
        now_ms,
        "cleanup",
        &detail,
    )
}

fn log(
    conn: &Connection,
    alert_id: &str,
    at_ms: i64,
    what: &str,
    detail: &str,
) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO incident_log (alert_id, at_ms, what, detail) VALUES (?1, ?2, ?3, ?4)",
        params![alert_id, at_ms, what, detail],
    )
    .map(drop)
}

/// Forgets the incidents that resolved (by the wall clock of the analyzer that recorded
/// it) before `cutoff_ms`, with their logs. Returns how many.
pub(crate) fn forget_resolved_before(conn: &Connection, cutoff_ms: i64) -> rusqlite::Result<usize> {
    conn.execute(
        "DELETE FROM incident_log WHERE alert_id IN
             (SELECT alert_id FROM incidents WHERE state = 'resolved' AND changed_at_ms < ?1)",
        [cutoff_ms],
    )?;
    conn.execute(
        "DELETE FROM incidents WHERE state = 'resolved' AND changed_at_ms < ?1",
        [cutoff_ms],
    )
}

/// The namespace an alert involves: its pod's (Alert v6), else (an alert of an older
/// analyzer) its cleanup target's, else the first namespaced object of its evidence
/// (`namespace/name`).
fn namespace_of(alert: &Alert) -> Option<String> {
    alert
        .namespace
        .clone()
        .or_else(|| {
            alert
                .cleanup
                .as_ref()
                .and_then(|c| c.target_namespace.clone())
        })
        .or_else(|| {
            alert
                .evidence
                .iter()
                .find_map(|e| e.name.split_once('/').map(|(ns, _)| ns.to_owned()))
        })
}

/// The address an alert involves: its cleanup's, else an IP address in its subject's name
/// (whereabouts reservations and spiderpool entries are named by it).
fn address_of(alert: &Alert) -> Option<String> {
    alert
        .cleanup
        .as_ref()
        .and_then(|c| c.address.clone())
        .or_else(|| {
            alert
                .summary
                .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
                .find(|word| {
                    word.trim_end_matches('.')
                        .parse::<std::net::IpAddr>()
                        .is_ok()
                })
                .map(|word| word.trim_end_matches('.').to_owned())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        crate::live::db::ensure_tables(&conn).unwrap();
        conn
    }

    fn alert(id: &str, rule: &str, status: AlertStatus, rv: &str) -> Alert {
        crate::analysis::alerts::sample_alert(id, rule, status, rv)
    }

    fn record(conn: &mut Connection, alert: &Alert, now_ms: i64) {
        let tx = conn.transaction().unwrap();
        record_transition(&tx, alert, &serde_json::to_vec(alert).unwrap(), now_ms).unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn a_fired_then_resolved_alert_is_one_incident_with_both_transitions_and_its_log() {
        let mut conn = store();
        record(
            &mut conn,
            &alert("a", "ip-stuck-terminating", AlertStatus::Firing, "10"),
            1_000,
        );
        record_delivery(&conn, "a", AlertStatus::Firing, "log", 1_001).unwrap();
        record(
            &mut conn,
            &alert("a", "ip-stuck-terminating", AlertStatus::Resolved, "12"),
            2_000,
        );
        let incident = get(&conn, "a").unwrap().expect("recorded");
        assert_eq!(incident.summary.state, IncidentState::Resolved);
        assert!(incident.resolved.is_some());
        let whats: Vec<&str> = incident.log.iter().map(|l| l.what.as_str()).collect();
        assert_eq!(whats, ["fired", "delivered", "resolved"]);
        assert!(get(&conn, "b").unwrap().is_none());
    }

    #[test]
    fn an_incident_is_in_its_pods_namespace_and_an_older_alert_in_its_cleanup_targets() {
        let mut older = alert("a", "ip-without-pod", AlertStatus::Firing, "10");
        older.cleanup = Some(ipaudit_schemas::Cleanup {
            action: ipaudit_schemas::CleanupAction::RemoveAllocation,
            target_stream: ipaudit_schemas::Stream::IpPool,
            target_name: "10.128.40.0-24".into(),
            target_namespace: Some("kube-system".into()),
            target_uid: "u".into(),
            resource_version: "9".into(),
            finalizer: String::new(),
            pool: "10.128.40.0-24".into(),
            address: Some("10.128.40.45".into()),
        });
        assert_eq!(namespace_of(&older).as_deref(), Some("kube-system"));
        let mut today = older.clone();
        today.namespace = Some("default".into());
        assert_eq!(
            namespace_of(&today).as_deref(),
            Some("default"),
            "the pod's, not the pool's (whereabouts keeps its pools in its own namespace)"
        );
    }

    #[test]
    fn the_list_shows_firing_incidents_first_and_filters_narrow_it() {
        let mut conn = store();
        for (id, rule) in [
            ("a", "ip-orphaned"),
            ("b", "subnet-deleted-before-ip"),
            ("c", "ip-orphaned"),
        ] {
            record(
                &mut conn,
                &alert(id, rule, AlertStatus::Firing, "10"),
                1_000,
            );
        }
        record(
            &mut conn,
            &alert("a", "ip-orphaned", AlertStatus::Resolved, "11"),
            2_000,
        );
        let all = list(&conn, &IncidentFilter::default()).unwrap();
        assert_eq!(all.total, 3);
        assert_eq!(
            all.items.last().unwrap().alert_id,
            "a",
            "resolved after firing"
        );
        assert_eq!(
            all.counts,
            [
                RuleCount {
                    rule: "ip-orphaned".into(),
                    firing: 1,
                    resolved: 1
                },
                RuleCount {
                    rule: "subnet-deleted-before-ip".into(),
                    firing: 1,
                    resolved: 0
                },
            ]
        );
        let firing_orphans = IncidentFilter {
            rule: Some("ip-orphaned".into()),
            state: Some("firing".into()),
            ..Default::default()
        };
        let page = list(&conn, &firing_orphans).unwrap();
        assert_eq!(
            page.items
                .iter()
                .map(|i| i.alert_id.as_str())
                .collect::<Vec<_>>(),
            ["c"]
        );
    }

    #[test]
    fn the_text_search_takes_wildcards_literally_and_a_bad_filter_is_an_error() {
        let mut conn = store();
        let mut named = alert("a", "ip-orphaned", AlertStatus::Firing, "10");
        named.subject_name = "pod-a.ns-1".into();
        record(&mut conn, &named, 1_000);
        let search = |q: &str| {
            list(
                &conn,
                &IncidentFilter {
                    q: Some(q.into()),
                    ..Default::default()
                },
            )
            .unwrap()
            .total
        };
        assert_eq!(search("d-a.ns"), 1);
        assert_eq!(search("d_a"), 0, "an _ is a character, not any one");
        assert_eq!(search("%"), 0, "a % is a character, not everything");
        let bad = IncidentFilter {
            since: Some("yesterday".into()),
            ..Default::default()
        };
        assert!(
            matches!(list(&conn, &bad), Err(IncidentsError::Filter(e)) if e.parameter == "since")
        );
        let bad = IncidentFilter {
            state: Some("open".into()),
            ..Default::default()
        };
        assert!(
            matches!(list(&conn, &bad), Err(IncidentsError::Filter(e)) if e.parameter == "state")
        );
    }

    #[test]
    fn paging_cuts_the_list_and_counts_the_whole() {
        let mut conn = store();
        for i in 0..7 {
            record(
                &mut conn,
                &alert(&format!("a{i}"), "ip-orphaned", AlertStatus::Firing, "10"),
                1_000,
            );
        }
        let filter = IncidentFilter {
            page: Some(2),
            per_page: Some(5),
            ..Default::default()
        };
        let page = list(&conn, &filter).unwrap();
        assert_eq!((page.items.len(), page.total, page.page), (2, 7, 2));
    }

    #[test]
    fn the_lists_of_several_stores_merge_into_one_with_an_incident_held_twice_once() {
        let mut a = store();
        let mut b = store();
        record(
            &mut a,
            &alert("x", "ip-orphaned", AlertStatus::Firing, "10"),
            1_000,
        );
        let mut later = alert("y", "subnet-deleted-before-ip", AlertStatus::Firing, "11");
        later.fired_at_ms = 5;
        record(&mut a, &later, 1_000);
        // After a takeover both stores hold "x": the new owner saw it resolve.
        record(
            &mut b,
            &alert("x", "ip-orphaned", AlertStatus::Firing, "10"),
            1_000,
        );
        let mut resolved = alert("x", "ip-orphaned", AlertStatus::Resolved, "12");
        resolved.resolved_at_ms = Some(9);
        record(&mut b, &resolved, 2_000);
        record(
            &mut b,
            &alert("z", "ip-orphaned", AlertStatus::Firing, "10"),
            1_000,
        );
        let all = IncidentFilter::default();
        let merged = merge(
            vec![list(&a, &all).unwrap(), list(&b, &all).unwrap()],
            1,
            50,
        );
        let order: Vec<(&str, IncidentState)> = merged
            .items
            .iter()
            .map(|i| (i.alert_id.as_str(), i.state))
            .collect();
        assert_eq!(
            order,
            [
                ("y", IncidentState::Firing),
                ("z", IncidentState::Firing),
                ("x", IncidentState::Resolved)
            ],
            "firing first, the latest first; x once, in its latest state"
        );
        assert_eq!(merged.total, 3);
        assert_eq!(
            merged.counts,
            [
                RuleCount {
                    rule: "ip-orphaned".into(),
                    firing: 1,
                    resolved: 1
                },
                RuleCount {
                    rule: "subnet-deleted-before-ip".into(),
                    firing: 1,
                    resolved: 0
                },
            ]
        );
        let second = merge(vec![list(&a, &all).unwrap(), list(&b, &all).unwrap()], 2, 2);
        assert_eq!(
            second.items.len(),
            1,
            "page 2 of 2 per page holds the third"
        );
    }

    #[test]
    fn retention_forgets_resolved_incidents_and_keeps_firing_ones() {
        let mut conn = store();
        record(
            &mut conn,
            &alert("old", "ip-orphaned", AlertStatus::Firing, "10"),
            1_000,
        );
        record(
            &mut conn,
            &alert("old", "ip-orphaned", AlertStatus::Resolved, "11"),
            2_000,
        );
        record(
            &mut conn,
            &alert("fires", "ip-orphaned", AlertStatus::Firing, "10"),
            1_000,
        );
        record(
            &mut conn,
            &alert("recent", "ip-orphaned", AlertStatus::Firing, "10"),
            1_000,
        );
        record(
            &mut conn,
            &alert("recent", "ip-orphaned", AlertStatus::Resolved, "12"),
            9_000,
        );
        assert_eq!(forget_resolved_before(&conn, 5_000).unwrap(), 1);
        assert!(get(&conn, "old").unwrap().is_none());
        assert!(
            get(&conn, "fires").unwrap().is_some(),
            "a firing incident is kept however old"
        );
        assert!(get(&conn, "recent").unwrap().is_some());
        let orphan_log: i64 = conn
            .query_row(
                "SELECT count(*) FROM incident_log WHERE alert_id = 'old'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(orphan_log, 0);
    }

    #[test]
    fn an_alert_that_fires_again_is_firing_again() {
        let mut conn = store();
        record(
            &mut conn,
            &alert("a", "ip-orphaned", AlertStatus::Firing, "10"),
            1_000,
        );
        record(
            &mut conn,
            &alert("a", "ip-orphaned", AlertStatus::Resolved, "11"),
            2_000,
        );
        record(
            &mut conn,
            &alert("a", "ip-orphaned", AlertStatus::Firing, "15"),
            3_000,
        );
        let incident = get(&conn, "a").unwrap().unwrap();
        assert_eq!(incident.summary.state, IncidentState::Firing);
        assert!(incident.resolved.is_none());
        assert_eq!(incident.log.len(), 3);
    }
}
