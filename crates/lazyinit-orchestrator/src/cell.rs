//! One cell, start to row: launch its machine, wait for its guest, put the
//! kernel under test in place when the provider did not boot it, run the
//! guest protocol, tear the machine down, write the row.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lazyinit_core::events::{Event, Phase};
use lazyinit_core::provider::{KernelBoot, KexecPlan, LaunchRequest, Machine};
use lazyinit_core::results::{Measurement, ResultRow, ResultsError, Status};
use lazyinit_core::writer::Evidence;
use lazyinit_core::{exit, model, Cell, CellFolder, Variant};
use lazyinit_guest::install::KernelUnderTest;
use lazyinit_guest::{Expectation, GuestError, ProtocolOptions, Remote};

use crate::error::CellError;
use crate::gate::CellGate;
use crate::runner::Shared;

/// The machine, shared with the blocking waits that ask whether it lives.
type Held = Arc<tokio::sync::Mutex<Box<dyn Machine>>>;

/// Runs one cell and records how it ended.
pub(crate) async fn measure(sh: &Shared, cell: Cell) -> Status {
    let id = cell.id();
    let folder = sh.run.cell(&id);
    let kernel = &sh.built.kernels[&cell.kernel(sh.provider.kernel_profile())];
    let row = fresh_row(sh, &cell, &kernel.release).await;
    // Until its row is recorded: a later run that finds it knows the row
    // was lost with this run (killed), and says so in a row of this start.
    let marked = folder
        .create()
        .and_then(|()| folder.mark_running(&row.started_at));
    let req = LaunchRequest {
        run_id: sh.run_id.clone(),
        cell: cell.clone(),
        kernel_image: kernel.image.clone(),
        kernel_release: kernel.release.clone(),
        initramfs: sh.built.initramfs[&cell.arch].clone(),
        folder,
        extra_cmdline: vec![],
        storage_profile: sh.settings.storage_profile,
    };
    let mut row = row;
    if let Err(e) = marked {
        // A cell whose folder cannot be written keeps nothing, and a
        // killed run could not tell that it had started: not run.
        return record(sh, &req, row, Err(CellError::Write(e)), None);
    }

    sh.events.phase(&id, Phase::Launch);
    tracing::info!(cell = %id, storage = %sh.settings.storage_profile, "launching");
    let launched = Instant::now();
    let machine = match sh.provider.launch(&req).await {
        Ok(m) => m,
        Err(e) => {
            let status = record(sh, &req, row, Err(CellError::Launch(e)), None);
            clear_running(&req);
            return status;
        }
    };
    let info = machine.info();
    row.testbed.machine = info.machine;
    row.testbed.accel = info.accel;
    // What the protocol keeps beside the row, from the hold the volume
    // started with (a provider that holds zero requests).
    let mut ev = Evidence::default();
    ev.storage.initial = machine
        .zero_hold()
        .map(|h| (sh.settings.storage_profile.to_string(), h.get()));
    let machine: Held = Arc::new(tokio::sync::Mutex::new(machine));

    let gate = sh
        .gate
        .for_cell(&id, sh.nice.get(&id).copied().unwrap_or(0));
    let measured = on_machine(sh, &req, &machine, launched, &gate, &mut row, &mut ev).await;
    let measured = keep_evidence(&req, &ev, measured);

    let (measured, tail) = tear_down(sh, &id, &machine, measured).await;
    let result = measured.map(|m| {
        row.measured = m;
        row.estimate_after = sh.settings.estimate_after;
    });
    let status = record(sh, &req, row, result, Some(tail));
    clear_running(&req);
    status
}

/// Ends the cell's machine: its console tail and what the host says of a
/// guest's failure (a full volume folder) are read first, then it is torn
/// down (a failed teardown is kept for the run's end, which retries it).
async fn tear_down(
    sh: &Shared,
    id: &str,
    machine: &Held,
    measured: Result<Measurement, CellError>,
) -> (Result<Measurement, CellError>, String) {
    let mut machine = machine.lock().await;
    let tail = machine.console_tail(40);
    let measured = measured.map_err(|e| match (&e, machine.host_trouble()) {
        (CellError::Protocol(_) | CellError::Install(_), Some(note)) => CellError::OnHost {
            note,
            source: Box::new(e),
        },
        _ => e,
    });
    sh.events.phase(id, Phase::Teardown);
    if let Err(e) = machine.teardown().await {
        let e = exit::chain_text(&e);
        tracing::error!(cell = %id, "teardown failed: {e}");
        sh.teardown_failures
            .lock()
            .unwrap()
            .push(format!("{id}: {e}"));
    }
    (measured, tail)
}

