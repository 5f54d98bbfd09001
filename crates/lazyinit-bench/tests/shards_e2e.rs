//! Shards on real components: the quick spec as two shards run at once
//! into two folders (real kernels from the cache, QEMU guests, the guest
//! protocol), merged into one run that `report` and the KCIDB export read
//! as one; shards of another spec and a missing shard refused by the real
//! binary. The fast checks of the same are on the fake provider
//! (crates/lazyinit-orchestrator/tests/shards_fake.rs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lazyinit_core::results::{read_rows, Status};

mod kcidb_support;

/// The binary under test; `LAZYINIT_BENCH_BIN` names another build of the
/// same tree (a target folder that other trees write into too).
fn bin() -> PathBuf {
    std::env::var_os("LAZYINIT_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lazyinit-bench")))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The quick preset with its volumes in `vols` (sparse, removed with it).
fn quick_spec(dir: &Path, vols: &Path) -> PathBuf {
    let spec = dir.join("quick.toml");
    let mut t: toml::Table = include_str!("../../../specs/quick.toml").parse().unwrap();
    let qemu = t
        .entry("provider-config")
        .or_insert_with(|| toml::Table::new().into())
        .as_table_mut()
        .unwrap()
        .entry("qemu")
        .or_insert_with(|| toml::Table::new().into())
        .as_table_mut()
        .unwrap();
    qemu.insert("volume-dir".into(), vols.display().to_string().into());
    std::fs::write(&spec, toml::to_string(&t).unwrap()).unwrap();
    spec
}

