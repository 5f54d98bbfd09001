//! The real bench: a commit's kernel built as committed, and each sample
//! a one-cell run of the project's runner in a run folder of its own
//! under the bisection's `runs/`, named by commit, role and index, so a
//! rerun of the same command finds what was measured and redoes only
//! what was not.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use lazyinit_bisect::Sample;
use lazyinit_core::provider::Provider;
use lazyinit_core::results::{ResultRow, Status};
use lazyinit_core::{GitIdentity, KernelSource, RunFile, RunFolder, SourceId, Variant};
use lazyinit_kernel::{KernelError, KernelSpec};

use super::{Bench, Request, SampleAsk, Say};
use crate::spec::{ProviderConfigs, Spec};

/// A provider made for one sample's spec, and the SSH keys its machines
/// are reached with.
pub struct Provided {
    pub provider: Arc<dyn Provider>,
    /// The folder of the keys (the state folder, or the run's own).
    pub keys_dir: PathBuf,
    /// Whatever keeps those keys for the run (dropped after it: a run's
    /// own keys are removed then).
    pub keep: Box<dyn Send>,
}

/// Makes the provider a sample's spec names (the binary names the
/// providers; the orchestrator names none).
pub type MakeProvider<C> = Box<dyn Fn(&Spec<C>) -> anyhow::Result<Provided> + Send + Sync>;

/// The runner-backed bench (see the module's doc).
pub struct Runner<C: ProviderConfigs> {
    make: MakeProvider<C>,
    cancel: Arc<AtomicBool>,
    /// Every row measured so far, `kernel_source` = `git:<commit>`.
    rows: Vec<ResultRow>,
}

