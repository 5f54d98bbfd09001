//! Versioned migrations: one folder per version under `migrations/`, each
//! with an `up.sql` that both backends run as it is. Applied in order
//! inside one exclusive transaction; each applied version is recorded in
//! `schema_migrations`, so a history is never migrated twice.

use crate::backend::{in_transaction, Backend, Value};
use crate::HistoryError;

/// Every migration, in order: (version, folder name, up.sql). Made by
/// `build.rs` from the folders under `migrations/`: a new migration is
/// its folder, nothing else.
pub const MIGRATIONS: &[(i64, &str, &str)] = include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

const VERSIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL
)";

/// What a database holds, as read before anything is written to it.
#[derive(Debug, PartialEq, Eq)]
pub enum Holds {
    /// No table: a new history.
    Nothing,
    /// A lazyinit history (its `schema_migrations` records this
    /// harness's first migration as version 1).
    History,
    /// Tables of another application: why, in one line.
    Foreign(String),
}

/// Why a read-only command refuses a database with no table.
pub const EMPTY: &str =
    "holds no history yet, and this command creates none: import a run first (history import)";

/// Reads which tables the database has (nothing is written): a database
/// of another application (another `schema_migrations` included) is not
/// migrated into a history.
pub fn what_is(db: &mut dyn Backend) -> Result<Holds, HistoryError> {
    let sql = match db.dialect() {
        "sqlite" => {
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        }
        _ => {
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name"
        }
    };
    let tables: Vec<String> = db.query(sql, &[])?.iter().map(|r| r.str(0)).collect();
    if tables.is_empty() {
        return Ok(Holds::Nothing);
    }
    if tables.iter().any(|t| t == "schema_migrations") {
        // Another tool's table of that name has other columns or types:
        // the query fails or finds no such row.
        let first = db.query("SELECT name FROM schema_migrations WHERE version = 1", &[]);
        if first
            .is_ok_and(|rows| rows.first().map(|r| r.str(0)).as_deref() == Some(MIGRATIONS[0].1))
        {
            return Ok(Holds::History);
        }
    }
    let mut shown = tables
        .iter()
        .take(5)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if tables.len() > 5 {
        shown.push_str(&format!(" and {} more", tables.len() - 5));
    }
    Ok(Holds::Foreign(format!(
        "a database of another application (tables {shown}), not a lazyinit history: nothing was written to it; give a history's path, or a new file's"
    )))
}

/// The newest version this harness knows.
pub fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

/// Whether [`migrate`] has anything to do (read only: a history opened
/// to be read, up to date, is not written to at all).
pub fn needed(db: &mut dyn Backend) -> Result<bool, HistoryError> {
    let have: Vec<i64> = match db.query("SELECT version FROM schema_migrations", &[]) {
        Ok(rows) => rows.iter().filter_map(|r| r.int(0)).collect(),
        // No table yet.
        Err(_) => return Ok(true),
    };
    Ok(MIGRATIONS.iter().any(|(v, _, _)| !have.contains(v)) || have.iter().any(|v| *v > latest()))
}

/// Applies what is missing; returns the versions it applied.
pub fn migrate(db: &mut dyn Backend) -> Result<Vec<i64>, HistoryError> {
    in_transaction(db, |db| {
        db.batch(VERSIONS_TABLE)?;
        let have: Vec<i64> = db
            .query(
                "SELECT version FROM schema_migrations ORDER BY version",
                &[],
            )?
            .iter()
            .filter_map(|r| r.int(0))
            .collect();
        if let Some(v) = have.iter().find(|v| **v > latest()) {
            return Err(HistoryError::NewerSchema {
                have: *v,
                known: latest(),
            });
        }
        let mut applied = Vec::new();
        for (version, name, up) in MIGRATIONS {
            if have.contains(version) {
                continue;
            }
            db.batch(up).map_err(|e| match e {
                // A role without the rights (PostgreSQL) says so itself.
                e @ HistoryError::NotAHistory { .. } => e,
                e => HistoryError::Migration {
                    name: name.to_string(),
                    source: Box::new(e),
                },
            })?;
            db.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
                &[
                    Value::from(*version),
                    Value::from(*name),
                    Value::from(chrono::Utc::now().to_rfc3339()),
                ],
            )?;
            applied.push(*version);
        }
        Ok(applied)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    fn fresh() -> (tempfile::TempDir, crate::sqlite::Sqlite) {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::sqlite::Sqlite::open(&dir.path().join("h.sqlite"), crate::Access::Create)
            .unwrap();
        (dir, db)
    }

    /// A history a newer harness migrated is refused with both versions,
    /// as its own variant (not a database failure's text).
    #[test]
    fn a_newer_schema_is_refused_with_both_versions() {
        let (_dir, mut db) = fresh();
        migrate(&mut db).unwrap();
        let newer = latest() + 1;
        db.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
            &[
                Value::from(newer),
                Value::from("9999_future"),
                Value::from("now"),
            ],
        )
        .unwrap();
        match migrate(&mut db) {
            Err(HistoryError::NewerSchema { have, known }) => {
                assert_eq!((have, known), (newer, latest()))
            }
            other => panic!("{other:?}"),
        }
    }

    /// A migration whose SQL fails names itself, and the database's error
    /// is its source, two levels down: the chain reads
    /// `migration NAME: sqlite: ...`.
    #[test]
    fn a_failing_migration_keeps_the_databases_error() {
        let (_dir, mut db) = fresh();
        // The first migration's table is already there, with other columns.
        db.batch("CREATE TABLE runs (x INTEGER)").unwrap();
        let e = migrate(&mut db).unwrap_err();
        let HistoryError::Migration { name, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(name, MIGRATIONS[0].1);
        let db_err = e
            .source()
            .and_then(|s| s.source())
            .and_then(|s| s.downcast_ref::<crate::DbError>());
        assert!(matches!(db_err, Some(crate::DbError::Sqlite(_))), "{e:?}");
        let text = lazyinit_core::exit::chain_text(&e);
        assert!(
            text.starts_with(&format!("migration {name}: sqlite: ")),
            "{text}"
        );
    }

    /// Every folder under migrations/ is listed, in order, and nothing
    /// listed is missing: a new folder cannot be forgotten.
    /// The migrated schema has a column for every column of the results
    /// (`COLUMN_KINDS`, the one list): a new CSV column without its
    /// migration fails here, not at the first import. Checked with the
    /// table's own query, so a column of the list under another name
    /// fails too.
    #[test]
    fn the_migrated_schema_stores_every_results_column() {
        let (_dir, mut db) = fresh();
        migrate(&mut db).unwrap();
        let have: Vec<String> = db
            .query("SELECT name FROM pragma_table_info('result_rows')", &[])
            .unwrap()
            .iter()
            .map(|r| r.str(0))
            .collect();
        assert!(have.len() > 10, "{have:?}");
        let missing: Vec<&str> = lazyinit_core::results::COLUMN_KINDS
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| !have.iter().any(|h| h == n))
            .collect();
        assert!(missing.is_empty(), "no migration adds {missing:?}");
    }

    #[test]
    fn every_migration_folder_is_listed_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut folders: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        folders.sort();
        let listed: Vec<String> = MIGRATIONS.iter().map(|m| m.1.to_string()).collect();
        assert_eq!(folders, listed);
        let mut last = 0;
        for (v, name, _) in MIGRATIONS {
            assert!(*v > last, "{name} after version {last}");
            assert!(name.starts_with(&format!("{v:04}_")), "{name}");
            last = *v;
        }
    }
}
