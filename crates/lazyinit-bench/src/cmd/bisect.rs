//! `lazyinit-bench bisect` and `bisect-step`: from two commits of a kernel
//! tree whose cell differs to the first commit that made the difference.
//! The bisection is the orchestrator's (`lazyinit_orchestrator::bisect`:
//! the lab, over `lazyinit-bisect`'s search and test); this parses the
//! arguments, resolves the clock, gives the lab this binary's providers
//! and prints (see `docs/bisect.md`).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lazyinit_bisect::log::table;
use lazyinit_core::exit;
use lazyinit_core::StorageProfile;
use lazyinit_orchestrator::bisect::{Bisection, CellArg, Metric, Provided, Request, Runner, Say};

use crate::cmd::providers::{self, Configs};

#[derive(clap::Args, Debug)]
pub struct Common {
    /// A commit where the cell is as it should be.
    #[arg(long)]
    pub good: String,
    /// A later commit (a descendant of --good) where it is not.
    #[arg(long)]
    pub bad: String,
    /// The cell: ARCH:HZ:SIZE, e.g. arm64:100:8GiB (the cheapest that
    /// tells the ends apart).
    #[arg(long)]
    pub cell: CellArg,
    /// What to compare: ms_per_group, lazyinit_s or from_first_group_s
    /// (lazyinit_s less first_group_s: the history's default).
    #[arg(long, default_value = "ms_per_group", value_parser = clap::value_parser!(Metric))]
    pub metric: Metric,
    /// Results folder (default results/bisect-<good>-<bad>-<cell>); rerun
    /// the same command to resume.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// QEMU's clock: auto (default: the virtual clock where the cell's
    /// arch cannot use KVM here, else the real one), real, or virtual /
    /// virtual:N. On the virtual clock a sample is exact: one sample of
    /// each end and of each step, and --end-samples, --max-samples and
    /// --error-rate are unused (docs/bisect.md).
    #[arg(long, default_value = "auto")]
    pub clock: lazyinit_qemu::Clock,
    /// Samples of each end (their levels and noise) before they are
    /// compared; while they are not told apart, one more of each, up to
    /// --max-samples. The real clock's.
    #[arg(long, default_value_t = 3)]
    pub end_samples: usize,
    /// Cap on the samples of one step (and of each end); undecided there,
    /// a step is skipped. The real clock's.
    #[arg(long, default_value_t = 5)]
    pub max_samples: usize,
    /// The sequential test's error rate, each way, per step.
    #[arg(long, default_value_t = 0.01)]
    pub error_rate: f64,
    #[arg(long)]
    pub storage_profile: Option<StorageProfile>,
    /// Seconds to wait for SSH after launch (1 to 86400, as `run`).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub boot_timeout: u64,
}

#[derive(clap::Args, Debug)]
pub struct BisectArgs {
    /// The kernel git tree (only read: steps are checked out privately).
    #[arg(long)]
    pub source: PathBuf,
    #[command(flatten)]
    pub common: Common,
    /// Also revert the culprit on top of --bad and check that is good.
    #[arg(long)]
    pub confirm_revert: bool,
}

#[derive(clap::Args, Debug)]
pub struct StepArgs {
    /// The tree `git bisect` checked out (its HEAD is the step).
    #[arg(long, default_value = ".")]
    pub source: PathBuf,
    #[command(flatten)]
    pub common: Common,
}

/// The clock the samples run on: `auto` is the virtual clock where KVM
/// cannot run the cell's arch on this host (so the guest runs under TCG),
/// else the real clock (KVM, or TCG where the KVM probe fails at launch).
/// Decided before the first sample: the test depends on it.
fn clock(c: &Common) -> lazyinit_qemu::Clock {
    match c.clock {
        lazyinit_qemu::Clock::Auto => match lazyinit_qemu::accel::kvm_possible(c.cell.arch) {
            true => lazyinit_qemu::Clock::Real,
            false => lazyinit_qemu::Clock::Virtual { shift: 0 },
        },
        c => c,
    }
}

/// The bisection the arguments ask for.
fn request(source: &Path, c: &Common) -> Request {
    let clock = clock(c);
    Request {
        source: source.to_path_buf(),
        good: c.good.clone(),
        bad: c.bad.clone(),
        cell: c.cell,
        metric: c.metric,
        out: c.out.clone(),
        clock: (!clock.is_real()).then(|| clock.to_string()),
        storage_profile: c.storage_profile,
        boot_timeout: Duration::from_secs(c.boot_timeout),
        end_samples: c.end_samples,
        max_samples: c.max_samples,
        error_rate: c.error_rate,
        cache: lazyinit_core::paths::cache_dir(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
    }
}

/// The bisection opened on this binary's providers, Ctrl-C stopping it.
fn open(source: &Path, c: &Common) -> anyhow::Result<Bisection<Runner<Configs>>> {
    let cache = lazyinit_core::cache_root::resolve(None)?;
    let cancel = Arc::new(AtomicBool::new(false));
    super::run::install_signal_handler(cancel.clone(), None);
    let make = Box::new(|spec: &providers::Spec| {
        let keys = providers::run_keys(spec)?;
        Ok(Provided {
            provider: providers::provider(spec, keys.dir())?,
            keys_dir: keys.dir().to_path_buf(),
            keep: Box::new(keys),
        })
    });
    let say: Say = Arc::new(|line: &str| eprintln!("{line}"));
    let opened = Bisection::open(request(source, c), Runner::new(make, cancel), say)?;
    lazyinit_core::cache_root::mark(&cache)?;
    Ok(opened)
}

pub async fn bisect(a: BisectArgs) -> anyhow::Result<u8> {
    let started = Instant::now();
    let mut b = open(&a.source, &a.common)?;
    let n = b.range.commits.len();
    eprintln!(
        "bisect: {n} commits ({} steps without skips on a line) on {}, results in {}",
        lazyinit_bisect::search::expected_steps(n),
        a.common.cell,
        b.out.folder().root().display()
    );
    let (outcome, steps) = b.bisect(a.confirm_revert).await?;
    let total = started.elapsed().as_secs_f64();
    let answer = outcome.line();
    b.record(&steps, &format!("{answer} (wall {total:.0} s this run)"))?;
    println!("{}", table(&steps, a.common.metric.name()));
    println!("{answer}");
    Ok(outcome.exit_code())
}

/// For `git bisect run`: exit 0 good, 1 bad, 125 skip (does not build,
/// boot, or decide); any error exits 255, which makes `git bisect run` stop
/// (its codes 1-127 would read as "bad").
pub async fn bisect_step(a: StepArgs) -> anyhow::Result<u8> {
    let step = async { open(&a.source, &a.common)?.step().await };
    match step.await {
        Ok(c) => Ok(c),
        Err(e) => {
            let code = crate::fail::report(&e);
            Ok(if code == exit::INTERRUPTED { code } else { 255 })
        }
    }
}