/// Writes what the protocol returned into the cell's folder. A cell that
/// measured but cannot keep its evidence fails (the row would cite files
/// that are not there); one that failed already keeps its own error, and
/// the write's is logged.
fn keep_evidence(
    req: &LaunchRequest,
    ev: &Evidence,
    measured: Result<Measurement, CellError>,
) -> Result<Measurement, CellError> {
    match (req.folder.write_evidence(ev), measured) {
        (Ok(()), m) => m,
        (Err(e), Ok(_)) => Err(CellError::Write(e)),
        (Err(e), Err(m)) => {
            tracing::error!(cell = %req.cell.id(), "{}", exit::chain_text(&e));
            Err(m)
        }
    }
}

/// The cell's row is recorded: its `.running` marker goes. One that stays
/// only makes a later run remove it (the row is there), so it is logged.
fn clear_running(req: &LaunchRequest) {
    if let Err(e) = req.folder.clear_running() {
        tracing::error!(cell = %req.cell.id(), "{}", exit::chain_text(&e));
    }
}

/// The guest's part: wait for it, put the kernel under test in place if
/// the machine booted its own, run the protocol.
async fn on_machine(
    sh: &Shared,
    req: &LaunchRequest,
    machine: &Held,
    launched: Instant,
    gate: &CellGate,
    row: &mut ResultRow,
    ev: &mut Evidence,
) -> Result<Measurement, CellError> {
    let id = req.cell.id();
    // The boot runs at the harness's own priority: a short cell's guest at
    // its unmeasured-work nice (up to 19) booted in 280 s beside two dozen
    // nice-0 mkfs, and with 48 cells 9 missed the 300 s boot timeout.
    let mut remote = boot(sh, &id, machine).await?;
    row.boot_s = Some(launched.elapsed().as_secs_f64());
    gate.prepare();
    let kernel_boot = machine.lock().await.kernel_boot();
    if let KernelBoot::Kexec(plan) = kernel_boot {
        remote = install_kernel(sh, req, machine, remote, plan).await?;
    }
    protocol(sh, req, machine, remote, gate, ev).await
}

/// Waits until the guest answers, its machine dies or the run is interrupted.
async fn boot(sh: &Shared, id: &str, machine: &Held) -> Result<Box<dyn Remote>, CellError> {
    sh.events.phase(id, Phase::Boot);
    let ep = machine.lock().await.endpoint();
    let (connect, cancel, m) = (sh.built.connect.clone(), sh.cancel.clone(), machine.clone());
    let deadline = Instant::now() + sh.boot_timeout;
    let ready = blocking("boot wait", move || {
        let mut alive = || !cancel.load(Ordering::SeqCst) && m.blocking_lock().is_alive();
        connect.wait_ready(&ep, deadline, &mut alive)
    })
    .await?;
    ready.map_err(|e| match (sh.cancelled(), &e) {
        (true, _) => CellError::Interrupted,
        (false, GuestError::Ssh(lazyinit_ssh::SshError::NotReady { .. })) => {
            CellError::BootTimeout {
                secs: sh.boot_timeout.as_secs(),
                source: e,
            }
        }
        (false, _) => CellError::Boot(e),
    })
}

/// The machine booted its own kernel: upload ours with the initramfs,
/// kexec as the provider's plan says, reconnect (same pinned host key).
/// Each step is noted with its time.
async fn install_kernel(
    sh: &Shared,
    req: &LaunchRequest,
    machine: &Held,
    mut remote: Box<dyn Remote>,
    plan: KexecPlan,
) -> Result<Box<dyn Remote>, CellError> {
    sh.events
        .note(&req.cell.id(), "installing the kernel under test (kexec)");
    let ep = machine.lock().await.endpoint();
    let (connect, cancel, m) = (sh.built.connect.clone(), sh.cancel.clone(), machine.clone());
    let (kernel, initrd) = (req.kernel_image.clone(), req.initramfs.clone());
    let release = req.kernel_release.clone();
    let (events, id) = (sh.events.clone(), req.cell.id());
    let deadline = Instant::now() + sh.boot_timeout;
    let installed = blocking("kernel install", move || {
        let mut alive = || !cancel.load(Ordering::SeqCst) && m.blocking_lock().is_alive();
        let mut reconnect = || connect.wait_ready(&ep, deadline, &mut alive);
        let kernel = KernelUnderTest {
            image: &kernel,
            initramfs: &initrd,
            release: &release,
        };
        lazyinit_guest::install::install_and_kexec(
            &mut *remote,
            &mut reconnect,
            kernel,
            &plan,
            deadline,
            &mut |step| events.note(&id, step),
        )
    })
    .await?;
    installed.map_err(|e| match sh.cancelled() {
        true => CellError::Interrupted,
        false => CellError::guest(CellError::Install, e),
    })
}

