//! Each sink's delivery state in the analyzer's store file, beside the transitions the
//! analysis writes there: its cursor (the last transition it is done with), the
//! transitions it refused for good (dead letters, kept with the reason), and those an
//! operator re-drives (`analyzer dead-letters replay`).
//!
//! A sink seen for the first time starts at the current end of the transitions, unless
//! asked to start from the beginning: adding or renaming a sink must not re-send the whole
//! history to it.

use std::path::{Path, PathBuf};

use ipaudit_schemas::{Alert, AlertStatus};
use rusqlite::{params, Connection, OptionalExtension};

/// Why the ledger failed (not retryable: the disk or file is broken).
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The store file cannot be opened ([`crate::live::db`]).
    #[error(transparent)]
    Open(#[from] crate::live::db::DbError),
    /// SQLite failed (the file, what was being done, SQLite's error).
    #[error(transparent)]
    Sqlite(#[from] ipaudit_runtime::sqlite::SqliteError),
}

/// A stored transition waiting for one sink.
#[derive(Debug)]
pub struct Pending {
    /// Its place in the store.
    pub seq: i64,
    /// The transition, or why its stored form cannot be read (it is dead-lettered).
    pub alert: Result<Alert, String>,
}

/// One transition a sink refused for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkDeadLetter {
    /// The sink's name.
    pub sink: String,
    /// Its place in the store.
    pub seq: i64,
    /// The transition id (the Idempotency-Key).
    pub transition_id: String,
    /// Why the sink refused it.
    pub error: String,
    /// When, Unix milliseconds.
    pub at_ms: i64,
}

/// One connection to the store file, for sink delivery state.
pub struct Ledger {
    conn: Connection,
    path: PathBuf,
}

