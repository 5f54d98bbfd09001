//! `lazyinit-bench`: a thin command line over the library crates.
//!
//! Each subcommand family lives in `cmd/`; this file parses, sets up
//! logging, runs one command and turns its outcome into an exit code
//! (see `lazyinit_core::exit`; a failure ends through `fail.rs`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
mod fail;

/// `--version`: the harness's version and the git commit it was built
/// from (`build.rs`: `-dirty` when a tracked file differed, `unknown`
/// outside git).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("LAZYINIT_HARNESS_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(name = "lazyinit-bench", version = VERSION, about, long_about = None)]
struct Cli {
    /// More log output on stderr (repeat for more).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build or list kernels (with and without the ext4 lazy-init fix).
    #[command(subcommand)]
    Kernel(cmd::kernel::KernelCmd),
    /// Build the QEMU of the virtual clock (`run --clock virtual`).
    #[command(subcommand)]
    Qemu(cmd::qemu::QemuCmd),
    /// Build or list guest images (initramfs with a pinned SSH server).
    #[command(subcommand)]
    Image(cmd::image::ImageCmd),
    /// Run one cell, a preset or an experiment spec.
    Run(cmd::run::RunArgs),
    /// Show what a run would do, how long and at what cost; launches nothing.
    Plan(cmd::run::PlanArgs),
    /// Make one run folder of the folders of a run's shards (`run --shard`).
    Merge(cmd::merge::MergeArgs),
    /// Turn result CSVs into tables, statistics and plots.
    Report(cmd::report::ReportArgs),
    /// Compare a candidate's results against a baseline (exit 1 on regression).
    Compare(cmd::report::CompareArgs),
    /// Replay early-stop estimates over finished full runs: predicted vs measured.
    Replay(cmd::replay::ReplayArgs),
    /// Find the first commit of a kernel git tree that moved a cell.
    Bisect(cmd::bisect::BisectArgs),
    /// One step for `git bisect run` (exit 0 good, 1 bad, 125 skip).
    BisectStep(cmd::bisect::StepArgs),
    /// Find and remove leftover cloud resources of this project.
    Cleanup(cmd::cleanup::CleanupArgs),
    /// The nightly history: import runs, show series, find changes, check a run.
    #[command(subcommand)]
    History(cmd::history::HistoryCmd),
}

/// `git bisect run`'s "abort": what `bisect-step` exits on any error
/// (git reads 1-127 but 125 as "bad").
const BISECT_ABORT: u8 = 255;

/// Whether this process is `bisect-step` (the first word that is not a
/// flag), decided before the arguments are parsed: a bad argument of
/// `bisect-step` must abort `git bisect run`, not exit 2 (issue 41). A
/// word that is no subcommand but a near miss of `bisect-step`
/// (`bisect-stp`, `bisect_step`, `bisectstep`) counts too: under `git
/// bisect run` its exit 2 would read as "bad" (issue 52).
fn is_bisect_step() -> bool {
    std::env::args_os()
        .skip(1)
        .find(|a| !a.to_string_lossy().starts_with('-'))
        .is_some_and(|a| looks_like_bisect_step(&a.to_string_lossy()))
}

fn looks_like_bisect_step(word: &str) -> bool {
    use clap::CommandFactory;
    if word == "bisect-step" {
        return true;
    }
    let known = Cli::command()
        .get_subcommands()
        .any(|c| c.get_name() == word || c.get_all_aliases().any(|a| a == word));
    !known && strsim::damerau_levenshtein(&word.to_lowercase(), "bisect-step") <= 3
}

fn main() -> ExitCode {
    lazyinit_core::set_harness_commit(env!("LAZYINIT_HARNESS_COMMIT"));
    let step = is_bisect_step();
    if step {
        // A panic is 101, which git would read as "bad": abort instead.
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            default(info);
            std::process::exit(BISECT_ABORT.into());
        }));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version are not errors: they print and exit 0.
        Err(e) if step && e.use_stderr() => {
            let _ = e.print();
            eprintln!("note: bisect-step exits {BISECT_ABORT} on bad arguments, so that `git bisect run` stops");
            return ExitCode::from(BISECT_ABORT);
        }
        Err(e) => e.exit(),
    };
    cmd::init_logging(cli.verbose);
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(match step {
                true => BISECT_ABORT,
                false => lazyinit_core::exit::INFRASTRUCTURE,
            });
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Kernel(c) => cmd::kernel::run(c).await,
            Command::Image(c) => cmd::image::run(c).await,
            Command::Qemu(c) => cmd::qemu::run(c).await,
            Command::Run(a) => cmd::run::run(a).await,
            Command::Plan(a) => cmd::run::plan(a).await,
            Command::Merge(a) => cmd::merge::run(a).await,
            Command::Report(a) => cmd::report::report(a).await,
            Command::Compare(a) => cmd::report::compare(a).await,
            Command::Replay(a) => cmd::replay::run(a).await,
            Command::Cleanup(a) => cmd::cleanup::run(a).await,
            Command::History(c) => cmd::history::run(c).await,
            Command::Bisect(a) => cmd::bisect::bisect(a).await,
            Command::BisectStep(a) => cmd::bisect::bisect_step(a).await,
        }
    });
    // Guests and temp files are owned by the commands and already gone here.
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => ExitCode::from(fail::report(&err)),
    }
}
