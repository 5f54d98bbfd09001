//! The PostgreSQL backend: one history shared by a team's nightly hosts.
//!
//! Every call to the server has a deadline (issue 41): a server that
//! accepts the connection and never answers ends the command with one
//! line and exit 3 instead of hanging. The blocking `postgres` crate cannot
//! do that (its `connect_timeout` bounds only the TCP connect, and a read
//! timeout, keepalives or `statement_timeout` do nothing against a peer
//! whose kernel acknowledges and whose server stays silent), so this is
//! `tokio-postgres` on a one-thread runtime with `tokio::time::timeout`
//! around the connect (TCP, startup, authentication, the first SET) and
//! around every statement.

use std::future::Future;
use std::time::Duration;

use tokio_postgres::types::{ToSql, Type};

use crate::backend::{Backend, Cell, Row, Value};
use crate::{DbError, HistoryError};

/// The whole connect when the URL names no `connect_timeout`.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(10);
/// One statement, an advisory lock's wait for another writer included.
pub const STATEMENT_DEADLINE: Duration = Duration::from_secs(300);

pub struct Postgres {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    /// A statement ran out of time: the connection's state is unknown, so
    /// nothing more is sent on it.
    broken: bool,
    /// The URL without its password, and the role: what a refusal names.
    shown: String,
    role: String,
}

/// A statement the role has no right to (SQLSTATE 42501, "permission
/// denied for table runs", for schema public, for database h): the
/// database and what to do, as bad input (the URL names a role that
/// cannot do what the command does, as a SQLite file this user cannot
/// write is; issue 52). Any other error is left as it is.
fn no_rights(e: HistoryError, shown: &str, role: &str) -> HistoryError {
    let HistoryError::Db {
        source: DbError::Postgres(pe),
        ..
    } = &e
    else {
        return e;
    };
    let Some(db) = pe.as_db_error() else {
        return e;
    };
    if *db.code() != tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE {
        return e;
    }
    HistoryError::NotAHistory {
        db: format!("--db {shown}"),
        why: format!(
            "the role {role} lacks the rights this command needs (the server: {}): \
             grant them (GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}; \
             CREATE on the schema for a new history; docs/history.md), or use a role that has them",
            lazyinit_core::exit::one_line_text(db.message())
        ),
    }
}

fn err(e: tokio_postgres::Error) -> HistoryError {
    // The server's own message (with its detail) says what went wrong.
    HistoryError::db("postgres", DbError::Postgres(e))
}

fn silent(context: String, d: Duration) -> HistoryError {
    HistoryError::db(
        context,
        DbError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the server did not answer within {} s", d.as_secs_f64()),
        )),
    )
}

/// An arbitrary constant: the advisory lock every writer of the history
/// takes, so imports and migrations of several hosts serialise.
const WRITE_LOCK: i64 = 0x1a2e_0028;

impl Postgres {
    pub fn connect(url: &str) -> Result<Self, HistoryError> {
        let cannot = || format!("cannot connect to {}", crate::url::redact(url));
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| HistoryError::db(cannot(), DbError::Postgres(e)))?;
        let deadline = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(CONNECT_DEADLINE);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| HistoryError::db(cannot(), DbError::Io(e)))?;
        let connected = rt.block_on(async {
            tokio::time::timeout(deadline, async {
                let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                // The connection runs whenever a call below blocks on the
                // runtime; it ends with the client.
                tokio::spawn(connection);
                // Keep the server's notices ("relation exists, skipping") quiet.
                client
                    .batch_execute("SET client_min_messages = warning")
                    .await?;
                Ok::<_, tokio_postgres::Error>(client)
            })
            .await
        });
        match connected {
            Ok(Ok(client)) => Ok(Self {
                rt,
                client,
                broken: false,
                shown: crate::url::redact(url),
                role: config
                    .get_user()
                    .unwrap_or("(the default role)")
                    .to_string(),
            }),
            Ok(Err(e)) => Err(no_rights(
                HistoryError::db(cannot(), DbError::Postgres(e)),
                &crate::url::redact(url),
                config.get_user().unwrap_or("(the default role)"),
            )),
            Err(_) => Err(silent(cannot(), deadline)),
        }
    }
}

/// `fut` on the server, or an error once STATEMENT_DEADLINE has passed.
fn deadline<T>(
    rt: &tokio::runtime::Runtime,
    broken: &mut bool,
    fut: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, HistoryError> {
    if *broken {
        return Err(silent(
            "postgres: an earlier statement got no answer".into(),
            STATEMENT_DEADLINE,
        ));
    }
    match rt.block_on(async { tokio::time::timeout(STATEMENT_DEADLINE, fut).await }) {
        Ok(r) => r.map_err(err),
        Err(_) => {
            *broken = true;
            Err(silent("postgres".into(), STATEMENT_DEADLINE))
        }
    }
}

fn params(values: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    values
        .iter()
        .map(|v| -> &(dyn ToSql + Sync) {
            match v {
                Value::Int(x) => x,
                Value::Real(x) => x,
                Value::Text(x) => x,
                Value::Bool(x) => x,
            }
        })
        .collect()
}
fn cell(row: &tokio_postgres::Row, i: usize) -> Result<Cell, tokio_postgres::Error> {
    let ty = row.columns()[i].type_();
    Ok(match *ty {
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Cell::Int),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(i)?
            .map(|v| Cell::Int(v.into())),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(i)?
            .map(|v| Cell::Int(v.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Cell::Real),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(i)?
            .map(|v| Cell::Real(v.into())),
        Type::BOOL => row.try_get::<_, Option<bool>>(i)?.map(Cell::Bool),
        _ => row.try_get::<_, Option<String>>(i)?.map(Cell::Text),
    }
    .unwrap_or(Cell::Null))
}

impl Backend for Postgres {
    fn dialect(&self) -> &'static str {
        "postgres"
    }
    fn execute(&mut self, sql: &str, values: &[Value]) -> Result<u64, HistoryError> {
        let p = params(values);
        deadline(&self.rt, &mut self.broken, self.client.execute(sql, &p))
            .map_err(|e| no_rights(e, &self.shown, &self.role))
    }
    fn query(&mut self, sql: &str, values: &[Value]) -> Result<Vec<Row>, HistoryError> {
        let p = params(values);
        let rows = deadline(&self.rt, &mut self.broken, self.client.query(sql, &p))
            .map_err(|e| no_rights(e, &self.shown, &self.role))?;
        rows.iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| cell(r, i))
                    .collect::<Result<Vec<_>, _>>()
            })
            .map(|r| r.map(Row).map_err(err))
            .collect()
    }
    fn batch(&mut self, sql: &str) -> Result<(), HistoryError> {
        deadline(&self.rt, &mut self.broken, self.client.batch_execute(sql))
            .map_err(|e| no_rights(e, &self.shown, &self.role))
    }
    fn begin_exclusive(&mut self) -> Result<(), HistoryError> {
        self.batch(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"
        ))
    }
}
