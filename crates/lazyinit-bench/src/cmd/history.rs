//! `history`: every run in a database, change points across runs, and a
//! gate that knows the past (docs/history.md). Thin over lazyinit-history.

use lazyinit_core::exit::ExitCode;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use lazyinit_core::exit::{self, bad_input};
use lazyinit_core::output::Reads;
use lazyinit_core::RunFolder;
use lazyinit_history::changes::AlertState;
use lazyinit_history::check;
use lazyinit_history::import::{self, Given};
use lazyinit_history::provenance::HostFacts;
use lazyinit_history::render::{self, Format};
use lazyinit_history::{Access, ChangeOptions, DbUrl, History, RunImport, SeriesFilter};
use lazyinit_report::cells::Metric;

use super::providers;

#[derive(Subcommand)]
pub enum HistoryCmd {
    /// Record run folders in the history (idempotent; one transaction per run).
    Import(ImportArgs),
    /// Each series over time: run, date, kernel, value, L, CI.
    Show(ShowArgs),
    /// Where each series changed (E-Divisive means with a t-test, as Otava does).
    Changes(ChangesArgs),
    /// Judge a run against its series' history: exit 0 pass (or unknown), 1 a fail or an error, 2 bad input.
    Check(CheckArgs),
    /// Set an alert's state: acknowledged (default) or invalid; it stops failing `check`.
    Ack(AckArgs),
    /// Write the history as a static site (index, a page per series; no network needed).
    Publish(super::publish::PublishArgs),
    /// Fill a history with generated nightly runs (benchmarks, the dashboard).
    #[command(hide = true)]
    Generate(GenerateArgs),
}

#[derive(Args, Clone)]
pub struct DbArg {
    /// `sqlite:PATH` or `postgres://USER@HOST:PORT/DB` (default:
    /// $LAZYINIT_HISTORY, else sqlite:<state dir>/history.sqlite).
    #[arg(long)]
    pub db: Option<String>,
}

impl DbArg {
    /// The history's URL; a SQLite file that is a run's evidence, or lies
    /// in a cell folder, is refused here, before it is opened (every
    /// history command takes its URL from here first).
    pub fn url(&self) -> anyhow::Result<DbUrl> {
        let url = DbUrl::resolve(self.db.as_deref()).map_err(bad_input)?;
        check_db_out("db", &url)?;
        Ok(url)
    }
}

/// A history is written (imports, alerts, migrations): a SQLite file is
/// an output, and never a run's evidence (`lazyinit_core::output`).
pub fn check_db_out(flag: &'static str, url: &DbUrl) -> anyhow::Result<()> {
    match url {
        DbUrl::Sqlite(p) => {
            lazyinit_core::output::check_not_evidence(flag, p).map_err(|e| exit::refused(e).into())
        }
        DbUrl::Postgres(_) => Ok(()),
    }
}

#[derive(Args)]
pub struct ImportArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Name every run imported (a release, `6.1.160`), for `check
    /// --baseline label:L`; a run named before is renamed.
    #[arg(long)]
    pub label: Option<String>,
    /// Run folders (each with results.csv and spec.toml), or folders
    /// holding run folders (a bisect's, a series'): each run under them.
    #[arg(required = true)]
    pub folders: Vec<PathBuf>,
}

#[derive(Args)]
pub struct SeriesArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Only series whose id matches (a glob, or a substring).
    #[arg(long, value_parser = clap::value_parser!(SeriesFilter))]
    pub cell: Option<SeriesFilter>,
    /// lazyinit_s, ms_per_group or from_first_group_s (the part the random
    /// start delay does not move).
    #[arg(long, default_value = "from_first_group_s", value_parser = clap::value_parser!(Metric))]
    pub metric: Metric,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub series: SeriesArgs,
    /// text, csv or json.
    #[arg(long, default_value = "text", value_parser = clap::value_parser!(Format))]
    pub format: Format,
}

