//! The SQLite (WAL) outbox: every event is committed here, together with the stream's
//! resume point and the live objects it changes, before it counts as seen; a row is
//! deleted only after Kafka acknowledged it. A restart resumes exactly where the last
//! transaction left off.
//!
//! The outbox keeps its own size (rows and payload bytes, maintained in the same
//! transactions: a trigger per inserted row, one update per settled range), so that neither the producer nor the bound (`--outbox-max-bytes`)
//! ever counts the table. A row Kafka refuses for good moves to the `quarantine` table,
//! from which an operator can list and re-send it (`collector outbox quarantine`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ipaudit_schemas::{encode, kinds, Stream};
use rusqlite::{params, Connection, OptionalExtension};

use crate::health::{Health, OutboxSize};
use crate::metrics::Metrics;
use crate::observed::{LiveChange, Observed, StreamState};
use crate::watch::event::LiveObject;

/// Why the outbox failed. SQLite errors are not retryable here: the disk or the file is
/// broken, and the collector must stop rather than lose events.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// SQLite said no (the file, what was being done, SQLite's error).
    #[error(transparent)]
    Sqlite(#[from] ipaudit_runtime::sqlite::SqliteError),
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
    /// There is no outbox at this path (`collector outbox` never creates one).
    #[error("no outbox at {0}: is --state-dir the collector's state directory?")]
    Missing(PathBuf),
    /// Quarantined rows asked for by id do not exist.
    #[error("no quarantined rows with ids {0:?}")]
    UnknownQuarantineIds(Vec<i64>),
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
CREATE TABLE IF NOT EXISTS quarantine (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    outbox_id         INTEGER NOT NULL,
    quarantined_at_ms INTEGER NOT NULL,
    reason            TEXT NOT NULL,
    error             TEXT NOT NULL,
    stream            TEXT,
    object            TEXT,
    resource_version  TEXT,
    payload           BLOB NOT NULL
);
";

/// The outbox's size, kept in the transaction that changes it (created after [`SCHEMA`] in
/// one transaction, which also counts an outbox written by an older build): a trigger per
/// inserted row, and [`Outbox::settle`] for the range it deletes. A trigger per deleted row
/// made SQLite keep a statement journal and run the trigger for every row of a drain, about
/// a fifth of the drain's time ([`DROP_DELETE_TRIGGER`]).
const SIZE_SCHEMA: &str = "
CREATE TABLE outbox_size (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 0),
    rows      INTEGER NOT NULL,
    bytes     INTEGER NOT NULL
);
INSERT INTO outbox_size (singleton, rows, bytes)
    SELECT 0, COUNT(*), COALESCE(SUM(length(payload)), 0) FROM outbox;
CREATE TRIGGER outbox_size_insert AFTER INSERT ON outbox BEGIN
    UPDATE outbox_size SET rows = rows + 1, bytes = bytes + length(NEW.payload);
END;
";

/// The per-row delete trigger of the builds before issue 44, dropped from their outboxes
/// when they are opened ([`Outbox::settle`] counts what it deletes). A build that old
/// opening an outbox after this one would not count its own deletes: its outbox size
/// would only grow, until the size table is dropped.
const DROP_DELETE_TRIGGER: &str = "DROP TRIGGER IF EXISTS outbox_size_delete;";

/// One outbox row: an encoded event waiting for Kafka.
#[derive(Debug, Clone)]
pub struct Row {
    /// Its place in the outbox (rows are sent in this order).
    pub id: i64,
    /// The encoded event.
    pub payload: Vec<u8>,
}

