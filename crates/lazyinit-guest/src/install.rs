//! Installing the kernel under test on a machine that booted its own
//! kernel (`KernelBoot::Kexec`, EC2): upload the kernel and the guest
//! initramfs, load them with kexec, jump, reconnect and check that a new
//! boot runs the kernel under test. kexec skips the firmware and the
//! image's boot loader, so nothing on the instance's disk is changed and a
//! failed boot costs one instance, not a debugging session on a broken
//! root volume.
//!
//! The initramfs carries the same pinned host key that the provider gave
//! the image's sshd (one generated for the run), so the reconnect is
//! pinned too.

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

/// Which boot is running, its release and its command line, one a line.
/// The boot id tells a new boot from the old system, which may run the same
/// release (a twin's stand-in image can).
pub const BOOT_SH: &str = "cat /proc/sys/kernel/random/boot_id; uname -r; cat /proc/cmdline";

/// The kernel under test and what it boots.
#[derive(Debug, Clone, Copy)]
pub struct KernelUnderTest<'a> {
    pub image: &'a Path,
    pub initramfs: &'a Path,
    /// What `uname -r` prints on it.
    pub release: &'a str,
}

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

/// The kexec'd kernel's command line: the running kernel's arguments that
/// `plan.inherit` names (the machine's consoles, its TSC hints), then
/// `plan.cmdline` without its arguments of a prefix the running kernel
/// supplied, then the harness's clock at the jump (`lazyinit.now=`): a
/// guest that must act at an absolute time (the expiry) counts from it, as
/// the new kernel may have no clock of its own (no RTC driver).
pub fn kexec_command_line(running: &str, plan: &KexecPlan, now_unix: u64) -> String {
    let prefix_of = |a: &str| plan.inherit.iter().find(|p| a.starts_with(p.as_str()));
    let kept: Vec<&str> = running
        .split_whitespace()
        .filter(|a| prefix_of(a).is_some())
        .collect();
    let supplied: Vec<&String> = kept.iter().filter_map(|a| prefix_of(a)).collect();
    let ours = plan
        .cmdline
        .split_whitespace()
        .filter(|a| !matches!(prefix_of(a), Some(p) if supplied.contains(&p)));
    let now = format!("lazyinit.now={now_unix}");
    kept.into_iter()
        .chain(ours)
        .chain(std::iter::once(now.as_str()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
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

/// A boot of a machine, as [`BOOT_SH`] tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Boot {
    id: String,
    release: String,
    cmdline: String,
}

fn boot_of(remote: &mut dyn Remote) -> Result<Boot, GuestError> {
    let out = remote.exec(BOOT_SH, SHORT)?;
    if out.status != 0 {
        return Err(GuestError::Command {
            step: "reading the boot id",
            status: out.status,
            stderr: out.stderr,
        });
    }
    let mut l = out.stdout.lines().map(str::trim);
    let (id, release) = (l.next().unwrap_or_default(), l.next().unwrap_or_default());
    if id.is_empty() || release.is_empty() {
        return Err(GuestError::Parse {
            step: "reading the boot id",
            what: format!("no boot id and release in `{}`", out.stdout.trim()),
        });
    }
    Ok(Boot {
        id: id.to_string(),
        release: release.to_string(),
        cmdline: l.next().unwrap_or_default().to_string(),
    })
}

/// Uploads, kexecs and reconnects (`reconnect` waits for the guest to
/// answer again); returns the guest once a new boot (another boot id)
/// reports the kernel under test's release. `deadline` bounds the whole
/// wait for the new kernel; `note` hears each step, with its time.
pub fn install_and_kexec(
    remote: &mut dyn Remote,
    reconnect: &mut dyn FnMut() -> Result<Box<dyn Remote>, GuestError>,
    kernel: KernelUnderTest<'_>,
    plan: &KexecPlan,
    deadline: Instant,
    note: &mut dyn FnMut(String),
) -> Result<Box<dyn Remote>, GuestError> {
    let release = kernel.release;
    let k = format!("{REMOTE_DIR}/kernel");
    let i = format!("{REMOTE_DIR}/initrd");
    let old = boot_of(remote)?;
    step(remote, "mkdir", &format!("mkdir -p {REMOTE_DIR}"), SHORT)?;
    let started = Instant::now();
    remote.upload(kernel.image, &k, 0o600)?;
    remote.upload(kernel.initramfs, &i, 0o600)?;
    let mib = |p: &Path| std::fs::metadata(p).map_or(0.0, |m| m.len() as f64 / 1048576.0);
    note(format!(
        "kexec: uploaded the kernel ({:.1} MiB) and initramfs ({:.1} MiB) in {:.1} s",
        mib(kernel.image),
        mib(kernel.initramfs),
        started.elapsed().as_secs_f64()
    ));
    step(
        remote,
        "installing kexec-tools",
        &ensure_kexec_script(),
        INSTALL_TIMEOUT,
    )?;
    let cmdline = kexec_command_line(&old.cmdline, plan, unix_now());
    step(
        remote,
        "kexec -l",
        &kexec_load_script(&k, &i, &cmdline),
        SHORT,
    )?;
    // The connection dies with the old kernel; the exit status is moot.
    let jumped = Instant::now();
    note(format!("kexec: jumping into {release}"));
    let _ = remote.exec(&kexec_exec_script(), SHORT);

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
        let mut s = reconnect()?;
        match boot_of(&mut *s) {
            Ok(b) if b.id != old.id && b.release == release => {
                note(format!(
                    "kexec: {release} answered SSH {:.1} s after the jump",
                    jumped.elapsed().as_secs_f64()
                ));
                return Ok(s);
            }
            Ok(b) if b.id == old.id => last = format!("{} (the old boot, still up)", b.release),
            Ok(b) => last = b.release,
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(RETRY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(cmdline: &str) -> KexecPlan {
        KexecPlan {
            cmdline: cmdline.into(),
            inherit: ["console=", "earlycon", "tsc=", "tsc_early_khz="]
                .map(String::from)
                .into(),
        }
    }

    #[test]
    fn the_new_command_line_keeps_the_machines_consoles_and_tsc_hints() {
        let ours = plan("console=ttyS0,115200n8 panic=-1 rdinit=/init lazyinit.expires=9");
        // An AMI's: its consoles replace ours, nothing else of it is kept.
        assert_eq!(
            kexec_command_line(
                "BOOT_IMAGE=/vmlinuz root=UUID=x ro console=tty0 console=ttyS0,115200 quiet",
                &ours,
                5
            ),
            "console=tty0 console=ttyS0,115200 panic=-1 rdinit=/init lazyinit.expires=9 lazyinit.now=5"
        );
        // A QEMU x86_64 guest playing an instance: its TSC hints too.
        assert_eq!(
            kexec_command_line(
                "console=ttyS0 panic=-1 tsc_early_khz=2600000 tsc=reliable rdinit=/init",
                &ours,
                5
            ),
            "console=ttyS0 tsc_early_khz=2600000 tsc=reliable panic=-1 rdinit=/init lazyinit.expires=9 lazyinit.now=5"
        );
        // A QEMU arm64 guest's PL011 console is kept as it is.
        assert!(kexec_command_line("console=ttyAMA0 rdinit=/init", &ours, 5)
            .starts_with("console=ttyAMA0 panic=-1 "));
        // No console at all: the plan's (EC2's serial console).
        assert_eq!(
            kexec_command_line("root=/dev/nvme0n1p1 ro", &ours, 5),
            "console=ttyS0,115200n8 panic=-1 rdinit=/init lazyinit.expires=9 lazyinit.now=5"
        );
    }

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
        let (image, initramfs) = (dir.path().join("bzImage"), dir.path().join("initrd"));
        std::fs::write(&image, "k").unwrap();
        std::fs::write(&initramfs, "i").unwrap();
        let release = "6.1.158-lazyinit-hz250-fix";
        let hz = Hz::new(250).unwrap();
        let g = SharedGuest::new(FakeGuest::new(Arch::X86_64, hz, Variant::Fix, release, 8));
        g.lock().under_test = false;
        let mut before: Box<dyn Remote> = Box::new(g.clone());
        let out = before.exec("uname -r", SHORT).unwrap();
        assert_eq!(out.stdout.trim(), CLOUD_RELEASE);
        let mut reconnect = || Ok(Box::new(g.clone()) as Box<dyn Remote>);
        let plan = plan("console=ttyS0 rdinit=/init");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut notes = Vec::new();
        let kut = KernelUnderTest {
            image: &image,
            initramfs: &initramfs,
            release,
        };
        let mut after = install_and_kexec(
            &mut *before,
            &mut reconnect,
            kut,
            &plan,
            deadline,
            &mut |n| notes.push(n),
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
                "boot",
                "mkdir",
                "install-kexec",
                "kexec-load",
                "kexec-exec",
                "boot",
                "uname"
            ]
        );
        assert_eq!(
            g.uploads,
            ["/root/lazyinit-kexec/kernel", "/root/lazyinit-kexec/initrd"]
        );
        // The AMI's consoles, not the plan's; the harness's clock.
        let loaded = g.kexec_loaded.as_deref().unwrap();
        assert!(
            loaded.contains(
                "'--command-line=console=tty0 console=ttyS0,115200n8 rdinit=/init lazyinit.now="
            ),
            "{loaded}"
        );
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[0].starts_with("kexec: uploaded the kernel"),
            "{notes:?}"
        );
        assert!(notes[2].contains("answered SSH"), "{notes:?}");
    }

    /// The old system still answering with the same release is not the
    /// new boot: the wait goes on until the boot id changes.
    #[test]
    fn the_old_boot_is_not_taken_for_the_new_one() {
        use crate::fake::{FakeGuest, SharedGuest};
        use lazyinit_core::{Arch, Hz, Variant};
        let dir = tempfile::tempdir().unwrap();
        let (image, initramfs) = (dir.path().join("bzImage"), dir.path().join("initrd"));
        std::fs::write(&image, "k").unwrap();
        std::fs::write(&initramfs, "i").unwrap();
        let release = "6.1.158-lazyinit-hz250-nofix";
        let hz = Hz::new(250).unwrap();
        // The machine already runs this release, and never jumps.
        let g = SharedGuest::new(FakeGuest::new(Arch::X86_64, hz, Variant::NoFix, release, 8));
        g.lock().hook = Some(std::sync::Arc::new(|step| match step {
            "kexec-exec" => crate::fake::Answer::Fail("no jump".into()),
            _ => crate::fake::Answer::Normal,
        }));
        let mut before: Box<dyn Remote> = Box::new(g.clone());
        let mut reconnect = || Ok(Box::new(g.clone()) as Box<dyn Remote>);
        let kut = KernelUnderTest {
            image: &image,
            initramfs: &initramfs,
            release,
        };
        let e = install_and_kexec(
            &mut *before,
            &mut reconnect,
            kut,
            &plan("rdinit=/init"),
            Instant::now() + Duration::from_millis(100),
            &mut |_| {},
        )
        .err()
        .expect("the old boot was taken for the new one");
        assert!(e.to_string().contains("the old boot, still up"), "{e}");
    }

    #[test]
    fn scripts_are_valid_sh() {
        for s in [
            ensure_kexec_script(),
            kexec_exec_script(),
            BOOT_SH.to_string(),
            kexec_load_script("/k", "/i", "a=1 b='c'"),
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
