//! The CLI's bisection lab (`lazyinit_bisect::Lab`): one bisection's state
//! on disk and its two costly verbs, prepare a commit (check out in the
//! private worktree, build as committed) and measure one sample (a
//! one-cell run of the project's runner). Every sample is a run folder of
//! its own under `runs/`, named by commit, role and index, so a rerun of
//! the same command finds what was measured and redoes only what was not.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lazyinit_bisect::log::Step;
use lazyinit_bisect::{Lab, Prepared, Sample};
use lazyinit_core::git::Worktree;
use lazyinit_core::results::{ResultRow, Status};
use lazyinit_core::{
    Arch, ByteSize, Hz, KernelSource, RunFile, RunFolder, RunWriter, SourceId, StorageProfile,
    Variant,
};
use lazyinit_kernel::{KernelError, KernelSpec};

use crate::cmd::providers::{self, Spec};

/// The metric a bisection compares (the history's, so that the bisect
/// `history changes` prints runs as printed).
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

/// What stays the same for every commit of one bisection.
pub struct Session {
    /// The bisect folder's writer (its lock held for the bisection).
    pub out: RunWriter,
    pub cell: CellArg,
    pub metric: Metric,
    pub storage_profile: Option<StorageProfile>,
    /// The samples' clock, resolved (never `auto`).
    pub clock: lazyinit_qemu::Clock,
    pub boot_timeout: Duration,
    pub worktree: Worktree,
    pub cancel: Arc<AtomicBool>,
    /// Every row measured so far, `kernel_source` = `git:<commit>`.
    pub rows: Vec<ResultRow>,
    /// Tests only (`LAZYINIT_BISECT_FAKE_MEASURE=FILE`): nothing is built
    /// or booted; a commit's FILE, as checked out, holds its sample
    /// (`VALUE [L]`), or `does not build`. Everything else (the clone,
    /// the search, the test, the confirmation, the outputs) is the real
    /// bisection.
    pub fake: Option<String>,
    /// The variant the commit last prepared reads as (its kernel's label).
    pub variant: Variant,
}