/// A row Kafka refused for good, moved out of the way of the rows after it.
#[derive(Debug, Clone)]
pub struct Quarantine {
    /// The row's id in the outbox.
    pub outbox_id: i64,
    /// A short label (the metric's `reason`), e.g. `message_size_too_large`.
    pub reason: &'static str,
    /// The error as Kafka or librdkafka said it.
    pub error: String,
    /// The event's stream, object key and resourceVersion, when it decodes.
    pub stream: Option<String>,
    /// `namespace/name` or `name`.
    pub object: Option<String>,
    /// The event's resourceVersion.
    pub resource_version: Option<String>,
    /// The encoded event.
    pub payload: Vec<u8>,
}

/// A quarantined row as `collector outbox quarantine list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantinedRow {
    /// Id in the quarantine table (what `resend` takes).
    pub id: i64,
    /// Id it had in the outbox.
    pub outbox_id: i64,
    /// When it was quarantined (Unix ms).
    pub quarantined_at_ms: i64,
    /// Short label.
    pub reason: String,
    /// The full error.
    pub error: String,
    /// The event's stream.
    pub stream: Option<String>,
    /// The event's object.
    pub object: Option<String>,
    /// The event's resourceVersion.
    pub resource_version: Option<String>,
    /// Size of the encoded event.
    pub bytes: i64,
}

/// One connection to the outbox database.
pub struct Outbox {
    conn: Connection,
    path: PathBuf,
    observer: Option<(Health, Metrics)>,
}

impl Outbox {
    /// Opens (or creates) the outbox of `cluster_id` at `path`.
    pub fn open(path: &Path, cluster_id: &str) -> Result<Self, OutboxError> {
        let outbox = Self::connect(path)?;
        outbox
            .conn
            .execute_batch(SCHEMA)
            .map_err(outbox.err("create tables"))?;
        outbox.ensure_size_table()?;
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
        // WAL, synchronous=NORMAL (a power cut may lose the last transactions, which the
        // relist diff then recovers), busy timeout: the runtime's policy for every file.
        let conn =
            ipaudit_runtime::sqlite::open(path, ipaudit_runtime::sqlite::Durability::Recoverable)?;
        Ok(Outbox {
            conn,
            path: path.to_owned(),
            observer: None,
        })
    }

    /// Reports the outbox's size to `health` (which pauses the watches when it is full)
    /// and `metrics` after every batch stored, and marks each store as a step that must
    /// not hang.
    pub fn observed_by(mut self, health: Health, metrics: Metrics) -> Self {
        if let Ok(size) = self.size() {
            health.outbox_size(size);
            metrics.outbox_size(size);
        }
        self.observer = Some((health, metrics));
        self
    }

    /// Opens an outbox that must exist already (the operator's `collector outbox`
    /// commands: a wrong `--state-dir` must not create an empty outbox).
    pub fn open_existing(path: &Path) -> Result<Self, OutboxError> {
        if !path.is_file() {
            return Err(OutboxError::Missing(path.to_owned()));
        }
        let outbox = Self::connect(path)?;
        outbox
            .conn
            .execute_batch(SCHEMA)
            .map_err(outbox.err("create tables"))?;
        outbox.ensure_size_table()?;
        Ok(outbox)
    }

