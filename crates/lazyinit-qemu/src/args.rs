//! QEMU command lines, built from small pure functions (vmtest style).

use std::ffi::OsString;
use std::path::Path;

use lazyinit_core::Arch;

/// Which accelerator a guest runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

/// Options that make a guest that can never outlive its purpose: no default
/// devices, no display, and a reboot (including a panic with `panic=-1`)
/// ends QEMU instead of looping.
pub fn base_args(memory_mib: u32, cpus: u32) -> Vec<OsString> {
    let mut a = os(&[
        "-nodefaults",
        "-no-reboot",
        "-display",
        "none",
        "-no-user-config",
    ]);
    a.extend(os(&[
        "-m",
        &memory_mib.to_string(),
        "-smp",
        &cpus.to_string(),
    ]));
    a
}

pub fn machine_args(arch: Arch, accel: Accel) -> Vec<OsString> {
    match (arch, accel) {
        (Arch::X86_64, Accel::Kvm) => os(&["-machine", "q35,accel=kvm", "-cpu", "host"]),
        (Arch::X86_64, Accel::Tcg) => os(&["-machine", "q35,accel=tcg", "-cpu", "max"]),
        (Arch::Arm64, Accel::Kvm) => os(&[
            "-machine",
            "virt,gic-version=host,accel=kvm",
            "-cpu",
            "host",
        ]),
        (Arch::Arm64, Accel::Tcg) => os(&["-machine", "virt,accel=tcg", "-cpu", "max"]),
    }
}

pub fn console_device(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "ttyS0",
        Arch::Arm64 => "ttyAMA0",
    }
}

/// The kernel command line. `tsc_khz` pins the x86 TSC frequency so that a
/// busy TCG host cannot make calibration fail and push the guest onto the
/// jiffies clocksource (docs/design.md §3), which would make the fix invisible.
pub fn kernel_cmdline(arch: Arch, tsc_khz: Option<u64>, extra: &[String]) -> String {
    // random.trust_cpu: seed the RNG from the CPU at once, or dropbear
    // waits seconds of TCG time for entropy before it answers.
    let mut parts = vec![
        format!("console={}", console_device(arch)),
        "panic=-1".into(),
        "rdinit=/init".into(),
        "random.trust_cpu=on".into(),
    ];
    if arch == Arch::X86_64 {
        // The boot-time check that the IO-APIC timer ticks waits a few
        // ticks' worth of TSC time; with two dozen TCG guests booting on two
        // cores the interrupt came late and 4 of 12 x86 guests panicked
        // ("IO-APIC + timer doesn't work!"). KVM guests skip it the same way.
        parts.push("no_timer_check".into());
        if let Some(khz) = tsc_khz {
            parts.push(format!("tsc_early_khz={khz}"));
            parts.push("tsc=reliable".into());
        }
    }
    parts.extend(extra.iter().cloned());
    parts.join(" ")
}

pub fn boot_args(kernel: &Path, initrd: Option<&Path>, cmdline: &str) -> Vec<OsString> {
    let mut a = vec!["-kernel".into(), kernel.into()];
    if let Some(i) = initrd {
        a.push("-initrd".into());
        a.push(i.into());
    }
    a.push("-append".into());
    a.push(cmdline.into());
    a
}

/// Serial console to a file, so the console survives QEMU and can be tailed.
pub fn console_args(log: &Path) -> Vec<OsString> {
    let mut spec = OsString::from("file,id=con0,path=");
    spec.push(log);
    vec![
        "-chardev".into(),
        spec,
        "-serial".into(),
        "chardev:con0".into(),
    ]
}

/// QMP on a unix socket for a clean `quit`.
pub fn qmp_args(socket: &Path) -> Vec<OsString> {
    let mut spec = OsString::from("unix:");
    spec.push(socket);
    spec.push(",server=on,wait=off");
    vec!["-qmp".into(), spec]
}

/// User-mode networking with only the guest's SSH port forwarded to loopback.
pub fn net_args(ssh_port: u16) -> Vec<OsString> {
    os(&[
        "-netdev",
        &format!("user,id=net0,hostfwd=tcp:127.0.0.1:{ssh_port}-:22"),
        "-device",
        "virtio-net-pci,netdev=net0,romfile=",
    ])
}

