//! Versioned migrations: one folder per version under `migrations/`, each
//! with an `up.sql` that both backends run as it is. Applied in order
//! inside one exclusive transaction; each applied version is recorded in
//! `schema_migrations`, so a history is never migrated twice.

use crate::backend::{in_transaction, Backend, Value};
use crate::HistoryError;

/// Every migration, in order: (version, folder name, up.sql).
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "0001_initial",
        include_str!("../migrations/0001_initial/up.sql"),
    ),
    (
        2,
        "0002_caveat_shard_host",
        include_str!("../migrations/0002_caveat_shard_host/up.sql"),
    ),
    (
        3,
        "0003_kernel_profile",
        include_str!("../migrations/0003_kernel_profile/up.sql"),
    ),
];

const VERSIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL
)";

/// The newest version this harness knows.
pub fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.0)
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
            return Err(HistoryError::Db(format!(
                "the history has schema version {v}, newer than this harness knows ({}): use a newer lazyinit-bench",
                latest()
            )));
        }
        let mut applied = Vec::new();
        for (version, name, up) in MIGRATIONS {
            if have.contains(version) {
                continue;
            }
            db.batch(up)
                .map_err(|e| HistoryError::Db(format!("migration {name}: {e}")))?;
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

    /// Every folder under migrations/ is listed, in order, and nothing
    /// listed is missing: a new folder cannot be forgotten.
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
        for (i, (v, name, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*v, i as i64 + 1);
            assert!(name.starts_with(&format!("{v:04}_")), "{name}");
        }
    }
}
