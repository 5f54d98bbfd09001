//! The one seam with several implementations: where a guest comes from.
//!
//! A [`Provider`] turns a cell into a running [`Machine`] with a blank volume
//! and an SSH endpoint whose host key the harness already knows. Everything
//! after that (verify the kernel, mkfs, mount, time ext4lazyinit) is the
//! shared guest protocol in `lazyinit-guest`, identical for every provider.

use std::path::PathBuf;

use async_trait::async_trait;

use crate::cell::Cell;
use crate::exit;

/// What a provider needs to start a machine for one cell.
#[derive(Debug, Clone)]
pub struct LaunchRequest {
    pub run_id: String,
    pub cell: Cell,
    /// Bootable kernel image for the cell's arch (bzImage / Image).
    pub kernel_image: PathBuf,
    /// `uname -r` the booted kernel must report.
    pub kernel_release: String,
    /// Guest userland (compressed cpio) with the pinned SSH host key.
    pub initramfs: PathBuf,
    /// Per-cell folder for the console log and anything else worth keeping.
    pub log_dir: PathBuf,
    /// Extra kernel command-line arguments (clocksource hints, for example).
    pub extra_cmdline: Vec<String>,
    /// What a zeroing costs on the volume.
    pub storage_profile: crate::storage::StorageProfile,
}

/// How to reach a launched guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// Where the blank volume is inside the guest.
    pub volume_device: VolumeDevice,
}

/// Where the guest finds the blank volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeDevice {
    /// A device node fixed by the provider (`/dev/vda`).
    Path(String),
    /// The NVMe namespace whose controller has this serial (an EBS volume
    /// on Nitro: `vol0abc...`). Node names follow probe order and a guest
    /// without udev has no `/dev/disk/by-id`, so the guest looks the
    /// serial up in sysfs (`lazyinit_guest::volume`).
    NvmeSerial(String),
}

/// What ran the guest, as recorded in the result row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineInfo {
    pub provider: String,
    pub machine: String,
    pub accel: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The request cannot work as given (size beyond the host disk, ...).
    #[error("{0}")]
    BadInput(String),
    /// A host tool is missing; `install` says how to get it.
    #[error("{tool} is missing: {install}")]
    MissingTool { tool: String, install: String },
    /// The machine or its infrastructure failed; `detail` is attached below
    /// the message (console tail, QEMU stderr, API error body).
    #[error("{message}{}", fmt_detail(.detail))]
    Infrastructure { message: String, detail: String },
    #[error("interrupted")]
    Interrupted,
}

fn fmt_detail(d: &str) -> String {
    if d.trim().is_empty() {
        String::new()
    } else {
        format!("\n--- last output ---\n{}", d.trim_end())
    }
}

impl ProviderError {
    pub fn infra(message: impl Into<String>) -> Self {
        ProviderError::Infrastructure {
            message: message.into(),
            detail: String::new(),
        }
    }
    pub fn exit_code(&self) -> u8 {
        match self {
            ProviderError::BadInput(_) => exit::BAD_INPUT,
            ProviderError::MissingTool { .. } => exit::MISSING_TOOL,
            ProviderError::Infrastructure { .. } => exit::INFRASTRUCTURE,
            ProviderError::Interrupted => exit::INTERRUPTED,
        }
    }
}

#[async_trait]
pub trait Provider: Send + Sync {
    /// `qemu`, `ec2`: the value of the `provider` column.
    fn name(&self) -> &str;

    /// Checks, before anything starts, that these cells can run here at all
    /// (tools installed, disk or quota enough). Launches nothing.
    async fn preflight(
        &self,
        cells: &[Cell],
        storage: &crate::storage::StorageProfile,
    ) -> Result<(), ProviderError>;

