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

#[derive(Debug, Clone, PartialEq)]
pub struct CompareOptions {
    pub metric: Metric,
    /// Smallest relative change of the mean that counts, in percent.
    pub threshold_pct: f64,
    /// Significance level of the t-test.
    pub alpha: f64,
    /// Key fields not used to match baseline and candidate cells (a release
    /// gate comparing two kernels ignores `kernel_source`). Each side is
    /// still aggregated on the full key.
    pub ignore: Vec<KeyField>,
}

/// The environment fields of a cell key that `compare` can be told to ignore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyField {
    Provider,
    Machine,
    Accel,
    KernelSource,
    StorageProfile,
    /// Match an early-stop estimate with a measurement of the same cell.
    Estimated,
}

impl std::str::FromStr for KeyField {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "provider" => KeyField::Provider,
            "machine" => KeyField::Machine,
            "accel" => KeyField::Accel,
            "kernel_source" => KeyField::KernelSource,
            "storage_profile" => KeyField::StorageProfile,
            "estimated" => KeyField::Estimated,
            _ => {
                return Err(format!(
                    "cannot ignore `{s}`: use provider, machine, accel, kernel_source, storage_profile or estimated"
                ))
            }
        })
    }
}

/// What an ignored field reads as in the matched key.
pub const IGNORED: &str = "*";

/// What an ignored `accel` of a twin's row reads as: ignoring the
/// accelerator never matches a twin (a QEMU guest playing an instance)
/// with a real instance or a QEMU provider's guest.
pub const IGNORED_TWIN: &str = "twin-*";

fn matching_key(k: &CellKey, ignore: &[KeyField]) -> CellKey {
    let twin = lazyinit_core::results::is_twin(&k.testbed.accel);
    let mut k = k.clone();
    for f in ignore {
        let (t, a) = (&mut k.testbed, &mut k.axes);
        match f {
            KeyField::Provider => t.provider = IGNORED.into(),
            KeyField::Machine => t.machine = IGNORED.into(),
            KeyField::Accel if twin => t.accel = IGNORED_TWIN.into(),
            KeyField::Accel => t.accel = IGNORED.into(),
            KeyField::KernelSource => a.source = IGNORED.into(),
            KeyField::StorageProfile => t.storage = IGNORED.into(),
            KeyField::Estimated => k.estimated = false,
        }
    }
    k
}

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("the {side} has several cells that differ only in ignored fields ({a} and {b}); ignoring them would pool different configurations: compare them separately")]
    Ambiguous {
        side: &'static str,
        a: String,
        b: String,
    },
    /// An early-stop estimate is never silently compared with a measurement.
    #[error("{cell}: the baseline is {baseline} and the candidate {candidate}; an early-stop estimate is not a measurement (README, \"Estimates\"): pass --ignore estimated to compare them anyway")]
    EstimateVsMeasurement {
        cell: String,
        baseline: &'static str,
        candidate: &'static str,
    },
}

/// Both refusals are of the input: 2.
impl exit::ExitCode for CompareError {
    fn exit_code(&self) -> u8 {
        exit::BAD_INPUT
    }
}

fn side_cells(
    rows: &[ResultRow],
    o: &CompareOptions,
    side: &'static str,
) -> Result<BTreeMap<CellKey, CellStats>, CompareError> {
    let mut out: BTreeMap<CellKey, CellStats> = BTreeMap::new();
    for c in aggregate(rows, o.metric) {
        let k = matching_key(&c.key, &o.ignore);
        if let Some(prev) = out.get(&k) {
            return Err(CompareError::Ambiguous {
                side,
                a: prev.key.label(),
                b: c.key.label(),
            });
        }
        out.insert(k, c);
    }
    Ok(out)
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            metric: Metric::LazyinitS,
            threshold_pct: 5.0,
            alpha: 0.05,
            ignore: Vec::new(),
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
    /// A side has a run whose first zeroing was outside its storage
    /// profile's window (`profile_held = false`): its L is the host's,
    /// so the cell says nothing of the kernel either way.
    Unknown,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Regression => "REGRESSION",
            Verdict::Improvement => "improvement",
            Verdict::NoChange => "no change",
            Verdict::InsufficientData => "insufficient data",
            Verdict::Unknown => "UNKNOWN",
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
    /// Whether each side is an early-stop estimate (they differ only
    /// with `--ignore estimated`; `key.estimated` is the baseline's).
    pub baseline_estimated: bool,
    pub candidate_estimated: bool,
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
    /// Key fields not used for matching; they read `*` in `cells`.
    pub ignored: Vec<KeyField>,
    pub cells: Vec<CellComparison>,
    /// Cells present on one side only.
    pub missing: Vec<(Side, CellKey)>,
}

impl Comparison {
    pub fn count(&self, v: Verdict) -> usize {
        self.cells.iter().filter(|c| c.verdict == v).count()
    }
}

