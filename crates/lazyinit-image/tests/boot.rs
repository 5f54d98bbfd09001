//! Boots each arch's image under QEMU (TCG) with a real kernel through the
//! QEMU provider, logs in with ssh2 against the pinned host key, and runs
//! what the measurement needs. Prints boot-to-SSH-ready per arch.
//!
//! Kernels come from `lazyinit_kernel::build` (Debian 6.1, without the fix,
//! the HZ of the reported instance type): a cache hit once built, a full
//! kernel build otherwise. `LAZYINIT_TEST_SHOW_CONSOLE=1` prints the console
//! tail and the guest's own boot log.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lazyinit_core::provider::{LaunchRequest, Provider};
use lazyinit_core::{Arch, Cell, Hz, KernelSource, Variant};
use lazyinit_image::{initramfs_for_launch, ImageOptions};
use lazyinit_kernel::{BuildOptions, KernelSpec};
use lazyinit_qemu::clock::Clock;
use lazyinit_qemu::{AccelChoice, QemuConfig, QemuProvider};
use lazyinit_ssh::{wait_until_ready, Keys, Session, SshError};

/// HZ of the reported instance types: c5 (x86_64) 250, c6g (arm64) 100.
fn hz(arch: Arch) -> Hz {
    match arch {
        Arch::X86_64 => Hz::new(250).unwrap(),
        Arch::Arm64 => Hz::new(100).unwrap(),
    }
}

/// The kernel image for `arch` and the `uname -r` it reports.
async fn kernel_for(arch: Arch) -> (PathBuf, String) {
    let spec = KernelSpec::new(arch, hz(arch), Variant::NoFix);
    let k = lazyinit_kernel::build(&spec, &BuildOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{arch} kernel: {e}"));
    (k.image, k.manifest.kernel_release)
}

fn ssh(s: &Session, cmd: &str) -> String {
    s.exec_checked(cmd)
        .unwrap_or_else(|e| panic!("`{cmd}`: {e}"))
        .stdout
}

/// A guest of `arch` launched and answering SSH: its machine, session,
/// keys, `uname -r`, and the time from launch to ready.
struct Started {
    machine: Box<dyn lazyinit_core::provider::Machine>,
    session: Session,
    keys: Keys,
    release: String,
    ep: lazyinit_core::provider::Endpoint,
    boot_to_ssh: Duration,
}

async fn start(arch: Arch, net: &str, clock: Clock, dir: &std::path::Path) -> Started {
    // Fresh keys: SSH can only work if the launch-time keys archive was unpacked.
    let keys = Keys::load_or_create(&dir.join("state")).unwrap();
    let image = lazyinit_image::build(arch, &ImageOptions::default())
        .await
        .unwrap();
    let initramfs = initramfs_for_launch(&image, &keys, &dir.join("launch")).unwrap();
    let (kernel_image, release) = kernel_for(arch).await;

    let provider = QemuProvider::new(QemuConfig {
        accel: AccelChoice::Tcg,
        volume_dir: Some(dir.join("volumes")),
        clock,
        ..QemuConfig::default()
    });
    let cell = Cell {
        provider: "qemu".into(),
        axes: lazyinit_core::Axes::new(
            arch,
            KernelSource::Debian61,
            hz(arch),
            Variant::NoFix,
            "1GiB".parse().unwrap(),
        ),
        repetition: 1,
    };
    let req = LaunchRequest {
        run_id: "image-boot-test".into(),
        cell,
        kernel_image,
        kernel_release: release.clone(),
        initramfs,
        folder: lazyinit_core::RunWriter::claim(&lazyinit_core::RunFolder::new(dir))
            .unwrap()
            .cell("log"),
        // dropbear blocks until the kernel's RNG is seeded; under TCG the
        // jitter-entropy fallback takes ~5 s, the CPU's RDRAND/RNDR none.
        extra_cmdline: vec!["random.trust_cpu=on".into(), format!("lazyinit.net={net}")],
        storage_profile: lazyinit_core::StorageProfile::None,
    };
    // The virtual clock's QEMU (the project's build), found or built.
    provider
        .prepare(std::slice::from_ref(&req.cell))
        .await
        .unwrap();
    let started = Instant::now();
    let mut machine = provider.launch(&req).await.unwrap();
    let ep = machine.endpoint();
    eprintln!(
        "{arch}: launch returned after {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let ready = tokio::task::block_in_place(|| {
        wait_until_ready(
            &ep.host,
            ep.port,
            &ep.user,
            &keys,
            Instant::now() + Duration::from_secs(180),
            || machine.is_alive(),
        )
    });
    let session = match ready {
        Ok(s) => s,
        Err(e) => {
            let tail = machine.console_tail(40);
            let _ = machine.teardown().await;
            panic!("{arch}: {e}\n--- console ---\n{tail}")
        }
    };
    Started {
        boot_to_ssh: started.elapsed(),
        machine,
        session,
        keys,
        release,
        ep,
    }
}

