//! An in-process provider for tests (feature `fake`).
//!
//! A [`Lab`] is the fake world. Its [`FakeProvider`] launches machines
//! whose guests are scripted ([`lazyinit_guest::fake::FakeGuest`]): they
//! answer the real guest protocol's scripts, and a kexec install's. Its
//! [`FakeArtifacts`] makes placeholder kernels and images and reaches the
//! guests in process. The runner, the protocol, the results writer, resume
//! and interrupts all run for real; only QEMU (or a cloud), SSH and the
//! builds are stood in for, and a run takes milliseconds.
//!
//! A hook sees every step of every cell, by name: `preflight`, `check`
//! (per kernel, before anything is written), `build`,
//! `launch`, `boot` (each connection), the guest's steps
//! ([`lazyinit_guest::fake::STEPS`]) and `teardown`, then the run's
//! `finish`. It can fail the step,
//! drop the connection, or set the run's cancel flag there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use lazyinit_core::provider::{
    CellEstimate, Cost, Endpoint, KernelBoot, KexecPlan, LaunchRequest, Machine, MachineInfo,
    Provider, ProviderError, VolumeDevice,
};
use lazyinit_core::{model, Arch, Cell, CellFolder, KernelProfile, StorageProfile};
use lazyinit_guest::fake::{FakeGuest, SharedGuest};
use lazyinit_guest::{Connect, GuestError, Remote};
use lazyinit_image::ImageError;
use lazyinit_kernel::KernelError;
use serde::{Deserialize, Serialize};

use crate::artifacts::{Artifacts, Kernel, Progress};
use crate::plan::KernelNeed;

pub use lazyinit_guest::fake::Answer;

/// Sees `(step, cell id)` before the step is done.
pub type Hook = Arc<dyn Fn(&str, &str) -> Answer + Send + Sync>;

/// Host memory a fake local machine claims, as a 512 MiB QEMU guest does.
pub const LOCAL_MACHINE_MIB: u64 = 812;

/// The `[provider-config]` of a fake spec: none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Configs {}

impl crate::spec::ProviderConfigs for Configs {
    fn default_provider() -> String {
        "fake".into()
    }
}

/// A spec for the fake provider.
pub type FakeSpec = crate::Spec<Configs>;

#[derive(Clone)]
pub struct Lab {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    hook: Hook,
    /// Live machines' guests by port, with their cell.
    guests: Mutex<BTreeMap<u16, (String, SharedGuest)>>,
    journal: Mutex<Vec<String>>,
    next_port: AtomicU16,
}

impl Lab {
    /// A lab keeping its placeholder artifacts in `dir`; every step goes
    /// as a healthy guest would.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self::with_hook(dir, Arc::new(|_, _| Answer::Normal))
    }

    pub fn with_hook(dir: impl Into<PathBuf>, hook: Hook) -> Self {
        Lab {
            inner: Arc::new(Inner {
                dir: dir.into(),
                hook,
                guests: Mutex::default(),
                journal: Mutex::default(),
                next_port: AtomicU16::new(10_000),
            }),
        }
    }

    /// A provider of local machines whose kernel it boots (like QEMU).
    pub fn provider(&self) -> FakeProvider {
        FakeProvider {
            lab: self.clone(),
            kexec: false,
        }
    }

    /// A provider of machines elsewhere that boot their own kernel, into
    /// which the runner kexecs (like EC2).
    pub fn kexec_provider(&self) -> FakeProvider {
        FakeProvider {
            lab: self.clone(),
            kexec: true,
        }
    }

    pub fn artifacts(&self) -> FakeArtifacts {
        FakeArtifacts { lab: self.clone() }
    }

    /// What happened, in order: `build <kernel> <profile>`, `image <arch>`,
    /// `launch <cell>`, `teardown <cell>`, `dropped <cell>`.
    pub fn journal(&self) -> Vec<String> {
        self.inner.journal.lock().unwrap().clone()
    }

    /// Machines launched and not torn down (nor dropped).
    pub fn live_machines(&self) -> Vec<String> {
        let guests = self.inner.guests.lock().unwrap();
        guests.values().map(|(c, _)| c.clone()).collect()
    }

    fn hook(&self, step: &str, cell: &str) -> Answer {
        (self.inner.hook)(step, cell)
    }

    fn note(&self, line: String) {
        self.inner.journal.lock().unwrap().push(line);
    }

    fn guest_at(&self, port: u16) -> Option<(String, SharedGuest)> {
        self.inner.guests.lock().unwrap().get(&port).cloned()
    }

    /// A file of the lab standing for an artifact, or the path it could
    /// not be written at.
    fn placeholder(&self, rel: &str) -> Result<PathBuf, (PathBuf, std::io::Error)> {
        let p = self.inner.dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| (parent.to_path_buf(), e))?;
        }
        std::fs::write(&p, rel).map_err(|e| (p.clone(), e))?;
        Ok(p)
    }
}