    /// Refuses a storage profile this provider cannot serve (bad input,
    /// before any build). By default only the provider's own storage
    /// (`none`) is served.
    fn check_storage(&self, p: &crate::storage::StorageProfile) -> Result<(), ProviderError> {
        match p {
            crate::storage::StorageProfile::None => Ok(()),
            other => Err(ProviderError::BadInput(format!(
                "storage profile `{other}` is not available with provider {}: use `none`",
                self.name()
            ))),
        }
    }

    /// Starts a machine for one cell and returns once it is booting. The
    /// returned machine owns every resource it made; dropping it without
    /// `teardown` must still not leak a process.
    async fn launch(&self, req: &LaunchRequest) -> Result<Box<dyn Machine>, ProviderError>;

    /// Sets `cell`'s machine's claim on the host's CPU (see [`Priority`]).
    /// Returns whether it was set. Providers whose machines do not share a
    /// host do nothing.
    async fn prioritize(&self, _cell: &str, _p: Priority) -> bool {
        false
    }

    /// Called once when a run ends, whatever way it ended: removes what the
    /// provider still owns (a teardown that failed is retried) and waits
    /// for background teardowns. An error names what is left behind and
    /// the command that removes it. Providers with nothing to retry do
    /// nothing.
    async fn finish(&self) -> Result<(), ProviderError> {
        Ok(())
    }

    /// Whether this provider's machines share one host's CPU (local
    /// guests): then a guest's first zeroings must not run beside another
    /// guest's (the orchestrator's gate gives one at a time the host).
    fn shares_host(&self) -> bool {
        false
    }
}

/// The hold of a volume's zero requests, set while the machine runs (the
/// `ebs` profile calibrates it on each guest before the measured mount).
pub trait ZeroHold: Send + Sync {
    fn get(&self) -> std::time::Duration;
    fn set(&self, hold: std::time::Duration);
}

/// A machine's claim on a shared host's CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Unmeasured work (boot, warm-up, mkfs) at this nice value (0-19): the
    /// runner gives the cells it expects to take longest the lowest value,
    /// so they reach their measured phase first.
    Prepare { nice: u8 },
    /// The measured phase, mount to the thread's exit: real-time, so a
    /// zeroing never waits for the CPU behind unmeasured work (DESIGN §3).
    Measure,
    /// The first zeroings, which set the sleep for the whole run: real-time
    /// above `Measure`, so not even another measured guest delays them.
    Critical,
}

#[async_trait]
pub trait Machine: Send {
    fn info(&self) -> MachineInfo;
    fn endpoint(&self) -> Endpoint;
    /// True when the kernel under test is not yet running and the guest
    /// protocol must install it and reboot (EC2); false when the provider
    /// booted it directly (QEMU).
    fn needs_kernel_install(&self) -> bool {
        false
    }
    /// A small scratch block device for a warm-up lazy-init before the
    /// measured one (QEMU: under TCG the first zeroing otherwise pays for
    /// translating the kernel's code paths, and without the fix that first
    /// timing sets the sleep for the whole run). `None`: no warm-up.
    fn warmup_device(&self) -> Option<String> {
        None
    }
    /// The volume's zero-request hold, when the provider holds zeroes (a
    /// latency storage profile). The warm-up device has the same hold.
    fn zero_hold(&self) -> Option<std::sync::Arc<dyn ZeroHold>> {
        None
    }
    /// Kernel command-line arguments the kernel under test must carry when
    /// the guest protocol installs it (`needs_kernel_install`): what has to
    /// outlive the machine's own userspace, such as EC2's expiry.
    fn kexec_args(&self) -> Vec<String> {
        Vec::new()
    }
    /// The last `lines` lines of the guest console, for error messages.
    fn console_tail(&self, lines: usize) -> String;
    /// Whether the machine is still running (a dead QEMU means no answer will come).
    fn is_alive(&mut self) -> bool;
    /// Stops the machine and removes every resource it created. Idempotent.
    async fn teardown(&mut self) -> Result<(), ProviderError>;
}
