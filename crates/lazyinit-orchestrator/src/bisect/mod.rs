//! A bisection on this project's kernels and guests (`docs/bisect.md`):
//! [`Bisection`] is `lazyinit_bisect`'s [`Lab`], one bisection's state on
//! disk and its costly verbs, over a [`Bench`] that builds and measures a
//! commit. [`Runner`] is the real bench (a kernel built as committed, a
//! one-cell run of the project's runner per sample); a test's bench reads
//! samples from the commits' files. Everything but the bench is the same
//! for both: the folder and its arguments, the private clone, the
//! checkout, what a commit's `ext4_run_li_request` reads as, the skips
//! remembered, the outputs.
//!
//! The search and the test are `lazyinit_bisect`'s (pure: it knows no lab);
//! the binary parses the arguments, resolves the clock, names the
//! providers and prints.

mod runner;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lazyinit_bisect::drive::{self, Settings};
use lazyinit_bisect::log::{bisect_log, table, Step};
use lazyinit_bisect::{Lab, Outcome, Prepared, Sample, Verdict};
use lazyinit_core::exit::bad_input;
use lazyinit_core::git::{self, Worktree};
use lazyinit_core::results::ResultRow;
use lazyinit_core::{Arch, ByteSize, Hz, RunFolder, RunWriter, StorageProfile, Variant};

pub use runner::{Provided, Runner};

/// The metric a bisection compares (the history's, so that the bisect
/// line of `history changes` prints runs as printed).
pub use lazyinit_core::identity::Metric;

/// `ARCH:HZ:SIZE`, e.g. `arm64:100:8GiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellArg {
    pub arch: Arch,
    pub hz: Hz,
    pub size: ByteSize,
}

impl std::str::FromStr for CellArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let [a, h, z] = parts[..] else {
            return Err(format!("`{s}`: give ARCH:HZ:SIZE, e.g. arm64:100:8GiB"));
        };
        Ok(CellArg {
            arch: a.parse().map_err(|e| format!("`{a}`: {e}"))?,
            hz: h.parse().map_err(|e| format!("`{h}`: {e}"))?,
            size: z.parse().map_err(|e| format!("`{z}`: {e}"))?,
        })
    }
}

impl std::fmt::Display for CellArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.arch, self.hz, self.size)
    }
}

/// A line of progress, said on the way (the CLI's goes to stderr).
pub type Say = Arc<dyn Fn(&str) + Send + Sync>;

/// What a bisection is asked: the command's arguments, parsed.
#[derive(Debug, Clone)]
pub struct Request {
    /// The kernel git tree (only read: steps are checked out privately).
    pub source: PathBuf,
    pub good: String,
    pub bad: String,
    pub cell: CellArg,
    pub metric: Metric,
    /// The results folder; None: `results/bisect-<good>-<bad>-<cell>`.
    pub out: Option<PathBuf>,
    /// The samples' clock when it is not the real one (`virtual`,
    /// `virtual:N`: QEMU's `[provider-config.qemu] clock`); None on the
    /// real clock. Resolved: never `auto`.
    pub clock: Option<String>,
    pub storage_profile: Option<StorageProfile>,
    pub boot_timeout: Duration,
    pub end_samples: usize,
    pub max_samples: usize,
    pub error_rate: f64,
    /// The cache folder the private clone is kept under
    /// (`lazyinit_core::paths::cache_dir()`).
    pub cache: PathBuf,
    /// The command line, appended to the folder's `command.txt`.
    pub command_line: String,
}

impl Request {
    /// The test's settings.
    pub fn settings(&self) -> Settings {
        Settings {
            exact: self.clock.is_some(),
            end_samples: self.end_samples,
            max_samples: self.max_samples,
            error_rate: self.error_rate,
            per_tick: self
                .metric
                .per_tick(self.cell.hz, lazyinit_core::model::groups(self.cell.size)),
            metric: self.metric.name(),
        }
    }
}

/// Where the private clone of `repo` is kept under the cache folder
/// `cache`: one per repository (by its canonical path), kept between
/// runs and `bisect-step` calls (`docs/bisect.md`).
pub fn clone_place(cache: &Path, repo: &Path) -> PathBuf {
    let canon = repo.canonicalize().unwrap_or(repo.to_path_buf());
    let hash = lazyinit_core::paths::sha256_hex(canon.display().to_string());
    cache.join("bisect").join(&hash[..12])
}

