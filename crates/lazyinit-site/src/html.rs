//! Small HTML helpers shared by the pages: escaping, links, the page
//! frame, numbers, and the names of series pages.
//!
//! Every string from [`crate::SiteData`] reaches a page through [`esc`]
//! (text and attribute values alike) and every link through [`link`],
//! which keeps only http(s) and relative links. The site has no script,
//! so no text is ever written into JavaScript or inline JSON.

use std::collections::HashSet;

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A link the site may write: http, https, or relative (a path, `?` or
/// `#`); anything with another scheme (`javascript:`, `data:`,
/// `vbscript:`, `file:`), a control character anywhere (browsers drop
/// tabs and newlines from URLs: `java\tscript:`) or space at either end
/// is not one (`None`).
pub fn safe_href(url: &str) -> Option<&str> {
    let odd = url.is_empty()
        || url.chars().any(char::is_control)
        || url.starts_with(char::is_whitespace)
        || url.ends_with(char::is_whitespace);
    if odd {
        return None;
    }
    // A scheme is what comes before a `:` that is before any `/?#`.
    let end = url.find(['/', '?', '#']).unwrap_or(url.len());
    match url[..end].split_once(':') {
        None => Some(url),
        Some((scheme, _)) => ["http", "https"]
            .iter()
            .any(|ok| scheme.eq_ignore_ascii_case(ok))
            .then_some(url),
    }
}

/// `text` (already HTML) linked to `url` if it is a [`safe_href`], else
/// the text alone.
pub fn link(url: Option<&str>, text: &str) -> String {
    match url.and_then(safe_href) {
        Some(u) => format!("<a href=\"{}\">{text}</a>", esc(u)),
        None => text.to_string(),
    }
}

/// A whole page; `css` is the stylesheet's path relative to the page.
pub fn page(title: &str, css: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><link rel=\"stylesheet\" href=\"{css}\"></head>\n<body>\n{body}\n</body></html>\n",
        esc(title)
    )
}

/// A value to a precision that suits its size (as the report prints).
pub fn num(x: f64) -> String {
    lazyinit_report::render::num(x)
}

pub fn ci(ci: Option<(f64, f64)>) -> String {
    ci.map_or_else(|| "–".into(), |(lo, hi)| format!("{}–{}", num(lo), num(hi)))
}

pub fn ticks(l: &[u64]) -> String {
    match l {
        [] => "–".into(),
        l => l.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
    }
}

/// The day of an RFC 3339 time (its first ten characters).
pub fn day(date: &str) -> &str {
    date.get(..10).unwrap_or(date)
}

/// File names for series pages: the id with anything but letters, digits,
/// `.` and `-` made `_`, made unique by a suffix where two collide.
pub fn slugs<'a>(ids: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut seen = HashSet::new();
    ids.into_iter()
        .map(|id| {
            let base: String = id
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let mut s = base.clone();
            let mut i = 2;
            while !seen.insert(s.clone()) {
                s = format!("{base}-{i}");
                i += 1;
            }
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn only_http_and_relative_links_are_links() {
        for ok in [
            "../runs/a/report.md",
            "/srv/runs/a",
            "runs/12:00/report.md",
            "?q=1",
            "#top",
            "https://example.org/x",
            "HTTP://example.org",
        ] {
            assert_eq!(safe_href(ok), Some(ok), "{ok}");
        }
        for bad in [
            "",
            "javascript:alert(1)",
            "JaVaScRiPt:alert(1)",
            " javascript:alert(1)",
            "java\tscript:alert(1)",
            "java\nscript:alert(1)",
            "\u{1}javascript:x",
            "data:text/html,x",
            "vbscript:x",
            "file:///etc/passwd",
            "mailto:a@b",
            "run 1 ",
        ] {
            assert_eq!(safe_href(bad), None, "{bad:?}");
        }
        assert_eq!(link(Some("javascript:x"), "&lt;r"), "&lt;r");
        assert_eq!(link(Some("a/\"b"), "r"), "<a href=\"a/&quot;b\">r</a>");
        assert_eq!(link(None, "r"), "r");
    }

    #[test]
    fn slugs_are_file_names_and_unique() {
        let s = slugs(["qemu/x86_64/hz250/fix", "qemu_x86_64_hz250_fix", "a b"]);
        assert_eq!(
            s,
            ["qemu_x86_64_hz250_fix", "qemu_x86_64_hz250_fix-2", "a_b"]
        );
    }
}
