//! Choosing KVM or TCG. `/dev/kvm` can exist and still not work (nested KVM
//! on these builders spins or aborts on an MSR), so KVM is proven by booting
//! the real kernel to its first console line under a short deadline.

use std::path::Path;
use std::time::Duration;

use lazyinit_core::{Arch, CellFolder, CellWriter};
use serde::{Deserialize, Serialize};

use crate::args::{self, Accel};
use crate::process::{tail_file, QemuProcess};

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccelChoice {
    /// KVM if it proves itself, else TCG.
    #[default]
    Auto,
    Kvm,
    Tcg,
}

impl std::str::FromStr for AccelChoice {
    type Err = lazyinit_core::exit::ExitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(AccelChoice::Auto),
            "kvm" => Ok(AccelChoice::Kvm),
            "tcg" => Ok(AccelChoice::Tcg),
            _ => Err(lazyinit_core::exit::bad_input(format!(
                "unknown accel `{s}`: use auto, kvm or tcg"
            ))),
        }
    }
}

/// Whether KVM could possibly serve a guest of this arch here.
pub fn kvm_possible(arch: Arch) -> bool {
    Arch::host() == Some(arch)
        && std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok()
}

/// Boots `kernel` with KVM and no init: a working KVM prints the banner and
/// panics ("No working init found"), and `-no-reboot` ends QEMU. Anything
/// else within `deadline` (hang, abort, no banner) means TCG.
pub async fn probe_kvm(
    arch: Arch,
    kernel: &Path,
    work: &CellWriter,
    deadline: Duration,
) -> Result<(), String> {
    if !kvm_possible(arch) {
        return Err("no usable /dev/kvm for this arch".into());
    }
    work.create()
        .map_err(|e| lazyinit_core::exit::chain_text(&e))?;
    let console = work.hand_over(CellFolder::KVM_PROBE_CONSOLE);
    let qmp = work
        .kvm_probe_qmp()
        .map_err(|e| lazyinit_core::exit::chain_text(&e))?;
    let cmdline = args::kernel_cmdline(arch, None, &["rdinit=/nonexistent".into()]);
    let g = args::GuestArgs {
        arch,
        accel: Accel::Kvm,
        memory_mib: 256,
        cpus: 1,
        kernel,
        initrd: None,
        cmdline: &cmdline,
        console_log: &console,
        qmp_socket: &qmp,
        ssh_port: None,
        volume: None,
        storage: args::Storage::default(),
        warmup: None,
        icount: Vec::new(),
    };
    let (stderr, stderr_log) = work
        .create_file(CellFolder::KVM_PROBE_STDERR)
        .map_err(|e| lazyinit_core::exit::chain_text(&e))?;
    let mut p = QemuProcess::spawn(
        arch.qemu_binary(),
        &args::guest_args(&g),
        stderr,
        &stderr_log,
    )
    .map_err(|e| e.to_string())?;
    let exited = p.wait_exit(deadline).await;
    p.stop(Duration::from_millis(10)).await;
    // QEMU leaves its QMP socket behind when it exits; the probe is over.
    if let Err(e) = work.remove_socket(&qmp) {
        tracing::warn!("{}", lazyinit_core::exit::chain_text(&e));
    }
    let out = tail_file(&console, 16 * 1024);
    match exited {
        Some(_) if out.contains("Linux version") => Ok(()),
        Some(st) => Err(format!(
            "QEMU with KVM exited ({st}) without booting: {}",
            p.stderr_tail(400).trim()
        )),
        None => Err(format!(
            "KVM guest did not finish booting within {deadline:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_parses() {
        assert_eq!("tcg".parse::<AccelChoice>().unwrap(), AccelChoice::Tcg);
        assert!("xen".parse::<AccelChoice>().is_err());
    }

    #[test]
    fn foreign_arch_never_uses_kvm() {
        let foreign = if Arch::host() == Some(Arch::X86_64) {
            Arch::Arm64
        } else {
            Arch::X86_64
        };
        assert!(!kvm_possible(foreign));
    }
}
