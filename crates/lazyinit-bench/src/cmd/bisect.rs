//! `lazyinit-bench bisect` and `bisect-step`: from two commits of a kernel
//! tree whose cell differs to the first commit that made the difference.
//! The bisection is `lazyinit-bisect`'s (`drive`); this parses the
//! arguments, opens the folder and the private clone, gives the driver
//! its lab (`session`: kernels built, guests run) and prints (see
//! `docs/bisect.md`).

mod session;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lazyinit_bisect::drive::{self, Settings};
use lazyinit_bisect::log::{bisect_log, table, Step};
use lazyinit_bisect::Verdict;
use lazyinit_core::exit::{self, bad_input};
use lazyinit_core::git;
use lazyinit_core::{RunFolder, RunWriter, StorageProfile};

use session::{CellArg, Metric, Session};

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

/// Everything checked before anything is created.
struct Opened {
    session: Session,
    range: git::Range,
    head: String,
    /// The private clone's lock, waited for: one bisection of a
    /// repository at a time moves its worktree.
    _clone_lock: nix::fcntl::Flock<std::fs::File>,
}

fn lock(path: &Path) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("cannot lock {}: {e}", path.display()))
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

/// The test's settings, from the arguments.
fn settings(c: &Common) -> Settings {
    Settings {
        exact: !clock(c).is_real(),
        end_samples: c.end_samples,
        max_samples: c.max_samples,
        error_rate: c.error_rate,
        per_tick: c
            .metric
            .per_tick(c.cell.hz, lazyinit_core::model::groups(c.cell.size)),
        metric: c.metric.name(),
    }
}

/// A revision or range that is not one is bad input (exit 2).
fn git_error(e: git::GitError) -> anyhow::Error {
    match e {
        git::GitError::BadInput(m) => bad_input(m).into(),
        e => e.into(),
    }
}

/// Takes `out` for a bisection of `args_line`: refused when it holds one
/// of other arguments; else its writer (locked), the arguments written,
/// and the command line appended to its `command.txt` (as `run` keeps
/// them).
fn claim_out(out: &Path, args_line: &str) -> anyhow::Result<RunWriter> {
    let folder = RunFolder::new(out);
    if let Ok(old) = folder.file(RunFolder::BISECT_ARGS).read_to_string() {
        if old != args_line {
            return Err(bad_input(format!(
                "{} holds a bisection of other arguments ({}): give another --out",
                out.display(),
                old.lines().collect::<Vec<_>>().join(", ")
            ))
            .into());
        }
    }
    let writer = RunWriter::claim(&folder).map_err(|e| match e {
        // As `run` says of a busy folder: bad input, with the holder.
        lazyinit_core::ClaimError::Busy { pid, .. } => anyhow::Error::from(bad_input(format!(
            "{} is held by another bisect (pid {pid}): wait for it to end or give another --out",
            out.display()
        ))),
        e => anyhow::Error::from(e),
    })?;
    writer.put(RunFolder::BISECT_ARGS, args_line)?;
    let line: Vec<String> = std::env::args().collect();
    writer.append(RunFolder::COMMAND_TXT, format!("{}\n", line.join(" ")))?;
    Ok(writer)
}

fn open(source: &Path, c: &Common, cancel: Arc<AtomicBool>) -> anyhow::Result<Opened> {
    settings(c).check()?;
    let g = git_error;
    let (repo, head) = git::head_of(source).map_err(g)?;
    let good = git::resolve(&repo, &c.good).map_err(g)?;
    let bad = git::resolve(&repo, &c.bad).map_err(g)?;
    let range = git::range(&repo, &good, &bad).map_err(g)?;
    let clock = clock(c);
    // The real clock's folders and arguments as before (a bisection made
    // before the virtual clock resumes); another clock's are its own.
    let clock_tag = match clock.is_real() {
        true => String::new(),
        false => format!("-{}", clock.to_string().replace(':', "")),
    };
    let out = c.out.clone().unwrap_or_else(|| {
        PathBuf::from("results").join(format!(
            "bisect-{}-{}-{}-hz{}-{}{clock_tag}",
            &good[..12],
            &bad[..12],
            c.cell.arch,
            c.cell.hz,
            c.cell.size
        ))
    });
    let mut args_line = format!(
        "good {good}\nbad {bad}\ncell {}\nmetric {}\nstorage-profile {}\nrepo {}\n",
        c.cell,
        c.metric.name(),
        c.storage_profile
            .map_or("default".into(), |p| p.to_string()),
        repo.display()
    );
    if !clock.is_real() {
        args_line.push_str(&format!("clock {clock}\n"));
    }
    // Never in, over or holding the source tree, and never a folder that
    // is not a bisection's: checked before anything is made.
    let reads = lazyinit_core::output::Reads::new().tree(source).tree(&repo);
    lazyinit_core::output::guard_folder(
        "out",
        &out,
        &reads,
        "a bisection's folder (no bisect.args)",
        |d| RunFolder::new(d).file(RunFolder::BISECT_ARGS).is_file(),
    )
    .map_err(exit::refused)?;
    let out = claim_out(&out, &args_line)?;
    let canon = repo.canonicalize().unwrap_or(repo.clone());
    let hash = lazyinit_core::paths::sha256_hex(canon.display().to_string());
    let base = lazyinit_core::paths::cache_dir()
        .join("bisect")
        .join(&hash[..12]);
    let clone_lock = lock(&base.join("clone.lock"))?;
    let worktree = git::Worktree::open(&repo, &base.join("linux"), &good)?;
    // A test hook: samples read from a file of the checked-out commit
    // instead of built and booted (see Session::fake).
    let fake = std::env::var("LAZYINIT_BISECT_FAKE_MEASURE").ok();
    Ok(Opened {
        session: Session {
            out,
            cell: c.cell,
            metric: c.metric,
            storage_profile: c.storage_profile,
            clock,
            boot_timeout: Duration::from_secs(c.boot_timeout),
            worktree,
            cancel,
            rows: Vec::new(),
            fake,
            variant: lazyinit_core::Variant::NoFix,
        },
        range,
        head,
        _clone_lock: clone_lock,
    })
}

