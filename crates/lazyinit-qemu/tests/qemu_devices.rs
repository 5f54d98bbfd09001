//! The virtual clock's QEMU is built with the guests' devices only (patch
//! 0003, `--without-default-devices`): the boards must still be the boards
//! every published virtual-clock figure was measured on. Each arch's QEMU
//! is started, paused before its first instruction (`-S`), with the
//! harness's own command line (machine, icount, network, the volume and the
//! warm-up disk through the zero-hold filter, and the twin's NVMe), and its
//! device tree (`info qtree`: every bus and device, in order, with ids) is
//! compared with the one QEMU's default devices gave
//! (`tests/fixtures/qtree-<arch>.txt`, recorded from the build of key
//! baa51c5dd6b6dbc8). A device the trimmed build lacks (an HPET, a vmport)
//! or gains is a difference here, named with the line.
//!
//! `LAZYINIT_QTREE_FROM=DIR` runs a QEMU of DIR instead of the cache's, and
//! `LAZYINIT_QTREE_BLESS=1` writes the fixtures from it (how they were made).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lazyinit_core::Arch;
use lazyinit_qemu::args::{
    base_args, icount_args, machine_args, net_args, nvme_volume_args, qmp_args, volume_args,
    warmup_args, Accel, Storage, VolumeSource,
};
use lazyinit_qemu::qmp::call_blocking;

fn qemu_of(arch: Arch) -> PathBuf {
    if let Some(dir) = std::env::var_os("LAZYINIT_QTREE_FROM") {
        return lazyinit_kernel::emulator::VirtualQemu {
            dir: dir.into(),
            key: "given".into(),
        }
        .binary(arch);
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let q = rt
        .block_on(lazyinit_kernel::emulator::ensure(
            &lazyinit_core::paths::cache_dir(),
            None,
        ))
        .expect("the virtual clock's QEMU (scripts/ci-kernels.sh builds it)");
    q.binary(arch)
}

/// The harness's command line for one guest, paused, with no kernel.
fn command_line(arch: Arch, dir: &Path, qmp: &Path) -> Vec<OsString> {
    let vol = dir.join("vol.raw");
    let warm = dir.join("warm.raw");
    let nvme = dir.join("nvme.raw");
    for f in [&vol, &warm, &nvme] {
        std::fs::File::create(f).unwrap().set_len(1 << 30).unwrap();
    }
    let hold = |file, hold_id| VolumeSource::ZeroHold {
        file,
        hold_ns: 3_400_000,
        hold_id,
        noise: None,
    };
    let data_dirs = lazyinit_kernel::emulator::VirtualQemu::data_dirs();
    let mut a = base_args(1024, 1);
    a.extend(machine_args(arch, Accel::Tcg));
    a.extend(icount_args(0, &data_dirs));
    a.extend(qmp_args(qmp));
    // Port 0: the host picks a free one (no race with other tests).
    a.extend(net_args(0));
    a.extend(volume_args(hold(&vol, "zero-hold"), Storage::default()));
    a.extend(warmup_args(hold(&warm, "warm-hold")));
    a.extend(nvme_volume_args("vol1", &nvme, "vol0abc"));
    a.push("-S".into());
    a
}

/// `info qtree`'s buses and devices (no properties), in order.
fn qtree(arch: Arch) -> String {
    let dir = tempfile::tempdir().unwrap();
    let qmp = dir.path().join("qmp.sock");
    let mut child = Command::new(qemu_of(arch))
        .args(command_line(arch, dir.path(), &qmp))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting QEMU");
    // QEMU answers QMP once it has set the machine up (paused).
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = serde_json::json!({"execute": "query-status"});
    while let Err(e) = call_blocking(&qmp, &status) {
        if Instant::now() >= deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "QEMU's QMP socket: {e}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let tree = call_blocking(
        &qmp,
        &serde_json::json!({"execute": "human-monitor-command", "arguments": {"command-line": "info qtree"}}),
    )
    .expect("info qtree");
    call_blocking(&qmp, &serde_json::json!({"execute": "quit"})).expect("quit");
    child.wait().unwrap();
    let text = tree.as_str().expect("info qtree's text");
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("bus: ") || t.starts_with("dev: ")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

fn check(arch: Arch, name: &str) {
    let got = qtree(arch);
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("qtree-{name}.txt"));
    if std::env::var_os("LAZYINIT_QTREE_BLESS").is_some() {
        std::fs::write(&fixture, &got).unwrap();
    }
    let want = std::fs::read_to_string(&fixture).unwrap();
    assert!(
        want.lines().any(|l| l.contains("dev: virtio-blk-pci")),
        "{} lists no virtio-blk-pci: not a guest's tree",
        fixture.display()
    );
    let (w, g): (Vec<_>, Vec<_>) = (want.lines().collect(), got.lines().collect());
    let missing: Vec<_> = w.iter().filter(|l| !g.contains(l)).collect();
    let extra: Vec<_> = g.iter().filter(|l| !w.contains(l)).collect();
    assert_eq!(
        got, want,
        "{name}'s board differs from the default devices' build: missing {missing:?}, extra {extra:?}"
    );
}

#[test]
fn the_x86_64_board_is_the_default_builds() {
    check(Arch::X86_64, "x86_64");
}

#[test]
fn the_arm64_board_is_the_default_builds() {
    check(Arch::Arm64, "aarch64");
}
