//! Runs the cells of a plan: [`prepare`] the results folder (what is left
//! to do, the provider's checks, the lock), [`build_artifacts`] the cells
//! boot, [`schedule`] the cells on their own machines, concurrently, and
//! measure each ([`crate::cell::measure`]), writing its row as soon as it
//! ends. Interrupts (SIGINT/SIGTERM) stop every guest and record the cells
//! that were running as interrupted; rerunning the same spec resumes.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lazyinit_core::events::{EventSink, Phase};
use lazyinit_core::provider::Provider;
use lazyinit_core::results::{ResultsError, ResultsWriter, Status};
#[cfg(test)]
use lazyinit_core::KernelProfile;
use lazyinit_core::{
    exit, Arch, Cell, ClaimError, Hz, KernelSource, RunFile, RunFolder, RunWriter, StorageProfile,
    Variant,
};
use lazyinit_guest::Connect;

use crate::artifacts::{Artifacts, Kernel};
use crate::error::RunError;
use crate::gate::HostGate;
use crate::plan::{KernelNeed, Plan};
use crate::spec::{ProviderConfigs, Spec};

/// Where and how a run happens.
#[derive(Clone)]
pub struct RunOptions {
    pub folder: RunFolder,
    /// Given the run's writer once the run holds its folder (the command
    /// keeps its events, log and report there through it).
    pub on_claim: Option<OnClaim>,
    pub events: EventSink,
    /// Set by the signal handler; every task checks it.
    pub cancel: Arc<AtomicBool>,
    /// Raise each cell's guest from mount until its sleep is set (gate).
    pub prioritize_sensitive: bool,
    /// Deadline for SSH after launch.
    pub boot_timeout: Duration,
    /// Kernels, guest images and the way into guests.
    pub artifacts: Arc<dyn Artifacts>,
    /// How the plan's shard was chosen (`--shard 1/2`, or the engine's
    /// variables), for `shard.toml`; unused when the plan is not a shard.
    pub shard_chosen_by: String,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RunSummary {
    pub ok: usize,
    pub failed: usize,
    pub interrupted: usize,
    /// Cells already complete in the results folder (resume).
    pub skipped: usize,
    /// Cells not started because the run was interrupted first.
    pub not_started: usize,
    pub results_csv: PathBuf,
    /// Cell teardowns that failed (the provider's `finish` retried them).
    pub teardown_failures: Vec<String>,
    /// What the provider's `finish` could not remove: ids and the command
    /// that removes them. Never silent: the run exits 3.
    pub leaks: Vec<String>,
}

impl RunSummary {
    /// The exit code of a run that got this far: a leak first (it costs
    /// money until someone acts), then an interrupt, then failed cells.
    pub fn exit_code(&self, cancelled: bool) -> u8 {
        if !self.leaks.is_empty() {
            exit::INFRASTRUCTURE
        } else if cancelled || self.interrupted > 0 {
            exit::INTERRUPTED
        } else if self.failed > 0 {
            exit::REGRESSION_OR_CELL_FAILED
        } else {
            exit::OK
        }
    }
}

/// Cell ids that already have an `ok` row: those are not run again. A
/// torn last line (a run killed while writing it) is not counted; the
/// resume cuts it off once it holds the folder.
pub fn completed_cells(csv: &RunFile) -> Result<HashSet<String>, ResultsError> {
    if !csv.exists() {
        return Ok(HashSet::new());
    }
    let rows = csv.whole_rows()?;
    Ok(rows
        .into_iter()
        .filter(|r| r.status == Status::Ok)
        .map(|r| r.cell_id)
        .collect())
}

/// What each cell's guest protocol is given from the spec.
#[derive(Debug, Clone)]
pub(crate) struct CellSettings {
    pub storage_profile: StorageProfile,
    pub mkfs_args: Vec<String>,
    pub poll_interval: Duration,
    /// Stop early once the cycle has locked (`estimate-after`).
    pub estimate_after: Option<u64>,
}

/// What [`RunOptions::on_claim`] calls.
pub type OnClaim = Arc<dyn Fn(&RunWriter) + Send + Sync>;

/// Everything the cells of a run share.
pub(crate) struct Shared {
    pub run_id: String,
    pub provider: Arc<dyn Provider>,
    pub run: RunWriter,
    pub writer: Mutex<ResultsWriter>,
    pub built: Built,
    pub gate: HostGate,
    /// Nice value of each cell's unmeasured work (longest cells lowest).
    pub nice: BTreeMap<String, u8>,
    pub concurrency: u32,
    pub settings: CellSettings,
    pub events: EventSink,
    pub cancel: Arc<AtomicBool>,
    pub boot_timeout: Duration,
    /// Cells whose row `results.csv` did not take, and the first error.
    pub unwritten: Mutex<(Vec<String>, Option<ResultsError>)>,
    /// Cells whose machine's teardown failed, with the error.
    pub teardown_failures: Mutex<Vec<String>>,
    /// The first file of the results folder a full disk refused: the run
    /// starts no more cells, and ends exit 3 saying so.
    pub disk_full: Mutex<Option<PathBuf>>,
    /// Which shard and host every row of the run says measured it.
    pub origin: Origin,
}

/// Which shard and host measured a row (its `shard` and `host` columns).
#[derive(Debug, Clone, Default)]
pub(crate) struct Origin {
    pub shard: String,
    pub host: String,
}

impl Origin {
    pub fn of(plan: &Plan) -> Origin {
        Origin {
            shard: plan.shard.map(|s| s.to_string()).unwrap_or_default(),
            host: crate::record::hostname(),
        }
    }
}

impl Shared {
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }
    /// Notes that the results folder's disk refused `file` (the first
    /// such file is kept).
    pub fn note_disk_full(&self, file: &Path) {
        tracing::error!(
            "the results folder's disk is full: {} could not be written",
            file.display()
        );
        self.disk_full
            .lock()
            .unwrap()
            .get_or_insert_with(|| file.to_path_buf());
    }
    /// Whether no more cells start: an interrupt, or a full disk.
    pub fn stopped(&self) -> bool {
        self.cancelled() || self.disk_full.lock().unwrap().is_some()
    }
}

