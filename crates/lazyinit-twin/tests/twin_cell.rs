//! One cell per arch on the twin, from launch to CSV row, through the real
//! EC2 provider: moto runs the instance, a local QEMU guest plays it (c5:
//! x86_64, c6g: arm64), the provider uploads the cloud-profile kernel under
//! test and the initramfs, kexecs, reconnects with the run's pinned key,
//! finds the volume by its NVMe serial in sysfs, runs the guest protocol,
//! and tears instance and volume down through the API.
//!
//! Both variants of both arches: a cloud kernel's build slot is seeded from
//! the QEMU profile's of the same arch and HZ, so the first costs the
//! profile's configuration delta and the other variant a variant switch,
//! not a cold build.

mod common;

use common::*;
use lazyinit_core::events::Phase;
use lazyinit_core::results::{is_twin, Status};
use lazyinit_core::{Arch, RunFolder, Variant};
use lazyinit_twin::Happening;

async fn cell_on_twin(arch: Arch, hz: u32, variant: Variant, instance_type: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let twin = twin(tmp.path(), &[arch]).await;
    let out = tmp.path().join("results");
    let name = format!("twin-{}", instance_type.replace('.', "-"));
    let h = twin.harness(
        &out,
        &spec(&name, arch, hz, &variant.to_string(), "64GiB", 1),
        "3h",
    );
    let (r, timeline) = run(&h, |_| {}).await;
    let consoles = twin.controller.consoles();
    let o = r.unwrap_or_else(|e| panic!("harness: {e:#}\n{consoles}"));
    let t = timeline.lock().unwrap().clone();

    // The row: ec2, the instance type, a twin, the cloud kernel under test.
    assert_eq!(o.rows.len(), 1, "{:?}", o.rows);
    let row = &o.rows[0];
    assert_eq!(row.status, Status::Ok, "{}\n{consoles}", row.error);
    assert_eq!(row.testbed.provider, "ec2");
    assert_eq!(row.testbed.machine, instance_type);
    assert_eq!(row.testbed.accel, "twin-tcg");
    assert!(is_twin(&row.testbed.accel));
    assert_eq!(row.axes.arch, arch);
    assert_eq!(row.axes.hz.get(), hz);
    assert_eq!(row.axes.variant, variant);
    assert!(
        row.kernel_release
            .ends_with(&format!("-lazyinit-hz{hz}-{variant}")),
        "{}",
        row.kernel_release
    );
    assert_eq!(row.axes.volume.0, 64 << 30);
    assert_eq!(row.measured.groups, Some(512));
    assert_eq!(row.measured.traced_groups, Some(512));
    assert!(row.measured.lazyinit_s.unwrap() > 0.0);
    assert!(
        !row.measured.clocksource.contains("jiffies"),
        "{}",
        row.measured.clocksource
    );
    // The data volume, found by serial: nvme0 is the root volume (probed
    // first, as on Nitro), the measured one is nvme1. The stand-in kernel
    // has no NVMe driver, so this is the kexec'd cloud kernel's doing.
    assert!(
        row.measured.mkfs_cmd.ends_with(" /dev/nvme1n1"),
        "mkfs ran on {}",
        row.measured.mkfs_cmd
    );
    assert!(o.summary.leaks.is_empty(), "{:?}", o.summary.leaks);
    assert_eq!(o.summary.exit_code(false), 0);

    // The guest: the stand-in booted, then the kernel under test, which
    // carries the expiry; its console is the one the stand-in had.
    let rec: serde_json::Value = serde_json::from_str(
        &RunFolder::new(&out)
            .cell(&row.cell_id)
            .ec2_json()
            .read_to_string()
            .unwrap(),
    )
    .unwrap();
    let iid = rec["instance_id"].as_str().unwrap();
    let console = twin.controller.console(iid);
    assert_eq!(console.matches("Linux version").count(), 2, "{console}");
    assert!(console.contains(&row.kernel_release), "{console}");
    assert!(
        console.contains(&format!(
            "lazyinit: expires at {}",
            rec["expires_at_unix"].as_i64().unwrap()
        )),
        "{console}"
    );
    let ev = twin.controller.events_of(iid);
    assert!(
        matches!(&ev[0].what, Happening::Started { volumes, .. } if volumes.len() == 2
            && volumes[1] == rec["volume_id"].as_str().unwrap()),
        "{ev:?}"
    );

    // API calls per cell: at the emulator's door, and by the SDK.
    let api = twin.api.counts();
    println!("API calls (emulator side): {}", counts(&api));
    println!("API calls (SDK): {}", o.sdk_calls);
    for op in [
        "RunInstances",
        "CreateVolume",
        "AttachVolume",
        "TerminateInstances",
    ] {
        assert_eq!(api.get(op), Some(&1), "{op}: {}", counts(&api));
    }
    assert_eq!(
        api.values().sum::<u64>(),
        o.sdk_calls.total_calls(),
        "every SDK call reached the emulator once"
    );

    // Wall time by phase.
    type Is<'a> = &'a dyn Fn(&lazyinit_core::events::Event) -> bool;
    let s = |a: Is, b: Is| span(&t, a, b).map_or("-".into(), |x| format!("{x:.1}"));
    println!(
        "phases of {} (s): launch {} | SSH ready {} | upload {} | kexec to reconnect {} | verify+find volume {} | mkfs {} | mount to lazy-init {} | lazy-init {} | collect {} | teardown {} | total {}",
        row.cell_id,
        s(&phase(Phase::Launch), &phase(Phase::Boot)),
        s(&phase(Phase::Boot), &note("installing the kernel")),
        s(&note("installing the kernel"), &note("kexec: uploaded")),
        s(&note("kexec: jumping"), &note("kexec: 6.")),
        s(&note("kexec: 6."), &phase(Phase::Mkfs)),
        s(&phase(Phase::Mkfs), &phase(Phase::Mount)),
        s(&phase(Phase::Mount), &phase(Phase::Lazyinit)),
        s(&phase(Phase::Lazyinit), &phase(Phase::Collect)),
        s(&phase(Phase::Collect), &phase(Phase::Teardown)),
        s(&phase(Phase::Teardown), &finished),
        s(&phase(Phase::Launch), &finished),
    );
    println!(
        "row: status={} machine={} accel={} kernel={} hz={} variant={} groups={:?} lazyinit_s={:?} ms_per_group={:?} sleep_ticks={:?} z1_ms={:?} mkfs_s={:?} boot_s={:?} clocksource={} mkfs_cmd={}",
        row.status, row.testbed.machine, row.testbed.accel, row.kernel_release, row.axes.hz, row.axes.variant, row.measured.groups,
        row.measured.lazyinit_s, row.measured.ms_per_group, row.measured.sleep_ticks, row.measured.z1_ms, row.measured.mkfs_s, row.boot_s,
        row.measured.clocksource, row.measured.mkfs_cmd
    );
    nothing_left(&twin, tmp.path()).await;
    let ev = twin.controller.events_of(iid);
    assert!(
        ev.iter()
            .any(|e| matches!(&e.what, Happening::Stopped { instance_state } if instance_state.contains("terminated"))),
        "the guest went with the instance: {ev:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c5_x86_64_cell_runs_from_launch_to_row() {
    cell_on_twin(Arch::X86_64, 250, Variant::NoFix, "c5.2xlarge").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c6g_arm64_cell_runs_from_launch_to_row() {
    cell_on_twin(Arch::Arm64, 100, Variant::Fix, "c6g.2xlarge").await;
}

// The other variant of each arch: both variants of both arches boot on the
// twin.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c5_x86_64_fix_cell_runs_from_launch_to_row() {
    cell_on_twin(Arch::X86_64, 250, Variant::Fix, "c5.2xlarge").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c6g_arm64_nofix_cell_runs_from_launch_to_row() {
    cell_on_twin(Arch::Arm64, 100, Variant::NoFix, "c6g.2xlarge").await;
}
