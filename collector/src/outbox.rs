//! The SQLite (WAL) outbox: every event is committed here, together with the stream's
//! resume point and the live objects it changes, before it counts as seen; a row is
//! deleted only after Kafka acknowledged it. A restart resumes exactly where the last
//! transaction left off.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipaudit_schemas::{encode, kinds, Stream};
use rusqlite::{params, Connection, OptionalExtension};

use crate::event::LiveObject;
use crate::watch::{LiveChange, Observed, StreamState};

/// Why the outbox failed. SQLite errors are not retryable here: the disk or the file is
/// broken, and the collector must stop rather than lose events.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// SQLite said no.
    #[error("outbox {path}: {context}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What was being done.
        context: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The state directory belongs to another cluster.
    #[error("outbox {path} holds events of cluster {found:?}, not {expected:?}: use another state directory")]
    OtherCluster {
        /// The database file.
        path: PathBuf,
        /// Cluster configured.
        expected: String,
        /// Cluster in the file.
        found: String,
    },
    /// An event could not be encoded (a bug: every event fits the schema).
    #[error("cannot encode an event for the outbox")]
    Encode(#[from] ipaudit_schemas::EncodeError),
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS outbox (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    payload BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS stream_state (
    stream           TEXT PRIMARY KEY,
    resource_version TEXT,
    sequence         INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS live_objects (
    stream           TEXT NOT NULL,
    uid              TEXT NOT NULL,
    name             TEXT NOT NULL,
    namespace        TEXT,
    resource_version TEXT NOT NULL,
    PRIMARY KEY (stream, uid)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
";

/// One connection to the outbox database.
pub struct Outbox {
    conn: Connection,
    path: PathBuf,
}

impl Outbox {
    /// Opens (or creates) the outbox of `cluster_id` at `path`.
    pub fn open(path: &Path, cluster_id: &str) -> Result<Self, OutboxError> {
        let outbox = Self::connect(path)?;
        outbox
            .conn
            .execute_batch(SCHEMA)
            .map_err(outbox.err("create tables"))?;
        let found: Option<String> = outbox
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'cluster_id'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(outbox.err("read cluster id"))?;
        match found {
            Some(found) if found != cluster_id => {
                return Err(OutboxError::OtherCluster {
                    path: path.to_owned(),
                    expected: cluster_id.to_owned(),
                    found,
                })
            }
            Some(_) => {}
            None => {
                outbox
                    .conn
                    .execute(
                        "INSERT INTO meta (key, value) VALUES ('cluster_id', ?1)",
                        [cluster_id],
                    )
                    .map_err(outbox.err("store cluster id"))?;
            }
        }
        Ok(outbox)
    }

    /// Another connection to an existing outbox (the producer's).
    pub fn connect(path: &Path) -> Result<Self, OutboxError> {
        let err = |context| sqlite_error(path, context);
        let conn = Connection::open(path).map_err(err("open"))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err("enable WAL"))?;
        // NORMAL in WAL mode survives a killed process; only a power cut may lose the
        // last transactions, which the relist diff then recovers.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err("set synchronous"))?;
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(err("set busy timeout"))?;
        Ok(Outbox {
            conn,
            path: path.to_owned(),
        })
    }

    fn err(&self, context: &'static str) -> impl Fn(rusqlite::Error) -> OutboxError + '_ {
        sqlite_error(&self.path, context)
    }

    /// Where each stream stopped: resume point, last sequence, live objects. Streams
    /// never stored are absent (they start with a list); rows of a stream this build does
    /// not know are ignored.
    pub fn load(&self) -> Result<HashMap<Stream, StreamState>, OutboxError> {
        let mut states: HashMap<Stream, StreamState> = HashMap::new();
        let mut stmt = self
            .conn
            .prepare("SELECT stream, resource_version, sequence FROM stream_state")
            .map_err(self.err("read stream state"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
            .map_err(self.err("read stream state"))?;
        for row in rows {
            let (stream, rv, sequence) = row.map_err(self.err("read stream state"))?;
            if let Some(stream) = kinds::stream_labelled(&stream) {
                let state = states.entry(stream).or_default();
                state.resume_from = rv;
                state.sequence = sequence;
            }
        }
        let mut stmt = self
            .conn
            .prepare("SELECT stream, uid, name, namespace, resource_version FROM live_objects")
            .map_err(self.err("read live objects"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    LiveObject {
                        uid: r.get(1)?,
                        name: r.get(2)?,
                        namespace: r.get(3)?,
                        resource_version: r.get(4)?,
                    },
                ))
            })
            .map_err(self.err("read live objects"))?;
        for row in rows {
            let (stream, object) = row.map_err(self.err("read live objects"))?;
            if let Some(stream) = kinds::stream_labelled(&stream) {
                let state = states.entry(stream).or_default();
                state.live.insert(object.uid.clone(), object);
            }
        }
        Ok(states)
    }

    /// Commits a batch of events in one transaction: outbox rows, resume points, live set.
    pub fn append(&mut self, batch: &[Observed]) -> Result<(), OutboxError> {
        let err = |context| sqlite_error(&self.path, context);
        let tx = self.conn.transaction().map_err(err("begin"))?;
        {
            let mut insert = tx
                .prepare_cached("INSERT INTO outbox (payload) VALUES (?1)")
                .map_err(err("insert"))?;
            let mut state = tx
                .prepare_cached(
                    "INSERT INTO stream_state (stream, resource_version, sequence) VALUES (?1, ?2, ?3)
                     ON CONFLICT (stream) DO UPDATE SET
                       resource_version = COALESCE(excluded.resource_version, stream_state.resource_version),
                       sequence = excluded.sequence",
                )
                .map_err(err("update stream state"))?;
            let mut upsert = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO live_objects (stream, uid, name, namespace, resource_version)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(err("update live objects"))?;
            let mut remove = tx
                .prepare_cached("DELETE FROM live_objects WHERE stream = ?1 AND uid = ?2")
                .map_err(err("update live objects"))?;
            for observed in batch {
                let event = &observed.event;
                let stream = event.stream.as_str();
                insert.execute([encode(event)?]).map_err(err("insert"))?;
                state
                    .execute(params![stream, observed.resume_from, event.sequence])
                    .map_err(err("update stream state"))?;
                match &observed.live {
                    LiveChange::None => {}
                    LiveChange::Upsert(o) => {
                        upsert
                            .execute(params![
                                stream,
                                o.uid,
                                o.name,
                                o.namespace,
                                o.resource_version
                            ])
                            .map_err(err("update live objects"))?;
                    }
                    LiveChange::Remove(uid) => {
                        remove
                            .execute(params![stream, uid])
                            .map_err(err("update live objects"))?;
                    }
                }
            }
        }
        tx.commit().map_err(err("commit"))
    }

    /// Events not yet acknowledged by Kafka.
    pub fn pending_rows(&self) -> Result<i64, OutboxError> {
        self.conn
            .query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
            .map_err(self.err("count outbox rows"))
    }

    /// The oldest rows, in order.
    pub fn read_batch(&self, limit: usize) -> Result<Vec<(i64, Vec<u8>)>, OutboxError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, payload FROM outbox ORDER BY id LIMIT ?1")
            .map_err(self.err("read outbox"))?;
        let rows = stmt
            .query_map([limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(self.err("read outbox"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.err("read outbox"))
    }

    /// Deletes every row up to and including `id` (acknowledged by Kafka).
    pub fn delete_through(&self, id: i64) -> Result<(), OutboxError> {
        self.conn
            .execute("DELETE FROM outbox WHERE id <= ?1", [id])
            .map(drop)
            .map_err(self.err("delete acknowledged rows"))
    }
}

impl crate::sink::EventSink for Outbox {
    fn store(&mut self, batch: &[Observed]) -> Result<(), crate::sink::SinkError> {
        Ok(self.append(batch)?)
    }

    fn finish(self: Box<Self>) -> Result<(), crate::sink::SinkError> {
        Ok(())
    }
}

/// Maps a SQLite error to this module's error, naming the file and what was being done.
fn sqlite_error<'a>(
    path: &'a Path,
    context: &'static str,
) -> impl Fn(rusqlite::Error) -> OutboxError + 'a {
    move |source| OutboxError::Sqlite {
        path: path.to_owned(),
        context,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Stamp;
    use ipaudit_schemas::EventType;
    use serde_json::json;

    fn observed(stamp: &Stamp, name: &str, rv: &str, seq: i64) -> Observed {
        let object = json!({"metadata": {"name": name, "uid": format!("u-{name}"), "resourceVersion": rv}, "spec": {"subnet": "s"}});
        let (event, _) = stamp
            .object_event(Stream::Ip, EventType::Added, &object, seq)
            .unwrap();
        Observed {
            live: LiveChange::Upsert(LiveObject::of(&event).unwrap()),
            resume_from: Some(rv.into()),
            event,
        }
    }

    #[test]
    fn events_resume_points_and_live_objects_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        let stamp = Stamp {
            cluster_id: "c".into(),
            collector_id: "k".into(),
            raw_objects: false,
        };
        let mut outbox = Outbox::open(&path, "c").unwrap();
        outbox
            .append(&[
                observed(&stamp, "a", "10", 1),
                observed(&stamp, "b", "11", 2),
            ])
            .unwrap();
        let mut gone = observed(&stamp, "a", "12", 3);
        gone.live = LiveChange::Remove("u-a".into());
        outbox.append(&[gone]).unwrap();
        drop(outbox);
        let outbox = Outbox::open(&path, "c").unwrap();
        let states = outbox.load().unwrap();
        let ip = &states[&Stream::Ip];
        assert_eq!(ip.resume_from.as_deref(), Some("12"));
        assert_eq!(ip.sequence, 3);
        assert_eq!(ip.live.keys().collect::<Vec<_>>(), ["u-b"]);
        assert_eq!(outbox.pending_rows().unwrap(), 3);
        let rows = outbox.read_batch(2).unwrap();
        outbox.delete_through(rows[1].0).unwrap();
        assert_eq!(outbox.pending_rows().unwrap(), 1);
    }

    #[test]
    fn every_kind_of_the_table_resumes_and_unknown_streams_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        let outbox = Outbox::open(&path, "c").unwrap();
        for stream in kinds::streams() {
            outbox
                .conn
                .execute(
                    "INSERT INTO stream_state (stream, resource_version, sequence) VALUES (?1, '7', 2)",
                    [stream.as_str()],
                )
                .unwrap();
        }
        // Written by a newer collector that knows a kind this build does not.
        outbox
            .conn
            .execute(
                "INSERT INTO stream_state (stream, resource_version, sequence) VALUES ('nodes', '9', 1)",
                [],
            )
            .unwrap();
        let states = outbox.load().unwrap();
        assert_eq!(states.len(), kinds::streams().count());
        assert_eq!(
            states[&Stream::OverlappingRangeIpReservation]
                .resume_from
                .as_deref(),
            Some("7")
        );
    }

    #[test]
    fn an_outbox_of_another_cluster_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        Outbox::open(&path, "prod-1").unwrap();
        assert!(matches!(
            Outbox::open(&path, "prod-2"),
            Err(OutboxError::OtherCluster { .. })
        ));
    }
}
