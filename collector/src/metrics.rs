//! The collector's Prometheus metrics, one place that names and counts them. The metrics
//! of the first releases are named `ipaudit_<name>`; those added since follow the
//! `ipaudit_collector_<name>_<unit>` rule.

use std::sync::Arc;

use ipaudit_schemas::{EventType, Stream};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `{stream}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabels {
    /// The stream's label (`pod`, `ip`, `ippool`...).
    pub stream: String,
}

/// `{stream, type}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    /// The stream's label (`pod`, `ip`, `ippool`...).
    pub stream: String,
    /// The event type.
    pub r#type: String,
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

/// Every metric of the collector.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    events: Family<EventLabels, Counter>,
    malformed: Family<StreamLabels, Counter>,
    relists: Family<ReasonLabels, Counter>,
    watch_errors: Family<ReasonLabels, Counter>,
    kafka: Family<ResultLabels, Counter>,
    outbox_rows: Gauge,
    watching: Family<StreamLabels, Gauge>,
    quarantined: Family<OnlyReasonLabels, Counter>,
    raw_omitted: Family<StreamLabels, Counter>,
    outbox_bytes: Gauge,
    outbox_full: Counter,
    watch_pauses: Family<StreamLabels, Counter>,
    admission_reviews: Family<AdmissionLabels, Counter>,
}

impl Metrics {
    /// Registers every metric under the `ipaudit` prefix, for the streams watched.
    pub fn new(watched: &[Stream]) -> Self {
        let mut registry = Registry::with_prefix("ipaudit");
        let events = Family::<EventLabels, Counter>::default();
        registry.register(
            "events",
            "Watch events recorded, by stream and type",
            events.clone(),
        );
        let malformed = Family::<StreamLabels, Counter>::default();
        registry.register(
            "malformed_objects",
            "Objects recorded with fields that could not be read (kept with what could)",
            malformed.clone(),
        );
        let relists = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "relists",
            "Full lists of a stream, by reason",
            relists.clone(),
        );
        let watch_errors = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "watch_errors",
            "Watch requests or streams that failed",
            watch_errors.clone(),
        );
        let kafka = Family::<ResultLabels, Counter>::default();
        registry.register(
            "kafka_messages",
            "Messages sent to Kafka, by result",
            kafka.clone(),
        );
        let outbox_rows = Gauge::default();
        registry.register(
            "outbox_rows",
            "Events in the outbox not yet acknowledged by Kafka",
            outbox_rows.clone(),
        );
        let watching = Family::<StreamLabels, Gauge>::default();
        registry.register(
            "stream_watching",
            "1 once a watched stream is listed (or resumed) and watching, else 0; one series per watched kind",
            watching.clone(),
        );
        for stream in watched {
            watching.get_or_create(&stream_labels(*stream)).set(0);
        }
        let collector = registry.sub_registry_with_prefix("collector");
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
        collector.register(
            "outbox_bytes",
            "Payload bytes in the outbox not yet acknowledged by Kafka",
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
        Metrics {
            registry: Arc::new(registry),
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
        }
    }

    /// Counts one AdmissionReview answered by the guard.
    pub fn admission_review(&self, kind: &str, decision: &str) {
        self.admission_reviews
            .get_or_create(&AdmissionLabels {
                kind: kind.into(),
                decision: decision.into(),
            })
            .inc();
    }

    /// Counts one recorded event.
    pub fn event(&self, stream: Stream, event_type: EventType) {
        self.events
            .get_or_create(&EventLabels {
                stream: stream.as_str().into(),
                r#type: event_type.as_str().into(),
            })
            .inc();
    }

    /// Counts an object recorded with unusable fields.
    pub fn malformed(&self, stream: Stream) {
        self.malformed.get_or_create(&stream_labels(stream)).inc();
    }

    /// Counts a relist.
    pub fn relist(&self, stream: Stream, reason: &str) {
        self.relists
            .get_or_create(&ReasonLabels {
                stream: stream.as_str().into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// Counts a failed watch.
    pub fn watch_error(&self, stream: Stream, reason: &str) {
        self.watch_errors
            .get_or_create(&ReasonLabels {
                stream: stream.as_str().into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// Counts Kafka deliveries.
    pub fn kafka(&self, result: &str, n: u64) {
        self.kafka
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc_by(n);
    }

    /// Sets the outbox backlog.
    pub fn outbox_size(&self, size: crate::health::OutboxSize) {
        self.outbox_rows.set(size.rows);
        self.outbox_bytes.set(size.bytes);
    }

    /// Counts the outbox reaching its bound.
    pub fn outbox_full(&self) {
        self.outbox_full.inc();
    }

    /// Counts a watch paused by a full outbox.
    pub fn watch_paused(&self, stream: Stream) {
        self.watch_pauses
            .get_or_create(&stream_labels(stream))
            .inc();
    }

    /// Counts a row moved to quarantine.
    pub fn quarantined(&self, reason: &str) {
        self.quarantined
            .get_or_create(&OnlyReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    /// Counts an event recorded without its raw JSON (too large).
    pub fn raw_omitted(&self, stream: Stream) {
        self.raw_omitted.get_or_create(&stream_labels(stream)).inc();
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
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

fn stream_labels(stream: Stream) -> StreamLabels {
    StreamLabels {
        stream: stream.as_str().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_watched_stream_has_a_watching_series_and_new_metrics_carry_the_collector_prefix() {
        let metrics = Metrics::new(&[Stream::Pod, Stream::IpPool]);
        metrics.set_watching(Stream::IpPool, true);
        metrics.quarantined("message_size_too_large");
        let text = metrics.encode();
        assert!(
            text.contains("ipaudit_stream_watching{stream=\"ippool\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("ipaudit_stream_watching{stream=\"pod\"} 0"),
            "{text}"
        );
        assert!(!text.contains("stream=\"ip\""), "{text}");
        assert!(
            text.contains(
                "ipaudit_collector_quarantined_total{reason=\"message_size_too_large\"} 1"
            ),
            "{text}"
        );
    }
}
