//! The site's input as `history publish --data` reads it (SiteData JSON)
//! and checks it, then every page rendered: no panic, no hang, and no page
//! holds a script or a link other than http(s) or relative, whatever the
//! strings say.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// The value of each `href="..."` in a page, entities as written.
fn hrefs(text: &str) -> impl Iterator<Item = &str> {
    text.split("href=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap_or(""))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(site) = serde_json::from_str::<lazyinit_site::SiteData>(text) else {
        return;
    };
    // As publish: data a plot cannot draw is refused before rendering.
    if site.check().is_err() {
        return;
    }
    let Ok(pages) = lazyinit_site::render(&site) else {
        return;
    };
    for p in pages {
        let lower = p.text.to_ascii_lowercase();
        assert!(!lower.contains("<script"), "{}: a script", p.path);
        assert!(!lower.contains("<img"), "{}: an image", p.path);
        for h in hrefs(&p.text) {
            let h = h.replace("&amp;", "&");
            let end = h.find(['/', '?', '#']).unwrap_or(h.len());
            if let Some((scheme, _)) = h[..end].split_once(':') {
                assert!(
                    scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"),
                    "{}: a link {h:?}",
                    p.path
                );
            }
            assert!(
                !h.chars().any(char::is_control) && h.trim() == h,
                "{}: a link {h:?}",
                p.path
            );
        }
    }
});
