//! What the collector tells its operator, one typed event per fact: each struct's
//! [`InternalEvent::emit`] writes the log line (structured fields, inside the caller's span)
//! and moves the metric in [`Metrics`] together, so that no site logs a failure and forgets
//! to count it. The metric families themselves are named in [`crate::metrics`].

use std::fmt::Display;

use ipaudit_runtime::telemetry::{EventLabels, InternalEvent};
use ipaudit_schemas::{EventType, RemediationOutcome, Stream};
use tracing::{debug, error, info, trace, warn};

use crate::admission::guard::{Decision, Verdict};
use crate::health::OutboxSize;
use crate::metrics::{AdmissionLabels, Metrics, OnlyReasonLabels, ReasonLabels, ResultLabels};

/// An event was converted and handed to the outbox (or recording file).
pub struct EventRecorded {
    /// Its stream.
    pub stream: Stream,
    /// Its type.
    pub event_type: EventType,
}

impl InternalEvent for EventRecorded {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        trace!(stream = %self.stream, event_type = self.event_type.as_str(), "event recorded");
        metrics
            .events
            .get_or_create(&EventLabels::new(
                self.stream.as_str(),
                self.event_type.as_str(),
            ))
            .inc();
    }
}

/// An object was recorded with fields that could not be read, with what could.
pub struct MalformedObjectRecorded<'a> {
    /// Its stream.
    pub stream: Stream,
    /// `namespace/name` or `name`.
    pub object: &'a str,
    /// Its resourceVersion.
    pub resource_version: &'a str,
    /// The paths of the unusable fields.
    pub fields: Vec<&'a str>,
}

impl InternalEvent for MalformedObjectRecorded<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(object = %self.object, resource_version = %self.resource_version, fields = ?self.fields,
            "object with unusable fields recorded with what could be read");
        metrics
            .malformed
            .get_or_create(&crate::metrics::stream_labels(self.stream))
            .inc();
    }
}

/// An event was recorded without its raw JSON: with it, it exceeded `--max-event-bytes`.
pub struct RawObjectOmitted<'a> {
    /// Its stream.
    pub stream: Stream,
    /// `namespace/name` or `name`.
    pub object: &'a str,
    /// Its resourceVersion.
    pub resource_version: &'a str,
    /// The limit it exceeded.
    pub max_event_bytes: usize,
}

impl InternalEvent for RawObjectOmitted<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(object = %self.object, resource_version = %self.resource_version,
            max_event_bytes = self.max_event_bytes, "event recorded without its raw JSON");
        metrics
            .raw_omitted
            .get_or_create(&crate::metrics::stream_labels(self.stream))
            .inc();
    }
}

/// A listed or watched item that is no Kubernetes object was skipped.
pub struct ObjectUnreadable<'a> {
    /// The stream it came in.
    pub stream: Stream,
    /// Why it cannot be read.
    pub error: &'a dyn Display,
    /// The item as it came.
    pub object: &'a dyn Display,
}

impl InternalEvent for ObjectUnreadable<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(error = %self.error, object = %self.object, "object that is not a Kubernetes object skipped");
        watch_error(metrics, self.stream, "unreadable_object");
    }
}

/// A stream is listed in full (and diffed against what the collector knew).
pub struct RelistStarted {
    /// The stream.
    pub stream: Stream,
    /// Why: `initial`, `expired`, `snapshot`, `snapshot_fallback`, `retry`, `outbox_full`,
    /// `undecodable_event`.
    pub reason: &'static str,
}

impl InternalEvent for RelistStarted {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        info!(reason = self.reason, "listing");
        metrics
            .relists
            .get_or_create(&ReasonLabels {
                stream: self.stream.as_str().into(),
                reason: self.reason.into(),
            })
            .inc();
    }
}

/// A list request failed; the watcher backs off and lists again.
pub struct ListFailed<'a> {
    /// The stream.
    pub stream: Stream,
    /// What failed.
    pub error: &'a dyn Display,
}

