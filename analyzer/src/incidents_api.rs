//! The incidents' address and query, shared by the server of the incident pages (`analyzer
//! run --ui-listen`, [`crate::live::ui`]), every alert's link (the live sinks and the
//! offline report) and its client (`kubectl ipaudit incidents`). No I/O: a build without
//! the live analyzer (the fuzz targets') has it too.

use serde::Serialize;

/// The page of one incident under `ui_url` (the pages' external address, with its path
/// prefix): what every alert links to.
pub fn incident_url(ui_url: &str, alert_id: &str) -> String {
    format!("{}/incidents/{alert_id}", ui_url.trim_end_matches('/'))
}

/// What the list shows: the filters of `/` and `/api/v1/incidents` (query parameters of
/// the same names). Empty fields filter nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, Serialize)]
#[serde(default)]
pub struct IncidentFilter {
    /// Only this cluster.
    pub cluster: Option<String>,
    /// Only this rule.
    pub rule: Option<String>,
    /// Only incidents involving this namespace.
    pub namespace: Option<String>,
    /// Only this subnet or pool.
    pub pool: Option<String>,
    /// `firing` or `resolved` (anything else: both).
    pub state: Option<String>,
    /// Fired at or after this time (RFC 3339).
    pub since: Option<String>,
    /// Fired before this time (RFC 3339).
    pub until: Option<String>,
    /// Text in the subject, the address or the summary.
    pub q: Option<String>,
    /// Page number, from 1.
    pub page: Option<u32>,
    /// Incidents per page (default [`DEFAULT_PAGE_SIZE`], at most [`MAX_PAGE_SIZE`]).
    pub per_page: Option<u32>,
}

/// Incidents per page when the filter does not say.
pub const DEFAULT_PAGE_SIZE: u32 = 50;
/// The most incidents one page holds.
pub const MAX_PAGE_SIZE: u32 = 500;

impl IncidentFilter {
    /// The page asked for, from 1.
    pub fn page(&self) -> u32 {
        self.page.unwrap_or(1).max(1)
    }

    /// Incidents per page.
    pub fn per_page(&self) -> u32 {
        self.per_page
            .unwrap_or(DEFAULT_PAGE_SIZE)
            .clamp(1, MAX_PAGE_SIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incident_url_joins_the_external_address_and_the_id() {
        assert_eq!(
            incident_url("https://ops.example/ipaudit/", "0123abcd"),
            "https://ops.example/ipaudit/incidents/0123abcd"
        );
    }
}
