//! Publishing on a real file system: atomic, and never over a folder
//! that is not a site.

#[allow(dead_code)] // the browser helpers serve browser.rs
mod common;

use lazyinit_site::{publish, SiteError, MARKER};

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_site_is_written_whole_and_republished_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("site");
    let data = common::sample();
    let first = publish(&data, &out).unwrap();
    assert_eq!(first.files, 2 + data.series.len());
    assert!(out.join(MARKER).is_file() && out.join("index.html").is_file());
    assert_eq!(names(&out.join("series")).len(), data.series.len());
    // A stale page of a series that is gone disappears on republish.
    std::fs::write(out.join("series/gone.html"), "old").unwrap();
    let mut fewer = data.clone();
    fewer.series.pop();
    publish(&fewer, &out).unwrap();
    assert_eq!(names(&out.join("series")).len(), fewer.series.len());
    assert_eq!(
        names(dir.path()),
        ["site"],
        "no temporary folder is left beside it"
    );
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    // Only the SVG namespace names a URL; nothing is fetched.
    let urls = index.matches("http").count();
    assert_eq!(
        urls,
        index
            .matches("xmlns=\"http://www.w3.org/2000/svg\"")
            .count(),
        "nothing loads from the network"
    );
    assert!(!index.contains("<script"), "no script");
}

#[test]
fn a_folder_that_is_not_a_site_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("notes.md"), "mine").unwrap();
    let err = publish(&common::sample(), &docs).unwrap_err();
    assert!(
        matches!(err, SiteError::NotASite(_)) && err.is_bad_input(),
        "{err}"
    );
    assert!(
        err.to_string().contains("not a site published before"),
        "{err}"
    );
    assert_eq!(names(&docs), ["notes.md"]);
    assert_eq!(names(dir.path()), ["docs"]);

    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    assert!(matches!(
        publish(&common::sample(), &file),
        Err(SiteError::NotAFolder(_))
    ));
    let nowhere = dir.path().join("no/such/site");
    assert!(matches!(
        publish(&common::sample(), &nowhere),
        Err(SiteError::NoParent(_))
    ));
    // An empty folder is fine.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    publish(&common::sample(), &empty).unwrap();
}

#[test]
fn a_change_in_a_git_tree_shows_its_commits_and_the_bisect() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("site");
    let data = common::sample();
    publish(&data, &out).unwrap();
    let (k, s) = data
        .series
        .iter()
        .enumerate()
        .find(|(_, s)| s.changes.iter().any(|c| c.commits.is_some()))
        .expect("the sample has a change with commits");
    let page = std::fs::read_dir(out.join("series"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .find(|p| p.contains(&format!("<title>{}", s.label)) || p.contains(&s.label))
        .unwrap_or_else(|| panic!("no page for series {k}"));
    assert!(
        page.contains("commits <code>116c914995f6..18b53871f777</code>"),
        "{page}"
    );
    assert!(page.contains(
        "to name the commit: <code>lazyinit-bench bisect --source /srv/linux --good 116c9149"
    ));
}
