//! Alertmanager API v2: `POST /api/v2/alerts` with labels `alertname`, `rule`, `cluster`,
//! `namespace` (the pod's, for routing to the team that owns it; empty, hence absent to
//! Alertmanager, when no pod is involved), `subnet`, `severity` and the summary and fix as
//! annotations; a resolved alert carries
//! `endsAt`; with `--ui-url`, `generatorURL` and the annotation `incident_url` are the
//! alert's incident page.

use ipaudit_schemas::kubernetes::format_timestamp_ms;
use ipaudit_schemas::{Alert, AlertStatus};
use serde_json::json;

use super::client::{build_client, parse_url, redact, HttpOptions, SinkBuildError};
use super::{check, SinkError};

/// An Alertmanager.
pub struct AlertmanagerSink {
    url: String,
    shown: String,
    client: reqwest::Client,
}

impl AlertmanagerSink {
    /// A sink for the Alertmanager at `base_url` (e.g. `http://alertmanager:9093`).
    pub fn new(base_url: &str, options: &HttpOptions) -> Result<Self, SinkBuildError> {
        let url = format!("{}/api/v2/alerts", base_url.trim_end_matches('/'));
        parse_url(&url)?;
        Ok(AlertmanagerSink {
            shown: redact(&url),
            url,
            client: build_client(options)?,
        })
    }

    /// The alerts endpoint (may hold credentials: never log it, see [`redact`]).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub(super) async fn deliver(&self, alert: &Alert) -> Result<(), SinkError> {
        check(
            &self.shown,
            self.client
                .post(&self.url)
                .json(&[payload(alert)])
                .send()
                .await,
        )
    }
}

/// One alert in Alertmanager's v2 format; its incident page (`url`) is its
/// `generatorURL` (Alertmanager's "Source" link) and the annotation `incident_url`.
pub fn payload(alert: &Alert) -> serde_json::Value {
    let mut value = json!({
        "labels": {
            "alertname": alert.rule,
            "rule": alert.rule,
            "cluster": alert.cluster_id,
            "namespace": alert.namespace.clone().unwrap_or_default(),
            "subnet": alert.subnet.clone().unwrap_or_default(),
            "severity": alert.severity.as_str(),
            "subject": alert.subject_name,
        },
        "annotations": {
            "summary": alert.summary,
            "fix": alert.fix.clone().unwrap_or_default(),
            "alert_id": alert.alert_id,
        },
        "startsAt": format_timestamp_ms(alert.fired_at_ms),
    });
    if let Some(link) = &alert.url {
        value["generatorURL"] = json!(link);
        value["annotations"]["incident_url"] = json!(link);
    }
    if alert.status == AlertStatus::Resolved {
        value["endsAt"] = json!(format_timestamp_ms(
            alert.resolved_at_ms.unwrap_or(alert.fired_at_ms)
        ));
    }
    value
}
