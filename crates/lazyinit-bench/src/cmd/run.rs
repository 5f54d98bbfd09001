//! `lazyinit-bench run` and `plan`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lazyinit_core::exit::{self, bad_input};
use lazyinit_core::{Arch, ByteSize, Hz, KernelSource, RunFolder, StorageProfile, Variant};
use lazyinit_orchestrator::spec;

use super::providers::{self, ProviderFlags, Spec};

#[derive(clap::Args, Debug)]
pub struct SpecArgs {
    /// A spec file (.toml) or a preset (listed with what each measures;
    /// `plan NAME` prints its time on this host). Without it and with
    /// --arch/--hz/--variant/--size, runs that one cell.
    #[arg(long_help = presets_help(), help = presets_help())]
    pub spec: Option<String>,
    /// One cell: guest arch (x86_64, arm64).
    #[arg(long)]
    pub arch: Option<Arch>,
    /// One cell: CONFIG_HZ (100, 250, 300, 1000).
    #[arg(long)]
    pub hz: Option<Hz>,
    /// One cell: fix or nofix.
    #[arg(long)]
    pub variant: Option<Variant>,
    /// One cell: volume size, e.g. 64GiB, 2TiB.
    #[arg(long)]
    pub size: Option<ByteSize>,
    /// One cell: kernel source (debian-6.1, debian-6.12, debian-5.10, a
    /// version, a path).
    #[arg(long)]
    pub source: Option<KernelSource>,
    /// A kernel config file as the base of every kernel (`kernel-config` in
    /// a spec): the harness sets only what its guest needs on top.
    #[arg(long, value_name = "FILE")]
    pub kernel_config: Option<PathBuf>,
    /// Override the spec's repetitions.
    #[arg(long)]
    pub repetitions: Option<u32>,
    /// Override how many cells run at once (default: what the host holds).
    #[arg(long)]
    pub concurrency: Option<u32>,
    #[command(flatten)]
    pub provider: ProviderFlags,
    /// What a zeroing costs on the volume: ebs, ebs:D, latency:D, none,
    /// unsafe, iops:N (docs/storage-profiles.md; the provider says which
    /// it serves).
    #[arg(long)]
    pub storage_profile: Option<StorageProfile>,
    /// Stop each cell once its cycle has locked, checking from N groups on,
    /// and record a predicted lazyinit_s with a 95% interval instead of a
    /// measurement (the spec's `estimate-after`; docs/estimates.md).
    #[arg(long, value_name = "N")]
    pub estimate_after: Option<u64>,
}

/// The longest `--boot-timeout` (a day: a guest that has not answered by
/// then never will).
const MAX_BOOT_TIMEOUT_S: u64 = 86_400;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Results folder (default: results/<spec name>-<spec hash>; rerunning
    /// the same spec there resumes it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Do not raise each guest to real-time priority from mount until its
    /// sleep is set (its first zeroings then compete for the CPU with the
    /// other guests; docs/concurrency.md).
    #[arg(long)]
    pub no_isolate: bool,
    /// Seconds to wait for SSH after launch.
    #[arg(long, default_value_t = 300)]
    pub boot_timeout: u64,
    /// Do not print the table at the end, nor write report.md and the plots.
    #[arg(long)]
    pub no_report: bool,
    /// Import each row into a history as it is written (docs/history.md):
    /// `sqlite:PATH`, `postgres://...`, or no value for the default
    /// history. Also the spec's `history` key.
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    pub history: Option<String>,
    /// Run the cells one at a time, into `<results folder>-alone`: the
    /// baseline for `compare --baseline ...-alone/results.csv --candidate
    /// .../results.csv --metric ms_per_group`, which shows what running
    /// concurrently changed per cell.
    #[arg(long)]
    pub alone: bool,
    /// Run only shard K of N of the plan's cells (1 <= K <= N; the same
    /// spec and N always give the same split), or `auto`: K and N from the
    /// engine's environment (LAZYINIT_SHARD=K/N; a Kubernetes Indexed
    /// Job's JOB_COMPLETION_INDEX with LAZYINIT_SHARD_COUNT; GitLab's
    /// CI_NODE_INDEX/CI_NODE_TOTAL; a Slurm array's SLURM_ARRAY_TASK_*).
    /// Merge the shards' folders with `merge` (docs/shards.md).
    #[arg(long, value_name = "K/N|auto")]
    pub shard: Option<lazyinit_orchestrator::ShardArg>,
}

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Show the plan split into N shards (`run --shard K/N`): each shard's
    /// cells and predicted wall time, against the whole plan's.
    /// At most 1024 (lazyinit_orchestrator::shard::MAX_SHARDS).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(lazyinit_orchestrator::shard::MAX_SHARDS)))]
    pub shards: Option<u32>,
    /// Show only the plan of shard K of N, or of the shard `auto` finds
    /// in the environment (as `run --shard` would run it).
    #[arg(long, value_name = "K/N|auto", conflicts_with = "shards")]
    pub shard: Option<lazyinit_orchestrator::ShardArg>,
}