/// A sample asked of a bench.
pub struct SampleAsk<'a> {
    pub request: &'a Request,
    /// The bisection's folder (a sample's run goes under its `runs/`).
    pub folder: &'a RunFolder,
    /// The private clone, checked out at `commit` and built.
    pub tree: &'a Path,
    pub commit: &'a str,
    /// The step's role (`good end`, `step`, ...) and the sample's index.
    pub role: &'a str,
    pub index: usize,
    /// What the commit reads as: its kernel's label.
    pub variant: Variant,
}

/// How a commit is built and measured: [`Runner`] builds its kernel and
/// runs the project's runner; a test's bench reads its files.
// Not `dyn`: the lab is generic over its bench, so `async fn` is fine.
#[allow(async_fn_in_trait)]
pub trait Bench {
    /// Build `tree` (the private clone, checked out at a commit) as
    /// committed, its kernel labelled `variant`: its seconds, or
    /// `Ok(Err(line))` when it does not build (the skip's reason). An
    /// error stops the bisection.
    async fn build(
        &mut self,
        request: &Request,
        tree: &Path,
        variant: Variant,
        say: &Say,
    ) -> anyhow::Result<Result<f64, String>>;
    /// One sample: `Ok(Err(why))` when the guest gave none (it does not
    /// boot or measure).
    async fn sample(&mut self, ask: SampleAsk<'_>) -> anyhow::Result<Result<Sample, String>>;
    /// Every row measured so far (the bisection's results.csv).
    fn rows(&self) -> &[ResultRow];
}

/// One bisection: its folder (locked), the commits between its ends, the
/// private clone (locked: one bisection of a repository at a time moves
/// it), and the bench. The [`Lab`] the driver is given.
pub struct Bisection<B> {
    /// The bisection folder's writer (its lock held for the bisection).
    pub out: RunWriter,
    pub request: Request,
    /// Every ancestor of --bad that is not one of --good, and the graph.
    pub range: git::Range,
    /// The source tree's HEAD (the step `bisect-step` judges).
    pub head: String,
    worktree: Worktree,
    _clone_lock: nix::fcntl::Flock<std::fs::File>,
    bench: B,
    say: Say,
    /// The variant the commit last prepared reads as (its kernel's label).
    variant: Variant,
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
fn claim_out(out: &Path, args_line: &str, command_line: &str) -> anyhow::Result<RunWriter> {
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
    writer.append(RunFolder::COMMAND_TXT, format!("{command_line}\n"))?;
    Ok(writer)
}

impl<B: Bench> Bisection<B> {
    /// Everything checked before anything is created: the settings, the
    /// revisions and their range, the folder (never in, over or holding
    /// the source tree, never a folder that is not a bisection's, never
    /// one of other arguments or held by another bisection); then the
    /// folder claimed and the private clone opened at --good.
    pub fn open(request: Request, bench: B, say: Say) -> anyhow::Result<Self> {
        let r = &request;
        r.settings().check()?;
        let g = git_error;
        let (repo, head) = git::head_of(&r.source).map_err(g)?;
        let good = git::resolve(&repo, &r.good).map_err(g)?;
        let bad = git::resolve(&repo, &r.bad).map_err(g)?;
        let range = git::range(&repo, &good, &bad).map_err(g)?;
        // The real clock's folders and arguments as before (a bisection
        // made before the virtual clock resumes); another clock's are its
        // own.
        let clock_tag = r
            .clock
            .as_ref()
            .map_or(String::new(), |c| format!("-{}", c.replace(':', "")));
        let out = r.out.clone().unwrap_or_else(|| {
            PathBuf::from("results").join(format!(
                "bisect-{}-{}-{}-hz{}-{}{clock_tag}",
                &good[..12],
                &bad[..12],
                r.cell.arch,
                r.cell.hz,
                r.cell.size
            ))
        });
        let mut args_line = format!(
            "good {good}\nbad {bad}\ncell {}\nmetric {}\nstorage-profile {}\nrepo {}\n",
            r.cell,
            r.metric.name(),
            r.storage_profile
                .map_or("default".into(), |p| p.to_string()),
            repo.display()
        );
        if let Some(clock) = &r.clock {
            args_line.push_str(&format!("clock {clock}\n"));
        }
        let reads = lazyinit_core::output::Reads::new()
            .tree(&r.source)
            .tree(&repo);
        lazyinit_core::output::guard_folder(
            "out",
            &out,
            &reads,
            "a bisection's folder (no bisect.args)",
            |d| RunFolder::new(d).file(RunFolder::BISECT_ARGS).is_file(),
        )
        .map_err(lazyinit_core::exit::refused)?;
        let out = claim_out(&out, &args_line, &r.command_line)?;
        let base = clone_place(&r.cache, &repo);
        let clone_lock = lazyinit_core::writer::lock_waiting(&base.join("clone.lock"))?;
        let worktree = Worktree::open(&repo, &base.join("linux"), &good)?;
        Ok(Bisection {
            out,
            request,
            range,
            head,
            worktree,
            _clone_lock: clone_lock,
            bench,
            say,
            variant: Variant::NoFix,
        })
    }

