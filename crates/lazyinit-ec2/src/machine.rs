//! One launched cell: an instance with the blank EBS volume attached.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_ec2::Client;
use lazyinit_core::provider::{Endpoint, Machine, MachineInfo, ProviderError, VolumeDevice};

use crate::error::Ec2Error;
use crate::resources::Guard;

/// What the harness records about a launched cell (written to the cell's
/// log folder as `ec2.json`).
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
    pub(crate) user: String,
    pub(crate) log_dir: PathBuf,
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
            .and_then(|b| aws_smithy_types::base64::decode(b).ok())
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
            machine: self.record.instance_type.clone(),
            accel: self.record.platform.clone(),
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

    /// The expiry, for the kernel under test's /init: kexec replaces the
    /// userspace whose timer would have shut the instance down.
    fn kexec_args(&self) -> Vec<String> {
        vec![format!("lazyinit.expires={}", self.record.expires_at_unix)]
    }

    /// The instance boots its AMI's kernel; the kernel under test is
    /// installed over SSH and booted by the guest protocol.
    fn needs_kernel_install(&self) -> bool {
        true
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
                let _ = std::fs::write(self.log_dir.join("console.log"), text);
            }
            Err(e) => tracing::info!("console of {} not saved: {e}", self.record.instance_id),
        }
        self.guard.release().await?;
        self.torn_down = true;
        Ok(())
    }
}
