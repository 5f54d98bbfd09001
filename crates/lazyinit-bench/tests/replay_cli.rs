//! `replay`, and `compare` with estimates and JUnit XML, as a nightly job
//! and the lead's validation call them: real process, real exit codes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lazyinit_core::results::read_rows;
use lazyinit_estimate::synth::{generate, Run};

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

/// Two full runs from the model, shaped like two reported cells (4096
/// groups each, to stay quick), one groups.csv, one groups.csv.gz.
fn full_runs(dir: &Path) -> PathBuf {
    let run = lazyinit_core::RunWriter::claim(&lazyinit_core::RunFolder::new(dir)).unwrap();
    let csv = dir.join("results.csv");
    let mut w = run.results().unwrap();
    let rows = read_rows(fixture("reported/results.csv")).unwrap();
    for (i, mut row) in rows.into_iter().take(2).enumerate() {
        let t = generate(&Run::noisy(row.axes.hz.get(), 10, 4096, i as u64 + 3));
        row.measured.groups = Some(4096);
        row.measured.traced_groups = Some(4096);
        row.measured.lazyinit_s = Some(t.lazyinit_s());
        row.measured.first_group_s = Some(t.first_group_s());
        w.append(&row).unwrap();
        let cell = dir.join(&row.cell_id);
        std::fs::create_dir_all(&cell).unwrap();
        let body = t.groups_csv(50.0);
        if i == 0 {
            std::fs::write(cell.join("groups.csv"), body).unwrap();
        } else {
            let f = std::fs::File::create(cell.join("groups.csv.gz")).unwrap();
            let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::best());
            gz.write_all(body.as_bytes()).unwrap();
            gz.finish().unwrap();
        }
    }
    csv
}

#[test]
fn replay_prints_predicted_vs_measured_per_n() {
    let dir = tempfile::tempdir().unwrap();
    let csv = full_runs(dir.path());
    let out = run(&["replay", csv.to_str().unwrap(), "--after", "25,50,100"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let md = text(&out.stdout);
    assert!(
        md.starts_with("# Early stop, replayed on full runs"),
        "{md}"
    );
    for n in ["| 25 | 2 |", "| 50 | 2 |", "| 100 | 2 |"] {
        assert!(md.contains(n), "{n}: {md}");
    }
    assert!(
        md.contains("Smallest N with every run within 0.5% (from first group): 25."),
        "{md}"
    );

    let json = dir.path().join("replay.json");
    let out = run(&[
        "replay",
        csv.to_str().unwrap(),
        "--out",
        json.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // The default Ns: 25, 50, 100, 200, 500.
    assert_eq!(v["summary"].as_array().unwrap().len(), 5);
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
}

#[test]
fn replay_refuses_what_it_cannot_replay() {
    let dir = tempfile::tempdir().unwrap();
    let csv = full_runs(dir.path());
    let small = run(&["replay", csv.to_str().unwrap(), "--after", "10"]);
    assert_eq!(small.status.code(), Some(2));
    assert!(
        text(&small.stderr).contains("--after: use at least 25"),
        "{}",
        text(&small.stderr)
    );
    // Results without per-group data (the committed runs before the lead's).
    let none = run(&["replay", &fixture("reported/results.csv")]);
    assert_eq!(none.status.code(), Some(2));
    assert!(text(&none.stderr).contains("no full run with per-group data"));
}

#[test]
fn compare_writes_junit_with_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let xml = dir.path().join("compare.xml");
    let out = run(&[
        "compare",
        "--baseline",
        &fixture("qemu-64g/results.csv"),
        "--candidate",
        &fixture("compare/candidate-regressed.csv"),
        "--out",
        xml.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let body = std::fs::read_to_string(&xml).unwrap();
    let doc = roxmltree::Document::parse(&body).expect("well-formed JUnit XML");
    let cases = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .count();
    let failures = doc
        .descendants()
        .filter(|n| n.has_tag_name("failure"))
        .count();
    assert_eq!((cases, failures), (6, 1));
    assert!(text(&out.stderr).contains("1 regression(s)"));

    let report = run(&[
        "report",
        "--format",
        "junit",
        &fixture("qemu-64g/results.csv"),
    ]);
    assert_eq!(report.status.code(), Some(2));
    assert!(text(&report.stderr).contains("format of `compare` only"));
}

#[test]
fn an_estimate_meets_a_measurement_only_when_told() {
    let full = fixture("reported/results.csv");
    let nightly = fixture("nightly/results.csv");
    let refused = run(&["compare", "--baseline", &full, "--candidate", &nightly]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused.stderr).contains("pass --ignore estimated"),
        "{}",
        text(&refused.stderr)
    );
    let told = run(&[
        "compare",
        "--baseline",
        &full,
        "--candidate",
        &nightly,
        "--ignore",
        "estimated",
        "--metric",
        "from_first_group_s",
        "--threshold",
        "0.5",
        "--format",
        "junit",
    ]);
    assert_eq!(told.status.code(), Some(0), "{}", text(&told.stderr));
    let body = text(&told.stdout);
    let doc = roxmltree::Document::parse(&body).unwrap();
    assert_eq!(
        doc.descendants()
            .filter(|n| n.has_tag_name("testcase"))
            .count(),
        8
    );
    assert!(body.contains("an estimate from the first 50 groups"));
}
