//! The one seam between the history and a database: statements with
//! `$1..$n` placeholders (both SQLite and PostgreSQL read them, numbered in
//! order of first use) and typed values in and out. Everything above it
//! (import, series, alerts) is written once.

use crate::HistoryError;

/// A value bound to a placeholder. Each carries its type even when NULL:
/// PostgreSQL checks a parameter's type before it looks at the value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
    Bool(Option<bool>),
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Text(Some(s.to_string()))
    }
}
impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Text(Some(s))
    }
}
impl From<Option<String>> for Value {
    fn from(s: Option<String>) -> Value {
        Value::Text(s)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(Some(v))
    }
}
impl From<Option<u64>> for Value {
    fn from(v: Option<u64>) -> Value {
        Value::Int(v.map(|v| v as i64))
    }
}
impl From<Option<u32>> for Value {
    fn from(v: Option<u32>) -> Value {
        Value::Int(v.map(i64::from))
    }
}
impl From<Option<f64>> for Value {
    fn from(v: Option<f64>) -> Value {
        Value::Real(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(Some(v))
    }
}

/// A value read back. SQLite has no boolean (it reads back as an integer)
/// and PostgreSQL's integers come in widths: the accessors of [`Row`]
/// smooth both.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Bool(bool),
}

/// One row of a query's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub Vec<Cell>);

impl Row {
    pub fn text(&self, i: usize) -> Option<String> {
        match &self.0[i] {
            Cell::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
    pub fn str(&self, i: usize) -> String {
        self.text(i).unwrap_or_default()
    }
    pub fn int(&self, i: usize) -> Option<i64> {
        match self.0[i] {
            Cell::Int(v) => Some(v),
            Cell::Bool(b) => Some(b as i64),
            _ => None,
        }
    }
    pub fn real(&self, i: usize) -> Option<f64> {
        match self.0[i] {
            Cell::Real(v) => Some(v),
            Cell::Int(v) => Some(v as f64),
            _ => None,
        }
    }
    pub fn bool(&self, i: usize) -> bool {
        matches!(self.0[i], Cell::Bool(true) | Cell::Int(1))
    }
}

/// A connection to one history database.
pub trait Backend: Send {
    /// `sqlite` or `postgres`, for messages.
    fn dialect(&self) -> &'static str;
    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, HistoryError>;
    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, HistoryError>;
    /// Several statements without parameters (a migration).
    fn batch(&mut self, sql: &str) -> Result<(), HistoryError>;
    /// Begins a transaction that has the database's write lock from its
    /// first statement, so two importers or two migrations serialise
    /// (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: an advisory lock).
    fn begin_exclusive(&mut self) -> Result<(), HistoryError>;
    fn commit(&mut self) -> Result<(), HistoryError> {
        self.batch("COMMIT")
    }
    fn rollback(&mut self) -> Result<(), HistoryError> {
        self.batch("ROLLBACK")
    }
}

/// Runs `f` in one exclusive transaction: committed if it returns Ok,
/// rolled back (nothing of it kept) otherwise.
pub fn in_transaction<T>(
    db: &mut dyn Backend,
    f: impl FnOnce(&mut dyn Backend) -> Result<T, HistoryError>,
) -> Result<T, HistoryError> {
    db.begin_exclusive()?;
    match f(db) {
        Ok(v) => {
            db.commit()?;
            Ok(v)
        }
        Err(e) => {
            // The error that made us roll back is the one to report.
            let _ = db.rollback();
            Err(e)
        }
    }
}
