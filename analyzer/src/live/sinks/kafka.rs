//! Alert transitions as Avro `Alert` records (single-object encoding) on a Kafka topic,
//! keyed by alert id so that one alert's transitions stay in order.

use std::time::Duration;

use ipaudit_runtime::kafka::Delivery;
use ipaudit_schemas::{encode, Alert};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::SinkError;

/// The runtime's producer policy (idempotent, acks=all) with a short message timeout: the
/// delivery loop awaits each send and retries it itself.
pub(super) fn idempotent_producer(
    connection: &ipaudit_runtime::kafka::Connection,
) -> Result<FutureProducer, KafkaError> {
    connection
        .producer(crate::live::CLIENT_ID, Delivery::Awaited)
        .create()
}

/// Sends one record and waits for the broker's acknowledgement.
pub(super) async fn send(
    producer: &FutureProducer,
    topic: &str,
    key: &[u8],
    payload: &[u8],
) -> Result<(), SinkError> {
    producer
        .send(
            FutureRecord::to(topic).key(key).payload(payload),
            Duration::from_secs(10),
        )
        .await
        .map(drop)
        .map_err(|(error, _)| classify(&error))
}

/// A record the broker refuses for what it is (too large, invalid) is refused for good;
/// anything else (no leader, timeout, broker down) may pass later.
fn classify(error: &KafkaError) -> SinkError {
    use rdkafka::types::RDKafkaErrorCode as Code;
    match error.rdkafka_error_code() {
        Some(
            Code::MessageSizeTooLarge
            | Code::InvalidMessage
            | Code::InvalidMessageSize
            | Code::InvalidRecord,
        ) => SinkError::Rejected(error.to_string()),
        _ => SinkError::Kafka(error.to_string()),
    }
}

/// A topic of alerts (`ipaudit.alerts`).
pub struct KafkaSink {
    topic: String,
    producer: FutureProducer,
}

impl KafkaSink {
    /// An idempotent producer to `topic`.
    pub fn new(
        connection: &ipaudit_runtime::kafka::Connection,
        topic: &str,
    ) -> Result<Self, KafkaError> {
        Ok(KafkaSink {
            topic: topic.to_owned(),
            producer: idempotent_producer(connection)?,
        })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub(super) async fn deliver(&self, alert: &Alert) -> Result<(), SinkError> {
        let payload = encode(alert).map_err(|e| SinkError::Rejected(e.to_string()))?;
        send(
            &self.producer,
            &self.topic,
            alert.alert_id.as_bytes(),
            &payload,
        )
        .await
    }
}
