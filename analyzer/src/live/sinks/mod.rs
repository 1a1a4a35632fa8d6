//! Where alert transitions go: the log, a webhook, Alertmanager, a Kafka topic. Each sink delivers the
//! stored transitions in order and moves its own cursor after each success, so every
//! firing and every resolution reaches every sink, across restarts. Delivery is at least
//! once; the transition id travels as an idempotency key so receivers drop a resend.
//!
//! A failure that retrying cannot fix (the receiver refused the request: a 4xx other than
//! 408 and 429, a redirect, a record too large) sets that one transition aside as a dead
//! letter, counted, and the next ones flow; other failures are retried with backoff.

mod alertmanager;
mod client;
mod commands;
mod kafka;
pub mod ledger;
mod log;
mod webhook;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ipaudit_runtime::backoff::Backoff;
use ipaudit_runtime::telemetry::InternalEvent as _;
use ipaudit_schemas::Alert;
use tokio::sync::{watch, Notify};
use tracing::{info, Instrument};

pub use alertmanager::AlertmanagerSink;
pub use client::{build_client, redact, sink_name, HttpOptions, SinkBuildError};
pub use commands::{command_for, CommandSink};
pub use kafka::KafkaSink;
pub use log::LogSink;
pub use webhook::{signature, WebhookAuth, WebhookSink};

use crate::live::metrics::Metrics;
use crate::live::telemetry::{SinkDeliveryFailed, TransitionDeadLettered};
use ledger::{Ledger, LedgerError, Pending};

/// Why one delivery failed. [`SinkError::is_permanent`] says whether retrying helps.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The HTTP request failed (connection, timeout): retried.
    #[error("request to {url} failed")]
    Http {
        /// Where, redacted.
        url: String,
        /// What reqwest said (without the URL).
        #[source]
        source: reqwest::Error,
    },
    /// Kafka did not take the record (yet): retried.
    #[error("Kafka: {0}")]
    Kafka(String),
    /// Kafka refused the record for good (too large, invalid): dead-lettered.
    #[error("Kafka refused the record: {0}")]
    Rejected(String),
    /// The receiver answered with an error status: a 4xx other than 408 and 429, or a
    /// redirect (never followed), is permanent; others are retried.
    #[error("{url} answered {status}")]
    Status {
        /// Where, redacted.
        url: String,
        /// The status.
        status: reqwest::StatusCode,
    },
}

impl SinkError {
    /// Whether sending the same transition again cannot succeed.
    pub fn is_permanent(&self) -> bool {
        match self {
            SinkError::Http { .. } | SinkError::Kafka(_) => false,
            SinkError::Rejected(_) => true,
            SinkError::Status { status, .. } => {
                status.is_redirection()
                    || (status.is_client_error()
                        && *status != reqwest::StatusCode::REQUEST_TIMEOUT
                        && *status != reqwest::StatusCode::TOO_MANY_REQUESTS)
            }
        }
    }
}

/// Success for a 2xx answer, else the status as an error. `url` is already redacted.
fn check(url: &str, response: Result<reqwest::Response, reqwest::Error>) -> Result<(), SinkError> {
    let response = response.map_err(|source| SinkError::Http {
        url: url.to_owned(),
        source: source.without_url(),
    })?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(SinkError::Status {
            url: url.to_owned(),
            status: response.status(),
        })
    }
}

/// A configured sink.
pub enum AlertSink {
    /// Structured log lines.
    Log(LogSink),
    /// POST JSON to a URL.
    Webhook(WebhookSink),
    /// Alertmanager API v2.
    Alertmanager(AlertmanagerSink),
    /// Avro records on a Kafka topic.
    Kafka(KafkaSink),
    /// Cleanup commands for stuck IPs.
    Commands(CommandSink),
}

impl AlertSink {
    /// The sink's name, which keys its delivery cursor and labels its metrics: URLs are
    /// redacted (see [`sink_name`]).
    pub fn name(&self) -> String {
        match self {
            AlertSink::Log(_) => "log".into(),
            AlertSink::Webhook(w) => sink_name("webhook", w.url()),
            AlertSink::Alertmanager(a) => sink_name("alertmanager", a.url()),
            AlertSink::Kafka(k) => format!("kafka:{}", k.topic()),
            AlertSink::Commands(c) => format!("commands:{}", c.topic()),
        }
    }

