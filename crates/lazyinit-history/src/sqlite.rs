//! The SQLite backend: one file, the default history.

use std::path::Path;
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};

use crate::backend::{Backend, Cell, Row, Value};
use crate::{Access, DbError, HistoryError};

pub struct Sqlite {
    conn: rusqlite::Connection,
}

fn err(e: rusqlite::Error) -> HistoryError {
    HistoryError::db("sqlite", DbError::Sqlite(e))
}

/// The first 16 bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

impl Sqlite {
    /// Opens the history at `path`, creating it only when `access` is
    /// [`Access::Create`] and its folder exists. What is not a history
    /// (a folder, a device, a file that is not SQLite's, another
    /// application's database) is refused before anything is written to
    /// it: no journal mode set, no table created.
    pub fn open(path: &Path, access: Access) -> Result<Self, HistoryError> {
        let not = |why: String| HistoryError::NotAHistory {
            db: format!("--db sqlite:{}", path.display()),
            why,
        };
        let exists = match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => {
                return Err(not(format!(
                    "a folder, not a history file: give a file's path, e.g. sqlite:{}",
                    path.join("history.sqlite").display()
                )))
            }
            Ok(m) if !m.is_file() => {
                return Err(not(
                    "not a regular file (a device, a FIFO or a socket): give a history file's path"
                        .into(),
                ))
            }
            Ok(m) => {
                if m.len() > 0 && !has_sqlite_header(path)? {
                    return Err(not(
                        "not a SQLite database (a text file?): give a history's path, or a new file's"
                            .into(),
                    ));
                }
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                return Err(HistoryError::db(
                    format!("cannot open {}", path.display()),
                    DbError::Io(e),
                ))
            }
        };
        if !exists {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            if let Some(dir) = dir.filter(|d| !d.is_dir()) {
                return Err(not(format!(
                    "its folder {} does not exist (a typo?): nothing was created",
                    dir.display()
                )));
            }
            if access == Access::Read {
                return Err(not(
                    "no such file, and this command creates none: give an existing history, or import a run first (history import)"
                        .into(),
                ));
            }
        }
        use rusqlite::OpenFlags as F;
        let flags = match exists {
            // An existing file is opened as it is (never created anew
            // should it vanish in between).
            true => F::SQLITE_OPEN_READ_WRITE | F::SQLITE_OPEN_NO_MUTEX,
            false => F::default(),
        };
        let conn = rusqlite::Connection::open_with_flags(path, flags).map_err(|e| {
            HistoryError::db(
                format!("cannot open {}", path.display()),
                DbError::Sqlite(e),
            )
        })?;
        // A nightly's live import and a person's `history show` may meet:
        // wait for the other's write instead of failing.
        conn.busy_timeout(Duration::from_secs(30)).map_err(err)?;
        let mut db = Self { conn };
        // Read before anything is written (WAL is a write to the file).
        let holds = crate::migrate::what_is(&mut db).map_err(|e| match e {
            HistoryError::Db { source, .. } => {
                HistoryError::db(format!("cannot open {}", path.display()), source)
            }
            e => e,
        })?;
        match holds {
            crate::migrate::Holds::Foreign(why) => return Err(not(why)),
            crate::migrate::Holds::Nothing if access == Access::Read => {
                return Err(not(crate::migrate::EMPTY.into()))
            }
            _ => {}
        }
        db.conn
            .execute_batch("PRAGMA foreign_keys = ON; PRAGMA journal_mode = WAL;")
            .map_err(err)?;
        Ok(db)
    }
}

/// Whether the file starts as a SQLite database does.
fn has_sqlite_header(path: &Path) -> Result<bool, HistoryError> {
    use std::io::Read;
    let mut head = Vec::with_capacity(SQLITE_HEADER.len());
    std::fs::File::open(path)
        .and_then(|f| f.take(SQLITE_HEADER.len() as u64).read_to_end(&mut head))
        .map_err(|e| HistoryError::db(format!("cannot open {}", path.display()), DbError::Io(e)))?;
    Ok(head == SQLITE_HEADER)
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
    use crate::{Access, DbError, HistoryError};
    use std::error::Error;

    /// A database that cannot be opened says which file, and the SQLite
    /// error stays an SQLite error under it (a caller can read its code).
    #[test]
    fn an_unopenable_file_keeps_sqlites_error_as_its_source() {
        let dir = tempfile::tempdir().unwrap();
        // SQLite's header, then what no SQLite wrote.
        let path = dir.path().join("history.sqlite");
        let mut bytes = super::SQLITE_HEADER.to_vec();
        bytes.extend([0xa5; 200]);
        std::fs::write(&path, &bytes).unwrap();
        let e = match super::Sqlite::open(&path, Access::Create) {
            Err(e) => e,
            Ok(_) => panic!("a damaged file opened as a database"),
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
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "the file is as it was"
        );
    }

    /// What `--db` names is judged before anything is written to it: each
    /// case is one line naming the file and what is wrong, exit 2, and
    /// the file (or its absence) is as it was.
    #[test]
    fn what_is_not_a_history_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let text = d.join("notes.txt");
        std::fs::write(&text, "a person's notes\n").unwrap();
        let other = d.join("other.sqlite");
        {
            let c = rusqlite::Connection::open(&other).unwrap();
            c.execute_batch(
                "CREATE TABLE contacts (name TEXT); INSERT INTO contacts VALUES ('x');",
            )
            .unwrap();
        }
        let before = std::fs::read(&other).unwrap();
        let empty = d.join("empty.sqlite");
        std::fs::write(&empty, "").unwrap();
        let cases: &[(&std::path::Path, Access, &str)] = &[
            (d, Access::Create, "a folder, not a history file"),
            (&text, Access::Create, "not a SQLite database"),
            (
                std::path::Path::new("/dev/null"),
                Access::Create,
                "not a regular file",
            ),
            (
                &other,
                Access::Create,
                "another application (tables contacts)",
            ),
            (&d.join("typo/h.sqlite"), Access::Create, "its folder"),
            (
                &d.join("new.sqlite"),
                Access::Read,
                "no such file, and this command creates none",
            ),
            (&empty, Access::Read, "holds no history yet"),
        ];
        for (path, access, says) in cases {
            let e = match super::Sqlite::open(path, *access) {
                Err(e) => e,
                Ok(_) => panic!("{} opened ({access:?})", path.display()),
            };
            let line = lazyinit_core::exit::chain_text(&e);
            assert!(
                line.starts_with(&format!("--db sqlite:{}: ", path.display()))
                    && line.contains(says),
                "{}: {line}",
                path.display()
            );
            assert!(!line.contains('\n'), "{line}");
            assert!(e.is_bad_input(), "{e:?}");
        }
        assert_eq!(
            std::fs::read(&other).unwrap(),
            before,
            "another app's database untouched"
        );
        assert!(!d.join("other.sqlite-wal").exists(), "not switched to WAL");
        assert!(!d.join("typo").exists() && !d.join("new.sqlite").exists());
        assert_eq!(std::fs::read(&empty).unwrap(), b"");
        // An empty file is a new history for a command that creates one.
        assert!(super::Sqlite::open(&empty, Access::Create).is_ok());
    }

    #[test]
    fn placeholders_keep_their_numbers() {
        assert_eq!(
            super::numbered("UPDATE t SET a = $2 WHERE k = $1 AND p = '$x'"),
            "UPDATE t SET a = ?2 WHERE k = ?1 AND p = '$x'"
        );
    }
}
