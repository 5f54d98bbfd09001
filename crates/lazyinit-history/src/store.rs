//! [`History`]: a migrated database and what is stored in it.

use lazyinit_core::results::ResultRow;
use lazyinit_report::cells::Metric;
use serde_json::Value as Json;

use crate::backend::{in_transaction, Backend, Row, Value};
use crate::changes::{self, Alert, AlertState, Change, ChangeOptions};
use crate::import::{run_key, ImportOutcome, RunImport};
use crate::series::{self, Series, SeriesFilter, StoredRow};
use crate::{migrate, DbUrl, HistoryError};

use lazyinit_core::identity::Knobs;
/// How a results.csv column is stored, and each column's kind: the
/// results' own table, so a new column is not listed here again.
use lazyinit_core::results::{ColumnKind as Kind, COLUMN_KINDS as KINDS};

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
            // A knob's column is nested under `knobs` in the row's JSON.
            let v = json.get(*name).unwrap_or(&json["knobs"][*name]);
            match kind {
                Kind::Int => Value::Int(v.as_i64()),
                Kind::Real => Value::Real(v.as_f64()),
                Kind::Text => Value::Text(match v {
                    Json::String(s) => Some(s.clone()),
                    Json::Null => None,
                    other => Some(other.to_string()),
                }),
                Kind::Bool | Kind::MaybeBool => Value::Bool(v.as_bool()),
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
            Kind::MaybeBool => match db.int(i) {
                Some(b) => Json::Bool(b != 0),
                None => continue,
            },
        };
        if Knobs::COLUMNS.iter().any(|(k, _)| k == name) {
            // NULL on rows stored before the knob's migration: left out,
            // it reads as the knob's default, as in an older CSV.
            if v.is_null() {
                continue;
            }
            let knobs = map
                .entry("knobs")
                .or_insert_with(|| Json::Object(Default::default()));
            if let Json::Object(knobs) = knobs {
                knobs.insert(name.to_string(), v);
            }
        } else {
            map.insert(name.to_string(), v);
        }
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

/// What a command may do to a history that is not there yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads (show, changes, ack, publish): creates nothing, and a
    /// database with no history is refused.
    Read,
    /// Imports (import, check, run --history): a new SQLite file may be
    /// created when its folder exists; a new PostgreSQL database is
    /// migrated.
    Create,
}

impl History {
    /// Connects (creating a SQLite file if needed) and migrates.
    pub fn open(url: &DbUrl) -> Result<History, HistoryError> {
        Self::open_as(url, Access::Create)
    }