fn merge(args: &[&Path], out: &Path) -> Output {
    Command::new(bin())
        .arg("merge")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn quick_as_two_shards_at_once_merges_into_the_plans_four_cells() {
    let tmp = tempfile::tempdir().unwrap();
    let vols = tempfile::tempdir().unwrap();
    let spec = quick_spec(tmp.path(), vols.path());
    let (a, b) = (tmp.path().join("shard-1"), tmp.path().join("shard-2"));
    // Shard 1 named on the command line, shard 2 from GitLab's variables.
    let s1 = Command::new(bin())
        .args([
            "run",
            spec.to_str().unwrap(),
            "--no-report",
            "--shard",
            "1/2",
            "--out",
        ])
        .arg(&a)
        .spawn()
        .unwrap();
    let s2 = Command::new(bin())
        .args([
            "run",
            spec.to_str().unwrap(),
            "--no-report",
            "--shard",
            "auto",
            "--out",
        ])
        .arg(&b)
        .env("CI_NODE_INDEX", "2")
        .env("CI_NODE_TOTAL", "2")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o2 = s2.wait_with_output().unwrap();
    let o1 = s1.wait_with_output().unwrap();
    assert!(
        o1.status.success() && o2.status.success(),
        "{}",
        stderr(&o2)
    );
    assert!(
        stderr(&o2).contains("shard 2/2 (--shard auto: CI_NODE_INDEX=2 (from 1) and CI_NODE_TOTAL=2: GitLab `parallel:`): 2 of the plan's 4 cells"),
        "{}",
        stderr(&o2)
    );

    let out = tmp.path().join("merged");
    let m = merge(&[&a, &b], &out);
    assert!(m.status.success(), "{}", stderr(&m));
    let rows = read_rows(out.join("results.csv")).unwrap();
    let plan = Command::new(bin())
        .args(["plan", spec.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let mut want: Vec<String> = plan["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    let mut got: Vec<String> = rows.iter().map(|r| r.cell_id.clone()).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "the plan's 4 cells, each once");
    for r in &rows {
        assert_eq!(r.status, Status::Ok, "{}: {}", r.cell_id, r.error);
        assert_eq!(r.run_id, plan["run_id"].as_str().unwrap());
        assert!(["1/2", "2/2"].contains(&r.shard.as_str()), "{}", r.shard);
        assert!(!r.host.is_empty());
        assert_eq!(r.measured.traced_groups, r.measured.groups, "{}", r.cell_id);
        assert!(
            out.join(&r.cell_id).join("groups.csv").is_file(),
            "{}",
            r.cell_id
        );
        assert!(
            out.join(&r.cell_id).join("console.log").is_file(),
            "{}",
            r.cell_id
        );
    }
    // Figures like an unsharded run's. The quick spec's clock is `auto`:
    // under TCG the virtual clock, where every cell is exact (the sleep
    // the kernel's formula gives for the profile's first zeroing, L + 1
    // ticks a group); under KVM the real clock, where without the fix the
    // kernel sleeps k W ticks, k the ticks of the first zeroing that
    // crossed one (1 where the host held it; a slow CI host's 2-tick
    // zeroing slept 20), its cycle bounded around that.
    for r in &rows {
        let accel = &r.testbed.accel;
        assert!(
            accel.is_virtual_clock() || *accel == lazyinit_core::Accel::Kvm,
            "{}: accel {accel}: clock auto gives the virtual clock wherever TCG runs",
            r.cell_id,
        );
        if accel.is_virtual_clock() {
            lazyinit_core::testing::check_virtual_exact(
                &r.measured,
                r.axes.hz.get(),
                u64::from(r.axes.wait_mult),
                r.axes.variant == lazyinit_core::Variant::Fix,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", r.cell_id));
        }
    }
    for r in rows.iter().filter(|r| {
        !r.testbed.accel.is_virtual_clock() && r.axes.variant == lazyinit_core::Variant::NoFix
    }) {
        let zeroings = lazyinit_report::input::cell_groups(
            &lazyinit_core::RunFolder::new(&out).cell(&r.cell_id),
        )
        .unwrap()
        .expect("groups.csv")
        .zeroings_ms();
        lazyinit_core::testing::check_nofix_cycle(
            &r.measured,
            r.axes.hz.get(),
            u64::from(r.axes.wait_mult),
            &zeroings,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", r.cell_id));
    }
    // `report` and the KCIDB export read the merged folder as one run.
    let rep = Command::new(bin())
        .args(["report"])
        .arg(out.join("results.csv"))
        .output()
        .unwrap();
    assert!(rep.status.success(), "{}", stderr(&rep));
    let table = String::from_utf8_lossy(&rep.stdout);
    for arch in ["x86_64", "arm64"] {
        assert!(table.contains(arch), "{table}");
    }
    let v = kcidb_support::export_valid(&bin(), &out.join("results.csv"), &[]);
    let tests = v["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 4 * 3, "3 tests per cell, 4 cells: {v}");
    assert!(tests.iter().all(|t| t["status"] == "DONE"), "{v}");
    assert_eq!(
        v["builds"].as_array().map(Vec::len),
        Some(4),
        "one build per kernel: {v}"
    );

    // A missing shard is named, with its cells; nothing is written.
    let alone = tmp.path().join("alone");
    let m = merge(&[&a], &alone);
    assert_eq!(m.status.code(), Some(2), "{}", stderr(&m));
    assert!(
        stderr(&m).contains("shard 2/2 (not given: "),
        "{}",
        stderr(&m)
    );
    assert!(!alone.exists());

    // A shard of another spec (quick with 2 repetitions: shard 9/9 has no
    // cells, so it runs at once) is refused, both named.
    let other = tmp.path().join("other");
    let o = Command::new(bin())
        .args([
            "run",
            spec.to_str().unwrap(),
            "--repetitions",
            "2",
            "--shard",
            "9/9",
            "--out",
        ])
        .arg(&other)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let m = merge(&[&a, &other], &alone);
    assert_eq!(m.status.code(), Some(2), "{}", stderr(&m));
    let e = stderr(&m);
    assert!(
        e.contains("ran spec quick-") && e.contains("merge the shards of one spec"),
        "{e}"
    );
    assert!(!alone.exists());
}
