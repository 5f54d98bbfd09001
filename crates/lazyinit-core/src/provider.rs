//! The one seam with several implementations: where a guest comes from.
//!
//! A [`Provider`] turns a cell into a running [`Machine`] with a blank volume
//! and an SSH endpoint whose host key the harness already knows. Everything
//! after that (verify the kernel, mkfs, mount, time ext4lazyinit) is the
//! shared guest protocol in `lazyinit-guest`, identical for every provider.
//!
//! The orchestrator asks a provider, never names one: which kernels its
//! machines boot ([`Provider::kernel_profile`]), what a plan costs on it
//! ([`Provider::cost`]), which storage profiles it serves, and, per
//! machine, how the kernel under test comes to run ([`Machine::kernel_boot`]).

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::cell::Cell;
use crate::exit;
use crate::storage::StorageProfile;
use crate::writer::CellWriter;

/// What a provider needs to start a machine for one cell.
#[derive(Debug, Clone)]
pub struct LaunchRequest {
    pub run_id: String,
    pub cell: Cell,
    /// Bootable kernel image for the cell's arch (bzImage / Image).
    pub kernel_image: std::path::PathBuf,
    /// `uname -r` the booted kernel must report.
    pub kernel_release: String,
    /// Guest userland (compressed cpio) with the pinned SSH host key.
    pub initramfs: std::path::PathBuf,
    /// The cell folder's writer: the console log and anything else worth
    /// keeping.
    pub folder: CellWriter,
    /// Extra kernel command-line arguments (clocksource hints, for example).
    pub extra_cmdline: Vec<String>,
    /// What a zeroing costs on the volume.
    pub storage_profile: StorageProfile,
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
    pub provider: crate::identity::ProviderName,
    pub machine: crate::identity::MachineName,
    pub accel: crate::identity::Accel,
}

/// Which kernel configuration a provider's machines boot (the fragments
/// under `kernels/fragments/`; part of a kernel's cache key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum KernelProfile {
    /// Local QEMU guests (virtio only): small and fast to build.
    #[default]
    Qemu,
    /// Also cloud instances: NVMe (EBS), ENA.
    Cloud,
}

impl std::fmt::Display for KernelProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KernelProfile::Qemu => "qemu",
            KernelProfile::Cloud => "cloud",
        })
    }
}

impl std::str::FromStr for KernelProfile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "qemu" => Ok(KernelProfile::Qemu),
            "cloud" | "ec2" => Ok(KernelProfile::Cloud),
            _ => Err(format!("unknown kernel profile `{s}`: use qemu or cloud")),
        }
    }
}

impl Serialize for KernelProfile {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for KernelProfile {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// How the kernel under test comes to run on a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelBoot {
    /// The provider booted it (QEMU's `-kernel` and `-initrd`).
    Direct,
    /// The machine booted its own kernel (a cloud image's): the runner
    /// uploads the kernel under test and the guest initramfs over SSH,
    /// kexecs into them and reconnects with the same pinned host key.
    Kexec(KexecPlan),
}

/// What a kexec into the kernel under test needs from the provider.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KexecPlan {
    /// The new kernel's command line: the machine's console and anything
    /// its hardware needs, plus what the guest initramfs needs (and what
    /// must outlive the machine's own userspace, such as EC2's expiry).
    pub cmdline: String,
    /// Arguments of the running kernel's command line, by prefix
    /// (`console=`), that describe the machine rather than its software:
    /// where the running kernel has any, the new one takes those instead
    /// of `cmdline`'s arguments with the same prefix.
    pub inherit: Vec<String>,
}

/// One cell as a plan prices it.
#[derive(Debug, Clone, Copy)]
pub struct CellEstimate<'a> {
    pub cell: &'a Cell,
    /// The model's lazy-init time plus the mean start delay; a provider
    /// adds its own overhead (boot, mkfs, teardown).
    pub lazyinit: Duration,
}

