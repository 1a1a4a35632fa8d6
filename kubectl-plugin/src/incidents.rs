//! `kubectl ipaudit incidents`: the incidents a running analyzer holds, read from its JSON
//! API (`/api/v1/incidents`, schema `ipaudit.incident-list.v1`) and printed as a table or
//! passed through as JSON.

use std::fmt::Write as _;

use ipaudit_analyzer::incidents_api::{incident_url, IncidentFilter};
use serde_json::Value;

/// Why the incidents could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IncidentsError {
    /// The analyzer did not answer (not running, wrong address, a port-forward gone):
    /// retrying may help.
    #[error("cannot reach the analyzer's pages at {url}")]
    Unreachable {
        /// Where.
        url: String,
        /// What failed.
        #[source]
        source: reqwest::Error,
    },
    /// The analyzer refused the request (a filter it does not understand, a token it does
    /// not accept): retrying the same request does not help.
    #[error("the analyzer answered {status}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// Its `error` field, or the body.
        message: String,
    },
    /// The answer is not the list this client reads.
    #[error("the analyzer's answer is not an ipaudit.incident-list.v1 ({0})")]
    Unexpected(String),
}

/// Reads one page of incidents from the analyzer whose pages are at `base_url` (with its
/// path prefix, e.g. `http://localhost:9091` after `kubectl port-forward`).
pub async fn fetch(
    base_url: &str,
    filter: &IncidentFilter,
    token: Option<&str>,
) -> Result<Value, IncidentsError> {
    let query = serde_urlencoded::to_string(filter).unwrap_or_default();
    let url = format!(
        "{}/api/v1/incidents?{query}",
        base_url.trim_end_matches('/')
    );
    let unreachable = |source| IncidentsError::Unreachable {
        url: url.clone(),
        source,
    };
    let mut request = reqwest::Client::new().get(&url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(unreachable)?;
    let status = response.status();
    let body = response.bytes().await.map_err(unreachable)?;
    let value: Option<Value> = serde_json::from_slice(&body).ok();
    if !status.is_success() {
        let message = value
            .as_ref()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
        return Err(IncidentsError::Refused {
            status: status.as_u16(),
            message,
        });
    }
    match value {
        Some(list) if list["schema"] == "ipaudit.incident-list.v1" => Ok(list),
        Some(other) => Err(IncidentsError::Unexpected(format!(
            "schema {}",
            other["schema"]
        ))),
        None => Err(IncidentsError::Unexpected("not JSON".into())),
    }
}

/// The list as a table, one incident per line (its page under `base_url`), and a line of
/// totals.
pub fn table(list: &Value, base_url: &str) -> String {
    let items = list["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let rows: Vec<[String; 7]> = items
        .iter()
        .map(|i| {
            [
                text(&i["state"]),
                text(&i["rule"]),
                text(&i["cluster_id"]),
                format!("{} {}", text(&i["subject_kind"]), text(&i["subject_name"])),
                text(&i["address"]),
                i["fired_at_ms"]
                    .as_i64()
                    .map(ipaudit_schemas::kubernetes::format_timestamp_ms)
                    .unwrap_or_default(),
                incident_url(base_url, &text(&i["alert_id"])),
            ]
        })
        .collect();
    let header = [
        "STATE", "RULE", "CLUSTER", "SUBJECT", "ADDRESS", "FIRED", "PAGE",
    ]
    .map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    let _ = writeln!(
        out,
        "{} of {} incident(s), page {} of {}",
        rows.len(),
        list["total"],
        list["page"],
        list["total"]
            .as_u64()
            .zip(list["per_page"].as_u64().filter(|&p| p > 0))
            .map_or(1, |(t, p)| t.div_ceil(p).max(1))
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_links_each_incident_under_the_address_it_was_read_from() {
        let list = serde_json::json!({
            "schema": "ipaudit.incident-list.v1", "total": 1, "page": 1, "per_page": 50,
            "counts": [], "items": [{
                "alert_id": "ab12", "state": "firing", "rule": "ip-orphaned", "cluster_id": "lab",
                "subject_kind": "IP", "subject_name": "ip-1", "address": "10.0.0.1",
                "fired_at_ms": 1_790_000_000_000_i64, "url": "/ipaudit/incidents/ab12"
            }]
        });
        let text = table(&list, "http://localhost:9091/ipaudit/");
        assert!(
            text.contains("http://localhost:9091/ipaudit/incidents/ab12"),
            "{text}"
        );
        assert!(text.contains("1 of 1 incident(s), page 1 of 1"));
        assert!(text.starts_with("STATE"));
    }
}