    /// The whole bisection: the ends, the steps, the confirmation. The
    /// folder holds every step as it goes; the caller writes the last
    /// answer ([`Bisection::record`]).
    pub async fn bisect(&mut self, confirm_revert: bool) -> anyhow::Result<(Outcome, Vec<Step>)> {
        let (range, settings) = (self.range.clone(), self.request.settings());
        drive::bisect(self, &range, &settings, confirm_revert).await
    }

    /// `bisect-step`: the ends (measured on the first call, then read
    /// back), then the source tree's HEAD judged against them. Its line
    /// goes to `bisect-step.log`, its step to `bisect-steps.jsonl`, and
    /// the table to `steps.md` with every step judged so far. The code
    /// `git bisect run` reads: 0 good, 1 bad, 125 skip.
    pub async fn step(&mut self) -> anyhow::Result<u8> {
        let set = self.request.settings();
        let commits = self.range.commits.clone();
        let head = self.head.clone();
        let (sprt, mut steps) =
            drive::ends(self, &set, &commits[0], &commits[commits.len() - 1]).await?;
        let j = drive::judge(self, set.metric, &head, "step", None, Some(&sprt)).await?;
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
        self.out.append(RunFolder::BISECT_STEP_LOG, line)?;
        // The table shows every step of the `git bisect run` so far, not
        // only this call's: earlier calls' steps are kept beside it.
        let kept = self.out.folder().file(RunFolder::BISECT_STEPS_JSONL);
        let (judged, dropped) =
            lazyinit_bisect::log::add_step(&kept.text().unwrap_or_default(), &j.step);
        if dropped > 0 {
            (self.say)(&format!(
                "warning: {} line(s) of {} did not parse and were dropped",
                dropped,
                kept.display()
            ));
        }
        self.out.put(
            RunFolder::BISECT_STEPS_JSONL,
            lazyinit_bisect::log::steps_jsonl(&judged),
        )?;
        steps.extend(judged);
        self.record(&steps, &format!("step {}: exit {code}", &head[..12]))?;
        Ok(code)
    }

    /// Rewrite the folder's summary files from the steps so far (each
    /// written whole, then renamed: a reader never sees half a file).
    pub fn record(&self, steps: &[Step], answer: &str) -> anyhow::Result<()> {
        let good = steps.first().map_or("", |s| s.commit.as_str());
        let bad = steps.get(1).map_or("", |s| s.commit.as_str());
        let metric = self.request.metric.name();
        self.out
            .put(RunFolder::BISECT_LOG, bisect_log(good, bad, steps, answer))?;
        self.out.put(
            RunFolder::STEPS_MD,
            format!("{}\n{answer}\n", table(steps, metric)),
        )?;
        self.out
            .put(RunFolder::SUMMARY_TXT, format!("{answer}\n"))?;
        self.out
            .put_rows(RunFolder::RESULTS_CSV, self.bench.rows())?;
        Ok(())
    }

