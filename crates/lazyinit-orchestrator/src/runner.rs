//! Runs the cells of a plan: build what is missing, then every cell on its
//! own machine, concurrently, writing each row as soon as its cell ends.
//! Interrupts (SIGINT/SIGTERM) stop every guest and record the cells that
//! were running as interrupted; rerunning the same spec resumes.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use lazyinit_core::events::{Event, EventSink, Phase};
use lazyinit_core::provider::{LaunchRequest, Machine, Provider};
use lazyinit_core::results::{ResultRow, ResultsWriter, Status};
use lazyinit_core::{model, Arch, Cell, Variant};
use lazyinit_guest::{Expectation, GuestError, ProtocolOptions, SshRemote};

use crate::gate::HostGate;
use crate::plan::{KernelNeed, Plan};
use crate::spec::Spec;

/// Where and how a run happens.
#[derive(Clone)]
pub struct RunOptions {
    pub out_dir: PathBuf,
    pub cache_dir: PathBuf,
    pub state_dir: PathBuf,
    pub events: EventSink,
    /// Set by the signal handler; every task checks it.
    pub cancel: Arc<AtomicBool>,
    /// Build parallelism for kernels.
    pub jobs: usize,
    /// Raise each cell's guest from mount until its sleep is set (gate).
    pub prioritize_sensitive: bool,
    /// Kernel profile: `qemu` for local guests, `cloud` for EC2.
    pub kernel_profile: lazyinit_kernel::Profile,
    /// Deadline for SSH after launch.
    pub boot_timeout: Duration,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RunSummary {
    pub ok: usize,
    pub failed: usize,
    pub interrupted: usize,
    /// Cells already complete in the results folder (resume).
    pub skipped: usize,
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
        use lazyinit_core::exit;
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

pub const RESULTS_FILE: &str = "results.csv";

/// Cell ids that already have an `ok` row: those are not run again.
pub fn completed_cells(csv: &std::path::Path) -> anyhow::Result<HashSet<String>> {
    if !csv.exists() {
        return Ok(HashSet::new());
    }
    let rows = lazyinit_core::results::read_rows(csv)?;
    Ok(rows
        .into_iter()
        .filter(|r| r.status == Status::Ok)
        .map(|r| r.cell_id)
        .collect())
}

/// Takes `<dir>/.lock` (flock, released when the process ends whatever
/// way it ends) or says which process holds it.
fn lock_folder(dir: &std::path::Path) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    use std::io::{Read, Seek, Write};
    let path = dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            lock.set_len(0)?;
            lock.rewind()?;
            write!(lock, "{}", std::process::id())?;
            Ok(lock)
        }
        Err((mut file, _)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            Err(lazyinit_core::exit::bad_input(format!(
                "another lazyinit-bench run (pid {}) is using {}: wait for it to end, or give this run another --out",
                pid.trim(),
                dir.display()
            ))
            .into())
        }
    }
}

struct Shared {
    spec: Spec,
    opts: RunOptions,
    run_id: String,
    provider: Arc<dyn Provider>,
    writer: Mutex<ResultsWriter>,
    keys: lazyinit_ssh::Keys,
    kernels: BTreeMap<KernelNeed, lazyinit_kernel::KernelArtifact>,
    initramfs: BTreeMap<Arch, PathBuf>,
    gate: HostGate,
    /// Nice value of each cell's unmeasured work (longest cells lowest).
    nice: BTreeMap<String, u8>,
    concurrency: u32,
    teardown_failures: Mutex<Vec<String>>,
}

