//! The local QEMU provider: one guest per cell, x86_64 (q35) or arm64
//! (virt), the cell's kernel booted directly with the project's initramfs,
//! SSH forwarded to a loopback port, and a sparse raw volume of the cell's
//! real size on virtio-blk.

pub mod accel;
pub mod args;
pub mod clock;
mod machine;
pub mod nbd;
pub mod process;
pub mod qmp;
pub mod tsc;
pub mod volume;

pub use accel::AccelChoice;
pub use args::Accel;
pub use clock::Clock;
pub use machine::QemuMachine;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lazyinit_core::provider::{
    CellEstimate, Cost, LaunchRequest, Machine, Priority, Provider, ProviderError,
};
use lazyinit_core::{Arch, Cell, CellWriter, KernelProfile, StorageProfile};
use nbd::ThreadLevel;
use serde::{Deserialize, Serialize};

/// `[provider-config.qemu]` in an experiment spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct QemuConfig {
    pub accel: AccelChoice,
    pub memory_mib: u32,
    pub cpus: u32,
    /// Where sparse volume files go (default: `<cache>/volumes`).
    pub volume_dir: Option<PathBuf>,
    #[serde(with = "humantime_serde")]
    pub kvm_probe_timeout: Duration,
    /// Host TSC rate for x86 guests; detected when absent.
    pub tsc_khz: Option<u64>,
    /// Warm-up lazy-init on a 1 GiB scratch disk before the measured one
    /// (see `Machine::warmup_device`).
    pub warmup: bool,
    /// `real` (default) or `virtual` / `virtual:N`: TCG on QEMU's virtual
    /// clock at icount shift N (docs/virtual-clock.md). Left out of the
    /// spec's text when real, so older specs keep their hash.
    #[serde(skip_serializing_if = "Clock::is_real")]
    pub clock: Clock,
}

impl Default for QemuConfig {
    fn default() -> Self {
        Self {
            accel: AccelChoice::Auto,
            memory_mib: 512,
            cpus: 1,
            volume_dir: None,
            kvm_probe_timeout: Duration::from_secs(20),
            tsc_khz: None,
            warmup: true,
            clock: Clock::Real,
        }
    }
}

/// Host memory per guest beyond its RAM: QEMU's own (TCG code cache).
pub const QEMU_OVERHEAD_MIB: u64 = 300;

/// A virtual-clock cell's host CPU-seconds beside its groups (boot, mkfs,
/// calibration, collection), and per group (its cycle's instructions and
/// ticks): `results/reported-virtual`, 8 cells of 16,384 and 24,576
/// groups in 416 CPU-s, is 8 x 20 s + 163,840 x 1.5 ms.
pub const VIRTUAL_CELL_S: f64 = 20.0;
pub const VIRTUAL_GROUP_S: f64 = 0.0015;

/// SCHED_FIFO priority of the NBD server's threads: above a measured
/// guest's (1-2), so a guest never delays the hold that times its zeroing.
pub const NBD_RT_PRIORITY: u8 = 3;

/// What a storage profile means for one cell's volume:
/// - `none`: host page cache, guest flushes reach the host disk
///   (`fdatasync`), so zeroing time includes the host's flush latency;
/// - `unsafe`: guest flushes are dropped on the host, so zeroing time is
///   the guest's own (emulated) work only;
/// - `iops:N`: QEMU block throttling at N requests per second;
/// - `latency:D`: the volume is served over NBD and every zero request is
///   held D; flushes are answered at once. Zeroing time becomes D plus the
///   guest's own part (see `nbd`);
/// - `ebs` / `ebs:D`: the same, with the hold calibrated on each guest so
///   that the first zeroing comes to the cell's z1 target
///   ([`lazyinit_core::StorageProfile::z1_target`]).
pub fn storage_for(profile: &StorageProfile, cell: &Cell) -> args::Storage {
    match *profile {
        StorageProfile::None => args::Storage::default(),
        StorageProfile::Unsafe => args::Storage {
            cache: "unsafe",
            ..Default::default()
        },
        StorageProfile::Iops(n) => args::Storage {
            throttle: Some(args::Throttle { iops_total: n }),
            ..Default::default()
        },
        StorageProfile::Latency(d) => args::Storage {
            latency: Some(nbd::LatencyProfile::Fixed(d)),
            ..Default::default()
        },
        StorageProfile::Ebs { noise, .. } => args::Storage {
            latency: profile
                .z1_target(cell.hz, cell.wait_mult, &cell.knobs)
                .map(nbd::LatencyProfile::Z1Target),
            noise: noise.map(|n| lazyinit_core::Noise {
                seed: n.seed_for(cell.repetition),
                ..n
            }),
            ..Default::default()
        },
    }
}

