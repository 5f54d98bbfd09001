//! `history publish` as a nightly calls it: the committed runs imported
//! into a real SQLite history, the site published from it, links that
//! resolve, and a bad `--out` refused with exit 2 and nothing touched.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(args: &[&str]) -> Output {
    // From the repository root: imported folders are relative to it.
    Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const RUNS: [&str; 3] = [
    "results/reported-series-stable",
    "results/nightly-s6",
    "results/nightly-s6-2",
];

#[test]
fn publish_from_a_sqlite_history_of_committed_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("h.sqlite").display());
    let mut import = vec!["history", "import", "--db", &db];
    import.extend(RUNS);
    ok(&run(&import));
    let shown = ok(&run(&["history", "show", "--db", &db, "--format", "json"]));
    let series: Vec<serde_json::Value> = serde_json::from_str(&shown).unwrap();
    assert!(series.len() >= 16, "{} series", series.len());

    let site = dir.path().join("site");
    let json = dir.path().join("site.json");
    let (s, j) = (site.display().to_string(), json.display().to_string());
    ok(&run(&[
        "history",
        "publish",
        "--db",
        &db,
        "--out",
        &s,
        "--save-data",
        &j,
    ]));
    let index = std::fs::read_to_string(site.join("index.html")).unwrap();
    assert_eq!(
        index.matches("<tr data-series=").count(),
        series.len(),
        "a row per series"
    );
    assert!(
        index.contains("id=\"latest\"") && index.contains("arm64, HZ 100"),
        "the latest table"
    );

    // Every run link of every page resolves from where the page is.
    let mut links = 0;
    for page in std::fs::read_dir(site.join("series")).unwrap() {
        let page = page.unwrap().path();
        let text = std::fs::read_to_string(&page).unwrap();
        for href in text
            .split("<a href=\"")
            .skip(1)
            .filter_map(|h| h.split('"').next())
        {
            let target = page.parent().unwrap().join(href);
            assert!(
                target.exists(),
                "{}: {href} does not resolve",
                page.display()
            );
            links += 1;
        }
    }
    assert!(links > series.len(), "runs are linked ({links} links)");

    // The same site from the saved JSON, without the database.
    let again = dir.path().join("again");
    ok(&run(&[
        "history",
        "publish",
        "--data",
        &j,
        "--out",
        &again.display().to_string(),
    ]));
    assert_eq!(
        std::fs::read_to_string(again.join("index.html")).unwrap(),
        index
    );
}

#[test]
fn a_folder_that_is_not_a_site_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("h.sqlite").display());
    ok(&run(&["history", "import", "--db", &db, RUNS[1]]));
    let mine = dir.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("keep.txt"), "mine").unwrap();
    let o = run(&[
        "history",
        "publish",
        "--db",
        &db,
        "--out",
        &mine.display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("not a site published before"), "{err}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "nothing created beside it: {left:?}");
    assert_eq!(std::fs::read_dir(&mine).unwrap().count(), 1);
    assert!(Path::new(&mine.join("keep.txt")).is_file());
}

/// Issue 52: `--save-data` inside the site folder is refused saying why
/// (the site is replaced whole, so the file would go with the old site)
/// and what to do, for a new site and over one published before; nothing
/// written. It said "inside SITE, which this command reads".
#[test]
fn save_data_inside_the_site_is_refused_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("h.sqlite").display());
    ok(&run(&["history", "import", "--db", &db, RUNS[1]]));
    let site = dir.path().join("site");
    let s = site.display().to_string();
    for existing in [false, true] {
        if existing {
            ok(&run(&["history", "publish", "--db", &db, "--out", &s]));
        }
        let before: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        let index = std::fs::read(site.join("index.html")).ok();
        for data in [site.join("data.json"), site.join("series/../d.json")] {
            let o = run(&[
                "history",
                "publish",
                "--db",
                &db,
                "--out",
                &s,
                "--save-data",
                &data.display().to_string(),
            ]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{err}");
            assert_eq!(err.trim().lines().count(), 1, "{err}");
            assert!(
                err.contains(&format!(
                    "inside the site folder --out {s}, which publish replaces whole"
                )) && err.contains("give a path outside --out"),
                "{err}"
            );
            assert!(!data.exists());
        }
        let after: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(after, before, "nothing created beside it");
        assert_eq!(std::fs::read(site.join("index.html")).ok(), index);
    }
}
