//! Installing the kernel under test on a machine that booted its own
//! kernel (EC2: `Machine::needs_kernel_install()`): upload the kernel and
//! the guest initramfs over SSH, load them with kexec, jump, reconnect and
//! check `uname -r`. kexec skips the firmware and the AMI's boot loader, so
//! nothing on the instance's disk is changed and a failed boot costs one
//! instance, not a debugging session on a broken root volume.
//!
//! The initramfs carries the same pinned host key that user data installed
//! for the AMI's sshd (one generated for the run), so the reconnect is
//! pinned too.

use std::path::Path;
use std::time::{Duration, Instant};

use lazyinit_core::provider::Endpoint;
use lazyinit_core::Arch;
use lazyinit_ssh::{Keys, Session, UploadSource};

use crate::protocol::sh_quote;
use crate::GuestError;

const REMOTE_DIR: &str = "/root/lazyinit-kexec";
/// apt on a fresh instance can take minutes (mirror, dpkg triggers).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);
const SHORT: Duration = Duration::from_secs(60);
/// Pause between reconnect attempts while the old system still answers.
const RETRY: Duration = Duration::from_secs(2);

/// Kernel command line for a kexec'd kernel on an EC2 instance, beyond
/// what the running kernel's command line lends it ([`CARRIED_ARGS`]):
/// panic ends the boot instead of hanging, and the NVMe timeout AWS
/// recommends for EBS so a slow volume is not reset mid-run.
pub fn ec2_cmdline(_arch: Arch, extra: &[String]) -> String {
    let mut args = vec![
        "panic=-1".to_string(),
        "nvme_core.io_timeout=4294967295".to_string(),
    ];
    args.extend(extra.iter().cloned());
    args.join(" ")
}

/// Arguments of the running kernel's command line that describe the
/// machine rather than its software, so the kexec'd kernel keeps them: the
/// consoles (ttyS0 on c5 and c6g, where GetConsoleOutput reads; ttyAMA0 on
/// a QEMU arm64 guest) and x86 TSC hints (a TCG guest needs them to keep
/// the `tsc` clocksource, DESIGN §3). Without a console among them the
/// kexec'd kernel gets EC2's, [`DEFAULT_CONSOLE`].
pub const CARRIED_ARGS: &[&str] = &["console=", "earlycon", "tsc=", "tsc_early_khz="];
pub const DEFAULT_CONSOLE: &str = "console=ttyS0,115200n8";

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
/// the jump so a refused image is a clear error, not a silent reboot. The
/// command line is the running kernel's [`CARRIED_ARGS`] and `cmdline`.
pub fn kexec_load_script(kernel: &str, initrd: &str, cmdline: &str) -> String {
    let patterns: Vec<String> = CARRIED_ARGS.iter().map(|a| format!("{a}*")).collect();
    format!(
        "keep=\n\
         for a in $(cat \"${{LAZYINIT_PROC_CMDLINE:-/proc/cmdline}}\"); do\n\
         \x20 case \"$a\" in {}) keep=\"$keep $a\" ;; esac\n\
         done\n\
         case \"$keep\" in *console=*) ;; *) keep=\" {DEFAULT_CONSOLE}$keep\" ;; esac\n\
         rest={}\n\
         kexec -l {} --initrd={} --command-line=\"${{keep# }} $rest\"",
        patterns.join("|"),
        sh_quote(cmdline),
        sh_quote(kernel),
        sh_quote(initrd),
    )
}

