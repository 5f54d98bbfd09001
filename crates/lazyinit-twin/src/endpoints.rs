//! The twin's side of the provider's one seam (`lazyinit_ec2::reach`):
//! where each instance's guest answers SSH. The controller writes one file
//! per instance (`<dir>/<instance-id>`: `127.0.0.1:PORT`) once the guest is
//! started; [`TwinEndpoints`] reads it, so a harness in another process
//! (the SIGKILL test's) finds its guests too.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lazyinit_ec2::ops::InstanceView;
use lazyinit_ec2::{Ec2Error, InstanceResolver};

/// The `accel` column of rows measured on the twin: a QEMU guest under
/// TCG playing the instance (`lazyinit_core::results::is_twin`).
pub const TWIN_TCG: &str = "twin-tcg";

pub fn write(dir: &Path, instance: &str, port: u16) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // Whole or not at all, through a file of an unpredictable name.
    lazyinit_core::output::write_atomic(
        &dir.join(instance),
        format!("127.0.0.1:{port}\n").as_bytes(),
    )
}

pub fn remove(dir: &Path, instance: &str) {
    let _ = std::fs::remove_file(dir.join(instance));
}

/// Reads the controller's endpoint files.
#[derive(Debug, Clone)]
pub struct TwinEndpoints {
    pub dir: PathBuf,
    /// How long to wait for the controller to start an instance's guest.
    pub wait: Duration,
}

#[async_trait]
impl InstanceResolver for TwinEndpoints {
    async fn ssh_endpoint(&self, i: &InstanceView) -> Result<(String, u16), Ec2Error> {
        let path = self.dir.join(&i.id);
        let start = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&path) {
                let (host, port) = text.trim().rsplit_once(':').ok_or_else(|| {
                    Ec2Error::Unexpected(format!(
                        "twin endpoint file {} is garbled",
                        path.display()
                    ))
                })?;
                let port = port.parse().map_err(|_| {
                    Ec2Error::Unexpected(format!(
                        "twin endpoint file {} is garbled",
                        path.display()
                    ))
                })?;
                return Ok((host.to_string(), port));
            }
            if start.elapsed() > self.wait {
                return Err(Ec2Error::Unexpected(format!(
                    "the twin started no guest for {} within {:?} (is its controller running, with a stand-in for this arch?)",
                    i.id, self.wait
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn platform(&self) -> String {
        TWIN_TCG.into()
    }
}