/// The spec to run: a file, a preset, or one cell from flags.
/// The SPEC argument's help: every preset and what it costs, read from the
/// preset itself (its cells, sizes, clock, repetitions), so the list
/// cannot leave one out or misstate it.
fn presets_help() -> String {
    let mut text = String::from(
        "A spec file (.toml), or a preset: `plan NAME` prints its time on this host. Without it and with --arch/--hz/--variant/--size, runs that one cell. Presets:",
    );
    for &name in spec::PRESETS {
        text.push_str(&format!("\n  {name}: {}", preset_cost(name)));
    }
    text
}

/// What preset `name` measures: "8 cells (2TiB, 3TiB; x86_64, arm64;
/// 1 repetition) on the virtual clock".
fn preset_cost(name: &str) -> String {
    let parsed = spec::preset(name).map(|t| Spec::parse(t, name));
    let Some(Ok(spec)) = parsed else {
        return "(cannot be read: a bug)".into();
    };
    let cells = lazyinit_orchestrator::plan::planned_cells(&spec).len();
    let list = |v: Vec<String>| v.join(", ");
    let clock = spec.provider_config.qemu.as_ref().map_or_else(
        || lazyinit_qemu::Clock::default().to_string(),
        |q| q.clock.to_string(),
    );
    let reps = match spec.repetitions {
        1 => "1 repetition".to_string(),
        n => format!("{n} repetitions"),
    };
    let default = if name == "quick" { ", the default" } else { "" };
    format!(
        "{cells} cells ({}; {}; {reps}), clock {clock}, storage {}{default}",
        list(spec.sizes.iter().map(|s| s.to_string()).collect()),
        list(spec.arches.iter().map(|a| a.to_string()).collect()),
        spec.storage_profile,
    )
}

