//! `lazyinit-bench report` and `compare`: thin wrappers over lazyinit-report.

use lazyinit_core::exit::ExitCode;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use lazyinit_core::exit::bad_input;
use lazyinit_core::output::{self, OutputFile, Reads};
use lazyinit_report::compare::{compare as compare_cells, CompareOptions, KeyField};
use lazyinit_report::input::load;
use lazyinit_report::render::{self, Format};
use lazyinit_report::{plot, Metric};

#[derive(clap::Args)]
pub struct ReportArgs {
    /// Result CSV files (results/<run-id>/results.csv); rows of all are pooled
    /// per cell, and cells never mix providers, machines, accels or kernels.
    #[arg(required = true)]
    pub csv: Vec<PathBuf>,
    /// Output format: markdown, csv, json, or kcidb (every row and metric as
    /// one KCIDB report for KernelCI) [default: from --out's extension, else markdown].
    /// (junit is for `compare`.)
    #[arg(long, value_parser = clap::value_parser!(Format))]
    pub format: Option<Format>,
    /// With --format kcidb: the CI system's KCIDB origin, which prefixes
    /// every id (lowercase letters, digits, underscores).
    #[arg(long, value_name = "NAME")]
    pub origin: Option<String>,
    /// With --format kcidb: the cache whose kernel manifests give compilers,
    /// patches and files (default: $LAZYINIT_CACHE_DIR or ~/.cache/lazyinit-bench).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Also draw an SVG of the cells (bars, 95% CI, model, 2021); when runs
    /// have groups.csv beside them, a cycle-time plot goes to <PATH>-cycles.svg.
    #[arg(long, value_name = "PATH")]
    pub svg: Option<PathBuf>,
    /// What to aggregate: lazyinit_s (mount to thread exit), ms_per_group,
    /// or from_first_group_s (lazyinit_s less the start delay and prefetch).
    #[arg(long, default_value = "lazyinit_s", value_parser = clap::value_parser!(Metric))]
    pub metric: Metric,
    /// Write the report here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct CompareArgs {
    /// Baseline result CSVs (comma-separated or repeated).
    #[arg(long, required = true, value_delimiter = ',')]
    pub baseline: Vec<PathBuf>,
    /// Candidate result CSVs (comma-separated or repeated).
    #[arg(long, required = true, value_delimiter = ',')]
    pub candidate: Vec<PathBuf>,
    /// Smallest change of a cell's mean that counts, in percent.
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    pub threshold: f64,
    /// Significance level of Welch's t-test.
    #[arg(long, default_value_t = 0.05)]
    pub alpha: f64,
    /// What to compare: lazyinit_s, ms_per_group, or from_first_group_s
    /// (lazyinit_s less first_group_s: without the random start delay).
    #[arg(long, default_value = "lazyinit_s", value_parser = clap::value_parser!(Metric))]
    pub metric: Metric,
    /// Key fields not used to match cells, e.g. `kernel_source` to gate a
    /// new kernel against the old one (each side still never pools them),
    /// or `estimated` to compare early-stop estimates with measurements.
    #[arg(long, value_delimiter = ',', value_name = "FIELD", value_parser = clap::value_parser!(KeyField))]
    pub ignore: Vec<KeyField>,
    /// Output format: markdown, csv, json, or junit (JUnit XML for CI: one
    /// test case per cell, a failure per regression) [default: from
    /// --out's extension (.md, .csv, .json, .xml), else markdown].
    #[arg(long, value_parser = clap::value_parser!(Format))]
    pub format: Option<Format>,
    /// Write the verdicts here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Where the text goes: stdout, or `--out` through `lazyinit_core::output`
/// (opened before any work, so a bad path fails at once; never an input,
/// never half a file, a symlink or device written through).
pub(crate) enum Output {
    Stdout(std::io::StdoutLock<'static>),
    File(OutputFile),
}

impl Output {
    pub(crate) fn open(out: &Option<PathBuf>, reads: &Reads) -> anyhow::Result<Self> {
        Ok(match out {
            None => Output::Stdout(std::io::stdout().lock()),
            Some(dest) => Output::File(open_file("out", dest, reads)?),
        })
    }

