//! One QEMU guest playing one EC2 instance: the stand-in for its AMI (our
//! qemu-profile kernel and initramfs, with the keys its user data carries),
//! its EBS volumes as NVMe controllers with Nitro's serials, its SSH port
//! on loopback.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use lazyinit_core::Arch;
use lazyinit_qemu::args;

/// A volume attached to the instance, as the guest sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmeVolume {
    pub volume_id: String,
    pub file: PathBuf,
}

pub struct GuestArgs<'a> {
    pub arch: Arch,
    pub memory_mib: u32,
    pub kernel: &'a Path,
    pub initrd: &'a Path,
    pub cmdline: &'a str,
    pub console_log: &'a Path,
    pub qmp_socket: &'a Path,
    pub ssh_port: u16,
    /// In probe order: the root volume first, as on Nitro.
    pub volumes: &'a [NvmeVolume],
}

/// The machine: q35 for c5, `virt` for c6g; TCG, since KVM does not work
/// on these builders (docs/design.md §3). Two departures from a Graviton, both for
/// the kexec from a stand-in booted without UEFI:
/// - a GICv2 (MSI through GICv2m), not a GICv3 with an ITS: a kexec'd
///   kernel can take over the ITS's LPI tables only when UEFI reserved
///   them (it oopses in `lpi_write_config` otherwise);
/// - no `kaslr-seed` in the device tree: a kernel without KASLR (the
///   stand-in) leaves it unwiped, and arm64 kexec-tools then refuses to
///   pass the tree on ("setup_2nd_dtb failed"); an AMI's kernel wipes it.
pub fn machine_args(arch: Arch) -> Vec<OsString> {
    let m = match arch {
        Arch::X86_64 => "q35,accel=tcg",
        Arch::Arm64 => "virt,gic-version=2,dtb-randomness=off,accel=tcg",
    };
    ["-machine", m, "-cpu", "max"]
        .iter()
        .map(OsString::from)
        .collect()
}

/// The stand-in AMI's kernel command line: the QEMU provider's (console,
/// TSC hints that the kexec carries over), our /init's static network.
pub fn cmdline(arch: Arch, tsc_khz: Option<u64>, instance_id: &str) -> String {
    args::kernel_cmdline(
        arch,
        tsc_khz,
        &[
            "lazyinit.net=static".into(),
            format!("lazyinit.hostname={instance_id}"),
        ],
    )
}

pub fn qemu_args(g: &GuestArgs<'_>) -> Vec<OsString> {
    let mut a = args::base_args(g.memory_mib, 1);
    a.extend(machine_args(g.arch));
    a.extend(args::boot_args(g.kernel, Some(g.initrd), g.cmdline));
    a.extend(args::console_args(g.console_log));
    a.extend(args::qmp_args(g.qmp_socket));
    a.extend(args::net_args(g.ssh_port));
    for (i, v) in g.volumes.iter().enumerate() {
        a.extend(args::nvme_volume_args(
            &format!("ebs{i}"),
            &v.file,
            &lazyinit_ec2::nvme::serial(&v.volume_id),
        ));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_are_nvme_with_nitro_serials_in_order() {
        let vols = [
            NvmeVolume {
                volume_id: "vol-0root0000000000a".into(),
                file: "/t/root.raw".into(),
            },
            NvmeVolume {
                volume_id: "vol-0data0000000000b".into(),
                file: "/t/data.raw".into(),
            },
        ];
        let a = qemu_args(&GuestArgs {
            arch: Arch::Arm64,
            memory_mib: 512,
            kernel: Path::new("/k"),
            initrd: Path::new("/i"),
            cmdline: "console=ttyAMA0",
            console_log: Path::new("/t/console.log"),
            qmp_socket: Path::new("/t/qmp.sock"),
            ssh_port: 2222,
            volumes: &vols,
        });
        let s: Vec<String> = a.iter().map(|x| x.to_string_lossy().into_owned()).collect();
        let s = s.join(" ");
        assert!(
            s.contains("-machine virt,gic-version=2,dtb-randomness=off,accel=tcg"),
            "{s}"
        );
        let root = s
            .find("nvme,drive=ebs0,serial=vol0root0000000000a")
            .unwrap();
        let data = s
            .find("nvme,drive=ebs1,serial=vol0data0000000000b")
            .unwrap();
        assert!(root < data, "root first: {s}");
        assert!(s.contains("hostfwd=tcp:127.0.0.1:2222-:22"));
        assert!(
            !s.contains("virtio-blk"),
            "no virtio disk on a Nitro twin: {s}"
        );
        assert!(cmdline(Arch::X86_64, Some(2_600_000), "i-1").contains("tsc_early_khz=2600000"));
    }
}