/// Block throttling that turns the volume into a device with a fixed
/// per-request latency floor (a storage profile, see `StorageProfile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    pub iops_total: u64,
}

/// How the volume's file is cached on the host, throttled, or served
/// with a latency on zero requests (through the NBD server, `crate::nbd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storage {
    pub cache: &'static str,
    pub throttle: Option<Throttle>,
    pub latency: Option<crate::nbd::LatencyProfile>,
    /// The virtual clock's noise on purpose: each zero request's hold
    /// drawn around the hold (`ebs:D,sd=S,seed=N`), with the cell's own
    /// seed ([`lazyinit_core::Noise::seed_for`]).
    pub noise: Option<lazyinit_core::Noise>,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            cache: "writeback",
            throttle: None,
            latency: None,
            noise: None,
        }
    }
}

/// Where QEMU reads the volume from: the file itself, the NBD socket of
/// the NBD server of a latency profile (real clock), or the file through
/// the zero-hold filter (virtual clock: each zero request held on QEMU's
/// virtual clock, the hold named `/objects/<hold_id>` for QMP).
#[derive(Debug, Clone, Copy)]
pub enum VolumeSource<'a> {
    File(&'a Path),
    NbdUnix(&'a Path),
    ZeroHold {
        file: &'a Path,
        hold_ns: u64,
        hold_id: &'a str,
        noise: Option<lazyinit_core::Noise>,
    },
}

impl VolumeSource<'_> {
    /// The virtio-blk device's options beyond the common ones. On the
    /// virtual clock the guest's queue kick is handled in the vCPU's own
    /// thread (`ioeventfd=off`): with an ioeventfd the request reached the
    /// block layer only when QEMU's main loop next ran, and if the vCPU
    /// went idle first the clock warped to the next timer (a tick) with
    /// the zeroing not yet held, whenever the host scheduled the main loop
    /// late (docs/virtual-clock.md).
    fn device_opts(&self) -> &'static str {
        match self {
            VolumeSource::ZeroHold { .. } => ",ioeventfd=off",
            _ => "",
        }
    }

    /// The `-drive` text up to its own options.
    fn drive(&self, file_opts: &str) -> OsString {
        match *self {
            VolumeSource::File(p) => {
                let mut d = OsString::from("file=");
                d.push(p);
                d.push(format!(",format=raw{file_opts}"));
                d
            }
            VolumeSource::NbdUnix(sock) => {
                let mut d = OsString::from("driver=nbd,server.type=unix,server.path=");
                d.push(sock);
                d
            }
            VolumeSource::ZeroHold {
                file,
                hold_ns,
                hold_id,
                noise,
            } => {
                // The seed only: the noise starts over QMP after the
                // calibration (`jitter-ns`, QmpHold::start_noise).
                let noise = noise
                    .map(|n| format!(",seed={}", n.seed))
                    .unwrap_or_default();
                let mut d = OsString::from(format!(
                    "driver=zero-hold,hold-id={hold_id},hold-ns={hold_ns}{noise},io-ns={VCLOCK_IO_NS},file.driver=file,file.filename="
                ));
                d.push(file);
                d.push(file_opts.replace(",aio=", ",file.aio="));
                d
            }
        }
    }
}

/// The virtual clock: icount at a fixed shift with no sleeping (an idle
/// guest's clock jumps to its next timer) except while the guest and the
/// host converse ([`VCLOCK_NET_PACE_MS`]), and the firmware folders of
/// the project's QEMU build, which installs none. The guest's inputs that
/// QEMU takes from the host otherwise are fixed: the randomness it hands
/// the guest (RDRAND, RNDR, the boot seeds: `-seed`) and the wall clock
/// (the RTC starts at [`VCLOCK_RTC_BASE`] and runs on the virtual clock).
pub fn icount_args(shift: u8, data_dirs: &[std::path::PathBuf]) -> Vec<OsString> {
    let mut a = os(&[
        "-icount",
        &format!("shift={shift},sleep=off,x-net-pace={VCLOCK_NET_PACE_MS}"),
    ]);
    a.extend(os(&[
        "-seed",
        "1",
        "-rtc",
        &format!("base={VCLOCK_RTC_BASE},clock=vm"),
    ]));
    for d in data_dirs {
        a.push("-L".into());
        a.push(d.into());
    }
    a
}

