//! The collector's Prometheus metrics, one place that names them: every series is
//! `ipaudit_collector_<name>_<unit>` with bounded labels (streams, event types, reasons:
//! no object names). The counters move through the typed events of [`crate::telemetry`].

use std::sync::Arc;

use ipaudit_runtime::telemetry::EventLabels;
use ipaudit_schemas::{EventType, Stream};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// `{stream}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabels {
    /// The stream's label (`pod`, `ip`, `ippool`...).
    pub stream: String,
}

/// `{stream, reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The stream's label (`pod`, `ip`, `ippool`...).
    pub stream: String,
    /// Why.
    pub reason: String,
}

/// `{result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// delivered or failed.
    pub result: String,
}

/// `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OnlyReasonLabels {
    /// Why.
    pub reason: String,
}

/// `{kind, decision}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// The reviewed kind's label (`subnet`, `ippool`, `spiderippool`), `other` for a kind
    /// the guard does not review, `unknown` for a request it could not read.
    pub kind: String,
    /// allowed, warned, denied, unsynced or error.
    pub decision: String,
}

/// `{outcome}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// applied, dry_run, skipped or failed.
    pub outcome: String,
}

/// The `reason`s of `watch_errors` ([`crate::telemetry`]'s watch failures), each series
/// of every watched stream there from the start: a rule's `increase()` sees the first one.
pub const WATCH_ERROR_REASONS: [&str; 6] = [
    "unreadable_object",
    "list_failed",
    "watch_failed",
    "error_event",
    "undecodable_event",
    "stream_failed",
];

/// The `reason`s of `quarantined_total`: every label `produce::permanent_reason` gives.
pub const QUARANTINE_REASONS: [&str; 6] = [
    "message_size_too_large",
    "invalid_message_size",
    "message_batch_too_large",
    "invalid_message",
    "invalid_record",
    "invalid_timestamp",
];

/// The decisions of `admission_reviews` ([`crate::admission::guard::Decision`]).
/// Why a stream is listed in full: its first list, an expired resourceVersion (410 Gone),
/// the periodic snapshot (beside the watch), the periodic snapshot in full because the
/// watch's version could no longer be listed, a failed list retried, the outbox full (events
/// were paused), an event the collector could not decode.
pub const RELIST_REASONS: [&str; 7] = [
    "initial",
    "expired",
    "snapshot",
    "snapshot_fallback",
    "retry",
    "outbox_full",
    "undecodable_event",
];

const ADMISSION_DECISIONS: [crate::admission::guard::Decision; 5] = [
    crate::admission::guard::Decision::Allowed,
    crate::admission::guard::Decision::Warned,
    crate::admission::guard::Decision::Denied,
    crate::admission::guard::Decision::Unsynced,
    crate::admission::guard::Decision::Error,
];

/// The outcomes of `remediation_outcomes`.
const REMEDIATION_OUTCOMES: [ipaudit_schemas::RemediationOutcome; 4] = [
    ipaudit_schemas::RemediationOutcome::Applied,
    ipaudit_schemas::RemediationOutcome::DryRun,
    ipaudit_schemas::RemediationOutcome::Skipped,
    ipaudit_schemas::RemediationOutcome::Failed,
];

/// Every metric of the collector. The counters are moved only by the typed events of
/// [`crate::telemetry`] (each logs what it counts); the gauges are set here.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub(crate) events: Family<EventLabels, Counter>,
    pub(crate) malformed: Family<StreamLabels, Counter>,
    pub(crate) relists: Family<ReasonLabels, Counter>,
    pub(crate) watch_errors: Family<ReasonLabels, Counter>,
    pub(crate) kafka: Family<ResultLabels, Counter>,
    outbox_rows: Gauge,
    watching: Family<StreamLabels, Gauge>,
    pub(crate) quarantined: Family<OnlyReasonLabels, Counter>,
    pub(crate) raw_omitted: Family<StreamLabels, Counter>,
    outbox_bytes: Gauge,
    pub(crate) outbox_full: Counter,
    pub(crate) watch_pauses: Family<StreamLabels, Counter>,
    pub(crate) admission_reviews: Family<AdmissionLabels, Counter>,
    pub(crate) remediation_outcomes: Family<OutcomeLabels, Counter>,
    pub(crate) failures: ipaudit_runtime::telemetry::FailureFamily,
    outbox_limit: Gauge,
    ready: Gauge,
}

