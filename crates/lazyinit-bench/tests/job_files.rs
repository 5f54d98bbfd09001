//! The job files in examples/ checked by their ecosystems' own checkers
//! (check-jsonschema's GitHub workflow schema, kubernetes-validate against
//! the API's schemas, `bash -n`), installed by scripts/job-validators.sh;
//! a broken copy of each is refused (the checkers do check). And what the
//! jobs ask of `--shard auto` under each engine's variables is what the
//! binary finds.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder of the checkers' commands (installed if they are not).
fn checkers() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo().join("scripts/job-validators.sh"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/job-validators.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn check(tool: &Path, args: &[&str], file: &Path) -> Result<(), String> {
    let out = Command::new(tool).args(args).arg(file).output().unwrap();
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

fn examples(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("examples").join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// `text` with `from` replaced, in a file of the same name under `dir`.
fn broken(dir: &Path, file: &Path, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains(from), "{} has no `{from}`", file.display());
    let p = dir.join(file.file_name().unwrap());
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    p
}

#[test]
fn github_workflow_passes_the_workflow_schema() {
    let tool = checkers().join("check-jsonschema");
    let args = ["--builtin-schema", "vendor.github-workflows"];
    let files = examples("github-actions", "yml");
    assert_eq!(files.len(), 1);
    let tmp = tempfile::tempdir().unwrap();
    for f in &files {
        check(&tool, &args, f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let text = std::fs::read_to_string(f).unwrap();
        assert!(text.contains("--shard auto") && text.contains("lazyinit-bench merge"));
        let bad = broken(tmp.path(), f, "    steps:", "    stepz:");
        assert!(check(&tool, &args, &bad).is_err(), "a broken copy passed");
    }
}

#[test]
fn kubernetes_jobs_pass_the_api_schemas() {
    let tool = checkers().join("kubernetes-validate");
    let files = examples("kubernetes", "yaml");
    assert_eq!(files.len(), 2);
    let tmp = tempfile::tempdir().unwrap();
    for f in &files {
        check(&tool, &["--strict"], f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let bad = broken(tmp.path(), f, "  template:", "  templat:");
        assert!(
            check(&tool, &["--strict"], &bad).is_err(),
            "a broken copy passed"
        );
    }
    let job = std::fs::read_to_string(&files[1]).unwrap();
    assert!(job.contains("completionMode: Indexed") && job.contains("LAZYINIT_SHARD_COUNT"));
    // Nothing to edit per night: CronJobs, the night's folder named by its
    // Job (the pod's job-name label), the merge finding the newest night.
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(text.contains("kind: CronJob"), "{}", f.display());
        assert!(
            !text.contains("value: nightly-20"),
            "{}: a night's date",
            f.display()
        );
    }
    assert!(job.contains("fieldPath: metadata.labels['batch.kubernetes.io/job-name']"));
    let merge = std::fs::read_to_string(&files[0]).unwrap();
    assert!(
        merge.contains("-name 'lazyinit-nightly-[0-9]*'") && merge.contains("lazyinit-bench merge")
    );
}

#[test]
fn gitlab_pipeline_passes_the_gitlab_ci_schema() {
    let tool = checkers().join("check-jsonschema");
    let args = ["--builtin-schema", "vendor.gitlab-ci"];
    let files = examples("gitlab", "yml");
    assert_eq!(files.len(), 1);
    let tmp = tempfile::tempdir().unwrap();
    for f in &files {
        check(&tool, &args, f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let text = std::fs::read_to_string(f).unwrap();
        assert!(
            text.contains("parallel: 4")
                && text.contains("--shard auto")
                && text.contains("lazyinit-bench merge")
        );
        let bad = broken(tmp.path(), f, "  parallel: 4", "  parallel: four");
        assert!(check(&tool, &args, &bad).is_err(), "a broken copy passed");
    }
}

#[test]
fn slurm_scripts_parse() {
    let files = examples("slurm", "sbatch");
    assert_eq!(files.len(), 2);
    let bash = Path::new("/bin/bash");
    for f in &files {
        check(bash, &["-n"], f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
    let tmp = tempfile::tempdir().unwrap();
    let bad = broken(
        tmp.path(),
        &files[1],
        "exec lazyinit-bench",
        "exec lazyinit-bench (",
    );
    assert!(check(bash, &["-n"], &bad).is_err());
}

/// An engine's variables, the shard they mean, and a word of what says so.
type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);

/// `plan nightly --shard auto` under the variables each job file's engine
/// sets: the shard the job means, and the sentence naming the variables.
#[test]
fn auto_finds_the_shard_each_engine_gives() {
    let cases: &[Case] = &[
        (
            &[("JOB_COMPLETION_INDEX", "0"), ("LAZYINIT_SHARD_COUNT", "4")],
            "shard 1/4",
            "Kubernetes Indexed Job",
        ),
        (
            &[("LAZYINIT_SHARD", "3/4")],
            "shard 3/4",
            "LAZYINIT_SHARD=3/4",
        ),
        (
            &[("CI_NODE_INDEX", "4"), ("CI_NODE_TOTAL", "4")],
            "shard 4/4",
            "GitLab",
        ),
        (
            &[
                ("SLURM_ARRAY_TASK_ID", "1"),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
            ],
            "shard 2/4",
            "a Slurm array",
        ),
    ];
    for (env, shard, said) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"))
            .args(["plan", "nightly", "--shard", "auto"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{env:?}: {err}");
        assert!(
            err.starts_with(&format!("{shard} (--shard auto: ")) && err.contains(said),
            "{env:?}: {err}"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!(", {shard} — ")), "{text}");
    }
}