/// The guest's wall clock at boot on the virtual clock.
pub const VCLOCK_RTC_BASE: &str = "2026-01-01T00:00:00";

/// For this long of the host's time after a packet crosses the guest's
/// network (QEMU patch 0004, `x-net-pace`), an idle guest's clock moves
/// no faster than the host's, though still never past its next timer: a
/// guest waiting for the host's answer (an SSH key exchange) does not race
/// through its own timeouts first. A tickless guest's next timer can be
/// minutes away; without the pace its SSH server gave up on the harness's
/// key exchange within a tenth of a second of the host's time. The
/// measured phase sends no packet, so it is not paced.
pub const VCLOCK_NET_PACE_MS: u32 = 1000;

/// What any request but a zeroing or a flush costs the guest on the
/// virtual clock (the zero-hold filter's `io-ns`), whatever the host takes,
/// provided the host is done by then: 1 ms, about an EBS volume's write.
/// At 10 us a journal write the host finished late, while the guest ran,
/// landed at a moment the host chose and moved a zeroing by up to 0.16 ms
/// (docs/virtual-clock.md).
pub const VCLOCK_IO_NS: u64 = 1_000_000;

/// The TSC rate an x86_64 guest is told on the virtual clock: under
/// icount the TSC counts QEMU's virtual nanoseconds, 1 GHz whatever the
/// shift.
pub const ICOUNT_TSC_KHZ: u64 = 1_000_000;

/// The blank volume: raw sparse file on virtio-blk. Discard and write-zeroes
/// are passed through and `detect-zeroes=unmap` turns zero writes into holes,
/// so a 2 TiB volume stays sparse while ext4 zeroes its inode tables.
pub fn volume_args(volume: VolumeSource<'_>, storage: Storage) -> Vec<OsString> {
    let mut drive = volume.drive(",aio=threads");
    drive.push(format!(
        ",if=none,id=vol0,cache={},discard=unmap,detect-zeroes=unmap",
        storage.cache
    ));
    if let Some(t) = storage.throttle {
        drive.push(format!(",throttling.iops-total={}", t.iops_total));
    }
    vec![
        "-drive".into(),
        drive,
        // First virtio-blk device: the guest's /dev/vda. An error on the
        // host side (a full disk) reaches the guest as an I/O error: QEMU's
        // default for ENOSPC pauses the VM, and mkfs would hang until its
        // timeout (30 minutes for 3 TiB) instead of failing the cell.
        "-device".into(),
        format!(
            "virtio-blk-pci,drive=vol0,discard=on,write-zeroes=on,werror=report,rerror=report,romfile={}",
            volume.device_opts()
        )
        .into(),
    ]
}

/// The warm-up scratch disk, the guest's /dev/vdb, on the same driver path
/// as the volume (over NBD, with the same hold, under a latency profile:
/// the calibration's zeroings must cost what the measured one will).
pub fn warmup_args(disk: VolumeSource<'_>) -> Vec<OsString> {
    let mut drive = disk.drive("");
    drive.push(",if=none,id=warm0,cache=unsafe,discard=unmap,detect-zeroes=unmap");
    vec![
        "-drive".into(),
        drive,
        "-device".into(),
        format!(
            "virtio-blk-pci,drive=warm0,discard=on,write-zeroes=on,werror=report,rerror=report,romfile={}",
            disk.device_opts()
        )
        .into(),
    ]
}

