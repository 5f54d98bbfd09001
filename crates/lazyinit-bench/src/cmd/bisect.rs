//! `lazyinit-bench bisect` and `bisect-step`: from two commits of a kernel
//! tree whose cell differs to the first commit that made the difference.
//! The search and the test are `lazyinit-bisect`'s pure functions; this
//! drives them (see `docs/bisect.md`).

mod session;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lazyinit_bisect::log::{bisect_log, table, Step};
use lazyinit_bisect::outcome::Named;
use lazyinit_bisect::{git, next, Ends, Next, Outcome, Sprt, Verdict};
use lazyinit_core::exit::{self, bad_input};
use lazyinit_core::StorageProfile;

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
    /// Samples of each end (their levels and noise) before they are
    /// compared; while they are not told apart, one more of each, up to
    /// --max-samples.
    #[arg(long, default_value_t = 3)]
    pub end_samples: usize,
    /// Cap on the samples of one step (and of each end); undecided there,
    /// a step is skipped.
    #[arg(long, default_value_t = 5)]
    pub max_samples: usize,
    /// The sequential test's error rate, each way, per step.
    #[arg(long, default_value_t = 0.01)]
    pub error_rate: f64,
    #[arg(long)]
    pub storage_profile: Option<StorageProfile>,
    /// Seconds to wait for SSH after launch.
    #[arg(long, default_value_t = 300)]
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
    _locks: Vec<nix::fcntl::Flock<std::fs::File>>,
}

fn lock(path: &Path, wait: bool) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    let arg = if wait {
        nix::fcntl::FlockArg::LockExclusive
    } else {
        nix::fcntl::FlockArg::LockExclusiveNonblock
    };
    nix::fcntl::Flock::lock(f, arg).map_err(|_| {
        anyhow::anyhow!(
            "{} is held by another bisect: wait for it or give another --out",
            path.display()
        )
    })
}

/// The test's settings a bisection can work with.
fn check_settings(c: &Common) -> Result<(), lazyinit_core::exit::ExitError> {
    if !(c.error_rate > 0.0 && c.error_rate < 0.5) {
        return Err(bad_input(
            "--error-rate must be between 0 and 0.5, e.g. 0.01",
        ));
    }
    if c.end_samples < 2 || c.max_samples < 1 {
        return Err(bad_input(
            "--end-samples must be at least 2 and --max-samples at least 1",
        ));
    }
    Ok(())
}

/// A revision or range that is not one is bad input (exit 2).
fn git_error(e: git::GitError) -> anyhow::Error {
    match e {
        git::GitError::BadInput(m) => bad_input(m).into(),
        e => e.into(),
    }
}

/// Takes `out` for a bisection of `args_line`: refused when it holds one
/// of other arguments; else locked, the arguments written, and the command
/// line appended to its `command.txt` (as `run` keeps them).
fn claim_out(out: &Path, args_line: &str) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    let args_file = out.join("bisect.args");
    if let Ok(old) = std::fs::read_to_string(&args_file) {
        if old != args_line {
            return Err(bad_input(format!(
                "{} holds a bisection of other arguments ({}): give another --out",
                out.display(),
                old.lines().collect::<Vec<_>>().join(", ")
            ))
            .into());
        }
    }
    let held = lock(&out.join(".lock"), false)?;
    std::fs::write(&args_file, args_line)?;
    use std::io::Write;
    let line: Vec<String> = std::env::args().collect();
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out.join("command.txt"))?
        .write_all(format!("{}\n", line.join(" ")).as_bytes())?;
    Ok(held)
}

fn open(source: &Path, c: &Common, cancel: Arc<AtomicBool>) -> anyhow::Result<Opened> {
    check_settings(c)?;
    let g = git_error;
    let (repo, head) = git::head_of(source).map_err(g)?;
    let good = git::resolve(&repo, &c.good).map_err(g)?;
    let bad = git::resolve(&repo, &c.bad).map_err(g)?;
    let range = git::range(&repo, &good, &bad).map_err(g)?;
    let out = c.out.clone().unwrap_or_else(|| {
        PathBuf::from("results").join(format!(
            "bisect-{}-{}-{}-hz{}-{}",
            &good[..12],
            &bad[..12],
            c.cell.arch,
            c.cell.hz,
            c.cell.size
        ))
    });
    let args_line = format!(
        "good {good}\nbad {bad}\ncell {}\nmetric {}\nstorage-profile {}\nrepo {}\n",
        c.cell,
        c.metric.name(),
        c.storage_profile
            .map_or("default".into(), |p| p.to_string()),
        repo.display()
    );
    // Never in, over or holding the source tree, and never a folder that
    // is not a bisection's: checked before anything is made.
    let reads = lazyinit_core::output::Reads::new().tree(source).tree(&repo);
    lazyinit_core::output::guard_folder(
        "out",
        &out,
        &reads,
        "a bisection's folder (no bisect.args)",
        |d| d.join("bisect.args").is_file(),
    )
    .map_err(exit::refused)?;
    let mut locks = vec![claim_out(&out, &args_line)?];
    let canon = repo.canonicalize().unwrap_or(repo.clone());
    let hash = lazyinit_core::paths::sha256_hex(canon.display().to_string());
    let base = lazyinit_core::paths::cache_dir()
        .join("bisect")
        .join(&hash[..12]);
    locks.push(lock(&base.join("clone.lock"), true)?);
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
            boot_timeout: Duration::from_secs(c.boot_timeout),
            worktree,
            cancel,
            rows: Vec::new(),
            fake,
        },
        range,
        head,
        _locks: locks,
    })
}

