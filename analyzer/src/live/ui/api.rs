//! The JSON API's answers: `ipaudit.incident-list.v1` and `ipaudit.incident.v1`
//! (the book's book/src/operators/incident-pages.md lists every field). A version is bumped, like an
//! Avro schema's, when a field changes meaning or goes away; fields are only ever added
//! within one.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::live::incidents::{IncidentPage, IncidentRecord, IncidentSummary, LogEntry, RuleCount};
use ipaudit_schemas::Alert;

/// The list's schema name.
pub const LIST_SCHEMA: &str = "ipaudit.incident-list.v1";
/// One incident's schema name.
pub const INCIDENT_SCHEMA: &str = "ipaudit.incident.v1";

#[derive(Serialize)]
struct Item<'a> {
    #[serde(flatten)]
    summary: &'a IncidentSummary,
    /// The incident's page, relative to the server.
    url: String,
}

#[derive(Serialize)]
struct List<'a> {
    schema: &'static str,
    total: u64,
    page: u32,
    per_page: u32,
    counts: &'a [RuleCount],
    items: Vec<Item<'a>>,
}

#[derive(Serialize)]
struct One<'a> {
    schema: &'static str,
    #[serde(flatten)]
    summary: &'a IncidentSummary,
    url: String,
    fired: &'a Alert,
    resolved: Option<&'a Alert>,
    log: &'a [LogEntry],
}

fn json(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// The answer of `/api/v1/incidents`.
pub(super) fn list(base: &str, page: &IncidentPage) -> Response {
    let items = page
        .items
        .iter()
        .map(|summary| Item {
            url: crate::incidents_api::incident_url(base, &summary.alert_id),
            summary,
        })
        .collect();
    json(
        StatusCode::OK,
        &List {
            schema: LIST_SCHEMA,
            total: page.total,
            page: page.page,
            per_page: page.per_page,
            counts: &page.counts,
            items,
        },
    )
}

/// The answer of `/api/v1/incidents/<id>`.
pub(super) fn one(base: &str, record: &IncidentRecord) -> Response {
    json(
        StatusCode::OK,
        &One {
            schema: INCIDENT_SCHEMA,
            summary: &record.summary,
            url: crate::incidents_api::incident_url(base, &record.summary.alert_id),
            fired: &record.fired,
            resolved: record.resolved.as_ref(),
            log: &record.log,
        },
    )
}

/// An `ipaudit.incident.v1` answer (a peer's) read back; `None` if it is not one.
pub(super) fn record_from(value: &serde_json::Value) -> Option<IncidentRecord> {
    if value["schema"] != INCIDENT_SCHEMA {
        return None;
    }
    Some(IncidentRecord {
        summary: serde_json::from_value(value.clone()).ok()?,
        fired: serde_json::from_value(value["fired"].clone()).ok()?,
        resolved: serde_json::from_value(value["resolved"].clone()).ok()?,
        log: serde_json::from_value(value["log"].clone()).ok()?,
    })
}

/// An error answer: `{"error": "..."}` with its status.
pub(super) fn problem(status: StatusCode, error: &str) -> Response {
    json(status, &serde_json::json!({ "error": error }))
}
