//! Text of a [`Replay`]: predicted against measured per N, then per run.

use std::fmt::Write;

use super::num;
use crate::replay::Replay;

fn signed(x: f64) -> String {
    format!("{x:+.3}%")
}

// Long: the replay report in the order it prints (summary, coverage per folder, runs, left out), one block per part.
pub fn markdown(r: &Replay) -> String {
    let tol = r.tolerance_pct;
    let mut out =
        String::from("# Early stop, replayed on full runs: predicted vs measured lazyinit_s\n\n");
    out.push_str(
        "Each run's groups.csv, cut where a live run asked for an estimate after N groups would \
         have stopped: at the first check (N, then half as many groups again each time) at which \
         the cycle had locked. Error: predicted over measured, minus one; *from first group* \
         leaves out first_group_s (the random start delay and prefetch, which the run measures \
         itself). PI: the 95% prediction interval.\n\n",
    );
    writeln!(
        out,
        "| N | runs | stopped early | groups traced (mean / max) | worst error | worst from first group | within {tol}% | PI covers |\n|---:|---:|---:|---|---:|---:|---:|---:|"
    )
    .unwrap();
    for s in &r.summary {
        writeln!(
            out,
            "| {} | {} | {} | {:.0} / {} | {:.3}% | {:.3}% | {}/{} | {}/{} |",
            s.after,
            s.runs,
            s.stopped,
            s.mean_groups_traced,
            s.max_groups_traced,
            s.worst_error_pct,
            s.worst_from_first_group_error_pct,
            s.within,
            s.runs,
            s.covered,
            s.stopped
        )
        .unwrap();
    }
    match r.smallest_within {
        Some(n) => writeln!(
            out,
            "\nSmallest N with every run within {tol}% (from first group): {n}."
        ),
        None => writeln!(out, "\nNo N given has every run within {tol}%."),
    }
    .unwrap();
    out.push_str(
        "\n## Coverage by results folder\n\nThe condition each ran under is its folder's NOTES.md. \
         PI width: the median over the stopped runs, percent of the prediction.\n\n\
         | folder | N | runs | stopped early | PI covers | within the tolerance | PI width |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for f in &r.by_folder {
        writeln!(
            out,
            "| {} | {} | {} | {} | {}/{} | {}/{} | {:.2}% |",
            f.folder,
            f.after,
            f.runs,
            f.stopped,
            f.covered,
            f.stopped,
            f.within,
            f.runs,
            f.median_width_pct
        )
        .unwrap();
    }
    out.push_str("\n## Runs\n\n| run | cell | groups | measured (s) | N | stopped at | L | predicted (s) | 95% PI | error | from first group | covered |\n|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|\n");
    for run in &r.runs {
        for p in &run.points {
            let (at, l, pred, pi, cov) = match &p.estimate {
                Some(e) => (
                    e.groups_traced.to_string(),
                    e.sleep_ticks().to_string(),
                    num(e.lazyinit_s),
                    format!("{}–{}", num(e.lo_s), num(e.hi_s)),
                    if p.covered == Some(true) { "yes" } else { "no" }.to_string(),
                ),
                None => (
                    "end".into(),
                    "–".into(),
                    "(measured)".into(),
                    "–".into(),
                    "–".into(),
                ),
            };
            writeln!(
                out,
                "| {} | {} | {} | {} | {} | {at} | {l} | {pred} | {pi} | {} | {} | {cov} |",
                run.run_id,
                run.cell_id,
                run.groups,
                num(run.measured_s),
                p.after,
                signed(p.error_pct),
                signed(p.from_first_group_error_pct),
            )
            .unwrap();
        }
    }
    if !r.skipped.is_empty() {
        out.push_str("\n## Left out\n\n");
        for (name, why) in &r.skipped {
            writeln!(out, "- {name}: {why}").unwrap();
        }
    }
    out
}

/// One line per run and N, for scripts.
pub fn csv(r: &Replay) -> String {
    let f = |x: Option<f64>| x.map(|v| format!("{v:.6}")).unwrap_or_default();
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "run_id",
        "cell_id",
        "hz",
        "groups",
        "first_group_s",
        "measured_s",
        "after",
        "refused_checks",
        "stopped_at",
        "sleep_ticks",
        "cycle_ms",
        "predicted_s",
        "pi95_lo",
        "pi95_hi",
        "error_pct",
        "from_first_group_error_pct",
        "covered",
        "block_cycles",
        "near_tick_pct",
        "shift_ms",
        "load_changing",
        "caveat",
    ])
    .expect("writing to memory");
    for run in &r.runs {
        for p in &run.points {
            let e = p.estimate.as_ref();
            w.write_record([
                run.run_id.clone(),
                run.cell_id.clone(),
                run.hz.to_string(),
                run.groups.to_string(),
                f(Some(run.first_group_s)),
                f(Some(run.measured_s)),
                p.after.to_string(),
                p.refused.to_string(),
                e.map(|e| e.groups_traced.to_string()).unwrap_or_default(),
                e.map(|e| e.sleep_ticks().to_string()).unwrap_or_default(),
                f(e.map(|e| e.cycle_s * 1000.0)),
                f(e.map(|e| e.lazyinit_s)),
                f(e.map(|e| e.lo_s)),
                f(e.map(|e| e.hi_s)),
                f(Some(p.error_pct)),
                f(Some(p.from_first_group_error_pct)),
                p.covered.map(|c| c.to_string()).unwrap_or_default(),
                f(e.map(|e| e.spread.block_cycles)),
                f(e.map(|e| 100.0 * (e.spread.near_tick.0 + e.spread.near_tick.1))),
                f(e.map(|e| e.spread.shift_ms)),
                e.map(|e| e.spread.load.changing.to_string())
                    .unwrap_or_default(),
                e.and_then(|e| e.caveat()).unwrap_or_default(),
            ])
            .expect("writing to memory");
        }
    }
    String::from_utf8(w.into_inner().expect("flushing memory")).expect("CSV of UTF-8 fields")
}
