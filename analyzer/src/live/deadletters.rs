//! `analyzer dead-letters list|replay`: what the live analyzer set aside, and re-driving it
//! after an upgrade. Two kinds are kept in the store file:
//!
//! - messages of the events topic this build could not decode (a newer collector's
//!   schema, a corrupt record). `replay` decodes each again with this build and the
//!   writer schemas of the schemas topic (a newer collector's, published after the
//!   message was set aside, or unreadable then); one that now
//!   decodes is published to its topic again (keyed by its cluster id, so it reaches the
//!   partition of its cluster) and leaves the list; one that still fails stays, with the
//!   new reason.
//! - alert transitions a sink refused for good (a 4xx, a record too large). `replay`
//!   queues them for that sink again; the running (or next) `analyzer run` delivers them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ipaudit_runtime::kafka::Delivery;
use ipaudit_schemas::{decode_with, fingerprint_of, WatchEvent, WriterSchemas};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rusqlite::{params, Connection};

use crate::live::sinks::ledger::{Ledger, LedgerError, SinkDeadLetter};
use crate::live::writer_schemas::SchemaTopic;

/// Why listing or re-driving failed.
#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    /// The store file cannot be read or written (not retryable).
    #[error("analyzer store {path}")]
    Store {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The sink ledger failed (not retryable).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// Kafka did not take a re-published message (retryable: run `replay` again).
    #[error("cannot publish to {topic}")]
    Kafka {
        /// The topic.
        topic: String,
        /// What Kafka said.
        #[source]
        source: KafkaError,
    },
}

/// An undecodable message of the events topic, as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageDeadLetter {
    /// Its topic.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Why it was set aside.
    pub error: String,
    /// Its size in bytes (0: it had no payload).
    pub bytes: usize,
}

/// Everything set aside.
#[derive(Debug, Default)]
pub struct DeadLetters {
    /// Undecodable messages.
    pub messages: Vec<MessageDeadLetter>,
    /// Transitions refused by a sink.
    pub transitions: Vec<SinkDeadLetter>,
}

/// What a re-drive did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Redriven {
    /// Messages that decode now and were published again.
    pub republished: usize,
    /// Messages that still do not decode (kept).
    pub still_undecodable: usize,
    /// Transitions queued for their sink again.
    pub requeued: usize,
}

fn open(path: &Path) -> Result<Connection, DeadLetterError> {
    // Every table is created if missing, so that listing an empty store works.
    crate::live::db::open(path, ipaudit_runtime::sqlite::Durability::Full).map_err(|e| {
        DeadLetterError::Store {
            path: path.to_owned(),
            source: e.into(),
        }
    })
}

/// Lists what the store at `path` set aside; only `sink`'s transitions when given.
pub fn list(path: &Path, sink: Option<&str>) -> Result<DeadLetters, DeadLetterError> {
    let conn = open(path)?;
    let err = |source: rusqlite::Error| DeadLetterError::Store {
        path: path.to_owned(),
        source: source.into(),
    };
    let mut stmt = conn
        .prepare(
            "SELECT topic, partition, offset, error, COALESCE(LENGTH(payload), 0)
             FROM dead_letters ORDER BY topic, partition, offset",
        )
        .map_err(err)?;
    let messages = stmt
        .query_map([], |r| {
            Ok(MessageDeadLetter {
                topic: r.get(0)?,
                partition: r.get(1)?,
                offset: r.get(2)?,
                error: r.get(3)?,
                bytes: r
                    .get::<_, i64>(4)
                    .map(|n| usize::try_from(n).unwrap_or(0))?,
            })
        })
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    let transitions = Ledger::open(path)?.dead_letters(sink)?;
    Ok(DeadLetters {
        messages,
        transitions,
    })
}

/// Where re-decoded messages are published.
pub struct Republish {
    /// How to reach the brokers.
    pub connection: ipaudit_runtime::kafka::Connection,
    /// The schemas topic, read when a message names a schema this build does not carry
    /// (`None`: such messages stay).
    pub schemas_topic: Option<String>,
}

/// Re-drives what the store at `path` set aside: messages that decode with this build are
/// published again (when `republish` is given), transitions are queued for their sink
/// again (only `sink`'s when given).
pub async fn replay(
    path: &Path,
    republish: Option<&Republish>,
    sink: Option<&str>,
) -> Result<Redriven, DeadLetterError> {
    let mut done = Redriven::default();
    if let Some(target) = republish {
        republish_messages(path, target, &mut done).await?;
    }
    done.requeued = Ledger::open(path)?.redrive(sink)?;
    Ok(done)
}

