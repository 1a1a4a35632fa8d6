//! The live analyzer's Prometheus metrics, one place that names and counts them. Every
//! series is `ipaudit_analyzer_<name>_<unit>` with bounded labels (streams, event types,
//! partitions, rules and configured sinks: no object names, no URLs).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ipaudit_runtime::telemetry::EventLabels;
use ipaudit_schemas::{Alert, AlertStatus, EventType};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::analysis::engine::AnalyzerStats;

/// `{partition}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    /// The partition of the events topic.
    pub partition: String,
}

/// `{kind}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// What kind of problem or source.
    pub kind: String,
}

/// `{result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// How it ended.
    pub result: String,
}

/// `{rule}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    /// The rule's contract name.
    pub rule: String,
}

/// `{sink}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    /// The sink's redacted name (`webhook:https://host`...).
    pub sink: String,
}

/// `{sink, kind}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkFailureLabels {
    /// The sink's redacted name.
    pub sink: String,
    /// `transient` (retried) or `permanent` (dead-lettered).
    pub kind: String,
}

/// Every metric of the live analyzer. Cheap to clone: the series are shared. The counters
/// move only through the typed events of [`crate::live::telemetry`] (each logs what it counts);
/// the gauges are set here.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub(crate) events: Family<EventLabels, Counter>,
    lag: Family<PartitionLabels, Gauge>,
    pub(crate) dead_letters: Family<KindLabels, Counter>,
    pub(crate) input_problems: Family<KindLabels, Counter>,
    firing: Family<RuleLabels, Gauge>,
    sink_backlog: Family<SinkLabels, Gauge>,
    pub(crate) sink_failures: Family<SinkFailureLabels, Counter>,
    pub(crate) checkpoint: Histogram,
    pub(crate) offset_out_of_range: Family<PartitionLabels, Counter>,
    pub(crate) rebuilds: Family<PartitionLabels, Counter>,
    pub(crate) writer_schema_lookups: Family<ResultLabels, Counter>,
    pub(crate) handovers_written: Counter,
    pub(crate) handover_written_bytes: Counter,
    pub(crate) handovers_taken: Counter,
    pub(crate) handover_failures: Family<KindLabels, Counter>,
    pub(crate) failures: ipaudit_runtime::telemetry::FailureFamily,
    assigned: Gauge,
    pub(crate) catch_up: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Firing alerts by (cluster, alert id) -> rule: setting a state again is harmless, so
    /// a transition made twice (after a restart) does not count twice.
    firing_alerts: Arc<Mutex<HashMap<(String, String), String>>>,
    /// Input problems already counted per cluster (the analyses' own counters).
    seen_problems: Arc<Mutex<HashMap<String, [u64; 5]>>>,
    /// Every rule of this build, and any other rule an alert named: each gauge stays, at 0
    /// when quiet.
    rules_seen: Arc<Mutex<Vec<String>>>,
    ready: Arc<AtomicBool>,
    /// Topics the analyzer writes that do not exist (for `/readyz`).
    missing_topics: ipaudit_runtime::http::MissingTopics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// An analysis's input problem counters, in the order of their `kind` labels.
/// The kinds of `input_problems`: a message that is no watch event, then the problems the
/// analysis counts, in the order of [`problems`].
const INPUT_PROBLEMS: [&str; 6] = [
    "undecodable",
    "unknown_kind",
    "stale",
    "late",
    "unversioned",
    "new_epoch",
];

fn problems(stats: &AnalyzerStats) -> [u64; 5] {
    [
        stats.unknown_kinds,
        stats.stale,
        stats.reorder.late,
        stats.reorder.unversioned,
        stats.reorder.epochs,
    ]
}

impl ipaudit_runtime::telemetry::FailureCounter for Metrics {
    fn failures(&self) -> &ipaudit_runtime::telemetry::FailureFamily {
        &self.failures
    }
}

