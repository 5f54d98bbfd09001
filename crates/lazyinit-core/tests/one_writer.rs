//! A results folder has one writer (`lazyinit_core::writer`, with
//! `results.rs` for the rows): no other source file of the workspace opens
//! a file for writing unless it is listed here, with what it writes
//! instead. A new writer fails this test until it goes through the owner
//! or, if it writes outside results folders, is listed with its reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Calls that open (or make) a file or folder for writing.
const WRITES: &[&str] = &[
    "File::create",
    "OpenOptions::new",
    "fs::write(",
    "create_dir",
    "fs::rename(",
    "fs::copy(",
];

/// The owner: every file of a run's or a cell's folder.
const OWNER: &[&str] = &[
    "crates/lazyinit-core/src/writer.rs",
    "crates/lazyinit-core/src/results.rs",
];

/// Files that write, and where: none of it is in a results folder.
const ELSEWHERE: &[(&str, &str)] = &[
    (
        "crates/lazyinit-bench/src/cmd/bisect.rs",
        "a bisect folder's log, step table, summary and gathered rows (each sample's run folder is the runner's)",
    ),
    (
        "crates/lazyinit-bench/src/cmd/bisect/session.rs",
        "a bisect folder's skip notes",
    ),
    ("crates/lazyinit-bisect/src/git.rs", "the bisect's private worktree in the cache"),
    ("crates/lazyinit-site/src/publish.rs", "the published site"),
    (
        "crates/lazyinit-history/src/store.rs",
        "the default history's folder, made only by a command that creates the history",
    ),
    (
        "crates/lazyinit-core/src/output.rs",
        "the file a command's --out names (report, compare, replay, kcidb)",
    ),
    (
        "crates/lazyinit-orchestrator/src/merge.rs",
        "a merged run, built whole in a new folder beside --out and renamed into place (no run writes it)",
    ),
    ("crates/lazyinit-orchestrator/src/token.rs", "the host-wide token's folder and lock"),
    ("crates/lazyinit-ssh/src/runkeys.rs", "a run's own key folder in the state directory"),
    (
        "crates/lazyinit-report/src/plot/mod.rs",
        "an SVG at a path its caller names (tests; the CLI writes through output.rs)",
    ),
    (
        "crates/lazyinit-image/src/apt.rs",
        "the image cache's package downloads",
    ),
    ("crates/lazyinit-image/src/cache.rs", "the image cache"),
    (
        "crates/lazyinit-image/src/lib.rs",
        "the image cache's package folder",
    ),
    (
        "crates/lazyinit-kernel/src/build.rs",
        "kernel trees and builds in the cache",
    ),
    (
        "crates/lazyinit-kernel/src/debian.rs",
        "Debian sources in the cache",
    ),
    (
        "crates/lazyinit-kernel/src/fetch.rs",
        "downloads into the cache",
    ),
    (
        "crates/lazyinit-kernel/src/source.rs",
        "kernel sources in the cache",
    ),
    (
        "crates/lazyinit-kernel/src/seed.rs",
        "a kernel tree's file list in the cache's build slot",
    ),
    (
        "crates/lazyinit-orchestrator/src/fake.rs",
        "the fake lab's kernel placeholders",
    ),
    (
        "crates/lazyinit-qemu/src/accel.rs",
        "opens /dev/kvm to probe it",
    ),
    (
        "crates/lazyinit-qemu/src/lib.rs",
        "the provider's volume folder",
    ),
    (
        "crates/lazyinit-qemu/src/nbd/mod.rs",
        "the volume file it serves",
    ),
    (
        "crates/lazyinit-qemu/src/volume.rs",
        "sparse volumes in the volume folder",
    ),
    ("crates/lazyinit-ssh/src/keys.rs", "the project's SSH keys"),
    (
        "crates/lazyinit-twin/src/controller.rs",
        "the twin's own state folder",
    ),
    (
        "crates/lazyinit-twin/src/endpoints.rs",
        "the twin's endpoint files",
    ),
    ("crates/lazyinit-twin/src/moto.rs", "the EC2 emulator's log"),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let p = e.expect("a readable entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a source file without its unit tests (a `tests.rs`, or the
/// `#[cfg(test)] mod tests` at its end) and without comment lines.
fn code(path: &Path) -> String {
    if path.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
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

/// Each `src/` file of the workspace that writes, and how many times.
fn writers() -> BTreeMap<String, usize> {
    let root = workspace();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut out = BTreeMap::new();
    for f in files {
        let code = code(&f);
        let n: usize = WRITES.iter().map(|w| code.matches(w).count()).sum();
        if n > 0 {
            let rel = f
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.insert(rel, n);
        }
    }
    out
}

#[test]
fn nothing_but_the_owner_writes_into_a_results_folder() {
    let found = writers();
    let unlisted: Vec<&String> = found
        .keys()
        .filter(|f| !OWNER.contains(&f.as_str()) && !ELSEWHERE.iter().any(|(e, _)| e == f))
        .collect();
    assert!(
        unlisted.is_empty(),
        "these open files for writing outside lazyinit_core::writer: {unlisted:?}; \
         write a results folder's files through CellFolder/RunFolder (writer.rs), \
         or list a file that writes elsewhere in ELSEWHERE with where"
    );
    // The lists stay true: each listed file still writes.
    for f in OWNER.iter().chain(ELSEWHERE.iter().map(|(f, _)| f)) {
        assert!(found.contains_key(*f), "{f} is listed but writes nothing");
    }
}

#[test]
fn the_scan_sees_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.rs");
    std::fs::write(
        &f,
        "fn a() { let _ = std::fs::write(p, b); }\n// File::create in a comment\n\
         #[cfg(test)]\nmod tests {\n fn b() { File::create(q); }\n}\n",
    )
    .unwrap();
    let code = code(&f);
    let n: usize = WRITES.iter().map(|w| code.matches(w).count()).sum();
    assert_eq!(
        n, 1,
        "one write in code; the comment's and the test's are not"
    );
}
