//! The writer schema of every event the collector sends goes to the compacted schemas topic
//! (`ipaudit.schemas`, key = the fingerprint the events carry, value = the schema's JSON)
//! before the first event written with it: an analyzer older than this collector then
//! learns the schema there and reads the events by resolution to its own schema (see
//! `ipaudit_schemas::writer_schemas`), instead of setting them aside.
//!
//! The producer asks [`SchemaPublisher::publish_for`] before each batch: the schemas of the
//! batch's rows not yet published by this process are sent and acknowledged first. Each
//! start publishes again (compaction keeps one record per fingerprint), so a topic that was
//! recreated or compacted wrongly is filled again on the next start.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use ipaudit_schemas::{fingerprint_of, Record as _, WatchEvent};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use tracing::info;

use crate::ship::outbox::Row;

/// Why a batch's schemas were not published; its rows wait in the outbox.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Kafka did not take the schema now (broker away, leader moving, topic missing):
    /// retryable, the batch waits.
    #[error("cannot publish writer schema {fingerprint:016x} to {topic}")]
    Kafka {
        /// The schemas topic.
        topic: String,
        /// The schema's fingerprint, as decode errors print it.
        fingerprint: u64,
        /// What Kafka said.
        #[source]
        source: KafkaError,
    },
}

impl PublishError {
    /// Kafka's error code, when it gave one.
    pub fn code(&self) -> Option<RDKafkaErrorCode> {
        match self {
            PublishError::Kafka { source, .. } => source.rdkafka_error_code(),
        }
    }
}

/// Publishes writer schemas ahead of the events written with them.
#[derive(Debug, Clone)]
pub struct SchemaPublisher {
    /// `None`: publish nothing (`--schemas-topic ""`).
    topic: Option<String>,
    /// The JSON of every schema this collector may find in its outbox, by fingerprint.
    texts: HashMap<[u8; 8], String>,
    published: HashSet<[u8; 8]>,
}

impl SchemaPublisher {
    /// Publishes to `topic` every WatchEvent schema version of this build: today's, and the
    /// older ones an outbox written before an upgrade still holds. `None` publishes nothing.
    pub fn new(topic: Option<String>) -> SchemaPublisher {
        let texts = WatchEvent::schemas()
            .versions()
            .iter()
            .map(|v| (v.fingerprint, v.text.to_owned()))
            .collect();
        SchemaPublisher {
            topic: topic.filter(|t| !t.is_empty()),
            texts,
            published: HashSet::new(),
        }
    }

    /// Also publishes `text`, a schema of events this build did not write itself (a
    /// newer release's rows in the outbox, a test's next version).
    pub fn with_writer_schema(mut self, text: &str) -> Result<SchemaPublisher, apache_avro::Error> {
        let schema = apache_avro::Schema::parse_str(text)?;
        match ipaudit_schemas::registry::fingerprint(&schema) {
            Some(fingerprint) => {
                self.texts.insert(fingerprint, text.to_owned());
            }
            // Readers cannot learn it either: its events wait as their dead letters.
            None => tracing::warn!("a writer schema without a canonical form is not published"),
        }
        Ok(self)
    }

    /// The schemas topic, if any.
    pub fn topic(&self) -> Option<&str> {
        self.topic.as_deref()
    }

    /// The fingerprints of `rows` whose schema is still to be published, in order of first
    /// use. Rows of a schema this collector does not have (not an event, a corrupt row) are
    /// sent as they are: the analyzer sets them aside.
    pub fn unpublished(&self, rows: &[Row]) -> Vec<[u8; 8]> {
        if self.topic.is_none() {
            return Vec::new();
        }
        let mut wanted: Vec<[u8; 8]> = Vec::new();
        for fingerprint in rows.iter().filter_map(|r| fingerprint_of(&r.payload)) {
            if !self.published.contains(&fingerprint)
                && self.texts.contains_key(&fingerprint)
                && !wanted.contains(&fingerprint)
            {
                wanted.push(fingerprint);
            }
        }
        wanted
    }

    /// Publishes the schemas of `rows` not published yet, each acknowledged by Kafka before
    /// this returns `Ok`.
    pub async fn publish_for(
        &mut self,
        producer: &FutureProducer,
        rows: &[Row],
    ) -> Result<(), PublishError> {
        let Some(topic) = self.topic.clone() else {
            return Ok(());
        };
        for fingerprint in self.unpublished(rows) {
            let text = &self.texts[&fingerprint];
            let number = u64::from_le_bytes(fingerprint);
            producer
                .send(
                    FutureRecord::to(&topic).key(&fingerprint[..]).payload(text),
                    Duration::from_secs(5),
                )
                .await
                .map_err(|(source, _)| PublishError::Kafka {
                    topic: topic.clone(),
                    fingerprint: number,
                    source,
                })?;
            info!(%topic, fingerprint = %format!("{number:016x}"), "writer schema published");
            self.published.insert(fingerprint);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::builders::{EventBuilder, NextVersion};

    fn row(id: i64, payload: Vec<u8>) -> Row {
        Row { id, payload }
    }

    #[test]
    fn each_schema_of_a_batch_is_wanted_once_and_only_its_own_and_known_ones() {
        let next = NextVersion::new();
        let publisher = SchemaPublisher::new(Some("ipaudit.schemas".into()))
            .with_writer_schema(&next.text)
            .unwrap();
        let event = EventBuilder::subnet("s").rv(1).added();
        let today = ipaudit_schemas::encode(&event).unwrap();
        let rows = vec![
            row(1, today.clone()),
            row(2, next.encode(&event)),
            row(3, today),
            row(4, b"not an event".to_vec()),
            row(5, [&[0xC3, 0x01][..], &[9; 8], b"unknown"].concat()),
        ];
        let wanted = publisher.unpublished(&rows);
        assert_eq!(
            wanted,
            vec![
                WatchEvent::schemas().current().fingerprint,
                next.fingerprint
            ]
        );
        let none = SchemaPublisher::new(Some(String::new()));
        assert!(none.unpublished(&rows).is_empty(), "\"\" publishes nothing");
        assert!(SchemaPublisher::new(None).unpublished(&rows).is_empty());
    }
}