/// The scratch disk of the warm-up and the storage calibration: 32 groups,
/// so that five mounts never run out of uninitialised groups even without
/// the fix, where zeroings shorter than a tick run back to back. Sparse: a
/// few tens of MB of host disk.
pub const SCRATCH_BYTES: u64 = 4 << 30;

pub struct QemuProvider {
    config: QemuConfig,
    volume_dir: PathBuf,
    /// The host's TSC rate, read at the first launch (see [`tsc`]).
    tsc_khz: std::sync::OnceLock<Option<u64>>,
    accel: Arc<tokio::sync::Mutex<HashMap<Arch, Accel>>>,
    ports: Arc<Mutex<HashSet<u16>>>,
    /// QEMU pids of live machines by cell id, for `prioritize`.
    live: machine::Registry,
    /// Set once a raise failed (not root), so the warning is said once.
    raise_warned: Arc<std::sync::atomic::AtomicBool>,
    /// The QEMU of the virtual clock, once built or found (`prepare`).
    vclock_qemu: tokio::sync::OnceCell<lazyinit_kernel::emulator::VirtualQemu>,
}

impl QemuProvider {
    pub fn new(config: QemuConfig) -> Self {
        let volume_dir = config
            .volume_dir
            .clone()
            .unwrap_or_else(|| lazyinit_core::paths::cache_dir().join("volumes"));
        Self {
            config,
            volume_dir,
            tsc_khz: std::sync::OnceLock::new(),
            accel: Default::default(),
            ports: Default::default(),
            live: Default::default(),
            raise_warned: Default::default(),
            vclock_qemu: tokio::sync::OnceCell::new(),
        }
    }

    pub fn volume_dir(&self) -> &std::path::Path {
        &self.volume_dir
    }

    /// The volumes of the run writing into the results folder `run`:
    /// `<volume-dir>/<run id>-<hash of the folder's path>`, private to that
    /// folder (two runs of one spec into two folders never touch each
    /// other's volumes), and found again by the next run into it.
    pub fn run_volumes(&self, run: &std::path::Path, run_id: &str) -> PathBuf {
        let run = std::fs::canonicalize(run).unwrap_or_else(|_| run.to_path_buf());
        let hash = lazyinit_core::paths::sha256_hex(run.as_os_str().as_encoded_bytes());
        self.volume_dir.join(format!("{run_id}-{}", &hash[..12]))
    }

    /// The accelerator for this arch, probing KVM once per arch and process.
    async fn accel_for(
        &self,
        arch: Arch,
        kernel: &std::path::Path,
        work: &CellWriter,
    ) -> Result<Accel, ProviderError> {
        let mut cache = self.accel.lock().await;
        if let Some(a) = cache.get(&arch) {
            return Ok(*a);
        }
        let chosen = match self.config.accel {
            // icount is TCG's: the virtual clock never probes KVM.
            _ if matches!(self.config.clock, Clock::Virtual { .. }) => Accel::Tcg,
            AccelChoice::Tcg => Accel::Tcg,
            AccelChoice::Kvm => {
                accel::probe_kvm(arch, kernel, work, self.config.kvm_probe_timeout)
                    .await
                    .map_err(|e| ProviderError::infra(format!("accel = kvm was asked for but KVM does not work: {e}; use accel = auto or tcg")))?;
                Accel::Kvm
            }
            AccelChoice::Auto => {
                match accel::probe_kvm(arch, kernel, work, self.config.kvm_probe_timeout).await {
                    Ok(()) => Accel::Kvm,
                    Err(why) => {
                        tracing::info!(%arch, %why, "KVM not usable, using TCG");
                        Accel::Tcg
                    }
                }
            }
        };
        cache.insert(arch, chosen);
        Ok(chosen)
    }

