//! One running QEMU guest and everything it owns.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use lazyinit_core::provider::{Endpoint, LaunchRequest, Machine, MachineInfo, ProviderError};
use lazyinit_core::shell::quote;
use lazyinit_core::{Arch, CellFolder, CellWriter};

use crate::args::{self, Accel, Storage};
use crate::nbd::{Hold, NbdServer};
use crate::process::{tail_lines, QemuProcess};
use crate::volume::SparseVolume;
use crate::QemuConfig;

pub(crate) struct StartArgs<'a> {
    pub req: &'a LaunchRequest,
    pub accel: Accel,
    pub config: &'a QemuConfig,
    pub tsc_khz: Option<u64>,
    pub port: u16,
    pub volume: &'a Path,
    pub warmup: Option<&'a Path>,
    pub storage: Storage,
    /// The virtual clock, or `None` for the real one.
    pub vclock: Option<Vclock>,
}

/// A guest on the virtual clock: the project's QEMU and the icount shift.
pub(crate) struct Vclock {
    pub qemu: lazyinit_kernel::emulator::VirtualQemu,
    pub shift: u8,
}

/// The name of the zero-hold filter's hold under `/objects` (one hold for
/// the volume and the warm-up disk, as one NBD hold on the real clock).
const HOLD_ID: &str = "zero-hold";

/// A prior for the guest's own part of a first zeroing on the virtual
/// clock (measured: 28 us on x86_64, 29-30 us on arm64, docs/
/// virtual-clock.md); the calibration measures each guest's own.
const VIRTUAL_GUEST_PART_PRIOR_US: u64 = 30;

/// Live machines' QEMU process ids by cell id (for `Provider::prioritize`).
/// Live machines by cell id: the QEMU pid, and the hold whose NBD threads
/// follow the guest's priority (latency profiles only).
pub(crate) type Registry =
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, (u32, Option<Hold>)>>>;

pub struct QemuMachine {
    registered: Option<(Registry, String)>,
    arch: Arch,
    /// The row's accel (`tcg-icount<N>` on the virtual clock).
    accel_text: String,
    port: u16,
    process: Option<QemuProcess>,
    /// The NBD servers of a latency profile (volume, warm-up disk) and
    /// their shared hold; they stop after QEMU.
    nbd: Option<NbdServer>,
    warm_nbd: Option<NbdServer>,
    hold: Option<Hold>,
    /// The zero-hold filter's hold, on the virtual clock.
    vhold: Option<std::sync::Arc<crate::qmp::QmpHold>>,
    volume: Option<SparseVolume>,
    warmup: Option<SparseVolume>,
    console_log: PathBuf,
    qmp_socket: PathBuf,
    command_line: String,
    /// The cell's folder (its writer removes the QMP socket at teardown).
    folder: CellWriter,
}

impl QemuMachine {
    pub(crate) async fn start(a: StartArgs<'_>) -> Result<Self, ProviderError> {
        let arch = a.req.cell.arch;
        let folder = &a.req.folder;
        let console_log = folder.hand_over(CellFolder::CONSOLE_LOG);
        let qmp_socket = folder.qmp_sock()?;
        // A stale socket of an interrupted earlier attempt.
        folder.remove_socket(&qmp_socket)?;
        let mut extra = vec!["lazyinit.net=static".to_string()];
        extra.extend(a.req.extra_cmdline.iter().cloned());
        extra.extend(test_append(&a.req.cell.id()));
        let c = clocked(&a);
        let cmdline = args::kernel_cmdline(arch, c.tsc_khz, &extra);
        let (hold, nbd, warm_nbd) = match a.vclock {
            Some(_) => (None, None, None),
            None => latency_servers(&a)?,
        };
        let vhold = c.vhold.map(|d| {
            let sd = c.storage.noise.map(|n| n.sd.as_nanos() as u64);
            std::sync::Arc::new(crate::qmp::QmpHold::new(&qmp_socket, HOLD_ID, d, sd))
        });
        let (volume, warmup) = volume_sources(&a, &c, &nbd, &warm_nbd);
        let (binary, icount, accel_text, storage) = (c.binary, c.icount, c.accel_text, c.storage);
        let argv = args::guest_args(&args::GuestArgs {
            arch,
            accel: a.accel,
            memory_mib: a.config.memory_mib,
            cpus: a.config.cpus,
            kernel: &a.req.kernel_image,
            initrd: Some(&a.req.initramfs),
            cmdline: &cmdline,
            console_log: &console_log,
            qmp_socket: &qmp_socket,
            ssh_port: Some(a.port),
            volume: Some(volume),
            storage,
            warmup,
            icount,
        });
        let command_line = std::iter::once(quote(&binary.to_string_lossy()))
            .chain(argv.iter().map(|s| quote(&s.to_string_lossy())))
            .collect::<Vec<_>>()
            .join(" ");
        // Kept so a failing guest can be rerun by hand.
        folder.put(CellFolder::QEMU_CMDLINE, format!("{command_line}\n"))?;
        let process = spawn_alive(folder, &binary, &argv).await?;
        tracing::debug!(%command_line, "QEMU started");
        Ok(Self {
            registered: None,
            arch,
            accel_text,
            port: a.port,
            process: Some(process),
            nbd,
            warm_nbd,
            hold,
            vhold,
            volume: None,
            warmup: None,
            console_log,
            qmp_socket,
            command_line,
            folder: folder.clone(),
        })
    }