    /// Writes the whole text, then puts it in place.
    pub(crate) fn finish(self, text: &str) -> anyhow::Result<()> {
        match self {
            Output::Stdout(mut o) => Ok(o.write_all(text.as_bytes()).and_then(|_| o.flush())?),
            Output::File(f) => Ok(f.finish(text.as_bytes())?),
        }
    }
}

/// A file output that is refused (exit 2) when it is one of `reads`, a
/// folder, or cannot be made.
pub(crate) fn open_file(
    flag: &'static str,
    dest: &Path,
    reads: &Reads,
) -> anyhow::Result<OutputFile> {
    output::open(flag, dest, reads).map_err(|e| lazyinit_core::exit::refused(e).into())
}

/// What reading these results.csv files reads: each, its run's spec.toml
/// and its cells' folders (groups data, the files KCIDB lists).
pub(crate) fn csv_reads<'a>(csvs: impl IntoIterator<Item = &'a PathBuf>) -> Reads {
    csvs.into_iter().fold(Reads::new(), |r, c| r.results_csv(c))
}

fn format_of(format: Option<Format>, out: &Option<PathBuf>) -> Format {
    format
        .or_else(|| out.as_deref().and_then(Format::from_extension))
        .unwrap_or(Format::Markdown)
}

fn load_all(paths: &[PathBuf]) -> anyhow::Result<Vec<lazyinit_report::input::LoadedRow>> {
    load(paths).map_err(|e| lazyinit_core::exit::refused(e).into())
}

/// `x.svg` -> `x-cycles.svg`.
fn cycles_path(svg: &Path) -> PathBuf {
    let stem = svg
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    svg.with_file_name(format!("{stem}-cycles.svg"))
}

pub async fn report(a: ReportArgs) -> anyhow::Result<u8> {
    let format = format_of(a.format, &a.out);
    if format == Format::Kcidb {
        return kcidb(a);
    }
    if format == Format::Junit {
        return Err(bad_input("--format junit is a format of `compare` only").into());
    }
    if a.origin.is_some() || a.cache_dir.is_some() {
        return Err(bad_input("--origin and --cache-dir go with --format kcidb").into());
    }
    let inputs = csv_reads(&a.csv);
    // Two outputs that are one file: one would replace the other.
    if let Some(svg) = &a.svg {
        let cycles = cycles_path(svg);
        let mut all = vec![
            ("--svg", svg.as_path()),
            ("--svg's cycle plot", cycles.as_path()),
        ];
        if let Some(o) = &a.out {
            all.insert(0, ("--out", o.as_path()));
        }
        output::distinct(&all).map_err(lazyinit_core::exit::refused)?;
    }
    let out = Output::open(&a.out, &inputs)?;
    let svgs = match &a.svg {
        Some(svg) => Some((
            open_file("svg", svg, &inputs)?,
            open_file("svg", &cycles_path(svg), &inputs)?,
        )),
        None => None,
    };
    let loaded = load_all(&a.csv)?;
    let rows: Vec<_> = loaded.iter().map(|l| l.row.clone()).collect();
    let rep = lazyinit_report::build(&rows, a.metric);
    let text = match format {
        Format::Markdown => render::markdown::render(&rep),
        Format::Csv => render::csv::render(&rep),
        Format::Json | Format::Kcidb | Format::Junit => render::json::render(&rep),
    };
    out.finish(&text).context("cannot write the report")?;
    if let Some((bars, cycles)) = svgs {
        let p = plot::plots(&rep, &loaded)?;
        let path = bars.path().to_path_buf();
        bars.finish(p.bars.as_bytes())?;
        eprintln!("wrote {}", path.display());
        for w in p.warnings {
            eprintln!("warning: {w}");
        }
        // Without series the cycles output is dropped unwritten (nothing made).
        if let Some((svg, runs)) = p.cycles {
            let path = cycles.path().to_path_buf();
            cycles.finish(svg.as_bytes())?;
            eprintln!("wrote {} ({runs} runs)", path.display());
        }
    }
    Ok(lazyinit_core::exit::OK)
}

/// Every row and metric as one KCIDB report (no statistics: KernelCI
/// aggregates the tests itself).
fn kcidb(a: ReportArgs) -> anyhow::Result<u8> {
    if a.svg.is_some() {
        return Err(bad_input("--svg does not go with --format kcidb").into());
    }
    let origin = a
        .origin
        .as_deref()
        .unwrap_or(lazyinit_report::kcidb::DEFAULT_ORIGIN);
    lazyinit_report::kcidb::ids::check_origin(origin).map_err(bad_input)?;
    let cache_dir = a.cache_dir.unwrap_or_else(lazyinit_core::paths::cache_dir);
    let out = Output::open(&a.out, &csv_reads(&a.csv).tree(&cache_dir))?;
    let loaded = load_all(&a.csv)?;
    let kernels = super::kcidb::kernel_facts(&loaded, &cache_dir);
    let files = super::kcidb::run_files(&loaded);
    let rows: Vec<_> = loaded.into_iter().map(|l| l.row).collect();
    let inputs = lazyinit_report::kcidb::Inputs {
        rows: &rows,
        kernels: &kernels,
        files: &files,
    };
    let report = lazyinit_report::kcidb::export(&inputs, origin)?;
    out.finish(&lazyinit_report::kcidb::render(&report))
        .context("cannot write the KCIDB report")?;
    let manifests = kernels.values().filter(|k| k.manifest.is_some()).count();
    eprintln!(
        "KCIDB v{}.{}: {} checkout(s), {} build(s) ({manifests} with a cached manifest), {} test(s)",
        lazyinit_report::kcidb::types::MAJOR,
        lazyinit_report::kcidb::types::MINOR,
        report.checkouts.len(),
        report.builds.len(),
        report.tests.len()
    );
    Ok(lazyinit_core::exit::OK)
}

pub async fn compare(a: CompareArgs) -> anyhow::Result<u8> {
    // Written so that NaN is refused too.
    let valid = a.threshold.is_finite() && a.threshold >= 0.0 && a.alpha > 0.0 && a.alpha < 1.0;
    if !valid {
        return Err(bad_input("--threshold must be >= 0 and --alpha between 0 and 1").into());
    }
    let format = format_of(a.format, &a.out);
    if format == Format::Kcidb {
        return Err(bad_input("--format kcidb is a format of `report` only").into());
    }
    let out = Output::open(&a.out, &csv_reads(a.baseline.iter().chain(&a.candidate)))?;
    let rows = |paths: &[PathBuf]| -> anyhow::Result<Vec<_>> {
        Ok(load_all(paths)?.into_iter().map(|l| l.row).collect())
    };
    let (base, cand) = (rows(&a.baseline)?, rows(&a.candidate)?);
    let opts = CompareOptions {
        metric: a.metric,
        threshold_pct: a.threshold,
        alpha: a.alpha,
        ignore: a.ignore,
    };
    let c = compare_cells(&base, &cand, &opts)?;
    let text = match format {
        Format::Markdown => render::compare::markdown(&c),
        Format::Csv => render::compare::csv(&c),
        Format::Junit => render::junit::render(&c),
        Format::Json | Format::Kcidb => render::json::render(&c),
    };
    out.finish(&text).context("cannot write the comparison")?;
    if format != Format::Markdown || a.out.is_some() {
        eprintln!("{}", render::compare::summary_line(&c));
    }
    if !c.missing.is_empty() {
        eprintln!(
            "error: {} cell(s) present on one side only: compare runs of the same matrix",
            c.missing.len()
        );
    }
    Ok(c.exit_code())
}