impl Metrics {
    /// Registers every metric under the `ipaudit_analyzer` prefix.
    pub fn new() -> Self {
        let mut root = Registry::with_prefix("ipaudit");
        let registry = root.sub_registry_with_prefix("analyzer");
        let events = Family::<EventLabels, Counter>::default();
        registry.register(
            "events",
            "Watch events consumed, by stream and type",
            events.clone(),
        );
        let lag = Family::<PartitionLabels, Gauge>::default();
        registry.register_with_unit(
            "consumer_lag",
            "Messages between the partition's end and the next offset to consume",
            prometheus_client::registry::Unit::Other("messages".into()),
            lag.clone(),
        );
        let dead_letters = Family::<KindLabels, Counter>::default();
        registry.register(
            "dead_letters",
            "Records set aside: undecodable messages (kind=message) and alert transitions a sink refused for good (kind=transition)",
            dead_letters.clone(),
        );
        let input_problems = Family::<KindLabels, Counter>::default();
        registry.register(
            "input_problems",
            "Events that could not be used as they came, by kind (undecodable, unknown_kind, stale, late, unversioned, new_epoch)",
            input_problems.clone(),
        );
        let firing = Family::<RuleLabels, Gauge>::default();
        registry.register_with_unit(
            "firing",
            "Alerts firing now, by rule (clusters of the partitions this instance owns)",
            prometheus_client::registry::Unit::Other("alerts".into()),
            firing.clone(),
        );
        let sink_backlog = Family::<SinkLabels, Gauge>::default();
        registry.register_with_unit(
            "sink_backlog",
            "Alert transitions stored and not yet delivered, by sink",
            prometheus_client::registry::Unit::Other("transitions".into()),
            sink_backlog.clone(),
        );
        let sink_failures = Family::<SinkFailureLabels, Counter>::default();
        registry.register(
            "sink_failures",
            "Failed deliveries, by sink and kind (transient: retried; permanent: dead-lettered)",
            sink_failures.clone(),
        );
        let checkpoint = Histogram::new([0.001, 0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]);
        registry.register_with_unit(
            "checkpoint_duration",
            "Time to write one checkpoint (every analysis and its offsets)",
            prometheus_client::registry::Unit::Seconds,
            checkpoint.clone(),
        );
        let offset_out_of_range = Family::<PartitionLabels, Counter>::default();
        registry.register(
            "offset_out_of_range",
            "Checkpointed offsets found outside the partition's log (below its start after retention, or past its end); answered with a rebuild from the latest snapshot",
            offset_out_of_range.clone(),
        );
        let rebuilds = Family::<PartitionLabels, Counter>::default();
        registry.register(
            "snapshot_rebuilds",
            "Partitions started at their latest snapshot for want of local state",
            rebuilds.clone(),
        );
        let writer_schema_lookups = Family::<ResultLabels, Counter>::default();
        registry.register(
            "writer_schema_lookups",
            "Reads of the schemas topic for a message of a schema this build does not carry, by result (found, not_found, failed)",
            writer_schema_lookups.clone(),
        );
        let handovers_written = Counter::default();
        registry.register(
            "handovers_written",
            "Partition handovers written to the checkpoints topic (each partition's analysis, next offset and undelivered transitions, for the member that takes it over)",
            handovers_written.clone(),
        );
        let handover_written_bytes = Counter::default();
        registry.register_with_unit(
            "handover_written",
            "Bytes of the handovers written to the checkpoints topic (before compression)",
            prometheus_client::registry::Unit::Bytes,
            handover_written_bytes.clone(),
        );
        let handovers_taken = Counter::default();
        registry.register(
            "handovers_taken",
            "Partitions taken over from their previous owner's handover instead of rebuilt from a snapshot",
            handovers_taken.clone(),
        );
        let handover_failures = Family::<KindLabels, Counter>::default();
        registry.register(
            "handover_failures",
            "Handovers that could not be written (kind=write: retried at the next interval) or taken (kind=take: the partition is rebuilt from a snapshot)",
            handover_failures.clone(),
        );
        for kind in ["write", "take"] {
            handover_failures
                .get_or_create(&KindLabels { kind: kind.into() })
                .inc_by(0);
        }
        let failures = ipaudit_runtime::telemetry::FailureFamily::default();
        registry.register(
            "failures",
            "Failures the analyzer logged and went on from, by what failed (every kind present from the start)",
            failures.clone(),
        );
        for failure in crate::live::telemetry::Failure::ALL {
            failures
                .get_or_create(&ipaudit_runtime::telemetry::FailureLabels {
                    failure: failure.as_str().into(),
                })
                .inc_by(0);
        }
        let catch_up = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        // Unknown until the first rate window closes.
        catch_up.set(f64::NAN);
        registry.register_with_unit(
            "catch_up_estimate",
            "Time to reach the end of the owned partitions at the current consumption rate (0: at the end; +Inf: behind and consuming nothing; NaN: not measured yet)",
            prometheus_client::registry::Unit::Seconds,
            catch_up.clone(),
        );
        let assigned = Gauge::default();
        registry.register_with_unit(
            "assigned",
            "Partitions of the events topic this instance owns",
            prometheus_client::registry::Unit::Other("partitions".into()),
            assigned.clone(),
        );
        // Every series a rule or a dashboard reads exists from the start, at 0: a panel
        // shows 0 rather than "no data", and increase() sees the first dead letter.
        let rules: Vec<String> = crate::analysis::rules::all()
            .iter()
            .map(|rule| rule.name().to_owned())
            .collect();
        for rule in &rules {
            firing
                .get_or_create(&RuleLabels { rule: rule.clone() })
                .set(0);
        }
        for stream in ipaudit_schemas::Stream::ALL {
            for event_type in EventType::CHANGES {
                events
                    .get_or_create(&EventLabels::new(stream.as_str(), event_type.as_str()))
                    .inc_by(0);
            }
        }
        for kind in INPUT_PROBLEMS {
            input_problems
                .get_or_create(&KindLabels { kind: kind.into() })
                .inc_by(0);
        }
        for result in ["found", "not_found", "failed"] {
            writer_schema_lookups
                .get_or_create(&ResultLabels {
                    result: result.into(),
                })
                .inc_by(0);
        }
        for kind in ["message", "transition"] {
            dead_letters
                .get_or_create(&KindLabels { kind: kind.into() })
                .inc_by(0);
        }
        Metrics {
            registry: Arc::new(root),
            events,
            lag,
            dead_letters,
            input_problems,
            firing,
            sink_backlog,
            sink_failures,
            checkpoint,
            offset_out_of_range,
            rebuilds,
            writer_schema_lookups,
            handovers_written,
            handover_written_bytes,
            handovers_taken,
            handover_failures,
            failures,
            assigned,
            catch_up,
            firing_alerts: Arc::default(),
            seen_problems: Arc::default(),
            rules_seen: Arc::new(Mutex::new(rules)),
            ready: Arc::default(),
            missing_topics: ipaudit_runtime::http::MissingTopics::default(),
        }
    }

