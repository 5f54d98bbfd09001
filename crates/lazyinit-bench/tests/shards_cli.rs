//! `run --shard`, `plan --shards` and `merge` as a user types them, without
//! guests: the split against golden files (the same on every host), and
//! bad input refused with exit 2, one line, nothing created.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cli(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", dir)
        .output()
        .unwrap()
}

/// `plan --shards N` against its golden file (`UPDATE_GOLDEN=1` rewrites
/// it). Fixed concurrency: the split does not depend on the host, the
/// number of guests at once would.
#[test]
fn the_split_of_reported_and_the_series_is_the_golden_one() {
    for (spec, n, golden) in [
        ("reported", "3", "plan-reported-shards3.txt"),
        (
            "../../specs/reported-series.toml",
            "4",
            "plan-series-shards4.txt",
        ),
    ] {
        let out = cli(
            &["plan", spec, "--shards", n, "--concurrency", "8"],
            &here(),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let path = here().join("tests/golden").join(golden);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        assert_eq!(text, std::fs::read_to_string(&path).unwrap(), "{golden}");
    }
}

fn refused(args: &[&str], want: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let out = cli(args, tmp.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    // The first line says it (clap adds a pointer to --help below its own).
    assert!(
        err.lines().next().unwrap_or("").contains(want),
        "{args:?}: {err}"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "{args:?} created {left:?}");
}

#[test]
fn bad_shards_are_refused_with_exit_2_and_nothing_created() {
    refused(
        &["run", "quick", "--shard", "3/2", "--out", "x"],
        "shard 3/2 does not exist",
    );
    refused(
        &["run", "quick", "--shard", "0/2", "--out", "x"],
        "K must be between 1 and N",
    );
    refused(
        &["run", "quick", "--shard", "half", "--out", "x"],
        "`half` is not a shard",
    );
    refused(
        &["run", "quick", "--shard", "auto", "--out", "x"],
        "--shard auto found no shard in the environment: set LAZYINIT_SHARD=K/N",
    );
    refused(&["plan", "quick", "--shards", "0"], "--shards");
    // Issue 41: a documented maximum, refused before anything is
    // allocated (4294967295 asked for 34 GB, 100000 never ended).
    for n in ["1025", "100000", "4294967295", "18446744073709551616"] {
        let t = std::time::Instant::now();
        refused(&["plan", "quick", "--shards", n], "--shards");
        assert!(
            t.elapsed().as_secs() < 20,
            "--shards {n} took {:?}",
            t.elapsed()
        );
    }
    refused(
        &["run", "quick", "--shard", "1/100000", "--out", "x"],
        "100000 shards: at most 1024",
    );
    refused(
        &["plan", "quick", "--shard", "1/4294967295"],
        "4294967295 shards: at most 1024",
    );
    refused(
        &["merge", "nowhere", "--out", "m"],
        "nowhere: no such folder",
    );
    // The output inside the folder it reads is refused first (the guard).
    refused(
        &["merge", ".", "--out", "m"],
        "--out m is inside ., which this command reads",
    );
}

/// Issue 41: `--shard auto` with an engine's numbers at their extremes is
/// one line and exit 2, never a panic (JOB_COMPLETION_INDEX at u64::MAX
/// overflowed in shard.rs).
#[test]
fn extreme_shard_environments_are_refused_not_panics() {
    let max = u64::MAX.to_string();
    for vars in [
        vec![
            ("JOB_COMPLETION_INDEX", max.as_str()),
            ("LAZYINIT_SHARD_COUNT", "4"),
        ],
        vec![
            ("JOB_COMPLETION_INDEX", max.as_str()),
            ("LAZYINIT_SHARD_COUNT", max.as_str()),
        ],
        vec![
            ("JOB_COMPLETION_INDEX", "0"),
            ("LAZYINIT_SHARD_COUNT", "100000"),
        ],
        vec![
            ("CI_NODE_INDEX", max.as_str()),
            ("CI_NODE_TOTAL", max.as_str()),
        ],
        vec![
            ("SLURM_ARRAY_TASK_ID", max.as_str()),
            ("SLURM_ARRAY_TASK_COUNT", max.as_str()),
        ],
        vec![
            ("JOB_COMPLETION_INDEX", "18446744073709551616"),
            ("LAZYINIT_SHARD_COUNT", "4"),
        ],
    ] {
        for args in [
            &["plan", "quick", "--shard", "auto"][..],
            &["run", "quick", "--shard", "auto", "--out", "x"][..],
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let mut c = Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"));
            c.args(args)
                .current_dir(tmp.path())
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap())
                .env("HOME", tmp.path());
            for (k, v) in &vars {
                c.env(k, v);
            }
            let out = c.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{vars:?} {args:?}: {err}");
            assert!(!err.contains("panicked"), "{vars:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{vars:?}: {err}");
            let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
            assert!(left.is_empty(), "{vars:?} created {left:?}");
        }
    }
}

/// The committed shards of results/quick-shards merge again into the
/// committed merged run's rows, and their folders are left as they were.
#[test]
fn the_committed_shards_merge_into_the_committed_run() {
    let results = here().join("../../results/quick-shards");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("merged");
    let a = results.join("shard-1-of-2");
    let b = results.join("shard-2-of-2");
    let before = std::fs::read(a.join("results.csv")).unwrap();
    let m = cli(
        &[
            "merge",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let rows = |p: &Path| lazyinit_core::results::read_rows(p).unwrap();
    assert_eq!(
        rows(&out.join("results.csv")),
        rows(&results.join("merged/results.csv"))
    );
    assert_eq!(rows(&out.join("results.csv")).len(), 4);
    assert_eq!(std::fs::read(a.join("results.csv")).unwrap(), before);
}

/// The merged folder reads as one run everywhere: report, compare against
/// the unsharded run of the same spec, replay over its per-group data,
/// KCIDB, and the history (one run, four rows).
#[test]
fn a_merged_run_reads_as_one_run() {
    let results = here().join("../../results/quick-shards");
    let merged = results.join("merged/results.csv");
    let merged = merged.to_str().unwrap();
    let unsharded = results.join("unsharded/results.csv");
    let tmp = tempfile::tempdir().unwrap();
    let ok = |args: &[&str]| -> String {
        let o = cli(args, tmp.path());
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let report = ok(&["report", merged]);
    assert!(report.contains("4 rows, 4 cells, 0 failed"), "{report}");
    let compare = cli(
        &[
            "compare",
            "--baseline",
            unsharded.to_str().unwrap(),
            "--candidate",
            merged,
            "--metric",
            "ms_per_group",
        ],
        tmp.path(),
    );
    // Same host, same spec: no cell regressed, none missing (0, not 1 or 2).
    assert_eq!(
        compare.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&compare.stderr)
    );
    let replay = ok(&["replay", merged, "--after", "25", "--format", "csv"]);
    assert_eq!(replay.lines().count(), 1 + 4, "{replay}");
    let kcidb = ok(&["report", "--format", "kcidb", merged]);
    let v: serde_json::Value = serde_json::from_str(&kcidb).unwrap();
    assert_eq!(v["tests"].as_array().unwrap().len(), 4 * 3);
    let db = format!("sqlite:{}", tmp.path().join("h.sqlite").display());
    let folder = results.join("merged");
    let import = ok(&["history", "import", "--db", &db, folder.to_str().unwrap()]);
    assert!(import.contains("new run (4 rows added"), "{import}");
}

/// A copy of a committed shard's folder (its files, not its cells).
fn copy_shard(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        } else {
            std::fs::create_dir_all(to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

/// `--version` names the commit the binary was built from, as git says
/// it (`-dirty` when a tracked file differed).
#[test]
fn version_names_the_harness_commit() {
    let o = cli(&["--version"], &here());
    assert!(o.status.success());
    let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(here())
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    assert_eq!(head.len(), 40, "the tests run in a git checkout");
    assert!(
        v == format!("lazyinit-bench 0.1.0 ({head})")
            || v == format!("lazyinit-bench 0.1.0 ({head}-dirty)"),
        "{v} (HEAD {head})"
    );
}

/// Shards run by two commits of the harness are not one run: refused with
/// one line naming both, exit 2, nothing written; of one commit they merge
/// and merge.toml says it.
#[test]
fn merge_refuses_shards_of_two_harness_commits() {
    let results = here().join("../../results/quick-shards");
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    copy_shard(&results.join("shard-1-of-2"), &a);
    copy_shard(&results.join("shard-2-of-2"), &b);
    let set_commit = |dir: &Path, commit: &str| {
        let p = dir.join("shard.toml");
        let t: String = std::fs::read_to_string(&p)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("harness-commit"))
            .map(|l| format!("{l}\n"))
            .collect();
        let t = t.replace(
            "harness-version = \"0.1.0\"\n",
            &format!("harness-version = \"0.1.0\"\nharness-commit = \"{commit}\"\n"),
        );
        std::fs::write(&p, t).unwrap();
    };
    let one = "0f1e2d3c".repeat(5);
    let other = format!("{}-dirty", "c6a35ce0".repeat(5));
    set_commit(&a, &one);
    set_commit(&b, &other);
    let out = tmp.path().join("merged");
    let merge = || {
        cli(
            &[
                "merge",
                a.to_str().unwrap(),
                b.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            tmp.path(),
        )
    };
    let o = merge();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("by harness commit {one} and")) && err.contains(&other),
        "{err}"
    );
    assert!(!out.exists());
    // One row of shard 1 by the other commit (a resume by another build).
    set_commit(&a, &other);
    let csv = std::fs::read_to_string(a.join("results.csv")).unwrap();
    let mut lines: Vec<String> = csv.lines().map(String::from).collect();
    // The committed rows predate the column: it is read by its name.
    lines[0].push_str(",harness_commit");
    lines[1].push_str(&format!(",{one}"));
    lines[2].push_str(&format!(",{other}"));
    std::fs::write(a.join("results.csv"), lines.join("\n") + "\n").unwrap();
    let o = merge();
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!out.exists());
    // One commit: merged, and merge.toml names it.
    set_commit(&b, &other);
    let fixed = std::fs::read_to_string(a.join("results.csv"))
        .unwrap()
        .replace(&format!(",{one}\n"), &format!(",{other}\n"));
    assert!(!fixed.contains(&one));
    std::fs::write(a.join("results.csv"), fixed).unwrap();
    let o = merge();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let record = std::fs::read_to_string(out.join("merge.toml")).unwrap();
    assert!(
        record.contains(&format!("harness-commit = \"{other}\"")),
        "{record}"
    );
}

/// Every file under `dir` (relative path, bytes; a folder as `dir`).
fn files_under(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut all = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let v = match p.is_dir() {
                true => {
                    todo.push(p.clone());
                    b"dir".to_vec()
                }
                false => std::fs::read(&p).unwrap(),
            };
            all.insert(p.strip_prefix(dir).unwrap().to_path_buf(), v);
        }
    }
    all
}