async fn boot(arch: Arch, net: &str) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let Started {
        mut machine,
        session,
        keys,
        release,
        ep,
        boot_to_ssh,
    } = start(arch, net, Clock::Real, dir.path()).await;
    if std::env::var_os("LAZYINIT_TEST_SHOW_CONSOLE").is_some() {
        eprintln!("{}", machine.console_tail(15));
        let o = session
            .exec("cat /proc/uptime /var/log/lazyinit.log; dmesg | grep -i -e crng -e random")
            .unwrap();
        eprintln!("{}", o.stdout);
    }

    tokio::task::block_in_place(|| {
        let uname = ssh(&session, "uname -r");
        assert_eq!(uname.trim(), release);
        assert_eq!(ssh(&session, "uname -m").trim(), arch.uname_machine());
        let v = session.exec("mkfs.ext4 -V").unwrap();
        assert_eq!(v.status, 0, "{v:?}");
        assert!(v.stderr.contains("mke2fs 1.47"), "{v:?}");
        // The measurement's tools on the real volume, as the guest protocol uses them.
        let lazyinit_core::provider::VolumeDevice::Path(dev) = &ep.volume_device else {
            panic!(
                "a QEMU guest's volume is a fixed node: {:?}",
                ep.volume_device
            );
        };
        ssh(&session, &format!("mkfs.ext4 -q -F {dev}"));
        let header = ssh(&session, &format!("dumpe2fs -h {dev} 2>/dev/null"));
        assert!(
            header.contains("Inode size:") && header.contains("256"),
            "{header}"
        );
        ssh(
            &session,
            &format!("mkdir -p /mnt/v && mount -t ext4 {dev} /mnt/v && umount /mnt/v"),
        );
        assert!(ssh(&session, "ps").contains("[kthreadd]"));
        let config = ssh(&session, "zcat /proc/config.gz");
        assert!(config.contains(&format!("CONFIG_HZ={}\n", hz(arch))), "HZ");
        assert!(ssh(&session, "ls /sys/kernel/tracing").contains("trace"));
        assert_eq!(session.exec("exit 7").unwrap().status, 7);
        // /init stays PID 1 and reaps orphans: three exited orphans leave no zombie.
        assert!(ssh(&session, "tr '\\0' ' ' < /proc/1/cmdline").contains("/init"));
        let zombies = ssh(
            &session,
            "for i in 1 2 3; do (sleep 0.2 &); done; sleep 1.5; cat /proc/[0-9]*/stat | awk '$3 == \"Z\"' | wc -l",
        );
        assert_eq!(zombies.trim(), "0");
        // QEMU's user network hands out the same address by DHCP as the static default.
        let log = ssh(&session, "cat /var/log/lazyinit.log");
        assert!(log.contains(&format!("net={net}")), "{log}");
        assert!(log.contains("network eth0: 10.0.2.15/24"), "{log}");
        if net == "dhcp" {
            assert!(ssh(&session, "cat /etc/resolv.conf").contains("nameserver 10.0.2.3"));
            assert!(ssh(&session, "ip route").contains("default via 10.0.2.2"));
        }

        // A guest with another host key than the pin is refused.
        let stranger = Keys::load_or_create(&dir.path().join("stranger")).unwrap();
        match Session::connect(
            &ep.host,
            ep.port,
            &ep.user,
            &stranger,
            Duration::from_secs(30),
        ) {
            Err(SshError::HostKeyMismatch { expected, seen, .. }) => {
                assert_eq!(expected, stranger.host_public.fingerprint());
                assert_eq!(seen, keys.host_public.fingerprint());
            }
            other => panic!("expected a host key mismatch, got {other:?}"),
        }
    });
    assert!(machine.console_tail(200).contains("lazyinit: ssh ready"));
    machine.teardown().await.unwrap();
    assert!(!machine.is_alive());
    boot_to_ssh
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x86_64_guest_boots_and_answers_ssh() {
    let t = boot(Arch::X86_64, "static").await;
    eprintln!(
        "x86_64: boot-to-SSH-ready {:.2} s under TCG",
        t.as_secs_f64()
    );
}