pub async fn run(
    spec: &Spec,
    plan: &Plan,
    provider: Arc<dyn Provider>,
    opts: RunOptions,
) -> anyhow::Result<RunSummary> {
    let csv = opts.out_dir.join(RESULTS_FILE);
    let done = completed_cells(&csv)?;
    let todo: Vec<Cell> = plan
        .cells
        .iter()
        .filter(|c| !done.contains(&c.id))
        .map(|c| c.cell.clone())
        .collect();
    let mut summary = RunSummary {
        skipped: plan.cells.len() - todo.len(),
        results_csv: csv.clone(),
        ..Default::default()
    };
    // Bad input and missing tools fail here, before anything is written.
    provider.check_storage(&spec.storage_profile)?;
    if !todo.is_empty() {
        provider.preflight(&todo, &spec.storage_profile).await?;
    }
    std::fs::create_dir_all(&opts.out_dir).with_context(|| {
        format!(
            "cannot create the results folder {}",
            opts.out_dir.display()
        )
    })?;
    // One run per results folder: two would share cell folders, sockets
    // included, and one's teardown would stop the other's guests.
    let _folder_lock = lock_folder(&opts.out_dir)?;
    let writer = ResultsWriter::open(&csv)?;
    std::fs::write(
        opts.out_dir.join("spec.toml"),
        toml::to_string_pretty(spec).unwrap_or_default(),
    )
    .with_context(|| format!("cannot write to {}", opts.out_dir.display()))?;
    // Every command that wrote rows here, for whoever checks a figure.
    {
        use std::io::Write;
        let line = format!(
            "{} {}\n",
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            std::env::args().collect::<Vec<_>>().join(" ")
        );
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(opts.out_dir.join("command.txt"))
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .with_context(|| format!("cannot write to {}", opts.out_dir.display()))?;
    }
    if todo.is_empty() {
        return Ok(summary);
    }
    for c in &todo {
        opts.events.phase(&c.id(), Phase::Queued);
    }

    let keys = {
        let dir = opts.state_dir.clone();
        tokio::task::spawn_blocking(move || lazyinit_ssh::Keys::load_or_create(&dir))
            .await?
            .context("cannot set up the project's SSH keys")?
    };

    // Kernels one after another: each build already uses every core.
    let mut kernels = BTreeMap::new();
    for need in &plan.kernels {
        let waiting: Vec<String> = todo
            .iter()
            .filter(|c| KernelNeed::of(c) == *need)
            .map(|c| c.id())
            .collect();
        if waiting.is_empty() {
            continue;
        }
        if opts.cancel.load(Ordering::SeqCst) {
            anyhow::bail!(lazyinit_core::provider::ProviderError::Interrupted);
        }
        for id in &waiting {
            opts.events.phase(id, Phase::Build);
        }
        let spec_k = lazyinit_kernel::KernelSpec {
            arch: need.arch,
            hz: need.hz,
            variant: need.variant,
            source: need.source.clone(),
            profile: opts.kernel_profile,
        };
        let events = opts.events.clone();
        let first = waiting.first().cloned().unwrap_or_default();
        let progress: lazyinit_kernel::ProgressFn = Arc::new(move |e| {
            if let lazyinit_kernel::BuildEvent::Step(s) = e {
                events.note(&first, format!("kernel: {s}"));
            }
        });
        let bo = lazyinit_kernel::BuildOptions {
            cache_dir: opts.cache_dir.clone(),
            jobs: opts.jobs,
            progress: Some(progress),
            ..Default::default()
        };
        let art = tokio::select! {
            r = lazyinit_kernel::build(&spec_k, &bo) => r,
            _ = cancelled(&opts.cancel) => anyhow::bail!(lazyinit_core::provider::ProviderError::Interrupted),
        }
        .with_context(|| {
                format!(
                    "building the {} HZ={} {} kernel from {}",
                    need.arch, need.hz, need.variant, need.source
                )
            })?;
        kernels.insert(need.clone(), art);
    }

    let mut initramfs = BTreeMap::new();
    for arch in todo
        .iter()
        .map(|c| c.arch)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let path = crate::artifacts::initramfs_for(arch, &keys, &opts.cache_dir, &opts.state_dir)
            .await
            .with_context(|| format!("preparing the {arch} guest image"))?;
        initramfs.insert(arch, path);
    }

    let concurrency = plan.concurrency.min(todo.len()).max(1);
    let raising_provider = provider.clone();
    let shared = Arc::new(Shared {
        spec: spec.clone(),
        run_id: plan.run_id.clone(),
        provider,
        writer: Mutex::new(writer),
        keys,
        kernels,
        initramfs,
        // Also for one cell at a time: other processes on the host (another
        // run, a build) compete for the CPU just the same.
        gate: {
            let g = HostGate::new(opts.prioritize_sensitive);
            let g = if raising_provider.shares_host() {
                g.exclusive(crate::gate::HostToken::host(), opts.cancel.clone())
            } else {
                g
            };
            g.prioritizing(raising_provider)
        },
        nice: {
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
        },
        concurrency: concurrency as u32,
        teardown_failures: Mutex::default(),
        opts,
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(concurrency));
    // With-fix cells first, then the largest volumes: with fewer slots than
    // cells, the long no-fix cells are not left for last.
    let mut order = todo;
    order.sort_by_key(|c| (c.variant != Variant::Fix, std::cmp::Reverse(c.volume)));
    let mut tasks = tokio::task::JoinSet::new();
    // Slots are taken here, in order.
    let mut never_started = Vec::new();
    for cell in order {
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore never closes");
        if shared.opts.cancel.load(Ordering::SeqCst) {
            never_started.push(cell);
            continue;
        }
        let shared = shared.clone();
        tasks.spawn(async move {
            let _slot = slot;
            run_cell(&shared, cell).await
        });
    }
    for cell in never_started {
        tracing::debug!(cell = %cell.id(), "not started: interrupted");
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
    // Whatever way the cells ended: retry failed teardowns, wait for the
    // background ones, and say what is left.
    summary.teardown_failures = std::mem::take(&mut *shared.teardown_failures.lock().unwrap());
    if let Err(e) = shared.provider.finish().await {
        tracing::error!("resources left behind: {e}");
        summary.leaks.push(e.to_string());
    }
    Ok(summary)
}

/// The command line of a kexec'd cloud kernel: what our initramfs needs
/// (our /init, DHCP on the instance's network, the RNG seeded at once so
/// SSH answers) and the machine's own `kexec_args` (the expiry).
pub fn kexec_cmdline(arch: Arch, machine_args: &[String]) -> String {
    let mut extra: Vec<String> = ["rdinit=/init", "lazyinit.net=dhcp", "random.trust_cpu=on"]
        .map(String::from)
        .into();
    extra.extend(machine_args.iter().cloned());
    lazyinit_guest::install::ec2_cmdline(arch, &extra)
}

/// Resolves once the cancel flag is set (checked every 200 ms).
pub async fn cancelled(flag: &AtomicBool) {
    while !flag.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn run_cell(sh: &Shared, cell: Cell) -> Status {
    let id = cell.id();
    let ev = &sh.opts.events;
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let log_dir = sh.opts.out_dir.join(&id);
    let _ = std::fs::create_dir_all(&log_dir);
    let kernel = &sh.kernels[&KernelNeed::of(&cell)];
    let req = LaunchRequest {
        run_id: sh.run_id.clone(),
        cell: cell.clone(),
        kernel_image: kernel.image.clone(),
        kernel_release: kernel.manifest.kernel_release.clone(),
        initramfs: sh.initramfs[&cell.arch].clone(),
        log_dir: log_dir.clone(),
        extra_cmdline: vec![],
        storage_profile: sh.spec.storage_profile,
    };
    let mut row = ResultRow {
        run_id: sh.run_id.clone(),
        cell_id: id.clone(),
        provider: sh.provider.name().to_string(),
        machine: String::new(),
        accel: String::new(),
        arch: cell.arch,
        kernel_release: kernel.manifest.kernel_release.clone(),
        kernel_source: cell.source.to_string(),
        hz: cell.hz,
        variant: cell.variant,
        wait_mult: cell.wait_mult,
        volume_bytes: cell.volume.0,
        groups: None,
        mkfs_s: None,
        mount_s: None,
        lazyinit_s: None,
        lazyinit_poll_s: None,
        ms_per_group: None,
        traced_groups: None,
        repetition: cell.repetition,
        started_at,
        harness_version: lazyinit_core::HARNESS_VERSION.into(),
        status: Status::Failed,
        error: String::new(),
        clocksource: String::new(),
        sleep_ticks: None,
        boot_s: None,
        first_group_s: None,
        storage_profile: sh.spec.storage_profile.to_string(),
        concurrency: sh.concurrency,
        mkfs_cmd: String::new(),
        z1_ms: None,
        z1_target_ms: None,
        guest_part_ms: None,
        zero_hold_ms: None,
        zero_median_ms: None,
        z1_attempts: None,
        estimated: false,
        estimate_after: None,
        estimate_groups: None,
        estimate_cycle_ms: None,
        lazyinit_lo_s: None,
        lazyinit_hi_s: None,
    };

    ev.phase(&id, Phase::Launch);
    tracing::info!(cell = %id, storage = %sh.spec.storage_profile, "launching");
    let launch_started = Instant::now();
    let machine = match sh.provider.launch(&req).await {
        Ok(m) => m,
        Err(e) => return finish(sh, row, Err(e.to_string()), None, &log_dir),
    };
    let info = machine.info();
    row.machine = info.machine;
    row.accel = info.accel;

    let gate = sh
        .gate
        .for_cell(&id, sh.nice.get(&id).copied().unwrap_or(0));
    gate.prepare();
    let (mut machine, result) =
        measure(sh, &cell, &req, machine, launch_started, &gate, &mut row).await;
    let tail = machine.console_tail(40);
    ev.phase(&id, Phase::Teardown);
    if let Err(e) = machine.teardown().await {
        tracing::error!(cell = %id, "teardown failed: {e}");
        sh.teardown_failures
            .lock()
            .unwrap()
            .push(format!("{id}: {e}"));
    }
    finish(sh, row, result, Some(tail), &log_dir)
}

/// Boot, then the guest protocol. Returns the machine for teardown.
async fn measure(
    sh: &Shared,
    cell: &Cell,
    req: &LaunchRequest,
    machine: Box<dyn Machine>,
    launch_started: Instant,
    gate: &crate::gate::CellGate,
    row: &mut ResultRow,
) -> (Box<dyn Machine>, Result<(), String>) {
    let id = cell.id();
    sh.opts.events.phase(&id, Phase::Boot);
    let ep = machine.endpoint();
    let keys = sh.keys.clone();
    let cancel = sh.opts.cancel.clone();
    let deadline = Instant::now() + sh.opts.boot_timeout;
    let mut machine = machine;
    let joined = tokio::task::spawn_blocking(move || {
        let r = SshRemote::wait_ready(&ep, &keys, deadline, || {
            !cancel.load(Ordering::SeqCst) && machine.is_alive()
        });
        (machine, r)
    })
    .await;
    let (machine, remote) = match joined {
        Ok(x) => x,
        Err(e) => panic!("boot wait panicked: {e}"),
    };
    let remote = match remote {
        Ok(r) => r,
        Err(_) if sh.opts.cancel.load(Ordering::SeqCst) => {
            return (machine, Err(INTERRUPTED.into()))
        }
        Err(e) => {
            return (
                machine,
                Err(format!("guest did not become reachable over SSH: {e}")),
            )
        }
    };
    row.boot_s = Some(launch_started.elapsed().as_secs_f64());
    let (machine, remote) = if machine.needs_kernel_install() {
        // EC2: the instance booted its own kernel; put ours in place with
        // kexec and reconnect (the host key stays pinned across the jump).
        sh.opts
            .events
            .note(&id, "installing the kernel under test (kexec)");
        let ep = machine.endpoint();
        let keys = sh.keys.clone();
        let cancel = sh.opts.cancel.clone();
        let kernel = req.kernel_image.clone();
        let initrd = req.initramfs.clone();
        let release = req.kernel_release.clone();
        let cmdline = kexec_cmdline(cell.arch, &machine.kexec_args());
        let (events, cell_id) = (sh.opts.events.clone(), id.clone());
        let deadline = Instant::now() + sh.opts.boot_timeout;
        let mut machine = machine;
        let joined = tokio::task::spawn_blocking(move || {
            let r = lazyinit_guest::install::install_and_kexec(
                remote.session(),
                &ep,
                &keys,
                &kernel,
                &initrd,
                &cmdline,
                &release,
                deadline,
                || !cancel.load(Ordering::SeqCst) && machine.is_alive(),
                |m| events.note(&cell_id, m),
            );
            (machine, r)
        })
        .await;
        match joined {
            Ok((m, Ok(session))) => (m, SshRemote::from_session(session)),
            Ok((m, Err(_))) if sh.opts.cancel.load(Ordering::SeqCst) => {
                return (m, Err(INTERRUPTED.into()))
            }
            Ok((m, Err(e))) => {
                return (
                    m,
                    Err(format!("installing the kernel under test failed: {e}")),
                )
            }
            Err(e) => panic!("kernel install panicked: {e}"),
        }
    } else {
        (machine, remote)
    };
    let mut remote = remote;

    let exp = Expectation {
        arch: cell.arch,
        hz: cell.hz,
        variant: cell.variant,
        kernel_release: req.kernel_release.clone(),
    };
    let nofix =
        model::predict_cell(cell.hz, Variant::NoFix, cell.wait_mult, cell.volume).lazyinit_s;
    let volume = machine.endpoint().volume_device;
    let mut popts = ProtocolOptions {
        cell_id: id.clone(),
        device: String::new(), // found in the guest below
        warmup_device: machine.warmup_device(),
        mkfs_args: sh.spec.mkfs_args.clone(),
        wait_mult: cell.wait_mult,
        poll_interval: sh.spec.poll_interval,
        // Emulation can slow zeroing a lot; the no-fix model is the slow bound.
        lazyinit_deadline: Duration::from_secs_f64(nofix * 4.0 + 600.0),
        log_dir: req.log_dir.clone(),
        cancel: sh.opts.cancel.clone(),
        events: sh.opts.events.clone(),
        gate: Arc::new(gate.clone()),
        hold: machine.zero_hold(),
        z1_target: sh.spec.storage_profile.z1_target(cell.hz, cell.wait_mult),
        estimate_after: sh.spec.estimate_after,
    };
    let m = tokio::task::spawn_blocking(move || {
        popts.device = lazyinit_guest::volume::find(&mut remote, &volume)?;
        lazyinit_guest::run(&mut remote, &exp, &popts)
    })
    .await;
    let m = match m {
        Ok(Ok(m)) => m,
        Ok(Err(GuestError::Interrupted)) => return (machine, Err(INTERRUPTED.into())),
        Ok(Err(e)) => return (machine, Err(e.to_string())),
        Err(e) => return (machine, Err(format!("guest protocol panicked: {e}"))),
    };
    row.kernel_release = m.kernel_release;
    row.clocksource = m.clocksource;
    row.groups = Some(m.groups);
    row.mkfs_s = m.mkfs_s;
    row.mount_s = m.mount_s;
    row.lazyinit_s = m.lazyinit_s;
    row.lazyinit_poll_s = m.lazyinit_poll_s;
    row.ms_per_group = m.ms_per_group;
    row.traced_groups = Some(m.traced_groups);
    row.first_group_s = m.first_group_s;
    row.sleep_ticks = m.sleep_ticks;
    row.mkfs_cmd = m.mkfs_cmd;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    row.z1_ms = m.z1_ms;
    row.zero_median_ms = m.zero_median_ms;
    row.zero_hold_ms = m.hold.map(ms);
    if let Some(c) = m.calibration {
        row.z1_target_ms = Some(ms(c.z1_target));
        row.guest_part_ms = Some(ms(c.guest_part));
        row.z1_attempts = Some(m.z1_attempts);
    }
    row.estimate_after = sh.spec.estimate_after;
    if let Some(e) = m.estimate {
        row.estimated = true;
        row.estimate_groups = Some(e.groups_traced);
        row.estimate_cycle_ms = Some(e.cycle_s * 1000.0);
        row.lazyinit_lo_s = Some(e.lo_s);
        row.lazyinit_hi_s = Some(e.hi_s);
    }
    (machine, Ok(()))
}

const INTERRUPTED: &str = "interrupted";

fn finish(
    sh: &Shared,
    mut row: ResultRow,
    result: Result<(), String>,
    tail: Option<String>,
    log_dir: &std::path::Path,
) -> Status {
    row.status = match &result {
        Ok(()) => Status::Ok,
        Err(e) if e == INTERRUPTED || sh.opts.cancel.load(Ordering::SeqCst) => Status::Interrupted,
        Err(_) => Status::Failed,
    };
    if let Err(e) = &result {
        row.error = one_line(e);
        let mut text = format!("{e}\n");
        if let Some(t) = &tail {
            text.push_str("\n--- console tail ---\n");
            text.push_str(t);
            text.push('\n');
        }
        let _ = std::fs::write(log_dir.join("error.txt"), text);
    }
    if let Err(e) = sh.writer.lock().unwrap().append(&row) {
        tracing::error!("cannot write the result row of {}: {e}", row.cell_id);
    }
    sh.opts.events.emit(Event::Finished {
        cell: row.cell_id.clone(),
        status: row.status.to_string(),
        lazyinit_s: row.lazyinit_s,
        error: result.err().map(|e| match tail {
            Some(t) if !t.is_empty() => format!("{e}\n--- console tail ---\n{t}"),
            _ => e,
        }),
    });
    row.status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_run_per_results_folder() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock_folder(dir.path()).unwrap();
        let err = lock_folder(dir.path()).unwrap_err();
        assert_eq!(
            lazyinit_core::exit::code_of(&err),
            lazyinit_core::exit::BAD_INPUT
        );
        assert!(
            err.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(held);
        lock_folder(dir.path()).unwrap();
    }
}
