//! The first knob end to end (issue 53 item 3), on the virtual clock
//! (docs/virtual-clock.md: exact, so the figures are asserted, not
//! bounded): one spec sweeps mkfs's inode size, `[knobs]` then
//! `inode-size = [128, 256]`, over x86_64 at HZ=250 with and without the
//! fix, `ebs`. The knob reaches the guest (its mkfs gets `-I 128`) and
//! changes the measurement as the model says: the 1 MiB tables of 128-byte
//! inodes are zeroed at half the 2 MiB tables' time (`ebs` takes a
//! zeroing as a rate), so with the fix z1 is 1.8 ms and L=4 (20 ms a
//! group) against 3.4 ms and L=8 (36 ms); without it L=10 at both. The
//! texts that name and pair cells come from the key's table: four cell
//! ids, each row's `inode_size`, two KCIDB tests a metric for one build,
//! and nofix/fix ratios only at one inode size.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lazyinit_core::results::{read_rows, ResultRow, Status};
use lazyinit_core::testing::output_text as text;
use serde_json::Value;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lazyinit-bench"))
}

const SPEC: &str = r#"name = "inode-sweep"
arches = ["x86_64"]
hz = [250]
variants = ["fix", "nofix"]
sizes = ["8GiB"]

[knobs]
inode-size = [128, 256]

[provider-config.qemu]
clock = "virtual"
"#;

fn lazyinit(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

/// The report of `csv` in `format` (json or kcidb), parsed.
fn report(csv: &Path, format: &str) -> Value {
    let csv = csv.to_str().unwrap();
    let mut args = vec!["report", "--format", format, csv];
    if format == "kcidb" {
        args.extend(["--origin", "knob_e2e"]);
    }
    let o = lazyinit(&args);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The row of `variant` at inode size `n`.
fn at<'a>(rows: &'a [ResultRow], variant: &str, n: u32) -> &'a ResultRow {
    rows.iter()
        .find(|r| r.axes.variant.to_string() == variant && r.axes.knobs.inode_size.0 == n)
        .unwrap_or_else(|| panic!("no {variant} row at inode size {n}"))
}

/// Four cells, four ids; each row's column and mkfs; z1, L and the cycle
/// at each inode size as the model says.
fn check_rows(out: &Path) -> Vec<ResultRow> {
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert!(csv
        .lines()
        .next()
        .unwrap()
        .ends_with(",harness_commit,inode_size"));
    let rows = read_rows(out.join("results.csv")).unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    for r in &rows {
        assert_eq!(r.status, Status::Ok, "{}: {}", r.cell_id, r.error);
    }
    let mut ids: Vec<&str> = rows.iter().map(|r| r.cell_id.as_str()).collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            "qemu-x86_64-debian-6.1-hz250-fix-8GiB-inode128-r1",
            "qemu-x86_64-debian-6.1-hz250-fix-8GiB-r1",
            "qemu-x86_64-debian-6.1-hz250-nofix-8GiB-inode128-r1",
            "qemu-x86_64-debian-6.1-hz250-nofix-8GiB-r1",
        ]
    );
    for (n, mkfs, z1, l, cycle) in [
        (128, "mkfs.ext4 -F -q -I 128 /dev/vda", 1.8, 4, 20.0),
        (256, "mkfs.ext4 -F -q /dev/vda", 3.4, 8, 36.0),
    ] {
        let fix = at(&rows, "fix", n);
        let nofix = at(&rows, "nofix", n);
        for r in [fix, nofix] {
            assert_eq!(r.measured.mkfs_cmd, mkfs, "{}", r.cell_id);
            assert_eq!(r.measured.z1_target_ms, Some(z1), "{}", r.cell_id);
            let got = r.measured.z1_ms.unwrap();
            assert!((got - z1).abs() < 0.005, "{}: z1 {got} ms", r.cell_id);
            assert_eq!(r.measured.profile_held, Some(true), "{}", r.cell_id);
        }
        assert_eq!(fix.measured.sleep_ticks, Some(l), "{} L", fix.cell_id);
        let ms = fix.measured.ms_per_group.unwrap();
        assert!((ms - cycle).abs() < 0.1, "{}: {ms} ms a group", fix.cell_id);
        assert_eq!(nofix.measured.sleep_ticks, Some(10), "{}", nofix.cell_id);
        eprintln!(
            "inode size {n}: fix z1 {:.4} ms L={l} {ms:.3} ms/group; nofix z1 {:.4} ms L=10 {:.3} ms/group",
            fix.measured.z1_ms.unwrap(),
            nofix.measured.z1_ms.unwrap(),
            nofix.measured.ms_per_group.unwrap()
        );
    }
    rows
}

