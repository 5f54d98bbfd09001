//! The published site in a real browser: headless Chromium opens it from
//! `file://`, and the DOM it built is checked (a row per series, the open
//! alert count, one plotted point per run). A missing Chromium fails.

mod common;

use common::{chromium, sample};

/// The text between `<tag id="id"` and its closing `</tag>`.
fn element<'a>(dom: &'a str, tag: &str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("<{tag} id=\"{id}\""))
        .unwrap_or_else(|| panic!("no <{tag} id={id}> in the DOM"));
    let end = dom[start..]
        .find(&format!("</{tag}>"))
        .expect("element closed")
        + start;
    &dom[start..end]
}

#[test]
fn the_site_renders_in_chromium_with_a_row_per_series_and_a_point_per_run() {
    let browser = chromium();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("site");
    let data = sample();
    lazyinit_site::publish(&data, &out).unwrap();

    let index = browser.dump_dom(&out.join("index.html"));
    let table = element(&index, "table", "series");
    assert_eq!(table.matches("<tr data-series=").count(), data.series.len());
    let open = data.alerts.iter().filter(|a| a.is_open()).count();
    assert_eq!(open, 2, "the sample has two open alerts");
    assert!(
        index.contains(&format!("<span id=\"alert-count\">{open}</span>")),
        "alert count"
    );
    // Open alerts come first.
    let alerts = element(&index, "table", "alerts");
    let first_triaged = alerts.find("class=\"triaged\"").unwrap();
    assert_eq!(
        alerts[..first_triaged].matches("class=\"open\"").count(),
        open
    );
    assert!(index.contains("id=\"latest\""), "the latest full table");

    for (i, s) in data.series.iter().enumerate() {
        let href = table
            .split("<tr data-series=")
            .nth(i + 1)
            .and_then(|row| row.split("href=\"").nth(1))
            .and_then(|h| h.split('"').next())
            .unwrap();
        let page = browser.dump_dom(&out.join(href));
        let plot = element(&page, "figure", "trend");
        assert_eq!(
            plot.matches("<circle").count(),
            s.points.len(),
            "{}: a point per run",
            s.id
        );
        let rows = element(&page, "table", "points");
        assert_eq!(
            rows.matches("<tr>").count() - 1,
            s.points.len(),
            "{}: a table row per run",
            s.id
        );
        let changes = page
            .find("id=\"changes\"")
            .map(|_| element(&page, "table", "changes"));
        assert_eq!(
            changes.map_or(0, |c| c.matches("<tr>").count() - 1),
            s.changes.len()
        );
    }

    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-index.png");
    browser.screenshot(&out.join("index.html"), &shot, (1200, 1400));
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a screenshot"
    );
    println!("screenshot: {}", shot.display());
}
