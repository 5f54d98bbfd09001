//! The SQLite backend: one file, the default history.

use std::path::Path;
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};

use crate::backend::{Backend, Cell, Row, Value};
use crate::{DbError, HistoryError};

pub struct Sqlite {
    conn: rusqlite::Connection,
}

fn err(e: rusqlite::Error) -> HistoryError {
    HistoryError::db("sqlite", DbError::Sqlite(e))
}

impl Sqlite {
    pub fn open(path: &Path) -> Result<Self, HistoryError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                HistoryError::db(format!("cannot create {}", dir.display()), DbError::Io(e))
            })?;
        }
        let conn = rusqlite::Connection::open(path).map_err(|e| {
            HistoryError::db(
                format!("cannot open {}", path.display()),
                DbError::Sqlite(e),
            )
        })?;
        // A nightly's live import and a person's `history show` may meet:
        // wait for the other's write instead of failing.
        conn.busy_timeout(Duration::from_secs(30)).map_err(err)?;
        conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA journal_mode = WAL;")
            .map_err(err)?;
        Ok(Self { conn })
    }
}

/// `$N` (the history's placeholders) as `?N`: SQLite numbers `$N`
/// parameters in order of first use, `?N` by N, as PostgreSQL does.
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        let digit_follows = chars.peek().is_some_and(|d| d.is_ascii_digit());
        out.push(if c == '$' && digit_follows { '?' } else { c });
    }
    out
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Value::Int(v) => v.to_sql()?,
            Value::Real(v) => v.to_sql()?,
            Value::Text(v) => v.to_sql()?,
            Value::Bool(v) => v.to_sql()?,
        })
    }
}

impl Backend for Sqlite {
    fn dialect(&self) -> &'static str {
        "sqlite"
    }
    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, HistoryError> {
        let mut st = self.conn.prepare_cached(&numbered(sql)).map_err(err)?;
        st.execute(rusqlite::params_from_iter(params))
            .map(|n| n as u64)
            .map_err(err)
    }
    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, HistoryError> {
        let mut st = self.conn.prepare_cached(&numbered(sql)).map_err(err)?;
        let n = st.column_count();
        let rows = st
            .query_map(rusqlite::params_from_iter(params), |r| {
                (0..n)
                    .map(|i| {
                        Ok(match r.get_ref(i)? {
                            ValueRef::Null => Cell::Null,
                            ValueRef::Integer(v) => Cell::Int(v),
                            ValueRef::Real(v) => Cell::Real(v),
                            ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into()),
                            ValueRef::Blob(b) => Cell::Text(String::from_utf8_lossy(b).into()),
                        })
                    })
                    .collect::<rusqlite::Result<Vec<Cell>>>()
                    .map(Row)
            })
            .map_err(err)?;
        rows.collect::<rusqlite::Result<Vec<Row>>>().map_err(err)
    }
    fn batch(&mut self, sql: &str) -> Result<(), HistoryError> {
        self.conn.execute_batch(sql).map_err(err)
    }
    fn begin_exclusive(&mut self) -> Result<(), HistoryError> {
        self.batch("BEGIN IMMEDIATE")
    }
}

#[cfg(test)]
mod tests {
    use crate::{DbError, HistoryError};
    use std::error::Error;

    /// A database that cannot be opened says which file, and the SQLite
    /// error stays an SQLite error under it (a caller can read its code).
    #[test]
    fn an_unopenable_file_keeps_sqlites_error_as_its_source() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the database file should be.
        let path = dir.path().join("history.sqlite");
        std::fs::create_dir(&path).unwrap();
        let e = match super::Sqlite::open(&path) {
            Err(e) => e,
            Ok(_) => panic!("a directory opened as a database"),
        };
        assert!(
            matches!(&e, HistoryError::Db { context, .. } if context == &format!("cannot open {}", path.display())),
            "{e:?}"
        );
        let source = e.source().and_then(|s| s.downcast_ref::<DbError>());
        let Some(DbError::Sqlite(sqlite)) = source else {
            panic!("source is not SQLite's error: {e:?}")
        };
        assert!(sqlite.sqlite_error_code().is_some(), "{sqlite:?}");
        let text = lazyinit_core::exit::chain_text(&e);
        assert!(
            text.starts_with(&format!("cannot open {}: ", path.display())),
            "{text}"
        );
    }

    #[test]
    fn placeholders_keep_their_numbers() {
        assert_eq!(
            super::numbered("UPDATE t SET a = $2 WHERE k = $1 AND p = '$x'"),
            "UPDATE t SET a = ?2 WHERE k = ?1 AND p = '$x'"
        );
    }
}
