//! Alert transitions as Avro `Alert` records (single-object encoding) on a Kafka topic,
//! keyed by alert id so that one alert's transitions stay in order.

use std::time::Duration;

use ipaudit_schemas::{encode, Alert};
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::SinkError;

/// A topic of alerts (`ipaudit.alerts`).
pub struct KafkaSink {
    topic: String,
    producer: FutureProducer,
}

impl KafkaSink {
    /// An idempotent producer to `topic`.
    pub fn new(
        brokers: &str,
        topic: &str,
        options: &[(String, String)],
    ) -> Result<Self, KafkaError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.timeout.ms", "30000");
        for (key, value) in options {
            config.set(key, value);
        }
        Ok(KafkaSink {
            topic: topic.to_owned(),
            producer: config.create()?,
        })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub(super) async fn deliver(&self, alert: &Alert) -> Result<(), SinkError> {
        let payload = encode(alert).map_err(|e| SinkError::Kafka(e.to_string()))?;
        let record = FutureRecord::to(&self.topic)
            .key(alert.alert_id.as_bytes())
            .payload(&payload);
        self.producer
            .send(record, Duration::from_secs(10))
            .await
            .map(drop)
            .map_err(|(error, _)| SinkError::Kafka(error.to_string()))
    }
}
