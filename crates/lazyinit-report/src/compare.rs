//! The regression gate: match baseline and candidate cells by their whole
//! configuration, test each pair (Welch's t-test plus a threshold on the
//! relative change of means) and decide an exit code.

use std::collections::BTreeMap;

use lazyinit_core::exit;
use lazyinit_core::results::ResultRow;
use lazyinit_core::Variant;
use serde::Serialize;

use crate::cells::{aggregate, CellKey, CellStats, Metric};
use crate::stats::{welch, Summary, Welch};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompareOptions {
    pub metric: Metric,
    /// Smallest relative change of the mean that counts, in percent.
    pub threshold_pct: f64,
    /// Significance level of the t-test.
    pub alpha: f64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            metric: Metric::LazyinitS,
            threshold_pct: 5.0,
            alpha: 0.05,
        }
    }
}

/// Both metrics are durations: larger is worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Regression,
    Improvement,
    NoChange,
    InsufficientData,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Regression => "REGRESSION",
            Verdict::Improvement => "improvement",
            Verdict::NoChange => "no change",
            Verdict::InsufficientData => "insufficient data",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    /// Welch's t-test at `alpha`, and the threshold.
    Welch,
    /// A side has a single run: no variance, so the threshold alone decides.
    ThresholdOnly,
    /// A side has no ok run.
    None,
}

#[derive(Debug, Clone, Serialize)]
pub struct CellComparison {
    pub key: CellKey,
    pub baseline: Option<Summary>,
    pub candidate: Option<Summary>,
    /// (candidate mean / baseline mean - 1) * 100.
    pub change_pct: Option<f64>,
    pub welch: Option<Welch>,
    pub test: Test,
    pub verdict: Verdict,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Baseline,
    Candidate,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub metric: Metric,
    pub threshold_pct: f64,
    pub alpha: f64,
    pub cells: Vec<CellComparison>,
    /// Cells present on one side only.
    pub missing: Vec<(Side, CellKey)>,
}

impl Comparison {
    pub fn count(&self, v: Verdict) -> usize {
        self.cells.iter().filter(|c| c.verdict == v).count()
    }

    /// 2 when the comparison is incomplete (a cell missing on one side or
    /// without ok runs): fix the input first. Else 1 on any regression.
    pub fn exit_code(&self) -> u8 {
        if !self.missing.is_empty() || self.count(Verdict::InsufficientData) > 0 {
            exit::BAD_INPUT
        } else if self.count(Verdict::Regression) > 0 {
            exit::REGRESSION_OR_CELL_FAILED
        } else {
            exit::OK
        }
    }
}

/// Decides one cell from its two summaries.
pub fn judge(
    b: Option<&Summary>,
    c: Option<&Summary>,
    o: &CompareOptions,
) -> (Option<f64>, Option<Welch>, Test, Verdict) {
    let (Some(b), Some(c)) = (b, c) else {
        return (None, None, Test::None, Verdict::InsufficientData);
    };
    if b.mean == 0.0 {
        return (None, None, Test::None, Verdict::InsufficientData);
    }
    let change = (c.mean / b.mean - 1.0) * 100.0;
    let w = welch(b, c);
    let significant = w.is_none_or(|w| w.p < o.alpha);
    let test = if w.is_some() {
        Test::Welch
    } else {
        Test::ThresholdOnly
    };
    let verdict = if significant && change > o.threshold_pct {
        Verdict::Regression
    } else if significant && change < -o.threshold_pct {
        Verdict::Improvement
    } else {
        Verdict::NoChange
    };
    (Some(change), w, test, verdict)
}

fn sleep_note(b: &CellStats, c: &CellStats) -> Option<String> {
    if b.key.variant != Variant::Fix || b.sleep_ticks == c.sleep_ticks {
        return None;
    }
    let l = |s: &CellStats| {
        s.sleep_ticks
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(format!(
        "sleep between groups differs (baseline L = {}, candidate L = {}): with the fix L is set by the first group's zeroing time z1 as the clocksource measures it; check z1, concurrency and clocksource before blaming the kernel",
        l(b),
        l(c)
    ))
}

pub fn compare(baseline: &[ResultRow], candidate: &[ResultRow], o: &CompareOptions) -> Comparison {
    let base: BTreeMap<CellKey, CellStats> = aggregate(baseline, o.metric)
        .into_iter()
        .map(|c| (c.key.clone(), c))
        .collect();
    let cand: BTreeMap<CellKey, CellStats> = aggregate(candidate, o.metric)
        .into_iter()
        .map(|c| (c.key.clone(), c))
        .collect();
    let mut cells = Vec::new();
    let mut missing = Vec::new();
    for (key, b) in &base {
        let Some(c) = cand.get(key) else {
            missing.push((Side::Candidate, key.clone()));
            continue;
        };
        let (change_pct, welch, test, verdict) = judge(b.summary.as_ref(), c.summary.as_ref(), o);
        let mut notes: Vec<String> = sleep_note(b, c).into_iter().collect();
        if test == Test::ThresholdOnly {
            notes.push("a side has one run: no t-test, threshold only".into());
        }
        cells.push(CellComparison {
            key: key.clone(),
            baseline: b.summary.clone(),
            candidate: c.summary.clone(),
            change_pct,
            welch,
            test,
            verdict,
            notes,
        });
    }
    missing.extend(
        cand.keys()
            .filter(|k| !base.contains_key(*k))
            .map(|k| (Side::Baseline, k.clone())),
    );
    Comparison {
        metric: o.metric,
        threshold_pct: o.threshold_pct,
        alpha: o.alpha,
        cells,
        missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summarize;

    fn s(v: &[f64]) -> Option<Summary> {
        summarize(v)
    }

    #[test]
    fn verdicts() {
        let o = CompareOptions::default();
        let base = s(&[60.0, 60.5, 61.0]);
        let j = |c: &[f64]| judge(base.as_ref(), s(c).as_ref(), &o).3;
        assert_eq!(j(&[70.0, 70.5, 71.0]), Verdict::Regression);
        assert_eq!(j(&[50.0, 50.5, 51.0]), Verdict::Improvement);
        // Significant but below the threshold.
        assert_eq!(j(&[61.5, 62.0, 62.5]), Verdict::NoChange);
        // Above the threshold but drowned in noise.
        assert_eq!(j(&[40.0, 70.0, 100.0]), Verdict::NoChange);
        assert_eq!(judge(base.as_ref(), None, &o).3, Verdict::InsufficientData);
    }

    #[test]
    fn single_runs_fall_back_to_the_threshold() {
        let o = CompareOptions::default();
        let (_, w, test, v) = judge(s(&[60.0]).as_ref(), s(&[64.0]).as_ref(), &o);
        assert_eq!(
            (w, test, v),
            (None, Test::ThresholdOnly, Verdict::Regression)
        );
        let (_, _, _, v) = judge(s(&[60.0]).as_ref(), s(&[62.0, 62.1]).as_ref(), &o);
        assert_eq!(v, Verdict::NoChange);
    }
}