    /// Sets a partition's consumer lag.
    pub fn lag(&self, partition: i32, messages: i64) {
        self.lag
            .get_or_create(&partition_labels(partition))
            .set(messages.max(0));
    }

    /// A partition this instance now owns: its counters start at 0 (its lag is set once
    /// measured).
    pub fn partition_assigned(&self, partition: i32) {
        let labels = partition_labels(partition);
        self.offset_out_of_range.get_or_create(&labels).inc_by(0);
        self.rebuilds.get_or_create(&labels).inc_by(0);
    }

    /// Forgets a partition this instance no longer owns.
    pub fn partition_revoked(&self, partition: i32) {
        self.lag.remove(&partition_labels(partition));
    }

    fn input_problem(&self, kind: &str, n: u64) {
        if n > 0 {
            self.input_problems
                .get_or_create(&KindLabels { kind: kind.into() })
                .inc_by(n);
        }
    }

    /// A cluster's analysis was restored from a checkpoint: its input problems so far were
    /// counted by the process that found them, not by this one.
    pub fn analysis_restored(&self, cluster: &str, stats: &AnalyzerStats) {
        self.seen_problems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(cluster.to_owned(), problems(stats));
    }

    /// Counts the input problems a cluster's analysis found since the last call, or since
    /// it was restored ([`Metrics::analysis_restored`]) or began: its counters are
    /// cumulative and restored with the checkpoint, so only growth counts.
    pub fn analysis_problems(&self, cluster: &str, stats: &AnalyzerStats) {
        let now = problems(stats);
        let mut seen = self.seen_problems.lock().unwrap_or_else(|e| e.into_inner());
        let before = seen.entry(cluster.to_owned()).or_default();
        for (i, kind) in INPUT_PROBLEMS[1..].iter().enumerate() {
            self.input_problem(kind, now[i].saturating_sub(before[i]));
        }
        *before = now;
    }

