//! The report on fixed CSV fixtures that look like real runs: snapshots of
//! every format, and the properties the snapshots rely on.

use std::path::{Path, PathBuf};

use lazyinit_report::input::{load, load_cycles};
use lazyinit_report::render::{csv, json, markdown};
use lazyinit_report::{build, Metric};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

fn rows(rel: &str) -> Vec<lazyinit_core::results::ResultRow> {
    load(&[fixture(rel)])
        .unwrap()
        .into_iter()
        .map(|l| l.row)
        .collect()
}

#[test]
fn qemu_64g_markdown() {
    let r = build(&rows("qemu-64g/results.csv"), Metric::LazyinitS);
    insta::assert_snapshot!("qemu_64g_markdown", markdown::render(&r));
}

#[test]
fn qemu_64g_ms_per_group_markdown() {
    let r = build(&rows("qemu-64g/results.csv"), Metric::MsPerGroup);
    insta::assert_snapshot!("qemu_64g_ms_per_group_markdown", markdown::render(&r));
}

#[test]
fn qemu_64g_csv() {
    let r = build(&rows("qemu-64g/results.csv"), Metric::LazyinitS);
    insta::assert_snapshot!("qemu_64g_csv", csv::render(&r));
}

#[test]
fn qemu_64g_json() {
    let r = build(&rows("qemu-64g/results.csv"), Metric::LazyinitS);
    insta::assert_snapshot!("qemu_64g_json", json::render(&r));
}

#[test]
fn reported_cells_markdown() {
    let r = build(&rows("reported/results.csv"), Metric::LazyinitS);
    insta::assert_snapshot!("reported_markdown", markdown::render(&r));
}

#[test]
fn reported_cells_sit_beside_the_2021_figures() {
    let r = build(&rows("reported/results.csv"), Metric::LazyinitS);
    assert_eq!(r.cells.len(), 8);
    for c in &r.cells {
        let rep = c
            .reported
            .as_ref()
            .expect("every fixture cell is a reported one");
        let mean = c.summary.as_ref().unwrap().mean;
        assert!((rep.diff - (mean - rep.value)).abs() < 1e-9);
    }
    // arm64 HZ100 no fix, 2 TiB: 1809 s against the reported 1842 s.
    let arm = r
        .cells
        .iter()
        .find(|c| {
            c.key.axes.arch == lazyinit_core::Arch::Arm64
                && c.key.axes.variant == lazyinit_core::Variant::NoFix
                && c.key.axes.volume.0 == 2 << 40
        })
        .unwrap();
    assert_eq!(arm.reported.as_ref().unwrap().value, 1842.0);
}

#[test]
fn failed_runs_are_listed_not_aggregated() {
    let r = build(&rows("qemu-64g/results.csv"), Metric::LazyinitS);
    assert_eq!(r.failures.len(), 1);
    let arm_fix = r.cells.iter().find(|c| c.failed == 1).unwrap();
    assert_eq!(arm_fix.summary.as_ref().unwrap().n, 3);
    assert_eq!(arm_fix.sleep_ticks, vec![3, 4]);
    assert!(
        r.notes.iter().any(|n| n.contains("L = 3, 4")),
        "{:?}",
        r.notes
    );
}

#[test]
fn different_accel_or_provider_is_never_pooled() {
    let mut rs = rows("qemu-64g/results.csv");
    let base = rs.len();
    let mut extra: Vec<_> = rs
        .iter()
        .filter(|r| r.status == lazyinit_core::results::Status::Ok)
        .take(6)
        .cloned()
        .collect();
    for (i, r) in extra.iter_mut().enumerate() {
        r.run_id = "kvm-run".into();
        // Half on KVM, half on another machine type.
        if i % 2 == 0 {
            r.testbed.accel = "kvm".into();
        } else {
            r.testbed.machine = "qemu-x86_64-q35".into();
        }
    }
    rs.extend(extra);
    let r = build(&rs, Metric::LazyinitS);
    assert_eq!(r.rows, base + 6);
    assert_eq!(r.cells.len(), 12, "6 original cells plus 6 new ones");
    for c in &r.cells {
        let n = c.summary.as_ref().unwrap().n;
        let others =
            c.key.testbed.accel == "kvm" || c.key.testbed.machine.as_str().ends_with("q35");
        assert_eq!(n, if others { 1 } else { 3 }, "{}", c.key.label());
    }
    for x in &r.ratios {
        assert_eq!(x.numerator.testbed.accel, x.denominator.testbed.accel);
    }
}

