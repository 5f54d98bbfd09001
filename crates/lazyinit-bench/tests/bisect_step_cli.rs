//! Issue 41: under `git bisect run`, every error of `bisect-step`, a bad
//! argument included, exits 255 (git's "abort"), never 2 (which git reads
//! as "bad" and so names a first bad commit without one measurement). Run
//! with `git bisect run` itself on a tiny repository made here; no guest.

use std::path::Path;
use std::process::Command;

use lazyinit_core::testing::{git, git_ok as ok};

/// A repository of five commits.
fn tiny_repo(dir: &Path) -> Vec<String> {
    ok(dir, &["init", "-q", "-b", "main"]);
    (0..5)
        .map(|i| {
            std::fs::write(dir.join("f"), format!("{i}\n")).unwrap();
            ok(dir, &["add", "f"]);
            ok(dir, &["commit", "-q", "-m", &format!("c{i}")]);
            ok(dir, &["rev-parse", "HEAD"])
        })
        .collect()
}

#[test]
fn a_bad_bisect_step_argument_aborts_git_bisect_run() {
    let bin = env!("CARGO_BIN_EXE_lazyinit-bench");
    for step_args in [
        &["bisect-step", "--no-such-flag"][..],
        &["-v", "bisect-step", "--source"][..],
        &["bisect-step", "--source", ".", "--arch", "sparc"][..],
        &["bisect-step", "unexpected-positional"][..],
        // A typo of the subcommand (issue 52): exit 2 would read as bad.
        &["bisect-stp", "--source", "."][..],
        &["bisect_step"][..],
    ] {
        let d = tempfile::tempdir().unwrap();
        let commits = tiny_repo(d.path());
        ok(d.path(), &["bisect", "start", &commits[4], &commits[0]]);
        let mut args = vec!["bisect", "run", bin];
        args.extend_from_slice(step_args);
        let o = git(d.path(), &args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            !o.status.success(),
            "{step_args:?}: git bisect run succeeded: {text}"
        );
        assert!(
            !text.contains("is the first bad commit"),
            "{step_args:?}: git named a commit without a measurement: {text}"
        );
        assert!(text.contains("255"), "{step_args:?}: {text}");
        // The step itself, outside git: 255.
        let o = Command::new(bin)
            .args(step_args)
            .current_dir(d.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(255), "{step_args:?}: {o:?}");
    }
    // --help is no error: it still exits 0.
    let o = Command::new(bin)
        .args(["bisect-step", "--help"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    // Other commands keep exit 2 for bad arguments.
    let o = Command::new(bin)
        .args(["report", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// Near misses of `bisect-step` abort; other commands and their typos keep
/// clap's exit 2.
#[test]
fn only_bisect_step_and_its_near_misses_exit_255() {
    let bin = env!("CARGO_BIN_EXE_lazyinit-bench");
    for (args, code) in [
        (&["bisectstep"][..], 255),
        (&["Bisect-Step", "--x"][..], 255),
        (&["bisect", "--no-such-flag"][..], 2),
        (&["plan", "--no-such-flag"][..], 2),
        (&["rnu"][..], 2),
    ] {
        let o = Command::new(bin).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(code), "{args:?}: {o:?}");
    }
}
