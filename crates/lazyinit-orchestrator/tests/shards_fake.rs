//! Shards and merge on the fake provider: the real runner writes each
//! shard's folder (scripted guests in process), the real merge reads them.
//! The same with QEMU guests is crates/lazyinit-bench/tests/shards_e2e.rs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lazyinit_core::events::EventSink;
use lazyinit_core::exit::{self, ExitCode};
use lazyinit_core::results::Status;
use lazyinit_core::RunFolder;
use lazyinit_orchestrator::fake::{rows_in, Answer, Configs, FakeSpec, Lab};
use lazyinit_orchestrator::merge::{merge, MergeError, MergeRecord};
use lazyinit_orchestrator::record::ShardRecord;
use lazyinit_orchestrator::{RunError, RunSummary, Shard};

/// Four cells, each its own kernel: both arches, no fix and fix, 1 GiB.
fn spec(name: &str) -> FakeSpec {
    let text = format!(
        "name = \"{name}\"\narches = [\"x86_64\", \"arm64\"]\nhz = [250]\nsizes = [\"1GiB\"]\n\
         storage-profile = \"none\"\npoll-interval = \"200ms\"\n"
    );
    FakeSpec::parse(&text, "test").unwrap()
}

fn shard(k: u32, n: u32) -> Shard {
    Shard::new(k, n).unwrap()
}

async fn run_shard(
    spec: &FakeSpec,
    lab: &Lab,
    s: Option<Shard>,
    dir: &Path,
) -> Result<RunSummary, RunError> {
    let provider = lab.provider();
    let whole = lazyinit_orchestrator::plan(spec, &provider, 20_000);
    let plan = match s {
        Some(s) => whole.shard(s),
        None => whole,
    };
    let opts = lazyinit_orchestrator::RunOptions {
        folder: RunFolder::new(dir),
        on_claim: None,
        events: EventSink::discard(),
        cancel: Arc::default(),
        prioritize_sensitive: true,
        boot_timeout: Duration::from_secs(5),
        artifacts: Arc::new(lab.artifacts()),
        shard_chosen_by: s.map(|s| format!("--shard {s}")).unwrap_or_default(),
    };
    lazyinit_orchestrator::run(spec, &plan, Arc::new(provider), opts).await
}

fn merge_into(inputs: &[&Path], out: &Path, allow_missing: bool) -> Result<(), MergeError> {
    let inputs: Vec<PathBuf> = inputs.iter().map(|p| p.to_path_buf()).collect();
    merge::<Configs>(&inputs, out, allow_missing, "lazyinit-bench merge (test)").map(|_| ())
}

fn refusal(r: Result<(), MergeError>) -> String {
    let e = r.unwrap_err();
    assert_eq!(e.exit_code(), exit::BAD_INPUT, "{e}");
    e.to_string()
}