#[derive(Args)]
pub struct TestArgs {
    /// Significance level of a change (between 0 and 1, both excluded).
    #[arg(long, default_value_t = DEFAULT_MAX_P)]
    pub max_p: f64,
    /// Smallest change kept, in percent (0 to 10000).
    #[arg(long, default_value_t = 0.0)]
    pub min_change_pct: f64,
    /// `check`: level at which the new run alone, off the level of the
    /// runs since the latest change, fails (between 0 and 1, both
    /// excluded).
    #[arg(long, default_value_t = 0.01)]
    pub run_p: f64,
    /// `check`: the smallest step of the new run alone off its level that
    /// fails on time, in percent of the level, 0 to 10000 (an L change
    /// fails at any).
    #[arg(long, default_value_t = 1.5)]
    pub run_min_change_pct: f64,
}

/// `--max-p`'s default: with `--min-change-pct 0`, the thresholds the
/// stored alerts are raised and closed at.
const DEFAULT_MAX_P: f64 = 0.001;

/// The largest `--min-change-pct`: a change of 100 times the level.
const MAX_CHANGE_PCT: f64 = 10_000.0;

impl TestArgs {
    /// Whether the change points are sought at the default thresholds
    /// (`--run-p` and `--run-min-change-pct` are the gate's, not theirs).
    fn default_change_thresholds(&self) -> bool {
        self.max_p == DEFAULT_MAX_P && self.min_change_pct == 0.0
    }

    fn options(&self) -> anyhow::Result<ChangeOptions> {
        if !(self.max_p > 0.0 && self.max_p < 1.0) {
            return Err(bad_input("--max-p: use a level between 0 and 1, e.g. 0.001").into());
        }
        // Finite and bounded (issue 41): inf or nan is no threshold.
        if !(self.min_change_pct.is_finite()
            && (0.0..=MAX_CHANGE_PCT).contains(&self.min_change_pct))
        {
            return Err(bad_input(format!(
                "--min-change-pct: {} is not a threshold; use a percentage from 0 to {MAX_CHANGE_PCT}",
                self.min_change_pct
            ))
            .into());
        }
        if !(self.run_p > 0.0 && self.run_p < 1.0) {
            return Err(bad_input("--run-p: use a level between 0 and 1, e.g. 0.01").into());
        }
        // The same bounds (issue 52: inf and 1e308 were taken, and no
        // run could fail on time).
        if !(self.run_min_change_pct.is_finite()
            && (0.0..=MAX_CHANGE_PCT).contains(&self.run_min_change_pct))
        {
            return Err(bad_input(format!(
                "--run-min-change-pct: {} is not a threshold; use a percentage from 0 to {MAX_CHANGE_PCT}",
                self.run_min_change_pct
            ))
            .into());
        }
        let mut o = ChangeOptions {
            run_p: self.run_p,
            run_min_magnitude: self.run_min_change_pct / 100.0,
            ..ChangeOptions::default()
        };
        o.edivisive.max_p = self.max_p;
        o.edivisive.min_magnitude = self.min_change_pct / 100.0;
        Ok(o)
    }
}

#[derive(Args)]
pub struct ChangesArgs {
    #[command(flatten)]
    pub series: SeriesArgs,
    #[command(flatten)]
    pub test: TestArgs,
    /// text or json.
    #[arg(long, default_value = "text", value_parser = clap::value_parser!(Format))]
    pub format: Format,
    /// Raise and close the stored alerts at these --max-p and
    /// --min-change-pct. Without it, thresholds other than the defaults
    /// (the ones `check` and the nightly keep the alerts at) are a look:
    /// the changes are printed, no alert is raised or closed.
    #[arg(long)]
    pub update_alerts: bool,
}