impl Ledger {
    /// Opens the store file ([`crate::live::db`]).
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        let conn = crate::live::db::open(path, ipaudit_runtime::sqlite::Durability::Full)?;
        Ok(Ledger {
            conn,
            path: path.to_owned(),
        })
    }

    fn err(&self, context: &'static str) -> impl Fn(rusqlite::Error) -> LedgerError + '_ {
        ledger_error(&self.path, context)
    }

    /// Notes in the incident of `alert_id` that `sink` took its `status` transition.
    pub fn record_delivery(
        &self,
        alert_id: &str,
        status: AlertStatus,
        sink: &str,
    ) -> Result<(), LedgerError> {
        crate::live::incidents::record_delivery(
            &self.conn,
            alert_id,
            status,
            sink,
            ipaudit_runtime::clock::now_ms(),
        )
        .map_err(self.err("record delivery"))
    }

    /// Registers `sink`. A sink with a cursor keeps it; one known by a former name (a
    /// build that keyed sinks by their full URL) takes that cursor over; a new one starts
    /// after the latest stored transition, or before the first with `from_beginning`.
    /// Returns where it starts.
    pub fn start(
        &self,
        sink: &str,
        former_names: &[String],
        from_beginning: bool,
    ) -> Result<i64, LedgerError> {
        if let Some(cursor) = self.cursor(sink)? {
            return Ok(cursor);
        }
        for former in former_names.iter().filter(|f| *f != sink) {
            let moved = self
                .conn
                .execute(
                    "UPDATE sink_cursor SET sink = ?1 WHERE sink = ?2",
                    params![sink, former],
                )
                .map_err(self.err("rename sink cursor"))?;
            if moved > 0 {
                return Ok(self.cursor(sink)?.unwrap_or(0));
            }
        }
        let start = if from_beginning {
            0
        } else {
            self.conn
                .query_row("SELECT COALESCE(MAX(seq), 0) FROM transitions", [], |r| {
                    r.get(0)
                })
                .map_err(self.err("read the latest transition"))?
        };
        self.conn
            .execute(
                "INSERT OR IGNORE INTO sink_cursor (sink, delivered_seq) VALUES (?1, ?2)",
                params![sink, start],
            )
            .map_err(self.err("create sink cursor"))?;
        Ok(start)
    }

    fn cursor(&self, sink: &str) -> Result<Option<i64>, LedgerError> {
        sink_cursor(&self.conn, sink).map_err(self.err("read sink cursor"))
    }

    /// Transitions after the sink's cursor, oldest first.
    pub fn undelivered(&self, sink: &str, limit: usize) -> Result<Vec<Pending>, LedgerError> {
        let cursor = self.cursor(sink)?.unwrap_or(0);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, alert FROM transitions WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            )
            .map_err(self.err("read transitions"))?;
        let rows = stmt
            .query_map(
                params![cursor, i64::try_from(limit).unwrap_or(i64::MAX)],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)),
            )
            .map_err(self.err("read transitions"))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, json) = row.map_err(self.err("read transitions"))?;
            out.push(Pending {
                seq,
                alert: serde_json::from_slice(&json).map_err(|e| e.to_string()),
            });
        }
        Ok(out)
    }

    /// Dead letters an operator asked to re-drive to `sink`, oldest first.
    pub fn redriven(&self, sink: &str) -> Result<Vec<Pending>, LedgerError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT r.seq, t.alert FROM sink_redrive r JOIN transitions t ON t.seq = r.seq
                 WHERE r.sink = ?1 ORDER BY r.seq",
            )
            .map_err(self.err("read re-driven transitions"))?;
        let rows = stmt
            .query_map([sink], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(self.err("read re-driven transitions"))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, json) = row.map_err(self.err("read re-driven transitions"))?;
            out.push(Pending {
                seq,
                alert: serde_json::from_slice(&json).map_err(|e| e.to_string()),
            });
        }
        Ok(out)
    }

    /// Marks a re-driven transition as handled (delivered, or dead-lettered again).
    pub fn redrive_done(&self, sink: &str, seq: i64) -> Result<(), LedgerError> {
        self.conn
            .execute(
                "DELETE FROM sink_redrive WHERE sink = ?1 AND seq = ?2",
                params![sink, seq],
            )
            .map(drop)
            .map_err(self.err("finish a re-drive"))
    }

    /// Moves the sink's cursor to `seq` (never backwards).
    pub fn delivered(&self, sink: &str, seq: i64) -> Result<(), LedgerError> {
        self.conn
            .execute(
                "INSERT INTO sink_cursor (sink, delivered_seq) VALUES (?1, ?2)
                 ON CONFLICT (sink) DO UPDATE SET delivered_seq = MAX(delivered_seq, excluded.delivered_seq)",
                params![sink, seq],
            )
            .map(drop)
            .map_err(self.err("advance sink cursor"))
    }

    /// Sets a refused transition aside with the reason.
    pub fn dead_letter(
        &self,
        sink: &str,
        seq: i64,
        transition_id: &str,
        error: &str,
    ) -> Result<(), LedgerError> {
        self.conn
            .execute(
                "INSERT INTO sink_dead_letters (sink, seq, transition_id, error, at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (sink, seq) DO UPDATE SET error = excluded.error, at_ms = excluded.at_ms",
                params![sink, seq, transition_id, error, ipaudit_runtime::clock::now_ms()],
            )
            .map(drop)
            .map_err(self.err("write a sink dead letter"))
    }

    /// Every transition a sink refused, oldest first; only `sink`'s when given.
    pub fn dead_letters(&self, sink: Option<&str>) -> Result<Vec<SinkDeadLetter>, LedgerError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT sink, seq, transition_id, error, at_ms FROM sink_dead_letters
                 WHERE ?1 IS NULL OR sink = ?1 ORDER BY seq, sink",
            )
            .map_err(self.err("read sink dead letters"))?;
        let rows = stmt
            .query_map([sink], |r| {
                Ok(SinkDeadLetter {
                    sink: r.get(0)?,
                    seq: r.get(1)?,
                    transition_id: r.get(2)?,
                    error: r.get(3)?,
                    at_ms: r.get(4)?,
                })
            })
            .map_err(self.err("read sink dead letters"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.err("read sink dead letters"))
    }

    /// Queues dead letters for delivery again (by a running or the next `analyzer run`)
    /// and removes them from the dead letters. Returns how many.
    pub fn redrive(&mut self, sink: Option<&str>) -> Result<usize, LedgerError> {
        let err = |context| ledger_error(&self.path, context);
        let tx = self.conn.transaction().map_err(err("begin a re-drive"))?;
        let queued = tx
            .execute(
                "INSERT OR IGNORE INTO sink_redrive (sink, seq)
                 SELECT sink, seq FROM sink_dead_letters WHERE ?1 IS NULL OR sink = ?1",
                [sink],
            )
            .map_err(err("queue a re-drive"))?;
        tx.execute(
            "DELETE FROM sink_dead_letters WHERE ?1 IS NULL OR sink = ?1",
            [sink],
        )
        .map_err(err("queue a re-drive"))?;
        tx.commit().map_err(err("commit a re-drive"))?;
        Ok(queued)
    }

    /// Transitions after the sink's cursor: its backlog.
    pub fn backlog(&self, sink: &str) -> Result<i64, LedgerError> {
        let cursor = self.cursor(sink)?.unwrap_or(0);
        self.conn
            .query_row(
                "SELECT COUNT(*) FROM transitions WHERE seq > ?1",
                [cursor],
                |r| r.get(0),
            )
            .map_err(self.err("count the backlog"))
    }

    /// Alerts whose latest transition is FIRING and that `sink` is done with: what
    /// Alertmanager must hear again before its resolve timeout.
    pub fn firing_delivered(&self, sink: &str) -> Result<Vec<Alert>, LedgerError> {
        let cursor = self.cursor(sink)?.unwrap_or(0);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT alert FROM transitions WHERE seq <= ?1
                 AND seq NOT IN (SELECT seq FROM sink_dead_letters WHERE sink = ?2) ORDER BY seq",
            )
            .map_err(self.err("read transitions"))?;
        let rows = stmt
            .query_map(params![cursor, sink], |r| r.get::<_, Vec<u8>>(0))
            .map_err(self.err("read transitions"))?;
        let mut latest: std::collections::HashMap<String, Alert> = Default::default();
        for row in rows {
            let json = row.map_err(self.err("read transitions"))?;
            if let Ok(alert) = serde_json::from_slice::<Alert>(&json) {
                latest.insert(alert.alert_id.clone(), alert);
            }
        }
        let mut firing: Vec<Alert> = latest
            .into_values()
            .filter(|a| a.status == AlertStatus::Firing)
            .collect();
        firing.sort_by(|a, b| a.alert_id.cmp(&b.alert_id));
        Ok(firing)
    }
}