    /// Names an older build keyed this sink's cursor by (the full URL), so that an
    /// upgrade keeps the cursor instead of starting the sink anew.
    fn former_names(&self) -> Vec<String> {
        match self {
            AlertSink::Webhook(w) => vec![format!("webhook:{}", w.url())],
            AlertSink::Alertmanager(a) => vec![format!("alertmanager:{}", a.url())],
            _ => Vec::new(),
        }
    }

    /// Delivers one transition (its `url` set to its incident page when that is known).
    async fn deliver(&self, transition_id: &str, alert: &Alert) -> Result<(), SinkError> {
        match self {
            AlertSink::Log(s) => {
                s.deliver(transition_id, alert);
                Ok(())
            }
            AlertSink::Webhook(s) => s.deliver(transition_id, alert).await,
            AlertSink::Alertmanager(s) => s.deliver(alert).await,
            AlertSink::Kafka(s) => s.deliver(alert).await,
            AlertSink::Commands(s) => s.deliver(alert).await,
        }
    }
}

/// Alertmanager resolves an alert it has not heard of for its `resolve_timeout` (5 min by
/// default): firing alerts are sent again this often.
pub const ALERTMANAGER_RESEND: Duration = Duration::from_secs(60);

/// Runs a ledger call off the async runtime (SQLite blocks).
async fn with_ledger<T: Send + 'static>(
    ledger: &Arc<std::sync::Mutex<Ledger>>,
    call: impl FnOnce(&mut Ledger) -> Result<T, LedgerError> + Send + 'static,
) -> Result<T, LedgerError> {
    let ledger = Arc::clone(ledger);
    tokio::task::spawn_blocking(move || call(&mut ledger.lock().unwrap_or_else(|e| e.into_inner())))
        .await
        .expect("ledger task does not panic")
}

/// How one sink's delivery runs.
#[derive(Clone)]
pub struct DeliveryConfig {
    /// The store file (transitions and the sinks' ledger).
    pub store_path: PathBuf,
    /// A sink seen for the first time starts at the first stored transition rather than
    /// after the latest.
    pub from_beginning: bool,
    /// Where failures and backlogs are counted.
    pub metrics: Metrics,
    /// The incident pages' external address (`--ui-url`): transitions link to their page.
    pub ui_url: Option<String>,
    /// At the stop, deliver what is stored before returning (a catch-up run,
    /// `--exit-at-end`). Otherwise (SIGTERM) a delivery in flight is abandoned at once: it
    /// stays in the store and is delivered after the next start, rather than holding the
    /// stop for as long as a receiver or Kafka takes to answer (a record for a topic that
    /// does not exist waits out its whole message timeout).
    pub drain_at_stop: bool,
}

impl DeliveryConfig {
    /// Links `alert` to its incident page, when the pages' address is known: every sink
    /// carries the link (`url`) as its receiver shows links.
    fn link(&self, alert: &mut Alert) {
        alert.url = self
            .ui_url
            .as_deref()
            .map(|url| crate::incidents_api::incident_url(url, &alert.alert_id));
    }
}

/// What became of one transition: refused carries (transition id, reason).
enum Outcome {
    Delivered,
    Refused((String, String)),
    Stopped,
}

