//! git has one module (`lazyinit_core::git`): what a type cannot keep so,
//! this test does. No source file outside it builds a `git` command, and
//! none writes a `git:` identity by hand; and every `git:` identity the
//! committed results hold (the bisections' rows, the kernel manifests
//! kept beside runs) reads as a [`GitIdentity`] and writes back the same
//! bytes, so moving the reader and writer changed no stored text.

use std::path::{Path, PathBuf};

use lazyinit_core::{GitIdentity, SourceId};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let p = e.expect("a readable entry").path();
        if p.is_dir() {
            files(&p, keep, out);
        } else if keep(&p) {
            out.push(p);
        }
    }
}

/// A source file's code: no unit tests (the `#[cfg(test)] mod tests` at
/// its end), no comment lines.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let end = text
        .find("\n#[cfg(test)]\nmod tests {")
        .unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `src/` file of the workspace's crates, relative to it.
fn sources() -> Vec<(String, String)> {
    let root = workspace();
    let mut found = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            files(
                &src,
                &|p| p.extension().is_some_and(|x| x == "rs"),
                &mut found,
            );
        }
    }
    assert!(found.len() > 50, "found only {} source files", found.len());
    found
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(&root).unwrap();
            (rel.to_string_lossy().into_owned(), code(&f))
        })
        .collect()
}

/// The tests' own helpers (`testing::git`, fixed authors and no user
/// configuration) make the repositories tests read: they are the tests'
/// equipment, not the harness's git.
const GIT_MODULE: &str = "crates/lazyinit-core/src/git/";
const TEST_HELPERS: &str = "crates/lazyinit-core/src/testing.rs";

#[test]
fn only_the_git_module_builds_a_git_command_or_writes_a_git_identity() {
    let mut seen_module = false;
    let mut by_hand = Vec::new();
    for (rel, code) in sources() {
        if rel.starts_with(GIT_MODULE) {
            seen_module |= code.contains("Command::new(\"git\")");
            continue;
        }
        if rel == TEST_HELPERS {
            continue;
        }
        // A builder, or the identity's text spelled out.
        for spelled in [
            "Command::new(\"git\")",
            "\"GIT_OPTIONAL_LOCKS\"",
            "\"git:",
            "'git:",
        ] {
            if code.contains(spelled) {
                by_hand.push(format!("{rel}: {spelled}"));
            }
        }
    }
    assert!(
        seen_module,
        "{GIT_MODULE} builds no git command: is it still the git module?"
    );
    assert!(
        by_hand.is_empty(),
        "git by hand outside {GIT_MODULE} (use lazyinit_core::git::Git and lazyinit_core::GitIdentity):\n{}",
        by_hand.join("\n")
    );
}

#[test]
fn every_committed_git_identity_reads_and_writes_back_the_same() {
    let root = workspace().join("results");
    let mut csvs = Vec::new();
    files(&root, &|p| p.ends_with("results.csv"), &mut csvs);
    let mut manifests = Vec::new();
    files(
        &root,
        &|p| p.file_name().is_some_and(|n| n == "kernel-manifest.json"),
        &mut manifests,
    );
    let (mut rows, mut kept) = (0, 0);
    for csv in &csvs {
        let mut r = csv::Reader::from_path(csv).unwrap();
        let head = r.headers().unwrap().clone();
        let Some(col) = head.iter().position(|h| h == "kernel_source") else {
            continue;
        };
        for rec in r.records() {
            let rec = rec.unwrap();
            let text = &rec[col];
            if !text.starts_with(GitIdentity::PREFIX) {
                continue;
            }
            let id = SourceId::from(text);
            assert!(
                matches!(&id, SourceId::Git(g) if g.is_commit()),
                "{}: {text} is not read as a commit: {id:?}",
                csv.display()
            );
            assert_eq!(id.to_string(), text, "{}", csv.display());
            rows += 1;
        }
    }
    for m in &manifests {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(m).unwrap()).unwrap();
        let text = v["source_identity"].as_str().unwrap();
        if text.starts_with(GitIdentity::PREFIX) {
            let g: GitIdentity = text
                .parse()
                .unwrap_or_else(|e| panic!("{}: {e}", m.display()));
            assert_eq!(g.to_string(), text, "{}", m.display());
            kept += 1;
        }
    }
    // The bisections' rows (72 when this test was written) and the
    // distro-config runs' manifests (2): a test that found none would
    // check nothing.
    assert!(
        rows >= 60 && kept >= 2,
        "only {rows} rows and {kept} manifests with a git: identity under results/"
    );
}