impl exit::ExitCode for Comparison {
    /// 2 when the comparison is incomplete (a cell missing on one side or
    /// without ok runs): fix the input first. Else 1 on any regression.
    fn exit_code(&self) -> u8 {
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
    if b.sleep_ticks == c.sleep_ticks {
        return None;
    }
    let how = match b.key.axes.variant {
        Variant::Fix => "with the fix L is set by the first group's zeroing time z1 as the clocksource measures it",
        Variant::NoFix => "without the fix L = W x the ticks the first tick-crossing zeroing took",
    };
    let l = |s: &CellStats| {
        s.sleep_ticks
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(format!(
        "sleep between groups differs (baseline L = {}, candidate L = {}): {how}; check z1, concurrency and clocksource before blaming the kernel",
        l(b),
        l(c)
    ))
}

fn kind(estimated: bool) -> &'static str {
    if estimated {
        "an estimate"
    } else {
        "a measurement"
    }
}

/// A cell that is an estimate on one side and a measurement on the other
/// matches only when `estimated` is ignored.
fn refuse_estimate_vs_measurement(
    base: &BTreeMap<CellKey, CellStats>,
    cand: &BTreeMap<CellKey, CellStats>,
) -> Result<(), CompareError> {
    for k in base.keys().filter(|k| !cand.contains_key(*k)) {
        let flipped = CellKey {
            estimated: !k.estimated,
            ..k.clone()
        };
        if cand.contains_key(&flipped) && !base.contains_key(&flipped) {
            return Err(CompareError::EstimateVsMeasurement {
                cell: k.label().trim_end_matches(" (estimate)").to_string(),
                baseline: kind(k.estimated),
                candidate: kind(flipped.estimated),
            });
        }
    }
    Ok(())
}

fn estimate_note(b: &CellStats, c: &CellStats) -> Option<String> {
    let groups = |s: &CellStats| {
        s.estimate_groups
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let side = |s: &CellStats| match s.key.estimated {
        true => format!("an estimate from the first {} groups", groups(s)),
        false => "a measurement".to_string(),
    };
    (b.key.estimated || c.key.estimated).then(|| {
        format!(
            "baseline: {}; candidate: {} (a stall or drift after an early stop is not seen)",
            side(b),
            side(c)
        )
    })
}

pub fn compare(
    baseline: &[ResultRow],
    candidate: &[ResultRow],
    o: &CompareOptions,
) -> Result<Comparison, CompareError> {
    let base = side_cells(baseline, o, "baseline")?;
    let cand = side_cells(candidate, o, "candidate")?;
    if !o.ignore.contains(&KeyField::Estimated) {
        refuse_estimate_vs_measurement(&base, &cand)?;
    }
    let mut cells = Vec::new();
    let mut missing = Vec::new();
    for (key, b) in &base {
        let Some(c) = cand.get(key) else {
            missing.push((Side::Candidate, key.clone()));
            continue;
        };
        let (change_pct, welch, test, mut verdict) =
            judge(b.summary.as_ref(), c.summary.as_ref(), o);
        let mut notes: Vec<String> = Vec::new();
        // A profile not held: the change is the host's, never the kernel's.
        let held = [("baseline", b), ("candidate", c)].map(|(name, s)| {
            s.profile_mark()
                .map(|m| format!("UNKNOWN: the {name}'s storage profile was not held ({m}): its L is the host's, not the kernel's"))
        });
        if verdict != Verdict::InsufficientData && held.iter().any(Option::is_some) {
            verdict = Verdict::Unknown;
        }
        notes.extend(held.into_iter().flatten());
        notes.extend(sleep_note(b, c));
        notes.extend(estimate_note(b, c));
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
            baseline_estimated: b.key.estimated,
            candidate_estimated: c.key.estimated,
        });
    }
    missing.extend(
        cand.keys()
            .filter(|k| !base.contains_key(*k))
            .map(|k| (Side::Baseline, k.clone())),
    );
    Ok(Comparison {
        metric: o.metric,
        threshold_pct: o.threshold_pct,
        alpha: o.alpha,
        ignored: o.ignore.clone(),
        cells,
        missing,
    })
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