    /// Creates the size table and its triggers once, counting the rows already there in
    /// the same transaction (an outbox of an older build).
    fn ensure_size_table(&self) -> Result<(), OutboxError> {
        let exists: Option<i64> = self
            .conn
            .query_row(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'outbox_size'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err("look for the size table"))?;
        if exists.is_none() {
            self.conn
                .execute_batch(&format!("BEGIN IMMEDIATE; {SIZE_SCHEMA} COMMIT;"))
                .map_err(self.err("create the size table"))?;
        }
        self.conn
            .execute_batch(DROP_DELETE_TRIGGER)
            .map_err(self.err("drop the per-row delete trigger"))
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
                // A record outside the stream's own sequence (a remediation's, sequence 0)
                // moves neither its sequence nor its resume point.
                if event.sequence > 0 {
                    state
                        .execute(params![stream, observed.resume_from, event.sequence])
                        .map_err(err("update stream state"))?;
                }
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

    /// Rows not yet acknowledged by Kafka and their bytes (one row read, never a count).
    pub fn size(&self) -> Result<OutboxSize, OutboxError> {
        self.conn
            .query_row(
                "SELECT rows, bytes FROM outbox_size WHERE singleton = 0",
                [],
                |r| {
                    Ok(OutboxSize {
                        rows: r.get(0)?,
                        bytes: r.get(1)?,
                    })
                },
            )
            .optional()
            .map(Option::unwrap_or_default)
            .map_err(self.err("read the outbox size"))
    }

    /// Up to `limit` rows with ids above `after`, in order. Reading on from the last row
    /// read keeps a drain linear in the rows, whatever was deleted before them.
    pub fn read_after(&self, after: i64, limit: usize) -> Result<Vec<Row>, OutboxError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, payload FROM outbox WHERE id > ?1 ORDER BY id LIMIT ?2")
            .map_err(self.err("read outbox"))?;
        let rows = stmt
            .query_map(params![after, limit as i64], |r| {
                Ok(Row {
                    id: r.get(0)?,
                    payload: r.get(1)?,
                })
            })
            .map_err(self.err("read outbox"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.err("read outbox"))
    }

    /// In one transaction: moves `quarantined` rows to the quarantine table and deletes
    /// every row up to and including `through` (acknowledged by Kafka or quarantined).
    pub fn settle(&mut self, through: i64, quarantined: &[Quarantine]) -> Result<(), OutboxError> {
        let err = |context| sqlite_error(&self.path, context);
        let tx = self.conn.transaction().map_err(err("begin"))?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO quarantine (outbox_id, quarantined_at_ms, reason, error, stream, object, resource_version, payload)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(err("quarantine a row"))?;
            let now = ipaudit_runtime::clock::now_ms();
            for q in quarantined {
                insert
                    .execute(params![
                        q.outbox_id,
                        now,
                        q.reason,
                        q.error,
                        q.stream,
                        q.object,
                        q.resource_version,
                        q.payload
                    ])
                    .map_err(err("quarantine a row"))?;
            }
            tx.execute(
                "UPDATE outbox_size SET rows = rows - settled.row_count,
                                        bytes = bytes - settled.byte_count
                 FROM (SELECT COUNT(*) AS row_count,
                              COALESCE(SUM(length(payload)), 0) AS byte_count
                       FROM outbox WHERE id <= ?1) AS settled",
                [through],
            )
            .map_err(err("count acknowledged rows"))?;
            tx.execute("DELETE FROM outbox WHERE id <= ?1", [through])
                .map_err(err("delete acknowledged rows"))?;
        }
        tx.commit().map_err(err("commit"))
    }

    /// Deletes every row up to and including `id` (acknowledged by Kafka).
    pub fn delete_through(&mut self, id: i64) -> Result<(), OutboxError> {
        self.settle(id, &[])
    }

