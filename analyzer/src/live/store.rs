//! The live analyzer's SQLite store: checkpoints (every cluster's analysis with the offsets
//! it corresponds to, in one transaction), the alert transitions to deliver (each at most
//! once, by its transition id; each sink's progress through them is in
//! [`crate::live::sinks::ledger`]), and dead letters.
//!
//! After a crash the analyzer restarts from the last checkpoint and consumes again from
//! its offsets; the analysis is deterministic, so it makes the same transitions again,
//! and the unique transition id keeps each in the outbox once.
//!
//! Nothing in the store may stop the analyzer from starting: a file SQLite cannot read
//! (corrupt, not a database, or written by a newer release in a format this one does not
//! know) is moved aside and a fresh store started ([`Store::open_or_set_aside`]); a
//! checkpoint the analysis cannot read is moved to the `checkpoint_set_aside` table
//! ([`Store::set_aside_checkpoint`]). Either way the analysis is rebuilt from the topic.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipaudit_schemas::{Alert, Remediation};

use crate::analysis::alerts::transition_id;
use crate::live::db::{self, DbError};
use crate::live::incidents;
use crate::live::rebuild_points::{PointKind, PointRow, RebuildPoints};
use ipaudit_runtime::sqlite::SqliteError;
use rusqlite::{params, Connection};

/// Why the store failed (not retryable: the disk or file is broken).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed (the file, what was being done, SQLite's error).
    #[error(transparent)]
    Sqlite(#[from] SqliteError),
    /// The file opens but cannot be used: it fails its integrity check, or a newer
    /// analyzer wrote it.
    #[error("analyzer store {}: {why}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: &'static str,
    },
    /// An unreadable store could not be moved aside.
    #[error("analyzer store {}: cannot move the unreadable store aside", path.display())]
    SetAside {
        /// The file.
        path: PathBuf,
        /// The file system's error.
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// Whether the file itself is unreadable (corrupt, not a database, or of a newer
    /// format), as opposed to the disk or permissions failing: such a file is moved aside.
    pub fn is_unreadable_file(&self) -> bool {
        match self {
            StoreError::Sqlite(error) => error.is_unreadable_file(),
            StoreError::Unreadable { .. } => true,
            StoreError::SetAside { .. } => false,
        }
    }
}