pub fn resolve_spec(a: &SpecArgs) -> anyhow::Result<Spec> {
    let one_cell = a.arch.is_some() || a.hz.is_some() || a.variant.is_some() || a.size.is_some();
    let (mut spec, origin) = match (&a.spec, one_cell) {
        (Some(_), true) => {
            return Err(bad_input(
                "give either a spec/preset or --arch/--hz/--variant/--size, not both",
            )
            .into())
        }
        (None, true) => {
            let (Some(arch), Some(hz), Some(variant), Some(size)) =
                (a.arch, a.hz, a.variant, a.size)
            else {
                return Err(
                    bad_input("one cell needs all of --arch, --hz, --variant and --size").into(),
                );
            };
            let spec = Spec::parse(&one_cell_toml(arch, hz, variant, size, a), "command line")
                .map_err(lazyinit_core::exit::refused)?;
            (spec, "command line".to_string())
        }
        (spec_arg, false) => {
            let name = spec_arg.as_deref().unwrap_or("quick");
            if let Some(text) = spec::preset(name) {
                let spec = Spec::parse(text, name).map_err(lazyinit_core::exit::refused)?;
                (spec, name.to_string())
            } else if std::path::Path::new(name).exists() {
                let spec =
                    Spec::load(std::path::Path::new(name)).map_err(lazyinit_core::exit::refused)?;
                (spec, name.to_string())
            } else {
                return Err(bad_input(format!(
                    "`{name}` is neither a spec file nor a preset ({})",
                    spec::PRESETS.join(", ")
                ))
                .into());
            }
        }
    };
    if let Some(r) = a.repetitions {
        spec.repetitions = r;
    }
    if let Some(c) = &a.kernel_config {
        if !c.is_file() {
            return Err(
                bad_input(format!("--kernel-config: {} is not a file", c.display())).into(),
            );
        }
        spec.kernel_config = Some(c.clone());
    }
    if let Some(c) = a.concurrency {
        if c == 0 {
            return Err(bad_input("--concurrency must be at least 1").into());
        }
        spec.concurrency = spec::Concurrency::Fixed(c);
    }
    if let Some(p) = a.storage_profile {
        spec.storage_profile = p;
    }
    if let Some(n) = a.estimate_after {
        spec::check_estimate_after(n).map_err(bad_input)?;
        spec.estimate_after = Some(n);
    }
    a.provider.apply(&mut spec);
    // The overrides obey the spec's rules (bounds, a matrix of at most
    // MAX_CELLS cells) like the spec's own values.
    spec.validate()
        .map_err(|m| bad_input(format!("{origin} with the command-line options: {m}")))?;
    providers::check_name(&spec, &origin)?;
    if pin_debian_sources(&mut spec)? {
        // Two names of one package (debian:7.2 and debian:7.2.13-1).
        spec.validate().map_err(|m| {
            bad_input(format!(
                "{origin}, its Debian sources pinned to their packages: {m}"
            ))
        })?;
    }
    Ok(spec)
}

/// Pins every `debian:` source to the exact package version it means now
/// (the archive's lists refreshed when stale), saying which on stderr: the
/// cells, the run's id and folder, its rows and the history then name the
/// package that ran. Whether any source was pinned.
fn pin_debian_sources(spec: &mut Spec) -> anyhow::Result<bool> {
    if !spec
        .sources
        .iter()
        .any(|s| matches!(s, KernelSource::Debian(_)))
    {
        return Ok(false);
    }
    let cache = lazyinit_core::cache_root::resolve(None)?;
    lazyinit_core::cache_root::mark(&cache)?;
    let step = |s: String| eprintln!("kernel sources: {s}");
    for source in spec.sources.iter_mut() {
        let pinned = lazyinit_kernel::archive::pin_source(source, &cache, &step)?;
        if pinned != *source {
            eprintln!("{source} is {pinned}");
        }
        *source = pinned;
    }
    Ok(true)
}

/// The one-cell spec of `--arch/--hz/--variant/--size [--source]`, built
/// as a TOML table (never by pasting flag text into TOML, which would let
/// a flag add keys).
fn one_cell_toml(arch: Arch, hz: Hz, variant: Variant, size: ByteSize, a: &SpecArgs) -> String {
    let source = a.source.clone().unwrap_or_default().to_string();
    lazyinit_orchestrator::spec::OneCell {
        name: "cell",
        arch,
        hz,
        variant,
        size,
        source: &source,
        storage_profile: None,
        clock: None,
    }
    .toml()
}

