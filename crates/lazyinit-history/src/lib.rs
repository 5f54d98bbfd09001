//! The nightly history: every run in a database, change points across
//! runs, and a gate that knows the past (docs/history.md).
//!
//! - [`History`] opens a store ([`DbUrl`]: SQLite by default, PostgreSQL
//!   for a team), applies the [`migrate`]d schema, and imports run folders
//!   ([`import`]), each in one transaction.
//! - A **series** is one cell on one testbed: every field of
//!   [`lazyinit_report::cells::CellKey`]. Rows of different keys are never
//!   pooled. [`History::series`] gives each with its points over time.
//! - [`edivisive`] finds change points in one series (E-Divisive means
//!   with a Student t-test, as Apache Otava / Hunter do);
//!   [`History::changes`] runs it over every series.
//! - [`check`] judges a new run against its series' history; alerts keep a
//!   state a person sets ([`History::set_alert_state`]).
//!
//! # The read API (for the dashboard)
//!
//! ```no_run
//! use lazyinit_history::{DbUrl, History, ChangeOptions};
//! use lazyinit_report::cells::Metric;
//! let mut h = History::open(&DbUrl::default_sqlite())?;
//! for s in h.series(Metric::FromFirstGroupS, None)? {
//!     println!("{}: {} points", s.id, s.points.len());
//! }
//! let changes = h.changes(Metric::FromFirstGroupS, None, &ChangeOptions::default())?;
//! let alerts = h.alerts()?;
//! # Ok::<(), lazyinit_history::HistoryError>(())
//! ```

pub mod backend;
pub mod changes;
pub mod check;
pub mod edivisive;
pub mod generate;
pub mod import;
pub mod migrate;
pub mod names;
pub mod postgres;
pub mod provenance;
pub mod render;
pub mod series;
pub mod sqlite;
mod store;
pub mod url;

pub use changes::{Alert, AlertState, Change, ChangeOptions, Segment};
pub use import::{ImportOutcome, RunImport};
pub use series::{Point, Series, SeriesFilter};
pub use store::{Access, History};
pub use url::DbUrl;

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The database refused or could not be reached: what was being done
    /// (`sqlite`, `postgres`, `cannot open PATH`), and what the database or
    /// the file system said, kept as its own error.
    #[error("{context}")]
    Db {
        context: String,
        #[source]
        source: DbError,
    },
    /// The history was migrated by a newer harness.
    #[error("the history has schema version {have}, newer than this harness knows ({known}): use a newer lazyinit-bench")]
    NewerSchema { have: i64, known: i64 },
    /// A migration's SQL failed; nothing of it was applied.
    #[error("migration {name}")]
    Migration {
        name: String,
        #[source]
        source: Box<HistoryError>,
    },
    /// A run folder that cannot go into the history as it is.
    #[error("{folder}: {message}")]
    Refused { folder: String, message: String },
    /// A value in the database this harness cannot read.
    #[error("history row {what}: {message}")]
    Corrupt { what: String, message: String },
    #[error("no alert `{0}` (list them with `history changes`)")]
    NoAlert(String),
    /// `--db` names something that is not a history this command can use
    /// (a folder, a device, another application's database, a path whose
    /// folder does not exist): which, and what is wrong. Nothing was
    /// written to it.
    #[error("{db}: {why}")]
    NotAHistory { db: String, why: String },
}

/// What a backend said, as the backend's own error type: a caller can
/// match on it (PostgreSQL's SQLSTATE, SQLite's error code).
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("{0}")]
    Sqlite(rusqlite::Error),
    /// The server's own severity and message when it sent one.
    #[error("{}", postgres_text(.0))]
    Postgres(::tokio_postgres::Error),
    #[error("{0}")]
    Io(std::io::Error),
}

fn postgres_text(e: &::tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

impl HistoryError {
    pub(crate) fn db(context: impl Into<String>, source: DbError) -> Self {
        HistoryError::Db {
            context: context.into(),
            source,
        }
    }

    /// Whether the input (a folder, an id) is at fault rather than the
    /// database: exit 2, not 3.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            HistoryError::Refused { .. }
                | HistoryError::NoAlert(_)
                | HistoryError::NotAHistory { .. }
        )
    }
}

/// The input's fault is 2, the database's 3.
impl lazyinit_core::exit::ExitCode for HistoryError {
    fn exit_code(&self) -> u8 {
        match self.is_bad_input() {
            true => lazyinit_core::exit::BAD_INPUT,
            false => lazyinit_core::exit::INFRASTRUCTURE,
        }
    }
}