/// One connection to the store.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Opens (or creates) the store, checking that SQLite can read the whole file and that
    /// its format is one this build knows.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        // WAL, synchronous=NORMAL, busy timeout (the runtime's policy), every table of
        // analyzer.db, its format checked.
        let conn = db::open(path, ipaudit_runtime::sqlite::Durability::Recoverable).map_err(
            |e| match e {
                DbError::Sqlite(e) => StoreError::Sqlite(e),
                DbError::NewerFormat { .. } => {
                    unreadable(path, "written by a newer analyzer (store format)")
                }
            },
        )?;
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(sqlite_error(path, "check integrity"))?;
        if check != "ok" {
            return Err(unreadable(path, "integrity check failed"));
        }
        Ok(Store {
            conn,
            path: path.to_owned(),
        })
    }

    /// Opens the store; a file that cannot be read ([`StoreError::is_unreadable_file`]) is
    /// renamed to `<file>.unreadable-<unix seconds>` (with its WAL files), and a fresh
    /// store is created in its place. Returns where the old file went and why (for the
    /// caller to say and count).
    pub fn open_or_set_aside(
        path: &Path,
    ) -> Result<(Self, Option<(PathBuf, StoreError)>), StoreError> {
        let error = match Store::open(path) {
            Ok(store) => return Ok((store, None)),
            Err(error) if error.is_unreadable_file() => error,
            Err(error) => return Err(error),
        };
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let aside = PathBuf::from(format!("{}.unreadable-{seconds}", path.display()));
        for suffix in ["", "-wal", "-shm"] {
            let from = PathBuf::from(format!("{}{suffix}", path.display()));
            let to = PathBuf::from(format!("{}{suffix}", aside.display()));
            if from.exists() {
                std::fs::rename(&from, &to).map_err(|source| StoreError::SetAside {
                    path: path.to_owned(),
                    source,
                })?;
            }
        }
        Ok((Store::open(path)?, Some((aside, error))))
    }

    fn err(&self, context: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        sqlite_error(&self.path, context)
    }

    /// The last checkpoint: each cluster's analysis, and the next offset per partition.
    #[allow(clippy::type_complexity)]
    pub fn load_checkpoint(
        &self,
        topic: &str,
    ) -> Result<(Vec<(String, Vec<u8>)>, HashMap<i32, i64>), StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT cluster_id, state FROM checkpoint")
            .map_err(self.err("read checkpoint"))?;
        let states = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(self.err("read checkpoint"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.err("read checkpoint"))?;
        let mut stmt = self
            .conn
            .prepare("SELECT partition, next_offset FROM offsets WHERE topic = ?1")
            .map_err(self.err("read offsets"))?;
        let offsets = stmt
            .query_map([topic], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(self.err("read offsets"))?
            .collect::<Result<HashMap<_, _>, _>>()
            .map_err(self.err("read offsets"))?;
        Ok((states, offsets))
    }

    /// The rebuild points saved with the last checkpoint (see
    /// [`crate::live::rebuild_points`]); a row of a kind this build does not know is skipped.
    pub fn load_rebuild_points(&self, topic: &str) -> Result<RebuildPoints, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT kind, key, partition, offset, version FROM rebuild_points WHERE topic = ?1",
            )
            .map_err(self.err("read rebuild points"))?;
        let rows: Vec<(String, String, i32, i64, Option<i64>)> = stmt
            .query_map([topic], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .map_err(self.err("read rebuild points"))?
            .collect::<Result<_, _>>()
            .map_err(self.err("read rebuild points"))?;
        let rows = rows
            .into_iter()
            .filter_map(|(kind, key, partition, offset, version)| {
                Some(PointRow {
                    kind: PointKind::parse(&kind)?,
                    key,
                    partition,
                    offset,
                    version,
                })
            });
        Ok(RebuildPoints::from_rows(rows))
    }

    /// Saves every cluster's analysis with the offsets it corresponds to and the
    /// partitions' rebuild points, atomically.
    pub fn checkpoint<'a>(
        &mut self,
        topic: &str,
        states: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        offsets: &HashMap<i32, i64>,
        points: &RebuildPoints,
    ) -> Result<(), StoreError> {
        let err = |context| sqlite_error(&self.path, context);
        let tx = self.conn.transaction().map_err(err("begin checkpoint"))?;
        tx.execute("DELETE FROM rebuild_points WHERE topic = ?1", [topic])
            .map_err(err("write rebuild points"))?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO rebuild_points (topic, kind, key, partition, offset, version)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(err("write rebuild points"))?;
            for row in points.rows() {
                insert
                    .execute(params![
                        topic,
                        row.kind.as_str(),
                        row.key,
                        row.partition,
                        row.offset,
                        row.version
                    ])
                    .map_err(err("write rebuild points"))?;
            }
        }
        for (cluster, state) in states {
            tx.execute(
                "INSERT INTO checkpoint (cluster_id, state) VALUES (?1, ?2)
                 ON CONFLICT (cluster_id) DO UPDATE SET state = excluded.state",
                params![cluster, state],
            )
            .map_err(err("write checkpoint"))?;
        }
        for (partition, next) in offsets {
            tx.execute(
                "INSERT INTO offsets (topic, partition, next_offset) VALUES (?1, ?2, ?3)
                 ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset",
                params![topic, partition, next],
            )
            .map_err(err("write offsets"))?;
        }
        tx.commit().map_err(err("commit checkpoint"))
    }

    /// Moves every cluster's checkpoint to `checkpoint_set_aside` (kept for a person to
    /// look at), with `reason`, and forgets the offsets that went with them, in one
    /// transaction: the next start rebuilds the analysis instead of failing on it again.
    pub fn set_aside_checkpoint(&mut self, reason: &str) -> Result<usize, StoreError> {
        let err = |context| sqlite_error(&self.path, context);
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let tx = self.conn.transaction().map_err(err("begin set aside"))?;
        let moved = tx
            .execute(
                "INSERT INTO checkpoint_set_aside (cluster_id, state, reason, set_aside_at)
                 SELECT cluster_id, state, ?1, ?2 FROM checkpoint",
                params![reason, seconds],
            )
            .map_err(err("set the checkpoint aside"))?;
        tx.execute_batch(
            "DELETE FROM checkpoint; DELETE FROM offsets; DELETE FROM rebuild_points;",
        )
        .map_err(err("set the checkpoint aside"))?;
        tx.commit().map_err(err("commit set aside"))?;
        Ok(moved)
    }

    /// Adds transitions to deliver, and records each in its incident; one already there
    /// (a replay after a crash) is ignored. Returns how many were new.
    pub fn add_transitions(&mut self, alerts: &[Alert]) -> Result<usize, StoreError> {
        let err = |context| sqlite_error(&self.path, context);
        let now_ms = ipaudit_runtime::clock::now_ms();
        let tx = self.conn.transaction().map_err(err("begin"))?;
        let mut added = 0;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO transitions (transition_id, alert) VALUES (?1, ?2)",
                )
                .map_err(err("add transition"))?;
            for alert in alerts {
                let json = serde_json::to_vec(alert).unwrap_or_default();
                let new = insert
                    .execute(params![transition_id(alert), &json])
                    .map_err(err("add transition"))?;
                if new > 0 {
                    incidents::record_transition(&tx, alert, &json, now_ms)
                        .map_err(err("record incident"))?;
                }
                added += new;
            }
        }
        tx.commit().map_err(err("commit transitions"))?;
        Ok(added)
    }

    /// The stored transitions that at least one of `sinks` (by their ledger names) has
    /// not yet delivered, oldest first: what a partition's handover carries to its next
    /// owner ([`crate::live::handover`]). A sink without a cursor yet starts at the end
    /// and owes nothing; a transition whose stored form does not read is left out.
    pub fn undelivered(&self, sinks: &[String]) -> Result<Vec<Alert>, StoreError> {
        let mut cursors = Vec::with_capacity(sinks.len());
        for sink in sinks {
            let cursor = crate::live::sinks::ledger::sink_cursor(&self.conn, sink)
                .map_err(self.err("read sink cursors"))?;
            cursors.extend(cursor);
        }
        let Some(least) = cursors.into_iter().min() else {
            return Ok(Vec::new());
        };
        let mut stmt = self
            .conn
            .prepare_cached("SELECT alert FROM transitions WHERE seq > ?1 ORDER BY seq")
            .map_err(self.err("read transitions"))?;
        let rows = stmt
            .query_map([least], |r| r.get::<_, Vec<u8>>(0))
            .map_err(self.err("read transitions"))?;
        let mut alerts = Vec::new();
        for row in rows {
            let json = row.map_err(self.err("read transitions"))?;
            if let Ok(alert) = serde_json::from_slice::<Alert>(&json) {
                alerts.push(alert);
            }
        }
        Ok(alerts)
    }

    /// Records what a collector did with an incident's cleanup command.
    pub fn record_cleanup(&self, remediation: &Remediation) -> Result<(), StoreError> {
        incidents::record_cleanup(&self.conn, remediation, ipaudit_runtime::clock::now_ms())
            .map_err(self.err("record cleanup outcome"))
    }

    /// Forgets incidents resolved longer than `retention` ago; returns how many.
    pub fn forget_resolved_incidents(&self, retention: Duration) -> Result<usize, StoreError> {
        let cutoff = ipaudit_runtime::clock::now_ms()
            .saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        incidents::forget_resolved_before(&self.conn, cutoff)
            .map_err(self.err("forget resolved incidents"))
    }

    /// Keeps a message that could not be decoded.
    pub fn dead_letter(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        error: &str,
        payload: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO dead_letters (topic, partition, offset, error, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![topic, partition, offset, error, payload],
            )
            .map(drop)
            .map_err(self.err("write dead letter"))
    }
}