pub struct FakeProvider {
    lab: Lab,
    kexec: bool,
}

#[async_trait]
impl Provider for FakeProvider {
    fn name(&self) -> &str {
        "fake"
    }

    fn kernel_profile(&self) -> KernelProfile {
        match self.kexec {
            true => KernelProfile::Cloud,
            false => KernelProfile::Qemu,
        }
    }

    fn host_mib_per_machine(&self) -> Option<u64> {
        (!self.kexec).then_some(LOCAL_MACHINE_MIB)
    }

    fn cost(
        &self,
        cells: &[CellEstimate<'_>],
        _storage: &StorageProfile,
        concurrency: usize,
    ) -> Result<Cost, ProviderError> {
        Ok(match self.kexec {
            false => Cost::Host {
                memory_mib: concurrency as u64 * LOCAL_MACHINE_MIB,
                disk_bytes: cells.iter().map(|c| c.cell.volume.0 / 1000).sum(),
            },
            true => Cost::Cloud {
                instance_hours: cells.iter().map(|c| c.lazyinit.as_secs_f64()).sum::<f64>()
                    / 3600.0,
                volume_gb_hours: 0.0,
                usd: 0.0,
                api_calls: cells.len() as u64,
            },
        })
    }

    async fn preflight(
        &self,
        _cells: &[Cell],
        _storage: &StorageProfile,
    ) -> Result<(), ProviderError> {
        match self.lab.hook("preflight", "") {
            Answer::Normal => Ok(()),
            Answer::Fail(why) => Err(ProviderError::BadInput(why)),
            Answer::Drop => Err(ProviderError::infra("the API did not answer (fake)")),
        }
    }

    /// Step `finish` (cell ""): fails as a provider that could not remove
    /// what a failed teardown left.
    async fn finish(&self) -> Result<(), ProviderError> {
        match self.lab.hook("finish", "") {
            Answer::Normal => Ok(()),
            Answer::Fail(why) => Err(ProviderError::infra(why)),
            Answer::Drop => Err(ProviderError::infra("the API did not answer (fake)")),
        }
    }

    async fn launch(&self, req: &LaunchRequest) -> Result<Box<dyn Machine>, ProviderError> {
        let id = req.cell.id();
        match self.lab.hook("launch", &id) {
            Answer::Normal => {}
            Answer::Fail(why) => return Err(ProviderError::infra(why)),
            Answer::Drop => return Err(ProviderError::infra("the machine vanished (fake)")),
        }
        let c = &req.cell;
        let mut guest = FakeGuest::new(
            c.arch,
            c.hz,
            c.variant,
            &req.kernel_release,
            model::groups(c.volume),
        );
        guest.under_test = !self.kexec;
        // One poll interval of lazy-init: room for an interrupt, little wait.
        guest.exit_at_poll = 2;
        let (lab, cell) = (self.lab.clone(), id.clone());
        guest.hook = Some(Arc::new(move |step| lab.hook(step, &cell)));
        req.folder.create()?;
        req.folder
            .put(CellFolder::CONSOLE_LOG, format!("fake console of {id}\n"))?;
        let port = self.lab.inner.next_port.fetch_add(1, Ordering::SeqCst);
        self.lab
            .inner
            .guests
            .lock()
            .unwrap()
            .insert(port, (id.clone(), SharedGuest::new(guest)));
        self.lab.note(format!("launch {id}"));
        Ok(Box::new(FakeMachine {
            lab: self.lab.clone(),
            cell: id,
            arch: c.arch,
            port,
            kexec: self.kexec,
            torn_down: false,
        }))
    }
}

pub struct FakeMachine {
    lab: Lab,
    cell: String,
    arch: Arch,
    port: u16,
    kexec: bool,
    torn_down: bool,
}

impl FakeMachine {
    fn forget(&mut self) -> bool {
        self.torn_down = true;
        self.lab
            .inner
            .guests
            .lock()
            .unwrap()
            .remove(&self.port)
            .is_some()
    }
}

#[async_trait]
impl Machine for FakeMachine {
    fn info(&self) -> MachineInfo {
        MachineInfo {
            provider: "fake".into(),
            machine: format!("fake-{}", self.arch.uname_machine()).into(),
            accel: "none".into(),
        }
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint {
            host: "fake".into(),
            port: self.port,
            user: "root".into(),
            // A cloud volume is found in the guest by its NVMe serial.
            volume_device: match self.kexec {
                true => VolumeDevice::NvmeSerial(format!("vol0fake{:012}", self.port)),
                false => VolumeDevice::Path("/dev/vda".into()),
            },
        }
    }