/// Issue 52: a merge into an earlier merge keeps what the user put there
/// (the report and plots `report` wrote, notes, a folder of their own),
/// and refuses, changing nothing, when the new merge writes where a file
/// of theirs is. Before, the exchange removed them with the old merge.
#[test]
fn a_merge_over_an_earlier_merge_keeps_what_the_harness_did_not_write() {
    let results = here().join("../../results/quick-shards");
    let (a, b) = (results.join("shard-1-of-2"), results.join("shard-2-of-2"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("m");
    let ms = m.to_str().unwrap();
    let ok = |args: &[&str]| {
        let o = cli(args, tmp.path());
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    // Shard 1 alone first, then the report, plots and notes of the user.
    ok(&["merge", a, "--out", ms, "--allow-missing"]);
    ok(&[
        "report",
        "m/results.csv",
        "--out",
        "m/report.md",
        "--svg",
        "m/report.svg",
    ]);
    std::fs::write(m.join("notes.txt"), "mine\n").unwrap();
    std::fs::create_dir_all(m.join("mine/deeper")).unwrap();
    std::fs::write(m.join("mine/deeper/a.txt"), "a\n").unwrap();
    let theirs = |all: &std::collections::BTreeMap<PathBuf, Vec<u8>>| {
        all.iter()
            .filter(|(p, _)| {
                let p = p.to_string_lossy();
                p.starts_with("report") || p.starts_with("notes") || p.starts_with("mine")
            })
            .map(|(p, v)| (p.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    let before = theirs(&files_under(&m));
    assert_eq!(before.len(), 7, "{before:?}");
    // The same merge again, and both shards: the user's files stay.
    ok(&["merge", a, "--out", ms, "--allow-missing"]);
    assert_eq!(theirs(&files_under(&m)), before);
    ok(&["merge", a, b, "--out", ms]);
    assert_eq!(theirs(&files_under(&m)), before);
    let rows = lazyinit_core::results::read_rows(m.join("results.csv")).unwrap();
    assert_eq!(rows.len(), 4);
    // A file of the user's where the new merge writes (a folder named as
    // a cell the earlier merge did not have): refused, nothing changed.
    ok(&["merge", a, "--out", ms, "--allow-missing"]);
    let cell = rows
        .iter()
        .map(|r| r.cell_id.clone())
        .find(|c| !m.join(c).exists())
        .unwrap();
    std::fs::create_dir_all(m.join(&cell)).unwrap();
    std::fs::write(m.join(&cell).join("mine.txt"), "x\n").unwrap();
    let all = files_under(&m);
    let o = cli(&["merge", a, b, "--out", ms], tmp.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "{cell} is in the earlier merge but not written by a merge"
        )),
        "{err}"
    );
    assert_eq!(files_under(&m), all);
    let beside: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(beside.len(), 1, "nothing left beside the merge");
}