/// Delivers stored transitions to `sink` until `shutdown` turns true.
pub async fn run_delivery(
    sink: AlertSink,
    config: DeliveryConfig,
    stored: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), LedgerError> {
    let name = sink.name();
    let ledger = Arc::new(std::sync::Mutex::new(Ledger::open(&config.store_path)?));
    let start = {
        let (name, former, from_beginning) =
            (name.clone(), sink.former_names(), config.from_beginning);
        with_ledger(&ledger, move |l| l.start(&name, &former, from_beginning)).await?
    };
    info!(sink = %name, after_transition = start, "sink delivering");
    let metrics = &config.metrics;
    metrics.sink_started(&name);
    let mut resend = tokio::time::interval(ALERTMANAGER_RESEND);
    resend.tick().await;
    loop {
        let (redriven, batch, backlog) = {
            let name = name.clone();
            with_ledger(&ledger, move |l| {
                Ok((
                    l.redriven(&name)?,
                    l.undelivered(&name, 100)?,
                    l.backlog(&name)?,
                ))
            })
            .await?
        };
        metrics.sink_backlog(&name, backlog);
        if redriven.is_empty() && batch.is_empty() {
            if *shutdown.borrow() {
                return Ok(());
            }
            tokio::select! {
                _ = stored.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = shutdown.changed() => {}
                _ = resend.tick(), if matches!(sink, AlertSink::Alertmanager(_)) => {
                    let sink_name = name.clone();
                    let firing = with_ledger(&ledger, move |l| l.firing_delivered(&sink_name)).await?;
                    for mut alert in firing {
                        config.link(&mut alert);
                        if let Err(error) = sink.deliver(&crate::analysis::alerts::transition_id(&alert), &alert).await {
                            SinkDeliveryFailed { sink: &name, error: &error, retry_in: None }.emit(metrics);
                        }
                    }
                }
            }
            continue;
        }
        for (redrive, pending) in redriven
            .into_iter()
            .map(|p| (true, p))
            .chain(batch.into_iter().map(|p| (false, p)))
        {
            let seq = pending.seq;
            let about = pending
                .alert
                .as_ref()
                .ok()
                .map(|a| (a.alert_id.clone(), a.status));
            let outcome = deliver_one(&sink, &name, pending, &mut shutdown, &config).await;
            let name = name.clone();
            match outcome {
                Outcome::Stopped => return Ok(()),
                Outcome::Delivered => {
                    with_ledger(&ledger, move |l| {
                        if let Some((alert_id, status)) = about {
                            l.record_delivery(&alert_id, status, &name)?;
                        }
                        if redrive {
                            l.redrive_done(&name, seq)
                        } else {
                            l.delivered(&name, seq)
                        }
                    })
                    .await?
                }
                Outcome::Refused((transition, error)) => {
                    with_ledger(&ledger, move |l| {
                        l.dead_letter(&name, seq, &transition, &error)?;
                        if redrive {
                            l.redrive_done(&name, seq)
                        } else {
                            l.delivered(&name, seq)
                        }
                    })
                    .await?
                }
            }
        }
    }
}

/// Delivers one transition, retrying what may succeed later, until it is delivered,
/// refused for good, or the process stops.
async fn deliver_one(
    sink: &AlertSink,
    name: &str,
    pending: Pending,
    shutdown: &mut watch::Receiver<bool>,
    config: &DeliveryConfig,
) -> Outcome {
    let metrics = &config.metrics;
    let mut alert = match pending.alert {
        Ok(alert) => alert,
        Err(error) => {
            let transition = format!("seq {}", pending.seq);
            TransitionDeadLettered {
                sink: name,
                transition: &transition,
                error: &format_args!("stored transition unreadable: {error}"),
            }
            .emit(metrics);
            return Outcome::Refused((transition, error));
        }
    };
    let id = crate::analysis::alerts::transition_id(&alert);
    config.link(&mut alert);
    let span = tracing::info_span!(
        "deliver",
        sink = %name,
        cluster = %alert.cluster_id,
        stream = %alert.subject_kind,
        object = %alert.subject_name,
        resource_version = %alert.fired_resource_version,
        rule = %alert.rule,
        alert = %alert.alert_id,
        transition = %id,
    );
    async {
        // 250 ms doubling to 30 s, jittered: a webhook that was down for everyone is not
        // hit by every transition at the same instant when it comes back.
        let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(30));
        loop {
            let delivered = if config.drain_at_stop {
                sink.deliver(&id, &alert).await
            } else {
                tokio::select! {
                    delivered = sink.deliver(&id, &alert) => delivered,
                    _ = shutdown.wait_for(|stop| *stop) => return Outcome::Stopped,
                }
            };
            match delivered {
                Ok(()) => return Outcome::Delivered,
                Err(error) if error.is_permanent() => {
                    TransitionDeadLettered {
                        sink: name,
                        transition: &id,
                        error: &error,
                    }
                    .emit(metrics);
                    return Outcome::Refused((id.clone(), error.to_string()));
                }
                Err(error) => {
                    let delay = backoff.next_delay();
                    SinkDeliveryFailed {
                        sink: name,
                        error: &error,
                        retry_in: Some(delay),
                    }
                    .emit(metrics);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = shutdown.changed() => {}
                    }
                    if *shutdown.borrow() {
                        return Outcome::Stopped;
                    }
                }
            }
        }
    }
    .instrument(span)
    .await
}