impl InternalEvent for ListFailed<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(error = %self.error, "list failed; retrying");
        watch_error(metrics, self.stream, "list_failed");
    }
}

/// A watch request failed before any event came; the watcher backs off and watches again.
pub struct WatchFailed<'a> {
    /// The stream.
    pub stream: Stream,
    /// What failed.
    pub error: &'a dyn Display,
    /// The resourceVersion the watch started from.
    pub resource_version: &'a str,
}

impl InternalEvent for WatchFailed<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(error = %self.error, resource_version = %self.resource_version, "watch failed; retrying");
        watch_error(metrics, self.stream, "watch_failed");
    }
}

/// The API server sent an ERROR event (other than 410 Gone) in a watch.
pub struct WatchErrorEvent<'a> {
    /// The stream.
    pub stream: Stream,
    /// The Status's code.
    pub code: u16,
    /// The Status's message.
    pub message: &'a str,
}

impl InternalEvent for WatchErrorEvent<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(code = self.code, message = %self.message, "watch error event");
        watch_error(metrics, self.stream, "error_event");
    }
}

/// A line of a watch stream was no watch event: one may be lost, so the stream is relisted.
pub struct WatchEventUndecodable<'a> {
    /// The stream.
    pub stream: Stream,
    /// Why it does not decode.
    pub error: &'a dyn Display,
}

impl InternalEvent for WatchEventUndecodable<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(error = %self.error, "undecodable watch event; relisting so that nothing is lost");
        watch_error(metrics, self.stream, "undecodable_event");
    }
}

/// A watch stream broke off; the watcher resumes from the last resourceVersion.
pub struct WatchStreamFailed<'a> {
    /// The stream.
    pub stream: Stream,
    /// What failed.
    pub error: &'a dyn Display,
}

impl InternalEvent for WatchStreamFailed<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(error = %self.error, "watch stream failed; resuming");
        watch_error(metrics, self.stream, "stream_failed");
    }
}

fn watch_error(metrics: &Metrics, stream: Stream, reason: &str) {
    metrics
        .watch_errors
        .get_or_create(&ReasonLabels {
            stream: stream.as_str().into(),
            reason: reason.into(),
        })
        .inc();
}

/// A watch paused because the outbox is full; it resumes when Kafka has taken some.
pub struct WatchPaused<'a> {
    /// The stream.
    pub stream: Stream,
    /// Where it will resume.
    pub resume_from: Option<&'a str>,
}

impl InternalEvent for WatchPaused<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        info!(resume_from = ?self.resume_from, "outbox full: watch paused");
        metrics
            .watch_pauses
            .get_or_create(&crate::metrics::stream_labels(self.stream))
            .inc();
        metrics.set_watching(self.stream, false);
    }
}

/// The outbox reached `--outbox-max-bytes`: the watches pause.
pub struct OutboxFull {
    /// Its size then.
    pub size: OutboxSize,
}

impl InternalEvent for OutboxFull {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(
            rows = self.size.rows,
            bytes = self.size.bytes,
            "the outbox is full: watches pause until Kafka has taken some of it"
        );
        metrics.outbox_full.inc();
    }
}

/// Kafka refused a row for good; it moved to the quarantine table so the rest flows on.
pub struct RowQuarantined<'a> {
    /// The cluster whose event it is.
    pub cluster: &'a str,
    /// The row's id in the outbox.
    pub outbox_id: i64,
    /// The metric's `reason` (one of [`crate::metrics::QUARANTINE_REASONS`]).
    pub reason: &'static str,
    /// The error as Kafka or librdkafka said it.
    pub error: &'a str,
    /// The event's stream, object and resourceVersion, when it decodes.
    pub stream: Option<&'a str>,
    /// `namespace/name` or `name`.
    pub object: Option<&'a str>,
    /// The event's resourceVersion.
    pub resource_version: Option<&'a str>,
    /// The encoded event's size.
    pub bytes: usize,
}

