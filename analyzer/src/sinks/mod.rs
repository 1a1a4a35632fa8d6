//! Where alert transitions go: the log, a webhook, Alertmanager, a Kafka topic. Each sink delivers the
//! stored transitions in order and moves its own cursor after each success, so every
//! firing and every resolution reaches every sink, across restarts. Delivery is at least
//! once; the transition id travels as an idempotency key so receivers drop a resend.

mod alertmanager;
mod commands;
mod kafka;
mod log;
mod webhook;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ipaudit_schemas::Alert;
use tokio::sync::{watch, Notify};
use tracing::warn;

pub use alertmanager::AlertmanagerSink;
pub use commands::{command_for, CommandSink};
pub use kafka::KafkaSink;
pub use log::LogSink;
pub use webhook::{WebhookAuth, WebhookSink};

use crate::store::{Store, StoreError};

/// Why one delivery failed; it is retried.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The HTTP request failed (connection, timeout).
    #[error("request to {url} failed")]
    Http {
        /// Where.
        url: String,
        /// What reqwest said.
        #[source]
        source: reqwest::Error,
    },
    /// Kafka did not take the record.
    #[error("Kafka: {0}")]
    Kafka(String),
    /// The receiver answered with an error status.
    #[error("{url} answered {status}")]
    Status {
        /// Where.
        url: String,
        /// The status.
        status: reqwest::StatusCode,
    },
}

/// Success for a 2xx answer, else the status as an error.
fn check(url: &str, response: Result<reqwest::Response, reqwest::Error>) -> Result<(), SinkError> {
    let response = response.map_err(|source| SinkError::Http {
        url: url.to_owned(),
        source,
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
    /// The sink's name, which keys its delivery cursor.
    pub fn name(&self) -> String {
        match self {
            AlertSink::Log(_) => "log".into(),
            AlertSink::Webhook(w) => format!("webhook:{}", w.url()),
            AlertSink::Alertmanager(a) => format!("alertmanager:{}", a.url()),
            AlertSink::Kafka(k) => format!("kafka:{}", k.topic()),
            AlertSink::Commands(c) => format!("commands:{}", c.topic()),
        }
    }

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

/// Runs a store call off the async runtime (SQLite blocks).
async fn with_store<T: Send + 'static>(
    store: &Arc<std::sync::Mutex<Store>>,
    call: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || call(&store.lock().unwrap_or_else(|e| e.into_inner())))
        .await
        .expect("store task does not panic")
}

/// Delivers stored transitions to `sink` until `shutdown` turns true.
pub async fn run_delivery(
    sink: AlertSink,
    store_path: PathBuf,
    stored: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), StoreError> {
    let name = sink.name();
    let store = Arc::new(std::sync::Mutex::new(Store::open(&store_path)?));
    let mut backoff = Duration::from_millis(250);
    let mut resend = tokio::time::interval(ALERTMANAGER_RESEND);
    resend.tick().await;
    loop {
        let batch = {
            let name = name.clone();
            with_store(&store, move |s| s.undelivered(&name, 100)).await?
        };
        if batch.is_empty() {
            if *shutdown.borrow() {
                return Ok(());
            }
            tokio::select! {
                            _ = stored.notified() => {}
                            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                            _ = shutdown.changed() => {}
                            _ = resend.tick(), if matches!(sink, AlertSink::Alertmanager(_)) => {
                                let sink_name = name.clone();
            let firing = with_store(&store, move |s| s.firing_delivered(&sink_name)).await?;
                                for alert in firing {
                                    if let Err(error) = sink.deliver(&crate::store::transition_id(&alert), &alert).await {
                                        warn!(sink = %name, %error, "re-sending a firing alert failed");
                                    }
                                }
                            }
                        }
            continue;
        }
        for (seq, alert) in batch {
            let id = crate::store::transition_id(&alert);
            loop {
                match sink.deliver(&id, &alert).await {
                    Ok(()) => {
                        backoff = Duration::from_millis(250);
                        break;
                    }
                    Err(error) => {
                        warn!(sink = %name, %error, transition = %id, "delivery failed; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = shutdown.changed() => {}
                        }
                        if *shutdown.borrow() {
                            return Ok(());
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(30));
                    }
                }
            }
            let name = name.clone();
            with_store(&store, move |s| s.delivered(&name, seq)).await?;
        }
    }
}
