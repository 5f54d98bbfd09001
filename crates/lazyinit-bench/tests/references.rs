//! Every reference from the code, `--help`, the specs, the scripts, the
//! examples and the docs to a README section or a file under docs/ (and a
//! heading or a `§N` of one) names something that is there (issue 53: five
//! specs and `run --help` cited README sections that no longer existed).
//!
//! Forms checked: `README, "Section"`; `docs/<file>.md`, with `#anchor`
//! or ` §N`; and in Markdown files, relative links `](path)` and
//! `](path#anchor)`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files whose references are checked (results/ is evidence, kept as
/// it was written; target/ is cargo's).
fn files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = [
        "crates",
        "specs",
        "scripts",
        "docs",
        "examples",
        "kernels",
        "terraform",
    ]
    .iter()
    .map(|d| root().join(d))
    .collect();
    out.push(root().join("README.md"));
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if !["target", "fixtures", "golden", ".terraform"].contains(&name.as_str()) {
                    dirs.push(p);
                }
            } else if [
                ".rs", ".toml", ".md", ".sh", ".yml", ".yaml", ".sbatch", ".py", ".tf",
            ]
            .iter()
            .any(|x| name.ends_with(x))
            {
                out.push(p);
            }
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces
/// as dashes.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn headings(md: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(md).unwrap_or_default();
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("```") {
                fenced = !fenced;
            }
            !fenced && l.starts_with('#')
        })
        .map(|l| l.trim_start_matches('#').trim().to_string())
        .collect()
}

/// What is wrong with `target` (a path relative to `base`, with an
/// optional `#anchor`), or None.
fn check_link(base: &Path, target: &str) -> Option<String> {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        base.to_path_buf()
    } else {
        base.parent().unwrap().join(path)
    };
    if !file.exists() {
        return Some(format!("{target}: no {}", file.display()));
    }
    if let Some(a) = anchor {
        if file.extension().is_some_and(|x| x == "md") {
            let slugs: BTreeSet<String> = headings(&file).iter().map(|h| slug(h)).collect();
            if !slugs.contains(a) {
                return Some(format!(
                    "{target}: no heading with anchor #{a} in {}",
                    file.display()
                ));
            }
        }
    }
    None
}

fn word_after<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = s.strip_prefix(prefix)?;
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || "-_./#".contains(c)))
        .unwrap_or(rest.len());
    Some(rest[..end].trim_end_matches('.'))
}

#[test]
fn every_reference_to_the_readme_and_docs_is_there() {
    let root = root();
    let readme = root.join("README.md");
    let readme_sections: BTreeSet<String> = headings(&readme).into_iter().collect();
    let mut checked = 0usize;
    let mut wrong = Vec::new();
    for f in files() {
        // This file names the forms it looks for.
        if f.ends_with("tests/references.rs") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let shown = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
        for (n, line) in text.lines().enumerate() {
            let at = format!("{shown}:{}", n + 1);
            // README, "Section"
            for (i, _) in line.match_indices("README, \"") {
                let rest = &line[i + "README, \"".len()..];
                let Some(end) = rest.find('"') else { continue };
                checked += 1;
                if !readme_sections.contains(&rest[..end]) {
                    wrong.push(format!("{at}: README has no section \"{}\"", &rest[..end]));
                }
            }
            // docs/<file>.md[#anchor][ §N]
            for (i, _) in line.match_indices("docs/") {
                if i > 0
                    && line[..i]
                        .ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    continue; // another folder's docs/ (e.g. rust-docs/)
                }
                let Some(target) = word_after(&line[i..], "docs/") else {
                    continue;
                };
                if !target.split('#').next().unwrap_or("").ends_with(".md") {
                    continue;
                }
                checked += 1;
                if let Some(w) = check_link(&root.join("README.md"), &format!("docs/{target}")) {
                    wrong.push(format!("{at}: {w}"));
                    continue;
                }
                let after = &line[i + 5 + target.len()..];
                if let Some(sec) = after.strip_prefix(" §") {
                    let num: String = sec.chars().take_while(|c| c.is_ascii_digit()).collect();
                    let file = root.join("docs").join(target.split('#').next().unwrap());
                    if !num.is_empty()
                        && !headings(&file)
                            .iter()
                            .any(|h| h.starts_with(&format!("§{num} ")))
                    {
                        wrong.push(format!("{at}: docs/{target} has no §{num}"));
                    }
                }
            }
            // Markdown links to relative paths.
            if f.extension().is_some_and(|x| x == "md") {
                for (i, _) in line.match_indices("](") {
                    let rest = &line[i + 2..];
                    let Some(end) = rest.find(')') else { continue };
                    let target = &rest[..end];
                    if target.contains("://") || target.starts_with("mailto:") || target.is_empty()
                    {
                        continue;
                    }
                    checked += 1;
                    if let Some(w) = check_link(&f, target) {
                        wrong.push(format!("{at}: {w}"));
                    }
                }
            }
        }
    }
    // Not vacuous: the repository cites its docs hundreds of times.
    assert!(
        checked > 200,
        "only {checked} references found: is the walk broken?"
    );
    assert!(
        wrong.is_empty(),
        "{} stale references:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn the_checks_catch_what_they_are_for() {
    let readme = root().join("README.md");
    assert!(check_link(&readme, "docs/usage.md").is_none());
    assert!(check_link(&readme, "docs/nosuch.md").is_some());
    assert!(check_link(&readme, "docs/virtual-clock.md#where-it-is-used").is_none());
    assert!(check_link(&readme, "docs/virtual-clock.md#nowhere").is_some());
    assert_eq!(
        slug("§3 Pitfalls (each cost an hour once)"),
        "3-pitfalls-each-cost-an-hour-once"
    );
    assert_eq!(word_after("docs/ci.md, and", "docs/"), Some("ci.md"));
}

/// docs/how-it-works.md names every crate of the workspace (it named 11
/// of 15, issue 53).
#[test]
fn crates_are_all_listed() {
    let doc = std::fs::read_to_string(root().join("docs/how-it-works.md")).unwrap();
    let mut n = 0;
    for e in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if e.path().join("Cargo.toml").is_file() {
            n += 1;
            assert!(
                doc.contains(&format!("`{name}`")),
                "docs/how-it-works.md does not name {name}"
            );
        }
    }
    assert!(n >= 15, "{n} crates");
}
