//! `analyzer.db`, the live analyzer's one SQLite file, and its schema: every table any
//! module keeps there is created here, in one place, with the file's format (SQLite's
//! `user_version`) and, when a release changes a table, the migration of older formats.
//! Each module opens its own connection with [`open`] (the runtime's policy for SQLite
//! files, this schema ensured) and reads and writes only its own tables:
//!
//! - the store ([`crate::live::store`]): `checkpoint`, `offsets`, `transitions`,
//!   `rebuild_points`, `checkpoint_set_aside`, `dead_letters`;
//! - the sinks' ledger ([`crate::live::sinks::ledger`]): `sink_cursor`, `sink_dead_letters`,
//!   `sink_redrive`, reading `transitions`;
//! - the incidents ([`crate::live::incidents`]): `incidents`, `incident_log`;
//! - the group's partition map ([`crate::live::group`]): `cluster_partitions`.

use std::path::{Path, PathBuf};

use ipaudit_runtime::sqlite::{failed, Connection, Durability, SqliteError};

/// The file's format, kept in SQLite's `user_version`. 0 is a file from before formats
/// existed, with the same tables. A release that changes a table bumps this and migrates
/// the older formats in [`open`]. Tables added without changing any (the incidents', the
/// partition map) kept format 1: a release before them ignores them.
pub const FORMAT: i32 = 1;

/// Every table, created when missing.
const TABLES: &str = "
CREATE TABLE IF NOT EXISTS checkpoint (
    cluster_id TEXT PRIMARY KEY,
    state      BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS offsets (
    topic       TEXT NOT NULL,
    partition   INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS transitions (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    transition_id TEXT NOT NULL UNIQUE,
    alert         BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS rebuild_points (
    topic     TEXT NOT NULL,
    kind      TEXT NOT NULL,
    key       TEXT NOT NULL,
    partition INTEGER NOT NULL,
    offset    INTEGER NOT NULL,
    version   INTEGER,
    PRIMARY KEY (topic, kind, key)
);
CREATE TABLE IF NOT EXISTS checkpoint_set_aside (
    cluster_id    TEXT NOT NULL,
    state         BLOB NOT NULL,
    reason        TEXT NOT NULL,
    set_aside_at  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS dead_letters (
    topic     TEXT NOT NULL,
    partition INTEGER NOT NULL,
    offset    INTEGER NOT NULL,
    error     TEXT NOT NULL,
    payload   BLOB,
    PRIMARY KEY (topic, partition, offset)
);
CREATE TABLE IF NOT EXISTS sink_cursor (
    sink           TEXT PRIMARY KEY,
    delivered_seq  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sink_dead_letters (
    sink          TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    transition_id TEXT NOT NULL,
    error         TEXT NOT NULL,
    at_ms         INTEGER NOT NULL,
    PRIMARY KEY (sink, seq)
);
CREATE TABLE IF NOT EXISTS sink_redrive (
    sink TEXT NOT NULL,
    seq  INTEGER NOT NULL,
    PRIMARY KEY (sink, seq)
);
CREATE TABLE IF NOT EXISTS incidents (
    alert_id       TEXT PRIMARY KEY,
    cluster_id     TEXT NOT NULL,
    rule           TEXT NOT NULL,
    severity       TEXT NOT NULL,
    state          TEXT NOT NULL,
    subject_kind   TEXT NOT NULL,
    subject_name   TEXT NOT NULL,
    namespace      TEXT,
    pool           TEXT,
    address        TEXT,
    summary        TEXT NOT NULL,
    fired_at_ms    INTEGER NOT NULL,
    resolved_at_ms INTEGER,
    changed_at_ms  INTEGER NOT NULL,
    fired          BLOB NOT NULL,
    resolved       BLOB
);
CREATE INDEX IF NOT EXISTS incidents_by_state ON incidents (state, changed_at_ms);
CREATE TABLE IF NOT EXISTS incident_log (
    alert_id TEXT NOT NULL,
    at_ms    INTEGER NOT NULL,
    what     TEXT NOT NULL,
    detail   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS incident_log_by_alert ON incident_log (alert_id, at_ms);
CREATE TABLE IF NOT EXISTS cluster_partitions (
    topic      TEXT NOT NULL,
    cluster_id TEXT NOT NULL,
    partition  INTEGER NOT NULL,
    PRIMARY KEY (topic, cluster_id)
);
";

/// Creates the tables missing in `conn` (what [`open`] does besides the format; for
/// connections of tests, in memory).
pub(crate) fn ensure_tables(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(TABLES)
}

/// Why `analyzer.db` could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// SQLite could not open the file, set it up (the runtime's policy), read its format
    /// or create its tables.
    #[error(transparent)]
    Sqlite(#[from] SqliteError),
    /// The file is of a format this build does not know (a newer analyzer wrote it).
    #[error("{}: written by a newer analyzer (store format {found}, this one knows {FORMAT})", path.display())]
    NewerFormat {
        /// The file.
        path: PathBuf,
        /// Its format.
        found: i32,
    },
}

/// Opens `analyzer.db` at `path` with `durability`, creating the tables that are missing
/// and writing the format; a file of a newer format is refused, untouched.
pub fn open(path: &Path, durability: Durability) -> Result<Connection, DbError> {
    let conn = ipaudit_runtime::sqlite::open(path, durability)?;
    let schema = |context| failed::<DbError>(path, context);
    let found: i32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(schema("read the format"))?;
    if found > FORMAT {
        return Err(DbError::NewerFormat {
            path: path.to_owned(),
            found,
        });
    }
    ensure_tables(&conn).map_err(schema("create the tables"))?;
    // Format 0 has the same tables: only the number changes.
    if found != FORMAT {
        conn.pragma_update(None, "user_version", FORMAT)
            .map_err(schema("write the format"))?;
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_finds_its_tables_in_a_new_file_and_the_format_written() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("analyzer.db"), Durability::Recoverable).unwrap();
        for table in [
            "checkpoint",
            "offsets",
            "transitions",
            "rebuild_points",
            "checkpoint_set_aside",
            "dead_letters",
            "sink_cursor",
            "sink_dead_letters",
            "sink_redrive",
            "incidents",
            "incident_log",
            "cluster_partitions",
        ] {
            let found: i64 = conn
                .query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [table],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(found, 1, "{table}");
        }
        let format: i32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(format, FORMAT);
    }

    #[test]
    fn a_file_of_a_newer_format_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("analyzer.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", FORMAT + 1)
            .unwrap();
        let error = open(&path, Durability::Full).unwrap_err();
        assert!(matches!(error, DbError::NewerFormat { found, .. } if found == FORMAT + 1));
        let tables: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tables, 0, "nothing created in it");
    }
}
