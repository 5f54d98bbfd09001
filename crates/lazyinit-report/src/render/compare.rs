//! Text of a [`Comparison`]: a verdict per cell, missing cells, a summary.

use lazyinit_core::exit::ExitCode;
use std::fmt::Write;

use super::{num, pct, Labeller};
use crate::cells::CellKey;
use crate::compare::{Comparison, Side, Test};
use crate::stats::Summary;

fn side(s: Option<&Summary>, estimated: bool) -> String {
    let est = if estimated { "est. " } else { "" };
    match s {
        None => "no data".into(),
        Some(s) => match s.ci95 {
            Some(ci) => format!(
                "{est}{} ({}–{}, n={})",
                num(s.mean),
                num(ci.lo),
                num(ci.hi),
                s.n
            ),
            None => format!("{est}{} (n={})", num(s.mean), s.n),
        },
    }
}

/// One line a gate log can grep for.
pub fn summary_line(c: &Comparison) -> String {
    use crate::compare::Verdict::*;
    // Said only when there are any: the line is grepped as it was.
    let unknown = match c.count(Unknown) {
        0 => String::new(),
        n => format!(", {n} UNKNOWN (storage profile not held)"),
    };
    format!(
        "{} cells compared: {} regression(s), {} improvement(s), {} unchanged{unknown}, {} with insufficient data, {} missing on one side; exit {}",
        c.cells.len(),
        c.count(Regression),
        c.count(Improvement),
        c.count(NoChange),
        c.count(InsufficientData),
        c.missing.len(),
        c.exit_code()
    )
}

pub fn markdown(c: &Comparison) -> String {
    let lab = Labeller::new(
        c.cells
            .iter()
            .map(|x| &x.key)
            .chain(c.missing.iter().map(|(_, k)| k)),
    );
    let mut out = format!(
        "# compare: {} ({}), threshold {}%, Welch's t-test at alpha {}\n\n",
        c.metric.name(),
        c.metric.unit(),
        c.threshold_pct,
        c.alpha
    );
    if !c.ignored.is_empty() {
        let names: Vec<String> = c.ignored.iter().map(|f| name(*f)).collect();
        writeln!(
            out,
            "Cells matched ignoring {} (shown as `*`; an early-stop estimate as `est.`).\n",
            names.join(", ")
        )
        .unwrap();
    }
    out.push_str("| cell | baseline | candidate | change | p | test | verdict |\n|---|---:|---:|---:|---:|---|---|\n");
    for x in &c.cells {
        let p = x
            .welch
            .map(|w| format!("{:.4}", w.p))
            .unwrap_or_else(|| "–".into());
        let test = match x.test {
            Test::Welch => "welch",
            Test::ThresholdOnly => "threshold only (n=1)",
            Test::None => "–",
        };
        writeln!(
            out,
            "| {} | {} | {} | {} | {p} | {test} | {} |",
            lab.cell(&x.key),
            side(x.baseline.as_ref(), x.baseline_estimated),
            side(x.candidate.as_ref(), x.candidate_estimated),
            x.change_pct.map(pct).unwrap_or_else(|| "–".into()),
            x.verdict.text()
        )
        .unwrap();
    }
    if !c.missing.is_empty() {
        out.push_str("\n## Missing cells\n\n");
        for (s, k) in &c.missing {
            let side = match s {
                Side::Baseline => "baseline",
                Side::Candidate => "candidate",
            };
            writeln!(out, "- not in the {side}: {}", k.label()).unwrap();
        }
    }
    let notes: Vec<String> = c
        .cells
        .iter()
        .flat_map(|x| {
            x.notes
                .iter()
                .map(|n| format!("- {}: {n}", lab.cell(&x.key)))
        })
        .collect();
    if !notes.is_empty() {
        out.push_str("\n## Notes\n\n");
        out.push_str(&notes.join("\n"));
        out.push('\n');
    }
    writeln!(out, "\n{}", summary_line(c)).unwrap();
    out
}

/// One CSV line: a compared cell or a cell missing on one side.
struct Line<'a> {
    key: &'a CellKey,
    baseline: Option<&'a Summary>,
    candidate: Option<&'a Summary>,
    change_pct: Option<f64>,
    p: Option<f64>,
    test: String,
    verdict: String,
    estimated: (bool, bool),
}

/// The snake_case name serde gives a unit enum variant.
fn name<T: serde::Serialize>(v: T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

pub fn csv(c: &Comparison) -> String {
    let mut lines: Vec<Line> = c
        .cells
        .iter()
        .map(|x| Line {
            key: &x.key,
            baseline: x.baseline.as_ref(),
            candidate: x.candidate.as_ref(),
            change_pct: x.change_pct,
            p: x.welch.map(|w| w.p),
            test: name(x.test),
            verdict: name(x.verdict),
            estimated: (x.baseline_estimated, x.candidate_estimated),
        })
        .collect();
    lines.extend(c.missing.iter().map(|(side, key)| Line {
        key,
        baseline: None,
        candidate: None,
        change_pct: None,
        p: None,
        test: "none".into(),
        verdict: format!("missing_in_{}", name(side)),
        estimated: (key.estimated, key.estimated),
    }));
    let f = |x: Option<f64>| x.map(|v| format!("{v:.6}")).unwrap_or_default();
    let mut w = csv::Writer::from_writer(Vec::new());
    let fields = CellKey::shown_fields(lines.iter().map(|l| l.key));
    let mut header = vec!["cell"];
    header.extend(fields.iter().map(|f| f.column));
    header.extend([
        "metric",
        "baseline_n",
        "baseline_mean",
        "candidate_n",
        "candidate_mean",
        "change_pct",
        "p",
        "test",
        "verdict",
        "baseline_estimated",
        "candidate_estimated",
    ]);
    w.write_record(header).expect("writing to memory");
    for l in lines {
        let k = l.key;
        let mut rec = vec![k.label()];
        rec.extend(k.values_of(&fields));
        rec.extend([
            c.metric.name().into(),
            l.baseline.map_or(0, |s| s.n).to_string(),
            f(l.baseline.map(|s| s.mean)),
            l.candidate.map_or(0, |s| s.n).to_string(),
            f(l.candidate.map(|s| s.mean)),
            f(l.change_pct),
            f(l.p),
            l.test,
            l.verdict,
            l.estimated.0.to_string(),
            l.estimated.1.to_string(),
        ]);
        w.write_record(rec).expect("writing to memory");
    }
    String::from_utf8(w.into_inner().expect("flushing memory")).expect("CSV of UTF-8 fields")
}