#[test]
fn cycles_come_from_groups_csv_beside_the_results() {
    let loaded = load(&[fixture("qemu-64g/results.csv")]).unwrap();
    let (series, warnings) = load_cycles(&loaded);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(series.len(), 2);
    let nofix = series.iter().find(|s| s.cell_id.contains("nofix")).unwrap();
    assert_eq!(nofix.ms.len(), 511);
    let mean = nofix.ms.iter().sum::<f64>() / nofix.ms.len() as f64;
    assert!((mean - 110.1).abs() < 0.5, "{mean}");
}

#[test]
fn svg_plots_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = load(&[
        fixture("qemu-64g/results.csv"),
        fixture("reported/results.csv"),
    ])
    .unwrap();
    let rs: Vec<_> = loaded.iter().map(|l| l.row.clone()).collect();
    let r = build(&rs, Metric::LazyinitS);
    let bars = dir.path().join("cells.svg");
    lazyinit_report::plot::bars(&r, &bars).unwrap();
    let text = std::fs::read_to_string(&bars).unwrap();
    assert!(text.starts_with("<svg"));
    assert!(text.contains("arm64, HZ 100"), "columns name the cells");
    assert!(
        text.contains("2TiB without fix"),
        "groups are the table's rows"
    );
    assert!(text.contains("2021 report"), "legend");
    let (series, _) = load_cycles(&loaded);
    let cyc = dir.path().join("cycles.svg");
    lazyinit_report::plot::cycles(&series, &cyc).unwrap();
    let text = std::fs::read_to_string(&cyc).unwrap();
    assert!(text.contains("arm64 HZ100 fix 64GiB"), "a panel per cell");
    assert!(
        text.contains("L+1 = 11 ticks"),
        "the reference line of L = 10"
    );
    assert!(text.matches("<polyline").count() >= 2, "one line per run");
}

#[test]
fn malformed_csv_names_file_and_line() {
    let err = load(&[fixture("malformed.csv")]).unwrap_err().to_string();
    assert!(err.contains("malformed.csv:4: "), "{err}");
    assert!(err.contains("HZ `200`"), "{err}");
}

#[test]
fn the_same_file_twice_is_refused() {
    let p = fixture("reported/results.csv");
    let err = load(&[p.clone(), p]).unwrap_err().to_string();
    assert!(
        err.contains("results.csv:2:") && err.contains("already read"),
        "{err}"
    );
}

#[test]
fn estimates_are_marked_in_every_table() {
    let mut rs = rows("reported/results.csv");
    rs.extend(rows("nightly/results.csv"));
    let r = build(&rs, Metric::LazyinitS);
    assert_eq!(
        r.cells.len(),
        16,
        "estimates are never pooled with measurements"
    );
    let md = markdown::render(&r);
    assert!(md.contains("Columns marked *estimate* are early-stop estimates"));
    assert!(md.contains("| arm64, HZ 100, estimate | model |"));
    assert!(md.contains("95% PI "));
    insta::assert_snapshot!("reported_and_nightly_markdown", md);
    let text = csv::render(&r);
    assert_eq!(text.lines().filter(|l| l.contains(",true,50,")).count(), 8);
    // No ratio divides an estimate by a measurement.
    assert!(r
        .ratios
        .iter()
        .all(|x| x.numerator.estimated == x.denominator.estimated));
}

#[test]
fn estimates_are_marked_in_the_plots() {
    let dir = tempfile::tempdir().unwrap();
    let mut rs = rows("reported/results.csv");
    rs.extend(rows("nightly/results.csv"));
    let bars = dir.path().join("cells.svg");
    lazyinit_report::plot::bars(&build(&rs, Metric::LazyinitS), &bars).unwrap();
    let text = std::fs::read_to_string(&bars).unwrap();
    assert!(text.contains("estimate (early stop)"), "legend");
    assert!(text.contains("arm64, HZ 100, estimate"), "x labels");
    assert!(text.contains("95% CI (estimate: 95% PI)"));
}