impl InternalEvent for RowQuarantined<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        error!(
            cluster = %self.cluster,
            stream = self.stream.unwrap_or("?"),
            object = self.object.unwrap_or("?"),
            resource_version = self.resource_version.unwrap_or("?"),
            reason = self.reason,
            error = %self.error,
            bytes = self.bytes,
            outbox_id = self.outbox_id,
            "Kafka refused an event for good; moved to quarantine (collector outbox quarantine list)"
        );
        metrics
            .quarantined
            .get_or_create(&OnlyReasonLabels {
                reason: self.reason.into(),
            })
            .inc();
    }
}

/// A batch of outbox rows went to Kafka: so many delivered, so many to send again.
pub struct KafkaBatchSent {
    /// Acknowledged by Kafka.
    pub delivered: u64,
    /// Not acknowledged (sent again; refusals for good are [`RowQuarantined`]).
    pub failed: u64,
}

impl InternalEvent for KafkaBatchSent {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        debug!(
            delivered = self.delivered,
            failed = self.failed,
            "batch sent to Kafka"
        );
        // Both series exist from the start ([`Metrics::new`]).
        for (result, n) in [("delivered", self.delivered), ("failed", self.failed)] {
            metrics
                .kafka
                .get_or_create(&ResultLabels {
                    result: result.into(),
                })
                .inc_by(n);
        }
    }
}

/// A cleanup command's outcome was recorded (its REMEDIATION event goes to the outbox;
/// the remediator logged why).
pub struct RemediationOutcomeRecorded {
    /// What came of it.
    pub outcome: RemediationOutcome,
}

impl InternalEvent for RemediationOutcomeRecorded {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        debug!(
            outcome = self.outcome.as_str(),
            "remediation outcome recorded"
        );
        metrics
            .remediation_outcomes
            .get_or_create(&crate::metrics::OutcomeLabels {
                outcome: self.outcome.as_str().into(),
            })
            .inc();
    }
}

/// The guard answered an AdmissionReview.
pub struct AdmissionReviewed<'a> {
    /// The reviewed kind's label, `other` for a kind the guard does not review.
    pub kind: &'static str,
    /// The answer.
    pub verdict: &'a Verdict,
    /// Who asked (for a judged deletion).
    pub user: Option<&'a str>,
    /// Whether it was a dry run.
    pub dry_run: bool,
}

impl InternalEvent for AdmissionReviewed<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        let decision = self.verdict.decision;
        match decision {
            Decision::Allowed => {
                debug!(kind = self.kind, user = ?self.user, dry_run = self.dry_run, "deletion allowed: nothing names it")
            }
            decision => info!(
                kind = self.kind,
                user = ?self.user,
                dry_run = self.dry_run,
                decision = decision.as_str(),
                message = self.verdict.message.as_deref().unwrap_or(""),
                warnings = ?self.verdict.warnings,
                "guarded deletion reviewed"
            ),
        }
        admission_review(metrics, self.kind, decision);
    }
}

/// A body that is no AdmissionReview came to the guard: allowed, with a warning.
pub struct AdmissionReviewUnreadable<'a> {
    /// Why it cannot be read.
    pub error: &'a str,
}

impl InternalEvent for AdmissionReviewUnreadable<'_> {
    type Metrics = Metrics;
    fn emit(self, metrics: &Metrics) {
        warn!(error = %self.error, "admission review that cannot be read: allowed");
        admission_review(metrics, "unknown", Decision::Error);
    }
}

fn admission_review(metrics: &Metrics, kind: &str, decision: Decision) {
    metrics
        .admission_reviews
        .get_or_create(&AdmissionLabels {
            kind: kind.into(),
            decision: decision.as_str().into(),
        })
        .inc();
}

