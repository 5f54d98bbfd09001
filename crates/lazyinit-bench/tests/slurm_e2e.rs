//! The nightly's Slurm job files on a real Slurm (scripts/slurm.sh: one
//! node, slurmctld, slurmd and munge on loopback; LAZYINIT_TEST_SLURM is its
//! slurm.conf). `examples/slurm/nightly-shards.sbatch` is submitted as it
//! is committed (a small spec through SPEC, the array's size on sbatch's
//! command line), `merge.sbatch` after it with `--dependency=afterany`;
//! both run real guests and the real merge. The merged run then goes
//! through the nightly's other steps (scripts/nightly.sh --results:
//! import into the PostgreSQL history, the gate, changes, the site).
//! Without Slurm or PostgreSQL this test fails, never skips.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lazyinit-bench"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

use lazyinit_core::testing::output_text as text;

/// A client command of the test's Slurm, run in `dir`, with the harness
/// on PATH (a job runs with the environment it was submitted with).
fn slurm(conf: &str, dir: &Path, cmd: &str) -> Command {
    let mut c = Command::new(cmd);
    let path = format!(
        "{}:{}",
        bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    c.current_dir(dir).env("SLURM_CONF", conf).env("PATH", path);
    c
}

use lazyinit_core::testing::fresh_postgres;

/// The jobs of this test, cancelled whatever way it ends.
struct Jobs {
    conf: String,
    dir: PathBuf,
    ids: Vec<String>,
}

impl Drop for Jobs {
    fn drop(&mut self) {
        if !self.ids.is_empty() {
            let _ = slurm(&self.conf, &self.dir, "scancel")
                .args(&self.ids)
                .output();
        }
    }
}

fn submit(jobs: &mut Jobs, args: &[&str], envs: &[(&str, &str)]) -> String {
    let mut c = slurm(&jobs.conf, &jobs.dir, "sbatch");
    c.arg("--parsable").args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "sbatch {args:?}: {}", text(&o));
    // `--parsable`: the id, then `;cluster` on a multi-cluster setup.
    let out = String::from_utf8_lossy(&o.stdout);
    let id = out.trim().split(';').next().unwrap().to_string();
    assert!(
        id.chars().all(|c| c.is_ascii_digit()) && !id.is_empty(),
        "{out}"
    );
    jobs.ids.push(id.clone());
    id
}