/// What running a plan costs on a provider (`plan` prints it).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Cost {
    /// Guests on this host: memory for the guests that run at once, disk
    /// for every volume (sparse files).
    Host { memory_mib: u64, disk_bytes: u64 },
    /// Machines in a cloud: their time, its price, and the API calls the
    /// run makes at least (polls while waiting add to that).
    Cloud {
        instance_hours: f64,
        volume_gb_hours: f64,
        usd: f64,
        api_calls: u64,
    },
}

impl Cost {
    /// One line for `plan`, after the time estimate.
    pub fn render(&self, provider: &str, concurrency: usize) -> String {
        match self {
            Cost::Host {
                memory_mib,
                disk_bytes,
            } => format!(
                "host memory: ~{memory_mib} MiB for {concurrency} guests; host disk: ~{:.1} GiB of sparse volumes",
                *disk_bytes as f64 / (1u64 << 30) as f64
            ),
            Cost::Cloud {
                instance_hours,
                volume_gb_hours,
                usd,
                api_calls,
            } => format!(
                "{provider}: {instance_hours:.1} instance-hours, {volume_gb_hours:.0} GB-hours of volumes, about ${usd:.2} on demand; at least {api_calls} API calls"
            ),
        }
    }
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
    /// A file of the cell's folder could not be written.
    #[error(transparent)]
    Write(#[from] crate::WriteError),
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
}

impl exit::ExitCode for ProviderError {
    fn exit_code(&self) -> u8 {
        match self {
            ProviderError::BadInput(_) => exit::BAD_INPUT,
            ProviderError::MissingTool { .. } => exit::MISSING_TOOL,
            ProviderError::Infrastructure { .. } => exit::INFRASTRUCTURE,
            ProviderError::Interrupted => exit::INTERRUPTED,
            ProviderError::Write(_) => exit::INFRASTRUCTURE,
        }
    }
}

/// Where machines come from. Making a provider does no I/O (no network,
/// no keys, no tools): `plan` makes one too. Checks that need any of that
/// belong in [`Provider::preflight`].
#[async_trait]
pub trait Provider: Send + Sync {
    /// `qemu`, `ec2`: the spec's `provider` and the `provider` column.
    fn name(&self) -> &str;

    /// The kernel configuration its machines boot.
    fn kernel_profile(&self) -> KernelProfile;

    /// Refuses, from the spec alone, cells or a storage profile this
    /// provider cannot run (bad input, exit 2): pure, no I/O, no tools, so
    /// `plan` and `run` refuse the same specs with the same line.
    /// [`Provider::preflight`] checks the host after it. By default every
    /// cell and only the provider's own storage (`none`) is served.
    fn refuse(&self, _cells: &[Cell], storage: &StorageProfile) -> Result<(), ProviderError> {
        match storage {
            StorageProfile::None => Ok(()),
            other => Err(ProviderError::BadInput(format!(
                "storage profile `{other}` is not available with provider {}: use `none`",
                self.name()
            ))),
        }
    }

    /// Host memory one machine takes on this host (guest RAM and the
    /// emulator's own), which bounds `concurrency = "auto"`. `None`: the
    /// machines run elsewhere, and every cell may run at once.
    fn host_mib_per_machine(&self) -> Option<u64> {
        None
    }

