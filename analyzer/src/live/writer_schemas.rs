//! Learning a newer collector's writer schema from the schemas topic (`ipaudit.schemas`,
//! compacted, key = fingerprint, value = the schema's JSON; see
//! [`ipaudit_schemas::writer_schemas`]). A collector publishes each schema it writes with
//! before its first event with it, so a message with a fingerprint this build does not know
//! can be read once the topic has been read: [`SchemaTopic::learn_for`] reads it then, the
//! whole topic (a few records), and the message is decoded again. A fingerprint the topic
//! does not have is looked up again only after [`LOOKUP_AGAIN_AFTER`]: a corrupt message
//! costs one read of the topic, not one per message.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ipaudit_runtime::kafka::topics::is_missing_topic;
use ipaudit_schemas::{WatchEvent, WriterSchemas};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

/// A fingerprint the topic did not have is looked up again after this long.
pub const LOOKUP_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// How long one read of the schemas topic may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the schemas topic could not be read. Messages of unknown schemas are then kept as
/// dead letters (`analyzer dead-letters replay --republish` re-drives them).
#[derive(Debug, thiserror::Error)]
pub enum SchemaTopicError {
    /// The topic does not exist (create it: deploy/topics.yaml); retryable once it does.
    #[error("the schemas topic {topic} does not exist")]
    Missing {
        /// The topic.
        topic: String,
    },
    /// Kafka's authorizer refuses this principal read on it; retryable once granted.
    #[error("Kafka denies read on the schemas topic {topic} ({code}): grant it with deploy/kafka-acls.sh")]
    Denied {
        /// The topic.
        topic: String,
        /// Kafka's error.
        code: RDKafkaErrorCode,
    },
    /// Kafka failed or did not answer in time (retryable).
    #[error("cannot read the schemas topic {topic}")]
    Kafka {
        /// The topic.
        topic: String,
        /// What Kafka said.
        #[source]
        source: KafkaError,
    },
    /// The blocking read panicked (a bug).
    #[error("the schemas topic read failed: {0}")]
    Task(String),
    /// The read did not reach the topic's end in time (retryable).
    #[error("the schemas topic {topic} was not read to its end within {READ_TIMEOUT:?}")]
    Timeout {
        /// The topic.
        topic: String,
    },
}

/// One record of the schemas topic: its key (a fingerprint) and value (a schema's JSON).
type TopicRecord = (Vec<u8>, Vec<u8>);

/// What one read of the topic learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// Schemas learnt from the topic by this read.
    pub learnt: usize,
    /// Records of the topic that were refused (wrong key, not a schema, incompatible).
    pub refused: Vec<String>,
}

/// The schemas topic, read when a message names a schema this build does not carry.
pub struct SchemaTopic {
    connection: ipaudit_runtime::kafka::Connection,
    /// `None`: no schemas topic (`--schemas-topic ""`): unknown schemas stay unknown.
    topic: Option<String>,
    looked_up: HashMap<[u8; 8], Instant>,
}

impl SchemaTopic {
    /// The topic `topic` on the brokers of `connection`; `None` reads nothing.
    pub fn new(connection: ipaudit_runtime::kafka::Connection, topic: Option<String>) -> Self {
        SchemaTopic {
            connection,
            topic: topic.filter(|t| !t.is_empty()),
            looked_up: HashMap::new(),
        }
    }

    /// Reads the topic into `learnt` if `fingerprint` is neither known nor looked up in the
    /// last [`LOOKUP_AGAIN_AFTER`]. `Ok(None)`: not looked up now.
    pub async fn learn_for(
        &mut self,
        fingerprint: [u8; 8],
        learnt: &mut WriterSchemas,
    ) -> Result<Option<Lookup>, SchemaTopicError> {
        if self.topic.is_none() {
            return Ok(None);
        }
        if learnt.knows::<WatchEvent>(&fingerprint)
            || self
                .looked_up
                .get(&fingerprint)
                .is_some_and(|at| at.elapsed() < LOOKUP_AGAIN_AFTER)
        {
            return Ok(None);
        }
        self.looked_up.insert(fingerprint, Instant::now());
        self.learn_all(learnt).await
    }