pub async fn plan(a: PlanArgs) -> anyhow::Result<u8> {
    let shard = resolve_shard(a.shard)?;
    let spec = resolve_spec(&a.spec)?;
    // Reads no keys: the state folder is only named.
    let provider = providers::provider(&spec, &lazyinit_core::paths::state_dir())?;
    let p = lazyinit_orchestrator::plan(
        &spec,
        &*provider,
        lazyinit_orchestrator::plan::host_available_mib(),
    );
    let p = match &shard {
        Some((s, how)) => {
            eprintln!("shard {s} ({how})");
            p.shard(*s)
        }
        None => p,
    };
    // What `run` would refuse from the spec, `plan` refuses (one check).
    p.refused_by(&*provider)?;
    let budget = lazyinit_kernel::budget::budget().map_err(bad_input)?;
    let p = match lazyinit_core::cache_root::resolve(None) {
        Ok(cache) => p.with_builds(&cache, budget),
        Err(_) => p,
    };
    // The plan is shown even when its price is not known (a price
    // missing from the config is then the error).
    if let Some(n) = a.shards {
        let shards = lazyinit_orchestrator::shard::shard_plans(&p, n)
            .map_err(|e| lazyinit_core::exit::refused_in("--shards", e))?;
        if a.json {
            let json = serde_json::json!({ "plan": p, "shards": shards });
            println!("{}", serde_json::to_string_pretty(&json)?);
        } else {
            print!("{}", lazyinit_orchestrator::shard::render(&p, &shards));
        }
        return Ok(exit::OK);
    }
    let priced = p.clone().priced(&*provider);
    let shown = priced.as_ref().unwrap_or(&p);
    if a.json {
        println!("{}", serde_json::to_string_pretty(shown)?);
    } else {
        print!("{}", lazyinit_orchestrator::plan::render(shown));
    }
    priced.map_err(lazyinit_core::exit::refused)?;
    Ok(exit::OK)
}

/// SIGINT/SIGTERM set the cancel flag; the runner stops guests, removes
/// volumes and records interrupted cells (within seconds: a command in a
/// guest gives way at once). A second signal forces: the process exits at
/// once with 130, its guests die with it (`PR_SET_PDEATHSIG`), and the next
/// run into the folder removes the volumes and records the lost rows.
/// `keys_dir`, the run's own key folder, goes before that exit (drops do
/// not run on `process::exit`).
pub(crate) fn install_signal_handler(cancel: Arc<AtomicBool>, keys_dir: Option<PathBuf>) {
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            if cancel.swap(true, Ordering::SeqCst) {
                if let Some(dir) = &keys_dir {
                    if let Err(e) = lazyinit_ssh::RunKeys::remove_now(dir) {
                        eprintln!(
                            "cannot remove the run's keys {}: {e}; the next run removes them",
                            dir.display()
                        );
                    }
                }
                eprintln!("forced: exiting now; the guests end with this process, and rerunning the same command removes their volumes and resumes");
                std::process::exit(exit::INTERRUPTED.into());
            }
            eprintln!(
                "interrupted: stopping every guest and removing its volume; resume with: {} (press Ctrl-C again to exit at once)",
                this_command()
            );
        }
    });
}

