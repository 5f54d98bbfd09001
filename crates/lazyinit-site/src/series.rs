//! A page per series: every run over time (measured and estimated
//! apart, 95% bars where there is one), the change points with their
//! before / after and kernels, and the data table under the plot.

use std::fmt::Write;

use lazyinit_report::plot::{trend, PlotError};

use crate::data::{ChangeData, SeriesData, SideData};
use crate::html::{ci, day, esc, link, num, page, ticks};
use crate::points;

pub fn render(s: &SeriesData, metric: &str, unit: &str) -> Result<String, PlotError> {
    let mut b = String::new();
    write!(
        b,
        "<p>{}</p>\n<h1>{}</h1>\n<p class=\"muted\">series <code>{}</code>, {} run(s).</p>\n",
        link(Some("../index.html"), "all series"),
        esc(&s.label),
        esc(&s.id),
        s.points.len()
    )
    .unwrap();
    let changes: Vec<usize> = s.changes.iter().map(|c| c.index).collect();
    let svg = trend(
        &format!("{metric} ({unit})"),
        &points(s),
        &changes,
        (1000, 360),
    )?;
    writeln!(
        b,
        "<figure id=\"trend\" data-runs=\"{}\">{svg}<figcaption class=\"key\">\
         <span><i class=\"dot\"></i> measured run (mean)</span><span><i class=\"ring\"></i> estimate (early stop)</span>\
         <span>| 95% CI (estimate: PI)</span><span><i class=\"change\"></i> change point</span></figcaption></figure>",
        s.points.len()
    )
    .unwrap();
    change_table(&mut b, &s.changes, unit);
    point_table(&mut b, s, unit);
    Ok(page(&s.label, "../style.css", &b))
}

/// A commit as people quote it: its first 12 hex digits.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// Kernels on one side: all of a few, or the first and last of many.
fn kernels(k: &[String]) -> String {
    match k {
        [first, .., last] if k.len() > 3 => {
            format!("{} … {} ({} kernels)", esc(first), esc(last), k.len())
        }
        k => esc(&k.join(", ")),
    }
}

fn side(x: &SideData) -> String {
    let id = x
        .kernel_identity
        .as_deref()
        .map(|i| format!(" <code>{}</code>", esc(i)))
        .unwrap_or_default();
    format!(
        "{} over {} run(s), L {}; kernels {}; next to the change: {} ({}{id})",
        num(x.mean),
        x.runs,
        ticks(&x.sleep_ticks),
        kernels(&x.kernels),
        esc(&x.run),
        esc(&x.kernel)
    )
}

fn change_table(b: &mut String, changes: &[ChangeData], unit: &str) {
    let unit = esc(unit);
    b.push_str("<h2>Change points</h2>\n");
    if changes.is_empty() {
        b.push_str("<p>None found.</p>\n");
        return;
    }
    writeln!(
        b,
        "<table id=\"changes\"><thead><tr><th class=\"n\">first run after (#)</th><th>before ({unit})</th>\
         <th>after ({unit})</th><th class=\"n\">change</th><th class=\"n\">p</th><th>L moved</th><th>alert</th></tr></thead><tbody>"
    )
    .unwrap();
    for c in changes {
        let moved = if c.before.sleep_ticks != c.after.sleep_ticks {
            format!(
                "{} → {}",
                ticks(&c.before.sleep_ticks),
                ticks(&c.after.sleep_ticks)
            )
        } else {
            "no".into()
        };
        let alert = match (&c.alert, &c.state) {
            (Some(a), Some(s)) => format!("{} ({})", esc(a), esc(s)),
            (Some(a), None) => esc(a),
            _ => "–".into(),
        };
        writeln!(
            b,
            "<tr><td class=\"n\">{}</td><td>{}</td><td>{}</td><td class=\"n\">{:+.1}%</td><td class=\"n\">{:.2e}</td><td>{moved}</td><td>{alert}</td></tr>",
            c.index + 1,
            side(&c.before),
            side(&c.after),
            c.change_pct,
            c.p
        )
        .unwrap();
        if let Some(r) = &c.commits {
            writeln!(
                b,
                "<tr class=\"commits\"><td></td><td colspan=\"6\">commits <code>{}..{}</code>: \
                 <code>{}</code>; to name the commit: <code>{}</code></td></tr>",
                esc(short(&r.good)),
                esc(short(&r.bad)),
                esc(&r.log),
                esc(&r.bisect)
            )
            .unwrap();
        }
    }
    b.push_str("</tbody></table>\n");
}

/// A run's harness commits as people quote them (12 hex digits, and
/// `-dirty`), the whole one in the cell's title; `–` when not recorded.
fn harness(commits: &str) -> String {
    if commits.is_empty() {
        return "–".into();
    }
    let quoted: Vec<String> = commits
        .split(' ')
        .map(|c| match c.strip_suffix("-dirty") {
            Some(h) => format!("{}-dirty", short(h)),
            None => short(c).to_string(),
        })
        .collect();
    format!(
        "<code title=\"{}\">{}</code>",
        esc(commits),
        esc(&quoted.join(" "))
    )
}

/// The plot's data, a row per point, for readers without the plot.
fn point_table(b: &mut String, s: &SeriesData, unit: &str) {
    let unit = esc(unit);
    write!(
        b,
        "<h2>Runs</h2>\n<table id=\"points\"><thead><tr><th class=\"n\">#</th><th>date</th><th>run</th><th>kernel</th>\
         <th class=\"n\">value ({unit})</th><th class=\"n\">95% CI</th><th class=\"n\">n</th><th class=\"n\">L</th><th>kind</th><th>harness</th></tr></thead><tbody>\n"
    )
    .unwrap();
    for (i, p) in s.points.iter().enumerate() {
        let run = link(p.link.as_deref(), &esc(&p.run_id));
        writeln!(
            b,
            "<tr><td class=\"n\">{}</td><td>{}</td><td>{run}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
            i + 1,
            esc(day(&p.date)),
            esc(&p.kernel),
            num(p.value),
            ci(p.ci),
            p.n,
            ticks(&p.sleep_ticks),
            if p.estimated { "estimate" } else { "measured" },
            harness(&p.harness)
        )
        .unwrap();
    }
    b.push_str("</tbody></table>\n");
}
