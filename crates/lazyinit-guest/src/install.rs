//! Installing the kernel under test on a machine that booted its own
//! kernel (`KernelBoot::Kexec`, EC2): upload the kernel and the guest
//! initramfs, load them with kexec, jump, reconnect and check `uname -r`.
//! kexec skips the firmware and the image's boot loader, so nothing on the
//! instance's disk is changed and a failed boot costs one instance, not a
//! debugging session on a broken root volume.
//!
//! The initramfs carries the same pinned host key that the provider gave
//! the image's sshd, so the reconnect is pinned too.

use std::path::Path;
use std::time::{Duration, Instant};

use lazyinit_core::provider::KexecPlan;
use lazyinit_core::shell::quote;

use crate::{GuestError, Remote};

const REMOTE_DIR: &str = "/root/lazyinit-kexec";
/// apt on a fresh instance can take minutes (mirror, dpkg triggers).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);
const SHORT: Duration = Duration::from_secs(60);
/// Pause between reconnect attempts while the old system still answers.
const RETRY: Duration = Duration::from_secs(2);

/// Makes sure `kexec` exists, installing kexec-tools with whatever package
/// manager the AMI has (and keeping kexec-tools from hooking into reboots).
pub fn ensure_kexec_script() -> String {
    "set -e\n\
     command -v kexec >/dev/null 2>&1 && exit 0\n\
     if command -v apt-get >/dev/null 2>&1; then\n\
       echo 'kexec-tools kexec-tools/load_kexec boolean false' | debconf-set-selections 2>/dev/null || true\n\
       DEBIAN_FRONTEND=noninteractive apt-get -qq update\n\
       DEBIAN_FRONTEND=noninteractive apt-get -qq install -y kexec-tools\n\
     elif command -v dnf >/dev/null 2>&1; then dnf -q -y install kexec-tools\n\
     elif command -v yum >/dev/null 2>&1; then yum -q -y install kexec-tools\n\
     else echo 'no kexec and no package manager to install kexec-tools' >&2; exit 1\n\
     fi\n\
     command -v kexec >/dev/null"
        .to_string()
}

/// Loads the uploaded kernel and initramfs (`kexec -l`), checked before
/// the jump so a refused image is a clear error, not a silent reboot.
pub fn kexec_load_script(kernel: &str, initrd: &str, cmdline: &str) -> String {
    format!(
        "kexec -l {} {} {}",
        quote(kernel),
        quote(&format!("--initrd={initrd}")),
        quote(&format!("--command-line={cmdline}"))
    )
}

/// Jumps into the loaded kernel a moment after the SSH command returns.
/// `systemctl kexec` stops services and unmounts first; plain `kexec -e`
/// is the fallback on systems without systemd. `setsid`, not `nohup`: the
/// job must leave the SSH session, and busybox (our own guest) has no nohup.
pub fn kexec_exec_script() -> String {
    "setsid sh -c 'sleep 1; sync; systemctl kexec 2>/dev/null || kexec -e' </dev/null >/dev/null 2>&1 &".into()
}

fn step(
    remote: &mut dyn Remote,
    step: &'static str,
    cmd: &str,
    t: Duration,
) -> Result<(), GuestError> {
    let out = remote.exec(cmd, t)?;
    if out.status != 0 {
        return Err(GuestError::Command {
            step,
            status: out.status,
            stderr: out.stderr,
        });
    }
    Ok(())
}