impl Session {
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
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
        // From the private clone: it holds the user's commits (borrowed) and
        // the reverts made there, which the user's repository never sees.
        let text = lazyinit_core::git::show(&self.worktree.dir, commit, "fs/ext4/super.c");
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
        if let Some(file) = self.fake.clone() {
            return Ok(
                match std::fs::read_to_string(self.worktree.dir.join(&file)) {
                    Ok(t) if !t.starts_with("does not build") => self.ready(variant, 0.0, reading),
                    _ => self.remember_skip(commit, &format!("does not build (fake: {file})")),
                },
            );
        }
        let mut spec = KernelSpec::new(self.cell.arch, self.cell.hz, variant);
        spec.id.source = KernelSource::Path(self.worktree.dir.clone());
        spec.as_committed = true;
        let opts = lazyinit_kernel::BuildOptions {
            progress: Some(Arc::new(|e| {
                if let lazyinit_kernel::BuildEvent::Step(s) = e {
                    eprintln!("  build: {s}");
                }
            })),
            ..Default::default()
        };
        let t = Instant::now();
        let built = tokio::select! {
            r = lazyinit_kernel::build(&spec, &opts) => r,
            _ = lazyinit_orchestrator::runner::cancelled(&self.cancel) => {
                return Err(lazyinit_core::exit::ExitError::Interrupted {
                    during: " during a build",
                }.into())
            }
        };
        match built {
            Ok(_) => Ok(self.ready(variant, t.elapsed().as_secs_f64(), reading)),
            Err(
                e @ (KernelError::Build { .. }
                | KernelError::ConfigCheck { .. }
                | KernelError::VariantCheck { .. }
                | KernelError::Patch { .. }),
            ) => {
                let line = match &e {
                    KernelError::Build { step, tail, .. } => format!(
                        "does not build ({step}): {}",
                        tail.lines()
                            .rev()
                            .find(|l| l.contains("error"))
                            .unwrap_or_else(|| tail.lines().last().unwrap_or(""))
                            .trim()
                    ),
                    e => format!("does not build: {e}"),
                };
                Ok(self.remember_skip(commit, &line))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Built: the variant it reads as labels its samples' kernel.
    fn ready(&mut self, variant: Variant, build_s: f64, reading: &str) -> Prepared {
        self.variant = variant;
        Prepared::Ready {
            build_s,
            reading: reading.to_string(),
        }
    }

    fn remember_skip(&self, commit: &str, reason: &str) -> Prepared {
        // Best effort: a skip not remembered is only built again on resume.
        if let Err(e) = self.out.put_skip_note(commit, &format!("{reason}\n")) {
            tracing::warn!("{}", lazyinit_core::exit::chain_text(&e));
        }
        Prepared::Skip(reason.to_string())
    }

    /// One sample: a one-cell run of the project's runner into
    /// `runs/<commit12>-<role>-<i>` (reused when it already holds its row).
    /// Ok(Err(why)) when the guest did not give one (does not boot).
    async fn sample_of(
        &mut self,
        commit: &str,
        role: &str,
        i: usize,
    ) -> anyhow::Result<Result<Sample, String>> {
        let variant = self.variant;
        if let Some(file) = &self.fake {
            // `VALUE [L]`, or one such line a sample (sample i reads line
            // i, round the lines), for a commit whose samples vary.
            let text = std::fs::read_to_string(self.worktree.dir.join(file)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            let line = lines.get(i % lines.len().max(1)).copied().unwrap_or("");
            let mut words = line.split_whitespace();
            let value = words.next().and_then(|v| v.parse().ok());
            return Ok(match value {
                Some(value) => Ok(Sample {
                    value,
                    sleep_ticks: words.next().and_then(|l| l.parse().ok()),
                }),
                None => Err(format!("does not measure (fake: {file} holds no number)")),
            });
        }
        let name = format!("{}-{}-{i}", &commit[..12], role.replace(' ', "-"));
        let run = self.out.folder().sample_run(&name);
        let csv = run.results_csv();
        // A results file that is not there yet has no row; one that cannot
        // be read says why (never "no row").
        let done = |csv: &RunFile| -> anyhow::Result<Option<ResultRow>> {
            if !csv.exists() {
                return Ok(None);
            }
            Ok(csv
                .whole_rows()?
                .into_iter()
                .rev()
                .find(|r| r.status != Status::Interrupted))
        };
        let row = match done(&csv)? {
            Some(r) => r,
            None => {
                self.run_one(&run, variant).await?;
                if self.cancelled() {
                    return Err(lazyinit_core::exit::ExitError::Interrupted { during: "" }.into());
                }
                done(&csv)?.ok_or_else(|| {
                    anyhow::anyhow!("the run into {} left no row", run.root().display())
                })?
            }
        };
        let mut kept = row.clone();
        kept.axes.source = SourceId::Commit(commit.to_string());
        self.rows.push(kept);
        if row.status != Status::Ok {
            return Ok(Err(format!("does not measure: {}", row.error)));
        }
        let Some(value) = self.metric.of(&row) else {
            return Ok(Err(format!("the row has no {}", self.metric.name())));
        };
        Ok(Ok(Sample {
            value,
            sleep_ticks: row.measured.sleep_ticks,
        }))
    }

    /// The project's runner on one cell of the worktree's source.
    async fn run_one(&self, run: &RunFolder, variant: Variant) -> anyhow::Result<()> {
        let c = self.cell;
        let source = self.worktree.dir.display().to_string();
        let profile = self.storage_profile.as_ref().map(|p| p.to_string());
        let clock = (!self.clock.is_real()).then(|| self.clock.to_string());
        let text = lazyinit_orchestrator::spec::OneCell {
            name: "bisect",
            arch: c.arch,
            hz: c.hz,
            variant,
            size: c.size,
            source: &source,
            storage_profile: profile.as_deref(),
            clock: clock.as_deref(),
        }
        .toml();
        let spec = Spec::parse(&text, "bisect").map_err(|e| anyhow::anyhow!("{e}"))?;
        let keys = providers::run_keys(&spec)?;
        let provider = providers::provider(&spec, keys.dir())?;
        let plan = lazyinit_orchestrator::plan(
            &spec,
            &*provider,
            lazyinit_orchestrator::plan::host_available_mib(),
        );
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let opts = lazyinit_orchestrator::RunOptions {
            folder: run.clone(),
            on_claim: None,
            events: lazyinit_core::events::EventSink::new(tx),
            cancel: self.cancel.clone(),
            prioritize_sensitive: true,
            boot_timeout: self.boot_timeout,
            artifacts: Arc::new(
                lazyinit_orchestrator::artifacts::Built::new(
                    lazyinit_core::paths::cache_dir(),
                    keys.dir().to_path_buf(),
                    std::thread::available_parallelism().map_or(2, |n| n.get()),
                )
                .as_committed(),
            ),
            shard_chosen_by: String::new(),
        };
        lazyinit_orchestrator::run(&spec, &plan, provider, opts).await?;
        Ok(())
    }
}

impl Lab for Session {
    async fn prepare(&mut self, commit: &str) -> anyhow::Result<Prepared> {
        self.prepare_tree(commit).await
    }

    async fn sample(
        &mut self,
        commit: &str,
        role: &str,
        index: usize,
    ) -> anyhow::Result<Result<Sample, String>> {
        self.sample_of(commit, role, index).await
    }

    fn subject(&self, commit: &str) -> String {
        lazyinit_core::git::subject(&self.worktree.dir, commit)
    }

    fn revert_on(&mut self, bad: &str, culprit: &str) -> anyhow::Result<String> {
        Ok(self.worktree.revert_on(bad, culprit)?)
    }

    fn record(&mut self, steps: &[Step], answer: &str) -> anyhow::Result<()> {
        super::write_outputs(self, steps, answer)
    }

    fn say(&mut self, line: &str) {
        eprintln!("{line}");
    }
}
