//! `history check`: a new run judged against its series' history, not
//! one baseline run.
//!
//! For each series the run has a point in, over the history up to and
//! with that run:
//! - **fail** when the series' latest change point has an open alert
//!   (state `new`): the series moved and nobody has looked yet;
//! - **fail** when the run itself is off the level of the runs since the
//!   latest change (at least [`MIN_HISTORY`] of them): a t-test of the
//!   segment against the one new value (a t prediction interval) at
//!   [`ChangeOptions::run_p`];
//! - **pass** otherwise; a series with fewer earlier runs passes with a
//!   note (nothing to judge against).
//!
//! Each failure raises an alert (kept with its state); `history ack`
//! acknowledging it, or marking it invalid, lets the gate pass again.

use lazyinit_core::exit;
use serde::Serialize;

use crate::changes::{self, Alert, Change, ChangeKind, ChangeOptions};
use crate::edivisive::{ttest, Split};
use crate::series::Series;
use crate::HistoryError;

/// Earlier runs a series needs before a new run is judged against them
/// (lkp-tests asks for three samples).
pub const MIN_HISTORY: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Pass,
    /// Too few earlier runs to judge.
    NoHistory,
    Fail,
}

/// The verdict on one series of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesVerdict {
    pub series: String,
    pub label: String,
    pub outcome: Outcome,
    /// The run's value and the level it was judged against.
    pub value: f64,
    pub level: Option<f64>,
    pub earlier_runs: usize,
    pub message: String,
    /// The changes that fail it (or that were triaged), with their alerts.
    pub changes: Vec<Change>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckReport {
    pub run_key: String,
    pub metric: String,
    pub verdicts: Vec<SeriesVerdict>,
}

impl exit::ExitCode for CheckReport {
    /// 0 every series passes, 1 one fails, 2 the run has no series (no
    /// ok row with the metric), as `compare` exits.
    fn exit_code(&self) -> u8 {
        if self.verdicts.is_empty() {
            exit::BAD_INPUT
        } else if self.verdicts.iter().any(|v| v.outcome == Outcome::Fail) {
            exit::REGRESSION_OR_CELL_FAILED
        } else {
            exit::OK
        }
    }
}

/// What check found in one series before alerts are looked up: the
/// changes that would fail it.
pub fn judge_series(
    series: &Series,
    run_key: &str,
    opts: &ChangeOptions,
) -> Option<(SeriesVerdict, Vec<Change>)> {
    let at = series.points.iter().position(|p| p.run_key == run_key)?;
    let upto = Series {
        points: series.points[..=at].to_vec(),
        ..series.clone()
    };
    let value = upto.points[at].value;
    let found = changes::of_series(&upto, opts);
    let since = found.last().map_or(0, |c| c.index);
    let earlier = &upto.points[since..at];
    let mut suspects: Vec<Change> = found.last().cloned().into_iter().collect();
    if earlier.len() >= MIN_HISTORY {
        let level: Vec<f64> = earlier.iter().map(|p| p.value).collect();
        let t = ttest(&level, &[value]);
        let big = t.magnitude() > opts.edivisive.min_magnitude;
        if t.p < opts.run_p && big {
            let split = Split {
                index: at,
                stats: t,
            };
            suspects.push(changes::change_of(
                &upto,
                &split,
                since,
                at + 1,
                ChangeKind::NewRun,
            ));
        }
    }
    let level = (!earlier.is_empty())
        .then(|| earlier.iter().map(|p| p.value).sum::<f64>() / earlier.len() as f64);
    let verdict = SeriesVerdict {
        series: series.id.clone(),
        label: series.label.clone(),
        outcome: if at < MIN_HISTORY {
            Outcome::NoHistory
        } else {
            Outcome::Pass
        },
        value,
        level,
        earlier_runs: at,
        message: String::new(),
        changes: Vec::new(),
    };
    Some((verdict, suspects))
}

/// Settles a verdict once the suspects' alerts are known.
pub fn settle(
    mut v: SeriesVerdict,
    suspects: Vec<Change>,
    alerts: &[Alert],
    unit: &str,
) -> SeriesVerdict {
    let mut open = Vec::new();
    for mut c in suspects {
        c.attach(alerts);
        if c.alert.as_ref().is_none_or(|a| a.state.is_open()) {
            open.push(describe(&c, unit));
        }
        v.changes.push(c);
    }
    if !open.is_empty() {
        v.outcome = Outcome::Fail;
        v.message = open.join("; ");
    } else if v.outcome == Outcome::NoHistory {
        v.message = format!(
            "{} earlier run(s): at least {MIN_HISTORY} are needed to judge",
            v.earlier_runs
        );
    } else {
        v.message = match v.level {
            Some(l) => format!("{:.4} {unit} at its level {:.4} {unit}", v.value, l),
            None => format!("{:.4} {unit}", v.value),
        };
    }
    v
}

/// One line about a change that fails the gate.
pub fn describe(c: &Change, unit: &str) -> String {
    let what = match c.kind {
        ChangeKind::Change => "change point",
        ChangeKind::NewRun => "this run is off its level",
    };
    let mut s = format!(
        "{what} [{}] at {}: {:.4} -> {:.4} {unit} ({:+.2}%, p={:.2e})",
        c.alert_id, c.first_run.run_key, c.before.mean, c.after.mean, c.change_pct, c.p
    );
    if let Some((b, a)) = &c.sleep_moved {
        s.push_str(&format!(", an L change: L {b:?} -> {a:?}"));
    }
    s.push_str(&format!("; `history ack {}` once triaged", c.alert_id));
    s
}

/// Checks `run_key` in a history: see the module's doc.
pub fn check(
    h: &mut crate::History,
    run_key: &str,
    metric: lazyinit_report::cells::Metric,
    opts: &ChangeOptions,
) -> Result<CheckReport, HistoryError> {
    let series = h.series(metric, None)?;
    let judged: Vec<(SeriesVerdict, Vec<Change>)> = series
        .iter()
        .filter_map(|s| judge_series(s, run_key, opts))
        .collect();
    let all: Vec<Change> = judged.iter().flat_map(|(_, c)| c.iter().cloned()).collect();
    let alerts = h.raise(&all)?;
    let verdicts = judged
        .into_iter()
        .map(|(v, s)| settle(v, s, &alerts, metric.unit()))
        .collect();
    Ok(CheckReport {
        run_key: run_key.to_string(),
        metric: metric.name().to_string(),
        verdicts,
    })
}
