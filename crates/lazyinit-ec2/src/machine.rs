//! One launched cell: an instance with the blank EBS volume attached.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_ec2::Client;
use lazyinit_core::provider::{
    Endpoint, KernelBoot, KexecPlan, Machine, MachineInfo, ProviderError, VolumeDevice,
};
use lazyinit_core::{Arch, CellWriter};

use crate::error::Ec2Error;
use crate::resources::Guard;

/// How the kernel under test comes to run on an instance (kexec), and
/// its command line: the serial console EC2 shows in GetConsoleOutput
/// (ttyS0 on both c5 and c6g) unless the running kernel names its own
/// consoles, panic ends the boot instead of hanging, the NVMe timeout AWS
/// recommends for EBS so a slow volume is not reset mid-run; then what the
/// guest initramfs needs: its /init, DHCP on the instance's network, the
/// RNG seeded at once so SSH answers; and the instance's expiry, at which
/// the initramfs's /init powers off (kexec replaces the userspace whose
/// timer would have done it; shutdown behaviour terminate makes that a
/// termination). The running kernel's consoles and x86 TSC hints are
/// kept: they describe the machine (a local twin's arm64 guest has a PL011
/// console, its x86 guest needs the TSC hints to keep the `tsc`
/// clocksource under TCG, docs/design.md §3).
pub fn kexec_plan(_arch: Arch, expires_at_unix: i64) -> KexecPlan {
    let mut args: Vec<String> = [
        "console=ttyS0,115200n8",
        "panic=-1",
        "nvme_core.io_timeout=4294967295",
        "rdinit=/init",
        "lazyinit.net=dhcp",
        "random.trust_cpu=on",
    ]
    .map(String::from)
    .into();
    args.push(format!("lazyinit.expires={expires_at_unix}"));
    KexecPlan {
        cmdline: args.join(" "),
        inherit: ["console=", "earlycon", "tsc=", "tsc_early_khz="]
            .map(String::from)
            .into(),
    }
}

/// What the harness records about a launched cell (written to the cell's
/// folder as `ec2.json`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LaunchRecord {
    pub instance_id: String,
    pub instance_type: String,
    pub ami: String,
    pub availability_zone: String,
    pub volume_id: String,
    /// Name given to AttachVolume; the guest sees an NVMe namespace
    /// whatever it is, found by `nvme_serial`.
    pub attach_device: String,
    pub nvme_serial: String,
    /// Where SSH answers (the instance's address and 22, or a twin's).
    pub host: String,
    pub ssh_port: u16,
    /// What the instance ran on: `nitro`, or a twin (`twin-...`).
    pub platform: String,
    pub expires_at: String,
    pub expires_at_unix: i64,
}

pub struct Ec2Machine {
    pub(crate) guard: Guard,
    pub(crate) client: Client,
    pub(crate) record: LaunchRecord,
    pub(crate) kexec: KexecPlan,
    pub(crate) user: String,
    pub(crate) folder: CellWriter,
    pub(crate) console: Arc<Mutex<String>>,
    pub(crate) torn_down: bool,
}

impl Ec2Machine {
    pub fn record(&self) -> &LaunchRecord {
        &self.record
    }
    pub fn instance_id(&self) -> &str {
        &self.record.instance_id
    }
    pub fn volume_id(&self) -> &str {
        &self.record.volume_id
    }

    /// Fetches the instance's serial console (GetConsoleOutput) into the
    /// cache `console_tail` reads. EC2 publishes it with a delay of minutes.
    pub async fn refresh_console(&self) -> Result<String, Ec2Error> {
        let out = self
            .client
            .get_console_output()
            .instance_id(&self.record.instance_id)
            .send()
            .await
            .map_err(|e| Ec2Error::api("GetConsoleOutput", e))?;
        let text = out
            .output()
            .and_then(|b| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.decode(b).ok()
            })
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        *self.console.lock().expect("console") = text.clone();
        Ok(text)
    }
}

#[async_trait]
impl Machine for Ec2Machine {
    fn info(&self) -> MachineInfo {
        MachineInfo {
            provider: "ec2".into(),
            machine: self.record.instance_type.as_str().into(),
            accel: self.record.platform.as_str().into(),
        }
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint {
            host: self.record.host.clone(),
            port: self.record.ssh_port,
            user: self.user.clone(),
            volume_device: VolumeDevice::NvmeSerial(self.record.nvme_serial.clone()),
        }
    }

    /// The instance boots its AMI's kernel; the runner kexecs into ours.
    fn kernel_boot(&self) -> KernelBoot {
        KernelBoot::Kexec(self.kexec.clone())
    }

    fn console_tail(&self, lines: usize) -> String {
        let text = self.console.lock().expect("console").clone();
        let mut tail: Vec<&str> = text.lines().rev().take(lines).collect();
        tail.reverse();
        if tail.is_empty() {
            return format!(
                "(no console output fetched yet for {}; it is saved to console.log at teardown)",
                self.record.instance_id
            );
        }
        tail.join("\n")
    }

    /// Synchronous, so it cannot ask the API: an instance that died shows
    /// up as an SSH failure instead. False once torn down.
    fn is_alive(&mut self) -> bool {
        !self.torn_down
    }

    async fn teardown(&mut self) -> Result<(), ProviderError> {
        if self.torn_down {
            return Ok(());
        }
        // Keep the console for the record; it is best effort and must not
        // stand in the way of terminating a machine that costs money.
        match self.refresh_console().await {
            Ok(text) => {
                if let Err(e) = self
                    .folder
                    .put(lazyinit_core::CellFolder::CONSOLE_LOG, text)
                {
                    tracing::warn!("{}", lazyinit_core::exit::chain_text(&e));
                }
            }
            Err(e) => tracing::info!("console of {} not saved: {e}", self.record.instance_id),
        }
        self.guard.release().await?;
        self.torn_down = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kexec_plan_is_the_instance_console_what_the_initramfs_needs_and_the_expiry() {
        let p = kexec_plan(Arch::Arm64, 1_700_000_000);
        assert_eq!(
            p.cmdline,
            "console=ttyS0,115200n8 panic=-1 nvme_core.io_timeout=4294967295 rdinit=/init lazyinit.net=dhcp random.trust_cpu=on lazyinit.expires=1700000000"
        );
        assert_eq!(
            p.inherit,
            ["console=", "earlycon", "tsc=", "tsc_early_khz="]
        );
    }
}
