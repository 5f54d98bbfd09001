//! The PostgreSQL backend: one history shared by a team's nightly hosts.

use postgres::types::{ToSql, Type};

use crate::backend::{Backend, Cell, Row, Value};
use crate::{DbError, HistoryError};

pub struct Postgres {
    client: postgres::Client,
}

fn err(e: postgres::Error) -> HistoryError {
    // The server's own message (with its detail) says what went wrong.
    HistoryError::db("postgres", DbError::Postgres(e))
}

/// An arbitrary constant: the advisory lock every writer of the history
/// takes, so imports and migrations of several hosts serialise.
const WRITE_LOCK: i64 = 0x1a2e_0028;

impl Postgres {
    pub fn connect(url: &str) -> Result<Self, HistoryError> {
        let client = postgres::Client::connect(url, postgres::NoTls).map_err(|e| {
            HistoryError::db(
                format!("cannot connect to {}", crate::url::redact(url)),
                DbError::Postgres(e),
            )
        })?;
        let mut pg = Self { client };
        // Keep the server's notices ("relation exists, skipping") quiet.
        pg.batch("SET client_min_messages = warning")?;
        Ok(pg)
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

fn cell(row: &postgres::Row, i: usize) -> Result<Cell, postgres::Error> {
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
        self.client.execute(sql, &params(values)).map_err(err)
    }
    fn query(&mut self, sql: &str, values: &[Value]) -> Result<Vec<Row>, HistoryError> {
        let rows = self.client.query(sql, &params(values)).map_err(err)?;
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
        self.client.batch_execute(sql).map_err(err)
    }
    fn begin_exclusive(&mut self) -> Result<(), HistoryError> {
        self.batch(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"
        ))
    }
}
