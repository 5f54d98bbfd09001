//! Bad input and missing tools on the `run` path, as a user meets them:
//! one line on stderr, the documented exit code, and nothing created (no
//! results folder). No guest starts; each case takes milliseconds.

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str], path: Option<&Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"));
    c.args(args);
    if let Some(p) = path {
        c.env("PATH", p);
    }
    c.output().unwrap()
}

/// `error:` lines (a cause that repeats its line is not printed).
fn error_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.starts_with("error") || l.starts_with("  caused by"))
        .map(String::from)
        .collect()
}

#[test]
fn bad_input_and_missing_tools_say_one_line_and_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("res");
    let o = out.to_str().unwrap();
    let typo = tmp.path().join("typo.toml");
    std::fs::write(
        &typo,
        "name = \"t\"\narchs = [\"x86_64\"]\nhz = [250]\nsizes = [\"1GiB\"]\n",
    )
    .unwrap();
    let size = tmp.path().join("size.toml");
    std::fs::write(
        &size,
        "name = \"t\"\narches = [\"x86_64\"]\nhz = [250]\nsizes = [\"2TB\"]\n",
    )
    .unwrap();
    let empty = tempfile::tempdir().unwrap();
    let cell = [
        "--arch",
        "x86_64",
        "--hz",
        "250",
        "--variant",
        "nofix",
        "--size",
        "1GiB",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec!["run".into()];
        v.extend(extra.iter().map(|s| s.to_string()));
        v.extend(["--out".to_string(), o.to_string()]);
        v
    };
    let mut source = vec!["--source", "/no/such/tree"];
    source.extend(cell);
    let cases: Vec<(Vec<String>, Option<&Path>, u8, &str)> = vec![
        (
            with(&source),
            None,
            2,
            "kernel source /no/such/tree: no such folder",
        ),
        (
            with(&[typo.to_str().unwrap()]),
            None,
            2,
            "line 2: unknown field `archs`",
        ),
        (
            with(&[size.to_str().unwrap()]),
            None,
            2,
            "`2TB` is not a size",
        ),
        // Kernel build tools missing (an empty PATH): 4 on the run path,
        // found before the results folder exists.
        (
            with(&cell),
            Some(empty.path()),
            4,
            "is missing: install it with `apt-get install",
        ),
    ];
    for (args, path, code, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out_ = run(&args, path);
        let lines = error_lines(&out_);
        assert_eq!(out_.status.code(), Some(code.into()), "{args:?}: {lines:?}");
        assert_eq!(lines.len(), 1, "{args:?}: one line, got {lines:?}");
        assert!(lines[0].contains(needle), "{args:?}: {lines:?}");
        assert!(!out.exists(), "{args:?} created {}", out.display());
    }
}
