//! Markdown in the shape of the 2021 report's table (rows: volume x
//! variant; columns: arch / HZ), then per-cell statistics, ratios,
//! failures and notes.

use std::collections::BTreeSet;
use std::fmt::Write;

use lazyinit_core::{ByteSize, Variant};

use super::{num, pct, Labeller};
use crate::cells::{CellKey, CellStats, Metric};
use crate::ratios::RatioRow;
use crate::report::Report;

fn variant_name(v: Variant) -> &'static str {
    match v {
        Variant::NoFix => "without fix",
        Variant::Fix => "with fix",
    }
}

/// A cell's key without volume and variant: one column of the table.
fn column_of(k: &CellKey) -> CellKey {
    let mut k = k.clone();
    k.axes.variant = Variant::NoFix;
    k.axes.volume = lazyinit_core::ByteSize(0);
    k
}

/// The measured cell, marked when a run did not hold its storage profile
/// (`16.24 (n=1) L=5, profile not held: first zeroing 2.28 ms, want
/// 3.20-3.60`).
fn measured(c: &CellStats) -> String {
    let m = measured_only(c);
    match c.profile_mark() {
        Some(mark) => format!("{m} {}", mark.replace('|', "\\|")),
        None => m,
    }
}

fn measured_only(c: &CellStats) -> String {
    match &c.summary {
        None => "no data".into(),
        Some(s) => match (s.ci95, c.prediction) {
            (Some(ci), _) => format!("{} ({}–{}, n={})", num(s.mean), num(ci.lo), num(ci.hi), s.n),
            (None, Some(pi)) => format!(
                "{} (95% PI {}–{}, n={})",
                num(s.mean),
                num(pi.lo),
                num(pi.hi),
                s.n
            ),
            (None, None) => format!("{} (n={})", num(s.mean), s.n),
        },
    }
}

fn table(out: &mut String, r: &Report, lab: &Labeller) {
    let columns: BTreeSet<CellKey> = r.cells.iter().map(|c| column_of(&c.key)).collect();
    // Rows in the report's order: by volume, without fix first.
    let mut rows: Vec<(u64, Variant)> = r
        .cells
        .iter()
        .map(|c| (c.key.axes.volume.0, c.key.axes.variant))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    rows.sort_by_key(|&(v, var)| (v, var == Variant::Fix));
    out.push_str("| volume | variant |");
    for col in &columns {
        write!(out, " {} | model | 2021 | vs 2021 |", lab.column(col)).unwrap();
    }
    out.push_str("\n|---|---|");
    out.push_str(&"---:|---:|---:|---:|".repeat(columns.len()));
    out.push('\n');
    for (vol, var) in rows {
        write!(out, "| {} | {} |", ByteSize(vol), variant_name(var)).unwrap();
        for col in &columns {
            let cell = r.cells.iter().find(|c| {
                c.key.axes.volume.0 == vol && c.key.axes.variant == var && column_of(&c.key) == *col
            });
            match cell {
                None => out.push_str(" – | – | – | – |"),
                Some(c) => {
                    let (rep, diff) = match &c.reported {
                        Some(rv) => (num(rv.value), pct(rv.diff_pct) + in_range(rv.in_range)),
                        None => ("–".into(), "–".into()),
                    };
                    write!(
                        out,
                        " {} | {} | {rep} | {diff} |",
                        measured(c),
                        num(c.model.value)
                    )
                    .unwrap();
                }
            }
        }
        out.push('\n');
    }
}

fn cell_stats(out: &mut String, r: &Report, lab: &Labeller) {
    out.push_str("| cell | n | failed | mean | median | stddev | min | max | CV | 95% CI | L (ticks) | model | vs model | L + 1 ticks only | vs that | model basis |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---|\n");
    let o = |x: Option<f64>| x.map(num).unwrap_or_else(|| "–".into());
    for c in &r.cells {
        let ls: Vec<String> = c.sleep_ticks.iter().map(u64::to_string).collect();
        let ls = if ls.is_empty() {
            "–".into()
        } else {
            ls.join(", ")
        };
        let s = c.summary.as_ref();
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {ls} | {} | {} | {} | {} | {} |",
            lab.cell(&c.key),
            s.map_or(0, |s| s.n),
            c.failed,
            o(s.map(|s| s.mean)),
            o(s.map(|s| s.median)),
            o(s.and_then(|s| s.stddev)),
            o(s.map(|s| s.min)),
            o(s.map(|s| s.max)),
            s.and_then(|s| s.cv)
                .map(|v| format!("{:.1}%", v * 100.0))
                .unwrap_or_else(|| "–".into()),
            match (s.and_then(|s| s.ci95), c.prediction) {
                (Some(i), _) => format!("{}–{}", num(i.lo), num(i.hi)),
                (None, Some(i)) => format!("PI {}–{}", num(i.lo), num(i.hi)),
                (None, None) => "–".into(),
            },
            num(c.model.value),
            vs(s.map(|s| s.mean), c.model.value),
            num(c.model.ticks_only),
            vs(s.map(|s| s.mean), c.model.ticks_only),
            c.model.basis,
        )
        .unwrap();
    }
}