pub async fn bisect(a: BisectArgs) -> anyhow::Result<u8> {
    let started = Instant::now();
    let cancel = Arc::new(AtomicBool::new(false));
    super::run::install_signal_handler(cancel.clone(), None);
    let Opened {
        mut session,
        range,
        _clone_lock,
        ..
    } = open(&a.source, &a.common, cancel)?;
    let s = &mut session;
    let n = range.commits.len();
    eprintln!(
        "bisect: {n} commits ({} steps without skips on a line) on {}, results in {}",
        lazyinit_bisect::search::expected_steps(n),
        a.common.cell,
        s.out.folder().root().display()
    );
    let (outcome, steps) = drive::bisect(s, &range, &settings(&a.common), a.confirm_revert).await?;
    let total = started.elapsed().as_secs_f64();
    let answer = outcome.line();
    write_outputs(s, &steps, &format!("{answer} (wall {total:.0} s this run)"))?;
    println!("{}", table(&steps, s.metric.name()));
    println!("{answer}");
    Ok(outcome.exit_code())
}

/// For `git bisect run`: exit 0 good, 1 bad, 125 skip (does not build,
/// boot, or decide); any error exits 255, which makes `git bisect run` stop
/// (its codes 1-127 would read as "bad").
pub async fn bisect_step(a: StepArgs) -> anyhow::Result<u8> {
    match step_inner(a).await {
        Ok(c) => Ok(c),
        Err(e) => {
            let code = crate::fail::report(&e);
            Ok(if code == exit::INTERRUPTED { code } else { 255 })
        }
    }
}

async fn step_inner(a: StepArgs) -> anyhow::Result<u8> {
    let cancel = Arc::new(AtomicBool::new(false));
    super::run::install_signal_handler(cancel.clone(), None);
    let Opened {
        mut session,
        range,
        head,
        _clone_lock,
    } = open(&a.source, &a.common, cancel)?;
    let s = &mut session;
    let commits = &range.commits;
    let set = settings(&a.common);
    let (sprt, mut steps) = drive::ends(s, &set, &commits[0], &commits[commits.len() - 1]).await?;
    let j = drive::judge(s, set.metric, &head, "step", None, Some(&sprt)).await?;
    let code = match j.verdict() {
        Verdict::Good => 0,
        Verdict::Bad => 1,
        Verdict::Skip => 125,
    };
    let line = format!(
        "{} {} {} samples {} {}\n",
        j.step.commit,
        j.step.verdict,
        j.step.samples,
        j.step.value.map_or("-".into(), |v| format!("{v:.2}")),
        j.step.reason
    );
    s.out.append(RunFolder::BISECT_STEP_LOG, line)?;
    // The table shows every step of the `git bisect run` so far, not
    // only this call's: earlier calls' steps are kept beside it.
    let kept = s.out.folder().file(RunFolder::BISECT_STEPS_JSONL);
    let (judged, dropped) =
        lazyinit_bisect::log::add_step(&kept.text().unwrap_or_default(), &j.step);
    if dropped > 0 {
        eprintln!(
            "warning: {} line(s) of {} did not parse and were dropped",
            dropped,
            kept.display()
        );
    }
    s.out.put_whole(
        RunFolder::BISECT_STEPS_JSONL,
        lazyinit_bisect::log::steps_jsonl(&judged),
    )?;
    steps.extend(judged);
    write_outputs(s, &steps, &format!("step {}: exit {code}", &head[..12]))?;
    Ok(code)
}

/// Rewrite the folder's summary files from the steps so far (each written
/// whole, then renamed: a reader never sees half a file).
pub(crate) fn write_outputs(s: &Session, steps: &[Step], answer: &str) -> anyhow::Result<()> {
    let good = steps.first().map_or("", |s| s.commit.as_str());
    let bad = steps.get(1).map_or("", |s| s.commit.as_str());
    s.out
        .put_whole(RunFolder::BISECT_LOG, bisect_log(good, bad, steps, answer))?;
    s.out.put_whole(
        RunFolder::STEPS_MD,
        format!("{}\n{answer}\n", table(steps, s.metric.name())),
    )?;
    s.out
        .put_whole(RunFolder::SUMMARY_TXT, format!("{answer}\n"))?;
    s.out.put_rows(RunFolder::RESULTS_CSV, &s.rows)?;
    Ok(())
}
