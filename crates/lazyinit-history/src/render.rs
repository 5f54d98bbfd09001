//! Text, CSV, JSON and JUnit renderings of series, changes and a check.
//! Pure: the same history gives the same bytes on either backend.

use std::fmt::Write;

use lazyinit_report::render::junit::{Case, CaseResult, Suite};

use serde::Serialize;

use crate::changes::Change;
use crate::check::{CheckReport, Outcome};
use crate::series::Series;

/// `--format` of `show`, `changes` and `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Csv,
    Json,
    Junit,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Format::Text),
            "csv" => Ok(Format::Csv),
            "json" => Ok(Format::Json),
            "junit" => Ok(Format::Junit),
            _ => Err(format!("format `{s}`: use text, csv, json or junit")),
        }
    }
}

pub fn json<T: Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

fn sleeps(l: &[u64]) -> String {
    if l.is_empty() {
        "-".into()
    } else {
        l.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
    }
}

/// `history show`: each series, one line per run.
pub fn series_text(series: &[Series]) -> String {
    let mut out = String::new();
    if series.len() > 1 {
        writeln!(
            out,
            "{} series; each is one cell on one testbed, never pooled with another.",
            series.len()
        )
        .unwrap();
    }
    for s in series {
        writeln!(
            out,
            "\n{}  ({} in {}, {} runs)",
            s.id,
            s.metric,
            s.unit,
            s.points.len()
        )
        .unwrap();
        writeln!(
            out,
            "  {:<34} {:<20} {:<34} {:>12} {:>4} {:>5} {:>25}",
            "run", "date", "kernel", "value", "n", "L", "95% CI"
        )
        .unwrap();
        for p in &s.points {
            let ci = match (p.ci_lo, p.ci_hi) {
                (Some(lo), Some(hi)) => format!("{lo:.4} - {hi:.4}"),
                _ => "-".into(),
            };
            writeln!(
                out,
                "  {:<34} {:<20} {:<34} {:>12.4} {:>4} {:>5} {:>25}",
                p.run_key.split('@').next().unwrap_or_default(),
                p.date.get(..19).unwrap_or(&p.date),
                p.kernel,
                p.value,
                p.n,
                sleeps(&p.sleep_ticks),
                ci
            )
            .unwrap();
        }
    }
    out
}

/// `history show --format csv`: one row per (series, run).
pub fn series_csv(series: &[Series]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "series",
        "metric",
        "run_key",
        "date",
        "folder",
        "kernel",
        "value",
        "ci_lo",
        "ci_hi",
        "n",
        "sleep_ticks",
        "estimated",
    ])
    .unwrap();
    for s in series {
        for p in &s.points {
            w.write_record([
                s.id.to_string(),
                s.metric.to_string(),
                p.run_key.clone(),
                p.date.clone(),
                p.folder.clone(),
                p.kernel.clone(),
                format!("{}", p.value),
                p.ci_lo.map(|v| v.to_string()).unwrap_or_default(),
                p.ci_hi.map(|v| v.to_string()).unwrap_or_default(),
                p.n.to_string(),
                sleeps(&p.sleep_ticks).replace('-', ""),
                p.estimated.to_string(),
            ])
            .unwrap();
        }
    }
    String::from_utf8(w.into_inner().unwrap()).unwrap()
}

/// `history changes`.
pub fn changes_text(changes: &[Change], series_count: usize) -> String {
    let mut out = format!("{} change(s) in {series_count} series\n", changes.len());
    for c in changes {
        let state = c.alert.as_ref().map_or("new", |a| a.state.as_str());
        writeln!(out, "\n[{}] {} ({state})", c.alert_id, c.series).unwrap();
        writeln!(
            out,
            "  at run {} ({}), after {}",
            c.first_run.run_key, c.first_run.folder, c.last_run_before.run_key
        )
        .unwrap();
        writeln!(
            out,
            "  {}: {:.4} -> {:.4} {} ({:+.2}%), p = {:.2e}, runs {} | {}",
            c.metric,
            c.before.mean,
            c.after.mean,
            c.unit,
            c.change_pct,
            c.p,
            c.before.runs,
            c.after.runs
        )
        .unwrap();
        writeln!(
            out,
            "  kernel {} -> {}",
            c.last_run_before.kernel, c.first_run.kernel
        )
        .unwrap();
        if let (Some(a), Some(b)) = (
            &c.last_run_before.kernel_identity,
            &c.first_run.kernel_identity,
        ) {
            if a != b {
                writeln!(out, "  kernel tree {a} -> {b}").unwrap();
            }
        }
        if let Some(r) = &c.commits {
            writeln!(out, "  commits {}..{}: {}", r.good, r.bad, r.log).unwrap();
            writeln!(out, "  to name the commit: {}", r.bisect).unwrap();
        }
        if let Some((b, a)) = &c.sleep_moved {
            writeln!(out, "  an L change: L {} -> {}", sleeps(b), sleeps(a)).unwrap();
        }
        if let Some(note) = c.alert.as_ref().and_then(|a| a.note.as_ref()) {
            writeln!(out, "  note: {note}").unwrap();
        }
    }
    out
}

pub fn check_text(r: &CheckReport) -> String {
    let mut out = format!("check of {} on {}\n", r.run_key, r.metric);
    if !r.baseline.is_empty() {
        writeln!(out, "against the baseline {}", r.baseline.join(" + ")).unwrap();
    }
    for v in &r.verdicts {
        writeln!(out, "{:<8} {}: {}", v.outcome.word(), v.series, v.message).unwrap();
    }
    if r.verdicts.is_empty() {
        out.push_str("the run has no row with this metric: nothing to check\n");
    }
    out
}

/// JUnit XML: one test case per series of the run (and per planned cell
/// without a row); a fail is a `failure`, an error an `error`, an
/// unknown `skipped`, each with its reason; a pass says why in its
/// `system-out`.
pub fn check_junit(r: &CheckReport) -> String {
    let cases = r
        .verdicts
        .iter()
        .map(|v| {
            let message = v.message.clone();
            let (result, out) = match v.outcome {
                Outcome::Fail => (
                    CaseResult::Failure {
                        kind: "change",
                        message,
                    },
                    String::new(),
                ),
                Outcome::Error => (
                    CaseResult::Error {
                        kind: "cell",
                        message,
                    },
                    String::new(),
                ),
                Outcome::Unknown => (
                    CaseResult::Skipped {
                        kind: "unknown",
                        message,
                    },
                    String::new(),
                ),
                Outcome::Pass => (CaseResult::Pass, message),
            };
            Case {
                classname: format!("lazyinit.history.{}", r.metric),
                name: v.series.to_string(),
                result,
                out,
            }
        })
        .collect();
    Suite {
        report: "lazyinit-history".into(),
        name: format!("history check {}", r.run_key),
        cases,
        ..Suite::default()
    }
    .xml()
}
