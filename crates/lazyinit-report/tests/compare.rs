//! The regression gate on fixtures: a candidate with only noise passes, a
//! candidate whose fixed kernel behaves unfixed fails, a missing cell is
//! bad input.

use lazyinit_core::exit::ExitCode;
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
    assert_eq!(reg[0].key.axes.hz.get(), 100);
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
        r.measured.lazyinit_s = r.measured.lazyinit_s.map(|s| s * 1.08);
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

/// A test case's name and its failure/error element, if any.
type Case = (String, Option<String>);

/// Parses JUnit XML: the testsuite's attributes and its test cases.
fn junit(xml: &str) -> (Vec<(String, String)>, Vec<Case>) {
    let doc = roxmltree::Document::parse(xml).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    let suite = root
        .children()
        .find(|n| n.has_tag_name("testsuite"))
        .expect("one testsuite");
    let attrs = suite
        .attributes()
        .map(|a| (a.name().to_string(), a.value().to_string()))
        .collect();
    let cases = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .map(|c| {
            let verdict = c
                .children()
                .find(|n| n.has_tag_name("failure") || n.has_tag_name("error"))
                .map(|n| n.tag_name().name().to_string());
            (c.attribute("name").unwrap().to_string(), verdict)
        })
        .collect();
    (attrs, cases)
}

fn attr(attrs: &[(String, String)], name: &str) -> String {
    attrs.iter().find(|(n, _)| n == name).unwrap().1.clone()
}

#[test]
fn junit_has_a_testcase_per_cell_and_a_failure_per_regression() {
    let c = compare(
        &rows("qemu-64g/results.csv"),
        &rows("compare/candidate-regressed.csv"),
        &CompareOptions::default(),
    )
    .unwrap();
    let xml = render::junit::render(&c);
    let (suite, cases) = junit(&xml);
    assert_eq!(cases.len(), c.cells.len());
    let mut names: Vec<&String> = cases.iter().map(|(n, _)| n).collect();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "one test case per cell");
    let failures = cases
        .iter()
        .filter(|(_, v)| v.as_deref() == Some("failure"));
    assert_eq!(failures.count(), 1);
    assert_eq!(attr(&suite, "tests"), cases.len().to_string());
    assert_eq!(
        (attr(&suite, "failures"), attr(&suite, "errors")),
        ("1".into(), "0".into())
    );
    insta::assert_snapshot!("compare_regressed_junit", xml);

    // A cell missing on one side: an error test case, as the exit code 2.
    let m = compare(
        &rows("qemu-64g/results.csv"),
        &rows("compare/candidate-missing.csv"),
        &CompareOptions::default(),
    )
    .unwrap();
    let (suite, cases) = junit(&render::junit::render(&m));
    assert_eq!(cases.len(), m.cells.len() + m.missing.len());
    assert_eq!(attr(&suite, "errors"), m.missing.len().to_string());
    assert_eq!(m.exit_code(), exit::BAD_INPUT);
}

#[test]
fn nightly_estimates_meet_the_full_run_only_when_told() {
    let full = rows("reported/results.csv");
    let nightly = rows("nightly/results.csv");
    let err = compare(&full, &nightly, &CompareOptions::default()).unwrap_err();
    assert!(err.to_string().contains("pass --ignore estimated"), "{err}");
    let o = CompareOptions {
        ignore: vec![lazyinit_report::compare::KeyField::Estimated],
        threshold_pct: 1.0,
        ..Default::default()
    };
    let c = compare(&full, &nightly, &o).unwrap();
    assert_eq!(c.cells.len(), 8);
    assert_eq!(c.count(Verdict::NoChange), 8);
    assert!(c.cells.iter().all(|x| x
        .notes
        .iter()
        .any(|n| n.contains("candidate: an estimate from the first 50 groups"))));
    let (_, cases) = junit(&render::junit::render(&c));
    assert_eq!(cases.len(), 8);
    assert!(cases.iter().all(|(_, v)| v.is_none()));
    insta::assert_snapshot!("compare_full_vs_nightly", render::compare::markdown(&c));
}
