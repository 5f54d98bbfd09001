//! [`History`]: a migrated database and what is stored in it.

use lazyinit_core::results::ResultRow;
use lazyinit_report::cells::Metric;
use serde_json::Value as Json;

use crate::backend::{in_transaction, Backend, Row, Value};
use crate::changes::{self, Alert, AlertState, Change, ChangeOptions};
use crate::import::{run_key, ImportOutcome, RunImport};
use crate::series::{self, Series, SeriesFilter, StoredRow};
use crate::{migrate, DbUrl, HistoryError};

/// How a results.csv column is stored.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Int,
    Real,
    Text,
    Bool,
}

/// The storage kind of each CSV column, in [`COLUMNS`] order (a test
/// checks the names).
const KINDS: &[(&str, Kind)] = {
    use Kind::*;
    &[
        ("run_id", Text),
        ("cell_id", Text),
        ("provider", Text),
        ("machine", Text),
        ("accel", Text),
        ("arch", Text),
        ("kernel_release", Text),
        ("kernel_source", Text),
        ("hz", Int),
        ("variant", Text),
        ("wait_mult", Int),
        ("volume_bytes", Int),
        ("groups", Int),
        ("mkfs_s", Real),
        ("mount_s", Real),
        ("lazyinit_s", Real),
        ("lazyinit_poll_s", Real),
        ("ms_per_group", Real),
        ("traced_groups", Int),
        ("repetition", Int),
        ("started_at", Text),
        ("harness_version", Text),
        ("status", Text),
        ("error", Text),
        ("clocksource", Text),
        ("sleep_ticks", Int),
        ("boot_s", Real),
        ("first_group_s", Real),
        ("storage_profile", Text),
        ("concurrency", Int),
        ("mkfs_cmd", Text),
        ("z1_ms", Real),
        ("z1_target_ms", Real),
        ("guest_part_ms", Real),
        ("zero_hold_ms", Real),
        ("zero_median_ms", Real),
        ("z1_attempts", Int),
        ("estimated", Bool),
        ("estimate_after", Int),
        ("estimate_groups", Int),
        ("estimate_cycle_ms", Real),
        ("lazyinit_lo_s", Real),
        ("lazyinit_hi_s", Real),
        ("crossed_ticks", Real),
        ("estimate_caveat", Text),
        ("shard", Text),
        ("host", Text),
        ("kernel_profile", Text),
        ("kernel_tree", Text),
    ]
};