/// The measured mean against a model value, in percent.
fn vs(mean: Option<f64>, model: f64) -> String {
    match mean {
        Some(m) if model > 0.0 => pct((m / model - 1.0) * 100.0),
        _ => "–".into(),
    }
}

fn ratio_line(out: &mut String, x: &RatioRow, lab: &Labeller) {
    let (m, ci) = match &x.measured {
        Some(e) => (
            format!("{:.2}", e.value),
            e.ci95
                .map(|i| format!("{:.2}–{:.2}", i.lo, i.hi))
                .unwrap_or_else(|| "– (n=1)".into()),
        ),
        None => ("no data".into(), "–".into()),
    };
    let rep: Vec<String> = x
        .reported
        .iter()
        .map(|r| {
            if r.volume_bytes == x.numerator.axes.volume.0 {
                format!("{:.2}", r.value)
            } else {
                format!("{:.2} ({})", r.value, ByteSize(r.volume_bytes))
            }
        })
        .collect();
    let rep = if rep.is_empty() {
        "–".into()
    } else {
        rep.join(", ")
    };
    writeln!(
        out,
        "| {} | {} | {} | {m} | {ci} | {:.2} | {rep} |",
        x.kind.title(),
        lab.cell(&x.numerator),
        lab.cell(&x.denominator),
        x.model
    )
    .unwrap();
}

pub fn render(r: &Report) -> String {
    let lab = Labeller::new(r.cells.iter().map(|c| &c.key));
    let unit = r.metric.unit();
    let what = match r.metric {
        Metric::LazyinitS => "ext4lazyinit run time after mount",
        Metric::MsPerGroup => "ext4lazyinit cycle time per block group",
        Metric::FromFirstGroupS => "ext4lazyinit run time from its first group",
    };
    let mut out = format!("# {what} ({}, {unit})\n\n", r.metric.name());
    writeln!(
        out,
        "{} rows, {} cells, {} failed run(s). Measured: mean (95% CI, n). \
         Model: docs/design.md §2{}. 2021: linux-ext4 report (EC2, kernel 5.10), matching arch, HZ, variant and volume.\n",
        r.rows,
        r.cells.len(),
        r.failures.len(),
        if r.metric == Metric::LazyinitS { ", plus the 2.5 s mean start delay" } else { "" },
    )
    .unwrap();
    if r.cells.iter().any(|c| c.key.estimated) {
        out.push_str(
            "Columns marked *estimate* are early-stop estimates, not measurements: each run \
             traced its first groups until the cycle locked and predicted the rest (PI: its \
             95% prediction interval; README, \"Estimates\").\n\n",
        );
    }
    table(&mut out, r, &lab);
    if let Some(t) = &r.thread {
        thread_section(&mut out, t, &lab);
    }
    if !r.kernels.is_empty() {
        kernels_section(&mut out, &r.kernels, &lab);
    }
    out.push_str("\n## Cells\n\n");
    cell_stats(&mut out, r, &lab);
    if !r.ratios.is_empty() {
        out.push_str("\n## Ratios\n\n| ratio | numerator | denominator | measured | 95% CI | model | 2021 |\n|---|---|---|---:|---|---:|---|\n");
        for x in &r.ratios {
            ratio_line(&mut out, x, &lab);
        }
    }
    if !r.failures.is_empty() {
        out.push_str("\n## Failed runs (not aggregated)\n\n| cell | run | status | error |\n|---|---|---|---|\n");
        for f in &r.failures {
            let err = f.error.replace('|', "\\|");
            writeln!(
                out,
                "| {} | {} | {} | {err} |",
                lab.cell(&f.key),
                f.run_id,
                f.status
            )
            .unwrap();
        }
    }
    if !r.notes.is_empty() {
        out.push_str("\n## Notes\n\n");
        for n in &r.notes {
            writeln!(out, "- {n}").unwrap();
        }
    }
    out
}