    pub(crate) fn own_volume(&mut self, v: SparseVolume, warmup: Option<SparseVolume>) {
        self.volume = Some(v);
        self.warmup = warmup;
    }

    pub(crate) fn register(&mut self, reg: &Registry, cell: String) {
        if let Some(pid) = self.process.as_ref().and_then(|p| p.pid()) {
            reg.lock()
                .unwrap()
                .insert(cell.clone(), (pid, self.hold.clone()));
        }
        self.registered = Some((reg.clone(), cell));
    }

    fn unregister(&mut self) {
        if let Some((reg, cell)) = self.registered.take() {
            reg.lock().unwrap().remove(&cell);
        }
    }

    pub fn command_line(&self) -> &str {
        &self.command_line
    }

    pub fn volume_path(&self) -> Option<&Path> {
        self.volume.as_ref().map(|v| v.path())
    }
}

#[async_trait]
impl Machine for QemuMachine {
    fn info(&self) -> MachineInfo {
        MachineInfo {
            provider: "qemu".into(),
            machine: format!("qemu-{}", self.arch.uname_machine()).into(),
            accel: self.accel_text.as_str().into(),
        }
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint {
            host: "127.0.0.1".into(),
            port: self.port,
            user: "root".into(),
            volume_device: lazyinit_core::provider::VolumeDevice::Path("/dev/vda".into()),
        }
    }

    fn warmup_device(&self) -> Option<String> {
        self.warmup.as_ref().map(|_| "/dev/vdb".to_string())
    }

    fn zero_hold(&self) -> Option<std::sync::Arc<dyn lazyinit_core::provider::ZeroHold>> {
        if let Some(v) = &self.vhold {
            return Some(v.clone() as std::sync::Arc<dyn lazyinit_core::provider::ZeroHold>);
        }
        self.hold.clone().map(|h| {
            std::sync::Arc::new(h) as std::sync::Arc<dyn lazyinit_core::provider::ZeroHold>
        })
    }

    fn console_tail(&self, lines: usize) -> String {
        let mut out = tail_lines(&self.console_log, lines);
        if let Some(p) = &self.process {
            let err = p.stderr_tail(1000);
            if !err.trim().is_empty() {
                out.push_str("\n--- qemu stderr ---\n");
                out.push_str(err.trim_end());
            }
        }

        out
    }

    fn host_trouble(&self) -> Option<String> {
        let dir = self.volume.as_ref()?.path().parent()?;
        // Less than a megabyte left: the volume's next extent (mkfs's
        // tables, a zeroing) cannot be allocated, and its writes fail.
        let free = lazyinit_core::writer::free_bytes(dir)?;
        (free < 1 << 20).then(|| {
            format!(
                "the host folder of the guest's volume, {}, is full ({}): make room there, or give the spec's [provider-config.qemu] volume-dir a disk with room",
                dir.display(),
                lazyinit_core::writer::free_text(dir)
            )
        })
    }