    /// Follows an alert transition for `firing_alerts`. Idempotent.
    pub fn alert(&self, alert: &Alert) {
        let key = (alert.cluster_id.clone(), alert.alert_id.clone());
        let mut firing = self.firing_alerts.lock().unwrap_or_else(|e| e.into_inner());
        let changed = match alert.status {
            AlertStatus::Firing => firing.insert(key, alert.rule.clone()).is_none(),
            AlertStatus::Resolved => firing.remove(&key).is_some(),
        };
        if changed {
            self.recount_firing(&firing);
        }
    }

    /// Drops a cluster this instance no longer analyses from every per-cluster series.
    pub fn cluster_dropped(&self, cluster: &str) {
        let mut firing = self.firing_alerts.lock().unwrap_or_else(|e| e.into_inner());
        firing.retain(|(c, _), _| c != cluster);
        self.recount_firing(&firing);
        self.seen_problems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(cluster);
    }

    fn recount_firing(&self, firing: &HashMap<(String, String), String>) {
        let mut per_rule: HashMap<&str, i64> = HashMap::new();
        for rule in firing.values() {
            *per_rule.entry(rule).or_default() += 1;
        }
        // Rules that stopped firing go to 0 rather than vanish: a dashboard sees the drop.
        let mut rules = self.rules_seen.lock().unwrap_or_else(|e| e.into_inner());
        for rule in per_rule.keys() {
            if !rules.iter().any(|r| r == rule) {
                rules.push((*rule).to_owned());
            }
        }
        for rule in rules.iter() {
            self.firing
                .get_or_create(&RuleLabels { rule: rule.clone() })
                .set(per_rule.get(rule.as_str()).copied().unwrap_or(0));
        }
    }

    /// A sink delivers: its backlog and failure series start at 0.
    pub fn sink_started(&self, sink: &str) {
        self.sink_backlog(sink, 0);
        for kind in ["transient", "permanent"] {
            self.sink_failures
                .get_or_create(&SinkFailureLabels {
                    sink: sink.into(),
                    kind: kind.into(),
                })
                .inc_by(0);
        }
    }

    /// Sets a sink's backlog.
    pub fn sink_backlog(&self, sink: &str, transitions: i64) {
        self.sink_backlog
            .get_or_create(&SinkLabels { sink: sink.into() })
            .set(transitions);
    }

    /// Sets how many partitions this instance owns; it is ready from its first assignment
    /// on (an instance given no partition is a healthy standby).
    pub fn assigned(&self, partitions: usize) {
        self.assigned
            .set(i64::try_from(partitions).unwrap_or(i64::MAX));
        self.ready.store(true, Ordering::Relaxed);
    }

    /// Whether the instance has joined its consumer group.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The topics the analyzer writes that were found missing (for `/readyz`).
    pub fn missing_topics(&self) -> &ipaudit_runtime::http::MissingTopics {
        &self.missing_topics
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        ipaudit_runtime::telemetry::encode(&self.registry)
    }
}

