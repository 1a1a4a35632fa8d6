//! The start-up check: one metadata request through the configured connection. A TLS
//! or authentication failure is a configuration mistake, reported at once so that the
//! program can stop with a clear error instead of retrying forever in its log; a broker that
//! does not answer is an outage, which ipaudit's programs ride out.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};

use crate::kafka::connection::Connection;

/// Why the check failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// librdkafka refused the settings (an unknown or invalid `--kafka-option`, an
    /// unreadable certificate). Retrying does not help.
    #[error("invalid Kafka client configuration")]
    Config(#[source] KafkaError),
    /// The TLS handshake failed (the broker's certificate does not verify against the CA,
    /// the host name does not match, the broker refused our certificate). Retrying does
    /// not help.
    #[error("TLS with the Kafka brokers {brokers} failed: {message}")]
    Tls {
        /// The bootstrap servers.
        brokers: String,
        /// librdkafka's message.
        message: String,
    },
    /// The brokers refused the SASL credentials. Retrying does not help.
    #[error("SASL authentication with the Kafka brokers {brokers} failed: {message}")]
    Authentication {
        /// The bootstrap servers.
        brokers: String,
        /// librdkafka's message.
        message: String,
    },
    /// No broker answered in time (down, unreachable, still starting). Retrying helps.
    #[error("the Kafka brokers {brokers} did not answer within {timeout:?}{}", last.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Unreachable {
        /// The bootstrap servers.
        brokers: String,
        /// How long the check waited.
        timeout: Duration,
        /// librdkafka's last error, if it reported one.
        last: Option<String>,
    },
}

impl ProbeError {
    /// Whether trying again later may succeed (only an unreachable broker).
    pub fn is_retryable(&self) -> bool {
        matches!(self, ProbeError::Unreachable { .. })
    }
}

/// Records the errors librdkafka reports while the check runs.
#[derive(Default)]
struct Recorder {
    errors: Mutex<Vec<(RDKafkaErrorCode, String)>>,
}

impl Recorder {
    fn record(&self, code: RDKafkaErrorCode, message: &str) {
        if let Ok(mut errors) = self.errors.lock() {
            errors.push((code, message.to_owned()));
        }
    }
}

impl ClientContext for Recorder {
    fn error(&self, error: KafkaError, reason: &str) {
        self.record(
            error.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail),
            reason,
        );
    }

    // librdkafka reports a broker connection's failure in its log at once, from its own
    // threads, while the matching error event waits to be polled (and repeats are
    // suppressed): reading the log too makes the verdict independent of poll timing.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if fac == "FAIL" {
            if log_message.contains("SSL handshake failed")
                || log_message.contains("certificate verify failed")
            {
                self.record(RDKafkaErrorCode::SSL, log_message);
            } else if log_message.contains("SASL authentication error") {
                self.record(RDKafkaErrorCode::Authentication, log_message);
            }
        }
        DefaultClientContext.log(level, fac, log_message);
    }
}

// A producer, because its poll hands librdkafka's error events, with their messages, to
// the context; it never sends anything.
impl ProducerContext for Recorder {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {}
}

impl Recorder {
    fn fatal(&self, brokers: &str) -> Option<ProbeError> {
        let errors = self.errors.lock().ok()?;
        errors.iter().find_map(|(code, message)| {
            let (brokers, message) = (brokers.to_owned(), message.clone());
            match code {
                RDKafkaErrorCode::SSL => Some(ProbeError::Tls { brokers, message }),
                // The peer ended the TLS session with an alert (TLS 1.3 reports a refused
                // client certificate after the handshake, as a failed receive): it refused
                // us, it did not merely go away.
                RDKafkaErrorCode::BrokerTransportFailure
                    if message.contains("SSL alert number") =>
                {
                    Some(ProbeError::Tls { brokers, message })
                }
                RDKafkaErrorCode::Authentication => {
                    Some(ProbeError::Authentication { brokers, message })
                }
                _ => None,
            }
        })
    }

    fn last(&self) -> Option<String> {
        self.errors.lock().ok()?.last().map(|(_, m)| m.clone())
    }
}

impl Connection {
    /// Asks the brokers for their metadata through this connection, for up to `timeout`.
    /// Returns as soon as they answer, or as soon as TLS or authentication fails.
    pub fn probe(&self, timeout: Duration) -> Result<(), ProbeError> {
        let mut config = self.client_config();
        config.set("client.id", "ipaudit-probe");
        let producer: BaseProducer<Recorder> = config
            .create_with_context(Recorder::default())
            .map_err(ProbeError::Config)?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let step = left.min(Duration::from_millis(500));
            let answered = producer.client().fetch_metadata(None, step).is_ok();
            if answered {
                return Ok(());
            }
            // Serves the error events raised meanwhile to the recorder (one poll serves
            // one event; polling for a moment serves them all).
            producer.poll(Duration::from_millis(50));
            if let Some(fatal) = producer.context().fatal(self.brokers()) {
                return Err(fatal);
            }
            if left <= step {
                return Err(ProbeError::Unreachable {
                    brokers: self.brokers().to_owned(),
                    timeout,
                    last: producer.context().last(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_port_is_unreachable_and_retryable() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let error = Connection::plaintext(&format!("127.0.0.1:{port}"))
            .probe(Duration::from_secs(1))
            .unwrap_err();
        assert!(matches!(error, ProbeError::Unreachable { .. }), "{error}");
        assert!(error.is_retryable());
    }

    #[test]
    fn an_unknown_option_is_a_configuration_error() {
        let args = crate::kafka::KafkaArgs {
            options: vec!["no.such.property=1".parse().unwrap()],
            ..crate::kafka::KafkaArgs::plaintext("127.0.0.1:1")
        };
        let error = args
            .connection()
            .unwrap()
            .probe(Duration::from_secs(1))
            .unwrap_err();
        assert!(matches!(error, ProbeError::Config(_)), "{error}");
        assert!(!error.is_retryable());
    }
}