/// The error of a store file that opens but cannot be used.
fn unreadable(path: &Path, why: &'static str) -> StoreError {
    StoreError::Unreadable {
        path: path.to_owned(),
        why,
    }
}

/// Maps a SQLite error to this module's error, naming the file and what was being done
/// (the runtime's [`ipaudit_runtime::sqlite::failed`], typed for `?` in this module).
fn sqlite_error<'a>(
    path: &'a Path,
    context: &'static str,
) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    ipaudit_runtime::sqlite::failed(path, context)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::AlertStatus;

    fn alert(id: &str, status: AlertStatus, rv: &str) -> Alert {
        crate::analysis::alerts::sample_alert(id, "ip-stuck-terminating", status, rv)
    }

    #[test]
    fn a_corrupt_store_file_is_moved_aside_and_a_fresh_store_started() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("analyzer.db");
        std::fs::write(&path, b"this was a database once".repeat(400)).unwrap();
        assert!(Store::open(&path).is_err_and(|e| e.is_unreadable_file()));
        let (mut store, aside) = Store::open_or_set_aside(&path).unwrap();
        let (aside, _) = aside.expect("moved aside");
        assert!(
            aside.exists(),
            "the old file is kept for a person to look at"
        );
        assert!(aside
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("analyzer.db.unreadable-"));
        let (states, offsets) = store.load_checkpoint("t").unwrap();
        assert!(states.is_empty() && offsets.is_empty());
        store
            .checkpoint(
                "t",
                [("c", &b"{}"[..])],
                &HashMap::from([(0, 1)]),
                &Default::default(),
            )
            .unwrap();
        let (again, aside) = Store::open_or_set_aside(&path).unwrap();
        assert!(aside.is_none(), "the fresh store opens as it is");
        assert_eq!(again.load_checkpoint("t").unwrap().0.len(), 1);
    }

    #[test]
    fn rebuild_points_are_saved_with_the_checkpoint_replaced_by_the_next_and_set_aside_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("analyzer.db")).unwrap();
        let mut points = RebuildPoints::default();
        points.transition(&alert("a", AlertStatus::Firing, "7"), (3, 40));
        let offsets = HashMap::from([(3, 41)]);
        store.checkpoint("t", [], &offsets, &points).unwrap();
        assert_eq!(store.load_rebuild_points("t").unwrap(), points);
        assert_eq!(
            store.load_rebuild_points("other").unwrap(),
            RebuildPoints::default()
        );
        points.transition(&alert("a", AlertStatus::Resolved, "7"), (3, 50));
        store.checkpoint("t", [], &offsets, &points).unwrap();
        assert_eq!(
            store.load_rebuild_points("t").unwrap().of_partition(3),
            None
        );
        points.transition(&alert("b", AlertStatus::Firing, "8"), (3, 60));
        store.checkpoint("t", [], &offsets, &points).unwrap();
        store.set_aside_checkpoint("test").unwrap();
        assert_eq!(
            store.load_rebuild_points("t").unwrap(),
            RebuildPoints::default(),
            "points without their analyses are worthless"
        );
    }

    #[test]
    fn a_store_of_a_newer_format_is_moved_aside_and_one_of_the_format_before_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("analyzer.db");
        {
            let conn = Connection::open(&path).unwrap();
            db::ensure_tables(&conn).unwrap();
            conn.execute(
                "INSERT INTO offsets (topic, partition, next_offset) VALUES ('t', 0, 7)",
                [],
            )
            .unwrap();
        }
        // Format 0 (before formats existed): same tables, kept.
        let (store, aside) = Store::open_or_set_aside(&path).unwrap();
        assert!(aside.is_none());
        assert_eq!(
            store.load_checkpoint("t").unwrap().1,
            HashMap::from([(0, 7)])
        );
        store
            .conn
            .pragma_update(None, "user_version", db::FORMAT + 1)
            .unwrap();
        drop(store);
        let (store, aside) = Store::open_or_set_aside(&path).unwrap();
        assert!(aside.is_some(), "a newer release's store is not read");
        assert!(store.load_checkpoint("t").unwrap().1.is_empty());
    }

    #[test]
    fn a_store_that_cannot_be_opened_for_another_reason_is_an_error_not_moved() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir").join("analyzer.db");
        let error = Store::open_or_set_aside(&path)
            .err()
            .expect("no such directory");
        assert!(!error.is_unreadable_file());
    }

    #[test]
    fn a_transition_made_again_after_a_restart_is_stored_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("a.db")).unwrap();
        let firing = alert("a", AlertStatus::Firing, "10");
        assert_eq!(
            store
                .add_transitions(std::slice::from_ref(&firing))
                .unwrap(),
            1
        );
        assert_eq!(store.add_transitions(&[firing]).unwrap(), 0);
        let ledger = crate::live::sinks::ledger::Ledger::open(&dir.path().join("a.db")).unwrap();
        assert_eq!(ledger.undelivered("log", 10).unwrap().len(), 1);
    }
}