#[derive(Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The new run's folder (imported first if the history lacks it).
    pub folder: PathBuf,
    #[arg(long, default_value = "from_first_group_s", value_parser = clap::value_parser!(Metric))]
    pub metric: Metric,
    #[command(flatten)]
    pub test: TestArgs,
    /// text, json or junit.
    #[arg(long, default_value = "text", value_parser = clap::value_parser!(Format))]
    pub format: Format,
    /// Write the report here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// A series too new to judge (UNKNOWN) fails the gate too (exit 1).
    #[arg(long)]
    pub require_history: bool,
    /// Judge the run against these runs of the same cell and testbed, of
    /// any kernel source, instead of its series' history: run:KEY,
    /// date:FROM..TO (YYYY-MM-DD), kernel:RELEASE (a release, source or
    /// identity) or label:L (`import --label`). Repeat to take the union.
    #[arg(long, value_parser = clap::value_parser!(check::Baseline))]
    pub baseline: Vec<check::Baseline>,
}

#[derive(Args)]
pub struct AckArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The alert's id (8 hex, from `changes` or `check`).
    pub id: String,
    /// Why: kept with the alert.
    #[arg(long, required = true)]
    pub note: String,
    /// acknowledged (a real change, accepted) or invalid (not a real change).
    #[arg(long, default_value = "acknowledged", value_parser = clap::value_parser!(AlertState))]
    pub state: AlertState,
}

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Nightly runs to make, 1 to 100000 (8 rows each).
    #[arg(long, default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=lazyinit_history::generate::MAX_RUNS as u64))]
    pub runs: u64,
    #[arg(long, default_value_t = 28)]
    pub seed: u64,
}

/// The history `--db` names: a read (`Access::Read`) creates nothing.
fn open(db: &DbArg, access: Access) -> anyhow::Result<History> {
    let url = db.url()?;
    Ok(History::open_as(&url, access)?)
}

/// A run folder read and checked against its own spec.toml.
pub fn read_folder(folder: &Path) -> anyhow::Result<RunImport> {
    Ok(read_run(folder)?.0)
}

/// A run folder read and checked, with the cell ids its spec plans.
pub fn read_run(folder: &Path) -> anyhow::Result<(RunImport, Vec<String>)> {
    let ran = lazyinit_orchestrator::ran::read::<providers::Configs>(folder)?;
    Ok((
        RunImport::read(folder, &ran.cells, &ran.run_id)?,
        ran.cell_ids(),
    ))
}

pub async fn run(c: HistoryCmd) -> anyhow::Result<u8> {
    // The history's clients are synchronous: keep them off the runtime.
    tokio::task::spawn_blocking(move || run_blocking(c)).await?
}

fn run_blocking(c: HistoryCmd) -> anyhow::Result<u8> {
    match c {
        HistoryCmd::Import(a) => import(a),
        HistoryCmd::Show(a) => show(a),
        HistoryCmd::Changes(a) => changes(a),
        HistoryCmd::Check(a) => check_cmd(a),
        HistoryCmd::Ack(a) => ack(a),
        HistoryCmd::Publish(a) => super::publish::publish(a),
        HistoryCmd::Generate(a) => generate(a),
    }
}