    /// The quarantined rows, oldest first.
    pub fn quarantined(&self) -> Result<Vec<QuarantinedRow>, OutboxError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, outbox_id, quarantined_at_ms, reason, error, stream, object, resource_version, length(payload)
                 FROM quarantine ORDER BY id",
            )
            .map_err(self.err("read quarantine"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(QuarantinedRow {
                    id: r.get(0)?,
                    outbox_id: r.get(1)?,
                    quarantined_at_ms: r.get(2)?,
                    reason: r.get(3)?,
                    error: r.get(4)?,
                    stream: r.get(5)?,
                    object: r.get(6)?,
                    resource_version: r.get(7)?,
                    bytes: r.get(8)?,
                })
            })
            .map_err(self.err("read quarantine"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.err("read quarantine"))
    }

    /// Moves quarantined rows back to the end of the outbox, in their order: `ids`, or
    /// every row when `None`. Returns how many moved; unknown ids move nothing.
    pub fn resend(&mut self, ids: Option<&[i64]>) -> Result<usize, OutboxError> {
        let err = |context| sqlite_error(&self.path, context);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err("begin"))?;
        let chosen: Vec<i64> = {
            let mut stmt = tx
                .prepare("SELECT id FROM quarantine ORDER BY id")
                .map_err(err("read quarantine"))?;
            let all: Vec<i64> = stmt
                .query_map([], |r| r.get(0))
                .map_err(err("read quarantine"))?
                .collect::<Result<_, _>>()
                .map_err(err("read quarantine"))?;
            match ids {
                None => all,
                Some(ids) => {
                    let unknown: Vec<i64> =
                        ids.iter().copied().filter(|id| !all.contains(id)).collect();
                    if !unknown.is_empty() {
                        return Err(OutboxError::UnknownQuarantineIds(unknown));
                    }
                    all.into_iter().filter(|id| ids.contains(id)).collect()
                }
            }
        };
        for id in &chosen {
            tx.execute(
                "INSERT INTO outbox (payload) SELECT payload FROM quarantine WHERE id = ?1",
                [id],
            )
            .map_err(err("move a row back to the outbox"))?;
            tx.execute("DELETE FROM quarantine WHERE id = ?1", [id])
                .map_err(err("move a row back to the outbox"))?;
        }
        tx.commit().map_err(err("commit"))?;
        Ok(chosen.len())
    }
}

impl Outbox {
    /// The health and metrics this outbox reports its size to ([`Outbox::observed_by`]).
    pub fn observer(&self) -> Option<&(Health, Metrics)> {
        self.observer.as_ref()
    }
}