/// What the cells boot, and the way into them.
pub(crate) struct Built {
    pub kernels: BTreeMap<KernelNeed, Kernel>,
    pub initramfs: BTreeMap<Arch, PathBuf>,
    pub connect: Arc<dyn Connect>,
}

/// Runs what is left of `plan` on `provider`, into `opts.folder`, and says
/// how the cells ended. An error is what stopped the run before its cells
/// (the provider refused them, a build failed, the folder is in use) or
/// rows it could not write; a cell's failure is its row's.
pub async fn run<C: ProviderConfigs>(
    spec: &Spec<C>,
    plan: &Plan,
    provider: Arc<dyn Provider>,
    opts: RunOptions,
) -> Result<RunSummary, RunError> {
    let root = opts.folder.root().to_path_buf();
    let prepared = prepare(spec, plan, &*provider, &opts)
        .await
        .map_err(|e| e.or_disk_full(&root))?;
    let mut summary = RunSummary {
        skipped: plan.cells.len() - prepared.todo.len(),
        results_csv: opts.folder.results_csv().shown(),
        ..Default::default()
    };
    if prepared.todo.is_empty() {
        return Ok(summary);
    }
    let Some(built) = build_artifacts(&prepared.todo, plan, &*provider, &opts).await? else {
        summary.not_started = prepared.todo.len();
        return Ok(summary);
    };
    let settings = CellSettings {
        storage_profile: spec.storage_profile,
        mkfs_args: spec.mkfs_args.clone(),
        poll_interval: spec.poll_interval,
        estimate_after: spec.estimate_after,
    };
    let shared = schedule(
        prepared,
        built,
        plan,
        provider,
        settings,
        opts,
        &mut summary,
    )
    .await;
    // Whatever way the cells ended: the provider retries failed teardowns,
    // waits for background ones, and says what is left.
    summary.teardown_failures = std::mem::take(&mut *shared.teardown_failures.lock().unwrap());
    if let Err(e) = shared.provider.finish().await {
        let e = exit::chain_text(&e);
        tracing::error!("resources left behind: {e}");
        summary.leaks.push(e);
    }
    if let Some(file) = shared.disk_full.lock().unwrap().take() {
        return Err(RunError::DiskFull {
            free: lazyinit_core::writer::free_text(&root),
            folder: root,
            file: Some(file),
        });
    }
    let (cells, first) = std::mem::take(&mut *shared.unwritten.lock().unwrap());
    match first {
        Some(source) => Err(RunError::RowsNotWritten {
            cells,
            results_csv: summary.results_csv,
            source,
        }),
        None => Ok(summary),
    }
}