/// The shared guest protocol: find the volume (by its NVMe serial on a
/// cloud instance), verify, mkfs, calibrate, mount, time.
async fn protocol(
    sh: &Shared,
    req: &LaunchRequest,
    machine: &Held,
    mut remote: Box<dyn Remote>,
    gate: &CellGate,
    ev: &mut Evidence,
) -> Result<Measurement, CellError> {
    let cell = &req.cell;
    let (volume, warmup_device, hold, guest_paced) = {
        let m = machine.lock().await;
        let virtual_clock = m.info().accel.is_virtual_clock();
        (
            m.endpoint().volume_device,
            m.warmup_device(),
            m.zero_hold(),
            virtual_clock,
        )
    };
    let exp = Expectation {
        arch: cell.arch,
        hz: cell.hz,
        variant: cell.variant,
        kernel_release: req.kernel_release.clone(),
    };
    let nofix = model::predict_cell(&lazyinit_core::Axes {
        variant: Variant::NoFix,
        ..cell.axes.clone()
    })
    .lazyinit_s;
    let mut opts = ProtocolOptions {
        cell_id: cell.id(),
        device: String::new(), // found in the guest, below
        warmup_device,
        // The spec's, then the knobs' off their defaults (`-I 128`): the
        // knob's value is the cell's, so it has the last word.
        mkfs_args: (sh.settings.mkfs_args.iter().cloned())
            .chain(cell.knobs.mkfs_args())
            .collect(),
        wait_mult: cell.wait_mult,
        poll_interval: sh.settings.poll_interval,
        // Emulation can slow zeroing a lot; the no-fix model is the slow bound.
        lazyinit_deadline: Duration::from_secs_f64(nofix * 4.0 + 600.0),
        cancel: sh.cancel.clone(),
        events: sh.events.clone(),
        gate: Arc::new(gate.clone()),
        hold,
        z1_target: sh
            .settings
            .storage_profile
            .z1_target(cell.hz, cell.wait_mult, &cell.knobs),
        estimate_after: sh.settings.estimate_after,
        guest_paced,
    };
    let mut kept = std::mem::take(ev);
    let (measured, kept) = blocking("guest protocol", move || {
        let measured = lazyinit_guest::volume::find(&mut *remote, &volume).and_then(|dev| {
            opts.device = dev;
            lazyinit_guest::run(&mut *remote, &exp, &opts, &mut kept)
        });
        (measured, kept)
    })
    .await?;
    *ev = kept;
    measured.map_err(|e| CellError::guest(CellError::Protocol, e))
}

/// Runs blocking guest I/O (SSH is blocking) on its own thread.
async fn blocking<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, CellError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CellError::Panicked(what, e))
}

