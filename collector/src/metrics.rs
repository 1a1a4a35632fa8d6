//! The collector's Prometheus metrics, one place that names and counts them.

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
    /// pod, ip or subnet.
    pub stream: String,
}

/// `{stream, type}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    /// pod, ip or subnet.
    pub stream: String,
    /// The event type.
    pub r#type: String,
}

/// `{stream, reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// pod, ip or subnet.
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
    synced: Arc<[AtomicBool; 3]>,
}

fn slot(stream: Stream) -> usize {
    match stream {
        Stream::Pod => 0,
        Stream::Ip => 1,
        Stream::Subnet => 2,
    }
}

impl Metrics {
    /// Registers every metric under the `ipaudit` prefix.
    pub fn new() -> Self {
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
        Metrics {
            registry: Arc::new(registry),
            events,
            malformed,
            relists,
            watch_errors,
            kafka,
            outbox_rows,
            synced: Arc::new([
                AtomicBool::new(false),
                AtomicBool::new(false),
                AtomicBool::new(false),
            ]),
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
        self.malformed
            .get_or_create(&StreamLabels {
                stream: stream.as_str().into(),
            })
            .inc();
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

    /// Marks a stream as watching (listed or resumed).
    pub fn set_synced(&self, stream: Stream) {
        self.synced[slot(stream)].store(true, Ordering::Relaxed);
    }

    /// Whether every stream is watching: the collector is ready.
    pub fn all_synced(&self) -> bool {
        self.synced.iter().all(|s| s.load(Ordering::Relaxed))
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