/// Maps a SQLite error to this module's error, naming the file and what was being done
/// (the runtime's [`ipaudit_runtime::sqlite::failed`], typed for `?` in this module).
fn sqlite_error<'a>(
    path: &'a Path,
    context: &'static str,
) -> impl Fn(rusqlite::Error) -> OutboxError + 'a {
    ipaudit_runtime::sqlite::failed(path, context)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::event::Stamp;
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
        assert_eq!(outbox.size().unwrap().rows, 3);
        let mut outbox = outbox;
        let rows = outbox.read_after(0, 2).unwrap();
        outbox.delete_through(rows[1].id).unwrap();
        let left = outbox.read_after(0, 10).unwrap();
        assert_eq!(outbox.size().unwrap().rows, 1);
        assert_eq!(outbox.size().unwrap().bytes, left[0].payload.len() as i64);
    }

    #[test]
    fn a_remediation_record_leaves_the_streams_sequence_and_resume_point_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        let stamp = stamp();
        let mut outbox = Outbox::open(&path, "c").unwrap();
        outbox
            .append(&[
                observed(&stamp, "a", "230", 7),
                observed(&stamp, "b", "231", 8),
            ])
            .unwrap();
        let record = stamp.marker(Stream::Ip, EventType::Remediation, "230", 0);
        outbox
            .append(&[Observed {
                event: record,
                live: LiveChange::None,
                resume_from: None,
            }])
            .unwrap();
        drop(outbox);
        let states = Outbox::open(&path, "c").unwrap().load().unwrap();
        let ip = &states[&Stream::Ip];
        assert_eq!(ip.sequence, 8, "the IP watch's sequence goes on from 8");
        assert_eq!(ip.resume_from.as_deref(), Some("231"));
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

    fn stamp() -> Stamp {
        Stamp {
            cluster_id: "c".into(),
            collector_id: "k".into(),
            raw_objects: false,
        }
    }

    #[test]
    fn the_size_follows_inserts_deletes_and_counts_an_outbox_of_an_older_build() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        {
            // What an older build left: rows and no size table.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute(
                "INSERT INTO outbox (payload) VALUES (x'0102'), (x'030405')",
                [],
            )
            .unwrap();
        }
        let mut outbox = Outbox::open(&path, "c").unwrap();
        assert_eq!(outbox.size().unwrap(), OutboxSize { rows: 2, bytes: 5 });
        outbox.append(&[observed(&stamp(), "a", "10", 1)]).unwrap();
        let rows = outbox.read_after(0, 10).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            outbox.size().unwrap(),
            OutboxSize {
                rows: 3,
                bytes: 5 + rows[2].payload.len() as i64
            }
        );
        assert_eq!(outbox.read_after(rows[0].id, 10).unwrap().len(), 2);
        outbox.delete_through(rows[2].id).unwrap();
        assert_eq!(outbox.size().unwrap(), OutboxSize::default());
    }

    #[test]
    fn an_outbox_with_the_per_row_delete_trigger_loses_it_and_counts_each_delete_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        {
            // What the builds before issue 44 left: the size kept by two triggers.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute_batch(SIZE_SCHEMA).unwrap();
            conn.execute_batch(
                "CREATE TRIGGER outbox_size_delete AFTER DELETE ON outbox BEGIN
                     UPDATE outbox_size SET rows = rows - 1, bytes = bytes - length(OLD.payload);
                 END;
                 INSERT INTO outbox (payload) VALUES (x'0102'), (x'030405'), (x'06');",
            )
            .unwrap();
        }
        let mut outbox = Outbox::open(&path, "c").unwrap();
        let triggers: i64 = outbox
            .conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name = 'outbox_size_delete'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(triggers, 0);
        let rows = outbox.read_after(0, 10).unwrap();
        outbox.delete_through(rows[1].id).unwrap();
        assert_eq!(outbox.size().unwrap(), OutboxSize { rows: 1, bytes: 1 });
        outbox.delete_through(rows[1].id).unwrap();
        assert_eq!(
            outbox.size().unwrap(),
            OutboxSize { rows: 1, bytes: 1 },
            "settling a range again deletes and counts nothing"
        );
    }

    #[test]
    fn a_quarantined_row_leaves_the_outbox_and_resend_puts_it_back_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        let mut outbox = Outbox::open(&path, "c").unwrap();
        let events: Vec<Observed> = ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, n)| observed(&stamp(), n, &format!("{}", 10 + i), i as i64 + 1))
            .collect();
        outbox.append(&events).unwrap();
        let rows = outbox.read_after(0, 10).unwrap();
        let refused = Quarantine {
            outbox_id: rows[1].id,
            reason: "message_size_too_large",
            error: "Message size too large".into(),
            stream: Some("ip".into()),
            object: Some("b".into()),
            resource_version: Some("11".into()),
            payload: rows[1].payload.clone(),
        };
        outbox.settle(rows[1].id, &[refused]).unwrap();
        assert_eq!(
            outbox.size().unwrap().rows,
            1,
            "c waits, a was acknowledged"
        );
        let listed = outbox.quarantined().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].object.as_deref(), Some("b"));
        assert_eq!(listed[0].bytes, rows[1].payload.len() as i64);
        assert!(matches!(
            outbox.resend(Some(&[listed[0].id + 100])),
            Err(OutboxError::UnknownQuarantineIds(ids)) if ids == [listed[0].id + 100]
        ));
        drop(outbox);
        // The operator's command, on the same file.
        let mut operator = Outbox::open_existing(&path).unwrap();
        assert_eq!(operator.resend(Some(&[listed[0].id])).unwrap(), 1);
        assert!(operator.quarantined().unwrap().is_empty());
        let again = operator.read_after(0, 10).unwrap();
        assert_eq!(again.len(), 2);
        assert_eq!(again[1].payload, rows[1].payload, "b goes after c");
        assert_eq!(operator.size().unwrap().rows, 2);
        assert_eq!(operator.resend(None).unwrap(), 0);
    }

    #[test]
    fn the_operators_commands_never_create_an_outbox() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        assert!(matches!(
            Outbox::open_existing(&path),
            Err(OutboxError::Missing(_))
        ));
        assert!(!path.exists());
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