/// A volume as a Nitro instance presents an EBS volume: an NVMe controller
/// with one namespace whose controller serial is the volume id without its
/// dash (`vol0abc...`, at most 20 characters). For a local twin of an EC2
/// instance (`id` names the drive); the QEMU provider's own volumes are
/// virtio-blk. Kept sparse like [`volume_args`]: NVMe's deallocate and
/// write-zeroes reach the file as holes.
pub fn nvme_volume_args(id: &str, file: &Path, serial: &str) -> Vec<OsString> {
    let mut drive = OsString::from("file=");
    drive.push(file);
    drive.push(format!(
        ",format=raw,aio=threads,if=none,id={id},cache=writeback,discard=unmap,detect-zeroes=unmap"
    ));
    vec![
        "-drive".into(),
        drive,
        "-device".into(),
        format!("nvme,drive={id},serial={serial}").into(),
    ]
}

/// The whole command line for one guest.
pub struct GuestArgs<'a> {
    pub arch: Arch,
    pub accel: Accel,
    pub memory_mib: u32,
    pub cpus: u32,
    pub kernel: &'a Path,
    pub initrd: Option<&'a Path>,
    pub cmdline: &'a str,
    pub console_log: &'a Path,
    pub qmp_socket: &'a Path,
    pub ssh_port: Option<u16>,
    pub volume: Option<VolumeSource<'a>>,
    pub storage: Storage,
    pub warmup: Option<VolumeSource<'a>>,
    /// The virtual clock's arguments ([`icount_args`]), or none.
    pub icount: Vec<OsString>,
}

