//! Every section reference in the code (`docs/design.md §2`) names a file
//! of the repository and a section it has; nothing cites a note outside it.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                sources(&p, out);
            }
        } else if p.extension().is_some_and(|x| {
            ["rs", "sh", "snap", "config", "toml"]
                .iter()
                .any(|k| x == *k)
        }) {
            out.push(p);
        }
    }
}

#[test]
fn every_section_reference_names_a_section_that_exists() {
    let root = repo();
    let mut files = Vec::new();
    for d in ["crates", "scripts", "kernels"] {
        sources(&root.join(d), &mut files);
    }
    assert!(files.len() > 100, "only {} files found", files.len());
    let mut refs = 0;
    // This file spells the patterns it looks for.
    files.retain(|f| !f.ends_with("lazyinit-core/tests/doc_references.rs"));
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        assert!(
            !text.contains("DESIGN §") && !text.contains("DESIGN.md"),
            "{} cites a DESIGN note outside the repository",
            f.display()
        );
        // "docs/design.md §3", possibly broken over a comment line.
        let flat = text.replace("\n", " ").replace("//", " ").replace('#', " ");
        for (i, _) in flat.match_indices("docs/design.md") {
            let rest = flat[i + "docs/design.md".len()..].trim_start();
            let Some(num) = rest.strip_prefix('§') else {
                continue;
            };
            let n: String = num.chars().take_while(|c| c.is_ascii_digit()).collect();
            let design = std::fs::read_to_string(root.join("docs/design.md")).unwrap();
            assert!(
                design.contains(&format!("\n## §{n} ")),
                "{} cites docs/design.md §{n}, which has no such section",
                f.display()
            );
            refs += 1;
        }
    }
    assert!(
        refs >= 20,
        "only {refs} references found: the scan is broken"
    );
}