/// Every file under `dir` with its bytes: what "inputs never touched" means.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                walk(&e.path(), out);
            } else if t.is_file() {
                out.insert(e.path(), std::fs::read(e.path()).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_at_once_merge_into_the_plans_cells() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("s1"), tmp.path().join("s2"));
    let s = spec("fake");
    let (lab1, lab2) = (
        Lab::new(tmp.path().join("l1")),
        Lab::new(tmp.path().join("l2")),
    );
    let (r1, r2) = tokio::join!(
        run_shard(&s, &lab1, Some(shard(1, 2)), &a),
        run_shard(&s, &lab2, Some(shard(2, 2)), &b)
    );
    assert_eq!((r1.unwrap().ok, r2.unwrap().ok), (2, 2));
    // Each shard builds only the kernels its cells boot: 2 of the 4.
    for lab in [&lab1, &lab2] {
        let builds = lab
            .journal()
            .iter()
            .filter(|l| l.starts_with("build "))
            .count();
        assert_eq!(builds, 2, "{:?}", lab.journal());
    }
    let record = ShardRecord::read(&RunFolder::new(&a).shard_toml())
        .unwrap()
        .unwrap();
    assert_eq!((record.shard, record.cells.len()), (shard(1, 2), 2));
    assert_eq!(record.chosen_by, "--shard 1/2");
    assert_eq!(record.hosts.len(), 1);

    let before = (snapshot(&a), snapshot(&b));
    let out = tmp.path().join("merged");
    merge_into(&[&b, &a], &out, false).unwrap();
    assert_eq!((snapshot(&a), snapshot(&b)), before, "inputs untouched");

    let rows = rows_in(&out);
    assert_eq!(rows.len(), 4);
    let plan = lazyinit_orchestrator::plan(&s, &lab1.provider(), 20_000);
    let mut want: Vec<_> = plan.cells.iter().map(|c| c.id.clone()).collect();
    let mut got: Vec<_> = rows.iter().map(|r| r.cell_id.clone()).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    let host = lazyinit_orchestrator::record::hostname();
    for r in &rows {
        assert_eq!(r.status, Status::Ok);
        assert_eq!(r.run_id, plan.run_id, "one run");
        assert!(r.shard == "1/2" || r.shard == "2/2", "{}", r.shard);
        assert_eq!(r.host, host);
        let cell = RunFolder::new(&out).cell(&r.cell_id);
        assert!(cell.groups_csv().is_file(), "{}", r.cell_id);
    }
    // Shard 1's rows first, then shard 2's, whatever order they came in.
    assert_eq!(rows[0].shard, "1/2");
    assert_eq!(rows[3].shard, "2/2");
    let merged = RunFolder::new(&out);
    let m: MergeRecord = toml::from_str(&merged.merge_toml().read_to_string().unwrap()).unwrap();
    assert_eq!((m.shard_count, m.shards.len(), m.missing.len()), (2, 2, 0));
    for k in ["shard-1-of-2", "shard-2-of-2"] {
        assert!(merged.shard_files(k).shard_toml().is_file(), "{k}");
        assert!(merged.shard_files(k).command_txt().is_file(), "{k}");
    }
    assert!(!merged.lock().exists());
    assert_eq!(
        merged.spec_toml().read_to_string().unwrap(),
        RunFolder::new(&a).spec_toml().read_to_string().unwrap()
    );
    // No half-built folder is left beside it.
    let beside: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        beside
            .iter()
            .all(|n| !n.to_string_lossy().contains("merging")),
        "{beside:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_of_two_specs_a_missing_shard_and_overlaps_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let lab = Lab::new(tmp.path().join("lab"));
    let (a, b, other) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("o"),
    );
    run_shard(&spec("fake"), &lab, Some(shard(1, 2)), &a)
        .await
        .unwrap();
    run_shard(&spec("fake"), &lab, Some(shard(2, 2)), &b)
        .await
        .unwrap();
    run_shard(&spec("other"), &lab, Some(shard(2, 2)), &other)
        .await
        .unwrap();
    let out = tmp.path().join("merged");

    let e = refusal(merge_into(&[&a, &other], &out, false));
    assert!(
        e.contains("ran spec fake-") && e.contains("ran other-"),
        "{e}"
    );
    assert!(
        e.contains(&a.display().to_string()) && e.contains(&other.display().to_string()),
        "{e}"
    );

    let e = refusal(merge_into(&[&a], &out, false));
    assert!(
        e.starts_with("2 of the plan's 4 cells are missing: shard 2/2 (not given: "),
        "{e}"
    );
    for id in ShardRecord::read(&RunFolder::new(&b).shard_toml())
        .unwrap()
        .unwrap()
        .cells
    {
        assert!(e.contains(&id), "{e}");
    }
    assert!(e.contains("--allow-missing"), "{e}");

    // A shard killed while writing its last row: refused, not merged as a
    // measurement (seen merging it, with read_rows).
    let csv = RunFolder::new(&b).results_csv().shown();
    let whole_b = std::fs::read(&csv).unwrap();
    assert_eq!(whole_b.last(), Some(&b'\n'));
    // Its newline gone, the last row's fields still parse.
    std::fs::write(&csv, &whole_b[..whole_b.len() - 1]).unwrap();
    let e = refusal(merge_into(&[&a, &b], &out, false));
    assert!(
        e.contains("the last line is torn") && e.contains("resume"),
        "{e}"
    );
    assert!(!out.exists());
    std::fs::write(&csv, &whole_b).unwrap();

    let e = refusal(merge_into(&[&a, &a], &out, false));
    assert!(e.contains("shard 1/2 is given twice"), "{e}");
    let e = refusal(merge_into(&[&a, &b], &a.join("inside"), false));
    assert!(e.contains("is inside"), "{e}");
    let whole = tmp.path().join("whole");
    run_shard(&spec("fake"), &lab, None, &whole).await.unwrap();
    let e = refusal(merge_into(&[&a, &whole], &out, false));
    assert!(e.contains("is not a shard's folder"), "{e}");
    assert!(!out.exists(), "nothing written by a refused merge");

    // What is there, with the missing cells recorded.
    merge_into(&[&a], &out, true).unwrap();
    let m: MergeRecord =
        toml::from_str(&RunFolder::new(&out).merge_toml().read_to_string().unwrap()).unwrap();
    assert_eq!(m.missing.len(), 2);
    assert_eq!(rows_in(&out).len(), 2);
    // Merged again with every shard: the earlier merge is replaced.
    merge_into(&[&a, &b], &out, false).unwrap();
    assert_eq!(rows_in(&out).len(), 4);
    // But a folder that is not a merge is never overwritten.
    let e = refusal(merge_into(&[&a, &b], &whole, false));
    assert!(e.contains("not empty and not a merged run"), "{e}");
}