/// A failure the collector logs and goes on from, by what failed: each is logged at WARN
/// with its error and counted in `ipaudit_collector_failures_total{failure}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A watch request could not be built (the watcher backs off and tries again).
    WatchRequest,
    /// The collector's permissions could not be checked ahead (the watchers meet the API
    /// server's answers instead).
    PermissionCheck,
    /// A task of the collector stopped with an error while it shut down.
    TaskStopped,
    /// A handled command's offset could not be committed (it is read again and skipped).
    CommandCommit,
    /// The commands consumer returned an error.
    CommandsConsumer,
    /// A cleanup command could not be decoded (refused).
    CommandUndecodable,
    /// A stored command no longer decodes (dropped).
    StoredCommandUndecodable,
    /// A writer schema could not be published (its batch waits).
    SchemaNotPublished,
    /// librdkafka's producer hit a fatal error (it is created again).
    ProducerFatal,
    /// A topic could not be looked up or created now (events wait in the outbox).
    Topic,
    /// A message could not be handed to the producer (the rest is sent again).
    Enqueue,
    /// A delivery failed (the rest of the outbox is sent again).
    Delivery,
    /// An admission connection could not be accepted.
    AdmissionConnection,
    /// A renewed admission certificate cannot be used (the previous one is served).
    AdmissionCertificate,
}

impl ipaudit_runtime::telemetry::FailureKind for Failure {
    fn label(self) -> &'static str {
        self.as_str()
    }
    fn says(self) -> &'static str {
        self.says_text()
    }
}

/// One failure the collector goes on from ([`Failure`]): logged and counted in
/// `ipaudit_collector_failures_total{failure}`.
pub type Failed<'a> = ipaudit_runtime::telemetry::Failed<'a, Failure, Metrics>;

impl Failure {
    /// Every failure, for the counters that exist from the start.
    pub const ALL: [Failure; 14] = [
        Failure::WatchRequest,
        Failure::PermissionCheck,
        Failure::TaskStopped,
        Failure::CommandCommit,
        Failure::CommandsConsumer,
        Failure::CommandUndecodable,
        Failure::StoredCommandUndecodable,
        Failure::SchemaNotPublished,
        Failure::ProducerFatal,
        Failure::Topic,
        Failure::Enqueue,
        Failure::Delivery,
        Failure::AdmissionConnection,
        Failure::AdmissionCertificate,
    ];