/// The row of a cell before anything is known of its run.
/// The cell's blank row ([`blank_row`]), its start a second no row of the
/// cell in `results.csv` has: a row is known by its run, cell and start,
/// and a resume's cell can start in the second its lost or interrupted
/// row recorded (a run killed at boot and resumed at once). It waits for
/// the next second rather than write a start that did not happen.
async fn fresh_row(sh: &Shared, cell: &Cell, kernel_release: &str) -> ResultRow {
    loop {
        let row = blank_row(sh, cell, kernel_release);
        if !sh
            .writer
            .lock()
            .unwrap()
            .has_start(&row.cell_id, &row.started_at)
        {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn blank_row(sh: &Shared, cell: &Cell, kernel_release: &str) -> ResultRow {
    row_for(
        &sh.run_id,
        unlaunched(sh.provider.name(), sh.settings.storage_profile),
        cell,
        kernel_release,
        sh.provider.kernel_profile(),
        sh.concurrency,
        &sh.origin,
    )
}

/// The testbed of a cell not launched yet: its machine and accel are the
/// machine's to say.
pub(crate) fn unlaunched(
    provider: &str,
    storage: lazyinit_core::StorageProfile,
) -> lazyinit_core::Testbed {
    lazyinit_core::Testbed {
        provider: provider.into(),
        machine: "".into(),
        accel: "".into(),
        storage: storage.into(),
    }
}

/// The git tree a cell's kernel is built from, by its identity
/// (`tree-<12 hex>`: its remote, else its root commit, wherever it lies);
/// empty unless the source is the top of a git tree or worktree.
fn kernel_tree(source: &lazyinit_core::KernelSource) -> String {
    match source {
        lazyinit_core::KernelSource::Path(p) if p.join(".git").exists() => {
            lazyinit_core::git::tree_identity(p)
                .map(|id| lazyinit_core::paths::tree_name(&id))
                .unwrap_or_default()
        }
        _ => String::new(),
    }
}

/// A failed row of `cell`, started now, with nothing measured.
pub(crate) fn row_for(
    run_id: &str,
    testbed: lazyinit_core::Testbed,
    cell: &Cell,
    kernel_release: &str,
    kernel_profile: lazyinit_core::KernelProfile,
    concurrency: u32,
    origin: &crate::runner::Origin,
) -> ResultRow {
    ResultRow {
        run_id: run_id.to_string(),
        cell_id: cell.id(),
        testbed,
        axes: cell.axes.clone().into(),
        kernel_profile: Some(kernel_profile),
        kernel_tree: kernel_tree(&cell.axes.source),
        kernel_release: kernel_release.to_string(),
        repetition: cell.repetition,
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        harness_version: lazyinit_core::HARNESS_VERSION.into(),
        harness_commit: lazyinit_core::harness_commit().into(),
        status: Status::Failed,
        error: String::new(),
        boot_s: None,
        concurrency,
        estimate_after: None,
        shard: origin.shard.clone(),
        host: origin.host.clone(),
        measured: Measurement::default(),
    }
}

/// Writes the cell's row (unless it ended ok, with `error.txt`: the error
/// and the console tail) and says how the cell ended. A row that
/// `results.csv` does not take is kept in the cell's folder.
fn record(
    sh: &Shared,
    req: &LaunchRequest,
    mut row: ResultRow,
    result: Result<(), CellError>,
    tail: Option<String>,
) -> Status {
    // A full results disk is the host's, not the cell's: the cell is
    // interrupted (a rerun measures it) and the run stops.
    let full = result.as_ref().err().and_then(CellError::disk_full);
    if let Some(f) = full {
        sh.note_disk_full(f);
    }
    row.status = match &result {
        Ok(()) => Status::Ok,
        Err(CellError::Interrupted) => Status::Interrupted,
        Err(_) if sh.cancelled() || full.is_some() => Status::Interrupted,
        Err(_) => Status::Failed,
    };
    let error = result.err().map(|e| exit::chain_text(&e));
    if let Some(e) = &error {
        row.error = exit::one_line_text(e);
        let mut text = format!("{e}\n");
        if let Some(t) = &tail {
            text.push_str("\n--- console tail ---\n");
            text.push_str(t);
            text.push('\n');
        }
        if let Err(w) = req.folder.put(CellFolder::ERROR_TXT, text) {
            tracing::error!(cell = %row.cell_id, "{}", exit::chain_text(&w));
        }
    }
    if let Err(e) = sh.writer.lock().unwrap().append(&row) {
        tracing::error!("cannot write the result row of {}: {e}", row.cell_id);
        if let ResultsError::Write { path, source } = &e {
            if lazyinit_core::writer::disk_full(source) {
                sh.note_disk_full(path);
            }
        }
        let kept = req.folder.keep_row(&row);
        if let Err(k) = kept {
            tracing::error!("and cannot keep it in the cell's folder either: {k}");
        }
        let mut lost = sh.unwritten.lock().unwrap();
        lost.0.push(row.cell_id.clone());
        lost.1.get_or_insert(e);
    }
    // One line a cell: an interrupt is its status; a failure its error,
    // and where the console tail is (error.txt, not the terminal).
    let said = match row.status {
        Status::Interrupted => None,
        _ => error.map(|_| {
            let mut line = row.error.clone();
            if tail.as_ref().is_some_and(|t| !t.is_empty()) {
                line.push_str(&format!(
                    " (console tail in {})",
                    req.folder.folder().error_txt().display()
                ));
            }
            line
        }),
    };
    sh.events.emit(Event::Finished {
        cell: row.cell_id.clone(),
        status: row.status.to_string(),
        lazyinit_s: row.measured.lazyinit_s,
        error: said,
    });
    row.status
}

#[cfg(test)]
mod tests {
    use super::kernel_tree;
    use lazyinit_core::testing::sh;
    use lazyinit_core::KernelSource;

    /// A row's `kernel_tree` names the tree by its remote, not where it
    /// lies: two clones in two places, one a commit later, and a linked
    /// worktree (a bisect's) get one name; a directory of no git tree
    /// gets none.
    #[test]
    fn a_git_tree_is_recorded_by_its_identity_not_its_path() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("far/away/b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        sh(&a, "git init -q -b main && echo 1 > f && git add f && git commit -qm c1 && git remote add origin https://u:pw@example.org/k/linux.git");
        sh(&b, &format!("git clone -q {} . && git remote set-url origin git@example.org:k/linux && echo 2 > f && git commit -qam c2", a.display()));
        sh(&a, "git worktree add -q --detach ../wt HEAD");
        let name = |p: &std::path::Path| kernel_tree(&KernelSource::Path(p.to_path_buf()));
        let want = lazyinit_core::paths::tree_name("example.org/k/linux");
        assert_eq!(name(&a), want);
        assert_eq!(name(&b), want);
        assert_eq!(name(&d.path().join("wt")), want);
        let plain = d.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        assert_eq!(name(&plain), "");
    }
}
