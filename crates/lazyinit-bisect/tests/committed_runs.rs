//! The committed bisections (`results/bisect-*/`) and `docs/bisect.md`'s
//! table of them agree: each run has its row, with the steps and skips of
//! its `steps.md`, and says "NOT confirmed" exactly when its `summary.txt`
//! does (read as the typed outcome reads it).

use std::path::{Path, PathBuf};

use lazyinit_bisect::outcome::{Outcome, Said};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A markdown table row's cells, `\|` kept inside its cell.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.iter().map(|c| c.trim().to_string()).collect()
}

struct Run {
    name: String,
    summary: String,
    /// (role, commit, subject, verdict) of each row of steps.md.
    steps: Vec<(String, String, String, String)>,
}

fn runs() -> Vec<Run> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root().join("results")).unwrap() {
        let dir = e.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with("bisect-") {
            continue;
        }
        let summary = std::fs::read_to_string(dir.join("summary.txt")).unwrap();
        let table = std::fs::read_to_string(dir.join("steps.md")).unwrap();
        let mut lines = table.lines().take_while(|l| l.starts_with('|'));
        let head = cells(lines.next().unwrap());
        let col = |name: &str| head.iter().position(|h| h == name).unwrap();
        let (role, commit, subject, verdict) =
            (col("role"), col("commit"), col("subject"), col("verdict"));
        let steps = lines
            .skip(1)
            .map(|l| {
                let c = cells(l);
                (
                    c[role].clone(),
                    c[commit].clone(),
                    c[subject].clone(),
                    c[verdict].clone(),
                )
            })
            .collect();
        out.push(Run {
            name,
            summary,
            steps,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[test]
fn the_doc_says_what_each_committed_bisect_concluded() {
    let doc = std::fs::read_to_string(root().join("docs/bisect.md")).unwrap();
    let runs = runs();
    assert!(runs.len() >= 2, "no committed bisect runs found");
    for run in &runs {
        let tag = format!("(`results/{}`)", run.name);
        let rows: Vec<&str> = doc.lines().filter(|l| l.contains(&tag)).collect();
        assert_eq!(rows.len(), 1, "{}: docs/bisect.md has no one row", run.name);
        let row = cells(rows[0]);
        // history | commits | steps (skipped) | samples | build | measure | culprit | wall
        let culprit_cell = &row[6];

        let bad = run
            .steps
            .iter()
            .find(|s| s.0 == "confirm bad")
            .unwrap_or_else(|| panic!("{}: no confirm bad step", run.name));
        let said = Outcome::read(&run.summary, Some(&bad.2))
            .unwrap_or_else(|| panic!("{}: summary.txt does not read", run.name));
        let Said::Named { commit, confirmed } = said else {
            panic!("{}: not a named commit: {said:?}", run.name);
        };
        assert!(commit.starts_with(&bad.1), "{}: {commit}", run.name);
        if confirmed {
            assert!(
                culprit_cell.contains("confirmed") && !culprit_cell.contains("NOT confirmed"),
                "{}: confirmed, the doc says: {culprit_cell}",
                run.name
            );
        } else {
            assert!(
                culprit_cell.contains("NOT confirmed"),
                "{}: summary.txt says NOT confirmed, the doc says: {culprit_cell}",
                run.name
            );
        }

        let steps = run.steps.iter().filter(|s| s.0 == "step").count();
        let skips = run
            .steps
            .iter()
            .filter(|s| s.0 == "step" && s.3 == "skip")
            .count();
        let want = format!("{steps} ({skips}");
        assert!(
            row[2].starts_with(&want),
            "{}: steps.md has {steps} steps, {skips} skipped; the doc says {}",
            run.name,
            row[2]
        );
    }
}
