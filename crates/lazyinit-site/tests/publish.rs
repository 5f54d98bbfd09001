//! Publishing on a real file system: atomic, and never over a folder
//! that is not a site.

#[allow(dead_code)] // the browser helpers serve browser.rs
mod common;

use lazyinit_core::output::Reads;
use lazyinit_site::{SiteData, SiteError, MARKER};

fn publish(data: &SiteData, out: &std::path::Path) -> Result<lazyinit_site::Published, SiteError> {
    lazyinit_site::publish(data, out, &Reads::new())
}

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
    // The page of a series that is gone disappears on republish.
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
        matches!(err, SiteError::Refused(_)) && err.is_bad_input(),
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

/// The samples as `--data` JSON, committed for `scripts/fuzz.sh` (the
/// sitedata target's seeds) and `scripts/bad-input-table.sh` (a hostile
/// `--data`); `UPDATE_GOLDEN=1` rewrites them.
#[test]
fn the_json_fixtures_are_the_samples() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (name, data) in [
        ("sample.json", common::sample()),
        ("hostile.json", common::hostile()),
    ] {
        let text = serde_json::to_string_pretty(&data).unwrap() + "\n";
        let path = dir.join(name);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        assert_eq!(
            text,
            std::fs::read_to_string(&path).unwrap(),
            "{name}: UPDATE_GOLDEN=1 rewrites it"
        );
    }
}

/// A value no plot can draw (its range overflows and drawing the axis
/// never ended) is refused with one line before anything is written.
#[test]
fn a_value_a_plot_cannot_draw_is_refused_not_a_hang() {
    for v in [1.7e308, f64::INFINITY, f64::NAN, -2e12] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("site");
        let mut data = common::sample();
        data.series[0].points[1].value = v;
        let (tx, rx) = std::sync::mpsc::channel();
        let at = out.clone();
        std::thread::spawn(move || tx.send(publish(&data, &at)).unwrap());
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("publishing a value of {v:e} did not end in 60 s"));
        let e = r.expect_err("refused");
        assert!(e.is_bad_input(), "{e}");
        let line = e.to_string();
        assert!(
            line.contains("run \"nightly-001\": value") && !line.contains('\n'),
            "{line}"
        );
        assert!(!out.exists(), "nothing written");
        assert_eq!(names(dir.path()), Vec::<String>::new());
    }
}

/// Each run's row on a series page names the harness commit that measured
/// it: 12 hex digits (and `-dirty`), the whole commit in its title, `–`
/// for a run whose rows did not record one.
#[test]
fn a_series_page_names_each_runs_harness_commit() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("site");
    let data = common::sample();
    publish(&data, &out).unwrap();
    let s = &data.series[0];
    let page = std::fs::read_dir(out.join("series"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .find(|p| p.contains(&s.id))
        .unwrap();
    let table = page.split("<table id=\"points\">").nth(1).unwrap();
    let rows: Vec<&str> = table.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), s.points.len(), "{table}");
    assert!(table.contains("<th>harness</th>"), "{table}");
    for (row, p) in rows.iter().zip(&s.points) {
        let cell = row.rsplit("<td>").next().unwrap();
        match p.harness.strip_suffix("-dirty") {
            _ if p.harness.is_empty() => assert!(cell.starts_with("–</td>"), "{row}"),
            Some(h) => assert!(
                cell.contains(&format!(">{}-dirty</code>", &h[..12]))
                    && cell.contains(&format!("title=\"{}\"", p.harness)),
                "{row}"
            ),
            None => assert!(
                cell.contains(&format!(">{}</code>", &p.harness[..12])),
                "{row}"
            ),
        }
    }
}

#[test]
fn a_republish_keeps_the_files_the_harness_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("site");
    let data = common::sample();
    publish(&data, &out).unwrap();
    std::fs::create_dir_all(out.join(".git/objects")).unwrap();
    std::fs::write(out.join(".git/HEAD"), "ref: refs/heads/pages\n").unwrap();
    std::fs::write(out.join("CNAME"), "bench.example.org\n").unwrap();
    std::fs::create_dir(out.join("notes")).unwrap();
    std::fs::write(out.join("notes/why.md"), "mine").unwrap();
    std::fs::write(out.join("series/README"), "also mine").unwrap();
    let mut fewer = data.clone();
    fewer.series.pop();
    publish(&fewer, &out).unwrap();
    for (p, text) in [
        (".git/HEAD", "ref: refs/heads/pages\n"),
        ("CNAME", "bench.example.org\n"),
        ("notes/why.md", "mine"),
        ("series/README", "also mine"),
    ] {
        assert_eq!(std::fs::read_to_string(out.join(p)).unwrap(), text, "{p}");
    }
    assert!(out.join(".git/objects").is_dir());
    // The gone series' page went; the user's file beside the pages stayed.
    assert_eq!(names(&out.join("series")).len(), fewer.series.len() + 1);
    assert_eq!(names(dir.path()), ["site"], "no temporary folder is left");
    // A file of the user's where the new site writes a page is refused:
    // the page of the series `fewer` lacks, put there by hand.
    let full = dir.path().join("full");
    publish(&data, &full).unwrap();
    let page = names(&full.join("series"))
        .into_iter()
        .find(|n| !out.join("series").join(n).exists())
        .unwrap();
    std::fs::remove_dir_all(&full).unwrap();
    std::fs::write(out.join("series").join(&page), "mine").unwrap();
    let before = std::fs::read_to_string(out.join("index.html")).unwrap();
    let err = publish(&data, &out).unwrap_err();
    assert!(
        matches!(err, SiteError::Clash { .. }) && err.is_bad_input(),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("index.html")).unwrap(),
        before
    );
    assert_eq!(
        std::fs::read_to_string(out.join("series").join(&page)).unwrap(),
        "mine"
    );
    assert_eq!(names(dir.path()), ["site"]);
}
