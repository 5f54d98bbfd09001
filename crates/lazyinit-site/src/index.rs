//! The index: open alerts first, the latest full table in the reported
//! table's shape (beside 2021 and the model, with L), then one row per
//! series with a sparkline.

use std::collections::BTreeSet;
use std::fmt::Write;

use lazyinit_report::plot::{sparkline, PlotError};

use crate::data::{AlertData, LatestTable, SiteData};
use crate::html::{ci, day, esc, link, num, page, ticks};
use crate::points;

/// The index page; `slugs[i]` names series i's page.
pub fn render(data: &SiteData, slugs: &[String]) -> Result<String, PlotError> {
    let mut b = String::new();
    let open = data.alerts.iter().filter(|a| a.is_open()).count();
    write!(
        b,
        "<h1>{}</h1>\n<p class=\"muted\">{} series of {}, read {}. \
         <span id=\"alert-count\">{open}</span> open alert(s).</p>\n",
        esc(&data.title),
        data.series.len(),
        esc(&data.metric),
        esc(&data.generated_at)
    )
    .unwrap();
    alerts(&mut b, &data.alerts, data, slugs);
    if let Some(t) = &data.latest {
        latest(&mut b, t, &data.unit, data, slugs);
    }
    series_table(&mut b, data, slugs)?;
    Ok(page(&data.title, "style.css", &b))
}

/// `text` linked to the page of series `id` (already escaped text).
fn series_link(data: &SiteData, slugs: &[String], id: &str, text: &str) -> String {
    let page = data
        .series
        .iter()
        .position(|s| s.id == id)
        .map(|i| format!("series/{}.html", slugs[i]));
    link(page.as_deref(), text)
}

/// Open alerts first, then the triaged ones.
fn alerts(b: &mut String, alerts: &[AlertData], data: &SiteData, slugs: &[String]) {
    b.push_str("<h2>Alerts</h2>\n");
    if alerts.is_empty() {
        b.push_str("<p>No alerts.</p>\n");
        return;
    }
    b.push_str(
        "<table id=\"alerts\"><thead><tr><th>state</th><th>series</th><th>first run after</th>\
         <th>kind</th><th>raised</th><th>note</th></tr></thead><tbody>\n",
    );
    let mut sorted: Vec<&AlertData> = alerts.iter().collect();
    sorted.sort_by_key(|a| !a.is_open());
    for a in sorted {
        writeln!(
            b,
            "<tr class=\"{}\" data-alert=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if a.is_open() { "open" } else { "triaged" },
            esc(&a.id),
            esc(&a.state),
            series_link(data, slugs, &a.series, &esc(&a.series)),
            esc(&a.run),
            esc(&a.kind),
            esc(day(&a.created_at)),
            esc(a.note.as_deref().unwrap_or(""))
        )
        .unwrap();
    }
    b.push_str("</tbody></table>\n");
}

/// Rows: volume x variant in the order of the cells (the table's: by
/// volume, no fix first); columns: arch / HZ / env.
fn latest(b: &mut String, t: &LatestTable, unit: &str, data: &SiteData, slugs: &[String]) {
    let columns: BTreeSet<&str> = t.cells.iter().map(|c| c.column.as_str()).collect();
    let mut rows: Vec<(&str, &str)> = Vec::new();
    for c in &t.cells {
        if !rows.contains(&(c.volume.as_str(), c.variant.as_str())) {
            rows.push((c.volume.as_str(), c.variant.as_str()));
        }
    }
    let run = link(t.link.as_deref(), &esc(&t.run));
    write!(
        b,
        "<h2>Latest full run</h2>\n<p class=\"muted\">{run}, {}: mean ({unit}; 95% CI, n), the sleep L \
         (ticks), the model and the 2021 report.</p>\n<table id=\"latest\"><thead><tr><th>volume</th><th>variant</th>",
        esc(day(&t.date)),
        unit = esc(unit)
    )
    .unwrap();
    for col in &columns {
        write!(
            b,
            "<th>{}</th><th class=\"n\">L</th><th class=\"n\">model</th><th class=\"n\">2021</th>",
            esc(col)
        )
        .unwrap();
    }
    b.push_str("</tr></thead><tbody>\n");
    for (vol, var) in rows {
        write!(b, "<tr><td>{}</td><td>{}</td>", esc(vol), esc(var)).unwrap();
        for col in &columns {
            let c = t
                .cells
                .iter()
                .find(|c| c.volume == vol && c.variant == var && c.column == *col);
            let Some(c) = c else {
                b.push_str("<td>–</td><td>–</td><td>–</td><td>–</td>");
                continue;
            };
            let mean = match c.ci {
                Some(_) => format!("{} ({}, n={})", num(c.mean), ci(c.ci), c.n),
                None => format!("{} (n={})", num(c.mean), c.n),
            };
            let mean = match &c.series {
                Some(id) => series_link(data, slugs, id, &mean),
                None => mean,
            };
            let rep = c.reported.map_or("–".into(), |r| {
                format!("{} ({:+.1}%)", num(r), (c.mean / r - 1.0) * 100.0)
            });
            write!(
                b,
                "<td class=\"n\">{mean}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{rep}</td>",
                ticks(&c.sleep_ticks),
                num(c.model)
            )
            .unwrap();
        }
        b.push_str("</tr>\n");
    }
    b.push_str("</tbody></table>\n");
}

fn series_table(b: &mut String, data: &SiteData, slugs: &[String]) -> Result<(), PlotError> {
    write!(
        b,
        "<h2>Series</h2>\n<table id=\"series\"><thead><tr><th>series</th><th class=\"n\">runs</th>\
         <th class=\"n\">latest ({})</th><th class=\"n\">L</th><th class=\"n\">changes</th><th>over time</th></tr></thead><tbody>\n",
        esc(&data.unit)
    )
    .unwrap();
    for (s, slug) in data.series.iter().zip(slugs) {
        let last = s.points.last();
        writeln!(
            b,
            "<tr data-series=\"{}\"><td>{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(&s.id),
            link(Some(&format!("series/{slug}.html")), &esc(&s.label)),
            s.points.len(),
            last.map_or("–".into(), |p| num(p.value)),
            last.map_or("–".into(), |p| ticks(&p.sleep_ticks)),
            s.changes.len(),
            sparkline(&points(s), (160, 34))?
        )
        .unwrap();
    }
    b.push_str("</tbody></table>\n");
    Ok(())
}