/// A shard that failed is rerun alone into its folder (the cells that
/// failed run again) and merged again; its folder takes no other shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_shard_is_rerun_alone_and_merged_again() {
    let tmp = tempfile::tempdir().unwrap();
    let s = spec("fake");
    let plan = lazyinit_orchestrator::plan(&s, &Lab::new(tmp.path().join("x")).provider(), 20_000);
    let victim = plan.shard(shard(2, 2)).cells[0].id.clone();
    let v = victim.clone();
    let failing = Lab::with_hook(
        tmp.path().join("l1"),
        Arc::new(move |step: &str, cell: &str| match (step, cell == v) {
            ("mkfs", true) => Answer::Fail("disk on fire".into()),
            _ => Answer::Normal,
        }),
    );
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let lab = Lab::new(tmp.path().join("l2"));
    run_shard(&s, &lab, Some(shard(1, 2)), &a).await.unwrap();
    let r = run_shard(&s, &failing, Some(shard(2, 2)), &b)
        .await
        .unwrap();
    assert_eq!((r.ok, r.failed), (1, 1));
    let out = tmp.path().join("merged");
    let e = refusal(merge_into(&[&a, &b], &out, false));
    assert!(e.contains(&format!("has no ok row of {victim})")), "{e}");

    // The wrong shard into its folder is refused before anything runs.
    let e = run_shard(&s, &lab, Some(shard(1, 2)), &b)
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), exit::BAD_INPUT);
    assert!(
        exit::one_line(&e).contains("it holds shard 2/2 and this run is shard 1/2"),
        "{e}"
    );
    let e = run_shard(&s, &lab, None, &b).await.unwrap_err();
    assert!(exit::one_line(&e).contains("rerun with --shard 2/2"), "{e}");

    let again = Lab::new(tmp.path().join("l3"));
    let r = run_shard(&s, &again, Some(shard(2, 2)), &b).await.unwrap();
    assert_eq!((r.ok, r.skipped), (1, 1));
    merge_into(&[&a, &b], &out, false).unwrap();
    let rows = rows_in(&out);
    assert_eq!(rows.len(), 5, "the failed row is kept beside the good one");
    assert_eq!(rows.iter().filter(|r| r.status == Status::Ok).count(), 4);
}