/// The provenance columns after the CSV's, in the schema's order.
const FACT_COLUMNS: &[&str] = &[
    "kernel_build",
    "kernel_source_identity",
    "kernel_source_version",
    "kernel_config_sha256",
    "kernel_patch_sha256",
    "guest_facts",
    "storage_calibration",
    "qemu_cmdline",
];

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn placeholders(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A row's CSV columns as bound values (through its own serialization, so
/// a new column cannot be forgotten here without the test noticing).
fn row_values(row: &ResultRow) -> Result<Vec<Value>, HistoryError> {
    let json = serde_json::to_value(row).map_err(|e| HistoryError::Corrupt {
        what: row.cell_id.clone(),
        message: e.to_string(),
    })?;
    Ok(KINDS
        .iter()
        .map(|(name, kind)| {
            let v = &json[*name];
            match kind {
                Kind::Int => Value::Int(v.as_i64()),
                Kind::Real => Value::Real(v.as_f64()),
                Kind::Text => Value::Text(match v {
                    Json::String(s) => Some(s.clone()),
                    Json::Null => None,
                    other => Some(other.to_string()),
                }),
                Kind::Bool => Value::Bool(v.as_bool()),
            }
        })
        .collect())
}

/// A stored row's CSV columns (the first `KINDS.len()` cells) back into a
/// [`ResultRow`], through the same serialization.
fn row_from(db: &Row) -> Result<ResultRow, HistoryError> {
    let mut map = serde_json::Map::new();
    for (i, (name, kind)) in KINDS.iter().enumerate() {
        let v = match kind {
            Kind::Int => db.int(i).map(Json::from).unwrap_or(Json::Null),
            Kind::Real => db.real(i).map(Json::from).unwrap_or(Json::Null),
            // A column a later migration added is NULL on older rows:
            // left out, it reads as absent, as in an older CSV.
            Kind::Text => match db.text(i) {
                Some(t) => Json::from(t),
                None => continue,
            },
            Kind::Bool => Json::Bool(db.bool(i)),
        };
        map.insert(name.to_string(), v);
    }
    serde_json::from_value(Json::Object(map)).map_err(|e| HistoryError::Corrupt {
        what: format!("{} {}", db.str(0), db.str(1)),
        message: e.to_string(),
    })
}

/// A history database, migrated to this harness's schema.
pub struct History {
    db: Box<dyn Backend>,
    url: DbUrl,
    /// Rows per page when the rows are read ([`History::PAGE`]).
    page: i64,
}

impl History {
    /// Connects (creating a SQLite file if needed) and migrates.
    pub fn open(url: &DbUrl) -> Result<History, HistoryError> {
        let mut db: Box<dyn Backend> = match url {
            DbUrl::Sqlite(p) => Box::new(crate::sqlite::Sqlite::open(p)?),
            DbUrl::Postgres(u) => Box::new(crate::postgres::Postgres::connect(u)?),
        };
        migrate::migrate(db.as_mut())?;
        Ok(History {
            db,
            url: url.clone(),
            page: Self::PAGE,
        })
    }

    pub fn url(&self) -> &DbUrl {
        &self.url
    }

    /// The backend, for what this type does not wrap (tests, benchmarks).
    pub fn backend(&mut self) -> &mut dyn Backend {
        self.db.as_mut()
    }

    /// The schema versions applied, in order.
    pub fn schema_versions(&mut self) -> Result<Vec<i64>, HistoryError> {
        Ok(self
            .db
            .query(
                "SELECT version FROM schema_migrations ORDER BY version",
                &[],
            )?
            .iter()
            .filter_map(|r| r.int(0))
            .collect())
    }

    /// Records a run and its rows in one transaction: all of it or, on
    /// any error, nothing. Rows already there are left as they are.
    pub fn import(&mut self, run: &RunImport) -> Result<ImportOutcome, HistoryError> {
        let key = run_key(&run.rows).ok_or_else(|| HistoryError::Refused {
            folder: run.folder.clone(),
            message: "no rows".into(),
        })?;
        in_transaction(self.db.as_mut(), |db| insert_run(db, &key, run))
    }

    /// Every stored row with its run, oldest run first.
    pub fn stored_rows(&mut self) -> Result<Vec<StoredRow>, HistoryError> {
        let mut out = Vec::new();
        self.each_stored_row(|r| out.push(r))?;
        Ok(out)
    }

    /// Rows per page of [`History::each_stored_row`] (80 runs x 8 cells
    /// x 2 KB a row read: 20 MB).
    pub const PAGE: i64 = 10_000;

    /// Reads the rows `rows` at a time (tests: a page boundary inside a
    /// run).
    #[doc(hidden)]
    pub fn set_page_rows(&mut self, rows: i64) {
        self.page = rows.max(1);
    }

    /// Every stored row with its run, oldest run first, handed to `f` one
    /// at a time and read a page of [`Self::PAGE`] rows at a time (keyset
    /// paging on the order's key, the table's primary key and the run's
    /// date), so a long history is never all in memory.
    fn each_stored_row(&mut self, mut f: impl FnMut(StoredRow)) -> Result<(), HistoryError> {
        let cols = KINDS
            .iter()
            .map(|(n, _)| format!("r.\"{n}\""))
            .chain(FACT_COLUMNS.iter().map(|n| format!("r.\"{n}\"")))
            .collect::<Vec<_>>()
            .join(", ");
        let select = format!(
            "SELECT {cols}, runs.run_key, runs.folder, runs.first_started_at, r.started_at, r.cell_id
             FROM result_rows r JOIN runs ON runs.run_key = r.run_key"
        );
        let order = "ORDER BY runs.first_started_at, runs.run_key, r.started_at, r.cell_id";
        let n = KINDS.len();
        let tail = n + FACT_COLUMNS.len();
        let mut after: Option<[String; 4]> = None;
        let page = self.page;
        loop {
            let rows = match &after {
                None => self
                    .db
                    .query(&format!("{select} {order} LIMIT {page}"), &[])?,
                Some(k) => self.db.query(
                    &format!(
                        "{select} WHERE (runs.first_started_at, runs.run_key, r.started_at, r.cell_id) \
                         > ($1, $2, $3, $4) {order} LIMIT {page}"
                    ),
                    &[
                        k[0].clone().into(),
                        k[1].clone().into(),
                        k[2].clone().into(),
                        k[3].clone().into(),
                    ],
                )?,
            };
            let full = rows.len() as i64 == page;
            for db in rows {
                after = Some([
                    db.str(tail + 2),
                    db.str(tail),
                    db.str(tail + 3),
                    db.str(tail + 4),
                ]);
                f(StoredRow {
                    row: row_from(&db)?,
                    kernel_build: db.text(n),
                    kernel_source_identity: db.text(n + 1),
                    run_key: db.str(tail),
                    folder: db.str(tail + 1),
                    run_started_at: db.str(tail + 2),
                });
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// Each series with its points over time (the rows read a page at a
    /// time, each kept only as long as its point needs it).
    pub fn series(
        &mut self,
        metric: Metric,
        filter: Option<&SeriesFilter>,
    ) -> Result<Vec<Series>, HistoryError> {
        let mut b = series::Builder::new(metric);
        // Each key's git tree name (its rows' `kernel_tree`), gathered as
        // the pages go by: ids and labels name no path (crate::names).
        let mut trees = std::collections::BTreeMap::new();
        self.each_stored_row(|r| {
            if !r.row.kernel_tree.is_empty() {
                trees
                    .entry(lazyinit_report::cells::CellKey::of(&r.row))
                    .or_insert_with(|| r.row.kernel_tree.clone());
            }
            b.push(&r)
        })?;
        Ok(crate::names::rename(b.finish(None), &trees, filter))
    }

    /// The change points of every series (pure: nothing is recorded), each
    /// with the state of its alert if one was raised.
    pub fn changes(
        &mut self,
        metric: Metric,
        filter: Option<&SeriesFilter>,
        opts: &ChangeOptions,
    ) -> Result<Vec<Change>, HistoryError> {
        let series = self.series(metric, filter)?;
        let mut found = changes::find(&series, opts);
        let alerts = self.alerts()?;
        for c in &mut found {
            c.attach(&alerts);
        }
        Ok(found)
    }

    /// Every alert, oldest first.
    pub fn alerts(&mut self) -> Result<Vec<Alert>, HistoryError> {
        let rows = self.db.query(
            "SELECT alert_id, series, metric, run_key, kind, state, note, detail, created_at, updated_at
             FROM alerts ORDER BY created_at, alert_id",
            &[],
        )?;
        rows.iter().map(Alert::from_row).collect()
    }

    /// Raises an alert for each change that has none yet (state `new`);
    /// an alert already there keeps its state. Returns them all.
    pub fn raise(&mut self, found: &[Change]) -> Result<Vec<Alert>, HistoryError> {
        let now = chrono::Utc::now().to_rfc3339();
        in_transaction(self.db.as_mut(), |db| {
            for c in found {
                let detail = serde_json::to_string(c).unwrap_or_default();
                db.execute(
                    "INSERT INTO alerts (alert_id, series, metric, run_key, kind, state, note, detail, created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, NULL, $7, $8, $8)
                     ON CONFLICT (alert_id) DO NOTHING",
                    &[
                        c.alert_id.clone().into(),
                        c.series.clone().into(),
                        c.metric.clone().into(),
                        c.first_run.run_key.clone().into(),
                        c.kind.as_str().into(),
                        AlertState::New.as_str().into(),
                        detail.into(),
                        now.clone().into(),
                    ],
                )?;
            }
            Ok(())
        })?;
        let ids: Vec<&str> = found.iter().map(|c| c.alert_id.as_str()).collect();
        Ok(self
            .alerts()?
            .into_iter()
            .filter(|a| ids.contains(&a.alert_id.as_str()))
            .collect())
    }

    /// Closes each open alert of `series` that the change points `found`
    /// (over the same series) no longer support ([`changes::unsupported`]),
    /// state `closed` with the reason as its note. Returns the closings.
    pub fn close_unsupported(
        &mut self,
        series: &[Series],
        found: &[Change],
        opts: &ChangeOptions,
    ) -> Result<Vec<changes::Closing>, HistoryError> {
        let closed = changes::unsupported(series, found, &self.alerts()?, opts);
        for c in &closed {
            self.set_alert_state(&c.alert_id, AlertState::Closed, &c.reason)?;
        }
        Ok(closed)
    }

    /// `history import --label`: names a run (again: the new name).
    pub fn set_label(&mut self, run_key: &str, label: &str) -> Result<(), HistoryError> {
        self.db.execute(
            "UPDATE runs SET label = $1 WHERE run_key = $2",
            &[label.into(), run_key.into()],
        )?;
        Ok(())
    }

    /// The keys of the runs labelled `label`.
    pub fn runs_labelled(&mut self, label: &str) -> Result<Vec<String>, HistoryError> {
        Ok(self
            .db
            .query(
                "SELECT run_key FROM runs WHERE label = $1 ORDER BY run_key",
                &[label.into()],
            )?
            .iter()
            .map(|r| r.str(0))
            .collect())
    }

    /// `history ack`: sets an alert's state and note.
    pub fn set_alert_state(
        &mut self,
        alert_id: &str,
        state: AlertState,
        note: &str,
    ) -> Result<Alert, HistoryError> {
        let n = self.db.execute(
            "UPDATE alerts SET state = $1, note = $2, updated_at = $3 WHERE alert_id = $4",
            &[
                state.as_str().into(),
                note.into(),
                chrono::Utc::now().to_rfc3339().into(),
                alert_id.into(),
            ],
        )?;
        if n == 0 {
            return Err(HistoryError::NoAlert(alert_id.to_string()));
        }
        self.alerts()?
            .into_iter()
            .find(|a| a.alert_id == alert_id)
            .ok_or_else(|| HistoryError::NoAlert(alert_id.to_string()))
    }
}

fn insert_run(
    db: &mut dyn Backend,
    key: &str,
    run: &RunImport,
) -> Result<ImportOutcome, HistoryError> {
    let first = &run.rows[0];
    let h = &run.facts.host;
    let new_run = db.execute(
        "INSERT INTO runs (run_key, run_id, folder, first_started_at, imported_at, spec_toml, command_txt,
                           host_cpu, host_cores, host_memory_bytes, qemu_version)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         ON CONFLICT (run_key) DO NOTHING",
        &[
            key.into(),
            first.run_id.clone().into(),
            run.folder.clone().into(),
            first.started_at.clone().into(),
            chrono::Utc::now().to_rfc3339().into(),
            run.facts.spec_toml.clone().into(),
            run.facts.command_txt.clone().into(),
            h.cpu.clone().into(),
            h.cores.into(),
            h.memory_bytes.into(),
            h.qemu_version.clone().into(),
        ],
    )? == 1;
    // A resumed run adds a line to command.txt; a live import knows the host.
    db.execute(
        "UPDATE runs SET command_txt = $2,
             host_cpu = COALESCE(host_cpu, $3), host_cores = COALESCE(host_cores, $4),
             host_memory_bytes = COALESCE(host_memory_bytes, $5), qemu_version = COALESCE(qemu_version, $6)
         WHERE run_key = $1",
        &[
            key.into(),
            run.facts.command_txt.clone().into(),
            h.cpu.clone().into(),
            h.cores.into(),
            h.memory_bytes.into(),
            h.qemu_version.clone().into(),
        ],
    )?;
    let names: Vec<&str> = KINDS.iter().map(|(n, _)| *n).collect();
    let sql = format!(
        "INSERT INTO result_rows (\"run_key\", {}, {}) VALUES ($1, {}) ON CONFLICT DO NOTHING",
        quoted(&names),
        quoted(FACT_COLUMNS),
        placeholders(2, names.len() + FACT_COLUMNS.len())
    );
    let mut added = 0;
    for row in &run.rows {
        let f = run.cells.get(&row.cell_id).cloned().unwrap_or_default();
        let mut values = vec![Value::from(key)];
        values.extend(row_values(row)?);
        values.extend([
            f.kernel_build.into(),
            f.source_identity.into(),
            f.source_version.into(),
            f.config_sha256.into(),
            f.patch_sha256.into(),
            f.guest_facts.into(),
            f.storage_calibration.into(),
            f.qemu_cmdline.into(),
        ]);
        added += db.execute(&sql, &values)? as usize;
    }
    Ok(ImportOutcome {
        run_key: key.to_string(),
        folder: run.folder.clone(),
        new_run,
        rows_added: added,
        rows_known: run.rows.len() - added,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazyinit_core::results::COLUMNS;

    #[test]
    fn kinds_name_every_csv_column_in_order() {
        let names: Vec<&str> = KINDS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, COLUMNS);
    }
}
