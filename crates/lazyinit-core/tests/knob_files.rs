//! A knob is at most four files beside its tests (issue 53): its line in
//! `identity/knobs.rs`, its history migration, its column's paragraph in
//! `docs/result-csv.md`, and at most one more. Everything else a knob
//! does (the spec's key and lists, the plan's sweep, the row's column,
//! the cell id, KCIDB's test, the ratio pairs, the mkfs flag, the model's
//! and the `ebs` profile's zeroing) follows from its line. This test
//! keeps that count honest where a diff would rot: it reads every file of
//! the workspace outside tests, test data and results (a source file's
//! unit tests, the `#[cfg(test)] mod tests` at its end, left out too) and
//! counts, for each knob of the table, the files that name it in any of
//! its spellings (the column `inode_size`, the spec key `inode-size`, the
//! type `InodeSize`).

use std::path::{Path, PathBuf};

use lazyinit_core::identity::Knobs;

/// The most files a knob may be named in, beside its tests.
const MOST: usize = 4;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Folders whose files are not the harness's source: builds, git, the
/// measured results, tests and their data.
fn skipped(dir: &Path) -> bool {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with('.')
        || ["target", "results", "tests", "snapshots", "node_modules"].contains(&name)
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let p = e.expect("a readable entry").path();
        if p.is_dir() {
            if !skipped(&p) {
                files(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

/// A file's text outside its unit tests; None for a file that is not text.
fn text(path: &Path) -> Option<String> {
    let text = String::from_utf8(std::fs::read(path).ok()?).ok()?;
    let end = match path.extension().is_some_and(|x| x == "rs") {
        true => text
            .find("\n#[cfg(test)]\nmod tests {")
            .unwrap_or(text.len()),
        false => text.len(),
    };
    Some(text[..end].to_string())
}

/// `inode_size` as its type is spelled: `InodeSize`.
fn camel(column: &str) -> String {
    column
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// The files (relative to the workspace) that name the knob `column`.
fn naming(column: &str) -> Vec<String> {
    let root = workspace();
    let mut all = Vec::new();
    files(&root, &mut all);
    assert!(all.len() > 200, "found only {} files", all.len());
    let spellings = [column.to_string(), column.replace('_', "-"), camel(column)];
    let mut found: Vec<String> = all
        .iter()
        .filter(|p| text(p).is_some_and(|t| spellings.iter().any(|s| t.contains(s.as_str()))))
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    found.sort();
    found
}

#[test]
fn each_knob_is_at_most_four_files_beside_its_tests() {
    assert!(!Knobs::COLUMNS.is_empty(), "the table has a knob");
    for (column, _) in Knobs::COLUMNS {
        let found = naming(column);
        assert!(
            found.len() <= MOST,
            "knob {column} is named in {} files beside its tests, at most {MOST}: {found:#?}",
            found.len()
        );
        // What every knob needs: its line, its migration, its column's paragraph.
        for needed in [
            "crates/lazyinit-core/src/identity/knobs.rs".to_string(),
            "crates/lazyinit-history/migrations/".to_string(),
            "docs/result-csv.md".to_string(),
        ] {
            assert!(
                found.iter().any(|f| f.starts_with(&needed)),
                "knob {column}: no file under {needed} names it: {found:#?}"
            );
        }
        eprintln!("knob {column}: {found:#?}");
    }
}

/// The count sees what it counts: a knob named in a source file outside
/// its tests is found, one named only in a unit test is not.
#[test]
fn the_count_finds_a_name_in_code_and_not_in_unit_tests() {
    let dir = tempfile::tempdir().unwrap();
    let code = dir.path().join("a.rs");
    std::fs::write(&code, "fn f() { let _ = \"inode-size\"; }\n").unwrap();
    assert!(text(&code).unwrap().contains("inode-size"));
    let test = dir.path().join("b.rs");
    std::fs::write(
        &test,
        "fn f() {}\n\n#[cfg(test)]\nmod tests {\n    // InodeSize\n}\n",
    )
    .unwrap();
    assert!(!text(&test).unwrap().contains("InodeSize"));
    assert_eq!(camel("inode_size"), "InodeSize");
    assert!(skipped(Path::new("/w/crates/x/tests")) && !skipped(Path::new("/w/crates/x/src")));
}