/// The EC2 path's network setup (udhcpc and our event script), against
/// the DHCP server of QEMU's user network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x86_64_guest_configures_its_network_by_dhcp() {
    let t = boot(Arch::X86_64, "dhcp").await;
    eprintln!(
        "x86_64 (dhcp): boot-to-SSH-ready {:.2} s under TCG",
        t.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arm64_guest_boots_and_answers_ssh() {
    let t = boot(Arch::Arm64, "static").await;
    eprintln!(
        "arm64: boot-to-SSH-ready {:.2} s under TCG",
        t.as_secs_f64()
    );
}

/// The guest's uptime in seconds (10 ms steps).
fn uptime(s: &Session) -> f64 {
    let up = ssh(s, "cat /proc/uptime");
    up.split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("/proc/uptime: {up:?}"))
}

/// On the virtual clock an idle guest's time jumps to its next timer,
/// except while the guest and the host converse (QEMU patch 0004,
/// `x-net-pace`): a guest waiting for the host's next command lives the
/// host's time, not a race through its timers (a tickless guest's SSH
/// server once timed out the harness's key exchange within a tenth of a
/// second of the host's time). Two commands half a second of the host's
/// time apart: the guest's uptime moves by no more than the host's time
/// around both commands (50 ms allowed for the guest's own instructions,
/// counted at 1 ns each), and by at least half of the half second. Not all
/// of it: a paced wait ends at its timer's deadline, not when the host got
/// round to it, so the host's lateness is not the guest's (x86_64 lived
/// 0.48 s of the 0.5). Without the pace the x86_64 guest lived 12.78 s in
/// 0.59 s of the host's, and the arm64 one never answered SSH.
async fn converses_at_the_hosts_pace(arch: Arch) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(arch, "static", Clock::Virtual { shift: 0 }, dir.path()).await;
    let (guest, host) = tokio::task::block_in_place(|| {
        let h0 = Instant::now();
        let g0 = uptime(&s.session);
        std::thread::sleep(Duration::from_millis(500));
        let g1 = uptime(&s.session);
        (g1 - g0, h0.elapsed().as_secs_f64())
    });
    s.machine.teardown().await.unwrap();
    eprintln!("{arch}: the guest lived {guest:.2} s while the host lived {host:.2} s");
    assert!(
        guest >= 0.25 && guest <= host + 0.05,
        "{arch}: the guest's clock moved {guest:.2} s in {host:.2} s of the host's, half a second of it waiting for the host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arm64_guest_on_the_virtual_clock_lives_the_hosts_time_while_they_converse() {
    converses_at_the_hosts_pace(Arch::Arm64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x86_64_guest_on_the_virtual_clock_lives_the_hosts_time_while_they_converse() {
    converses_at_the_hosts_pace(Arch::X86_64).await;
}