    /// Connects and migrates; what is not a history is refused before
    /// anything is written to it, and `Access::Read` creates nothing.
    /// Only the default SQLite file's folder (the state directory) is
    /// created: a `--db` path whose folder is missing is a typo.
    pub fn open_as(url: &DbUrl, access: Access) -> Result<History, HistoryError> {
        let mut db: Box<dyn Backend> = match url {
            DbUrl::Sqlite(p) => {
                let default = *url == DbUrl::default_sqlite();
                if default && access == Access::Read && !p.exists() {
                    return Err(HistoryError::NotAHistory {
                        db: format!("the default history {url}"),
                        why: "not there yet (neither --db nor $LAZYINIT_HISTORY names one): import a run first (history import)".into(),
                    });
                }
                if access == Access::Create && default {
                    if let Some(dir) = p.parent() {
                        std::fs::create_dir_all(dir).map_err(|e| {
                            HistoryError::db(
                                format!("cannot create {}", dir.display()),
                                crate::DbError::Io(e),
                            )
                        })?;
                    }
                }
                Box::new(crate::sqlite::Sqlite::open(p, access)?)
            }
            DbUrl::Postgres(u) => {
                let mut pg = crate::postgres::Postgres::connect(u)?;
                let not = |why: String| HistoryError::NotAHistory {
                    db: format!("--db {url}"),
                    why,
                };
                match migrate::what_is(&mut pg)? {
                    migrate::Holds::Foreign(why) => return Err(not(why)),
                    migrate::Holds::Nothing if access == Access::Read => {
                        return Err(not(migrate::EMPTY.into()))
                    }
                    _ => {}
                }
                Box::new(pg)
            }
        };
        // A read of an up-to-date history writes nothing (a read-only
        // file, a role that may only SELECT).
        if access == Access::Create || migrate::needed(db.as_mut())? {
            migrate::migrate(db.as_mut())?;
        }
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
    ///
    /// The shards of one run are one run, whatever is imported and in
    /// what order (shard folders, the merged folder, both): see
    /// [`sharded_key`].
    pub fn import(&mut self, run: &RunImport) -> Result<ImportOutcome, HistoryError> {
        let key = run_key(&run.rows).ok_or_else(|| HistoryError::Refused {
            folder: run.folder.clone(),
            message: "no rows".into(),
        })?;
        in_transaction(self.db.as_mut(), |db| {
            let key = sharded_key(db, run)?.unwrap_or(key);
            insert_run(db, &key, run)
        })
    }

    /// `history generate`: every generated run in one transaction (all of
    /// them or, on any error or a kill, none). A history that holds a run
    /// not generated (a folder other than `generated/...`) is refused
    /// before anything is written: synthetic runs never mix with real
    /// ones. Returns the runs imported.
    pub fn import_generated(
        &mut self,
        runs: impl Iterator<Item = RunImport>,
    ) -> Result<usize, HistoryError> {
        let url = self.url.to_string();
        in_transaction(self.db.as_mut(), |db| {
            let real = db.query(
                "SELECT folder FROM runs WHERE folder NOT LIKE 'generated/%' ORDER BY first_started_at LIMIT 1",
                &[],
            )?;
            if let Some(r) = real.first() {
                return Err(HistoryError::NotAHistory {
                    db: format!("--db {url}"),
                    why: format!(
                        "holds real runs (imported from {} and others): generate writes synthetic runs only \
                         into a new history or a generated one; give a new file's path (--db sqlite:PATH)",
                        r.str(0)
                    ),
                });
            }
            let mut n = 0;
            for run in runs {
                let key = run_key(&run.rows).ok_or_else(|| HistoryError::Refused {
                    folder: run.folder.clone(),
                    message: "no rows".into(),
                })?;
                // A generated run of another seed or count: no results.csv
                // to restore; say what generate can do instead.
                insert_run(db, &key, &run).map_err(|e| match e {
                    HistoryError::Refused { folder, .. } => HistoryError::NotAHistory {
                        db: format!("--db {url}"),
                        why: format!(
                            "holds generated runs made otherwise ({} differs from this --seed's and --runs'): generate again with the same --seed into it, or give a new file's path (--db sqlite:PATH)",
                            folder
                        ),
                    },
                    e => e,
                })?;
                n += 1;
            }
            Ok(n)
        })
    }

    /// Refuses (reading only) a run whose key the history holds with
    /// other rows; [`History::import`] refuses it too, inside its
    /// transaction. For a caller that checks several runs before it
    /// imports any.
    pub fn refuse_changed(&mut self, run: &RunImport) -> Result<(), HistoryError> {
        match run_key(&run.rows) {
            Some(key) => refuse_changed(self.db.as_mut(), &key, run),
            None => Ok(()),
        }
    }

    /// Refuses (reading only) a run `history check` cannot judge against
    /// this history: its rows changed since it was imported (see
    /// [`History::refuse_changed`]); a run that started before the history's
    /// first run; and, with `same_spec`, a run of another spec than its
    /// series: for each series the run has an ok row in, the latest earlier
    /// run of that series (same cell and testbed, [`CellKey`]) must be of
    /// the spec's name the run's `run_id` gives (`NAME-HASH`: an edited
    /// spec keeps its name and is judged; another name is another spec).
    ///
    /// [`CellKey`]: lazyinit_report::cells::CellKey
    pub fn refuse_unjudgeable(
        &mut self,
        run: &RunImport,
        same_spec: bool,
    ) -> Result<(), HistoryError> {
        let Some(key) = run_key(&run.rows) else {
            return Ok(());
        };
        let refuse = |message: String| HistoryError::Refused {
            folder: run.folder.clone(),
            message,
        };
        let date = |s: &str| chrono::DateTime::parse_from_rfc3339(s).ok();
        // A run the history holds is placed already (a check again of its
        // first run is judged, UNKNOWN as before).
        let stored = !self
            .db
            .query(
                "SELECT 1 FROM runs WHERE run_key = $1",
                &[key.clone().into()],
            )?
            .is_empty();
        let first = match stored {
            true => Vec::new(),
            false => self.db.query(
                "SELECT first_started_at, run_key FROM runs ORDER BY first_started_at LIMIT 1",
                &[],
            )?,
        };
        let started = &run.rows[0].started_at;
        if let Some(f) = first.first() {
            let (at, by) = (f.str(0), f.str(1));
            if date(&at).is_some_and(|a| date(started).is_some_and(|s| s < a)) {
                return Err(refuse(format!(
                    "run {key} started at {started}, before the history's first run ({by}): \
                     the gate judges a run against the runs before it, and there are none \
                     (a host's clock that was wrong?); import it (history import) to keep it"
                )));
            }
        }
        self.refuse_changed(run)?;
        if same_spec {
            self.refuse_other_spec(&key, run)?;
        }
        Ok(())
    }

    /// See [`History::refuse_unjudgeable`].
    fn refuse_other_spec(&mut self, key: &str, run: &RunImport) -> Result<(), HistoryError> {
        use lazyinit_report::cells::CellKey;
        let started = &run.rows[0].started_at;
        let cols = KINDS
            .iter()
            .map(|(n, _)| format!("r.\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let mut seen = std::collections::HashSet::new();
        for r in run
            .rows
            .iter()
            .filter(|r| r.status == lazyinit_core::results::Status::Ok)
        {
            let cell = CellKey::of(r);
            if !seen.insert(cell.clone()) {
                continue;
            }
            // The same cell's earlier rows (the key's fields the query can
            // narrow on), then the key itself, newest run first.
            let rows = self.db.query(
                &format!(
                    "SELECT {cols}, runs.run_key, runs.first_started_at FROM result_rows r
                     JOIN runs ON runs.run_key = r.run_key
                     WHERE r.run_key <> $1 AND runs.first_started_at < $2 AND r.status = 'ok'
                       AND r.arch = $3 AND r.hz = $4 AND r.variant = $5 AND r.volume_bytes = $6
                     ORDER BY runs.first_started_at DESC, runs.run_key DESC"
                ),
                &[
                    key.into(),
                    started.clone().into(),
                    column(r, "arch")?,
                    column(r, "hz")?,
                    column(r, "variant")?,
                    column(r, "volume_bytes")?,
                ],
            )?;
            for db_row in &rows {
                let old = row_from(db_row)?;
                if CellKey::of(&old) != cell {
                    continue;
                }
                if spec_name(&old.run_id) != spec_name(&r.run_id) {
                    return Err(HistoryError::Refused {
                        folder: run.folder.clone(),
                        message: format!(
                            "run_id `{}` is of spec `{}`, and cell {}'s latest run before it in the history ({}) of spec `{}`: \
                             a run is judged against runs of its own spec (the name its run_id gives); \
                             check it against another history (--db) or chosen runs (--baseline run:{})",
                            r.run_id,
                            spec_name(&r.run_id),
                            r.cell_id,
                            db_row.str(KINDS.len()),
                            spec_name(&old.run_id),
                            old.run_id,
                        ),
                    });
                }
                break;
            }
        }
        Ok(())
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
                        c.alert_id.to_string().into(),
                        c.series.to_string().into(),
                        c.metric.name().into(),
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
            self.set_alert_state(c.alert_id.as_str(), AlertState::Closed, &c.reason)?;
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

    /// Every label of the history's runs, sorted.
    pub fn labels(&mut self) -> Result<Vec<String>, HistoryError> {
        Ok(self
            .db
            .query(
                "SELECT DISTINCT label FROM runs WHERE label IS NOT NULL ORDER BY label",
                &[],
            )?
            .iter()
            .map(|r| r.str(0))
            .collect())
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

/// A value as a message gives it.
fn shown(v: &Value) -> String {
    let s = match v {
        Value::Int(v) => v.map(|v| v.to_string()),
        Value::Real(v) => v.map(|v| v.to_string()),
        Value::Text(v) => v.clone().filter(|t| !t.is_empty()),
        Value::Bool(v) => v.map(|v| v.to_string()),
    };
    s.map_or("empty".into(), |s| format!("`{s}`"))
}

/// Refuses a run whose key the history holds with other rows: a row
/// (cell and `started_at`) of both whose values differ. The history keeps
/// a run as it was imported; a resumed run's new rows (new cells, or a
/// cell's new `started_at`) are no change, and a folder with fewer of the
/// run's rows (a shard of a merged run) is the same run.
fn refuse_changed(db: &mut dyn Backend, key: &str, run: &RunImport) -> Result<(), HistoryError> {
    let cols = KINDS
        .iter()
        .map(|(n, _)| format!("r.\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let stored = db.query(
        &format!(
            "SELECT {cols}, runs.folder FROM result_rows r JOIN runs ON runs.run_key = r.run_key
             WHERE r.run_key = $1 ORDER BY r.started_at, r.cell_id"
        ),
        &[key.into()],
    )?;
    let here: std::collections::BTreeMap<(&str, &str), (usize, &ResultRow)> = run
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.cell_id.as_str(), r.started_at.as_str()), (i, r)))
        .collect();
    let refuse = |message: String| HistoryError::Refused {
        folder: run.folder.clone(),
        message,
    };
    let todo = "the history keeps a run as it was imported and judges nothing else: \
                restore this results.csv, or use another history (--db) for the edited folder";
    for db_row in &stored {
        let from = db_row.str(KINDS.len());
        let old = row_from(db_row)?;
        let Some((i, new)) = here.get(&(old.cell_id.as_str(), old.started_at.as_str())) else {
            continue;
        };
        let (a, b) = (row_values(new)?, row_values(&old)?);
        if let Some(c) = (0..KINDS.len()).find(|c| a[*c] != b[*c]) {
            return Err(refuse(format!(
                "results.csv line {}: run {key} is in the history (imported from {from}) with other values: \
                 cell {} `{}` is {} here and {} there; {todo}",
                i + 2,
                new.cell_id,
                KINDS[c].0,
                shown(&a[c]),
                shown(&b[c]),
            )));
        }
    }
    Ok(())
}

/// One CSV column of `row` as it is stored.
fn column(row: &ResultRow, name: &str) -> Result<Value, HistoryError> {
    let i = KINDS.iter().position(|(n, _)| *n == name).unwrap_or(0);
    Ok(row_values(row)?.swap_remove(i))
}

/// The spec's name of a run id (`NAME-HASH`).
fn spec_name(run_id: &str) -> &str {
    run_id.rsplit_once('-').map_or(run_id, |(n, _)| n)
}

/// How far apart (seconds) the first rows of two shards of one run may
/// have started for the second's import to join the first's run when
/// they share no row: shards of one night start within hours of each
/// other, two nights' a day apart.
pub const SHARD_WINDOW_S: i64 = 12 * 3600;

/// The shards of `run`'s rows (`K/N`, none for a run that was not split)
/// and their count N.
fn shards_of(run: &RunImport) -> Option<(std::collections::BTreeSet<&str>, &str)> {
    let shards: std::collections::BTreeSet<&str> = run
        .rows
        .iter()
        .map(|r| r.shard.as_str())
        .filter(|s| !s.is_empty())
        .collect();
    let count = shards.first()?.split_once('/')?.1;
    Some((shards, count))
}

fn seconds(rfc3339: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .ok()
        .map(|t| t.timestamp())
}

/// The run a sharded import belongs to, when the history has it already
/// (docs/history.md, "A sharded run is one run"): a run of the same run
/// id and shard count N that holds one of the import's rows (the same
/// cell, start and shard: a shard after its merge, the merge after a
/// shard, a shard resumed), else one that holds none of the import's
/// shards and whose first row started within [`SHARD_WINDOW_S`] of the
/// import's first (another shard of the same night), the nearest. `None`:
/// a run of its own (and for every run that was not split).
fn sharded_key(db: &mut dyn Backend, run: &RunImport) -> Result<Option<String>, HistoryError> {
    let Some((shards, count)) = shards_of(run) else {
        return Ok(None);
    };
    let rows: std::collections::BTreeSet<(&str, &str, &str)> = run
        .rows
        .iter()
        .map(|r| (r.cell_id.as_str(), r.started_at.as_str(), r.shard.as_str()))
        .collect();
    let stored = db.query(
        "SELECT r.run_key, r.shard, r.cell_id, r.started_at, runs.first_started_at
         FROM result_rows r JOIN runs ON runs.run_key = r.run_key
         WHERE r.run_id = $1 AND r.shard LIKE $2
         ORDER BY runs.first_started_at, r.run_key",
        &[
            run.rows[0].run_id.clone().into(),
            format!("%/{count}").into(),
        ],
    )?;
    // Per stored run, in order: its first start and the shards it holds.
    let mut runs: Vec<(String, String, std::collections::BTreeSet<String>)> = Vec::new();
    for r in &stored {
        let (key, shard) = (r.str(0), r.str(1));
        if shard.split_once('/').map(|s| s.1) != Some(count) {
            continue;
        }
        if rows.contains(&(r.str(2).as_str(), r.str(3).as_str(), shard.as_str())) {
            return Ok(Some(key));
        }
        match runs.last_mut() {
            Some(last) if last.0 == key => {
                last.2.insert(shard);
            }
            _ => runs.push((key, r.str(4), [shard].into())),
        }
    }
    let Some(first) = run.rows.iter().filter_map(|r| seconds(&r.started_at)).min() else {
        return Ok(None);
    };
    Ok(runs
        .into_iter()
        .filter(|(_, _, held)| held.iter().all(|s| !shards.contains(s.as_str())))
        .filter_map(|(key, at, _)| Some(((seconds(&at)? - first).abs(), key)))
        .filter(|(d, _)| *d <= SHARD_WINDOW_S)
        .min()
        .map(|(_, key)| key))
}

/// The run's rows with their cells' facts; how many were new.
fn insert_rows(db: &mut dyn Backend, key: &str, run: &RunImport) -> Result<usize, HistoryError> {
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
    Ok(added)
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
    if !new_run {
        refuse_changed(db, key, run)?;
    }
    // A resumed run adds a line to command.txt; a live import knows the
    // host. A shard joining its run leaves the run's folder and command
    // lines as they were, and the merged folder (every shard) takes them.
    let sharded = shards_of(run);
    let whole = sharded
        .as_ref()
        .is_none_or(|(s, n)| n.parse::<usize>().is_ok_and(|n| s.len() == n));
    if sharded.is_some() && whole && !new_run {
        db.execute(
            "UPDATE runs SET folder = $2, spec_toml = COALESCE($3, spec_toml) WHERE run_key = $1",
            &[
                key.into(),
                run.folder.clone().into(),
                run.facts.spec_toml.clone().into(),
            ],
        )?;
    }
    let earliest = run.rows.iter().map(|r| r.started_at.as_str()).min();
    db.execute(
        "UPDATE runs SET command_txt = CASE WHEN $7 THEN $2 ELSE command_txt END,
             first_started_at = CASE WHEN first_started_at > $8 THEN $8 ELSE first_started_at END,
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
            Value::Bool(Some(whole)),
            earliest.unwrap_or_default().into(),
        ],
    )?;
    let added = insert_rows(db, key, run)?;
    Ok(ImportOutcome {
        run_key: key.to_string(),
        folder: run.folder.clone(),
        new_run,
        rows_added: added,
        rows_known: run.rows.len() - added,
    })
}