/// Jumps into the loaded kernel a moment after the SSH command returns.
/// `systemctl kexec` stops services and unmounts first; plain `kexec -e`
/// is the fallback on systems without systemd. `setsid`, not `nohup`: the
/// job must leave the SSH session, and busybox (our own guest) has no nohup.
pub fn kexec_exec_script() -> String {
    "setsid sh -c 'sleep 1; sync; systemctl kexec 2>/dev/null || kexec -e' </dev/null >/dev/null 2>&1 &".into()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

fn ssh(e: lazyinit_ssh::SshError) -> GuestError {
    GuestError::Ssh(e.to_string())
}

/// Uploads, kexecs and reconnects; returns a session to the new kernel
/// once a new boot (another `boot_id`) reports `release` from `uname -r`:
/// the old system may run the same release (a twin's stand-in AMI can).
/// `deadline` bounds the whole wait for the new kernel; `is_alive` stops it
/// early when the machine is gone; `note` hears each step, with its time.
#[allow(clippy::too_many_arguments)]
pub fn install_and_kexec(
    session: &Session,
    ep: &Endpoint,
    keys: &Keys,
    kernel: &Path,
    initrd: &Path,
    cmdline: &str,
    release: &str,
    deadline: Instant,
    mut is_alive: impl FnMut() -> bool,
    mut note: impl FnMut(String),
) -> Result<Session, GuestError> {
    let k = format!("{REMOTE_DIR}/kernel");
    let i = format!("{REMOTE_DIR}/initrd");
    const BOOT_ID: &str = "cat /proc/sys/kernel/random/boot_id; uname -r";
    let old_boot = session
        .exec_checked_with_timeout(BOOT_ID, SHORT)
        .map_err(ssh)?
        .stdout;
    let old_boot = old_boot.lines().next().unwrap_or_default().to_string();
    session
        .exec_checked_with_timeout(&format!("mkdir -p {REMOTE_DIR}"), SHORT)
        .map_err(ssh)?;
    let started = Instant::now();
    session
        .upload(UploadSource::File(kernel), &k, 0o600)
        .map_err(ssh)?;
    session
        .upload(UploadSource::File(initrd), &i, 0o600)
        .map_err(ssh)?;
    let mib = |p: &Path| std::fs::metadata(p).map_or(0.0, |m| m.len() as f64 / 1048576.0);
    note(format!(
        "kexec: uploaded the kernel ({:.1} MiB) and initramfs ({:.1} MiB) in {:.1} s",
        mib(kernel),
        mib(initrd),
        started.elapsed().as_secs_f64()
    ));
    let step = |step: &'static str, cmd: &str, t: Duration| -> Result<(), GuestError> {
        let out = session.exec_with_timeout(cmd, t).map_err(ssh)?;
        if out.status != 0 {
            return Err(GuestError::Command {
                step,
                status: out.status,
                stderr: out.stderr,
            });
        }
        Ok(())
    };
    step(
        "installing kexec-tools",
        &ensure_kexec_script(),
        INSTALL_TIMEOUT,
    )?;
    // The harness's clock at the jump: a guest that must act on an absolute
    // time (the expiry) counts from it, as the kexec'd kernel may have no
    // clock of its own (no RTC driver).
    let cmdline = format!("{cmdline} lazyinit.now={}", unix_now());
    step("kexec -l", &kexec_load_script(&k, &i, &cmdline), SHORT)?;
    // The connection dies with the old kernel; the exit status is moot.
    let jumped = Instant::now();
    note(format!("kexec: jumping into {release}"));
    let _ = session.exec_with_timeout(&kexec_exec_script(), SHORT);

    // The old system may still answer for a few seconds (same host key):
    // keep reconnecting until a new boot does.
    let mut last = String::from("no answer yet");
    loop {
        if Instant::now() >= deadline {
            return Err(GuestError::WrongKernel {
                what: format!("kernel after kexec (gave up at the deadline; last: {last})"),
                expected: release.to_string(),
                found: last,
            });
        }
        let s = lazyinit_ssh::wait_until_ready(
            &ep.host,
            ep.port,
            &ep.user,
            keys,
            deadline,
            &mut is_alive,
        )
        .map_err(ssh)?;
        match s.exec_with_timeout(BOOT_ID, SHORT) {
            Ok(out) if out.status == 0 => {
                let mut l = out.stdout.lines();
                let (boot, now) = (l.next().unwrap_or_default(), l.next().unwrap_or_default());
                if boot != old_boot && now.trim() == release {
                    note(format!(
                        "kexec: {release} answered SSH {:.1} s after the jump",
                        jumped.elapsed().as_secs_f64()
                    ));
                    return Ok(s);
                }
                last = if boot == old_boot {
                    format!("{} (the old boot, still up)", now.trim())
                } else {
                    now.trim().to_string()
                };
            }
            Ok(out) => last = out.stderr.trim().to_string(),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(RETRY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_has_panic_timeout_and_extras() {
        let c = ec2_cmdline(Arch::Arm64, &["lazyinit.expires=1".into()]);
        assert!(c.starts_with("panic=-1 nvme_core.io_timeout=4294967295 "));
        assert!(c.ends_with(" lazyinit.expires=1"));
        assert!(
            !c.contains("console="),
            "the console comes from the running kernel"
        );
    }

    /// The load script through a real shell, `kexec` replaced by printf:
    /// the running kernel's consoles and TSC hints are kept, nothing else
    /// of it, and our command line comes back intact.
    fn loaded_args(running: &str, cmdline: &str) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let proc_cmdline = dir.path().join("cmdline");
        std::fs::write(&proc_cmdline, format!("{running}\n")).unwrap();
        let s = kexec_load_script("/root/k", "/root/i", cmdline).replacen(
            "kexec -l",
            "printf '%s\\n'",
            1,
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&s)
            .env("LAZYINIT_PROC_CMDLINE", &proc_cmdline)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn load_script_keeps_the_platform_args_and_quotes_ours() {
        let ours = "panic=-1 a='b c' lazyinit.expires=9";
        assert_eq!(
            loaded_args(
                "BOOT_IMAGE=/vmlinuz root=UUID=x ro console=tty0 console=ttyS0,115200 tsc_early_khz=2600000 tsc=reliable quiet",
                ours
            ),
            [
                "/root/k",
                "--initrd=/root/i",
                "--command-line=console=tty0 console=ttyS0,115200 tsc_early_khz=2600000 tsc=reliable panic=-1 a='b c' lazyinit.expires=9"
            ]
        );
        // A QEMU arm64 guest's PL011 console is kept as it is.
        assert_eq!(
            loaded_args("console=ttyAMA0 panic=-1 rdinit=/init", "x=1")[2],
            "--command-line=console=ttyAMA0 x=1"
        );
        // No console at all: EC2's serial console.
        assert_eq!(
            loaded_args("root=/dev/nvme0n1p1 ro", "x=1")[2],
            "--command-line=console=ttyS0,115200n8 x=1"
        );
    }

    #[test]
    fn scripts_are_valid_sh() {
        for s in [
            ensure_kexec_script(),
            kexec_exec_script(),
            kexec_load_script("/k", "/i", "a=1"),
        ] {
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