/// The cells left to run, the results folder locked and ready for their rows.
pub(crate) struct Prepared {
    pub todo: Vec<Cell>,
    pub writer: ResultsWriter,
    /// The folder's writer: its lock is held until the run ends.
    pub run: RunWriter,
}

/// Finds what is left to do and refuses what cannot run: a results folder
/// holding another spec's rows, kernels no build can make, what the
/// provider cannot serve (bad input and missing tools fail here, before
/// anything is built or written). Then takes the results folder: lock,
/// what a killed run left there, `results.csv`, `spec.toml`.
async fn prepare<C: ProviderConfigs>(
    spec: &Spec<C>,
    plan: &Plan,
    provider: &dyn Provider,
    opts: &RunOptions,
) -> Result<Prepared, RunError> {
    let folder = &opts.folder;
    check_same_spec(folder, spec)?;
    crate::record::check_same_shard(folder, plan)?;
    let csv = folder.results_csv();
    let done = completed_cells(&csv).map_err(|e| RunError::Resume(csv.shown(), e))?;
    let todo: Vec<Cell> = plan
        .cells
        .iter()
        .filter(|c| !done.contains(&c.id))
        .map(|c| c.cell.clone())
        .collect();
    let refused = |source| RunError::Refused {
        provider: provider.name().to_string(),
        source,
    };
    plan.refused_by(provider)?;
    if !todo.is_empty() {
        let needs: Vec<KernelNeed> = plan
            .kernels
            .iter()
            .filter(|n| todo.iter().any(|c| c.kernel(n.profile) == **n))
            .cloned()
            .collect();
        opts.artifacts
            .check(&needs)
            .await
            .map_err(RunError::Unbuildable)?;
        provider
            .preflight(&todo, &spec.storage_profile)
            .await
            .map_err(refused)?;
        // A token directory someone else planted stops the run here, with
        // what to do, rather than leaving its cells unserialized.
        if provider.shares_host() && opts.prioritize_sensitive {
            crate::gate::HostToken::host()
                .open()
                .map_err(RunError::Token)?;
        }
    }
    let (run, mut writer) = claim_folder(folder, spec)?;
    if let Some(f) = &opts.on_claim {
        f(&run);
    }
    crate::record::write_shard_record(&run, plan, &spec.hash(), &opts.shard_chosen_by)?;
    recover(plan, provider, &run, &done, &mut writer).await?;
    for c in &todo {
        opts.events.phase(&c.id(), Phase::Queued);
    }
    Ok(Prepared { todo, writer, run })
}