/// The cells on the thread's own time: what the random start delay does
/// not move, against the model of the same span.
fn thread_section(out: &mut String, t: &crate::report::ThreadPart, lab: &Labeller) {
    out.push_str(
        "\n## The thread from its first group\n\n\
         The kernel starts the thread after a random 0-5 s delay and, since v5.13, \
         prefetches block bitmaps before its first zeroing: *before* is the mount to the \
         first group (delay, prefetch, first zeroing), *thread* the first group to the \
         thread's exit, which the delay does not move. The model is of the thread's span.\n\n\
         | cell | before first group | thread | model | vs model | L (ticks) |\n\
         |---|---:|---:|---:|---:|---|\n",
    );
    for (c, before) in t.cells.iter().zip(&t.before_first_group) {
        let before = match before {
            Some(b) if b.n > 1 => format!("{} ({}–{})", num(b.mean), num(b.min), num(b.max)),
            Some(b) => num(b.mean),
            None => "–".into(),
        };
        let ls: Vec<String> = c.sleep_ticks.iter().map(u64::to_string).collect();
        writeln!(
            out,
            "| {} | {before} | {} | {} | {} | {} |",
            lab.cell(&c.key),
            measured(c),
            num(c.model.value),
            vs(c.summary.as_ref().map(|s| s.mean), c.model.value),
            if ls.is_empty() {
                "–".into()
            } else {
                ls.join(", ")
            },
        )
        .unwrap();
    }
    if !t.ratios.is_empty() {
        out.push_str(
            "\nRatios on the thread's span (the 2021 figures include the delay):\n\n\
             | ratio | numerator | denominator | measured | 95% CI | model | 2021 |\n\
             |---|---|---|---:|---|---:|---|\n",
        );
        for x in &t.ratios {
            ratio_line(out, x, lab);
        }
    }
}

/// Each cell measured on several kernels: the kernels in version order,
/// each against the one before it on the thread's span.
fn kernels_section(out: &mut String, series: &[crate::kernels::KernelSeries], lab: &Labeller) {
    out.push_str(
        "\n## Kernels side by side\n\n\
         Per cell, each kernel against the one before it on the thread's span (first \
         group to exit, seconds), which the random start delay does not move. *beyond* \
         says whether the difference exceeds the resolution: the clock's (2 µs on the \
         virtual clock) and the spread of the runs; *?* with one run a side on the real \
         clock.\n",
    );
    let o = |s: &Option<crate::stats::Summary>, f: fn(f64) -> String| {
        s.as_ref().map_or_else(|| "–".to_string(), |s| f(s.mean))
    };
    for s in series {
        writeln!(
            out,
            "\n### {}\n\n| kernel | source | thread (s) | lazyinit_s | before first group (s) | L | ms/group | vs previous | beyond |\n|---|---|---:|---:|---:|---|---:|---|---|",
            lab.cell(&s.key)
        )
        .unwrap();
        for k in &s.kernels {
            let ls: Vec<String> = k.sleep_ticks.iter().map(u64::to_string).collect();
            let (vs, beyond) = match &k.versus_previous {
                None => ("–".to_string(), "–"),
                Some(d) => (
                    format!("{:+.6} s ({}) vs {}", d.diff_s, pct(d.diff_pct), d.previous),
                    match d.beyond {
                        Some(true) => "**yes**",
                        Some(false) => "no",
                        None => "?",
                    },
                ),
            };
            writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {vs} | {beyond} |",
                k.version,
                k.source,
                o(&k.thread, |x| format!("{x:.6}")),
                o(&k.lazyinit, |x| format!("{x:.3}")),
                o(&k.before_first_group, |x| format!("{x:.3}")),
                if ls.is_empty() {
                    "–".into()
                } else {
                    ls.join(", ")
                },
                o(&k.ms_per_group, |x| format!("{x:.3}")),
            )
            .unwrap();
        }
    }
}

/// Where the 2021 figure lies against a noisy cell's runs (nothing for
/// other cells).
fn in_range(r: Option<bool>) -> &'static str {
    match r {
        Some(true) => " (in the runs' range)",
        Some(false) => " (outside the runs' range)",
        None => "",
    }
}

#[cfg(test)]
mod tests {
    /// A cell with a run that did not hold its storage profile is marked
    /// in the table, with the L it slept and the window it missed.
    #[test]
    fn a_cell_whose_profile_was_not_held_is_marked() {
        let mut r = crate::cells::tests_support::row("debian-6.1", 16.24);
        let held = super::render(&crate::build(&[r.clone()], Default::default()));
        assert!(!held.contains("profile not held"), "{held}");
        r.measured.sleep_ticks = Some(5);
        r.measured.z1_ms = Some(2.28);
        r.measured.profile_held = Some(false);
        r.measured.z1_lo_ms = Some(3.2);
        r.measured.z1_hi_ms = Some(3.6);
        let md = super::render(&crate::build(&[r], Default::default()));
        assert!(
            md.contains(
                "| 16.24 (n=1) L=5, profile not held: first zeroing 2.28 ms, want 3.20-3.60 |"
            ),
            "{md}"
        );
    }
}
