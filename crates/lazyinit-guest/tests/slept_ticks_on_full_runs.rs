//! The sleep L counted on the tick grid (`TraceSummary::slept_ticks`) on
//! committed full-scale cells where the kernel's formula on the trace's z1
//! and the cycle each gave another answer (results/reported-series-n3,
//! NOTES.md): z1 read just under an L boundary, and zeroings that crossed a
//! tick lengthening the cycle.

use std::path::PathBuf;
use std::process::Command;

use lazyinit_guest::parse::TraceSummary;

fn cell(name: &str) -> TraceSummary {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "../../results/reported-series-n3",
        name,
        "groups.csv.gz",
    ]
    .iter()
    .collect();
    let out = Command::new("gzip").arg("-dc").arg(&path).output().unwrap();
    assert!(out.status.success(), "gzip -dc {}", path.display());
    let text = String::from_utf8(out.stdout).unwrap();
    let (mut groups, mut zero_s) = (Vec::new(), Vec::new());
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        groups.push((f[0].parse().unwrap(), f[1].parse().unwrap()));
        zero_s.push(f[2].parse::<f64>().ok().map(|ms| ms / 1000.0));
    }
    assert!(groups.len() > 16000, "{name}: {} groups", groups.len());
    TraceSummary {
        distinct_groups: groups.len() as u64,
        groups,
        zero_s,
        ..Default::default()
    }
}

#[test]
fn the_sleep_on_the_tick_grid_where_z1_and_the_cycle_disagree() {
    for (name, hz, slept, z1_formula, median_cycle_ticks) in [
        // z1 3.90 ms: L=3 by the formula; 5-tick cycles: it slept 4.
        ("qemu-arm64-debian-5.10-hz100-fix-2TiB-r3", 100, 4, 3, 5.0),
        // z1 3.57 ms: L=8 by the formula; 10-tick cycles: it slept 9.
        ("qemu-x86_64-debian-5.10-hz250-fix-2TiB-r3", 250, 9, 8, 10.0),
        // z1 3.20 ms: L=7 by the formula (3.196); it slept 8.
        ("qemu-x86_64-debian-6.1-hz250-fix-3TiB-r2", 250, 8, 7, 9.0),
        // z1 3.41 ms: L=8, and 8 it slept, though many cycles were 10 ticks
        // (zeroings crossing a tick).
        ("qemu-x86_64-debian-5.10-hz250-fix-3TiB-r1", 250, 8, 8, 9.0),
        // No fix, 12-tick cycles in a quarter of the groups: L=10.
        (
            "qemu-x86_64-debian-6.1-hz250-nofix-3TiB-r1",
            250,
            10,
            10,
            11.0,
        ),
    ] {
        let s = cell(name);
        assert_eq!(s.slept_ticks(hz), Some(slept), "{name}");
        let z1 = s.z1_s().unwrap();
        if z1_formula != slept {
            assert_eq!(
                (10.0 * z1 * hz as f64).floor() as u64,
                z1_formula,
                "{name}: the formula on the trace's z1"
            );
        }
        let cycle = (s.median_cycle_ms().unwrap() / 1000.0 * hz as f64).round();
        assert_eq!(cycle, median_cycle_ticks, "{name}: median cycle");
    }
}
