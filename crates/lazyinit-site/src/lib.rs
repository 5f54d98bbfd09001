//! The history as a static site (`docs/dashboard.md`): an index and a page
//! per series, every plot an inline SVG drawn by `lazyinit_report::plot`,
//! one stylesheet, no script and nothing fetched from the network, so it
//! opens from `file://` or any static host.
//!
//! [`SiteData`] is the input (plain serde structs: the history database,
//! read by [`history::from_history`], or a JSON file); [`render`] turns it
//! into pages (pure); [`publish`] writes them into a folder atomically.

pub mod data;
pub mod history;
mod html;
mod index;
mod publish;
mod series;

pub use data::*;
pub use publish::{check_out, publish, Published, SiteError, MARKER};

use lazyinit_report::plot::{PlotError, TrendPoint};

/// A page of the site: its path inside the site and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub path: String,
    pub text: String,
}

/// Every file of the site (pure: nothing is written).
pub fn render(data: &SiteData) -> Result<Vec<Page>, PlotError> {
    let slugs = html::slugs(data.series.iter().map(|s| s.id.as_str()));
    let mut pages = vec![
        Page {
            path: "index.html".into(),
            text: index::render(data, &slugs)?,
        },
        Page {
            path: "style.css".into(),
            text: include_str!("style.css").into(),
        },
    ];
    for (s, slug) in data.series.iter().zip(&slugs) {
        pages.push(Page {
            path: format!("series/{slug}.html"),
            text: series::render(s, &data.metric, &data.unit)?,
        });
    }
    Ok(pages)
}

/// A series' points as the plots take them.
fn points(s: &SeriesData) -> Vec<TrendPoint> {
    s.points
        .iter()
        .map(|p| TrendPoint {
            label: html::day(&p.date).to_string(),
            value: p.value,
            interval: p.ci,
            estimated: p.estimated,
        })
        .collect()
}