    fn kernel_boot(&self) -> KernelBoot {
        match self.kexec {
            true => KernelBoot::Kexec(KexecPlan {
                cmdline: "console=ttyS0 rdinit=/init lazyinit.net=dhcp".into(),
                inherit: vec!["console=".into()],
            }),
            false => KernelBoot::Direct,
        }
    }

    fn console_tail(&self, _lines: usize) -> String {
        format!("fake console of {}", self.cell)
    }

    fn is_alive(&mut self) -> bool {
        !self.torn_down && self.lab.guest_at(self.port).is_some()
    }

    async fn teardown(&mut self) -> Result<(), ProviderError> {
        if self.torn_down {
            return Ok(());
        }
        if let Answer::Fail(why) = self.lab.hook("teardown", &self.cell) {
            return Err(ProviderError::infra(why));
        }
        if self.forget() {
            self.lab.note(format!("teardown {}", self.cell));
        }
        Ok(())
    }
}

impl Drop for FakeMachine {
    fn drop(&mut self) {
        if !self.torn_down && self.forget() {
            self.lab.note(format!("dropped {}", self.cell));
        }
    }
}

/// Placeholder kernels and images; guests reached in process.
pub struct FakeArtifacts {
    lab: Lab,
}

#[async_trait]
impl Artifacts for FakeArtifacts {
    async fn kernel(
        &self,
        need: &KernelNeed,
        profile: KernelProfile,
        progress: Progress,
    ) -> Result<Kernel, KernelError> {
        let label = format!("{}-hz{}-{}", need.arch, need.hz, need.variant);
        if let Answer::Fail(why) = self.lab.hook("build", &label) {
            return Err(KernelError::Step(why));
        }
        progress("make (fake)".into());
        let image = self
            .lab
            .placeholder(&format!("kernels/{label}-{profile}/image"))
            .map_err(|(p, e)| KernelError::io(&p, e))?;
        self.lab.note(format!("build {label} {profile}"));
        Ok(Kernel {
            image,
            release: format!("6.1.0-lazyinit-hz{}-{}", need.hz, need.variant),
        })
    }

    async fn initramfs(&self, arch: Arch) -> Result<PathBuf, ImageError> {
        self.lab.note(format!("image {arch}"));
        self.lab
            .placeholder(&format!("initramfs-{arch}.cpio.gz"))
            .map_err(|(path, source)| ImageError::Io {
                action: "write",
                path,
                source,
            })
    }

    /// Path sources must be there, as for the real builds; the hook's
    /// `check` step (per kernel) fails as a missing build tool.
    async fn check(&self, needs: &[KernelNeed]) -> Result<(), KernelError> {
        for need in needs {
            crate::artifacts::check_source(need)?;
            let label = format!("{}-hz{}-{}", need.arch, need.hz, need.variant);
            if let Answer::Fail(tool) = self.lab.hook("check", &label) {
                return Err(KernelError::MissingTool {
                    tool,
                    install: "apt-get install make".into(),
                });
            }
        }
        Ok(())
    }

    async fn connect(&self) -> Result<Arc<dyn Connect>, lazyinit_ssh::SshError> {
        Ok(Arc::new(FakeConnect {
            lab: self.lab.clone(),
        }))
    }
}

/// Reaches a fake machine's guest, as SSH reaches a real one.
struct FakeConnect {
    lab: Lab,
}

impl Connect for FakeConnect {
    fn wait_ready(
        &self,
        ep: &Endpoint,
        _deadline: Instant,
        alive: &mut dyn FnMut() -> bool,
    ) -> Result<Box<dyn Remote>, GuestError> {
        let Some((cell, guest)) = self.lab.guest_at(ep.port) else {
            return Err(GuestError::Transport(format!(
                "nothing listens on port {}",
                ep.port
            )));
        };
        match self.lab.hook("boot", &cell) {
            Answer::Normal => {}
            Answer::Fail(why) => return Err(GuestError::Transport(why)),
            Answer::Drop => return Err(GuestError::Transport("connection reset (fake)".into())),
        }
        if !alive() {
            return Err(GuestError::Transport(
                "the machine is gone (or the run was interrupted)".into(),
            ));
        }
        Ok(Box::new(guest))
    }
}

/// The rows of `results.csv` in `dir`, by cell id, in file order.
pub fn rows_in(dir: &Path) -> Vec<lazyinit_core::results::ResultRow> {
    lazyinit_core::RunFolder::new(dir)
        .results_csv()
        .rows()
        .unwrap_or_default()
}
