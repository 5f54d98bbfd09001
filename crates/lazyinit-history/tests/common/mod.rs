//! Real databases for the tests: a SQLite file in a temporary directory,
//! and a fresh database on the PostgreSQL server scripts/test.sh starts
//! (`LAZYINIT_TEST_POSTGRES`). Without that server the tests fail.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use lazyinit_core::layout::RunFolder;
use lazyinit_history::provenance::{CellFacts, RunFacts};
use lazyinit_history::{DbUrl, RunImport};

/// A new, empty database on the test server.
pub fn fresh_postgres(tag: &str) -> DbUrl {
    DbUrl::Postgres(lazyinit_core::testing::fresh_postgres(tag))
}

pub fn fresh_sqlite(dir: &Path) -> DbUrl {
    DbUrl::Sqlite(dir.join("history.sqlite"))
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A committed run folder as `import` reads it, without its spec check
/// (the CLI's tests cover that; here the folder's rows are trusted).
pub fn committed(folder: &Path) -> RunImport {
    let run = RunFolder::new(folder);
    let rows = run.results_csv().rows().unwrap();
    let cells = rows
        .iter()
        .map(|r| (r.cell_id.clone(), CellFacts::of(&run.cell(&r.cell_id))))
        .collect();
    RunImport {
        folder: folder
            .strip_prefix(repo())
            .unwrap_or(folder)
            .display()
            .to_string(),
        rows,
        facts: RunFacts::of(&run),
        cells,
    }
}

/// The 20 quick runs of results/l-stability-timer, in the order they ran.
pub fn twenty_nights() -> Vec<RunImport> {
    let dir = repo().join("results/l-stability-timer");
    let mut runs: Vec<RunImport> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("results.csv").is_file())
        .map(|p| committed(&p))
        .collect();
    runs.sort_by(|a, b| a.rows[0].started_at.cmp(&b.rows[0].started_at));
    assert_eq!(runs.len(), 20, "the 20 quick runs");
    runs
}