    /// Reads the whole topic into `learnt` (also for a batch of dead letters); `Ok(None)`:
    /// no schemas topic.
    pub async fn learn_all(
        &mut self,
        learnt: &mut WriterSchemas,
    ) -> Result<Option<Lookup>, SchemaTopicError> {
        let Some(topic) = self.topic.clone() else {
            return Ok(None);
        };
        let connection = self.connection.clone();
        // Off the async runtime's threads: librdkafka's calls block.
        let records = tokio::task::spawn_blocking(move || read_topic(&connection, &topic))
            .await
            .map_err(|e| SchemaTopicError::Task(e.to_string()))??;
        let mut lookup = Lookup {
            learnt: 0,
            refused: Vec::new(),
        };
        for (key, value) in records {
            match learnt.learn::<WatchEvent>(&key, &value) {
                Ok(true) => lookup.learnt += 1,
                Ok(false) => {}
                Err(e) => lookup.refused.push(e.to_string()),
            }
        }
        Ok(Some(lookup))
    }
}

/// Every record (key, value) of the topic, each partition read from its start to its end
/// as of now; tombstones (compaction's deletions) left out.
fn read_topic(
    connection: &ipaudit_runtime::kafka::Connection,
    topic: &str,
) -> Result<Vec<TopicRecord>, SchemaTopicError> {
    let kafka = |source| SchemaTopicError::Kafka {
        topic: topic.to_owned(),
        source,
    };
    let consumer: BaseConsumer = connection
        .reader(crate::live::CLIENT_ID, "ipaudit-schema-lookup")
        // A compacted partition may end in offsets compaction removed: its end is known
        // from librdkafka, not from the last record's offset.
        .set("enable.partition.eof", "true")
        .create()
        .map_err(kafka)?;
    let metadata = consumer
        .fetch_metadata(Some(topic), READ_TIMEOUT)
        .map_err(kafka)?;
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(SchemaTopicError::Missing {
            topic: topic.to_owned(),
        });
    };
    match found.error().map(RDKafkaErrorCode::from) {
        None => {}
        Some(code) if is_missing_topic(code) => {
            return Err(SchemaTopicError::Missing {
                topic: topic.to_owned(),
            })
        }
        Some(
            code @ (RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed),
        ) => {
            return Err(SchemaTopicError::Denied {
                topic: topic.to_owned(),
                code,
            })
        }
        Some(code) => return Err(kafka(KafkaError::MetadataFetch(code))),
    }
    let mut ends: HashMap<i32, i64> = HashMap::new();
    let mut list = TopicPartitionList::new();
    for partition in found.partitions() {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition.id(), READ_TIMEOUT)
            .map_err(kafka)?;
        if high > low {
            list.add_partition_offset(topic, partition.id(), Offset::Offset(low))
                .map_err(kafka)?;
            ends.insert(partition.id(), high);
        }
    }
    let mut records = Vec::new();
    if ends.is_empty() {
        return Ok(records);
    }
    consumer.assign(&list).map_err(kafka)?;
    let deadline = Instant::now() + READ_TIMEOUT;
    while !ends.is_empty() {
        if Instant::now() > deadline {
            return Err(SchemaTopicError::Timeout {
                topic: topic.to_owned(),
            });
        }
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = match message {
            Ok(message) => message,
            Err(KafkaError::PartitionEOF(partition)) => {
                ends.remove(&partition);
                continue;
            }
            Err(KafkaError::MessageConsumption(
                code @ (RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::GroupAuthorizationFailed),
            )) => {
                return Err(SchemaTopicError::Denied {
                    topic: topic.to_owned(),
                    code,
                })
            }
            Err(e) => return Err(kafka(e)),
        };
        if let (Some(key), Some(value)) = (message.key(), message.payload()) {
            records.push((key.to_vec(), value.to_vec()));
        }
        let partition = message.partition();
        if ends
            .get(&partition)
            .is_some_and(|end| message.offset() + 1 >= *end)
        {
            ends.remove(&partition);
        }
    }
    Ok(records)
}