/// Waits until Slurm knows none of `ids` as pending or running.
fn wait_all(jobs: &Jobs, deadline: Duration) {
    let t0 = Instant::now();
    loop {
        let o = slurm(&jobs.conf, &jobs.dir, "squeue")
            .args(["-h", "-o", "%i %T", "-j", &jobs.ids.join(",")])
            .output()
            .unwrap();
        let queued = String::from_utf8_lossy(&o.stdout).trim().to_string();
        // squeue fails for ids it no longer knows: they have ended.
        if queued.is_empty() || !o.status.success() {
            return;
        }
        assert!(
            t0.elapsed() < deadline,
            "the jobs did not end in {deadline:?}: {queued}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

#[test]
fn the_nightly_runs_as_a_slurm_array_and_its_merge_then_the_gate_and_the_site() {
    let conf = std::env::var("LAZYINIT_TEST_SLURM").unwrap_or_else(|_| {
        panic!("LAZYINIT_TEST_SLURM is not set: run scripts/slurm.sh (scripts/test.sh does) and set it to the slurm.conf it prints")
    });
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let results = dir.join("results");
    let vols = dir.join("volumes");
    std::fs::create_dir_all(&vols).unwrap();
    // Two cells (x86_64 HZ=250 with and without the fix, 8 GiB), one per
    // task of a 2-task array, on the virtual clock as the nightly
    // (specs/nightly.toml): measured, exact.
    let spec = dir.join("small.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"slurm-small\"\nprovider = \"qemu\"\narches = [\"x86_64\"]\n\
             sources = [\"debian-6.1\"]\nhz = [250]\nvariants = [\"nofix\", \"fix\"]\n\
             sizes = [\"8GiB\"]\nrepetitions = 1\nstorage-profile = \"ebs\"\n\
             [provider-config.qemu]\nclock = \"virtual\"\nvolume-dir = \"{}\"\n",
            vols.display()
        ),
    )
    .unwrap();
    let examples = repo().join("examples/slurm");
    let shards_file = examples.join("nightly-shards.sbatch");
    let merge_file = examples.join("merge.sbatch");
    let mut jobs = Jobs {
        conf: conf.clone(),
        dir: dir.clone(),
        ids: Vec::new(),
    };
    let (spec_s, results_s) = (spec.display().to_string(), results.display().to_string());
    let env = [("SPEC", spec_s.as_str()), ("RESULTS", results_s.as_str())];
    let array = submit(
        &mut jobs,
        &[
            "--array=0-1",
            "--cpus-per-task=1",
            "--mem=2G",
            shards_file.to_str().unwrap(),
        ],
        &env,
    );
    let merge = submit(
        &mut jobs,
        &[
            &format!("--dependency=afterany:{array}"),
            &format!("--export=ALL,SHARDS_JOB={array}"),
            merge_file.to_str().unwrap(),
        ],
        &env,
    );
    wait_all(&jobs, Duration::from_secs(30 * 60));
    jobs.ids.clear();

    // Each task's output, and the merge's, as the files name them.
    let log = |name: String| {
        std::fs::read_to_string(dir.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let task_logs: Vec<String> = (0..2)
        .map(|k| log(format!("lazyinit-nightly-{array}_{k}.out")))
        .collect();
    let merge_log = log(format!("lazyinit-nightly-merge-{merge}.out"));
    let all_logs = format!("{}\n{merge_log}", task_logs.join("\n"));
    for (k, l) in task_logs.iter().enumerate() {
        // --shard auto read the array's variables (from 0, of 2).
        assert!(
            l.contains(&format!("shard {}/2", k + 1)) && l.contains("SLURM_ARRAY_TASK_ID"),
            "task {k}:\n{l}"
        );
    }
    let night = results.join(format!("nightly-{array}"));
    let merged = night.join("merged");
    let rows = lazyinit_core::results::read_untorn_rows(merged.join("results.csv"))
        .unwrap_or_else(|e| panic!("{e}\n{all_logs}"));
    assert_eq!(rows.len(), 2, "{all_logs}");
    for r in &rows {
        assert_eq!(
            r.status,
            lazyinit_core::results::Status::Ok,
            "{}: {}\n{all_logs}",
            r.cell_id,
            r.error
        );
        assert!(r.measured.lazyinit_s.is_some_and(|s| s > 0.0), "{r:?}");
        assert!(r.testbed.accel.is_virtual_clock(), "{}", r.testbed.accel);
        assert!(!r.measured.estimated, "the nightly measures: {r:?}");
        lazyinit_core::testing::check_virtual_exact(
            &r.measured,
            250,
            u64::from(r.axes.wait_mult),
            r.axes.variant == lazyinit_core::Variant::Fix,
        )
        .unwrap_or_else(|e| panic!("{}: {e}\n{all_logs}", r.cell_id));
    }
    let mut cells: Vec<_> = rows.iter().map(|r| r.cell_id.clone()).collect();
    cells.sort();
    cells.dedup();
    assert_eq!(cells.len(), 2, "{cells:?}");
    assert!(merged.join("merge.toml").is_file(), "{all_logs}");
    // merge.sbatch's report, printed into its job's output.
    assert!(merge_log.contains("| nofix / fix |"), "{merge_log}");

    // The rest of the nightly on the merged run: import into PostgreSQL,
    // the gate, changes, the site.
    let db = fresh_postgres("nightly");
    let site = dir.join("site");
    let junit = dir.join("gate.xml");
    let o = Command::new("bash")
        .arg(repo().join("scripts/nightly.sh"))
        .args(["--db", &db, "--site"])
        .arg(&site)
        .arg("--junit")
        .arg(&junit)
        .arg("--results")
        .arg(&merged)
        .env("LAZYINIT_BENCH", bin())
        .output()
        .unwrap();
    let said = text(&o);
    // A first run of its series: nothing to judge it against (unknown,
    // exit 0), said in the gate's report.
    assert_eq!(o.status.code(), Some(0), "{said}");
    let gate = std::fs::read_to_string(&junit).unwrap();
    assert!(gate.contains("<testsuite"), "{gate}");
    // One run in the history, whatever is imported and in what order: the
    // shards' folders after the merged one add none.
    let mut args = vec![
        "history".to_string(),
        "import".into(),
        "--db".into(),
        db.clone(),
    ];
    for shard in ["shard-0", "shard-1"] {
        args.push(night.join(shard).display().to_string());
    }
    let o = Command::new(bin()).args(&args).output().unwrap();
    let said = text(&o);
    assert_eq!(o.status.code(), Some(0), "{said}");
    assert_eq!(
        said.matches(": known run (0 rows added").count(),
        2,
        "{said}"
    );
    let index = std::fs::read_to_string(site.join("index.html")).unwrap();
    assert!(index.contains("slurm-small"), "the site shows the run");
    // Its series are the virtual clock's, named so, and measured.
    let mut pages = String::new();
    let mut dirs = vec![site.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if let Ok(t) = std::fs::read_to_string(&p) {
                pages.push_str(&t);
            }
        }
    }
    assert!(
        pages.contains("tcg-icount0"),
        "no series of the virtual clock on the site"
    );
    assert!(
        !pages.contains("\"estimated\":true"),
        "the nightly's points are measurements"
    );
}
