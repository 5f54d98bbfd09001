//! The SQLite backend: one file, the default history.

use std::path::Path;
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};

use crate::backend::{Backend, Cell, Row, Value};
use crate::{Access, DbError, HistoryError};

pub struct Sqlite {
    /// `None` only while dropped (closed before its side files go).
    conn: Option<rusqlite::Connection>,
    /// The file, for messages.
    path: std::path::PathBuf,
    /// Opened read-only: the `-wal` and `-shm` files this connection made
    /// (none were there before), removed once it is closed.
    made: Vec<std::path::PathBuf>,
}

fn err(e: rusqlite::Error) -> HistoryError {
    HistoryError::db("sqlite", DbError::Sqlite(e))
}

/// What to do about a history this user cannot write.
fn read_only(path: &Path) -> HistoryError {
    let uid = nix::unistd::geteuid();
    HistoryError::NotAHistory {
        db: format!("--db sqlite:{}", path.display()),
        why: format!(
            "read-only for this user (uid {uid}), and this command writes to the history: \
             run it as the history's owner, or make the file and its folder writable; \
             `history show` reads it as it is"
        ),
    }
}

/// Whether this user may write `p` (the file, or a folder's entries).
fn writable(p: &Path) -> bool {
    nix::unistd::access(p, nix::unistd::AccessFlags::W_OK).is_ok()
}

impl Drop for Sqlite {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            let _ = c.close();
        }
        // Only when the log this connection made is still empty: a
        // writer that came since has frames in it (and uses both).
        let wal_empty = self
            .made
            .iter()
            .filter(|f| f.to_string_lossy().ends_with("-wal"))
            .all(|f| std::fs::metadata(f).is_ok_and(|m| m.len() == 0));
        if wal_empty {
            for f in &self.made {
                let _ = std::fs::remove_file(f);
            }
        }
    }
}

/// Whether the history file at `path` exists; what is not a history's
/// place (a folder, a device, a file that is not SQLite's, a missing
/// folder, a missing file a reading command was given) is refused.
fn check_place(path: &Path, access: Access) -> Result<bool, HistoryError> {
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
    Ok(exists)
}

/// The connection: read-only where this user may not write, immutable
/// where SQLite could make no -shm; `absent` is how many of -wal and -shm
/// were not there before.
fn connect(
    path: &Path,
    dir: &Path,
    exists: bool,
    read_only_open: bool,
    absent: usize,
) -> Result<rusqlite::Connection, HistoryError> {
    use rusqlite::OpenFlags as F;
    let flags = match (exists, read_only_open) {
        (true, true) => F::SQLITE_OPEN_READ_ONLY | F::SQLITE_OPEN_NO_MUTEX,
        // An existing file is opened as it is (never created anew
        // should it vanish in between).
        (true, false) => F::SQLITE_OPEN_READ_WRITE | F::SQLITE_OPEN_NO_MUTEX,
        (false, _) => F::default(),
    };
    // SQLite cannot read a WAL database read-only where it can make
    // no -shm (a folder this user cannot write) unless told the file
    // is immutable. With no -wal there, no connection has it open and
    // every commit is in the file; a writer that starts meanwhile
    // writes to its log, and the file changes only at a checkpoint.
    let immutable = read_only_open && !writable(dir) && absent == 2;
    let conn = if immutable {
        let mut uri = String::from("file:");
        for c in path.to_string_lossy().chars() {
            match c {
                '%' => uri.push_str("%25"),
                '?' => uri.push_str("%3f"),
                '#' => uri.push_str("%23"),
                c => uri.push(c),
            }
        }
        uri.push_str("?immutable=1");
        rusqlite::Connection::open_with_flags(uri, flags | F::SQLITE_OPEN_URI)
    } else {
        rusqlite::Connection::open_with_flags(path, flags)
    };
    conn.map_err(|e| {
        HistoryError::db(
            format!("cannot open {}", path.display()),
            DbError::Sqlite(e),
        )
    })
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
        let exists = check_place(path, access)?;
        // A history this user cannot write (the file, or its folder where
        // the WAL's -wal and -shm go): a command that reads opens it
        // read-only; one that writes is refused, naming it.
        let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(d) => d.to_path_buf(),
            None => std::path::PathBuf::from("."),
        };
        let may_write = match exists {
            true => writable(path) && writable(&dir),
            false => writable(&dir),
        };
        if !may_write && access == Access::Create {
            return Err(read_only(path));
        }
        let read_only_open = exists && !may_write;
        let side = |suffix: &str| {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            std::path::PathBuf::from(p)
        };
        let before: Vec<std::path::PathBuf> = ["-wal", "-shm"]
            .iter()
            .map(|s| side(s))
            .filter(|p| std::fs::symlink_metadata(p).is_err())
            .collect();
        let conn = connect(path, &dir, exists, read_only_open, before.len())?;
        // A nightly's live import and a person's `history show` may meet:
        // wait for the other's write instead of failing.
        conn.busy_timeout(Duration::from_secs(30)).map_err(err)?;
        let mut db = Self {
            conn: Some(conn),
            path: path.to_path_buf(),
            // Only both, and only when neither was there (no other
            // connection had the database open).
            made: match (read_only_open, before.len()) {
                (true, 2) => before,
                _ => Vec::new(),
            },
        };
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
        if !read_only_open {
            db.conn()
                .execute_batch("PRAGMA foreign_keys = ON; PRAGMA journal_mode = WAL;")
                .map_err(err)?;
        }
        Ok(db)
    }

    fn conn(&mut self) -> &mut rusqlite::Connection {
        self.conn.as_mut().expect("open until dropped")
    }

    /// A write refused because the file is read-only, said as such.
    fn err(&self, e: rusqlite::Error) -> HistoryError {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::ReadOnly) => read_only(&self.path),
            _ => err(e),
        }
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
        let r = self
            .conn()
            .prepare_cached(&numbered(sql))
            .and_then(|mut st| st.execute(rusqlite::params_from_iter(params)));
        r.map(|n| n as u64).map_err(|e| self.err(e))
    }
    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, HistoryError> {
        let conn = self.conn.as_mut().expect("open until dropped");
        let mut st = conn.prepare_cached(&numbered(sql)).map_err(err)?;
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
        let r = self.conn().execute_batch(sql);
        r.map_err(|e| self.err(e))
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
