//! Bisect on a real kernel tree: Debian's 6.1 source committed as a
//! 17-commit history (scripts/bisect-history.sh) where commit 11 reverts
//! the ext4 lazy-init fix and commit 8 does not build. `bisect` must name
//! commit 11, confirmed, with commit 8 skipped for its build, and leave the
//! tree's HEAD, index and files alone; then `git bisect run` with
//! `bisect-step` must name the same commit. Real builds (the history sits
//! at a fixed path under the cache, so a warm cache reuses every kernel),
//! real arm64 guests at HZ=100 on 8 GiB (64 groups: ~40 ms a group with
//! the fix, ~110 without; L = 3 against 10). On an x86_64 host the arm64
//! guests run under TCG, so `--clock auto` (the default) samples on the
//! virtual clock: one exact sample a commit.

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lazyinit-bench"))
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The history, made by scripts/ci-kernels.sh before the tests start (the
/// same path and arguments: keep them in step), else here.
fn history() -> PathBuf {
    let dir = lazyinit_core::paths::cache_dir().join("bisect-ci/linux-17");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bisect-history.sh");
    let st = Command::new("bash")
        .arg(script)
        .arg(&dir)
        .args(["17", "11", "8"])
        .status()
        .unwrap();
    assert!(st.success(), "bisect-history.sh failed");
    dir
}

/// The Debian 6.1 arm64 HZ=100 kernel the other tests boot (a cache hit
/// after scripts/test.sh's kernels): its build tree seeds the history's.
fn debian_tree() {
    let out = Command::new(bin())
        .args([
            "kernel",
            "build",
            "--arch",
            "arm64",
            "--hz",
            "100",
            "--variant",
            "fix",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kernel build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bisect_names_the_revert_with_the_unbuildable_commit_skipped() {
    // Where the time goes (printed with the test's output, docs/ci.md).
    let t0 = std::time::Instant::now();
    let at = |what: &str| println!("bisect_e2e: +{:.0} s {what}", t0.elapsed().as_secs_f64());
    debian_tree();
    at("the Debian arm64 tree");
    let repo = history();
    at("the 17-commit history");
    let commits: Vec<String> = git(&repo, &["rev-list", "--reverse", "HEAD"])
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(commits.len(), 17);
    let (good, bad, culprit, broken) = (&commits[0], &commits[16], &commits[11], &commits[8]);
    assert!(git(&repo, &["log", "-1", "--format=%s", culprit]).contains("reverts 39fec6889d15"));
    let status_before = git(&repo, &["status", "--porcelain", "--ignored"]);
    let index = repo.join(".git/index");
    let index_before = std::fs::metadata(&index).unwrap().modified().unwrap();

    let out = tempfile::tempdir().unwrap();
    let folder = out.path().join("bisect");
    let common = [
        "--good",
        good,
        "--bad",
        bad,
        "--cell",
        "arm64:100:8GiB",
        "--end-samples",
        "2",
        // Each way per step; at 0.01 every step takes two samples (the
        // L alone decides, docs/bisect.md), at 0.05 one where the ends'
        // samples each slept one L: the test's cost stays that of CI.
        "--error-rate",
        "0.05",
    ];
    let run = Command::new(bin())
        .arg("bisect")
        .arg("--source")
        .arg(&repo)
        .args(common)
        .arg("--out")
        .arg(&folder)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    let stdout = String::from_utf8_lossy(&run.stdout);
    at("bisect");
    println!("{stderr}");
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{stderr}");

    let summary = std::fs::read_to_string(folder.join("summary.txt")).unwrap();
    assert!(
        summary.starts_with(&format!("first bad commit: [{culprit}]"))
            && summary.contains("; confirmed:"),
        "{summary}"
    );
    let log = std::fs::read_to_string(folder.join("bisect.log")).unwrap();
    assert!(log.contains(&format!("git bisect skip {broken}")), "{log}");
    assert!(log.contains(&format!("git bisect bad {culprit}")), "{log}");
    let steps = std::fs::read_to_string(folder.join("steps.md")).unwrap();
    let broken_row = steps
        .lines()
        .find(|l| l.contains(&broken[..12]))
        .unwrap_or_else(|| panic!("no step for the unbuildable commit:\n{steps}"));
    assert!(
        broken_row.contains("| skip |") && broken_row.contains("does not build"),
        "{broken_row}"
    );
    // Steps after the first are incremental: only what changed is copied
    // (nothing, when the slot's tree is already at the commit: a warm
    // cache builds only the unbuildable commit, the slot's last build).
    // No build unpacks the whole tree: a cold slot is seeded from the
    // Debian tree built above (its objects kept, the commit's files written
    // by content), a warm one synced.
    assert!(stderr.contains("(incremental)"), "{stderr}");
    let unpacks = stderr.matches("build: unpack ").count();
    assert_eq!(unpacks, 0, "{unpacks} whole unpacks:\n{stderr}");
    if stderr.contains("build: seed the build tree from") {
        assert!(stderr.contains("build: seeded: "), "{stderr}");
    }
    // One row per measurement, each naming its commit.
    let rows = lazyinit_core::results::read_rows(folder.join("results.csv")).unwrap();
    assert!(rows.len() >= 6, "{} rows", rows.len());
    assert!(rows
        .iter()
        .any(|r| r.axes.source == format!("git:{culprit}")));
    assert!(rows
        .iter()
        .all(|r| matches!(&r.axes.source, lazyinit_core::SourceId::Git(g) if g.is_commit())));
    // On the virtual clock (arm64 on this x86_64 host): exact samples,
    // one of each commit in each role, never a second.
    let virtual_clock = lazyinit_core::Arch::host() != Some(lazyinit_core::Arch::Arm64);
    if virtual_clock {
        assert!(
            rows.iter().all(|r| r.testbed.accel.is_virtual_clock()),
            "{:?}",
            rows.iter()
                .map(|r| r.testbed.accel.to_string())
                .collect::<Vec<_>>()
        );
        let runs: Vec<String> = std::fs::read_dir(folder.join("runs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!runs.is_empty());
        for r in &runs {
            assert!(
                r.ends_with("-0"),
                "a second sample on the virtual clock: {runs:?}"
            );
        }
    }
    // The user's tree: same HEAD, same files, index not even refreshed.
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), *bad);
    assert_eq!(
        git(&repo, &["status", "--porcelain", "--ignored"]),
        status_before
    );
    assert_eq!(
        std::fs::metadata(&index).unwrap().modified().unwrap(),
        index_before
    );

    // The same question through `git bisect run` (its steps reuse the
    // samples above where git picks the same commits).
    // A run killed mid-way left the shared history bisecting: start clean.
    git(&repo, &["bisect", "reset"]);
    git(&repo, &["bisect", "start", bad, good]);
    let run = Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["bisect", "run"])
        .arg(bin())
        .arg("bisect-step")
        .args(common)
        .arg("--out")
        .arg(&folder)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stdout).to_string();
    at("git bisect run");
    git(&repo, &["bisect", "reset"]);
    assert!(
        run.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        said.contains(&format!("{culprit} is the first bad commit")),
        "{said}"
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), *bad);
    // The table shows every step git ran, each call's added to the last's.
    let calls = std::fs::read_to_string(folder.join("bisect-step.log")).unwrap();
    let steps = std::fs::read_to_string(folder.join("steps.md")).unwrap();
    let stepped: std::collections::BTreeSet<&str> =
        calls.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(stepped.len() >= 3, "{calls}");
    for c in &stepped {
        assert!(
            steps.contains(&c[..12]),
            "step {c} not in the table:\n{steps}"
        );
    }
}
