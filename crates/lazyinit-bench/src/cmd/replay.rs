//! `lazyinit-bench replay`: the early-stop estimator over finished full
//! runs, predicted vs measured for each N (docs/estimates.md).

use std::path::PathBuf;

use anyhow::Context;
use lazyinit_core::exit::bad_input;
use lazyinit_report::input::load;
use lazyinit_report::render::{self, Format};

#[derive(clap::Args)]
pub struct ReplayArgs {
    /// Result CSVs of full runs (results/<run>/results.csv), each with its
    /// cells' groups.csv (or groups.csv.gz) beside it.
    #[arg(required = true)]
    pub csv: Vec<PathBuf>,
    /// The N to replay `estimate-after = N` at (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "25,50,100,200,500",
        value_name = "N"
    )]
    pub after: Vec<u64>,
    /// Error from the first group, in percent, that counts as within.
    #[arg(long, default_value_t = 0.5, value_name = "PCT")]
    pub tolerance: f64,
    /// markdown, csv or json [default: from --out's extension, else markdown].
    #[arg(long, value_parser = clap::value_parser!(Format))]
    pub format: Option<Format>,
    /// Write the table here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub async fn run(a: ReplayArgs) -> anyhow::Result<u8> {
    if !(a.tolerance.is_finite() && a.tolerance > 0.0) {
        return Err(bad_input("--tolerance must be a positive percentage").into());
    }
    for &n in &a.after {
        lazyinit_orchestrator::spec::check_estimate_after(n)
            .map_err(|e| bad_input(e.replace("estimate-after", "--after")))?;
    }
    let format = a
        .format
        .or_else(|| a.out.as_deref().and_then(Format::from_extension))
        .unwrap_or(Format::Markdown);
    if !matches!(format, Format::Markdown | Format::Csv | Format::Json) {
        return Err(bad_input("replay writes markdown, csv or json").into());
    }
    let out = super::report::Output::open(&a.out, &super::report::csv_reads(&a.csv))?;
    let rows = load(&a.csv).map_err(lazyinit_core::exit::refused)?;
    let r = lazyinit_report::replay::replay(&rows, &a.after, a.tolerance);
    let text = match format {
        Format::Csv => render::replay::csv(&r),
        Format::Json => render::json::render(&r),
        _ => render::replay::markdown(&r),
    };
    for (name, why) in &r.skipped {
        eprintln!("left out {name}: {why}");
    }
    // Before writing: nothing to replay leaves no (empty) table behind.
    if r.runs.is_empty() {
        return Err(bad_input(
            "no full run with per-group data to replay: pass results.csv files of runs that kept \
             their cells' groups.csv (or groups.csv.gz)",
        )
        .into());
    }
    out.finish(&text).context("cannot write the replay")?;
    Ok(lazyinit_core::exit::OK)
}