/// Uploads, kexecs and reconnects (`reconnect` waits for the guest to
/// answer again); returns the guest on the new kernel once `uname -r`
/// reports `release`. `deadline` bounds the whole wait for the new kernel.
pub fn install_and_kexec(
    remote: &mut dyn Remote,
    reconnect: &mut dyn FnMut() -> Result<Box<dyn Remote>, GuestError>,
    kernel: &Path,
    initrd: &Path,
    plan: &KexecPlan,
    release: &str,
    deadline: Instant,
) -> Result<Box<dyn Remote>, GuestError> {
    let k = format!("{REMOTE_DIR}/kernel");
    let i = format!("{REMOTE_DIR}/initrd");
    step(remote, "mkdir", &format!("mkdir -p {REMOTE_DIR}"), SHORT)?;
    remote.upload(kernel, &k, 0o600)?;
    remote.upload(initrd, &i, 0o600)?;
    step(
        remote,
        "installing kexec-tools",
        &ensure_kexec_script(),
        INSTALL_TIMEOUT,
    )?;
    step(
        remote,
        "kexec -l",
        &kexec_load_script(&k, &i, &plan.cmdline),
        SHORT,
    )?;
    // The connection dies with the old kernel; the exit status is moot.
    let _ = remote.exec(&kexec_exec_script(), SHORT);

    // The old system may still answer for a few seconds (same host key):
    // keep reconnecting until the new kernel does.
    let mut last = String::from("no answer yet");
    loop {
        if Instant::now() >= deadline {
            return Err(GuestError::WrongKernel {
                what: format!("kernel after kexec (gave up at the deadline; last: {last})"),
                expected: release.to_string(),
                found: last,
            });
        }
        let mut s = reconnect()?;
        match s.exec("uname -r", SHORT) {
            Ok(out) if out.status == 0 && out.stdout.trim() == release => return Ok(s),
            Ok(out) => last = out.stdout.trim().to_string(),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(RETRY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_script_quotes_the_command_line() {
        let s = kexec_load_script("/root/k", "/root/i", "console=ttyS0 a='b c'");
        assert!(s.starts_with("kexec -l "));
        // Run the quoting through a real shell: it must come back intact.
        let echo = s.replacen("kexec -l", "printf '%s\\n'", 1);
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&echo)
            .output()
            .unwrap();
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(
            lines,
            [
                "/root/k",
                "--initrd=/root/i",
                "--command-line=console=ttyS0 a='b c'"
            ]
        );
    }

    #[test]
    fn kexec_into_the_kernel_under_test_on_a_scripted_guest() {
        use crate::fake::{FakeGuest, SharedGuest, CLOUD_RELEASE};
        use lazyinit_core::{Arch, Hz, Variant};
        let dir = tempfile::tempdir().unwrap();
        let (kernel, initrd) = (dir.path().join("bzImage"), dir.path().join("initrd"));
        std::fs::write(&kernel, "k").unwrap();
        std::fs::write(&initrd, "i").unwrap();
        let release = "6.1.158-lazyinit-hz250-fix";
        let hz = Hz::new(250).unwrap();
        let g = SharedGuest::new(FakeGuest::new(Arch::X86_64, hz, Variant::Fix, release, 8));
        g.lock().under_test = false;
        let mut before: Box<dyn Remote> = Box::new(g.clone());
        let out = before.exec("uname -r", SHORT).unwrap();
        assert_eq!(out.stdout.trim(), CLOUD_RELEASE);
        let mut reconnect = || Ok(Box::new(g.clone()) as Box<dyn Remote>);
        let plan = KexecPlan {
            cmdline: "console=ttyS0 rdinit=/init".into(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut after = install_and_kexec(
            &mut *before,
            &mut reconnect,
            &kernel,
            &initrd,
            &plan,
            release,
            deadline,
        )
        .unwrap();
        assert_eq!(
            after.exec("uname -r", SHORT).unwrap().stdout.trim(),
            release
        );
        let g = g.lock();
        assert_eq!(
            g.steps,
            [
                "uname",
                "mkdir",
                "install-kexec",
                "kexec-load",
                "kexec-exec",
                "uname",
                "uname"
            ]
        );
        assert_eq!(
            g.uploads,
            ["/root/lazyinit-kexec/kernel", "/root/lazyinit-kexec/initrd"]
        );
    }

    #[test]
    fn scripts_are_valid_sh() {
        for s in [ensure_kexec_script(), kexec_exec_script()] {
            let out = std::process::Command::new("sh")
                .arg("-n")
                .arg("-c")
                .arg(&s)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{s}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