/// This process's command line, quoted for a shell: what resumes it.
fn this_command() -> String {
    std::env::args_os()
        .map(|a| lazyinit_core::shell::quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The shard `--shard` names, and how it was chosen (said on stderr and
/// kept in the shard's `shard.toml`).
fn resolve_shard(
    arg: Option<lazyinit_orchestrator::ShardArg>,
) -> anyhow::Result<Option<(lazyinit_orchestrator::Shard, String)>> {
    use lazyinit_orchestrator::ShardArg;
    match arg {
        None => Ok(None),
        Some(ShardArg::Fixed(s)) => Ok(Some((s, format!("--shard {s}")))),
        Some(ShardArg::Auto) => lazyinit_orchestrator::shard::from_env(|k| std::env::var(k).ok())
            .map(|(s, how)| Some((s, format!("--shard auto: {how}"))))
            .map_err(|e| lazyinit_core::exit::refused_in("--shard auto", e).into()),
    }
}

/// The results folder, checked before any key, folder or banner: a folder
/// (or none yet) on a real file system that can be created in, not the
/// spec file or the kernel config, and, when it holds anything, a results
/// folder of a run before (rerunning resumes it).
fn check_out(out: &Path, args: &SpecArgs, spec: &Spec) -> anyhow::Result<()> {
    let mut reads = lazyinit_core::output::Reads::new();
    if let Some(p) = args.spec.as_deref().map(Path::new).filter(|p| p.exists()) {
        reads = reads.file(p);
    }
    if let Some(c) = &spec.kernel_config {
        reads = reads.file(c);
    }
    lazyinit_core::output::guard_folder(
        "out",
        out,
        &reads,
        "a results folder (no results.csv, spec.toml or command.txt)",
        RunFolder::is_run_folder,
    )
    .map_err(|e| -> anyhow::Error { lazyinit_core::exit::refused(e).into() })?;
    check_results_header(out)
}

/// A results folder of an older (or newer) harness, whose results.csv has
/// other columns, is refused before its `.lock` is taken: a run could not
/// add a row to it (issue 52: it was exit 3 with the whole header, and a
/// `.lock` left in the committed folder). Read without following the
/// file to a FIFO or a device: only a regular file's first line.
fn check_results_header(out: &Path) -> anyhow::Result<()> {
    use std::io::{BufRead, Read};
    let path = RunFolder::new(out).results_csv().shown();
    let shown = out.display();
    let m = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(bad_input(format!(
                "--out {shown}: cannot read its results.csv ({e}): give another --out"
            ))
            .into())
        }
    };
    if !m.is_file() {
        return Err(bad_input(format!(
            "--out {shown}: its results.csv is not a regular file: give another --out"
        ))
        .into());
    }
    if m.len() == 0 {
        return Ok(());
    }
    let mut first = String::new();
    std::fs::File::open(&path)
        .map(|f| std::io::BufReader::new(f.take(1 << 20)))
        .and_then(|mut r| r.read_line(&mut first))
        .map_err(|e| {
            bad_input(format!(
                "--out {shown}: cannot read its results.csv ({e}): give another --out"
            ))
        })?;
    let header = lazyinit_core::results::COLUMNS.join(",");
    if first.trim_end() == header {
        return Ok(());
    }
    let theirs = first.trim_end().split(',').count();
    Err(bad_input(format!(
        "--out {shown}: a results folder of another harness (its results.csv has {theirs} columns, not this harness's {}): a run cannot add to it; give another --out (a new or empty folder)",
        lazyinit_core::results::COLUMNS.len()
    ))
    .into())
}

// Long: the run command top to bottom (spec, provider, plan, events, run, summary, exit code), read in one go.
pub async fn run(a: RunArgs) -> anyhow::Result<u8> {
    let shard = resolve_shard(a.shard)?;
    let mut spec = resolve_spec(&a.spec)?;
    // Bad input before any key, folder or banner: a file, a device, /proc
    // or a read-only place is not a results folder.
    if let Some(out) = &a.out {
        check_out(out, &a.spec, &spec)?;
    }
    // The history is an output too: checked before anything is made.
    let history = match a.history.as_deref().or(spec.history.as_deref()) {
        None => None,
        Some("") => Some(lazyinit_history::DbUrl::resolve(None).map_err(bad_input)?),
        Some(s) => Some(s.parse::<lazyinit_history::DbUrl>().map_err(bad_input)?),
    };
    if let Some(url) = &history {
        super::history::check_db_out("history", url)?;
    }
    // The cache whose binaries the run boots: trusted, or refused here.
    let cache = lazyinit_core::cache_root::resolve(None)?;
    if a.boot_timeout == 0 || a.boot_timeout > MAX_BOOT_TIMEOUT_S {
        return Err(bad_input(format!(
            "--boot-timeout: use 1 to {MAX_BOOT_TIMEOUT_S} seconds"
        ))
        .into());
    }
    if a.alone {
        spec.concurrency = spec::Concurrency::Fixed(1);
    }
    // The run's SSH keys: its own for a cloud provider (they go with it).
    let keys = providers::run_keys(&spec)?;
    let provider = providers::provider(&spec, keys.dir())?;
    let plan = lazyinit_orchestrator::plan(
        &spec,
        &*provider,
        lazyinit_orchestrator::plan::host_available_mib(),
    );
    let whole = plan.cells.len();
    let plan = match &shard {
        Some((s, how)) => {
            let p = plan.shard(*s);
            eprintln!(
                "shard {s} ({how}): {} of the plan's {whole} cells",
                p.cells.len()
            );
            p
        }
        None => plan,
    };
    let default_name = match &shard {
        Some((s, _)) => format!("{}-{}", plan.run_id, s.slug()),
        None => plan.run_id.clone(),
    };
    let mut out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(default_name));
    if a.alone {
        let name = out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.set_file_name(format!("{name}-alone"));
    }
    check_out(&out, &a.spec, &spec)?;
    // The history is opened (created, checked, migrated) before anything
    // runs: a bad or unreachable one ends the run here, exit 2 or 3 and
    // one line, no guest started and no results folder made (issue 52:
    // each cell's import failed into the log, and the run exited 0).
    if let Some(url) = history.clone() {
        use lazyinit_history::HistoryError;
        tokio::task::spawn_blocking(move || lazyinit_history::History::open(&url).map(drop))
            .await?
            // Named by the flag this command was given.
            .map_err(|e| match e {
                HistoryError::NotAHistory { db, why } => HistoryError::NotAHistory {
                    db: db.replacen("--db ", "--history ", 1),
                    why,
                },
                e => e,
            })?;
    }
    let cancel = Arc::new(AtomicBool::new(false));
    install_signal_handler(cancel.clone(), keys.own_dir().map(PathBuf::from));

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let qemu = format!(
        "qemu-system-{}",
        spec.arches.first().map_or("x86_64", |a| a.uname_machine())
    );
    let (rx, live) = match &history {
        Some(url) => {
            let (rx, live) =
                super::history::live_import(rx, url.clone(), out.clone(), qemu.clone());
            (rx, Some(live))
        }
        None => (rx, None),
    };
    let folder = RunFolder::new(&out);
    // The run's writer, once the runner holds the folder: the events, the
    // log and the report are kept through it.
    let claimed: super::ui::Claimed = Arc::default();
    let ui = super::ui::spawn(rx, &plan, claimed.clone(), show_bars());
    eprintln!(
        "run {}: {} cells, {} at once, results in {}",
        plan.run_id,
        plan.cells.len(),
        plan.concurrency,
        out.display()
    );
    let keep = claimed.clone();
    let marked = cache.clone();
    let opts = lazyinit_orchestrator::RunOptions {
        folder,
        on_claim: Some(Arc::new(move |w: &lazyinit_core::RunWriter| {
            // Past every check of the run: the cache is about to be used.
            if let Err(e) = lazyinit_core::cache_root::mark(&marked) {
                tracing::warn!(
                    "cannot mark {} as a cache: {}",
                    marked.display(),
                    lazyinit_core::exit::chain_text(&e)
                );
            }
            *keep.lock().unwrap() = Some(w.clone());
        })),
        events: lazyinit_core::events::EventSink::new(tx),
        cancel: cancel.clone(),
        prioritize_sensitive: !a.no_isolate,
        boot_timeout: Duration::from_secs(a.boot_timeout),
        artifacts: Arc::new(
            lazyinit_orchestrator::artifacts::Built::new(
                cache,
                keys.dir().to_path_buf(),
                std::thread::available_parallelism().map_or(2, |n| n.get()),
            )
            .with_kernel_config(spec.kernel_config.clone()),
        ),
        shard_chosen_by: shard.map(|(_, how)| how).unwrap_or_default(),
    };
    let result = lazyinit_orchestrator::run(&spec, &plan, provider, opts).await;
    // Said again here: the events or the log of the run are incomplete.
    if let Ok(Some(e)) = ui.await {
        eprintln!("error: {}", exit::chain_text(&e));
    }
    let summary = result?;
    let not_started = match summary.not_started {
        0 => String::new(),
        n => format!(", {n} not started"),
    };
    eprintln!(
        "{} ok, {} failed, {} interrupted{not_started}, {} already done; rows in {}",
        summary.ok,
        summary.failed,
        summary.interrupted,
        summary.skipped,
        summary.results_csv.display()
    );
    let writer = claimed.lock().unwrap().take();
    let mut report_lost = false;
    if let Some(w) = writer.filter(|w| !a.no_report && w.folder().results_csv().exists()) {
        match report_beside(&w) {
            Ok(t) => println!("{t}"),
            Err(e) => match e.downcast_ref::<lazyinit_core::WriteError>() {
                // The rows are all kept; the report beside them is not.
                Some(w) if w.is_disk_full() => {
                    report_lost = true;
                    eprintln!(
                        "error: the disk of the results folder {} is full ({}); {} could not be written: make room, then `lazyinit-bench report {}` makes the report again",
                        out.display(),
                        lazyinit_core::writer::free_text(&out),
                        w.path.display(),
                        out.display(),
                    );
                }
                _ => eprintln!("(no table: {})", crate::fail::text(&e)),
            },
        }
    }
    for f in &summary.teardown_failures {
        eprintln!("teardown failed (retried at the end of the run): {f}");
    }
    let mut code = summary.exit_code(cancel.load(Ordering::SeqCst));
    if report_lost && code == exit::OK {
        code = exit::INFRASTRUCTURE;
    }
    // Every row in the history, or the run's exit code says not (the UI
    // has ended, so the live imports have: their sender is gone).
    if let (Some(url), Some(live)) = (history, live) {
        let folder = out.clone();
        let missing = tokio::task::spawn_blocking(move || {
            let live = live.lock().unwrap();
            super::history::finish_live_import(&url, &folder, &qemu, &live)
        })
        .await?;
        if let Err(line) = missing {
            eprintln!("error: {line}");
            code = super::history::code_with_rows_not_imported(code);
        }
    }
    if code == exit::INFRASTRUCTURE {
        for l in &summary.leaks {
            eprintln!("error: {l}");
        }
    } else if code == exit::INTERRUPTED {
        eprintln!("interrupted: resume with: {}", this_command());
    }
    drop(keys);
    Ok(code)
}

