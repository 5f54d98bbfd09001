//! A run folder read for the history: its rows (with the project's own
//! reader), checked against the cells its spec plans, and the provenance
//! its files hold.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lazyinit_core::cell::Cell;
use lazyinit_core::identity::CellKey;
use lazyinit_core::layout::RunFolder;
use lazyinit_core::results::ResultRow;

use crate::provenance::{CellFacts, RunFacts};
use crate::HistoryError;

/// One run folder, ready to go into the history in one transaction.
#[derive(Debug, Clone)]
pub struct RunImport {
    /// The folder as given (the dashboard links to it).
    pub folder: String,
    pub rows: Vec<ResultRow>,
    pub facts: RunFacts,
    /// Keyed by cell id.
    pub cells: BTreeMap<String, CellFacts>,
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ImportOutcome {
    pub run_key: String,
    pub folder: String,
    /// The run was not in the history before.
    pub new_run: bool,
    pub rows_added: usize,
    /// Rows the history already had (an import again, or a resumed run).
    pub rows_known: usize,
}

/// The run's identity in the history: its id (the spec's name and hash,
/// the same for every run of one spec) and when its first row started.
/// A resumed run appends rows after its first, so it keeps its key.
pub fn run_key(rows: &[ResultRow]) -> Option<String> {
    rows.first()
        .map(|r| format!("{}@{}", r.run_id, r.started_at))
}

impl RunImport {
    /// Reads `folder`. `planned` are the cells its `spec.toml` plans and
    /// `run_id` the id it gives (the caller parses the spec: its provider
    /// tables are the CLI's types). Refuses, naming why, a folder without
    /// rows or with a row its spec does not plan.
    pub fn read(folder: &Path, planned: &[Cell], run_id: &str) -> Result<RunImport, HistoryError> {
        let name = folder.display().to_string();
        let refuse = |message: String| HistoryError::Refused {
            folder: name.trim_end_matches('/').to_string(),
            message,
        };
        let run = RunFolder::new(folder);
        // A torn last line is refused, not read as a row (as a resume
        // does not count it).
        let mut rows = run
            .results_csv()
            .untorn_rows()
            .map_err(|e| refuse(e.to_string()))?;
        if rows.is_empty() {
            return Err(refuse(NO_ROWS.into()));
        }
        check_rows(&rows, planned, run_id).map_err(refuse)?;
        check_dates(&rows).map_err(refuse)?;
        // One instant is one run: `21:00:00+14:00` and `07:00:00Z` of the
        // day before are the same start, so the same key.
        for r in &mut rows {
            r.started_at = normal_instant(&r.started_at).unwrap_or_else(|| r.started_at.clone());
        }
        let cells = rows
            .iter()
            .map(|r| (r.cell_id.clone(), CellFacts::of(&run.cell(&r.cell_id))))
            .collect();
        Ok(RunImport {
            folder: name.trim_end_matches('/').to_string(),
            facts: RunFacts::of(&run),
            rows,
            cells,
        })
    }
}

/// Why a folder whose results.csv has only its header is refused
/// (`history import` skips such a folder, saying so).
pub const NO_ROWS: &str = "results.csv has no rows yet";

/// Dates before this are a clock that was not set (1970 is the epoch).
pub const EARLIEST_RUN: &str = "2000-01-01T00:00:00Z";

/// How far after this host's clock a row may have started: the clock
/// skew between the hosts of one history (a run imported on another host
/// than the one that ran it). Later is a clock set ahead.
pub const CLOCK_SKEW_S: i64 = 3600;

/// `started_at` as one text per instant: UTC, `Z`, the sub-second digits
/// it has (none, or 3, 6 or 9), so that the same instant written with
/// another offset (`+14:00`, `+00:00`, `z`) is the same run and row.
/// `None` for a text that is not an RFC 3339 date.
pub fn normal_instant(rfc3339: &str) -> Option<String> {
    let d = chrono::DateTime::parse_from_rfc3339(rfc3339).ok()?;
    Some(
        d.with_timezone(&chrono::Utc)
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
    )
}

/// Every row's `started_at` is a date (RFC 3339) from [`EARLIEST_RUN`] to
/// [`CLOCK_SKEW_S`] after now: a run of a host whose clock was not set,
/// or was set ahead, cannot be placed in time.
pub fn check_dates(rows: &[ResultRow]) -> Result<(), String> {
    check_dates_at(rows, chrono::Utc::now())
}

/// [`check_dates`] with `now` given.
pub fn check_dates_at(
    rows: &[ResultRow],
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), String> {
    let earliest = chrono::DateTime::parse_from_rfc3339(EARLIEST_RUN).expect("a date");
    let latest = now + chrono::Duration::seconds(CLOCK_SKEW_S);
    for (i, r) in rows.iter().enumerate() {
        match chrono::DateTime::parse_from_rfc3339(&r.started_at) {
            Ok(d) if d < earliest => {
                return Err(format!(
                    "results.csv line {}: started_at {} is before {EARLIEST_RUN}: the host's clock was not set; \
                     a run of an unknown date cannot be placed in the history",
                    i + 2,
                    r.started_at
                ))
            }
            Ok(d) if d > latest => {
                return Err(format!(
                    "results.csv line {}: started_at {} is after now ({}) by more than the {} h of clock skew allowed: \
                     the host's clock was set ahead; a run of an unknown date cannot be placed in the history \
                     (fix the host's clock; the row's date cannot be trusted)",
                    i + 2,
                    r.started_at,
                    now.format("%Y-%m-%dT%H:%M:%SZ"),
                    CLOCK_SKEW_S / 3600
                ))
            }
            Ok(_) => {}
            Err(_) => {
                return Err(format!(
                    "results.csv line {}: started_at `{}` is not a date (RFC 3339)",
                    i + 2,
                    r.started_at
                ))
            }
        }
    }
    Ok(())
}

/// Every row must be of this spec's run and one of its planned cells,
/// field for field.
pub fn check_rows(rows: &[ResultRow], planned: &[Cell], run_id: &str) -> Result<(), String> {
    let by_id: BTreeMap<String, &Cell> = planned.iter().map(|c| (c.id(), c)).collect();
    for (i, r) in rows.iter().enumerate() {
        let line = i + 2;
        if r.run_id != run_id {
            return Err(format!(
                "results.csv line {line}: run_id `{}` is not this spec's (`{run_id}`): the rows are of another spec; import the folder they came from",
                r.run_id
            ));
        }
        let Some(c) = by_id.get(&r.cell_id) else {
            return Err(format!(
                "results.csv line {line}: cell `{}` is not one spec.toml plans",
                r.cell_id
            ));
        };
        // The row's key against the plan's: every field of the key the
        // plan sets (provider and the axes; machine, accel and storage
        // are the provider's to say), then the repetition.
        let row_key = CellKey::of(r);
        let mut planned = row_key.clone();
        planned.testbed.provider = c.provider.clone();
        planned.axes = c.axes.clone().into();
        let field = match row_key.first_difference(&planned) {
            Some(f) => Some(f.column),
            None if r.repetition != c.repetition => Some("repetition"),
            // A field of the identity the key's table does not list yet.
            None if row_key != planned => Some("configuration"),
            None => None,
        };
        if let Some(field) = field {
            return Err(format!(
                "results.csv line {line}: cell `{}` has a {field} its spec.toml does not plan for it",
                r.cell_id
            ));
        }
    }
    Ok(())
}

/// What `import` makes of one folder it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Given {
    /// A run folder (spec.toml there).
    Run(PathBuf),
    /// Not a run folder: why, and the run folders under it.
    Holder { why: String, runs: Vec<PathBuf> },
}

