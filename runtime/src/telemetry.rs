//! Telemetry in one place per fact. Each thing worth telling an operator is a typed event
//! (a struct in the program's `telemetry` module) whose [`InternalEvent::emit`] writes the
//! log line and moves the metric together, as Vector's internal events do: a site that
//! reports a failure cannot log it and forget to count it, or count it under another name.
//!
//! Where the log lines go is set up once per process by [`init`], the same way in every
//! program: stderr, text or JSON lines, filtered by tracing's `EnvFilter` directives.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

/// A fact about the program's own work, logged and counted in one call.
///
/// Unlike Vector, whose events reach a global metrics recorder, ipaudit's metrics live in
/// a registry the program builds and serves on `/metrics` (prometheus-client has no global
/// one), so `emit` is handed the program's metric families.
pub trait InternalEvent {
    /// The program's metric families (its `Metrics`), which the event moves.
    type Metrics: ?Sized;

    /// Logs the event (with structured fields, inside the caller's span) and updates the
    /// metrics it moves.
    fn emit(self, metrics: &Self::Metrics);
}

/// A kind of failure a program logs and goes on from (each program's `Failure` enum).
pub trait FailureKind: Copy {
    /// Its label in `ipaudit_<program>_failures_total{failure}`.
    fn label(self) -> &'static str;
    /// What its log line says.
    fn says(self) -> &'static str;
    /// Whether it is logged at ERROR (a part of the program stopped) rather than WARN.
    fn is_error(self) -> bool {
        false
    }
}

/// `{failure}`: the labels of both programs' failure counters
/// (`ipaudit_collector_failures_total`, `ipaudit_analyzer_failures_total`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct FailureLabels {
    /// What failed (a [`FailureKind`]'s label).
    pub failure: String,
}

/// A counter of failures by kind.
pub type FailureFamily = prometheus_client::metrics::family::Family<
    FailureLabels,
    prometheus_client::metrics::counter::Counter,
>;

/// The metrics that count failures by kind (each program's `Metrics`).
pub trait FailureCounter {
    /// The counter, by kind.
    fn failures(&self) -> &FailureFamily;

    /// Counts one failure labelled `label`.
    fn count_failure(&self, label: &'static str) {
        self.failures()
            .get_or_create(&FailureLabels {
                failure: label.into(),
            })
            .inc();
    }
}

/// One failure a program goes on from: what failed, why, and what it is about. Its
/// [`InternalEvent::emit`] logs it and counts it under its kind, so that both programs'
/// failures read and count alike.
pub struct Failed<'a, F, M: ?Sized> {
    /// What failed.
    pub failure: F,
    /// Why.
    pub error: &'a dyn std::fmt::Display,
    /// The partition it is about, if one.
    pub partition: Option<i32>,
    /// The cluster, topic, task, command or file it is about, if one.
    pub subject: Option<&'a dyn std::fmt::Display>,
    counter: std::marker::PhantomData<fn(&M)>,
}

impl<'a, F: FailureKind, M: FailureCounter + ?Sized> Failed<'a, F, M> {
    /// `failure`, because of `error`, about nothing more particular.
    pub fn new(failure: F, error: &'a dyn std::fmt::Display) -> Self {
        Failed {
            failure,
            error,
            partition: None,
            subject: None,
            counter: std::marker::PhantomData,
        }
    }

    /// About `partition`.
    pub fn partition(self, partition: i32) -> Self {
        Failed {
            partition: Some(partition),
            ..self
        }
    }

    /// About `subject`.
    pub fn about(self, subject: &'a dyn std::fmt::Display) -> Self {
        Failed {
            subject: Some(subject),
            ..self
        }
    }
}

impl<F: FailureKind, M: FailureCounter + ?Sized> InternalEvent for Failed<'_, F, M> {
    type Metrics = M;
    fn emit(self, metrics: &M) {
        let failure = self.failure.label();
        let subject = self.subject.map(|s| s.to_string());
        if self.failure.is_error() {
            tracing::error!(failure, error = %self.error, partition = self.partition, subject, "{}", self.failure.says());
        } else {
            tracing::warn!(failure, error = %self.error, partition = self.partition, subject, "{}", self.failure.says());
        }
        metrics.count_failure(failure);
    }
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (coloured when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line, carrying every enclosing span's fields (`cluster`,
    /// `stream`, `object`, `resource_version`...) under `spans`.
    Json,
}

impl LogFormat {
    /// `Json` when `json` is set (the programs' `--log-json` flag), else `Text`.
    pub fn json_if(json: bool) -> Self {
        if json {
            LogFormat::Json
        } else {
            LogFormat::Text
        }
    }
}

/// Which events are logged, in tracing's `EnvFilter` syntax (`info`,
/// `warn,ipaudit_collector=debug`...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFilter<'a> {
    /// `RUST_LOG` when it is set and valid, else these directives (the program's default).
    FromEnv {
        /// Directives used when `RUST_LOG` is unset or invalid.
        default: &'a str,
    },
    /// These directives (a program's own flag), or `fallback` when they do not parse.
    Given {
        /// The directives asked for.
        directives: &'a str,
        /// Directives used when `directives` is invalid.
        fallback: &'a str,
    },
}

impl LogFilter<'_> {
    fn env_filter(self) -> EnvFilter {
        match self {
            LogFilter::FromEnv { default } => {
                EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
            }
            LogFilter::Given {
                directives,
                fallback,
            } => EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new(fallback)),
        }
    }
}

/// Installs the process's tracing subscriber: log lines to stderr (stdout is left to the
/// programs' reports), in `format`, filtered by `filter`. Call it once, first thing in
/// `main`; a second call leaves the first subscriber in place.
pub fn init(format: LogFormat, filter: LogFilter<'_>) {
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter.env_filter());
    // A subscriber set already (a test that called init twice) is not worth failing for.
    let _ = match format {
        LogFormat::Text => logs.try_init(),
        // The whole span list, not the innermost span: a line logged inside an object's
        // span still says which cluster and stream the object belongs to.
        LogFormat::Json => logs
            .json()
            .with_current_span(false)
            .with_span_list(true)
            .try_init(),
    };
}

/// `{stream, type}`: the labels of both programs' event counters
/// (`ipaudit_collector_events_total`, `ipaudit_analyzer_events_total`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct EventLabels {
    /// The stream's label (`pod`, `ip`, `ippool`...).
    pub stream: String,
    /// The event type (`ADDED`, `DELETED`...).
    pub r#type: String,
}

impl EventLabels {
    /// The labels of one stream's events of one type.
    pub fn new(stream: &str, event_type: &str) -> Self {
        EventLabels {
            stream: stream.into(),
            r#type: event_type.into(),
        }
    }
}

/// A registry in the Prometheus text exposition format (what `/metrics` serves).
pub fn encode(registry: &prometheus_client::registry::Registry) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_directives_that_do_not_parse_fall_back() {
        let filter = LogFilter::Given {
            directives: "=][=",
            fallback: "warn",
        }
        .env_filter();
        assert_eq!(filter.to_string(), "warn");
        let filter = LogFilter::Given {
            directives: "debug",
            fallback: "warn",
        }
        .env_filter();
        assert_eq!(filter.to_string(), "debug");
    }

    #[test]
    fn json_if_picks_json_only_when_asked() {
        assert_eq!(LogFormat::json_if(true), LogFormat::Json);
        assert_eq!(LogFormat::json_if(false), LogFormat::Text);
    }
}