/// The end of `run`: the report of the folder's `results.csv`, as
/// `lazyinit-bench report --svg` makes it, written beside it through the
/// folder's writer (`report.md`, `report.svg`, `report-cycles.svg` when a
/// run has its groups); returns the markdown, the table printed.
fn report_beside(folder: &lazyinit_core::RunWriter) -> anyhow::Result<String> {
    let loaded = lazyinit_report::input::load_run(folder.folder())?;
    let rows: Vec<_> = loaded.iter().map(|l| l.row.clone()).collect();
    let rep = lazyinit_report::build(&rows, lazyinit_report::Metric::default());
    let text = lazyinit_report::render::markdown::render(&rep);
    folder.put(RunFolder::REPORT_MD, &text)?;
    // A plot that cannot be drawn costs the plots, never the table.
    let plots = match lazyinit_report::plot::plots(&rep, &loaded) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("(no plots: {e})");
            return Ok(text);
        }
    };
    for w in &plots.warnings {
        eprintln!("warning: {w}");
    }
    folder.put(RunFolder::REPORT_SVG, &plots.bars)?;
    if let Some((svg, _)) = &plots.cycles {
        folder.put(RunFolder::REPORT_CYCLES_SVG, svg)?;
    }
    Ok(text)
}

fn show_bars() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("CI").is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::Path;

    /// `run --help` names every preset with its cells, sizes and clock
    /// read from the preset (nightly's virtual clock, noisy's 24 cells).
    #[test]
    fn the_help_lists_every_preset_with_what_it_measures() {
        let help = presets_help();
        for &name in spec::PRESETS {
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{name}: ")))
                .unwrap_or_else(|| panic!("{name} missing from:\n{help}"));
            let spec = Spec::parse(spec::preset(name).unwrap(), name).unwrap();
            let cells = lazyinit_orchestrator::plan::planned_cells(&spec).len();
            assert!(line.contains(&format!(": {cells} cells (")), "{line}");
        }
        assert!(
            help.contains(
                "nightly: 8 cells (2TiB, 3TiB; x86_64, arm64; 1 repetition), clock virtual"
            ),
            "{help}"
        );
        assert!(help.contains("noisy: 24 cells"), "{help}");
    }

    /// `run` ends by keeping the report beside its results (README:
    /// "with `report.md` and plots beside the CSV"): the markdown `report`
    /// prints, its bars, and the cycle times of the runs with groups.
    #[test]
    fn the_report_and_its_plots_are_written_beside_the_results() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../lazyinit-report/tests/fixtures/qemu-64g");
        let dir = tempfile::tempdir().unwrap();
        let folder = RunFolder::new(dir.path());
        std::fs::copy(fixture.join("results.csv"), dir.path().join("results.csv")).unwrap();
        for cell in [
            "qemu-arm64-debian-6.1-hz100-fix-64GiB-r3",
            "qemu-arm64-debian-6.1-hz100-nofix-64GiB-r1",
        ] {
            std::fs::create_dir(dir.path().join(cell)).unwrap();
            let groups = Path::new(cell).join("groups.csv");
            std::fs::copy(fixture.join(&groups), dir.path().join(&groups)).unwrap();
        }
        let text = report_beside(&lazyinit_core::RunWriter::claim(&folder).unwrap()).unwrap();
        let rows = folder.results_csv().rows().unwrap();
        let want = lazyinit_report::render::markdown::render(&lazyinit_report::build(
            &rows,
            lazyinit_report::Metric::default(),
        ));
        assert_eq!(text, want, "the table printed is `report`'s");
        let read = |name| folder.file(name).read_to_string().unwrap();
        assert_eq!(read(RunFolder::REPORT_MD), want);
        assert!(read(RunFolder::REPORT_SVG).contains("<svg"));
        assert!(read(RunFolder::REPORT_CYCLES_SVG).contains("<svg"));
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        spec: SpecArgs,
    }

    fn refusal(out: &Path, spec_args: &[&str]) -> Option<String> {
        let a = Cli::try_parse_from(std::iter::once("run").chain(spec_args.iter().copied()))
            .unwrap()
            .spec;
        let spec = resolve_spec(&a).unwrap();
        check_out(out, &a, &spec).err().map(|e| {
            assert_eq!(crate::fail::code(&e), exit::BAD_INPUT, "{e}");
            format!("{e}")
        })
    }

    /// `run --out` (which needs guests past this point): never the spec
    /// or the kernel config, never over a folder holding them, never a
    /// non-empty folder that is not a results folder; a new, empty or
    /// earlier results folder is taken. Nothing is made by the check.
    #[test]
    fn the_results_folder_is_never_an_input_or_a_tree_it_does_not_own() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let specs = root.join("specs");
        std::fs::create_dir_all(specs.join("x")).unwrap();
        let spec = specs.join("quick.toml");
        std::fs::write(&spec, spec::preset("quick").unwrap()).unwrap();
        let config = specs.join("my.config");
        std::fs::write(&config, "CONFIG_EXT4_FS=y\n").unwrap();
        let link = root.join("link");
        std::os::unix::fs::symlink(&specs, &link).unwrap();
        let mine = root.join("mine");
        std::fs::create_dir(&mine).unwrap();
        std::fs::write(mine.join("notes.md"), "mine").unwrap();
        let s = spec.to_str().unwrap();
        let with_config = [s, "--kernel-config", config.to_str().unwrap()];
        for (out, args, why) in [
            (specs.clone(), &[s][..], "would replace"),
            (link.clone(), &[s][..], "would replace"),
            (specs.join("x/.."), &[s][..], "would replace"),
            (config.clone(), &with_config[..], "would replace"),
            (mine.clone(), &["quick"][..], "not a results folder"),
        ] {
            let e = refusal(&out, args).unwrap_or_else(|| panic!("{} taken", out.display()));
            assert!(e.contains(why), "{}: {e}", out.display());
        }
        let before: Vec<_> = std::fs::read_dir(&root).unwrap().collect();
        // Taken: a new folder, an empty one, an earlier run's.
        let earlier = root.join("earlier");
        std::fs::create_dir(&earlier).unwrap();
        std::fs::write(earlier.join("results.csv"), "").unwrap();
        for out in [root.join("new/run"), specs.join("x"), earlier] {
            assert_eq!(refusal(&out, &[s]), None, "{}", out.display());
        }
        assert!(!root.join("new").exists(), "the check makes nothing");
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), before.len() + 1);
    }
}