    /// Whether some guest may run on the virtual clock: `virtual`, or
    /// `auto` unless KVM was asked for.
    fn virtual_possible(&self) -> bool {
        match self.config.clock {
            Clock::Real => false,
            Clock::Virtual { .. } => true,
            Clock::Auto => self.config.accel != AccelChoice::Kvm,
        }
    }

    /// Whether a guest of `arch` may run on the real clock: `real`, or
    /// `auto` where KVM may work for it (the boot probe at launch tells).
    fn real_possible(&self, arch: Arch) -> bool {
        match self.config.clock {
            Clock::Real => true,
            Clock::Virtual { .. } => false,
            Clock::Auto => self.config.accel != AccelChoice::Tcg && accel::kvm_possible(arch),
        }
    }

    fn reserve_port(&self) -> Result<u16, ProviderError> {
        for _ in 0..32 {
            let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| {
                ProviderError::infra(format!("cannot find a free loopback port: {e}"))
            })?;
            let port = l
                .local_addr()
                .map_err(|e| ProviderError::infra(e.to_string()))?
                .port();
            if self.ports.lock().unwrap().insert(port) {
                return Ok(port);
            }
        }
        Err(ProviderError::infra("no free loopback port"))
    }
}

/// A failed build of the virtual clock's QEMU: a missing tool is the
/// tool's exit (4, with the install command), anything else the host's.
fn emulator_error(e: lazyinit_kernel::KernelError) -> ProviderError {
    match e {
        lazyinit_kernel::KernelError::MissingTool { tool, install } => {
            ProviderError::MissingTool { tool, install }
        }
        e => ProviderError::infra(format!(
            "building the QEMU of the virtual clock: {}",
            lazyinit_core::exit::chain_text(&e)
        )),
    }
}

impl QemuProvider {
    /// What the virtual clock needs of the host before anything builds:
    /// the QEMU build's tools when it is not cached, and the firmware the
    /// x86_64 guest boots through.
    fn preflight_virtual(&self, cells: &[Cell]) -> Result<(), ProviderError> {
        let cache = lazyinit_core::paths::cache_dir();
        if lazyinit_kernel::emulator::cached(&cache)
            .map_err(emulator_error)?
            .is_none()
        {
            lazyinit_kernel::emulator::check_tools().map_err(emulator_error)?;
        }
        if cells.iter().any(|c| c.arch == Arch::X86_64)
            && !std::path::Path::new("/usr/share/seabios/bios-256k.bin").is_file()
        {
            return Err(ProviderError::MissingTool {
                tool: "SeaBIOS (/usr/share/seabios/bios-256k.bin)".into(),
                install: "apt-get install seabios qemu-system-data (or run scripts/setup-host.sh)"
                    .into(),
            });
        }
        Ok(())
    }
}

fn which(binary: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(binary).is_file()))
        .unwrap_or(false)
}

impl QemuProvider {
    /// The cell's sparse volume and, with the warm-up on, its scratch disk,
    /// in the run's own volume folder (a leftover of an interrupted
    /// earlier attempt replaced).
    fn cell_volumes(
        &self,
        req: &LaunchRequest,
    ) -> Result<(volume::SparseVolume, Option<volume::SparseVolume>), ProviderError> {
        let run_folder = req.folder.path().parent().unwrap_or(req.folder.path());
        let own = self.run_volumes(run_folder, &req.run_id);
        let volume_path = own.join(format!("{}.raw", req.cell.id()));
        let _ = std::fs::remove_file(&volume_path); // a leftover of an interrupted earlier attempt
        let vol =
            volume::SparseVolume::create(volume_path.clone(), req.cell.volume).map_err(|e| {
                ProviderError::infra(format!(
                    "cannot create the volume {}: {e}",
                    volume_path.display()
                ))
            })?;
        let warm = if self.config.warmup {
            let p = own.join(format!("{}.warmup.raw", req.cell.id()));
            let _ = std::fs::remove_file(&p);
            Some(
                volume::SparseVolume::create(p.clone(), lazyinit_core::ByteSize(SCRATCH_BYTES))
                    .map_err(|e| {
                        ProviderError::infra(format!(
                            "cannot create the warm-up disk {}: {e}",
                            p.display()
                        ))
                    })?,
            )
        } else {
            None
        };
        Ok((vol, warm))
    }
}