async fn republish_messages(
    path: &Path,
    target: &Republish,
    done: &mut Redriven,
) -> Result<(), DeadLetterError> {
    let conn = open(path)?;
    let err = |source: rusqlite::Error| DeadLetterError::Store {
        path: path.to_owned(),
        source: source.into(),
    };
    let rows: Vec<(String, i32, i64, Option<Vec<u8>>)> = {
        let mut stmt = conn
            .prepare("SELECT topic, partition, offset, payload FROM dead_letters ORDER BY topic, partition, offset")
            .map_err(err)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .map_err(err)?;
        rows.collect::<Result<_, _>>().map_err(err)?
    };
    if rows.is_empty() {
        return Ok(());
    }
    let producer: FutureProducer = target
        .connection
        .producer(crate::live::CLIENT_ID, Delivery::Awaited)
        .create()
        .map_err(|source| DeadLetterError::Kafka {
            topic: String::new(),
            source,
        })?;
    // Messages of a schema this build does not carry are read with the schemas topic's.
    let mut learnt = WriterSchemas::new();
    let unknown_schema = rows.iter().any(|(.., payload)| {
        payload
            .as_deref()
            .and_then(fingerprint_of)
            .is_some_and(|f| !learnt.knows::<WatchEvent>(&f))
    });
    if unknown_schema {
        let mut schema_topic =
            SchemaTopic::new(target.connection.clone(), target.schemas_topic.clone());
        match schema_topic.learn_all(&mut learnt).await {
            Ok(lookup) => {
                for refused in lookup.iter().flat_map(|l| &l.refused) {
                    tracing::warn!(%refused, "schemas topic record refused");
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot read the schemas topic: messages of schemas this build does not carry stay set aside");
            }
        }
    }
    for (topic, partition, offset, payload) in rows {
        let decoded = payload
            .as_deref()
            .map(|p| decode_with::<WatchEvent>(p, &learnt))
            .map(|r| r.map_err(|e| e.to_string()));
        match (decoded, payload) {
            (Some(Ok(event)), Some(payload)) => {
                producer
                    .send(
                        FutureRecord::to(&topic)
                            .key(event.cluster_id.as_bytes())
                            .payload(&payload),
                        Duration::from_secs(30),
                    )
                    .await
                    .map_err(|(source, _)| DeadLetterError::Kafka {
                        topic: topic.clone(),
                        source,
                    })?;
                conn.execute(
                    "DELETE FROM dead_letters WHERE topic = ?1 AND partition = ?2 AND offset = ?3",
                    params![topic, partition, offset],
                )
                .map_err(err)?;
                done.republished += 1;
            }
            (decoded, _) => {
                let reason = match decoded {
                    Some(Err(error)) => error,
                    _ => "empty message".to_owned(),
                };
                conn.execute(
                    "UPDATE dead_letters SET error = ?4 WHERE topic = ?1 AND partition = ?2 AND offset = ?3",
                    params![topic, partition, offset, reason],
                )
                .map_err(err)?;
                done.still_undecodable += 1;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::store::Store;

    #[test]
    fn both_kinds_of_dead_letter_are_listed_and_a_refused_transition_is_requeued() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("analyzer.db");
        let store = Store::open(&path).unwrap();
        store
            .dead_letter(
                "events",
                0,
                7,
                "unknown schema fingerprint",
                Some(b"\xc3\x01junk"),
            )
            .unwrap();
        let ledger = Ledger::open(&path).unwrap();
        ledger
            .dead_letter("webhook:x", 1, "a/FIRING/1", "413")
            .unwrap();
        let listed = list(&path, None).unwrap();
        assert_eq!(listed.messages.len(), 1);
        assert_eq!(listed.messages[0].offset, 7);
        assert_eq!(listed.messages[0].bytes, 6);
        assert_eq!(listed.transitions.len(), 1);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let done = runtime.block_on(replay(&path, None, None)).unwrap();
        assert_eq!(done.requeued, 1);
        let listed = list(&path, None).unwrap();
        assert!(listed.transitions.is_empty());
        assert_eq!(
            listed.messages.len(),
            1,
            "messages stay without a broker to publish to"
        );
    }
}