/// Measure both ends; refuse (exit 2, both figures) when they do not differ.
///
/// `--end-samples` of each end first. While their noise is not known
/// (where the ends share an L, the spread around each end's mean at each L
/// it slept needs `lazyinit_bisect::test::SPREAD_DF` degrees of freedom:
/// an end whose samples slept different L has fewer) or the test between
/// them is not
/// conclusive (a Welch p at or above the error rate, and an L both ends
/// slept), each end gets one more sample, up to `--max-samples`, before the
/// ends are refused: a loaded host that moves one sample's L does not end
/// the bisection.
async fn ends(
    s: &mut Session,
    c: &Common,
    good: &str,
    bad: &str,
) -> anyhow::Result<(Sprt, Vec<Step>)> {
    let cap = c.max_samples.max(c.end_samples);
    let mut k = c.end_samples;
    let per_tick = c
        .metric
        .per_tick(c.cell.hz, lazyinit_core::model::groups(c.cell.size));
    let (ends, steps) = loop {
        let g = s.judge(good, "good end", Some(k), None).await?;
        let b = s.judge(bad, "bad end", Some(k), None).await?;
        for (j, which) in [(&g, "--good"), (&b, "--bad")] {
            if j.samples.len() < 2 {
                let why = Outcome::Refused("an end gave no samples".into());
                write_outputs(s, &[g.step.clone(), b.step.clone()], &why.line())?;
                return Err(bad_input(format!(
                    "{which} {} gives no samples ({}): pick an end that builds and boots",
                    &j.step.commit[..12],
                    j.step.reason
                ))
                .into());
            }
        }
        let steps = vec![g.step.clone(), b.step.clone()];
        match Ends::new(&g.samples, &b.samples, c.error_rate, per_tick) {
            Ok(e) => break (e, steps),
            Err(e) if e.wants_more() && k < cap && g.samples.len() == k && b.samples.len() == k => {
                k += 1;
                eprintln!("ends: not told apart yet ({e}): one more sample of each end ({k} of at most {cap})");
            }
            Err(e) => {
                write_outputs(s, &steps, &Outcome::Refused(e.to_string()).line())?;
                return Err(
                    bad_input(format!("{e}: nothing to bisect on this cell and metric")).into(),
                );
            }
        }
    };
    let sprt = Sprt {
        ends,
        error_rate: c.error_rate,
        max_samples: c.max_samples,
    };
    Ok((sprt, steps))
}

fn verdict_of(step: &Step) -> Verdict {
    match step.verdict.as_str() {
        "good" => Verdict::Good,
        "bad" => Verdict::Bad,
        _ => Verdict::Skip,
    }
}