/// Two KCIDB tests a metric for each build, one per inode size, the knob
/// in the path and misc of the one off its default.
fn check_kcidb(csv: &Path) {
    let k = report(csv, "kcidb");
    let tests = k["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 12, "4 cells x 3 metrics");
    for build in k["builds"].as_array().unwrap() {
        let id = build["id"].as_str().unwrap();
        let mut paths: Vec<(&str, Option<u64>)> = tests
            .iter()
            .filter(|t| t["build_id"] == id && t["path"].as_str().unwrap().ends_with(".lazyinit_s"))
            .map(|t| {
                (
                    t["path"].as_str().unwrap(),
                    t["misc"]["inode_size"].as_u64(),
                )
            })
            .collect();
        paths.sort();
        assert_eq!(
            paths,
            [
                ("ext4.lazyinit.8GiB-inode128.lazyinit_s", Some(128)),
                ("ext4.lazyinit.8GiB.lazyinit_s", None)
            ],
            "{id}"
        );
    }
}

/// The report's cells at each inode size with the model's L, and the
/// nofix/fix ratios: one per inode size, its two cells at that size.
fn check_report(csv: &Path) {
    let r = report(csv, "json");
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    for c in cells {
        assert_eq!(c["model"]["sleep_ticks"], c["sleep_ticks"][0], "{c}");
    }
    let ratios: Vec<&Value> = r["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["kind"] == "nofix_over_fix")
        .collect();
    assert_eq!(ratios.len(), 2, "{ratios:?}");
    let mut sizes = Vec::new();
    for x in &ratios {
        let (num, den) = (&x["numerator"], &x["denominator"]);
        assert_eq!(
            (num["variant"].as_str(), den["variant"].as_str()),
            (Some("nofix"), Some("fix"))
        );
        assert_eq!(num["inode_size"], den["inode_size"], "{x}");
        sizes.push(num["inode_size"].as_u64());
    }
    sizes.sort();
    assert_eq!(sizes, [None, Some(128)]);
    let all = r["ratios"].as_array().unwrap();
    assert_eq!(all.len(), 2, "no other ratio in one arch and HZ: {all:?}");
}

#[test]
fn two_inode_sizes_in_one_run_are_two_cells_measured_as_the_model_says() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("inode.toml");
    std::fs::write(&spec, SPEC).unwrap();
    let out = tmp.path().join("out");
    let o = lazyinit(&[
        "run",
        spec.to_str().unwrap(),
        "--no-report",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    check_rows(&out);
    let csv = out.join("results.csv");
    check_kcidb(&csv);
    check_report(&csv);
}

/// A value the knob's rule refuses is one line at spec read, exit 2.
#[test]
fn an_inode_size_not_a_power_of_two_is_refused_at_spec_read() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("bad.toml");
    std::fs::write(&spec, SPEC.replace("[128, 256]", "[128, 200]")).unwrap();
    let o = lazyinit(&["plan", spec.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("knobs.inode-size: 200 is not a power of two; use a power of two from 128 to 1024 (default 256)"),
        "{err}"
    );
}
