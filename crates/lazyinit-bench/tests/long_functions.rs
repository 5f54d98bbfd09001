//! No function in `crates/*/src` over 80 lines without a stated reason: a
//! `//` line right above its docs and attributes (`// Long: ...`), as
//! `scripts/long-functions.py` reads them (docs/results-folder.md, "Long
//! functions"). The script is the one rule; this runs it, and first shows
//! on a made-up crate that it does fail.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The script's exit code and what it printed.
fn check(root: &Path) -> (i32, String) {
    let out = Command::new("python3")
        .arg(repo().join("scripts/long-functions.py"))
        .arg("--unexplained")
        .arg("--root")
        .arg(root)
        .output()
        .expect("python3 (scripts/setup-host.sh installs it)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// A function of `n` lines (signature and braces included).
fn function(name: &str, n: usize) -> String {
    let body: String = (0..n - 2)
        .map(|i| format!("    let _x{i} = {i};\n"))
        .collect();
    format!("fn {name}() {{\n{body}}}\n")
}

#[test]
fn the_check_fails_on_a_long_function_with_no_reason() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("some-crate/src");
    std::fs::create_dir_all(&src).unwrap();
    let reasoned = format!(
        "// Long: one straight sequence.\n/// Docs.\n#[allow(dead_code)]\n{}",
        function("explained", 90)
    );
    std::fs::write(src.join("a.rs"), reasoned + "\n" + &function("short", 80)).unwrap();
    let (code, text) = check(d.path());
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("1 over 80 lines, 0 without a reason"),
        "{text}"
    );

    // A doc comment alone is no reason.
    std::fs::write(
        src.join("b.rs"),
        format!("/// Docs.\n{}", function("grown", 81)),
    )
    .unwrap();
    let (code, text) = check(d.path());
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("b.rs:2 grown  (no reason above it)"),
        "{text}"
    );
}

#[test]
fn every_long_function_in_the_crates_says_why() {
    let (code, text) = check(&repo().join("crates"));
    assert_eq!(
        code, 0,
        "a function over 80 lines with no reason above it: split it, or write \
         the reason in a `// Long: ...` line above its docs\n{text}"
    );
}