#[async_trait]
impl Provider for QemuProvider {
    fn name(&self) -> &str {
        "qemu"
    }

    /// Virtio guests: the small `qemu` kernel.
    fn kernel_profile(&self) -> KernelProfile {
        KernelProfile::Qemu
    }

    fn host_mib_per_machine(&self) -> Option<u64> {
        Some(self.config.memory_mib as u64 + QEMU_OVERHEAD_MIB)
    }

    /// Memory for the guests that run at once; disk for every volume,
    /// whose files stay sparse (see [`volume::expected_host_bytes`]).
    fn cost(
        &self,
        cells: &[CellEstimate<'_>],
        storage: &StorageProfile,
        concurrency: usize,
    ) -> Result<Cost, ProviderError> {
        let per = self.host_mib_per_machine().unwrap_or_default();
        Ok(Cost::Host {
            memory_mib: (concurrency as u64).saturating_mul(per),
            // Saturating: a spec's sizes are bounded, but a sum never panics.
            disk_bytes: cells
                .iter()
                .map(|c| volume::expected_host_bytes(c.cell.volume, storage.holds_zeroes()))
                .fold(0, u64::saturating_add),
        })
    }

    /// Every profile is served on the real clock. The virtual clock is
    /// TCG's (KVM has no icount); it cannot see throttling (which counts
    /// in host time), calibrate a volume that holds no zero request
    /// (`none`, `unsafe`), or land an ebs target off a step of L; noise is
    /// drawn on it only.
    fn refuse(&self, cells: &[Cell], storage: &StorageProfile) -> Result<(), ProviderError> {
        let clock = self.config.clock;
        if matches!(clock, Clock::Virtual { .. }) && self.config.accel == AccelChoice::Kvm {
            return Err(ProviderError::BadInput(
                "accel = kvm with clock = virtual: the virtual clock is TCG's (icount); use accel auto or tcg, or clock real for KVM".into(),
            ));
        }
        if matches!(storage, StorageProfile::Iops(_)) && self.virtual_possible() {
            return Err(ProviderError::BadInput(format!(
                "storage profile `{storage}` throttles in host time, which the virtual clock does not see: use ebs, ebs:D or latency:D with clock = {clock} (or clock = real)"
            )));
        }
        let virtual_arches: Vec<String> = Arch::ALL
            .into_iter()
            .filter(|&a| clock != Clock::Real && !self.real_possible(a))
            .filter(|&a| cells.iter().any(|c| c.arch == a))
            .map(|a| a.to_string())
            .collect();
        if !storage.holds_zeroes() && !virtual_arches.is_empty() {
            return Err(ProviderError::BadInput(format!(
                "storage profile `{storage}` holds no zero request, and the virtual clock calibrates each guest on that hold ({} cells here run on it): use ebs, ebs:D or latency:D with clock = {clock}, or clock = real",
                virtual_arches.join(" and ")
            )));
        }
        if storage.noise().is_some() {
            let real: Vec<String> = Arch::ALL
                .into_iter()
                .filter(|&a| self.real_possible(a) && cells.iter().any(|c| c.arch == a))
                .map(|a| a.to_string())
                .collect();
            if !real.is_empty() {
                return Err(ProviderError::BadInput(format!(
                    "storage profile `{storage}` draws noise into each zero request's hold, which only the virtual clock does, and {} cells may run on the real clock here: use clock = \"virtual\" (or --clock virtual), or drop `,sd=...,seed=...`",
                    real.join(" and ")
                )));
            }
        }
        if !self.virtual_possible() {
            return Ok(());
        }
        for c in cells {
            // With noise the z1 is drawn, near a step or not: on purpose.
            let Some(target) = storage
                .z1_target(c.hz, c.wait_mult, &c.knobs)
                .filter(|_| storage.noise().is_none())
            else {
                continue;
            };
            if let Some(step) = clock::near_step(target, c.hz.get(), c.wait_mult) {
                return Err(ProviderError::BadInput(format!(
                    "storage profile `{storage}` aims z1 at {:.3} ms, within {} us of a step of L at HZ={} ({:.3} ms); the virtual clock lands there every run: aim at least {} us away (e.g. ebs:{:.1}ms)",
                    target.as_secs_f64() * 1e3,
                    clock::BOUNDARY_MARGIN.as_micros(),
                    c.hz.get(),
                    step * 1e3,
                    clock::BOUNDARY_MARGIN.as_micros(),
                    (step + 0.5 / (f64::from(c.wait_mult) * f64::from(c.hz.get()))) * 1e3,
                )));
            }
        }
        Ok(())
    }

    /// Local guests on the real clock share the host's CPU; on the
    /// virtual clock no guest can move another's figures, so none waits
    /// for the host-wide token or is raised to real-time priority.
    fn shares_host(&self) -> bool {
        Arch::ALL.into_iter().any(|a| self.real_possible(a))
    }

    /// On the virtual clock a guest costs CPU, not waiting: a cell's host
    /// seconds from its groups ([`VIRTUAL_CELL_S`], [`VIRTUAL_GROUP_S`]).
    fn host_seconds(&self, cell: &Cell, groups: u64) -> Option<f64> {
        let resolved = match self.config.clock {
            Clock::Auto if self.real_possible(cell.arch) => return None,
            c => c.resolve(Accel::Tcg),
        };
        matches!(resolved, Clock::Virtual { .. })
            .then(|| VIRTUAL_CELL_S + groups as f64 * VIRTUAL_GROUP_S)
    }

    /// The QEMU of the virtual clock, built beside the kernels (or found).
    async fn prepare(&self, _cells: &[Cell]) -> Result<(), ProviderError> {
        if !self.virtual_possible() {
            return Ok(());
        }
        self.vclock_qemu
            .get_or_try_init(|| async {
                lazyinit_kernel::emulator::ensure(&lazyinit_core::paths::cache_dir(), None)
                    .await
                    .map_err(emulator_error)
            })
            .await?;
        Ok(())
    }

    async fn preflight(
        &self,
        cells: &[Cell],
        storage: &StorageProfile,
    ) -> Result<(), ProviderError> {
        for arch in Arch::ALL {
            if self.real_possible(arch)
                && cells.iter().any(|c| c.arch == arch)
                && !which(arch.qemu_binary())
            {
                let pkg = match arch {
                    Arch::X86_64 => "qemu-system-x86",
                    Arch::Arm64 => "qemu-system-arm",
                };
                return Err(ProviderError::MissingTool {
                    tool: arch.qemu_binary().into(),
                    install: format!("run scripts/setup-host.sh (or: apt-get install -t bookworm-backports {pkg})"),
                });
            }
        }
        if self.virtual_possible() {
            self.preflight_virtual(cells)?;
        }
        std::fs::create_dir_all(&self.volume_dir).map_err(|e| {
            ProviderError::BadInput(format!(
                "cannot create the volume folder {}: {e}",
                self.volume_dir.display()
            ))
        })?;
        let need: u64 = cells
            .iter()
            .map(|c| volume::expected_host_bytes(c.volume, storage.holds_zeroes()))
            .fold(0, u64::saturating_add);
        let free = volume::free_bytes(&self.volume_dir).map_err(|e| {
            ProviderError::infra(format!("cannot stat {}: {e}", self.volume_dir.display()))
        })?;
        if need > free {
            return Err(ProviderError::BadInput(format!(
                "these volumes need about {:.1} GiB of host disk in {} (sparse), but only {:.1} GiB is free: free space, use smaller sizes, or set volume-dir",
                need as f64 / (1u64 << 30) as f64,
                self.volume_dir.display(),
                free as f64 / (1u64 << 30) as f64
            )));
        }
        // The filesystem must hold a sparse file of the largest size at all.
        if let Some(max) = cells.iter().map(|c| c.volume).max() {
            // A file of an unpredictable name, gone when dropped.
            let probe = std::fs::create_dir_all(&self.volume_dir).and_then(|()| {
                let f = tempfile::Builder::new()
                    .prefix(".size-probe-")
                    .tempfile_in(&self.volume_dir)?;
                f.as_file().set_len(max.0)?;
                Ok(f)
            });
            probe.map_err(|e| {
                ProviderError::BadInput(format!(
                    "{} cannot hold a sparse file of {max}: {e}; set volume-dir to a filesystem that can",
                    self.volume_dir.display()
                ))
            })?;
        }
        Ok(())
    }

    /// A run killed before its teardown: its guests died with it
    /// (`PR_SET_PDEATHSIG`), but one that outlived it anyway (a harness
    /// that predates that) is killed here, and its volumes go. The folder
    /// is locked, so nothing found under its volume folder is in use.
    async fn reclaim(
        &self,
        run: &lazyinit_core::RunWriter,
        run_id: &str,
    ) -> Result<Vec<String>, ProviderError> {
        let dir = self.run_volumes(run.folder().root(), run_id);
        let mut removed = Vec::new();
        for pid in process::qemu_pids_with(&dir.to_string_lossy()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            removed.push(format!("QEMU process {pid}"));
        }
        // Its sockets (in the cell folders, or under the temporary
        // directory when a folder's path is too long for one).
        for cell in std::fs::read_dir(run.folder().root())
            .into_iter()
            .flatten()
            .flatten()
        {
            let Some(id) = cell.file_name().to_str().map(String::from) else {
                continue;
            };
            let f = run.cell(&id);
            for sock in f.sockets() {
                if sock.symlink_metadata().is_ok() && f.remove_socket(&sock).is_ok() {
                    removed.push(format!("socket {}", sock.display()));
                }
            }
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(removed);
        };
        for e in entries.flatten() {
            let path = e.path();
            std::fs::remove_file(&path).map_err(|err| {
                ProviderError::infra(format!(
                    "cannot remove the leftover volume {}: {err}",
                    path.display()
                ))
            })?;
            removed.push(format!("volume {}", path.display()));
        }
        let _ = std::fs::remove_dir(&dir);
        Ok(removed)
    }

    /// Every thread of the cell's QEMU (vCPU, main loop, I/O) goes to the
    /// asked nice value, or SCHED_FIFO: a waking real-time guest preempts
    /// every normal one at once. The cell's NBD threads follow: at the
    /// same nice while it prepares, above both real-time levels while it is
    /// measured, so a held reply always leaves on time.
    async fn prioritize(&self, cell: &str, p: Priority) -> bool {
        let Some((pid, hold)) = self.live.lock().unwrap().get(cell).cloned() else {
            return false;
        };
        let set = move || {
            let nbd = match p {
                Priority::Prepare { nice } => {
                    let nice = nice.min(19);
                    process::set_realtime(pid, true, None)?;
                    process::set_group_nice(pid, nice)?;
                    ThreadLevel::Normal { nice }
                }
                Priority::Measure => {
                    process::set_realtime(pid, true, Some(1))?;
                    ThreadLevel::Realtime(NBD_RT_PRIORITY)
                }
                Priority::Critical => {
                    process::set_realtime(pid, true, Some(2))?;
                    ThreadLevel::Realtime(NBD_RT_PRIORITY)
                }
            };
            hold.map_or(Ok(()), |h| h.set_level(nbd))
        };
        match tokio::task::spawn_blocking(set).await {
            Ok(Ok(())) => {
                tracing::debug!(cell, ?p, "QEMU priority");
                true
            }
            Ok(Err(why)) => {
                if !self
                    .raise_warned
                    .swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    tracing::warn!(
                        "cannot set guest priorities ({why}): run as root (or with CAP_SYS_NICE) so that concurrent cells do not change each other's sleep"
                    );
                }
                false
            }
            Err(_) => false,
        }
    }