/// Maps a SQLite error to this module's error, naming the file and what was being done
/// (the runtime's [`ipaudit_runtime::sqlite::failed`], typed for `?` in this module).
/// The last transition `sink` is done with, if it has started (also read by the store,
/// for the transitions a handover carries).
pub(crate) fn sink_cursor(conn: &Connection, sink: &str) -> rusqlite::Result<Option<i64>> {
    conn.query_row(
        "SELECT delivered_seq FROM sink_cursor WHERE sink = ?1",
        [sink],
        |r| r.get(0),
    )
    .optional()
}

fn ledger_error<'a>(
    path: &'a Path,
    context: &'static str,
) -> impl Fn(rusqlite::Error) -> LedgerError + 'a {
    ipaudit_runtime::sqlite::failed(path, context)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::store::Store;

    fn alert(id: &str, status: AlertStatus, rv: &str) -> Alert {
        crate::analysis::alerts::sample_alert(id, "ip-stuck-terminating", status, rv)
    }

    fn store_with_two() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        let mut store = Store::open(&path).unwrap();
        store
            .add_transitions(&[
                alert("a", AlertStatus::Firing, "10"),
                alert("b", AlertStatus::Firing, "11"),
            ])
            .unwrap();
        (dir, path)
    }

    #[test]
    fn a_new_sink_starts_after_the_stored_history_unless_asked_for_the_beginning() {
        let (_dir, path) = store_with_two();
        let ledger = Ledger::open(&path).unwrap();
        assert_eq!(ledger.start("webhook:new", &[], false).unwrap(), 2);
        assert!(ledger.undelivered("webhook:new", 10).unwrap().is_empty());
        assert_eq!(ledger.start("webhook:old", &[], true).unwrap(), 0);
        assert_eq!(ledger.undelivered("webhook:old", 10).unwrap().len(), 2);
        assert_eq!(ledger.backlog("webhook:old").unwrap(), 2);
        // Started once, a sink keeps its cursor across restarts.
        ledger.delivered("webhook:old", 1).unwrap();
        assert_eq!(ledger.start("webhook:old", &[], true).unwrap(), 1);
    }

    #[test]
    fn a_sink_known_by_its_former_name_keeps_its_cursor() {
        let (_dir, path) = store_with_two();
        let ledger = Ledger::open(&path).unwrap();
        ledger.delivered("webhook:http://h/secret", 1).unwrap();
        let start = ledger
            .start(
                "webhook:http://h/…#ab",
                &["webhook:http://h/secret".into()],
                false,
            )
            .unwrap();
        assert_eq!(start, 1);
        assert_eq!(
            ledger
                .undelivered("webhook:http://h/…#ab", 10)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn dead_letters_are_listed_and_re_driven_once() {
        let (_dir, path) = store_with_two();
        let mut ledger = Ledger::open(&path).unwrap();
        ledger.start("w", &[], true).unwrap();
        ledger.dead_letter("w", 1, "a/FIRING/10", "413").unwrap();
        ledger.delivered("w", 2).unwrap();
        let listed = ledger.dead_letters(None).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].transition_id, "a/FIRING/10");
        assert!(ledger
            .firing_delivered("w")
            .unwrap()
            .iter()
            .all(|a| a.alert_id != "a"));
        assert_eq!(ledger.redrive(Some("w")).unwrap(), 1);
        assert!(ledger.dead_letters(None).unwrap().is_empty());
        let again = ledger.redriven("w").unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].alert.as_ref().unwrap().alert_id, "a");
        ledger.redrive_done("w", 1).unwrap();
        assert!(ledger.redriven("w").unwrap().is_empty());
    }
}
