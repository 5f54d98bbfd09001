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

/// `--out` equal to an input never destroys it: refused with exit 2 (for
/// report, the KCIDB export and compare, by any path to the same file),
/// the input byte for byte as it was; a failed report leaves no file.
#[test]
fn an_out_that_is_an_input_is_refused_and_the_input_kept() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("r.csv");
    std::fs::copy(fixture("qemu-64g/results.csv"), &csv).unwrap();
    let before = std::fs::read(&csv).unwrap();
    // The same file by another path, too.
    std::os::unix::fs::symlink(&csv, dir.path().join("link.csv")).unwrap();
    let (c, link) = (csv.to_str().unwrap(), dir.path().join("link.csv"));
    let link = link.to_str().unwrap();
    for args in [
        vec!["report", c, "--out", c, "--format", "csv"],
        vec!["report", c, "--out", link],
        vec!["report", c, "--format", "kcidb", "--out", c],
        vec!["compare", "--baseline", c, "--candidate", c, "--out", c],
        vec!["compare", "--baseline", c, "--candidate", c, "--out", link],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("would be overwritten"),
            "{args:?}: {}",
            text(&o.stderr)
        );
        assert_eq!(std::fs::read(&csv).unwrap(), before, "{args:?}");
    }
    // A report that fails after --out was opened leaves no file at all.
    let out = dir.path().join("out.md");
    let bad = run(&[
        "report",
        &fixture("malformed.csv"),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    // And a good one is written whole.
    let ok = run(&["report", c, "--out", out.to_str().unwrap()]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    assert!(std::fs::read_to_string(&out).unwrap().contains("| "));
}