pub fn guest_args(g: &GuestArgs<'_>) -> Vec<OsString> {
    let mut a = base_args(g.memory_mib, g.cpus);
    a.extend(machine_args(g.arch, g.accel));
    a.extend(g.icount.iter().cloned());
    a.extend(boot_args(g.kernel, g.initrd, g.cmdline));
    a.extend(console_args(g.console_log));
    a.extend(qmp_args(g.qmp_socket));
    if let Some(p) = g.ssh_port {
        a.extend(net_args(p));
    }
    if let Some(v) = g.volume {
        a.extend(volume_args(v, g.storage));
    }
    if let Some(w) = g.warmup {
        a.extend(warmup_args(w));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(v: &[OsString]) -> String {
        v.iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn machine_per_arch_and_accel() {
        assert_eq!(
            joined(&machine_args(Arch::X86_64, Accel::Tcg)),
            "-machine q35,accel=tcg -cpu max"
        );
        assert_eq!(
            joined(&machine_args(Arch::Arm64, Accel::Tcg)),
            "-machine virt,accel=tcg -cpu max"
        );
        assert!(joined(&machine_args(Arch::X86_64, Accel::Kvm)).contains("-cpu host"));
    }

    #[test]
    fn cmdline_pins_tsc_on_x86_only() {
        let x = kernel_cmdline(Arch::X86_64, Some(2596130), &["lazyinit.net=static".into()]);
        assert_eq!(x, "console=ttyS0 panic=-1 rdinit=/init random.trust_cpu=on no_timer_check tsc_early_khz=2596130 tsc=reliable lazyinit.net=static");
        let a = kernel_cmdline(Arch::Arm64, Some(2596130), &[]);
        assert_eq!(
            a,
            "console=ttyAMA0 panic=-1 rdinit=/init random.trust_cpu=on"
        );
    }

    #[test]
    fn volume_keeps_sparse() {
        let s = joined(&volume_args(
            VolumeSource::File(Path::new("/v/vol.raw")),
            Storage::default(),
        ));
        assert!(s.contains("file=/v/vol.raw,format=raw"));
        assert!(s.contains("discard=unmap") && s.contains("detect-zeroes=unmap"));
        assert!(s.contains("write-zeroes=on"));
        assert!(!s.contains("throttling"));
        let t = joined(&volume_args(
            VolumeSource::File(Path::new("/v")),
            Storage {
                cache: "unsafe",
                throttle: Some(Throttle { iops_total: 500 }),
                latency: None,
                noise: None,
            },
        ));
        assert!(t.contains("cache=unsafe"));
        assert!(t.contains("throttling.iops-total=500"));
        let n = joined(&volume_args(
            VolumeSource::NbdUnix(Path::new("/l/vol.sock")),
            Storage::default(),
        ));
        assert!(n.starts_with(
            "-drive driver=nbd,server.type=unix,server.path=/l/vol.sock,if=none,id=vol0"
        ));
        assert!(n.contains("discard=unmap") && n.contains("detect-zeroes=unmap"));
        assert!(!n.contains("aio=") && n.contains("write-zeroes=on"));
    }

    #[test]
    fn the_virtual_clock_holds_zeroes_in_qemu() {
        let s = joined(&volume_args(
            VolumeSource::ZeroHold {
                file: Path::new("/v/vol.raw"),
                hold_ns: 3_370_000,
                hold_id: "zero-hold",
                noise: None,
            },
            Storage {
                cache: "unsafe",
                ..Default::default()
            },
        ));
        assert_eq!(
            s,
            "-drive driver=zero-hold,hold-id=zero-hold,hold-ns=3370000,io-ns=1000000,file.driver=file,file.filename=/v/vol.raw,file.aio=threads,if=none,id=vol0,cache=unsafe,discard=unmap,detect-zeroes=unmap -device virtio-blk-pci,drive=vol0,discard=on,write-zeroes=on,werror=report,rerror=report,romfile=,ioeventfd=off"
        );
        // Noise on purpose: the filter draws each hold from the seed.
        let noise = Some(lazyinit_core::Noise {
            sd: std::time::Duration::from_micros(100),
            seed: 9,
        });
        let s = joined(&volume_args(
            VolumeSource::ZeroHold {
                file: Path::new("/v/vol.raw"),
                hold_ns: 3_370_000,
                hold_id: "zero-hold",
                noise,
            },
            Storage::default(),
        ));
        assert!(
            s.starts_with(
                "-drive driver=zero-hold,hold-id=zero-hold,hold-ns=3370000,seed=9,io-ns="
            ),
            "{s}"
        );
        let i = joined(&icount_args(0, &["/usr/share/qemu".into()]));
        assert!(
            i.starts_with("-icount shift=0,sleep=off,x-net-pace=1000 "),
            "{i}"
        );
        assert!(i.ends_with(" -L /usr/share/qemu"), "{i}");
    }

    /// On the virtual clock the guest's randomness from QEMU (RDRAND,
    /// RNDR, the device tree's and the boot protocol's seeds) and its
    /// wall clock are fixed, not the host's.
    #[test]
    fn the_virtual_clock_fixes_the_guests_seed_and_wall_clock() {
        let i = joined(&icount_args(3, &[]));
        assert_eq!(
            i,
            "-icount shift=3,sleep=off,x-net-pace=1000 -seed 1 -rtc base=2026-01-01T00:00:00,clock=vm"
        );
    }

    #[test]
    fn nvme_volume_carries_the_serial() {
        let s = joined(&nvme_volume_args(
            "vol1",
            Path::new("/t/vol-0abc.raw"),
            "vol0abc",
        ));
        assert_eq!(
            s,
            "-drive file=/t/vol-0abc.raw,format=raw,aio=threads,if=none,id=vol1,cache=writeback,discard=unmap,detect-zeroes=unmap -device nvme,drive=vol1,serial=vol0abc"
        );
    }

    #[test]
    fn ssh_forward_is_loopback_only() {
        let s = joined(&net_args(2222));
        assert!(s.contains("hostfwd=tcp:127.0.0.1:2222-:22"));
    }

    #[test]
    fn full_command_has_safety_flags() {
        let g = GuestArgs {
            arch: Arch::X86_64,
            accel: Accel::Tcg,
            memory_mib: 512,
            cpus: 1,
            kernel: Path::new("/k/bzImage"),
            initrd: Some(Path::new("/i/initrd")),
            cmdline: "console=ttyS0",
            console_log: Path::new("/l/console.log"),
            qmp_socket: Path::new("/l/qmp.sock"),
            ssh_port: Some(4000),
            volume: None,
            storage: Storage::default(),
            warmup: None,
            icount: Vec::new(),
        };
        let s = joined(&guest_args(&g));
        assert!(s.starts_with("-nodefaults -no-reboot -display none"));
        assert!(s.contains("-kernel /k/bzImage -initrd /i/initrd -append console=ttyS0"));
        assert!(s.contains("-qmp unix:/l/qmp.sock,server=on,wait=off"));
        assert!(s.contains("-serial chardev:con0"));
    }
}
