//! The published site in a real browser: headless Chromium opens it from
//! `file://`, and the DOM it built is checked (a row per series, the open
//! alert count, one plotted point per run). A missing Chromium fails.

mod common;

use common::{chromium, hostile, sample, BAD_LINKS, GOOD_LINKS};

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
    lazyinit_site::publish(&data, &out, &lazyinit_core::output::Reads::new()).unwrap();

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

/// A start tag of the DOM Chromium serialised: its name and attributes
/// (values entity-decoded).
#[derive(Debug)]
struct Tag {
    name: String,
    attrs: Vec<(String, String)>,
}

/// The entities the serialiser writes.
fn decode(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// The start tags and the text (decoded, tags removed) of a serialised
/// DOM. The serialiser escapes `<` in text and quotes every attribute
/// value, so a `<` starts a tag and a `"` ends a value.
fn parse(dom: &str) -> (Vec<Tag>, String) {
    let (mut tags, mut text) = (Vec::new(), String::new());
    let mut rest = dom;
    while let Some(lt) = rest.find('<') {
        text.push_str(&decode(&rest[..lt]));
        rest = &rest[lt + 1..];
        if let Some(r) = rest.strip_prefix("!--") {
            rest = &r[r.find("-->").expect("comment closed") + 3..];
            continue;
        }
        if !rest.starts_with(|c: char| c.is_ascii_alphabetic()) {
            rest = &rest[rest.find('>').expect("tag closed") + 1..];
            continue;
        }
        let end = rest.find(|c: char| c.is_whitespace() || c == '>' || c == '/');
        let mut tag = Tag {
            name: rest[..end.unwrap()].to_ascii_lowercase(),
            attrs: Vec::new(),
        };
        rest = &rest[end.unwrap()..];
        loop {
            rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == '/');
            if let Some(r) = rest.strip_prefix('>') {
                rest = r;
                break;
            }
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '=' || c == '>' || c == '/')
                .expect("attribute ends");
            let name = rest[..end].to_ascii_lowercase();
            rest = &rest[end..];
            let mut value = String::new();
            if let Some(r) = rest.strip_prefix("=\"") {
                let close = r.find('"').expect("value closed");
                value = decode(&r[..close]);
                rest = &r[close + 1..];
            }
            tag.attrs.push((name, value));
        }
        tags.push(tag);
    }
    text.push_str(&decode(rest));
    (tags, text)
}

/// Whether a link can only be followed as http(s) or a relative path, as
/// a browser reads it (leading spaces and controls dropped, tabs and
/// newlines removed anywhere).
fn is_safe_link(href: &str) -> bool {
    let url: String = href
        .trim_matches(|c: char| c <= ' ')
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    let end = url.find(['/', '?', '#']).unwrap_or(url.len());
    match url[..end].split_once(':') {
        None => true,
        Some((scheme, _)) => ["http", "https"].contains(&scheme.to_ascii_lowercase().as_str()),
    }
}

/// What a hostile site must show: no element, attribute or link it did
/// not write itself; `shown` texts literally.
fn assert_inert(page: &str, dom: &str, shown: &[String]) -> Vec<String> {
    let (tags, text) = parse(dom);
    let mut hrefs = Vec::new();
    for t in &tags {
        assert!(
            ![
                "script",
                "img",
                "iframe",
                "object",
                "embed",
                "foreignobject"
            ]
            .contains(&t.name.as_str()),
            "{page}: an injected <{}> in the DOM: {t:?}",
            t.name
        );
        for (name, value) in &t.attrs {
            assert!(
                !name.starts_with("on") && name != "data-pwned",
                "{page}: an injected attribute on <{}>: {name}={value:?}",
                t.name
            );
            if ["href", "src", "xlink:href", "action", "formaction"].contains(&name.as_str()) {
                assert!(is_safe_link(value), "{page}: <{} {name}={value:?}>", t.name);
                hrefs.push(value.clone());
            }
        }
    }
    for s in shown {
        assert!(
            text.contains(s.as_str()),
            "{page}: {s:?} is not shown as text"
        );
    }
    hrefs
}

#[test]
fn a_site_of_hostile_text_and_links_shows_them_as_text_in_chromium() {
    use common::hostile_text as h;
    let browser = chromium();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("site");
    let data = hostile();
    lazyinit_site::publish(&data, &out, &lazyinit_core::output::Reads::new()).unwrap();

    let mut shown: Vec<String> = [
        "title",
        "metric",
        "unit",
        "generated_at",
        "latest.run",
        "volume",
        "variant",
        "column",
    ]
    .map(h)
    .to_vec();
    for i in 0..data.alerts.len() {
        shown.extend([
            h(&format!("alert.run{i}")),
            h(&format!("kind{i}")),
            h(&format!("note{i}")),
        ]);
    }
    shown.extend((0..data.series.len()).map(|i| h(&format!("label{i}"))));
    shown.push(h("state0"));
    let index = browser.dump_dom(&out.join("index.html"));
    let mut hrefs = assert_inert("index.html", &index, &shown);

    // The series pages, in the order of the index's rows.
    let table = element(&index, "table", "series");
    let (tags, _) = parse(table);
    let mut pages = Vec::new();
    for (i, t) in tags.iter().enumerate() {
        if t.name == "tr" && t.attrs.iter().any(|(n, _)| n == "data-series") {
            let a = tags[i..]
                .iter()
                .find(|t| t.name == "a")
                .expect("a link per row");
            pages.push(a.attrs.iter().find(|(n, _)| n == "href").unwrap().1.clone());
        }
    }
    assert_eq!(pages.len(), data.series.len(), "a link to each series page");
    for (i, s) in data.series.iter().enumerate() {
        let mut shown: Vec<String> = vec![
            h(&format!("label{i}")),
            h(&format!("id{i}")),
            h("metric"),
            h("unit"),
        ];
        for j in 0..s.points.len() {
            shown.extend([h(&format!("run_id{i}.{j}")), h(&format!("kernel{i}.{j}"))]);
        }
        if !s.changes.is_empty() {
            for side in ["before", "after"] {
                for f in ["kernels", "run", "kernel", "kernel_identity"] {
                    shown.push(h(&format!("{side}.{f}")));
                }
            }
            shown.extend(["change.alert", "change.state", "log", "bisect"].map(h));
        }
        let page = out.join(&pages[i]);
        let dom = browser.dump_dom(&page);
        hrefs.extend(assert_inert(&page.display().to_string(), &dom, &shown));
    }
    for bad in BAD_LINKS {
        assert!(!hrefs.iter().any(|l| l == bad), "{bad:?} is a link");
    }
    for good in GOOD_LINKS {
        assert!(
            hrefs.iter().any(|l| l == good),
            "{good:?} is kept as a link: {hrefs:?}"
        );
    }
}
