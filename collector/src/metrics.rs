//! The collector's Prometheus metrics, one place that names them: every series is
//! `ipaudit_collector_<name>_<unit>` with bounded labels (streams, event types, reasons:
//! no object names). The counters move through the typed events of [`crate::telemetry`].

use std::sync::Arc;

use ipaudit_runtime::telemetry::EventLabels;
use ipaudit_schemas::Stream;
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
        Metrics {
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
        }
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