    /// What running `cells` on volumes of `storage`, `concurrency` at a
    /// time, costs. Pure: asks no API and launches nothing.
    fn cost(
        &self,
        cells: &[CellEstimate<'_>],
        storage: &StorageProfile,
        concurrency: usize,
    ) -> Result<Cost, ProviderError>;

    /// Checks, before anything starts, that these cells can run here at all
    /// on volumes of `storage` (tools installed, disk or quota enough).
    /// Launches nothing.
    async fn preflight(
        &self,
        cells: &[Cell],
        storage: &StorageProfile,
    ) -> Result<(), ProviderError>;

    /// Makes what this provider's machines need beyond the kernels and
    /// images (the QEMU of the virtual clock), beside the kernel builds.
    /// Nothing by default.
    async fn prepare(&self, _cells: &[Cell]) -> Result<(), ProviderError> {
        Ok(())
    }

    /// The host seconds a cell takes, boot to teardown, when its guest does
    /// not run in real time (the virtual clock: a CPU-bound guest whose
    /// idle time costs nothing), from its `groups`; `None` (the default)
    /// when the guest's time is the wall's, as the plan's model says.
    fn host_seconds(&self, _cell: &Cell, _groups: u64) -> Option<f64> {
        None
    }

    /// Starts a machine for one cell and returns once it is booting. The
    /// returned machine owns every resource it made; dropping it without
    /// `teardown` must still not leak a process.
    async fn launch(&self, req: &LaunchRequest) -> Result<Box<dyn Machine>, ProviderError>;

    /// Removes what an earlier run into the results folder `run` (run id
    /// `run_id`) left behind when it ended without its teardown (killed:
    /// SIGKILL, OOM, a CI timeout): its machines and volumes. Called with
    /// the folder locked, before any cell of this run starts; says what it
    /// removed, one entry each.
    async fn reclaim(
        &self,
        _run: &crate::RunWriter,
        _run_id: &str,
    ) -> Result<Vec<String>, ProviderError> {
        Ok(Vec::new())
    }

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
    fn get(&self) -> Duration;
    fn set(&self, hold: Duration);
    /// Noise on purpose (`ebs:D,sd=S,seed=N`, the virtual clock) starts
    /// here: after the calibration, whose samples it would throw (the
    /// guest part is their least disturbed one, so noise would bias it
    /// low by about one S), and before the measured mount, whose zero
    /// requests then take the seed's draws from the first. Nothing for a
    /// hold without noise.
    fn start_noise(&self) {}
}

/// A machine's claim on a shared host's CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Unmeasured work (boot, warm-up, mkfs) at this nice value (0-19): the
    /// runner gives the cells it expects to take longest the lowest value,
    /// so they reach their measured phase first.
    Prepare { nice: u8 },
    /// The measured phase, mount to the thread's exit: real-time, so a
    /// zeroing never waits for the CPU behind unmeasured work (docs/design.md §3).
    Measure,
    /// The first zeroings, which set the sleep for the whole run: real-time
    /// above `Measure`, so not even another measured guest delays them.
    Critical,
}

#[async_trait]
pub trait Machine: Send {
    fn info(&self) -> MachineInfo;
    fn endpoint(&self) -> Endpoint;
    /// How the kernel under test comes to run here: booted by the provider
    /// (QEMU) or kexec'd into by the runner (EC2, whose instance boots its
    /// image's kernel).
    fn kernel_boot(&self) -> KernelBoot {
        KernelBoot::Direct
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
    /// The last `lines` lines of the guest console, for error messages.
    fn console_tail(&self, lines: usize) -> String;
    /// What on the host explains a guest's failure, when the provider can
    /// tell (the host folder of its volume is full: the guest only sees
    /// "Input/output error"): one line naming the folder and the fix.
    fn host_trouble(&self) -> Option<String> {
        None
    }
    /// Whether the machine is still running (a dead QEMU means no answer will come).
    fn is_alive(&mut self) -> bool;
    /// Stops the machine and removes every resource it created. Idempotent.
    async fn teardown(&mut self) -> Result<(), ProviderError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_profiles_read_and_print() {
        assert_eq!("ec2".parse::<KernelProfile>(), Ok(KernelProfile::Cloud));
        assert_eq!(" Qemu ".parse::<KernelProfile>(), Ok(KernelProfile::Qemu));
        assert_eq!(KernelProfile::Cloud.to_string(), "cloud");
        assert!("gce".parse::<KernelProfile>().is_err());
    }

    #[test]
    fn costs_render_as_plan_prints_them() {
        let host = Cost::Host {
            memory_mib: 3248,
            disk_bytes: 3 << 30,
        };
        assert_eq!(
            host.render("qemu", 4),
            "host memory: ~3248 MiB for 4 guests; host disk: ~3.0 GiB of sparse volumes"
        );
        let cloud = Cost::Cloud {
            instance_hours: 9.04,
            volume_gb_hours: 21000.4,
            usd: 5.333,
            api_calls: 98,
        };
        assert_eq!(
            cloud.render("ec2", 8),
            "ec2: 9.0 instance-hours, 21000 GB-hours of volumes, about $5.33 on demand; at least 98 API calls"
        );
    }
}