// Long: being moved out of the binary into the history crate (issue 53 item 1), not split here meanwhile.
fn import(a: ImportArgs) -> anyhow::Result<u8> {
    // The history is an output: checked before any folder is read.
    a.db.url()?;
    // Every folder is read and checked before the database is touched:
    // one bad run folder imports nothing. A folder that is not a run is
    // said so, and the runs under it imported.
    let mut folders = Vec::new();
    for f in &a.folders {
        match import::classify(f) {
            Given::Run(p) => folders.push(p),
            Given::Holder { why, runs } => {
                let name = f.display().to_string();
                let name = name.trim_end_matches('/');
                match runs.len() {
                    0 => println!(
                        "{name}: not a run folder ({why}), and no run folder under it: skipped"
                    ),
                    n => println!("{name}: not a run folder ({why}): {n} run folder(s) under it"),
                }
                folders.extend(runs);
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    folders.retain(|f| seen.insert(f.clone()));
    if folders.is_empty() {
        return Err(bad_input(
            "no run folder given or under the folders given: give folders with results.csv beside spec.toml",
        )
        .into());
    }
    // A run still in progress (its .lock held) or with no row yet is
    // skipped with a line, the others imported (issue 52: `import
    // results/*/` refused them all for one live run).
    let mut runs = Vec::new();
    let given = folders.len();
    for f in &folders {
        let name = f.display().to_string();
        let name = name.trim_end_matches('/');
        if let Some(holder) = in_progress(f) {
            println!(
                "{name}: a run in progress (its .lock {holder}): skipped; import it once it ends"
            );
            continue;
        }
        match read_folder(f) {
            Ok(r) => runs.push(r),
            Err(e) if no_rows_yet(&e) => println!(
                "{name}: {}: skipped (a run not started, or stopped before its first row)",
                lazyinit_history::import::NO_ROWS
            ),
            Err(e) => return Err(e),
        }
    }
    if runs.is_empty() {
        return Err(bad_input(format!(
            "nothing to import: the {given} run folder(s) given were skipped (above)"
        ))
        .into());
    }
    let mut h = open(&a.db, Access::Create)?;
    // A run the history holds with other rows is refused before any run
    // is imported (each import refuses it too, in its transaction).
    for r in &runs {
        h.refuse_changed(r)?;
    }
    for r in &runs {
        let o = h.import(r)?;
        if let Some(l) = &a.label {
            h.set_label(&o.run_key, l)?;
        }
        println!(
            "{}: {} ({} rows added, {} already there){}",
            o.folder,
            if o.new_run { "new run" } else { "known run" },
            o.rows_added,
            o.rows_known,
            a.label
                .as_ref()
                .map(|l| format!(", labelled {l}"))
                .unwrap_or_default()
        );
    }
    Ok(exit::OK)
}

/// Who holds `folder`'s `.lock` (a run writing there now), from
/// /proc/locks: the lock file is never opened, so a run starting at this
/// moment is not kept from taking it.
fn in_progress(folder: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let lock = RunFolder::new(folder).lock();
    let m = std::fs::symlink_metadata(lock.shown()).ok()?;
    if !m.file_type().is_file() {
        return None;
    }
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = lazyinit_orchestrator::token::flock_holder(&locks, m.ino())?;
    let note = lock.read_to_string().unwrap_or_default();
    Some(lazyinit_orchestrator::token::describe_holder(
        Some(pid),
        &note,
    ))
}

/// Whether `e` is a run folder's refusal for having no row yet.
fn no_rows_yet(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<lazyinit_history::HistoryError>(),
        Some(lazyinit_history::HistoryError::Refused { message, .. })
            if message == lazyinit_history::import::NO_ROWS
    )
}

fn show(a: ShowArgs) -> anyhow::Result<u8> {
    let mut h = open(&a.series.db, Access::Read)?;
    let series = h.series(a.series.metric, a.series.cell.as_ref())?;
    print!(
        "{}",
        match a.format {
            Format::Text => render::series_text(&series),
            Format::Csv => render::series_csv(&series),
            Format::Json => render::json(&series),
            Format::Junit =>
                return Err(bad_input("--format junit is a format of `history check`").into()),
        }
    );
    Ok(exit::OK)
}

fn changes(a: ChangesArgs) -> anyhow::Result<u8> {
    if !matches!(a.format, Format::Text | Format::Json) {
        return Err(bad_input("history changes: --format text or json").into());
    }
    let opts = a.test.options()?;
    let mut h = open(&a.series.db, Access::Read)?;
    let s = &a.series;
    let series = h.series(s.metric, s.cell.as_ref())?;
    let mut found = lazyinit_history::changes::find(&series, &opts);
    // The stored alerts are kept at the default thresholds (those `check`
    // and the nightly use): a look at other thresholds changes none of
    // them unless --update-alerts says so (issue 52: `--min-change-pct 50`
    // closed a real -11% change's alert for good).
    let record = a.update_alerts || a.test.default_change_thresholds();
    let closed_text = if record {
        // Each change gets an alert (state new) a person can triage.
        let alerts = h.raise(&found)?;
        for c in &mut found {
            c.attach(&alerts);
        }
        // An open alert no change point supports any longer is closed,
        // with the reason (docs/history.md, "Closing alerts").
        let closed = h.close_unsupported(&series, &found, &opts)?;
        lazyinit_history::changes::closings_text(&closed)
    } else {
        let alerts = h.alerts()?;
        for c in &mut found {
            c.attach(&alerts);
        }
        let would = lazyinit_history::changes::unsupported(&series, &found, &alerts, &opts);
        format!(
            "note: --max-p {} --min-change-pct {} are not the thresholds the alerts are kept at \
             (--max-p {DEFAULT_MAX_P} --min-change-pct 0): no alert raised or closed{}; \
             pass --update-alerts to record these thresholds' answer\n",
            a.test.max_p,
            a.test.min_change_pct,
            match would.len() {
                0 => String::new(),
                n => format!(", {n} open alert(s) these thresholds do not support left open"),
            }
        )
    };
    let n = series.len();
    match a.format {
        Format::Json => {
            print!("{}", render::json(&found));
            eprint!("{closed_text}");
        }
        _ => print!("{}{closed_text}", render::changes_text(&found, n)),
    }
    Ok(exit::OK)
}

fn check_cmd(a: CheckArgs) -> anyhow::Result<u8> {
    if a.format == Format::Csv {
        return Err(bad_input("history check: --format text, json or junit").into());
    }
    let opts = a.test.options()?;
    // A run in progress is judged when it ends, as `import` takes it
    // then: its rows so far are not the run (a 1-row run judged ERROR).
    if let Some(holder) = in_progress(&a.folder) {
        return Err(bad_input(format!(
            "{}: a run in progress (its .lock {holder}): check it once it ends",
            a.folder.display()
        ))
        .into());
    }
    // Opened before the history is touched: never the run's files, the
    // database, or a place that cannot take it.
    let reads = db_reads(&a.db.url()?, Reads::new().run_folder(&a.folder));
    let out = super::report::Output::open(&a.out, &reads)?;
    let (run, planned) = read_run(&a.folder)?;
    let mut h = open(&a.db, Access::Create)?;
    // What the gate cannot judge is refused before the run is imported:
    // rows that differ from the stored run's, a date before the history,
    // a run of another spec than its series' (unless runs are chosen).
    h.refuse_unjudgeable(&run, a.baseline.is_empty())?;
    // A baseline that chooses no run is refused, naming what there is
    // (before: every cell UNKNOWN, exit 0).
    if let Some(key) = lazyinit_history::import::run_key(&run.rows) {
        check::refuse_empty_baseline(&mut h, &key, &a.baseline)?;
    }
    let outcome = h.import(&run)?;
    let mut report = if a.baseline.is_empty() {
        check::check(&mut h, &outcome.run_key, &planned, a.metric, &opts)?
    } else {
        let (key, b) = (&outcome.run_key, &a.baseline);
        check::check_against(&mut h, key, &planned, a.metric, &opts, b)?
    };
    report.require_history = a.require_history;
    let text = match a.format {
        Format::Junit => render::check_junit(&report),
        Format::Json => render::json(&report),
        _ => render::check_text(&report),
    };
    out.finish(&text)?;
    if a.out.is_some() || a.format != Format::Text {
        eprint!("{}", render::check_text(&report));
    }
    Ok(report.exit_code())
}

/// `reads` and the history's files, when it is a SQLite file.
pub fn db_reads(url: &DbUrl, reads: Reads) -> Reads {
    match url {
        DbUrl::Sqlite(p) => reads.sqlite(p),
        DbUrl::Postgres(_) => reads,
    }
}

fn ack(a: AckArgs) -> anyhow::Result<u8> {
    let mut h = open(&a.db, Access::Read)?;
    let alert = h.set_alert_state(&a.id, a.state, &a.note)?;
    println!(
        "{} {} ({}): {}",
        alert.alert_id,
        alert.state.as_str(),
        alert.series,
        a.note
    );
    Ok(exit::OK)
}

fn generate(a: GenerateArgs) -> anyhow::Result<u8> {
    // Bounded by clap (1..=MAX_RUNS), so the count fits a usize.
    let runs = a.runs as usize;
    let mut h = open(&a.db, Access::Create)?;
    let t = std::time::Instant::now();
    // One transaction: a generate stopped half-way (an error, a kill)
    // leaves the history as it was; a history of real runs is refused.
    use lazyinit_history::generate::{runs_with, Noise};
    let n = h.import_generated(runs_with(runs, a.seed, Noise::Uniform))?;
    eprintln!(
        "{} generated runs in {} ({:.2} s)",
        n,
        h.url(),
        t.elapsed().as_secs_f64()
    );
    Ok(exit::OK)
}

/// What `run --history` imported as the run went: the rows (cell ids)
/// of its last import that succeeded (each import is of the whole folder,
/// so those rows are in the history), and how many imports failed.
#[derive(Debug, Default)]
pub struct LiveImports {
    imported: std::collections::BTreeSet<String>,
    failed: usize,
}

/// Imports the run folder into the history each time a cell finishes,
/// passing the events on; what it imported is kept in the returned
/// [`LiveImports`] for [`finish_live_import`] (a failure here is logged,
/// retried at the next cell and at the end, and never lost: issue 52).
pub fn live_import(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<lazyinit_core::events::Event>,
    url: DbUrl,
    folder: PathBuf,
    qemu: String,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<lazyinit_core::events::Event>,
    std::sync::Arc<std::sync::Mutex<LiveImports>>,
) {
    let (tx, out) = tokio::sync::mpsc::unbounded_channel();
    let state = std::sync::Arc::new(std::sync::Mutex::new(LiveImports::default()));
    let kept = state.clone();
    tokio::spawn(async move {
        while let Some(e) = rx.recv().await {
            let done = matches!(e, lazyinit_core::events::Event::Finished { .. });
            let _ = tx.send(e);
            if done {
                let (db, folder, qemu) = (url.clone(), folder.clone(), qemu.clone());
                let r =
                    tokio::task::spawn_blocking(move || import_whole(&db, &folder, &qemu)).await;
                let mut st = kept.lock().unwrap();
                match r {
                    Ok(Ok(cells)) => st.imported.extend(cells),
                    Ok(Err(e)) => {
                        st.failed += 1;
                        tracing::error!(
                            "history {url}: cannot import the row (retried at the next cell and at the end of the run): {}",
                            crate::fail::text(&e)
                        )
                    }
                    Err(e) => {
                        st.failed += 1;
                        tracing::error!("history {url}: {e}")
                    }
                }
            }
        }
    });
    (out, state)
}

/// The whole run folder imported (idempotent: rows there already are
/// kept); the cell ids of its rows, all now in the history. A folder with
/// no row yet imports nothing.
fn import_whole(url: &DbUrl, folder: &Path, qemu: &str) -> anyhow::Result<Vec<String>> {
    let mut run = match read_folder(folder) {
        Ok(r) => r,
        Err(e) if no_rows_yet(&e) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    run.facts.host = HostFacts::this_host(qemu);
    History::open(url)?.import(&run)?;
    Ok(run.rows.iter().map(|r| r.cell_id.clone()).collect())
}

/// The end of `run --history`: the folder imported once more (what a
/// failed import left out goes in now), or one line naming the rows not
/// in the history, why, and the `history import` command that retries.
/// Ok when every row of the folder is in the history.
pub fn finish_live_import(
    url: &DbUrl,
    folder: &Path,
    qemu: &str,
    live: &LiveImports,
) -> Result<(), String> {
    let e = match import_whole(url, folder, qemu) {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    let rows = RunFolder::new(folder)
        .results_csv()
        .rows()
        .unwrap_or_default();
    let missing: Vec<&str> = rows
        .iter()
        .map(|r| r.cell_id.as_str())
        .filter(|c| !live.imported.contains(*c))
        .collect();
    if missing.is_empty() {
        // Every row went in with an import before: nothing is lost.
        return Ok(());
    }
    let mut named = missing
        .iter()
        .take(4)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if missing.len() > 4 {
        named.push_str(&format!(" and {} more", missing.len() - 4));
    }
    Err(format!(
        "--history {url}: {} of the run's {} rows not imported ({named}): {}; import them with: lazyinit-bench history import --db {url} {}",
        missing.len(),
        rows.len(),
        exit::one_line_text(&crate::fail::text(&e)),
        folder.display()
    ))
}

/// A run's exit code once rows of it are missing from its history
/// (docs/usage.md, "Exit codes"): 3, the history's failure, unless the
/// run's own code already says more (3, 4 or 130 are kept; a regression
/// or a failed cell, 1, gives way to 3, its line printed all the same).
pub fn code_with_rows_not_imported(code: u8) -> u8 {
    match code {
        exit::OK | exit::REGRESSION_OR_CELL_FAILED => exit::INFRASTRUCTURE,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A committed run folder copied into `dir` (results.csv, spec.toml,
    /// command.txt and its cell folders).
    fn committed_run(dir: &Path) -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../results/l-stability-timer");
        let mut nights: Vec<PathBuf> = std::fs::read_dir(&src)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("results.csv").is_file())
            .collect();
        nights.sort();
        let from = &nights[0];
        let to = dir.join("run");
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(&to)
            .status()
            .unwrap();
        assert!(status.success());
        to
    }

    /// Issue 52: `run --history` whose imports fail ends with one line
    /// naming the rows not in the history, why, and the `history import`
    /// command that retries, and a non-zero exit (3, or the run's own
    /// 3/4/130); a failure an import made up for later (the final import
    /// took the rows, or an earlier one had them) is no failure. Before,
    /// each failure was a log line and the run exited 0.
    #[test]
    fn rows_a_live_import_left_out_are_named_and_fail_the_run() {
        let d = tempfile::tempdir().unwrap();
        let run = committed_run(d.path());
        let rows = RunFolder::new(&run).results_csv().rows().unwrap();
        assert!(!rows.is_empty());
        let notes = d.path().join("notes.txt");
        std::fs::write(&notes, "not a history\n").unwrap();
        let bad = DbUrl::Sqlite(notes.clone());
        let qemu = "qemu-system-x86_64";
        let line = finish_live_import(&bad, &run, qemu, &LiveImports::default()).unwrap_err();
        let n = rows.len();
        assert!(
            line.starts_with(&format!(
                "--history sqlite:{}: {n} of the run's {n} rows not imported ({}",
                notes.display(),
                rows[0].cell_id
            )),
            "{line}"
        );
        assert!(
            line.ends_with(&format!(
                "; import them with: lazyinit-bench history import --db sqlite:{} {}",
                notes.display(),
                run.display()
            )),
            "{line}"
        );
        assert!(line.contains("not a SQLite database"), "{line}");
        assert!(!line.contains('\n'), "{line}");
        assert_eq!(std::fs::read_to_string(&notes).unwrap(), "not a history\n");
        // Rows an earlier import took are not lost.
        let all = LiveImports {
            imported: rows.iter().map(|r| r.cell_id.clone()).collect(),
            failed: 1,
        };
        assert_eq!(finish_live_import(&bad, &run, qemu, &all), Ok(()));
        // A history that takes them: the final import puts them in.
        let good = DbUrl::Sqlite(d.path().join("h.sqlite"));
        History::open(&good).unwrap();
        assert_eq!(
            finish_live_import(&good, &run, qemu, &LiveImports::default()),
            Ok(())
        );
        assert_eq!(
            History::open(&good).unwrap().stored_rows().unwrap().len(),
            n
        );
        // The exit code says so.
        assert_eq!(code_with_rows_not_imported(exit::OK), exit::INFRASTRUCTURE);
        assert_eq!(
            code_with_rows_not_imported(exit::REGRESSION_OR_CELL_FAILED),
            exit::INFRASTRUCTURE
        );
        for kept in [exit::INFRASTRUCTURE, exit::MISSING_TOOL, exit::INTERRUPTED] {
            assert_eq!(code_with_rows_not_imported(kept), kept);
        }
    }
}
