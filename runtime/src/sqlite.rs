//! How both programs open their SQLite files (the collector's outbox and remediation
//! ledger, the analyzer's store, group and delivery ledger): one policy for every
//! connection, so that no file is opened without it.
//!
//! - `busy_timeout` 10 s, set first: another connection to the same file (the producer
//!   beside the watcher, a `dead-letters` command beside the running analyzer) waits for
//!   a lock instead of failing at once.
//! - `journal_mode=WAL`: readers do not block the writer; the mode is stored in the file.
//! - `synchronous` by what the file holds ([`Durability`]): `NORMAL` for files whose last
//!   transactions a program rebuilds from its source after a power cut (the outbox from the
//!   relist diff, the analyzer's store from the topic's offsets); `FULL` for records of
//!   what was done outside (alerts delivered, cleanup commands executed), which nothing
//!   can rebuild. In WAL mode a killed process loses nothing committed either way.

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use rusqlite::Connection;
use rusqlite::ErrorCode;

/// How long a connection waits for another one's lock before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// SQLite failed on a file: which file, what was being done, and SQLite's error. The one
/// SQLite error of both programs (the collector's outbox and record of commands, the
/// analyzer's store, sink ledger and partition map): each module maps its statements'
/// errors with [`failed`].
#[derive(Debug, thiserror::Error)]
#[error("SQLite database {}: cannot {context}", path.display())]
pub struct SqliteError {
    /// The database file.
    pub path: PathBuf,
    /// What was being done: `open`, `enable WAL`, `write checkpoint`, `read transitions`...
    pub context: &'static str,
    /// SQLite's error.
    #[source]
    pub source: rusqlite::Error,
}

impl SqliteError {
    /// True when waiting and trying again may succeed (another process holds a lock);
    /// false for a missing directory, a file that is not a database, no permission, a
    /// full disk: those need the operator.
    pub fn is_retryable(&self) -> bool {
        is_retryable(&self.source)
    }

    /// Whether the file itself is unreadable (corrupt, or not a database), as opposed to
    /// the disk or permissions failing.
    pub fn is_unreadable_file(&self) -> bool {
        matches!(
            self.source.sqlite_error_code(),
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
        )
    }
}

/// Maps SQLite's errors on the file at `path` while doing `context` to [`SqliteError`]s
/// (or to any error made from one: a module's own error type).
pub fn failed<'a, E: From<SqliteError>>(
    path: &'a Path,
    context: &'static str,
) -> impl Fn(rusqlite::Error) -> E + 'a {
    move |source| {
        SqliteError {
            path: path.to_owned(),
            context,
            source,
        }
        .into()
    }
}

/// True for SQLite errors that waiting may cure: the file is busy or a table is locked
/// by another connection.
pub fn is_retryable(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// What a power cut may cost a file's last committed transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=NORMAL`: the program rebuilds what a power cut loses from its source.
    Recoverable,
    /// `synchronous=FULL`: every commit is on disk before it returns; for records of
    /// actions taken outside the process, which no source can give back.
    Full,
}

impl Durability {
    fn pragma(self) -> &'static str {
        match self {
            Durability::Recoverable => "NORMAL",
            Durability::Full => "FULL",
        }
    }
}

/// Opens (creating it if absent) the database at `path` with the policy above.
pub fn open(path: &Path, durability: Durability) -> Result<Connection, SqliteError> {
    let failed = |context| failed::<SqliteError>(path, context);
    let conn = Connection::open(path).map_err(failed("open"))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(failed("set busy timeout"))?;
    // `execute("PRAGMA journal_mode=WAL")` fails with ExecuteReturnedResults: the pragma
    // answers a row.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(failed("enable WAL"))?;
    conn.pragma_update(None, "synchronous", durability.pragma())
        .map_err(failed("set synchronous"))?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pragma(conn: &Connection, name: &str) -> String {
        conn.query_row(&format!("PRAGMA {name}"), [], |row| {
            row.get::<_, rusqlite::types::Value>(0)
        })
        .map(|v| match v {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(t) => t,
            other => format!("{other:?}"),
        })
        .unwrap()
    }

    #[test]
    fn a_new_file_is_created_in_wal_mode_with_normal_sync_and_a_busy_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let conn = open(&path, Durability::Recoverable).unwrap();
        assert!(path.exists());
        assert_eq!(pragma(&conn, "journal_mode"), "wal");
        // NORMAL is 1.
        assert_eq!(pragma(&conn, "synchronous"), "1");
        assert_eq!(pragma(&conn, "busy_timeout"), "10000");
    }

    #[test]
    fn a_record_of_actions_taken_outside_is_opened_with_full_sync() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("ledger.db"), Durability::Full).unwrap();
        assert_eq!(pragma(&conn, "journal_mode"), "wal");
        // FULL is 2.
        assert_eq!(pragma(&conn, "synchronous"), "2");
    }

    #[test]
    fn a_second_connection_sees_the_first_ones_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let writer = open(&path, Durability::Recoverable).unwrap();
        writer
            .execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (7);")
            .unwrap();
        let reader = open(&path, Durability::Recoverable).unwrap();
        let x: i64 = reader
            .query_row("SELECT x FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(x, 7);
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_path_and_not_retryable() {
        let error = open(
            Path::new("/nonexistent/dir/state.db"),
            Durability::Recoverable,
        )
        .unwrap_err();
        assert_eq!(error.context, "open");
        assert!(
            error.to_string().contains("/nonexistent/dir/state.db"),
            "{error}"
        );
        assert!(!error.is_retryable());
    }

    #[test]
    fn a_file_that_is_not_a_database_is_refused_and_not_retryable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        std::fs::write(&path, vec![b'x'; 4096]).unwrap();
        let error = open(&path, Durability::Recoverable).unwrap_err();
        assert!(!error.is_retryable(), "{error:?}");
    }

    #[test]
    fn a_lock_held_elsewhere_is_retryable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let holder = open(&path, Durability::Recoverable).unwrap();
        holder
            .execute_batch("CREATE TABLE t (x INTEGER); BEGIN EXCLUSIVE;")
            .unwrap();
        let other = Connection::open(&path).unwrap();
        other.busy_timeout(Duration::ZERO).unwrap();
        let error = other.execute("INSERT INTO t VALUES (1)", []).unwrap_err();
        assert!(is_retryable(&error), "{error:?}");
    }
}
