//! The collector's Prometheus metrics, one place that names and counts them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// One flag per watched stream, fixed at start: readiness waits for exactly these.
    synced: Arc<HashMap<Stream, AtomicBool>>,
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
        Metrics {
            registry: Arc::new(registry),
            events,
            malformed,
            relists,
            watch_errors,
            kafka,
            outbox_rows,
            watching,
            synced: Arc::new(
                watched
                    .iter()
                    .map(|s| (*s, AtomicBool::new(false)))
                    .collect(),
            ),
        }
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
    pub fn outbox_rows(&self, rows: i64) {
        self.outbox_rows.set(rows);
    }

    /// Marks a stream as watching (listed or resumed). A stream that is not watched has
    /// no flag and changes nothing.
    pub fn set_synced(&self, stream: Stream) {
        if let Some(flag) = self.synced.get(&stream) {
            flag.store(true, Ordering::Relaxed);
            self.watching.get_or_create(&stream_labels(stream)).set(1);
        }
    }

    /// Whether every watched stream is watching: the collector is ready. A collector that
    /// watches nothing is not.
    pub fn all_synced(&self) -> bool {
        !self.synced.is_empty() && self.synced.values().all(|s| s.load(Ordering::Relaxed))
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
    fn ready_once_every_watched_stream_and_only_those_is_synced() {
        let metrics = Metrics::new(&[Stream::Pod, Stream::IpPool]);
        assert!(!metrics.all_synced());
        metrics.set_synced(Stream::Pod);
        metrics.set_synced(Stream::Ip);
        assert!(
            !metrics.all_synced(),
            "ip is not watched: it does not stand in for ippool"
        );
        metrics.set_synced(Stream::IpPool);
        assert!(metrics.all_synced());
        let text = metrics.encode();
        assert!(
            text.contains("ipaudit_stream_watching{stream=\"ippool\"} 1"),
            "{text}"
        );
        assert!(!text.contains("stream=\"ip\""), "{text}");
    }

    #[test]
    fn a_collector_watching_nothing_is_not_ready() {
        assert!(!Metrics::new(&[]).all_synced());
    }
}