impl ipaudit_runtime::telemetry::FailureCounter for Metrics {
    fn failures(&self) -> &ipaudit_runtime::telemetry::FailureFamily {
        &self.failures
    }
}

impl Metrics {
    /// Registers every metric under the `ipaudit_collector` prefix, for the streams watched.
    pub fn new(watched: &[Stream]) -> Self {
        let mut root = Registry::with_prefix("ipaudit");
        let collector = root.sub_registry_with_prefix("collector");
        let events = Family::<EventLabels, Counter>::default();
        collector.register(
            "events",
            "Watch events recorded, by stream and type",
            events.clone(),
        );
        let malformed = Family::<StreamLabels, Counter>::default();
        collector.register(
            "malformed_objects",
            "Objects recorded with fields that could not be read (kept with what could)",
            malformed.clone(),
        );
        let relists = Family::<ReasonLabels, Counter>::default();
        collector.register(
            "relists",
            "Full lists of a stream, by reason",
            relists.clone(),
        );
        let watch_errors = Family::<ReasonLabels, Counter>::default();
        collector.register(
            "watch_errors",
            "List or watch requests or streams that failed, by stream and reason",
            watch_errors.clone(),
        );
        let kafka = Family::<ResultLabels, Counter>::default();
        collector.register(
            "kafka_messages",
            "Messages sent to Kafka, by result",
            kafka.clone(),
        );
        let outbox_rows = Gauge::default();
        collector.register_with_unit(
            "outbox",
            "Events in the outbox not yet acknowledged by Kafka",
            Unit::Other("rows".into()),
            outbox_rows.clone(),
        );
        let watching = Family::<StreamLabels, Gauge>::default();
        collector.register(
            "stream_watching",
            "1 once a watched stream is listed (or resumed) and watching, else 0; one series per watched kind",
            watching.clone(),
        );
        for stream in watched {
            watching.get_or_create(&stream_labels(*stream)).set(0);
        }
        let quarantined = Family::<OnlyReasonLabels, Counter>::default();
        collector.register(
            "quarantined",
            "Outbox rows Kafka refused for good, moved to the quarantine table, by reason",
            quarantined.clone(),
        );
        let raw_omitted = Family::<StreamLabels, Counter>::default();
        collector.register(
            "raw_objects_omitted",
            "Events recorded without their raw JSON because they exceeded --max-event-bytes",
            raw_omitted.clone(),
        );
        let outbox_bytes = Gauge::default();
        collector.register_with_unit(
            "outbox",
            "Payload bytes in the outbox not yet acknowledged by Kafka",
            Unit::Bytes,
            outbox_bytes.clone(),
        );
        let outbox_full = Counter::default();
        collector.register(
            "outbox_full",
            "Times the outbox reached --outbox-max-bytes and the watches paused",
            outbox_full.clone(),
        );
        let watch_pauses = Family::<StreamLabels, Counter>::default();
        collector.register(
            "watch_pauses",
            "Watches paused because the outbox was full, by stream",
            watch_pauses.clone(),
        );
        let admission_reviews = Family::<AdmissionLabels, Counter>::default();
        collector.register(
            "admission_reviews",
            "AdmissionReviews answered by the guard, by reviewed kind and decision",
            admission_reviews.clone(),
        );
        let failures = ipaudit_runtime::telemetry::FailureFamily::default();
        collector.register(
            "failures",
            "Failures the collector logged and went on from, by what failed (every kind present from the start)",
            failures.clone(),
        );
        for failure in crate::telemetry::Failure::ALL {
            failures
                .get_or_create(&ipaudit_runtime::telemetry::FailureLabels {
                    failure: failure.as_str().into(),
                })
                .inc_by(0);
        }
        let remediation_outcomes = Family::<OutcomeLabels, Counter>::default();
        collector.register(
            "remediation_outcomes",
            "Cleanup commands handled, by outcome (applied, dry_run, skipped: refused or a check failed, failed: the API server did not answer as expected)",
            remediation_outcomes.clone(),
        );
        let outbox_limit = Gauge::default();
        collector.register_with_unit(
            "outbox_limit",
            "--outbox-max-bytes: the outbox payload at which the watches pause (0: unbounded)",
            Unit::Bytes,
            outbox_limit.clone(),
        );
        let ready = Gauge::default();
        collector.register(
            "ready",
            "1 while /readyz would answer 200, else 0 (set at each scrape)",
            ready.clone(),
        );
        // Every series a rule or a dashboard reads exists from the start, at 0: a panel
        // shows 0 rather than "no data", and increase() sees the first failure.
        for stream in watched {
            for event_type in EventType::CHANGES {
                events
                    .get_or_create(&EventLabels::new(stream.as_str(), event_type.as_str()))
                    .inc_by(0);
            }
            for (family, reasons) in [
                (&watch_errors, &WATCH_ERROR_REASONS[..]),
                (&relists, &RELIST_REASONS[..]),
            ] {
                for reason in reasons {
                    family
                        .get_or_create(&ReasonLabels {
                            stream: stream.as_str().into(),
                            reason: (*reason).into(),
                        })
                        .inc_by(0);
                }
            }
            watch_pauses
                .get_or_create(&stream_labels(*stream))
                .inc_by(0);
            malformed.get_or_create(&stream_labels(*stream)).inc_by(0);
            raw_omitted.get_or_create(&stream_labels(*stream)).inc_by(0);
        }
        for result in ["delivered", "failed"] {
            kafka
                .get_or_create(&ResultLabels {
                    result: result.into(),
                })
                .inc_by(0);
        }
        for reason in QUARANTINE_REASONS {
            quarantined
                .get_or_create(&OnlyReasonLabels {
                    reason: reason.into(),
                })
                .inc_by(0);
        }
        Metrics {
            failures,
            registry: Arc::new(root),
            events,
            malformed,
            relists,
            watch_errors,
            kafka,
            outbox_rows,
            watching,
            quarantined,
            raw_omitted,
            outbox_bytes,
            outbox_full,
            watch_pauses,
            admission_reviews,
            remediation_outcomes,
            outbox_limit,
            ready,
        }
    }