pub(crate) fn partition_labels(partition: i32) -> PartitionLabels {
    PartitionLabels {
        partition: partition.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(id: &str, rule: &str, status: AlertStatus) -> Alert {
        crate::analysis::alerts::sample_alert(id, rule, status, "1")
    }

    #[test]
    fn firing_alerts_count_once_per_alert_and_drop_with_their_resolution_or_cluster() {
        let metrics = Metrics::new();
        let a = alert("a", "ip-stuck-terminating", AlertStatus::Firing);
        metrics.alert(&a);
        metrics.alert(&a);
        metrics.alert(&alert("b", "ip-stuck-terminating", AlertStatus::Firing));
        let text = metrics.encode();
        assert!(
            text.contains("ipaudit_analyzer_firing_alerts{rule=\"ip-stuck-terminating\"} 2"),
            "{text}"
        );
        metrics.alert(&alert("a", "ip-stuck-terminating", AlertStatus::Resolved));
        assert!(metrics
            .encode()
            .contains("ipaudit_analyzer_firing_alerts{rule=\"ip-stuck-terminating\"} 1"));
        metrics.cluster_dropped("c");
        assert!(metrics
            .encode()
            .contains("ipaudit_analyzer_firing_alerts{rule=\"ip-stuck-terminating\"} 0"));
    }

    #[test]
    fn the_series_rules_and_dashboards_read_exist_from_the_start_at_zero() {
        let metrics = Metrics::new();
        metrics.sink_started("webhook:https://h/…#1");
        let text = metrics.encode();
        let rules = crate::analysis::rules::all();
        assert_eq!(rules.len(), 11);
        for rule in rules {
            let line = format!(
                "ipaudit_analyzer_firing_alerts{{rule=\"{}\"}} 0",
                rule.name()
            );
            assert!(text.contains(&line), "{line} missing in:\n{text}");
        }
        for line in [
            "ipaudit_analyzer_dead_letters_total{kind=\"message\"} 0",
            "ipaudit_analyzer_dead_letters_total{kind=\"transition\"} 0",
            "ipaudit_analyzer_sink_backlog_transitions{sink=\"webhook:https://h/…#1\"} 0",
            "ipaudit_analyzer_sink_failures_total{sink=\"webhook:https://h/…#1\",kind=\"transient\"} 0",
            "ipaudit_analyzer_sink_failures_total{sink=\"webhook:https://h/…#1\",kind=\"permanent\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
        // A firing alert moves its rule's series, the others stay at 0.
        metrics.alert(&alert("a", "duplicate-ip", AlertStatus::Firing));
        let text = metrics.encode();
        assert!(text.contains("ipaudit_analyzer_firing_alerts{rule=\"duplicate-ip\"} 1"));
        assert!(text.contains("ipaudit_analyzer_firing_alerts{rule=\"ip-orphaned\"} 0"));
    }

    #[test]
    fn metric_names_follow_the_house_convention() {
        let metrics = Metrics::new();
        metrics.lag(0, 7);
        metrics.sink_backlog("log", 3);
        metrics.assigned(2);
        metrics.alert(&alert("a", "ip-stuck-terminating", AlertStatus::Firing));
        let text = metrics.encode();
        for line in [
            "ipaudit_analyzer_consumer_lag_messages{partition=\"0\"} 7",
            "ipaudit_analyzer_sink_backlog_transitions{sink=\"log\"} 3",
            "ipaudit_analyzer_assigned_partitions 2",
            "ipaudit_analyzer_firing_alerts{rule=\"ip-stuck-terminating\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            assert!(line.starts_with("ipaudit_analyzer_"), "{line}");
        }
    }

    #[test]
    fn input_problems_count_only_what_grew_since_the_last_look() {
        let metrics = Metrics::new();
        let mut stats = AnalyzerStats {
            stale: 5,
            ..AnalyzerStats::default()
        };
        // Restored with 5: counted since this process started, not before.
        metrics.analysis_restored("c", &stats);
        metrics.analysis_problems("c", &stats);
        stats.stale = 7;
        stats.reorder.epochs = 1;
        metrics.analysis_problems("c", &stats);
        let text = metrics.encode();
        assert!(
            text.contains("ipaudit_analyzer_input_problems_total{kind=\"stale\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("ipaudit_analyzer_input_problems_total{kind=\"new_epoch\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn the_problems_of_a_new_clusters_first_checkpoint_are_counted() {
        let metrics = Metrics::new();
        let stats = AnalyzerStats {
            unknown_kinds: 1,
            ..AnalyzerStats::default()
        };
        metrics.analysis_problems("new", &stats);
        assert!(
            metrics
                .encode()
                .contains("ipaudit_analyzer_input_problems_total{kind=\"unknown_kind\"} 1"),
            "{}",
            metrics.encode()
        );
    }
}