impl<C: ProviderConfigs> Runner<C> {
    /// A bench whose samples run on the providers `make` makes, stopped
    /// when `cancel` is set (Ctrl-C).
    pub fn new(make: MakeProvider<C>, cancel: Arc<AtomicBool>) -> Self {
        Runner {
            make,
            cancel,
            rows: Vec::new(),
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    /// The project's runner on one cell of the tree's source.
    async fn run_one(
        &self,
        r: &Request,
        tree: &Path,
        run: &RunFolder,
        variant: Variant,
    ) -> anyhow::Result<()> {
        let c = r.cell;
        let source = tree.display().to_string();
        let profile = r.storage_profile.as_ref().map(|p| p.to_string());
        let text = crate::spec::OneCell {
            name: "bisect",
            arch: c.arch,
            hz: c.hz,
            variant,
            size: c.size,
            source: &source,
            storage_profile: profile.as_deref(),
            clock: r.clock.as_deref(),
        }
        .toml();
        let spec = Spec::<C>::parse(&text, "bisect").map_err(|e| anyhow::anyhow!("{e}"))?;
        let Provided {
            provider,
            keys_dir,
            keep,
        } = (self.make)(&spec)?;
        let plan = crate::plan(&spec, &*provider, crate::plan::host_available_mib());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let opts = crate::RunOptions {
            folder: run.clone(),
            on_claim: None,
            events: lazyinit_core::events::EventSink::new(tx),
            cancel: self.cancel.clone(),
            prioritize_sensitive: true,
            boot_timeout: r.boot_timeout,
            artifacts: Arc::new(
                crate::artifacts::Built::new(
                    r.cache.clone(),
                    keys_dir,
                    std::thread::available_parallelism().map_or(2, |n| n.get()),
                )
                .as_committed(),
            ),
            shard_chosen_by: String::new(),
        };
        crate::run(&spec, &plan, provider, opts).await?;
        drop(keep);
        Ok(())
    }
}

/// The row of a sample's run, if it has one: the last not interrupted.
/// A results file that is not there yet has no row; one that cannot be
/// read says why (never "no row").
fn done(csv: &RunFile) -> anyhow::Result<Option<ResultRow>> {
    if !csv.exists() {
        return Ok(None);
    }
    Ok(csv
        .whole_rows()?
        .into_iter()
        .rev()
        .find(|r| r.status != Status::Interrupted))
}

/// Which kernel errors mean the commit does not build (a skip) and the
/// line that says so; any other error stops the bisection.
pub(crate) fn does_not_build(e: &KernelError) -> Option<String> {
    match e {
        KernelError::Build { step, tail, .. } => Some(format!(
            "does not build ({step}): {}",
            tail.lines()
                .rev()
                .find(|l| l.contains("error"))
                .unwrap_or_else(|| tail.lines().last().unwrap_or(""))
                .trim()
        )),
        KernelError::ConfigCheck { .. }
        | KernelError::VariantCheck { .. }
        | KernelError::Patch { .. } => Some(format!("does not build: {e}")),
        _ => None,
    }
}

impl<C: ProviderConfigs> Bench for Runner<C> {
    async fn build(
        &mut self,
        r: &Request,
        tree: &Path,
        variant: Variant,
        say: &Say,
    ) -> anyhow::Result<Result<f64, String>> {
        let mut spec = KernelSpec::new(r.cell.arch, r.cell.hz, variant);
        spec.id.source = KernelSource::Path(tree.to_path_buf());
        spec.as_committed = true;
        let say = say.clone();
        let opts = lazyinit_kernel::BuildOptions {
            progress: Some(Arc::new(move |e| {
                if let lazyinit_kernel::BuildEvent::Step(s) = e {
                    say(&format!("  build: {s}"));
                }
            })),
            ..Default::default()
        };
        let t = Instant::now();
        let built = tokio::select! {
            r = lazyinit_kernel::build(&spec, &opts) => r,
            _ = crate::runner::cancelled(&self.cancel) => {
                return Err(lazyinit_core::exit::ExitError::Interrupted {
                    during: " during a build",
                }.into())
            }
        };
        match built {
            Ok(_) => Ok(Ok(t.elapsed().as_secs_f64())),
            Err(e) => match does_not_build(&e) {
                Some(line) => Ok(Err(line)),
                None => Err(e.into()),
            },
        }
    }

    async fn sample(&mut self, a: SampleAsk<'_>) -> anyhow::Result<Result<Sample, String>> {
        let name = format!(
            "{}-{}-{}",
            &a.commit[..12],
            a.role.replace(' ', "-"),
            a.index
        );
        let run = a.folder.sample_run(&name);
        let csv = run.results_csv();
        let row = match done(&csv)? {
            Some(r) => r,
            None => {
                self.run_one(a.request, a.tree, &run, a.variant).await?;
                if self.cancelled() {
                    return Err(lazyinit_core::exit::ExitError::Interrupted { during: "" }.into());
                }
                done(&csv)?.ok_or_else(|| {
                    anyhow::anyhow!("the run into {} left no row", run.root().display())
                })?
            }
        };
        let mut kept = row.clone();
        kept.axes.source = SourceId::Git(GitIdentity::of_commit(a.commit)?);
        self.rows.push(kept);
        if row.status != Status::Ok {
            return Ok(Err(format!("does not measure: {}", row.error)));
        }
        let metric = a.request.metric;
        let Some(value) = metric.of(&row) else {
            return Ok(Err(format!("the row has no {}", metric.name())));
        };
        Ok(Ok(Sample {
            value,
            sleep_ticks: row.measured.sleep_ticks,
        }))
    }

    fn rows(&self) -> &[ResultRow] {
        &self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_build_config_variant_check_or_patch_is_a_skip_and_nothing_else() {
        let build = KernelError::Build {
            step: "make".into(),
            code: 2,
            tail: "  CC fs/ext4/super.o\nfs/ext4/super.c:12: error: expected ';'\nmake: *** [x] Error 2\nlast line"
                .into(),
            log: PathBuf::from("/x/build.log"),
        };
        assert_eq!(
            does_not_build(&build).as_deref(),
            Some("does not build (make): fs/ext4/super.c:12: error: expected ';'")
        );
        let quiet = KernelError::Build {
            step: "olddefconfig".into(),
            code: 1,
            tail: "one\ntwo  \n".into(),
            log: PathBuf::from("/x/build.log"),
        };
        assert_eq!(
            does_not_build(&quiet).as_deref(),
            Some("does not build (olddefconfig): two")
        );
        let check = KernelError::VariantCheck {
            wanted: "fix".into(),
            found: "nofix".into(),
            tree: PathBuf::from("/t"),
        };
        assert_eq!(
            does_not_build(&check),
            Some(format!("does not build: {check}"))
        );
        let io = KernelError::io(Path::new("/x"), std::io::Error::other("disk full"));
        assert_eq!(
            does_not_build(&io),
            None,
            "an I/O error stops the bisection"
        );
        let step = KernelError::Step("locking".into());
        assert_eq!(does_not_build(&step), None);
    }
}
