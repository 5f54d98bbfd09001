//! Finding the blank volume inside the guest: a fixed node, or the NVMe
//! namespace with a given serial (EC2: the EBS volume id without its dash),
//! looked up in sysfs because the kexec'd initramfs has no udev.

use std::time::Duration;

use lazyinit_core::provider::VolumeDevice;

use crate::protocol::script_with_args;
use crate::{GuestError, Remote};

pub(crate) const NVME_BY_SERIAL_SH: &str = include_str!("../scripts/nvme-by-serial.sh");
/// How long the guest waits for the volume's controller to probe.
const PROBE_WAIT_S: u64 = 60;

/// The device node of `dev` in the guest (`/dev/vda`, `/dev/nvme1n1`).
pub fn find(remote: &mut dyn Remote, dev: &VolumeDevice) -> Result<String, GuestError> {
    find_within(remote, dev, PROBE_WAIT_S)
}

fn find_within(
    remote: &mut dyn Remote,
    dev: &VolumeDevice,
    wait_s: u64,
) -> Result<String, GuestError> {
    let serial = match dev {
        VolumeDevice::Path(p) => return Ok(p.clone()),
        VolumeDevice::NvmeSerial(s) => s,
    };
    let out = remote.exec(
        &script_with_args(NVME_BY_SERIAL_SH, &[serial.clone(), wait_s.to_string()]),
        Duration::from_secs(wait_s + 60),
    )?;
    if out.status != 0 {
        return Err(GuestError::Command {
            step: "finding the volume by its NVMe serial",
            status: out.status,
            stderr: out.stderr.trim().to_string(),
        });
    }
    let node = out.stdout.trim();
    if !node.starts_with("/dev/nvme") || node.contains(char::is_whitespace) {
        return Err(GuestError::Parse {
            step: "finding the volume by its NVMe serial",
            what: format!("`{node}` is not an NVMe device node"),
        });
    }
    Ok(node.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RemoteOutput;

    /// Runs scripts with the host's real `sh` against a fake sysfs tree.
    struct LocalSh {
        sysfs: std::path::PathBuf,
    }

    impl Remote for LocalSh {
        fn exec(&mut self, script: &str, _t: Duration) -> Result<RemoteOutput, GuestError> {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .env("LAZYINIT_SYSFS_NVME", &self.sysfs)
                .output()
                .unwrap();
            Ok(RemoteOutput {
                status: out.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&out.stdout).into(),
                stderr: String::from_utf8_lossy(&out.stderr).into(),
            })
        }

        fn upload(&mut self, _: &std::path::Path, remote: &str, _: u32) -> Result<(), GuestError> {
            Err(GuestError::Transport(format!("no uploads here ({remote})")))
        }
    }

    fn fake_sysfs(ctrls: &[(&str, &str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (ctrl, serial, ns) in ctrls {
            let c = dir.path().join(ctrl);
            std::fs::create_dir_all(c.join(ns)).unwrap();
            // Space-padded to 20 characters, as the kernel writes it.
            std::fs::write(c.join("serial"), format!("{serial:<20}\n")).unwrap();
        }
        dir
    }

    #[test]
    fn the_namespace_is_found_by_serial_not_by_order() {
        let sys = fake_sysfs(&[
            ("nvme0", "vol0root000000000000", "nvme0n1"),
            ("nvme1", "vol0abc", "nvme1n1"),
            ("nvme2", "vol0def", "nvme2c2n1"),
        ]);
        let mut r = LocalSh {
            sysfs: sys.path().into(),
        };
        let find =
            |r: &mut LocalSh, s: &str| find_within(r, &VolumeDevice::NvmeSerial(s.into()), 0);
        assert_eq!(find(&mut r, "vol0abc").unwrap(), "/dev/nvme1n1");
        assert_eq!(find(&mut r, "vol0def").unwrap(), "/dev/nvme2n1");
        let e = find(&mut r, "vol0zzz").unwrap_err().to_string();
        assert!(e.contains("no NVMe namespace with serial vol0zzz"), "{e}");
        assert!(e.contains("nvme1=vol0abc"), "{e}");
        assert_eq!(
            find_within(&mut r, &VolumeDevice::Path("/dev/vda".into()), 0).unwrap(),
            "/dev/vda"
        );
    }

    #[test]
    fn no_controller_at_all_is_an_error() {
        let sys = fake_sysfs(&[]);
        let mut r = LocalSh {
            sysfs: sys.path().into(),
        };
        let e = find_within(&mut r, &VolumeDevice::NvmeSerial("vol0abc".into()), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("controllers: none"), "{e}");
    }
}