    fn is_alive(&mut self) -> bool {
        self.process
            .as_mut()
            .is_some_and(|p| p.try_exited().is_none())
    }

    async fn teardown(&mut self) -> Result<(), ProviderError> {
        self.unregister();
        if let Some(mut p) = self.process.take() {
            let grace = if crate::qmp::quit(&self.qmp_socket, Duration::from_secs(2))
                .await
                .is_ok()
            {
                Duration::from_secs(5)
            } else {
                Duration::from_millis(10)
            };
            p.stop(grace).await;
        }
        self.nbd.take();
        self.warm_nbd.take();
        if let Err(e) = self.folder.remove_socket(&self.qmp_socket) {
            tracing::warn!("{}", lazyinit_core::exit::chain_text(&e));
        }
        if let Some(mut w) = self.warmup.take() {
            let _ = w.remove();
        }
        if let Some(mut v) = self.volume.take() {
            let path = v.path().to_path_buf();
            v.remove().map_err(|e| {
                ProviderError::infra(format!("cannot remove volume {}: {e}", path.display()))
            })?;
            // The run's volume folder goes when its last volume does.
            if let Some(dir) = path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
        Ok(())
    }
}

/// Fault injection for the fault suite (tests/faults_e2e.rs):
/// `LAZYINIT_TEST_APPEND=<cell id>=<kernel arguments>` appends arguments
/// to that one cell's kernel command line (`rdinit=/no-such-init` boots
/// it into a panic), so one cell can fail beside good ones.
fn test_append(cell: &str) -> Vec<String> {
    let Ok(v) = std::env::var("LAZYINIT_TEST_APPEND") else {
        return Vec::new();
    };
    match v.split_once('=') {
        Some((c, args)) if c == cell => args.split_whitespace().map(String::from).collect(),
        _ => Vec::new(),
    }
}

impl Drop for QemuMachine {
    fn drop(&mut self) {
        // QemuProcess and SparseVolume clean up after themselves on drop;
        // this only makes the order explicit: process first, then its file.
        self.unregister();
        self.process.take();
        self.nbd.take();
        self.warm_nbd.take();
        self.warmup.take();
        if let Some(v) = self.volume.take() {
            let dir = v.path().parent().map(Path::to_path_buf);
            drop(v);
            if let Some(d) = dir {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
}

/// An NBD server for `volume` on `socket` (a stale one of an interrupted
/// earlier attempt removed first), with its request trace beside the
/// socket when `LAZYINIT_NBD_TRACE` is set.
fn nbd_server(
    folder: &CellWriter,
    volume: &Path,
    socket: &Path,
    hold: &Hold,
) -> Result<NbdServer, ProviderError> {
    folder.remove_socket(socket)?;
    let trace = match std::env::var_os("LAZYINIT_NBD_TRACE") {
        Some(_) => Some(folder.create_nbd_trace(socket)?.0),
        None => None,
    };
    NbdServer::start(volume, socket, hold.clone(), trace)
}

/// The NBD servers of a latency profile (none without one): the volume
/// and the warm-up disk (so that the calibration's zeroings cost what the
/// measured one will) are served by the harness, with one hold for both.
type Servers = (Option<Hold>, Option<NbdServer>, Option<NbdServer>);

fn latency_servers(a: &StartArgs<'_>) -> Result<Servers, ProviderError> {
    let Some(profile) = a.storage.latency else {
        return Ok((None, None, None));
    };
    let folder = &a.req.folder;
    // The cell keeps it in storage.txt (its Machine::zero_hold).
    let hold = Hold::new(profile.initial_hold(a.req.cell.arch, a.accel));
    let vol = nbd_server(folder, a.volume, &folder.volume_nbd_sock()?, &hold)?;
    let warm = match a.warmup {
        Some(w) => Some(nbd_server(folder, w, &folder.warmup_nbd_sock()?, &hold)?),
        None => None,
    };
    Ok((Some(hold), Some(vol), warm))
}

/// What the clock decides of a guest: the TSC rate it is told, the
/// zero hold QEMU itself keeps (virtual clock, latency profiles), the
/// volume's cache, the binary, the icount arguments and the row's accel.
struct Clocked {
    tsc_khz: Option<u64>,
    vhold: Option<Duration>,
    storage: Storage,
    binary: PathBuf,
    icount: Vec<std::ffi::OsString>,
    accel_text: String,
}

fn clocked(a: &StartArgs<'_>) -> Clocked {
    let arch = a.req.cell.arch;
    let Some(v) = &a.vclock else {
        return Clocked {
            tsc_khz: a.tsc_khz,
            vhold: None,
            storage: a.storage,
            binary: PathBuf::from(arch.qemu_binary()),
            icount: Vec::new(),
            accel_text: a.accel.as_str().to_string(),
        };
    };
    let vhold = match a.storage.latency {
        Some(crate::nbd::LatencyProfile::Fixed(d)) => Some(d),
        Some(crate::nbd::LatencyProfile::Z1Target(t)) => Some(lazyinit_core::storage::hold_for(
            t,
            Duration::from_micros(VIRTUAL_GUEST_PART_PRIOR_US),
        )),
        None => None,
    };
    Clocked {
        tsc_khz: Some(args::ICOUNT_TSC_KHZ),
        vhold,
        // The virtual clock's volume is scratch whose flushes would only
        // cost host time: dropped.
        storage: Storage {
            cache: "unsafe",
            ..a.storage
        },
        binary: v.qemu.binary(arch),
        icount: args::icount_args(
            v.shift,
            &lazyinit_kernel::emulator::VirtualQemu::data_dirs(),
        ),
        accel_text: crate::Clock::Virtual { shift: v.shift }.accel_text(a.accel),
    }
}

/// Starts QEMU with its stderr in the cell's folder.
/// [`spawn`], and QEMU still running 300 ms later: it fails fast on bad
/// arguments or a taken port, caught here.
async fn spawn_alive(
    folder: &CellWriter,
    binary: &Path,
    argv: &[std::ffi::OsString],
) -> Result<QemuProcess, ProviderError> {
    let mut process = spawn(folder, binary, argv)?;
    // QEMU fails fast on bad arguments or a taken port; catch that here.
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Some(st) = process.try_exited() {
        return Err(ProviderError::Infrastructure {
            message: format!("{} exited at start ({st})", binary.display()),
            detail: process.stderr_tail(2000),
        });
    }
    Ok(process)
}

/// The measured volume and the scratch disk as QEMU is given them: over
/// NBD for a latency profile, a zero-hold file on the virtual clock, a
/// plain file otherwise.
fn volume_sources<'a>(
    a: &StartArgs<'a>,
    c: &Clocked,
    nbd: &'a Option<NbdServer>,
    warm_nbd: &'a Option<NbdServer>,
) -> (args::VolumeSource<'a>, Option<args::VolumeSource<'a>>) {
    let source = |file| match c.vhold {
        Some(d) => args::VolumeSource::ZeroHold {
            file,
            hold_ns: d.as_nanos() as u64,
            hold_id: HOLD_ID,
            noise: c.storage.noise,
        },
        None => args::VolumeSource::File(file),
    };
    let volume = match nbd {
        Some(n) => args::VolumeSource::NbdUnix(n.socket()),
        None => source(a.volume),
    };
    let warmup = match (warm_nbd, a.warmup) {
        (Some(n), _) => Some(args::VolumeSource::NbdUnix(n.socket())),
        (None, Some(w)) => Some(source(w)),
        (None, None) => None,
    };
    (volume, warmup)
}

fn spawn(
    folder: &CellWriter,
    binary: &Path,
    argv: &[std::ffi::OsString],
) -> Result<QemuProcess, ProviderError> {
    let (stderr, stderr_log) = folder.create_file(CellFolder::QEMU_STDERR)?;
    QemuProcess::spawn(binary, argv, stderr, &stderr_log).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ProviderError::MissingTool {
                tool: binary.display().to_string(),
                install: "run scripts/setup-host.sh".into(),
            }
        } else {
            ProviderError::infra(format!("cannot start {}: {e}", binary.display()))
        }
    })
}