/// Resumes only the spec whose rows are there: `spec.toml` always
/// describes the rows beside it. Any key that differs (storage profile,
/// accel, mkfs arguments, poll interval, wait-mult, the cells) is bad
/// input, named.
fn check_same_spec<C: ProviderConfigs>(folder: &RunFolder, spec: &Spec<C>) -> Result<(), RunError> {
    let path = folder.spec_toml();
    let other = |message: String| {
        RunError::OtherSpec(folder.root().to_path_buf(), exit::bad_input(message))
    };
    let text = match path.read_to_string() {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(RunError::Write(path.shown(), e)),
    };
    // Read back through the type, so keys a newer harness added with a
    // default compare equal to their default.
    let there: Spec<C> = toml::from_str(&text).map_err(|e| {
        other(format!(
            "its spec.toml does not read as a spec ({}): give this run another --out",
            exit::one_line_text(e.message())
        ))
    })?;
    let as_value = |s: &Spec<C>| toml::Value::try_from(s).unwrap_or(toml::Value::Boolean(false));
    let differ = differing_keys("", &as_value(&there), &as_value(spec));
    let Some((key, a, b)) = differ.first() else {
        return Ok(());
    };
    let more = match differ.len() {
        1 => String::new(),
        n => format!(
            " (and {} more: {})",
            n - 1,
            differ[1..]
                .iter()
                .map(|(k, _, _)| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Err(other(format!(
        "`{key}` is {a} there and {b} here{more}: its rows were measured with its spec.toml; rerun that spec to resume, or give this run another --out"
    )))
}

/// Keys whose values differ between two TOML values, dotted, with each
/// side's value (`absent` where a side has none).
fn differing_keys(prefix: &str, a: &toml::Value, b: &toml::Value) -> Vec<(String, String, String)> {
    let show = |v: Option<&toml::Value>| match v {
        Some(v) => {
            let s = v.to_string();
            match s.chars().count() > 60 {
                true => format!("{}...", s.chars().take(57).collect::<String>()),
                false => s,
            }
        }
        None => "absent".to_string(),
    };
    match (a, b) {
        (toml::Value::Table(x), toml::Value::Table(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter()
                .flat_map(|k| {
                    let key = match prefix {
                        "" => k.clone(),
                        p => format!("{p}.{k}"),
                    };
                    match (x.get(k), y.get(k)) {
                        (Some(va), Some(vb)) => differing_keys(&key, va, vb),
                        (va, vb) => vec![(key, show(va), show(vb))],
                    }
                })
                .collect()
        }
        _ if a == b => Vec::new(),
        _ => vec![(prefix.to_string(), show(Some(a)), show(Some(b)))],
    }
}

/// What a run into this folder that was killed left behind: its machines
/// and volumes go (the provider's [`Provider::reclaim`]), and each cell it
/// had started without recording gets a row saying its row was lost (so
/// the rows account for every cell started; the cell runs again).
async fn recover(
    plan: &Plan,
    provider: &dyn Provider,
    run: &RunWriter,
    done: &HashSet<String>,
    writer: &mut ResultsWriter,
) -> Result<(), RunError> {
    let folder = run.folder();
    let removed = provider
        .reclaim(run, &plan.run_id)
        .await
        .map_err(|source| RunError::Refused {
            provider: provider.name().to_string(),
            source,
        })?;
    for r in &removed {
        tracing::warn!(
            "removed what an earlier run into {} left: {r}",
            folder.root().display()
        );
    }
    for p in &plan.cells {
        let cell = run.cell(&p.id);
        let marker = cell.folder().running();
        let Ok(text) = marker.read_to_string() else {
            continue;
        };
        let lost = LostAttempt::read(&text, &marker);
        // A row of that start is there: the killed run recorded the cell
        // and died before its marker went. Nothing was lost.
        let recorded = writer.has_start(&p.id, &lost.started_at);
        if !done.contains(&p.id) && !recorded {
            let mut row = crate::cell::row_for(
                &plan.run_id,
                crate::cell::unlaunched(provider.name(), plan.storage_profile),
                &p.cell,
                "",
                plan.kernel_profile,
                plan.concurrency as u32,
                &Origin::of(plan),
            );
            // The row is the lost attempt's: its start, not this run's,
            // so it never shares a start with the cell's new row.
            row.started_at = lost.started_at;
            row.status = Status::Interrupted;
            row.error = format!(
                "lost: the run that started this cell (pid {}) ended without recording it (killed?); its guest and volume are gone, and this run measures it again",
                lost.pid
            );
            tracing::warn!("{}: {}", p.id, row.error);
            writer.append(&row).map_err(RunError::Results)?;
        }
        cell.clear_running()
            .map_err(|e| RunError::Write(e.path, e.source))?;
    }
    Ok(())
}

/// What a cell's `.running` marker says of the attempt that left it: the
/// pid and the start its row would have had. A marker of an older
/// harness holds the pid only; its start is then the marker's own time
/// (written as the cell started), else the Unix epoch, never now.
struct LostAttempt {
    pid: String,
    started_at: String,
}

impl LostAttempt {
    fn read(text: &str, marker: &lazyinit_core::RunFile) -> LostAttempt {
        let mut words = text.split_whitespace();
        let pid = words.next().unwrap_or("?").to_string();
        let stamp =
            |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let started_at = match words.next() {
            Some(at) if chrono::DateTime::parse_from_rfc3339(at).is_ok() => at.to_string(),
            _ => std::fs::metadata(marker.shown())
                .and_then(|m| m.modified())
                .map(|t| stamp(t.into()))
                .unwrap_or_else(|_| stamp(chrono::DateTime::UNIX_EPOCH)),
        };
        LostAttempt { pid, started_at }
    }
}

/// Makes the results folder this run's: locked, `results.csv` ready for
/// rows, `spec.toml` and a line in `command.txt` written.
fn claim_folder<C: ProviderConfigs>(
    folder: &RunFolder,
    spec: &Spec<C>,
) -> Result<(RunWriter, ResultsWriter), RunError> {
    // One run per results folder: two would share cell folders, sockets
    // included, and one's teardown would stop the other's guests.
    let run = lock_folder(folder)?;
    // A row torn by a run killed while writing it: cut off (every later
    // row would follow it on the same line), kept aside, and said.
    let torn = run.repair_torn_tail().map_err(RunError::Results)?;
    if let Some(t) = torn {
        run.append(RunFolder::RESULTS_TORN, format!("{t}\n"))
            .map_err(|e| RunError::Write(e.path, e.source))?;
        tracing::warn!(
            "{}: its last row was torn (a run killed while writing it): cut off and kept in {}; its cell runs again",
            folder.results_csv().display(),
            folder.results_torn().display()
        );
    }
    let writer = run.results().map_err(RunError::Results)?;
    run.put(
        RunFolder::SPEC_TOML,
        toml::to_string_pretty(spec).unwrap_or_default(),
    )
    .map_err(|e| RunError::Write(e.path, e.source))?;
    // Every command that wrote rows here, for whoever checks a figure.
    let line = format!(
        "{} {}\n",
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    run.append(RunFolder::COMMAND_TXT, line)
        .map_err(|e| RunError::Write(e.path, e.source))?;
    Ok((run, writer))
}

/// Takes the folder's writer (its `.lock`, released when the run's last
/// writer goes or the process ends whatever way it ends) or says which
/// process holds it.
fn lock_folder(folder: &RunFolder) -> Result<RunWriter, RunError> {
    RunWriter::claim(folder).map_err(|e| match e {
        ClaimError::Write(e) => RunError::Folder(e.path, e.source),
        ClaimError::Busy { folder, pid } => RunError::Busy { folder, pid },
    })
}

/// The way into the guests (first: making the project's keys needs host
/// tools, which should be found missing before any build), then the
/// kernels and guest images the cells left to run boot. `None` when the
/// run was interrupted first.
///
/// Kernels of different build trees (arch, source, HZ) build side by side:
/// each make already uses every core, but unpacking, configuring and
/// linking are single-threaded, and two trees overlap those (the first
/// `run quick` on a 2-core host: x86_64 and arm64 at once). The variants of
/// one tree build one after another: they are switches in the same tree.
async fn build_artifacts(
    todo: &[Cell],
    plan: &Plan,
    provider: &dyn Provider,
    opts: &RunOptions,
) -> Result<Option<Built>, RunError> {
    let connect = opts.artifacts.connect().await.map_err(RunError::Connect)?;
    let trees = build_trees(&plan.kernels, todo);
    if opts.cancel.load(Ordering::SeqCst) {
        return Ok(None);
    }
    let builds =
        futures::future::try_join_all(trees.into_iter().map(|needs| build_tree(needs, todo, opts)));
    // The guest images (package downloads, cpio) build beside the kernels.
    let images = futures::future::try_join_all(
        todo.iter()
            .map(|c| c.arch)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|arch| async move {
                let path = opts.artifacts.initramfs(arch).await;
                path.map(|p| (arch, p))
                    .map_err(|e| RunError::Image(arch, e))
            }),
    );
    // And what the provider needs of its own (the virtual clock's QEMU).
    let prepared = async {
        provider
            .prepare(todo)
            .await
            .map_err(|source| RunError::Refused {
                provider: provider.name().to_string(),
                source,
            })
    };
    let (kernels, initramfs): (BTreeMap<KernelNeed, Kernel>, BTreeMap<Arch, PathBuf>) = tokio::select! {
        r = futures::future::try_join3(builds, images, prepared) => {
            let (k, i, ()) = r?;
            (k.into_iter().flatten().collect(), i.into_iter().collect())
        }
        _ = cancelled(&opts.cancel) => return Ok(None),
    };
    Ok(Some(Built {
        kernels,
        initramfs,
        connect,
    }))
}

/// The kernels the cells left to run need, by build tree (arch, source,
/// HZ): the trees may build at once, a tree's kernels one after another.
fn build_trees<'a>(kernels: &'a [KernelNeed], todo: &[Cell]) -> Vec<Vec<&'a KernelNeed>> {
    let mut trees: BTreeMap<(Arch, &KernelSource, Hz), Vec<&KernelNeed>> = BTreeMap::new();
    for need in kernels {
        if todo.iter().any(|c| c.kernel(need.profile) == *need) {
            trees
                .entry((need.arch, &need.source, need.hz))
                .or_default()
                .push(need);
        }
    }
    trees.into_values().collect()
}

/// The kernels of one build tree, one after another, each announced to
/// the cells that wait for it.
async fn build_tree(
    needs: Vec<&KernelNeed>,
    todo: &[Cell],
    opts: &RunOptions,
) -> Result<Vec<(KernelNeed, Kernel)>, RunError> {
    let mut built = Vec::new();
    for need in needs {
        let waiting: Vec<String> = todo
            .iter()
            .filter(|c| c.kernel(need.profile) == *need)
            .map(|c| c.id())
            .collect();
        for id in &waiting {
            opts.events.phase(id, Phase::Build);
        }
        let events = opts.events.clone();
        let first = waiting.first().cloned().unwrap_or_default();
        let progress = Arc::new(move |step: String| events.note(&first, format!("kernel: {step}")));
        let kernel = opts
            .artifacts
            .kernel(need, need.profile, progress)
            .await
            .map_err(|e| RunError::Kernel(Box::new(need.clone()), e))?;
        built.push((need.clone(), kernel));
    }
    Ok(built)
}

/// Runs the cells, as many at once as the plan says, the longest expected
/// first (see [`longest_first`]). Counts how they ended.
async fn schedule(
    prepared: Prepared,
    built: Built,
    plan: &Plan,
    provider: Arc<dyn Provider>,
    settings: CellSettings,
    opts: RunOptions,
    summary: &mut RunSummary,
) -> Arc<Shared> {
    let Prepared { todo, writer, run } = prepared;
    let concurrency = plan.concurrency.min(todo.len()).max(1);
    let shared = Arc::new(Shared {
        run_id: plan.run_id.clone(),
        gate: host_gate(&provider, &opts),
        nice: nice_values(plan, &todo),
        provider,
        run,
        writer: Mutex::new(writer),
        built,
        concurrency: concurrency as u32,
        settings,
        events: opts.events.clone(),
        cancel: opts.cancel.clone(),
        boot_timeout: opts.boot_timeout,
        unwritten: Mutex::default(),
        teardown_failures: Mutex::default(),
        disk_full: Mutex::default(),
        origin: Origin::of(plan),
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let order = longest_first(plan, todo);
    let mut tasks = tokio::task::JoinSet::new();
    // Slots are taken here, in order.
    for cell in order {
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore never closes");
        if shared.stopped() {
            tracing::debug!(cell = %cell.id(), "not started: interrupted, or the disk is full");
            summary.not_started += 1;
            continue;
        }
        let shared = shared.clone();
        tasks.spawn(async move {
            let _slot = slot;
            crate::cell::measure(&shared, cell).await
        });
    }
    while let Some(res) = tasks.join_next().await {
        match res {
            Ok(Status::Ok) => summary.ok += 1,
            Ok(Status::Failed) => summary.failed += 1,
            Ok(Status::Interrupted) => summary.interrupted += 1,
            Err(e) => {
                tracing::error!("cell task panicked: {e}");
                summary.failed += 1;
            }
        }
    }
    shared
}

/// The order cells take slots in: longest predicted wall time first, the
/// schedule `plan::makespan` assumes. With fewer slots than cells, the long
/// no-fix cells start at once instead of after a wave of short ones (48
/// cells on 25 slots: 45 minutes rather than 62). Ties: with-fix first,
/// then the largest volume, then the id.
fn longest_first(plan: &Plan, mut todo: Vec<Cell>) -> Vec<Cell> {
    let predicted: BTreeMap<String, f64> = plan
        .cells
        .iter()
        .map(|p| (p.id.clone(), p.predicted_wall_s))
        .collect();
    let wall = |c: &Cell| predicted.get(&c.id()).copied().unwrap_or(0.0);
    todo.sort_by(|a, b| {
        wall(b)
            .total_cmp(&wall(a))
            .then((a.variant != Variant::Fix).cmp(&(b.variant != Variant::Fix)))
            .then(b.volume.cmp(&a.volume))
            .then(a.id().cmp(&b.id()))
    });
    todo
}

/// How the cells share the host (see [`crate::gate`]). Also for one cell
/// at a time: other processes on the host (another run, a build) compete
/// for the CPU just the same.
fn host_gate(provider: &Arc<dyn Provider>, opts: &RunOptions) -> HostGate {
    let g = HostGate::new(opts.prioritize_sensitive);
    let g = match provider.shares_host() {
        true => g.exclusive(crate::gate::HostToken::host(), opts.cancel.clone()),
        false => g,
    };
    g.prioritizing(provider.clone())
}

/// The nice value of each cell's unmeasured work: the cells expected to
/// take longest get the CPU first.
fn nice_values(plan: &Plan, todo: &[Cell]) -> BTreeMap<String, u8> {
    let mine: Vec<_> = plan
        .cells
        .iter()
        .filter(|p| todo.iter().any(|c| c.id() == p.id))
        .collect();
    let d: Vec<f64> = mine.iter().map(|p| p.predicted_wall_s).collect();
    mine.iter()
        .map(|p| p.id.clone())
        .zip(crate::gate::nice_by_duration(&d))
        .collect()
}

/// Resolves once the cancel flag is set (checked every 200 ms).
pub async fn cancelled(flag: &AtomicBool) {
    while !flag.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazyinit_core::exit::ExitCode;

    #[test]
    fn one_run_per_results_folder() {
        let dir = tempfile::tempdir().unwrap();
        let folder = RunFolder::new(dir.path());
        let held = lock_folder(&folder).unwrap();
        let err = lock_folder(&folder).unwrap_err();
        assert_eq!(err.exit_code(), exit::BAD_INPUT);
        assert!(
            exit::one_line(&err).contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(held);
        lock_folder(&folder).unwrap();
    }

    fn cell(arch: Arch, hz: u32, variant: Variant) -> Cell {
        Cell {
            provider: "qemu".into(),
            axes: lazyinit_core::Axes::new(
                arch,
                KernelSource::Debian61,
                Hz::new(hz).unwrap(),
                variant,
                "64GiB".parse().unwrap(),
            ),
            repetition: 1,
        }
    }

    #[test]
    fn trees_build_apart_and_a_trees_variants_together() {
        let todo = [
            cell(Arch::X86_64, 250, Variant::NoFix),
            cell(Arch::X86_64, 250, Variant::Fix),
            cell(Arch::Arm64, 100, Variant::Fix),
            cell(Arch::Arm64, 100, Variant::NoFix),
            cell(Arch::Arm64, 250, Variant::Fix),
        ];
        let mut needs: Vec<KernelNeed> =
            todo.iter().map(|c| c.kernel(KernelProfile::Qemu)).collect();
        // A kernel no cell left to run needs is not built.
        needs.push(cell(Arch::X86_64, 1000, Variant::Fix).kernel(KernelProfile::Qemu));
        let trees = build_trees(&needs, &todo);
        let shape: Vec<Vec<String>> = trees
            .iter()
            .map(|t| {
                t.iter()
                    .map(|n| format!("{}-{}-{}", n.arch, n.hz, n.variant))
                    .collect()
            })
            .collect();
        assert_eq!(
            shape,
            [
                vec!["x86_64-250-nofix", "x86_64-250-fix"],
                vec!["arm64-100-fix", "arm64-100-nofix"],
                vec!["arm64-250-fix"],
            ]
        );
    }
}