/// A folder given to `import`: a run folder (its spec.toml there), or a
/// folder holding runs, with why it is not one and every run folder
/// (results.csv beside spec.toml) under it, sorted.
pub fn classify(folder: &Path) -> Given {
    if RunFolder::new(folder).spec_toml().is_file() {
        return Given::Run(folder.to_path_buf());
    }
    let mut runs = Vec::new();
    runs_under(folder, &mut runs);
    Given::Holder {
        why: not_a_run(folder),
        runs,
    }
}

/// Every run folder (results.csv beside spec.toml) under `dir`, sorted.
fn runs_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for p in dirs {
        let run = RunFolder::new(&p);
        if run.spec_toml().is_file() && run.results_csv().is_file() {
            out.push(p.clone());
        }
        runs_under(&p, out);
    }
}

/// Why `folder` is not a run folder, in the words of what it holds.
fn not_a_run(folder: &Path) -> String {
    let run = RunFolder::new(folder);
    if run.file(RunFolder::BISECT_ARGS).is_file() {
        "a bisect's folder (its results.csv gathers the runs under runs/), no spec.toml".into()
    } else if run.results_csv().is_file() {
        "results.csv without a spec.toml".into()
    } else {
        "no spec.toml or results.csv".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(dir: &Path, names: &[&str]) {
        std::fs::create_dir_all(dir).unwrap();
        for n in names {
            std::fs::write(dir.join(n), "").unwrap();
        }
    }

    #[test]
    fn a_folder_given_is_a_run_or_holds_the_runs_under_it_sorted() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        touch(&root.join("run"), &["spec.toml"]);
        assert_eq!(classify(&root.join("run")), Given::Run(root.join("run")));
        // Runs at any depth, sorted; a folder with only one of the two
        // files is not one, and a run's own folders are looked in too.
        touch(&root.join("nights/b"), &["spec.toml", "results.csv"]);
        touch(&root.join("nights/a"), &["spec.toml", "results.csv"]);
        touch(&root.join("nights/a/inner"), &["spec.toml", "results.csv"]);
        touch(&root.join("nights/c"), &["results.csv"]);
        touch(
            &root.join("nights/d/deep/er"),
            &["spec.toml", "results.csv"],
        );
        assert_eq!(
            classify(&root.join("nights")),
            Given::Holder {
                why: "no spec.toml or results.csv".into(),
                runs: vec![
                    root.join("nights/a"),
                    root.join("nights/a/inner"),
                    root.join("nights/b"),
                    root.join("nights/d/deep/er"),
                ],
            }
        );
    }

    #[test]
    fn a_folder_that_is_no_run_says_what_it_holds() {
        let d = tempfile::tempdir().unwrap();
        let bisect = d.path().join("bisect");
        touch(&bisect, &["bisect.args", "results.csv"]);
        touch(&bisect.join("runs/s1"), &["spec.toml", "results.csv"]);
        assert_eq!(
            classify(&bisect),
            Given::Holder {
                why:
                    "a bisect's folder (its results.csv gathers the runs under runs/), no spec.toml"
                        .into(),
                runs: vec![bisect.join("runs/s1")],
            }
        );
        let csv = d.path().join("csv");
        touch(&csv, &["results.csv"]);
        let Given::Holder { why, runs } = classify(&csv) else {
            panic!("not a run")
        };
        assert_eq!(
            (why.as_str(), runs.len()),
            ("results.csv without a spec.toml", 0)
        );
        // A folder that is not there holds no run.
        let Given::Holder { runs, .. } = classify(&d.path().join("missing")) else {
            panic!("not a run")
        };
        assert!(runs.is_empty());
    }
}
