//! The regression gate on fixtures: a candidate with only noise passes, a
//! candidate whose fixed kernel behaves unfixed fails, a missing cell is
//! bad input.

use std::path::Path;

use lazyinit_core::exit;
use lazyinit_report::compare::{compare, CompareOptions, Test, Verdict};
use lazyinit_report::input::load;
use lazyinit_report::render;

fn rows(rel: &str) -> Vec<lazyinit_core::results::ResultRow> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    load(&[p]).unwrap().into_iter().map(|l| l.row).collect()
}

#[test]
fn noise_only_is_no_regression() {
    let c = compare(
        &rows("qemu-64g/results.csv"),
        &rows("compare/candidate-same.csv"),
        &CompareOptions::default(),
    )
    .unwrap();
    assert_eq!(c.cells.len(), 6);
    assert!(c
        .cells
        .iter()
        .all(|x| x.verdict == Verdict::NoChange && x.test == Test::Welch));
    assert_eq!(c.exit_code(), exit::OK);
    insta::assert_snapshot!("compare_same", render::compare::markdown(&c));
}

#[test]
fn fixed_kernel_behaving_unfixed_is_a_regression() {
    let c = compare(
        &rows("qemu-64g/results.csv"),
        &rows("compare/candidate-regressed.csv"),
        &CompareOptions::default(),
    )
    .unwrap();
    let reg: Vec<_> = c
        .cells
        .iter()
        .filter(|x| x.verdict == Verdict::Regression)
        .collect();
    assert_eq!(reg.len(), 1);
    assert_eq!(reg[0].key.hz.get(), 100);
    assert!(reg[0].welch.unwrap().p < 0.001);
    assert!(reg[0]
        .notes
        .iter()
        .any(|n| n.contains("baseline L = 3, candidate L = 10")));
    assert_eq!(c.exit_code(), exit::REGRESSION_OR_CELL_FAILED);
    insta::assert_snapshot!("compare_regressed", render::compare::markdown(&c));
    insta::assert_snapshot!("compare_regressed_csv", render::compare::csv(&c));
    insta::assert_snapshot!("compare_regressed_json", render::json::render(&c));
}

#[test]
fn the_same_run_on_both_sides_is_no_change() {
    let b = rows("qemu-64g/results.csv");
    let c = compare(&b, &b, &CompareOptions::default()).unwrap();
    assert!(c
        .cells
        .iter()
        .all(|x| x.change_pct == Some(0.0) && x.verdict == Verdict::NoChange));
}

#[test]
fn a_missing_cell_is_bad_input() {
    let c = compare(
        &rows("qemu-64g/results.csv"),
        &rows("compare/candidate-missing.csv"),
        &CompareOptions::default(),
    )
    .unwrap();
    assert_eq!(c.missing.len(), 1);
    assert_eq!(c.exit_code(), exit::BAD_INPUT);
    // Cells of other runs never match: different volume on each side.
    let c = compare(
        &rows("qemu-64g/results.csv"),
        &rows("reported/results.csv"),
        &CompareOptions::default(),
    )
    .unwrap();
    assert!(c.cells.is_empty());
    assert_eq!(c.missing.len(), 6 + 8);
}

#[test]
fn single_runs_use_the_threshold_only() {
    let base = rows("reported/results.csv");
    let mut cand = base.clone();
    for r in &mut cand {
        r.run_id = "later".into();
        r.lazyinit_s = r.lazyinit_s.map(|s| s * 1.08);
    }
    let c = compare(&base, &cand, &CompareOptions::default()).unwrap();
    assert!(c
        .cells
        .iter()
        .all(|x| x.test == Test::ThresholdOnly && x.verdict == Verdict::Regression));
    let loose = CompareOptions {
        threshold_pct: 10.0,
        ..Default::default()
    };
    assert_eq!(compare(&base, &cand, &loose).unwrap().exit_code(), exit::OK);
}