    /// Its label.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::WatchRequest => "watch_request",
            Failure::PermissionCheck => "permission_check",
            Failure::TaskStopped => "task_stopped",
            Failure::CommandCommit => "command_commit",
            Failure::CommandsConsumer => "commands_consumer",
            Failure::CommandUndecodable => "command_undecodable",
            Failure::StoredCommandUndecodable => "stored_command_undecodable",
            Failure::SchemaNotPublished => "schema_not_published",
            Failure::ProducerFatal => "producer_fatal",
            Failure::Topic => "topic",
            Failure::Enqueue => "enqueue",
            Failure::Delivery => "delivery",
            Failure::AdmissionConnection => "admission_connection",
            Failure::AdmissionCertificate => "admission_certificate",
        }
    }

    fn says_text(self) -> &'static str {
        match self {
            Failure::WatchRequest => "cannot build watch request",
            Failure::PermissionCheck => "cannot check the collector's permissions ahead; the watchers will meet the API server's answers",
            Failure::TaskStopped => "stopped with an error",
            Failure::CommandCommit => "cannot commit a handled command; it will be read again and skipped",
            Failure::CommandsConsumer => "commands consumer error",
            Failure::CommandUndecodable => "undecodable command refused",
            Failure::StoredCommandUndecodable => "stored command no longer decodes; dropped",
            Failure::SchemaNotPublished => "writer schema not published; the batch waits",
            Failure::ProducerFatal => "fatal producer error; recreating the producer",
            Failure::Topic => "cannot look the topic up or create it now; events wait in the outbox",
            Failure::Enqueue => "cannot enqueue message",
            Failure::Delivery => "delivery failed; the rest of the outbox is sent again",
            Failure::AdmissionConnection => "cannot accept an admission connection",
            Failure::AdmissionCertificate => "admission certificate changed but cannot be used; serving the previous one",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'t>(text: &'t str, name: &str) -> Option<&'t str> {
        text.lines().find(|l| l.starts_with(name))
    }

    #[test]
    fn each_event_moves_its_own_counter_once() {
        let metrics = Metrics::new(&[Stream::Pod]);
        EventRecorded {
            stream: Stream::Pod,
            event_type: EventType::Added,
        }
        .emit(&metrics);
        MalformedObjectRecorded {
            stream: Stream::Pod,
            object: "ns/p",
            resource_version: "7",
            fields: vec!["status.podIPs"],
        }
        .emit(&metrics);
        RawObjectOmitted {
            stream: Stream::Pod,
            object: "ns/p",
            resource_version: "7",
            max_event_bytes: 10,
        }
        .emit(&metrics);
        RelistStarted {
            stream: Stream::Pod,
            reason: "expired",
        }
        .emit(&metrics);
        WatchFailed {
            stream: Stream::Pod,
            error: &"connection refused",
            resource_version: "7",
        }
        .emit(&metrics);
        WatchPaused {
            stream: Stream::Pod,
            resume_from: Some("7"),
        }
        .emit(&metrics);
        OutboxFull {
            size: OutboxSize { rows: 1, bytes: 2 },
        }
        .emit(&metrics);
        RowQuarantined {
            cluster: "c",
            outbox_id: 1,
            reason: "message_size_too_large",
            error: "too large",
            stream: None,
            object: None,
            resource_version: None,
            bytes: 3,
        }
        .emit(&metrics);
        KafkaBatchSent {
            delivered: 3,
            failed: 0,
        }
        .emit(&metrics);
        AdmissionReviewUnreadable { error: "not json" }.emit(&metrics);
        let text = metrics.encode();
        for expected in [
            "ipaudit_collector_events_total{stream=\"pod\",type=\"ADDED\"} 1",
            "ipaudit_collector_malformed_objects_total{stream=\"pod\"} 1",
            "ipaudit_collector_raw_objects_omitted_total{stream=\"pod\"} 1",
            "ipaudit_collector_relists_total{stream=\"pod\",reason=\"expired\"} 1",
            "ipaudit_collector_watch_errors_total{stream=\"pod\",reason=\"watch_failed\"} 1",
            "ipaudit_collector_watch_pauses_total{stream=\"pod\"} 1",
            "ipaudit_collector_stream_watching{stream=\"pod\"} 0",
            "ipaudit_collector_outbox_full_total 1",
            "ipaudit_collector_quarantined_total{reason=\"message_size_too_large\"} 1",
            "ipaudit_collector_kafka_messages_total{result=\"delivered\"} 3",
            "ipaudit_collector_admission_reviews_total{kind=\"unknown\",decision=\"error\"} 1",
        ] {
            assert!(text.contains(expected), "{expected} missing in:\n{text}");
        }
        // No failure yet: the failed series is there, at 0, for a rule's increase().
        assert_eq!(
            line(
                &text,
                "ipaudit_collector_kafka_messages_total{result=\"failed\"}"
            ),
            Some("ipaudit_collector_kafka_messages_total{result=\"failed\"} 0")
        );
    }

    #[test]
    fn every_watch_failure_counts_under_its_own_reason() {
        let metrics = Metrics::new(&[Stream::Ip]);
        let error = "boom";
        ObjectUnreadable {
            stream: Stream::Ip,
            error: &error,
            object: &"[]",
        }
        .emit(&metrics);
        ListFailed {
            stream: Stream::Ip,
            error: &error,
        }
        .emit(&metrics);
        WatchErrorEvent {
            stream: Stream::Ip,
            code: 500,
            message: "internal",
        }
        .emit(&metrics);
        WatchEventUndecodable {
            stream: Stream::Ip,
            error: &error,
        }
        .emit(&metrics);
        WatchStreamFailed {
            stream: Stream::Ip,
            error: &error,
        }
        .emit(&metrics);
        let text = metrics.encode();
        for reason in [
            "unreadable_object",
            "list_failed",
            "error_event",
            "undecodable_event",
            "stream_failed",
        ] {
            let expected = format!(
                "ipaudit_collector_watch_errors_total{{stream=\"ip\",reason=\"{reason}\"}} 1"
            );
            assert!(text.contains(&expected), "{expected} missing in:\n{text}");
        }
    }
}