    /// Check out, read what the commit's `ext4_run_li_request` is, build
    /// it as committed (no variant patch, whatever the text). The reading
    /// labels the kernel (an unknown text is labelled `nofix`: not the
    /// known fix) and is returned as a fact of the build, never a reason
    /// to skip. A build that fails is a skip, remembered in
    /// `skips/<commit>` so a resumed run does not build it again.
    async fn prepare_tree(&mut self, commit: &str) -> anyhow::Result<Prepared> {
        if let Ok(r) = self.out.folder().skip_note(commit).read_to_string() {
            return Ok(Prepared::Skip(r.trim().to_string()));
        }
        self.worktree.checkout(commit)?;
        // From the private clone: it holds the user's commits (borrowed)
        // and the reverts made there, which the user's repository never
        // sees.
        let text = git::show(&self.worktree.dir, commit, "fs/ext4/super.c");
        let detected = text.as_deref().map_or(
            lazyinit_kernel::Detected::Unknown,
            lazyinit_kernel::variant::detect_file,
        );
        let reading = match detected {
            lazyinit_kernel::Detected::Fix => "fix",
            lazyinit_kernel::Detected::NoFix => "nofix",
            lazyinit_kernel::Detected::Unknown => "unknown",
        };
        let variant = detected.variant().unwrap_or(Variant::NoFix);
        let built = self
            .bench
            .build(&self.request, &self.worktree.dir, variant, &self.say)
            .await?;
        Ok(match built {
            Ok(build_s) => {
                self.variant = variant;
                Prepared::Ready {
                    build_s,
                    reading: reading.to_string(),
                }
            }
            Err(line) => self.remember_skip(commit, &line),
        })
    }

    fn remember_skip(&self, commit: &str, reason: &str) -> Prepared {
        // Best effort: a skip not remembered is only built again on resume.
        if let Err(e) = self.out.put_skip_note(commit, &format!("{reason}\n")) {
            tracing::warn!("{}", lazyinit_core::exit::chain_text(&e));
        }
        Prepared::Skip(reason.to_string())
    }
}

impl<B: Bench> Lab for Bisection<B> {
    async fn prepare(&mut self, commit: &str) -> anyhow::Result<Prepared> {
        self.prepare_tree(commit).await
    }

    async fn sample(
        &mut self,
        commit: &str,
        role: &str,
        index: usize,
    ) -> anyhow::Result<Result<Sample, String>> {
        let ask = SampleAsk {
            request: &self.request,
            folder: self.out.folder(),
            tree: &self.worktree.dir,
            commit,
            role,
            index,
            variant: self.variant,
        };
        self.bench.sample(ask).await
    }

    fn subject(&self, commit: &str) -> String {
        git::subject(&self.worktree.dir, commit)
    }

    fn revert_on(&mut self, bad: &str, culprit: &str) -> anyhow::Result<String> {
        Ok(self.worktree.revert_on(bad, culprit)?)
    }

    fn record(&mut self, steps: &[Step], answer: &str) -> anyhow::Result<()> {
        Bisection::record(self, steps, answer)
    }

    fn say(&mut self, line: &str) {
        (self.say)(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_arch_hz_and_size() {
        let c: CellArg = "arm64:100:8GiB".parse().unwrap();
        assert_eq!(c.to_string(), "arm64:100:8GiB");
        assert_eq!(c.size, ByteSize(8 << 30));
        for bad in [
            "arm64:100",
            "arm64:100:8GiB:x",
            "sparc:100:8GiB",
            "arm64:7:8GiB",
        ] {
            assert!(bad.parse::<CellArg>().is_err(), "{bad}");
        }
        assert_eq!(
            "x86_64".parse::<CellArg>().unwrap_err(),
            "`x86_64`: give ARCH:HZ:SIZE, e.g. arm64:100:8GiB"
        );
    }

    #[test]
    fn a_repository_has_one_clone_place_wherever_it_is_named_from() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::os::unix::fs::symlink(&a, d.path().join("link")).unwrap();
        let cache = Path::new("/cache");
        let place = clone_place(cache, &a);
        assert_eq!(place.parent(), Some(Path::new("/cache/bisect")));
        assert_eq!(place.file_name().unwrap().len(), 12);
        assert_eq!(clone_place(cache, &d.path().join("link")), place);
        assert_eq!(clone_place(cache, &a.join("../a")), place);
        assert_ne!(clone_place(cache, &b), place);
    }
}
