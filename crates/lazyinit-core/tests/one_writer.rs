//! A results folder has one writer, and the type system keeps it so
//! (`lazyinit_core::layout`, `lazyinit_core::writer`): the layout hands out
//! names ([`FileName`]) and files ([`RunFile`]) that are not paths, and
//! only a [`RunWriter`], had by taking the folder's lock, writes them.
//! `layout.rs` and `writer.rs` assert at compile time that neither is a
//! path. What a type cannot see, this test does, with no list of
//! exceptions: no source file writes a results folder's file name out by
//! hand (which would be a path around the types), and no write is given a
//! file's path shown for a message ([`RunFile::shown`]).

use std::path::{Path, PathBuf};

use lazyinit_core::{CellFolder, RunFolder};

/// Calls that open (or make) a file or folder for writing.
const WRITES: &[&str] = &[
    "File::create",
    "OpenOptions::new",
    "fs::write(",
    "create_dir",
    "fs::rename(",
    "fs::copy(",
    "symlink(",
    "persist(",
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

/// Every `src/` file of the workspace but the layout (where the names
/// are written, once), with its code.
fn source_code() -> Vec<(String, String)> {
    let root = workspace();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    files
        .into_iter()
        .map(|f| {
            let rel = f
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (rel, code(&f))
        })
        .filter(|(rel, _)| rel != "crates/lazyinit-core/src/layout.rs")
        .collect()
}

/// Where `code` writes a results folder's name out as a string.
fn names_by_hand(code: &str) -> Vec<String> {
    RunFolder::NAMES
        .iter()
        .chain(CellFolder::NAMES)
        .map(|n| format!("\"{n}\""))
        .filter(|quoted| code.contains(quoted.as_str()))
        .collect()
}

/// The statements of `code` that write and are given a path shown.
fn shown_written(code: &str) -> Vec<String> {
    code.split(';')
        .filter(|st| WRITES.iter().any(|w| st.contains(w)) && st.contains(".shown()"))
        .map(|st| st.trim().to_string())
        .collect()
}

#[test]
fn no_source_names_a_results_folders_file_by_hand() {
    let mut found = Vec::new();
    for (file, code) in source_code() {
        for n in names_by_hand(&code) {
            found.push(format!("{file}: {n}"));
        }
    }
    assert!(
        found.is_empty(),
        "these write a results folder's file name by hand, a path around the \
         layout's types: {found:#?}; name it with RunFolder::X / CellFolder::X \
         and read it through RunFile or write it through RunWriter/CellWriter"
    );
}

#[test]
fn no_write_is_given_a_file_shown_for_a_message() {
    let mut found = Vec::new();
    for (file, code) in source_code() {
        for st in shown_written(&code) {
            found.push(format!("{file}: {st}"));
        }
    }
    assert!(
        found.is_empty(),
        "these write to a results folder's file by its shown path: {found:#?}; \
         write it through RunWriter/CellWriter"
    );
}

#[test]
fn the_scans_see_what_they_look_for() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.rs");
    std::fs::write(
        &f,
        "fn a() { let p = out.join(\"results.csv\"); let _ = std::fs::write(run.spec_toml().shown(), b); }\n\
         // \"groups.csv\" in a comment\n\
         fn b() { eprintln!(\"{}\", run.spec_toml().shown().display()); }\n\
         #[cfg(test)]\nmod tests {\n fn c() { std::fs::write(\"trace.txt\", x); }\n}\n",
    )
    .unwrap();
    let code = code(&f);
    assert_eq!(
        names_by_hand(&code),
        ["\"results.csv\""],
        "the comment's and the test's are not"
    );
    let shown = shown_written(&code);
    assert_eq!(
        shown.len(),
        1,
        "{shown:?}: a message's shown path is no write"
    );
    assert!(shown[0].contains("fs::write(run.spec_toml().shown()"));
}