    /// A run whose first zeroing left its storage profile's window slept
    /// the host's L: the cell is UNKNOWN, never a regression of the
    /// kernel, and says why (issue 37).
    #[test]
    fn a_profile_not_held_is_unknown_never_a_change_of_the_kernel() {
        let base = crate::cells::tests_support::row("debian-6.1", 60.0);
        let mut cand = base.clone();
        cand.measured.lazyinit_s = Some(80.0);
        let o = CompareOptions::default();
        let c = compare(std::slice::from_ref(&base), std::slice::from_ref(&cand), &o).unwrap();
        assert_eq!(c.cells[0].verdict, Verdict::Regression, "held: judged");
        cand.measured.sleep_ticks = Some(5);
        cand.measured.z1_ms = Some(2.28);
        cand.measured.profile_held = Some(false);
        cand.measured.z1_lo_ms = Some(3.2);
        cand.measured.z1_hi_ms = Some(3.6);
        let c = compare(&[base], &[cand], &o).unwrap();
        let x = &c.cells[0];
        assert_eq!(x.verdict, Verdict::Unknown);
        assert!(
            x.notes.iter().any(|n| n.contains(
                "candidate's storage profile was not held (L=5, profile not held: first zeroing 2.28 ms, want 3.20-3.60)"
            )),
            "{:?}",
            x.notes
        );
        assert_eq!(exit::ExitCode::exit_code(&c), exit::OK, "not a regression");
        let line = crate::render::compare::summary_line(&c);
        assert!(
            line.contains("0 regression(s)") && line.contains("1 UNKNOWN"),
            "{line}"
        );
        let md = crate::render::compare::markdown(&c);
        assert!(md.contains("| UNKNOWN |"), "{md}");
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

    #[test]
    fn ignored_fields_match_across_kernels_but_never_pool() {
        let mut base = crate::cells::tests_support::row("debian-6.1", 60.0);
        base.run_id = "a".into();
        let mut cand = base.clone();
        cand.axes.source = "debian-6.12".into();
        cand.measured.lazyinit_s = Some(60.1);
        let strict = compare(&[base.clone()], &[cand.clone()], &CompareOptions::default()).unwrap();
        assert_eq!((strict.cells.len(), strict.missing.len()), (0, 2));
        let o = CompareOptions {
            ignore: vec![KeyField::KernelSource],
            ..Default::default()
        };
        let c = compare(&[base.clone()], &[cand.clone()], &o).unwrap();
        assert_eq!(c.cells.len(), 1);
        assert_eq!(c.cells[0].key.axes.source, IGNORED);
        // Two kernels on one side would be pooled by the ignore: refused.
        let err = compare(&[base.clone(), cand.clone()], &[cand], &o).unwrap_err();
        assert!(
            matches!(
                err,
                CompareError::Ambiguous {
                    side: "baseline",
                    ..
                }
            ),
            "{err}"
        );
        assert!("kernel".parse::<KeyField>().is_err());
    }

    #[test]
    fn an_estimate_is_compared_with_a_measurement_only_when_told() {
        let base = crate::cells::tests_support::row("debian-6.1", 60.0);
        let mut est = base.clone();
        est.run_id = "nightly".into();
        est.measured.estimated = true;
        est.measured.estimate_groups = Some(50);
        est.measured.lazyinit_s = Some(60.2);
        let err = compare(
            std::slice::from_ref(&base),
            std::slice::from_ref(&est),
            &CompareOptions::default(),
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                CompareError::EstimateVsMeasurement {
                    baseline: "a measurement",
                    candidate: "an estimate",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("--ignore estimated"), "{err}");
        let o = CompareOptions {
            ignore: vec![KeyField::Estimated],
            ..Default::default()
        };
        let c = compare(std::slice::from_ref(&base), std::slice::from_ref(&est), &o).unwrap();
        assert_eq!(c.cells.len(), 1);
        assert_eq!(c.cells[0].verdict, Verdict::NoChange);
        assert!(c.cells[0].notes[0].contains("candidate: an estimate from the first 50 groups"));
        // Estimates against estimates (last night's) need nothing.
        let mut old = est.clone();
        old.run_id = "last-night".into();
        let c = compare(&[old], &[est], &CompareOptions::default()).unwrap();
        assert_eq!((c.cells.len(), c.missing.len()), (1, 0));
        assert!("estimated".parse::<KeyField>().is_ok());
    }

    /// Rows of a twin (provider ec2, a QEMU guest playing the instance)
    /// pool with neither real EC2 rows nor QEMU rows, in a report or in a
    /// comparison, even with the accelerator (and the provider) ignored.
    #[test]
    fn a_twin_never_matches_real_ec2_or_qemu() {
        let qemu = crate::cells::tests_support::row("debian-6.1", 60.0);
        let mut ec2 = qemu.clone();
        ec2.testbed.provider = "ec2".into();
        ec2.testbed.machine = "c5.2xlarge".into();
        ec2.testbed.accel = "nitro".into();
        let mut twin = ec2.clone();
        twin.testbed.accel = "twin-tcg".into();
        let cells = crate::cells::aggregate(
            &[qemu.clone(), ec2.clone(), twin.clone()],
            Metric::LazyinitS,
        );
        assert_eq!(cells.len(), 3, "one cell each: never pooled");
        for ignore in [
            vec![KeyField::Accel],
            vec![KeyField::Accel, KeyField::Provider, KeyField::Machine],
        ] {
            let o = CompareOptions {
                ignore,
                ..Default::default()
            };
            for other in [&ec2, &qemu] {
                let c = compare(&[twin.clone()], std::slice::from_ref(other), &o).unwrap();
                assert!(c.cells.is_empty(), "{:?}", c.cells[0].key);
            }
            // Twin against twin still matches.
            assert_eq!(
                compare(&[twin.clone()], &[twin.clone()], &o)
                    .unwrap()
                    .cells
                    .len(),
                1
            );
        }
        // Real EC2 against QEMU with the environment ignored: the user's call.
        let o = CompareOptions {
            ignore: vec![KeyField::Accel, KeyField::Provider, KeyField::Machine],
            ..Default::default()
        };
        assert_eq!(compare(&[ec2], &[qemu], &o).unwrap().cells.len(), 1);
    }
}