    async fn launch(&self, req: &LaunchRequest) -> Result<Box<dyn Machine>, ProviderError> {
        let storage = storage_for(&req.storage_profile, &req.cell);
        req.folder.create().map_err(|e| {
            ProviderError::infra(format!(
                "cannot create {}: {}",
                req.folder.path().display(),
                e.source
            ))
        })?;
        let accel = self
            .accel_for(req.cell.arch, &req.kernel_image, &req.folder)
            .await?;
        let (vol, warm) = self.cell_volumes(req)?;
        let mut last_err = String::new();
        // A port can be taken between our probe and QEMU's bind: retry.
        for _ in 0..3 {
            let port = self.reserve_port()?;
            match machine::QemuMachine::start(machine::StartArgs {
                req,
                accel,
                config: &self.config,
                tsc_khz: *self
                    .tsc_khz
                    .get_or_init(|| self.config.tsc_khz.or_else(tsc::host_tsc_khz)),
                port,
                volume: vol.path(),
                warmup: warm.as_ref().map(|w| w.path()),
                storage,
                vclock: match self.config.clock.resolve(accel) {
                    Clock::Virtual { shift } => Some(machine::Vclock {
                        qemu: self.vclock_qemu.get().cloned().ok_or_else(|| {
                            ProviderError::infra("the virtual clock's QEMU was not prepared")
                        })?,
                        shift,
                    }),
                    _ => None,
                },
            })
            .await
            {
                Ok(mut m) => {
                    m.own_volume(vol, warm);
                    m.register(&self.live, req.cell.id());
                    return Ok(Box::new(m));
                }
                Err(e)
                    if e.to_string().contains("hostfwd")
                        || e.to_string().contains("Could not set up host forwarding") =>
                {
                    last_err = e.to_string();
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        Err(ProviderError::infra(format!(
            "QEMU could not forward an SSH port: {last_err}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_profiles() {
        let cell = |hz: u32| Cell {
            provider: "qemu".into(),
            axes: lazyinit_core::Axes::new(
                Arch::X86_64,
                lazyinit_core::KernelSource::Debian61,
                lazyinit_core::Hz::new(hz).unwrap(),
                lazyinit_core::Variant::Fix,
                lazyinit_core::ByteSize(64 << 30),
            ),
            repetition: 1,
        };
        let st = |p: &str, hz| storage_for(&p.parse().unwrap(), &cell(hz));
        assert_eq!(st("none", 250), args::Storage::default());
        assert_eq!(st("unsafe", 250).cache, "unsafe");
        assert_eq!(
            st("iops:400", 250).throttle,
            Some(args::Throttle { iops_total: 400 })
        );
        assert_eq!(
            st("latency:2.5ms", 250).latency,
            Some(nbd::LatencyProfile::Fixed(Duration::from_micros(2500)))
        );
        // ebs aims at the middle of the nominal z1's L interval at the cell's HZ.
        assert_eq!(
            st("ebs", 250).latency,
            Some(nbd::LatencyProfile::Z1Target(Duration::from_micros(3400)))
        );
        assert_eq!(
            st("ebs", 100).latency,
            Some(nbd::LatencyProfile::Z1Target(Duration::from_micros(3500)))
        );
        assert_eq!(
            st("ebs:3.1ms", 100).latency,
            Some(nbd::LatencyProfile::Z1Target(Duration::from_micros(3100)))
        );
        // Noise: repetition r draws from seed + r - 1.
        let noisy: StorageProfile = "ebs:3.4ms,sd=0.1ms,seed=7".parse().unwrap();
        let seeds: Vec<_> = (1..=3)
            .map(|r| {
                let c = Cell {
                    repetition: r,
                    ..cell(250)
                };
                storage_for(&noisy, &c).noise
            })
            .collect();
        let n = |seed| {
            Some(lazyinit_core::Noise {
                sd: Duration::from_micros(100),
                seed,
            })
        };
        assert_eq!(seeds, vec![n(7), n(8), n(9)]);
        assert_eq!(st("ebs:3.4ms", 250).noise, None);
    }

    /// Noise in the hold is the virtual clock's: refused, in one line,
    /// where a cell may run on the real clock. On the virtual clock a
    /// profile that holds no zero request is refused (its calibration has
    /// nothing to aim), and a throttle's refusal recommends only what the
    /// virtual clock serves.
    #[test]
    fn noise_needs_the_virtual_clock_and_the_virtual_clock_a_hold() {
        let tmp = tempfile::tempdir().unwrap();
        let p = QemuProvider::new(QemuConfig {
            volume_dir: Some(tmp.path().join("vols")),
            clock: Clock::Real,
            ..Default::default()
        });
        let cell = Cell {
            provider: "qemu".into(),
            axes: lazyinit_core::Axes::new(
                Arch::Arm64,
                lazyinit_core::KernelSource::Debian61,
                lazyinit_core::Hz::new(100).unwrap(),
                lazyinit_core::Variant::Fix,
                lazyinit_core::ByteSize(64 << 30),
            ),
            repetition: 1,
        };
        let noisy: StorageProfile = "ebs,sd=0.1ms,seed=1".parse().unwrap();
        let e = p
            .refuse(std::slice::from_ref(&cell), &noisy)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("only the virtual clock does, and arm64 cells may run on the real clock here: use clock = \"virtual\"")
                && !e.contains('\n'),
            "{e}"
        );
        let virt = QemuProvider::new(QemuConfig {
            volume_dir: Some(tmp.path().join("vols")),
            clock: Clock::Virtual { shift: 0 },
            ..Default::default()
        });
        for none in ["none", "unsafe"] {
            let e = virt
                .refuse(std::slice::from_ref(&cell), &none.parse().unwrap())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("storage profile `{none}` holds no zero request")),
                "{e}"
            );
        }
        virt.refuse(std::slice::from_ref(&cell), &"ebs".parse().unwrap())
            .unwrap();
        let e = virt
            .refuse(std::slice::from_ref(&cell), &"iops:100".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(!e.contains("none") && !e.contains("unsafe"), "{e}");
        // The real clock serves them.
        p.refuse(std::slice::from_ref(&cell), &"none".parse().unwrap())
            .unwrap();
    }

    /// Two runs of one spec into two results folders: each has its own
    /// volume folder (neither removes the other's volumes as leftovers);
    /// one folder however spelled has one.
    #[test]
    fn volumes_are_private_to_a_results_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let p = QemuProvider::new(QemuConfig {
            volume_dir: Some(tmp.path().join("vols")),
            ..Default::default()
        });
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::os::unix::fs::symlink(&a, tmp.path().join("a-link")).unwrap();
        let va = p.run_volumes(&a, "quick-1234");
        assert_ne!(va, p.run_volumes(&b, "quick-1234"));
        assert_eq!(va, p.run_volumes(&tmp.path().join("a-link"), "quick-1234"));
        assert_eq!(va, p.run_volumes(&a.join("."), "quick-1234"));
        assert!(va.starts_with(tmp.path().join("vols")));
        assert!(va
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("quick-1234-"));
    }

    /// What a killed run left in its volume folder goes when the next run
    /// into its results folder reclaims it; another folder's stays.
    #[tokio::test]
    async fn reclaim_removes_only_this_folders_leftovers() {
        let tmp = tempfile::tempdir().unwrap();
        let p = QemuProvider::new(QemuConfig {
            volume_dir: Some(tmp.path().join("vols")),
            ..Default::default()
        });
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        for d in [&a, &b] {
            let v = p.run_volumes(d, "r");
            std::fs::create_dir_all(&v).unwrap();
            std::fs::write(v.join("c.raw"), "x").unwrap();
            std::fs::write(v.join("c.warmup.raw"), "x").unwrap();
            let cell = lazyinit_core::RunFolder::new(d).cell("c");
            std::fs::create_dir_all(cell.path()).unwrap();
            std::fs::write(cell.qmp_sock().shown(), "").unwrap();
        }
        let run = lazyinit_core::RunWriter::claim(&lazyinit_core::RunFolder::new(&a)).unwrap();
        let removed = p.reclaim(&run, "r").await.unwrap();
        assert_eq!(removed.len(), 3, "{removed:?}");
        assert!(!lazyinit_core::RunFolder::new(&a)
            .cell("c")
            .qmp_sock()
            .exists());
        assert!(lazyinit_core::RunFolder::new(&b)
            .cell("c")
            .qmp_sock()
            .exists());
        assert!(!p.run_volumes(&a, "r").exists());
        assert!(p.run_volumes(&b, "r").join("c.raw").exists());
        assert!(p.reclaim(&run, "r").await.unwrap().is_empty());
    }

    #[test]
    fn config_rejects_unknown_keys() {
        let e = toml_like(r#"{"memory-mib": 256, "turbo": true}"#);
        assert!(e.is_err());
        assert_eq!(toml_like(r#"{"memory-mib": 256}"#).unwrap().memory_mib, 256);
    }

    fn toml_like(s: &str) -> Result<QemuConfig, serde_json::Error> {
        serde_json::from_str(s)
    }
}
