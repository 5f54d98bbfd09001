//! `report` and `compare` as a nightly job calls them: real process, real
//! exit codes, fixtures from crates/lazyinit-report/tests/fixtures.

use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../lazyinit-report/tests/fixtures")
        .join(rel)
        .display()
        .to_string()
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"))
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn compare_exit_codes() {
    let base = fixture("qemu-64g/results.csv");
    let same = run(&[
        "compare",
        "--baseline",
        &base,
        "--candidate",
        &fixture("compare/candidate-same.csv"),
    ]);
    assert_eq!(same.status.code(), Some(0), "{}", text(&same.stderr));
    assert!(text(&same.stdout).contains("0 regression(s)"));

    let reg = run(&[
        "compare",
        "--baseline",
        &base,
        "--candidate",
        &fixture("compare/candidate-regressed.csv"),
    ]);
    assert_eq!(reg.status.code(), Some(1), "{}", text(&reg.stderr));
    assert!(text(&reg.stdout).contains("REGRESSION"));

    // A threshold above the change lets it through.
    let loose = run(&[
        "compare",
        "--baseline",
        &base,
        "--candidate",
        &fixture("compare/candidate-regressed.csv"),
        "--threshold",
        "200",
    ]);
    assert_eq!(loose.status.code(), Some(0));

    let missing = run(&[
        "compare",
        "--format",
        "json",
        "--baseline",
        &base,
        "--candidate",
        &fixture("compare/candidate-missing.csv"),
    ]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        text(&missing.stderr).contains("present on one side only"),
        "{}",
        text(&missing.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&missing.stdout).unwrap();
    assert_eq!(v["missing"].as_array().unwrap().len(), 1);
}

#[test]
fn malformed_csv_is_bad_input_with_a_line_number() {
    for args in [
        vec!["report".to_string(), fixture("malformed.csv")],
        vec![
            "compare".into(),
            "--baseline".into(),
            fixture("qemu-64g/results.csv"),
            "--candidate".into(),
            fixture("malformed.csv"),
        ],
    ] {
        let out = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(out.status.code(), Some(2));
        let err = text(&out.stderr);
        assert!(err.contains("malformed.csv:4: "), "{err}");
    }
    let out = run(&["report", "/nonexistent/results.csv"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn report_formats_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let out_json = dir.path().join("r.json");
    let svg = dir.path().join("cells.svg");
    let r = run(&[
        "report",
        &fixture("qemu-64g/results.csv"),
        "--out",
        out_json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    // The format follows --out's extension.
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_json).unwrap()).unwrap();
    assert_eq!(v["cells"].as_array().unwrap().len(), 6);
    assert!(svg.exists() && dir.path().join("cells-cycles.svg").exists());

    let md = run(&["report", &fixture("reported/results.csv")]);
    assert!(text(&md.stdout).starts_with("# ext4lazyinit run time"));
    let csv = run(&[
        "report",
        "--format",
        "csv",
        "--metric",
        "ms_per_group",
        &fixture("reported/results.csv"),
    ]);
    let csv = text(&csv.stdout);
    assert_eq!(csv.lines().count(), 9);
    assert!(csv.lines().nth(1).unwrap().contains(",ms_per_group,"));
}