    /// The admission guard serves: its series of every guarded kind and decision start at 0.
    pub fn admission_serving(&self) {
        for guarded in crate::admission::guard::Guarded::ALL {
            for decision in ADMISSION_DECISIONS {
                self.admission_reviews
                    .get_or_create(&AdmissionLabels {
                        kind: guarded.label().into(),
                        decision: decision.as_str().into(),
                    })
                    .inc_by(0);
            }
        }
    }

    /// Remediation runs (dry-run or on): its outcome series start at 0.
    pub fn remediating(&self) {
        for outcome in REMEDIATION_OUTCOMES {
            self.remediation_outcomes
                .get_or_create(&OutcomeLabels {
                    outcome: outcome.as_str().into(),
                })
                .inc_by(0);
        }
    }

    /// Sets `outbox_limit_bytes` (`None`: unbounded, 0).
    pub fn outbox_limit(&self, bytes: Option<u64>) {
        self.outbox_limit
            .set(bytes.map_or(0, |b| i64::try_from(b).unwrap_or(i64::MAX)));
    }

    /// Sets `ready`, from the readiness check of /readyz.
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// Sets the outbox backlog.
    pub fn outbox_size(&self, size: crate::health::OutboxSize) {
        self.outbox_rows.set(size.rows);
        self.outbox_bytes.set(size.bytes);
    }