// Long: the bisection top to bottom (open, ends, the step loop, the confirmation, outputs, exit code), read in one go like `run`.
pub async fn bisect(a: BisectArgs) -> anyhow::Result<u8> {
    let started = Instant::now();
    let cancel = Arc::new(AtomicBool::new(false));
    super::run::install_signal_handler(cancel.clone(), None);
    let Opened {
        mut session,
        range,
        _locks,
        ..
    } = open(&a.source, &a.common, cancel)?;
    let s = &mut session;
    let commits = &range.commits;
    let n = commits.len();
    eprintln!(
        "bisect: {n} commits ({} steps without skips on a line) on {}, results in {}",
        lazyinit_bisect::search::expected_steps(n),
        a.common.cell,
        s.out.display()
    );
    let (sprt, mut steps) = ends(s, &a.common, &commits[0], &commits[n - 1]).await?;
    let mut verdicts = BTreeMap::from([(0, Verdict::Good), (n - 1, Verdict::Bad)]);
    let found = loop {
        match next(&range.graph, &verdicts) {
            Next::Test(i) => {
                let j = s.judge(&commits[i], "step", None, Some(&sprt)).await?;
                verdicts.insert(i, verdict_of(&j.step));
                steps.push(j.step);
                write_outputs(s, &steps, "bisecting")?;
            }
            Next::Found(i) => break Ok(i),
            Next::Range(r) => break Err(r),
        }
    };
    let named = |s: &Session, c: &str| Named {
        commit: c.to_string(),
        subject: git::subject(&s.worktree.dir, c),
    };
    let outcome = match found {
        Err(range) => Outcome::Range(range.iter().map(|i| named(s, &commits[*i])).collect()),
        Ok(i) => {
            let culprit = &commits[i];
            let again = s.judge(culprit, "confirm bad", None, Some(&sprt)).await?;
            let mut confirmed = again.step.verdict == "bad";
            let mut how = format!("bad again ({})", again.step.verdict);
            steps.push(again.step);
            // Every parent (a merge has several): good again.
            for p in &range.parents[i] {
                let j = s.judge(p, "confirm parent", None, Some(&sprt)).await?;
                confirmed &= j.step.verdict == "good";
                how.push_str(&format!(", parent {} again ({})", &p[..12], j.step.verdict));
                steps.push(j.step);
            }
            if a.confirm_revert {
                match s.worktree.revert_on(&commits[n - 1], culprit) {
                    Ok(rev) => {
                        let r = s.judge(&rev, "revert on bad", None, Some(&sprt)).await?;
                        confirmed &= r.step.verdict == "good";
                        how.push_str(&format!(", reverted on --bad: {}", r.step.verdict));
                        steps.push(r.step);
                    }
                    // Later commits touching the same lines: the revert
                    // cannot be checked, which says nothing against the
                    // culprit (bad again, parent good again still stand).
                    Err(e) => {
                        let first = e.to_string();
                        let first = first.lines().next().unwrap_or("").to_string();
                        how.push_str(&format!(
                            ", revert not checked: it does not apply cleanly on --bad ({first})"
                        ));
                    }
                }
            }
            Outcome::Named {
                commit: named(s, culprit),
                confirmed,
                how,
            }
        }
    };
    let total = started.elapsed().as_secs_f64();
    let answer = outcome.line();
    write_outputs(s, &steps, &format!("{answer} (wall {total:.0} s this run)"))?;
    println!("{}", table(&steps, s.metric.name()));
    println!("{answer}");
    Ok(exit_code(&outcome))
}

/// The exit code of a bisection's outcome: 0 named and confirmed; 1
/// named but not confirmed, or a range; 2 nothing to bisect.
fn exit_code(o: &Outcome) -> u8 {
    match o {
        Outcome::Named {
            confirmed: true, ..
        } => exit::OK,
        Outcome::Named {
            confirmed: false, ..
        }
        | Outcome::Range(_) => exit::REGRESSION_OR_CELL_FAILED,
        Outcome::Refused(_) => exit::BAD_INPUT,
    }
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
        _locks,
    } = open(&a.source, &a.common, cancel)?;
    let s = &mut session;
    let commits = &range.commits;
    let (sprt, mut steps) = ends(s, &a.common, &commits[0], &commits[commits.len() - 1]).await?;
    let j = s.judge(&head, "step", None, Some(&sprt)).await?;
    let code = match verdict_of(&j.step) {
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
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(s.out.join("bisect-step.log"))?
        .write_all(line.as_bytes())?;
    // The table shows every step of the `git bisect run` so far, not
    // only this call's: earlier calls' steps are kept beside it.
    let kept = s.out.join("bisect-steps.jsonl");
    let (judged, dropped) = lazyinit_bisect::log::add_step(
        &std::fs::read_to_string(&kept).unwrap_or_default(),
        &j.step,
    );
    if dropped > 0 {
        eprintln!(
            "warning: {} line(s) of {} did not parse and were dropped",
            dropped,
            kept.display()
        );
    }
    lazyinit_core::output::write_atomic(
        &kept,
        lazyinit_bisect::log::steps_jsonl(&judged).as_bytes(),
    )?;
    steps.extend(judged);
    write_outputs(s, &steps, &format!("step {}: exit {code}", &head[..12]))?;
    Ok(code)
}

/// Rewrite the folder's summary files from the steps so far (each written
/// whole, then renamed: a reader never sees half a file).
fn write_outputs(s: &Session, steps: &[Step], answer: &str) -> anyhow::Result<()> {
    let put = |name: &str, text: &str| -> anyhow::Result<()> {
        Ok(lazyinit_core::output::write_atomic(
            &s.out.join(name),
            text.as_bytes(),
        )?)
    };
    let good = steps.first().map_or("", |s| s.commit.as_str());
    let bad = steps.get(1).map_or("", |s| s.commit.as_str());
    put("bisect.log", &bisect_log(good, bad, steps, answer))?;
    put(
        "steps.md",
        &format!("{}\n{answer}\n", table(steps, s.metric.name())),
    )?;
    put("summary.txt", &format!("{answer}\n"))?;
    let csv = s.out.join("results.csv");
    let tmp = lazyinit_core::output::temp_beside(&csv)?;
    let mut w = lazyinit_core::results::ResultsWriter::open(tmp.path())?;
    for r in &s.rows {
        w.append(r)?;
    }
    drop(w);
    tmp.persist(&csv).map_err(|e| e.error)?;
    Ok(())
}