    /// Sets a watched stream's `stream_watching` gauge: 1 while it watches, 0 while it
    /// is paused or failing.
    pub fn set_watching(&self, stream: Stream, watching: bool) {
        self.watching
            .get_or_create(&stream_labels(stream))
            .set(i64::from(watching));
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        ipaudit_runtime::telemetry::encode(&self.registry)
    }
}

pub(crate) fn stream_labels(stream: Stream) -> StreamLabels {
    StreamLabels {
        stream: stream.as_str().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_series_rules_and_dashboards_read_exist_from_the_start_at_zero() {
        let metrics = Metrics::new(&[Stream::Pod, Stream::Ip]);
        metrics.outbox_limit(Some(1 << 30));
        let text = metrics.encode();
        let mut expected = vec![
            "ipaudit_collector_events_total{stream=\"ip\",type=\"DELETED\"} 0".to_owned(),
            "ipaudit_collector_kafka_messages_total{result=\"delivered\"} 0".to_owned(),
            "ipaudit_collector_kafka_messages_total{result=\"failed\"} 0".to_owned(),
            "ipaudit_collector_outbox_limit_bytes 1073741824".to_owned(),
            "ipaudit_collector_ready 0".to_owned(),
        ];
        for stream in ["pod", "ip"] {
            for reason in WATCH_ERROR_REASONS {
                expected.push(format!(
                    "ipaudit_collector_watch_errors_total{{stream=\"{stream}\",reason=\"{reason}\"}} 0"
                ));
            }
            expected.push(format!(
                "ipaudit_collector_watch_pauses_total{{stream=\"{stream}\"}} 0"
            ));
        }
        for reason in QUARANTINE_REASONS {
            expected.push(format!(
                "ipaudit_collector_quarantined_total{{reason=\"{reason}\"}} 0"
            ));
        }
        for line in &expected {
            assert!(text.contains(line.as_str()), "{line} missing in:\n{text}");
        }
        // The guard's and the remediator's series come with them, not before.
        assert!(
            !text.contains("ipaudit_collector_admission_reviews_total{"),
            "{text}"
        );
        assert!(
            !text.contains("ipaudit_collector_remediation_outcomes_total{"),
            "{text}"
        );
        metrics.admission_serving();
        metrics.remediating();
        let text = metrics.encode();
        for kind in ["subnet", "ippool", "spiderippool"] {
            for decision in ["allowed", "warned", "denied", "unsynced", "error"] {
                let line = format!(
                    "ipaudit_collector_admission_reviews_total{{kind=\"{kind}\",decision=\"{decision}\"}} 0"
                );
                assert!(text.contains(&line), "{line} missing in:\n{text}");
            }
        }
        for outcome in ["applied", "dry_run", "skipped", "failed"] {
            let line =
                format!("ipaudit_collector_remediation_outcomes_total{{outcome=\"{outcome}\"}} 0");
            assert!(text.contains(&line), "{line} missing in:\n{text}");
        }
    }

    #[test]
    fn every_watched_stream_has_a_watching_series_and_every_series_carries_the_collector_prefix() {
        let metrics = Metrics::new(&[Stream::Pod, Stream::IpPool]);
        metrics.set_watching(Stream::IpPool, true);
        metrics.outbox_size(crate::health::OutboxSize { rows: 4, bytes: 40 });
        let text = metrics.encode();
        for expected in [
            "ipaudit_collector_stream_watching{stream=\"ippool\"} 1",
            "ipaudit_collector_stream_watching{stream=\"pod\"} 0",
            "ipaudit_collector_outbox_rows 4",
            "ipaudit_collector_outbox_bytes 40",
        ] {
            assert!(text.contains(expected), "{expected} missing in:\n{text}");
        }
        assert!(!text.contains("stream=\"ip\""), "{text}");
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            assert!(line.starts_with("ipaudit_collector_"), "{line}");
        }
    }
}
