//! `history check`: a new run judged against its series' history, not
//! one baseline run.
//!
//! Each series of the run gets one of four verdicts (docs/history.md,
//! "The gate"):
//! - **fail** when the series' latest change point has an open alert
//!   (state `new`), or when the run itself is off the **level** of the
//!   recent runs since the latest change: its sleep L was seen in few of
//!   them (an L change, whatever its time), or its value is off their
//!   median by more than their spread allows (a t prediction interval at
//!   [`ChangeOptions::run_p`] about the median, so one outlying run
//!   cannot move the level);
//! - **unknown** when it cannot be judged: fewer than [`MIN_HISTORY`]
//!   runs since the latest change, an ok row without the metric, or a
//!   time off the level on a loaded host ([`HostLoad`]: its guests booted
//!   [`LOADED_BOOT`] x as long as the runs around them) or in other
//!   conditions than the level's runs (concurrency, host), with the
//!   reason; a loaded run is left out of the level's time, and a change
//!   point of mostly loaded runs is set aside (docs/history.md, "A loaded
//!   night"). One run fails on time only [`ChangeOptions::run_min_magnitude`]
//!   and [`ChangeOptions::run_min_effect`] x the level's robust noise off;
//! - **error** when a cell of the run's plan has no ok row (failed,
//!   interrupted, or no row at all);
//! - **pass** otherwise.
//!
//! Each failure raises an alert (kept with its state); `history ack`
//! acknowledging it, or marking it invalid, lets the gate pass again.

use std::collections::{BTreeMap, BTreeSet};

use lazyinit_core::exit;
use lazyinit_core::results::Status;
use lazyinit_core::stats::{self, median};
use lazyinit_report::cells::{CellKey, Metric};
use serde::Serialize;

use crate::changes::{self, Alert, Change, ChangeKind, ChangeOptions};
use crate::edivisive::{Split, TTest};
use crate::names::{label, series_id};
use crate::series::{Point, Series, SeriesId, StoredRow};
use crate::HistoryError;

/// Earlier runs a series needs before a new run is judged against them
/// (lkp-tests asks for three samples).
pub const MIN_HISTORY: usize = 3;

/// The recent runs (since the latest change) the level is made of.
pub const LEVEL_RUNS: usize = 20;

/// A run's host was loaded when its guests booted (launch to SSH) at
/// least this many times as long as the runs around it ([`HostLoad`]):
/// the five one-core nights of results/l-stability-timer booted
/// 1.3-1.5x as long (x86_64 7.4-8.9 s against 4.0-5.9 s), the nights
/// beside a busy loop per core or a kernel build about 1.0x.
pub const LOADED_BOOT: f64 = 1.2;

/// The runs of a series (up to the one judged) whose boots are the
/// reference of [`HostLoad`].
pub const LOAD_WINDOW: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Pass,
    /// Cannot be judged (too little history, a row without the metric):
    /// the message says why.
    Unknown,
    Fail,
    /// A cell of the run's plan has no ok row.
    Error,
}

impl Outcome {
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Unknown => "UNKNOWN",
            Outcome::Fail => "FAIL",
            Outcome::Error => "ERROR",
        }
    }
}

/// The verdict on one series of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesVerdict {
    pub series: SeriesId,
    pub label: String,
    pub outcome: Outcome,
    /// The run's value and the level it was judged against (the median
    /// of the recent runs); none for an error or a row without the metric.
    pub value: Option<f64>,
    pub level: Option<f64>,
    /// Runs since the latest change before this one.
    pub earlier_runs: usize,
    /// Of the runs the level was made of, those that were not judged
    /// themselves when they ran (too little history then).
    pub unjudged_in_level: usize,
    /// Runs since the latest change left out of the level: of an L the
    /// runs before them had seen in few of them (see [`level_runs`]).
    pub left_out_of_level: usize,
    /// Of the runs the level was made of, those of a loaded host
    /// ([`HostLoad`]): their L counts, their time is left out.
    pub loaded_left_out: usize,
    /// Why the run's time was not judged (its host was loaded, or it ran
    /// in other conditions than the level's runs): the verdict is UNKNOWN
    /// unless a change point or its L fails it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_judged: Option<String>,
    /// The latest change point, when the gate set it aside: most runs
    /// since it were of a loaded host (it is `changes`' to report or drop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_aside: Option<String>,
    /// `--baseline`: the runs the level was made of, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub against: Option<String>,
    pub message: String,
    /// The changes that fail it (or that were triaged), with their alerts.
    pub changes: Vec<Change>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckReport {
    pub run_key: String,
    pub metric: String,
    /// `--require-history`: an unknown verdict fails too.
    pub require_history: bool,
    /// `--baseline`: the selectors the level was chosen by.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub baseline: Vec<String>,
    pub verdicts: Vec<SeriesVerdict>,
}

impl exit::ExitCode for CheckReport {
    /// 0 every series passes (or is unknown), 1 one fails or errs (or is
    /// unknown under `--require-history`), 2 the run has nothing to judge.
    fn exit_code(&self) -> u8 {
        let failing = |o: Outcome| {
            matches!(o, Outcome::Fail | Outcome::Error)
                || (self.require_history && o == Outcome::Unknown)
        };
        if self.verdicts.is_empty() {
            exit::BAD_INPUT
        } else if self.verdicts.iter().any(|v| failing(v.outcome)) {
            exit::REGRESSION_OR_CELL_FAILED
        } else {
            exit::OK
        }
    }
}

/// The level a run is judged against: the recent runs' median (one run
/// cannot move it), their sd, and how often each sleep L was seen.
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    pub runs: usize,
    pub median: f64,
    pub spread: f64,
    /// The runs' robust noise: 1.4826 x their median absolute deviation.
    pub noise: f64,
    /// L -> runs that measured it.
    pub sleeps: BTreeMap<u64, usize>,
}

impl Level {
    pub fn of(points: &[Point]) -> Option<Level> {
        if points.is_empty() {
            return None;
        }
        let v: Vec<f64> = points.iter().map(|p| p.value).collect();
        let (m, noise) = stats::robust(&v);
        // The sd is the runs' own (an outlier among them widens the
        // interval, erring to pass on time; the L test does not widen).
        let (_, spread) = stats::mean_sd(&v);
        let mut sleeps = BTreeMap::new();
        for l in points.iter().flat_map(|p| p.sleep_ticks.iter()) {
            *sleeps.entry(*l).or_insert(0) += 1;
        }
        Some(Level {
            runs: points.len(),
            median: m,
            spread,
            noise,
            sleeps,
        })
    }

    /// Whether `l` was seen in few of the runs: in fewer than a quarter
    /// of them, or in one only.
    pub fn is_rare(&self, l: u64) -> bool {
        let seen = self.sleeps.get(&l).copied().unwrap_or(0);
        seen < 2 || seen * 4 < self.runs
    }

    /// The L seen in more than few of the runs.
    pub fn usual_sleeps(&self) -> Vec<u64> {
        self.sleeps
            .keys()
            .copied()
            .filter(|l| !self.is_rare(*l))
            .collect()
    }

    /// A t prediction interval for one new value around the median:
    /// two-sided p.
    pub fn test(&self, value: f64) -> TTest {
        let n = self.runs as f64;
        let p = if self.runs < 2 {
            1.0
        } else if self.spread == 0.0 {
            if value == self.median {
                1.0
            } else {
                0.0
            }
        } else {
            let t = (value - self.median) / (self.spread * (1.0 + 1.0 / n).sqrt());
            stats::t_p(t, n - 1.0)
        };
        TTest {
            mean_before: self.median,
            mean_after: value,
            sd_before: self.spread,
            sd_after: 0.0,
            n_before: self.runs,
            n_after: 1,
            p,
        }
    }
}

/// Whether a run is off a level: its rare L (maybe none) and the time
/// test, or `None` when it is on it.
fn off_level_at(
    run: &Point,
    level: &Level,
    time: &Level,
    opts: &ChangeOptions,
) -> Option<(Vec<u64>, TTest)> {
    let rare: Vec<u64> = run
        .sleep_ticks
        .iter()
        .copied()
        .filter(|l| !level.sleeps.is_empty() && level.is_rare(*l))
        .collect();
    let t = time.test(run.value);
    // A step within the series' own noise, or smaller than a one-run
    // step the gate fails on, is left to the change points.
    let step = (run.value - time.median).abs();
    let out = t.p < opts.run_p
        && t.magnitude() > opts.edivisive.min_magnitude
        && step >= opts.run_min_magnitude * time.median.abs()
        && step >= opts.run_min_effect * time.noise;
    (!rare.is_empty() || out).then_some((rare, t))
}

/// The suspect a run off its level raises: its L rare, or its value out.
fn off_level(
    upto: &Series,
    since: usize,
    at: usize,
    level: &Level,
    time: &Level,
    opts: &ChangeOptions,
) -> Option<Change> {
    let run = &upto.points[at];
    let (rare, t) = off_level_at(run, level, time, opts)?;
    let split = Split {
        index: at,
        stats: t,
    };
    let mut c = changes::change_of(upto, &split, since, at + 1, ChangeKind::NewRun);
    c.sleep_moved = (!rare.is_empty()).then(|| (level.usual_sleeps(), run.sleep_ticks.clone()));
    Some(c)
}

/// Whether two runs ran in the same conditions: as many cells at once
/// (`concurrency`), and on the same host when both rows name one.
pub fn same_conditions(a: &Point, b: &Point) -> bool {
    a.concurrency == b.concurrency && (a.host.is_empty() || b.host.is_empty() || a.host == b.host)
}

/// How slowly each recent run's guests booted, from every series of the
/// history up to the run judged: for each run, the median over its series
/// of its boot over the median boot of that series' runs of its
/// conditions among the last [`LOAD_WINDOW`]. A loaded host slows every
/// guest of a run, a kernel change only its own series' (and one series
/// alone says little: a cold start, a slow first boot).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostLoad {
    /// Run key -> (the ratio, the series it is the median over).
    ratio: std::collections::HashMap<String, (f64, usize)>,
}

impl HostLoad {
    /// Of `series` up to and with `run_key` (series without it are left
    /// out). The reference boots are then taken again without the runs
    /// found loaded (twice), so a loaded stretch as long as the quiet runs
    /// of the window does not make itself the reference.
    pub fn of(series: &[Series], run_key: &str) -> HostLoad {
        let windows: Vec<&[Point]> = series
            .iter()
            .filter_map(|s| {
                let at = s.points.iter().position(|p| p.run_key == run_key)?;
                Some(&s.points[(at + 1).saturating_sub(LOAD_WINDOW)..=at])
            })
            .collect();
        let mut load = HostLoad::default();
        for _ in 0..3 {
            let mut per: std::collections::HashMap<String, Vec<f64>> = Default::default();
            for window in &windows {
                // The median boot of each conditions' runs of the window
                // not (yet) found loaded.
                let mut groups: Vec<(&Point, Vec<f64>)> = Vec::new();
                for p in window.iter() {
                    let Some(b) = p.boot_s else { continue };
                    if load.loaded(p).is_some() {
                        continue;
                    }
                    match groups.iter_mut().find(|(q, _)| same_conditions(q, p)) {
                        Some((_, v)) => v.push(b),
                        None => groups.push((p, vec![b])),
                    }
                }
                let medians: Vec<(&Point, f64, usize)> = groups
                    .into_iter()
                    .map(|(p, mut v)| (p, median(&mut v), v.len()))
                    .collect();
                for p in window.iter() {
                    let Some(b) = p.boot_s else { continue };
                    if let Some((_, m, n)) = medians.iter().find(|(q, _, _)| same_conditions(q, p))
                    {
                        if *n >= MIN_HISTORY && *m > 0.0 {
                            per.entry(p.run_key.clone()).or_default().push(b / m);
                        }
                    }
                }
            }
            load = HostLoad {
                ratio: per
                    .into_iter()
                    .map(|(k, mut v)| {
                        let n = v.len();
                        (k, (median(&mut v), n))
                    })
                    .collect(),
            };
        }
        load
    }

    /// Why `run`'s host was loaded (its boots at least [`LOADED_BOOT`] x
    /// the runs around it), or `None`.
    pub fn loaded(&self, run: &Point) -> Option<String> {
        let &(r, n) = self.ratio.get(&run.run_key)?;
        (r >= LOADED_BOOT).then(|| {
            format!(
                "the host was loaded: its guests booted {r:.2}x as long as the runs around them \
                 (the median over its {n} series; loaded from {LOADED_BOOT}x)"
            )
        })
    }
}

/// The last [`LEVEL_RUNS`] of `kept` that ran in `run`'s conditions.
fn of_conditions<'a>(upto: &'a Series, kept: &[usize], run: &Point) -> Vec<&'a Point> {
    let same: Vec<&Point> = kept
        .iter()
        .map(|&i| &upto.points[i])
        .filter(|p| same_conditions(p, run))
        .collect();
    same[same.len().saturating_sub(LEVEL_RUNS)..].to_vec()
}

/// The runs since the latest change (`since`) before `at` a level may be
/// made of: the first [`MIN_HISTORY`] (the first baseline), and each
/// later run whose sleep L the level of the runs kept before it had seen
/// in more than few of them. A run never judged (imported without
/// `check`, or judged UNKNOWN) is judged so here, and one of an L change
/// stays out; a run off on time only joins (its time widens the
/// interval: the gate errs to pass on time, not on L). Of these, the
/// runs of a loaded host ([`HostLoad`]) are left out of the level's
/// time (their L counts).
pub fn level_runs(upto: &Series, since: usize, at: usize, opts: &ChangeOptions) -> Vec<usize> {
    let mut kept: Vec<usize> = Vec::new();
    for j in since..at {
        // A run that did not hold its storage profile slept the host's L.
        if upto.points[j].profile_not_held.is_some() {
            continue;
        }
        if j - since >= MIN_HISTORY {
            let last = &kept[kept.len().saturating_sub(LEVEL_RUNS)..];
            let points: Vec<Point> = last.iter().map(|&i| upto.points[i].clone()).collect();
            if let Some(level) = Level::of(&points) {
                let rare = off_level_at(&upto.points[j], &level, &level, opts)
                    .is_some_and(|(rare, _)| !rare.is_empty());
                if rare {
                    continue;
                }
            }
        }
        kept.push(j);
    }
    kept
}

/// Why a run's conditions are not the level's: as many cells at once and
/// the host of the run against the level's runs', in words.
fn other_conditions(run: &Point, level: &[Point], same: usize) -> String {
    let mut theirs: BTreeMap<String, usize> = BTreeMap::new();
    for p in level {
        let host = if p.host.is_empty() {
            String::new()
        } else {
            format!(" on {}", p.host)
        };
        *theirs
            .entry(format!("concurrency {}{host}", p.concurrency))
            .or_insert(0) += 1;
    }
    let host = if run.host.is_empty() {
        String::new()
    } else {
        format!(" on {}", run.host)
    };
    format!(
        "the run had other conditions than the level's runs: concurrency {} (cells at once){host}, the level's {} run(s) {}; {same} of them ran so, at least {MIN_HISTORY} are needed",
        run.concurrency,
        level.len(),
        theirs
            .iter()
            .map(|(k, n)| format!("{n} x {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// What check found in one series before alerts are looked up: the
/// changes that would fail it; the host's load as this series alone
/// says it ([`judge_run`] takes every series of the run).
pub fn judge_series(
    series: &Series,
    run_key: &str,
    opts: &ChangeOptions,
) -> Option<(SeriesVerdict, Vec<Change>)> {
    let load = HostLoad::of(std::slice::from_ref(series), run_key);
    judge_series_in(series, run_key, opts, &load)
}

/// Each series of the run judged ([`judge_series_in`]), the host's load
/// from all of them: what `history check` does.
pub fn judge_run(
    series: &[Series],
    run_key: &str,
    opts: &ChangeOptions,
) -> Vec<(SeriesVerdict, Vec<Change>)> {
    let load = HostLoad::of(series, run_key);
    series
        .iter()
        .filter_map(|s| judge_series_in(s, run_key, opts, &load))
        .collect()
}

/// [`judge_series`] with the host's load given.
pub fn judge_series_in(
    series: &Series,
    run_key: &str,
    opts: &ChangeOptions,
    load: &HostLoad,
) -> Option<(SeriesVerdict, Vec<Change>)> {
    let at = series.points.iter().position(|p| p.run_key == run_key)?;
    let upto = Series {
        points: series.points[..=at].to_vec(),
        ..series.clone()
    };
    let value = upto.points[at].value;
    let mut found = changes::of_series(&upto, opts);
    let set_aside = set_aside_if_loaded(&mut found, &upto, at, load);
    let since = found.last().map_or(0, |c| c.index);
    let kept = level_runs(&upto, since, at, opts);
    let in_level = &kept[kept.len().saturating_sub(LEVEL_RUNS)..];
    let points: Vec<Point> = in_level.iter().map(|&j| upto.points[j].clone()).collect();
    let level = Level::of(&points);
    let run = &upto.points[at];
    // Its time is judged against the level's runs of a host not loaded,
    // of its conditions (as many cells at once, the same host) when there
    // are enough of them.
    let unloaded: Vec<usize> = kept
        .iter()
        .copied()
        .filter(|&j| load.loaded(&upto.points[j]).is_none())
        .collect();
    let loaded_out = in_level.len() - in_level.iter().filter(|j| unloaded.contains(j)).count();
    let same = of_conditions(&upto, &unloaded, run);
    let time_level = time_level_of(&upto, &unloaded, &same, &level);
    let mut suspects: Vec<Change> = found.last().cloned().into_iter().collect();
    let judged = at - since >= MIN_HISTORY;
    let mut not_judged = None;
    if let (true, Some(l), Some(t)) = (judged, &level, &time_level) {
        if let Some(c) = off_level(&upto, since, at, l, t, opts) {
            match not_judged_why(&c, run, &points, same.len(), load) {
                Some(w) => not_judged = Some(w),
                None => suspects.push(c),
            }
        }
    }
    // A run that did not hold its storage profile says nothing of the
    // kernel either way: not judged, whatever its time or L.
    if let Some(line) = &run.profile_not_held {
        suspects.clear();
        not_judged = Some(format!(
            "{line} (the storage profile was not held: its L is the host's, not the kernel's)"
        ));
    }
    let verdict = SeriesVerdict {
        series: series.id.clone(),
        label: series.label.clone(),
        outcome: if judged {
            Outcome::Pass
        } else {
            Outcome::Unknown
        },
        value: Some(value),
        level: time_level.as_ref().map(|l| l.median),
        earlier_runs: at - since,
        // The first baseline: the runs not judged when they ran.
        unjudged_in_level: in_level
            .iter()
            .filter(|&&j| j - since < MIN_HISTORY)
            .count(),
        left_out_of_level: (at - since) - kept.len(),
        loaded_left_out: loaded_out,
        not_judged,
        set_aside,
        against: None,
        message: String::new(),
        changes: Vec::new(),
    };
    Some((verdict, suspects))
}

/// A change point whose runs since are mostly of a loaded host is the
/// load, not a regression (yet): set aside (taken off `found`, so the
/// level is the one before), and why.
fn set_aside_if_loaded(
    found: &mut Vec<Change>,
    upto: &Series,
    at: usize,
    load: &HostLoad,
) -> Option<String> {
    let mut set_aside = None;
    if let Some(c) = found.last() {
        let after = &upto.points[c.index..=at];
        let loaded = after.iter().filter(|p| load.loaded(p).is_some()).count();
        if c.sleep_moved.is_none() && loaded * 2 >= after.len() {
            set_aside = Some(format!(
                "the change point at {} ({:+.2}%) is set aside: {loaded} of the {} run(s) since it were of a loaded host",
                c.first_run.run_key,
                c.change_pct,
                after.len()
            ));
            found.pop();
        }
    }
    set_aside
}

/// The level a run's time is judged against: its conditions' runs of a
/// host not loaded when there are enough, else the last unloaded runs of
/// the level, else the level.
fn time_level_of(
    upto: &Series,
    unloaded: &[usize],
    same: &[&Point],
    level: &Option<Level>,
) -> Option<Level> {
    if same.len() >= MIN_HISTORY {
        Level::of(&same.iter().map(|p| (*p).clone()).collect::<Vec<_>>())
    } else {
        let last = &unloaded[unloaded.len().saturating_sub(LEVEL_RUNS)..];
        Level::of(
            &last
                .iter()
                .map(|&j| upto.points[j].clone())
                .collect::<Vec<_>>(),
        )
        .or_else(|| level.clone())
    }
}

/// Why a run off its level on time is not judged so (too few runs of its
/// conditions, or a loaded host), or None: it is a suspect. An L that
/// moved is always judged.
fn not_judged_why(
    c: &Change,
    run: &Point,
    points: &[Point],
    same: usize,
    load: &HostLoad,
) -> Option<String> {
    let why = if c.sleep_moved.is_some() {
        None
    } else if same < MIN_HISTORY {
        Some(other_conditions(run, points, same))
    } else {
        load.loaded(run)
    };
    why.map(|w| {
        format!(
            "{w}; {:+.2}% off its level on time, not judged so and left out of the level's time",
            c.change_pct
        )
    })
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
    let value = v.value.unwrap_or(f64::NAN);
    if !open.is_empty() {
        v.outcome = Outcome::Fail;
        v.message = open.join("; ");
    } else if let Some(why) = &v.not_judged {
        v.outcome = Outcome::Unknown;
        v.message = match v.level {
            Some(l) => {
                format!("{value:.4} {unit} against its level {l:.4} {unit}, not judged: {why}")
            }
            None => format!("{value:.4} {unit}, not judged: {why}"),
        };
    } else if let (Outcome::Unknown, Some(a)) = (v.outcome, &v.against) {
        v.message =
            format!("{value:.4} {unit}, not judged: {a}, at least {MIN_HISTORY} are needed");
    } else if v.outcome == Outcome::Unknown {
        v.message = format!(
            "{value:.4} {unit}, not judged: {} earlier run(s) since the latest change, at least {MIN_HISTORY} are needed",
            v.earlier_runs
        );
    } else {
        v.message = match v.level {
            Some(l) => format!("{value:.4} {unit} at its level {l:.4} {unit}"),
            None => format!("{value:.4} {unit}"),
        };
        if let Some(a) = &v.against {
            v.message.push_str(&format!(" (the median of {a})"));
        } else if v.unjudged_in_level > 0 || v.left_out_of_level > 0 || v.loaded_left_out > 0 {
            let n = (v.earlier_runs - v.left_out_of_level).min(LEVEL_RUNS);
            let mut why = Vec::new();
            if v.unjudged_in_level > 0 {
                why.push(format!(
                    "{} of them the first baseline, not judged when they ran",
                    v.unjudged_in_level
                ));
            }
            if v.left_out_of_level > 0 {
                why.push(format!("{} of an L change left out", v.left_out_of_level));
            }
            if v.loaded_left_out > 0 {
                why.push(format!(
                    "{} of a loaded host left out of its time",
                    v.loaded_left_out
                ));
            }
            v.message
                .push_str(&format!(" (the median of {n} run(s), {})", why.join("; ")));
        }
    }
    if let (Some(a), false) = (&v.set_aside, v.outcome == Outcome::Fail) {
        v.message.push_str(&format!("; {a}"));
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

/// The verdict of a series that gave no value.
fn valueless(series: SeriesId, label: String, outcome: Outcome, message: String) -> SeriesVerdict {
    SeriesVerdict {
        series,
        label,
        outcome,
        value: None,
        level: None,
        earlier_runs: 0,
        unjudged_in_level: 0,
        left_out_of_level: 0,
        loaded_left_out: 0,
        not_judged: None,
        set_aside: None,
        against: None,
        message,
        changes: Vec::new(),
    }
}

/// The run's cells that cannot give a value: each series (or planned cell
/// without a row) with no ok row is an error, unless its cell has an ok
/// row under another series (a resume's lost row); an ok row without the
/// metric, unknown.
fn unjudgeable(
    rows: &[&lazyinit_core::results::ResultRow],
    planned: &[String],
    metric: Metric,
) -> Vec<SeriesVerdict> {
    let rows_all = rows;
    let mut by_key: BTreeMap<CellKey, Vec<&lazyinit_core::results::ResultRow>> = BTreeMap::new();
    for r in rows {
        by_key.entry(CellKey::of(r)).or_default().push(r);
    }
    let verdict = valueless;
    let mut out = Vec::new();
    for (key, rows) in &by_key {
        let ok: Vec<_> = rows.iter().filter(|r| r.status == Status::Ok).collect();
        if ok.iter().any(|r| metric.of(r).is_some()) {
            continue;
        }
        let (outcome, message) = match ok.first() {
            Some(r) => (
                Outcome::Unknown,
                format!(
                    "cell {}: an ok row without {}: cannot be judged",
                    r.cell_id,
                    metric.name()
                ),
            ),
            // Its cell was measured under another key: a resumed cell's
            // lost row (a run killed before its machine was known) is
            // the attempt that did not finish, not the cell's outcome.
            None if rows_all
                .iter()
                .any(|o| o.status == Status::Ok && o.cell_id == rows[0].cell_id) =>
            {
                continue
            }
            None => {
                let r = rows[0];
                let error = if r.error.is_empty() {
                    "no error recorded"
                } else {
                    r.error.as_str()
                };
                (
                    Outcome::Error,
                    format!("cell {}: {} ({})", r.cell_id, r.status, error),
                )
            }
        };
        let tree = crate::names::tree_of(rows.iter().copied(), key);
        out.push(verdict(
            series_id(key, tree),
            label(key, tree),
            outcome,
            message,
        ));
    }
    for cell in planned {
        if !rows.iter().any(|r| &r.cell_id == cell) {
            let msg = format!("cell {cell}: no row (it did not run, or the run stopped before it)");
            // No row, so no key and no series: named by its cell id.
            out.push(verdict(
                SeriesId::from(cell.clone()),
                cell.clone(),
                Outcome::Error,
                msg,
            ));
        }
    }
    out
}

/// Checks `run_key` in a history: see the module's doc. `planned` are
/// the cell ids the run's spec plans (a cell without a row is an error).
pub fn check(
    h: &mut crate::History,
    run_key: &str,
    planned: &[String],
    metric: Metric,
    opts: &ChangeOptions,
) -> Result<CheckReport, HistoryError> {
    let stored = h.stored_rows()?;
    let series = crate::names::build(&stored, metric, None);
    let judged = judge_run(&series, run_key, opts);
    let all: Vec<Change> = judged.iter().flat_map(|(_, c)| c.iter().cloned()).collect();
    let alerts = h.raise(&all)?;
    let mut verdicts: Vec<SeriesVerdict> = judged
        .into_iter()
        .map(|(v, s)| settle(v, s, &alerts, metric.unit()))
        .collect();
    let rows: Vec<_> = stored
        .iter()
        .filter(|s| s.run_key == run_key)
        .map(|s| &s.row)
        .collect();
    verdicts.extend(unjudgeable(&rows, planned, metric));
    Ok(CheckReport {
        run_key: run_key.to_string(),
        metric: metric.name().to_string(),
        require_history: false,
        baseline: Vec::new(),
        verdicts,
    })
}

/// `history check --baseline`: which runs a candidate is judged against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Baseline {
    /// `run:KEY`: a run by its key (`run_id@started_at`), its run id, or
    /// a prefix of its key.
    Run(String),
    /// `date:FROM..TO`: runs whose first row started on those days
    /// (`YYYY-MM-DD`, both included; either end may be left out).
    Dates(String, String),
    /// `label:L`: the runs `history import --label L` named.
    Label(String),
    /// `kernel:K`: rows of that kernel release (`uname -r`, or its version
    /// before the first `-`, `6.1.192`), source
    /// (`debian-6.1`, `6.1.160`) or source identity (`git:…`, `sha256:…`).
    Kernel(String),
}

impl std::str::FromStr for Baseline {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let hint = "use run:KEY, date:FROM..TO (YYYY-MM-DD), kernel:RELEASE or label:LABEL";
        let (kind, value) = s
            .split_once(':')
            .filter(|(_, v)| !v.is_empty())
            .ok_or_else(|| format!("--baseline `{s}`: {hint}"))?;
        match kind {
            "run" => Ok(Baseline::Run(value.to_string())),
            "kernel" => Ok(Baseline::Kernel(value.to_string())),
            "label" => Ok(Baseline::Label(value.to_string())),
            "date" => {
                let (from, to) = value
                    .split_once("..")
                    .ok_or_else(|| format!("--baseline `{s}`: a range FROM..TO; {hint}"))?;
                let day = |d: &str| {
                    d.is_empty() || chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").is_ok()
                };
                if !day(from) || !day(to) {
                    return Err(format!("--baseline `{s}`: days are YYYY-MM-DD; {hint}"));
                }
                Ok(Baseline::Dates(from.to_string(), to.to_string()))
            }
            _ => Err(format!("--baseline `{s}`: {hint}")),
        }
    }
}

impl std::fmt::Display for Baseline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Baseline::Run(r) => write!(f, "run:{r}"),
            Baseline::Dates(a, b) => write!(f, "date:{a}..{b}"),
            Baseline::Kernel(k) => write!(f, "kernel:{k}"),
            Baseline::Label(l) => write!(f, "label:{l}"),
        }
    }
}

impl Baseline {
    /// Whether `run:KEY` chooses the run of this key.
    pub fn matches_key(&self, run_key: &str) -> bool {
        match self {
            Baseline::Run(k) => run_key == k || run_key.starts_with(k.as_str()),
            _ => false,
        }
    }

    /// Whether row `r` is of a chosen run; `labelled` are the keys of the
    /// runs a `label:` names (the history holds the labels).
    pub fn matches(&self, r: &StoredRow, labelled: &[String]) -> bool {
        match self {
            Baseline::Label(_) => labelled.contains(&r.run_key),
            Baseline::Run(k) => r.row.run_id == *k || self.matches_key(&r.run_key),
            Baseline::Dates(from, to) => {
                let day = r.run_started_at.get(..10).unwrap_or(&r.run_started_at);
                (from.is_empty() || day >= from.as_str()) && (to.is_empty() || day <= to.as_str())
            }
            Baseline::Kernel(k) => {
                let release = &r.row.kernel_release;
                release == k
                    || release.starts_with(&format!("{k}-"))
                    || r.row.axes.source == k.as_str()
                    || r.kernel_source_identity.as_deref() == Some(k.as_str())
            }
        }
    }
}

/// The run ids, start days and kernels (releases and `sources`) of `rows`.
fn held<'a>(
    rows: &[&'a StoredRow],
    sources: &'a [String],
) -> (BTreeSet<&'a str>, BTreeSet<&'a str>, BTreeSet<&'a str>) {
    let mut runs = BTreeSet::new();
    let mut days = BTreeSet::new();
    let mut kernels = BTreeSet::new();
    for s in sources {
        kernels.insert(s.as_str());
    }
    for r in rows {
        runs.insert(r.row.run_id.as_str());
        days.insert(r.run_started_at.get(..10).unwrap_or(&r.run_started_at));
        kernels.insert(r.row.kernel_release.as_str());
    }
    (runs, days, kernels)
}

/// The first six non-empty names of `set`, and how many more.
fn few(set: &BTreeSet<&str>) -> String {
    let mut v: Vec<&str> = set.iter().copied().filter(|s| !s.is_empty()).collect();
    let more = v.len().saturating_sub(6);
    v.truncate(6);
    let mut t = v.join(", ");
    if more > 0 {
        t.push_str(&format!(" and {more} more"));
    }
    t
}

/// Refuses (reading only, before the candidate is imported) a
/// `--baseline` selector that chooses no run but the candidate
/// (`candidate`, its key): one line naming the selector and what the
/// history holds of its kind (run ids, days, kernels, labels). Before,
/// such a baseline judged every cell UNKNOWN and exited 0.
pub fn refuse_empty_baseline(
    h: &mut crate::History,
    candidate: &str,
    baseline: &[Baseline],
) -> Result<(), HistoryError> {
    if baseline.is_empty() {
        return Ok(());
    }
    let stored = h.stored_rows()?;
    let others: Vec<&StoredRow> = stored.iter().filter(|r| r.run_key != candidate).collect();
    for b in baseline {
        let labelled = match b {
            Baseline::Label(l) => h.runs_labelled(l)?,
            _ => Vec::new(),
        };
        if others.iter().any(|r| b.matches(r, &labelled)) {
            continue;
        }
        let sources: Vec<String> = others
            .iter()
            .map(|r| r.row.axes.source.to_string())
            .collect();
        let (runs, days, kernels) = held(&others, &sources);
        let holds = if others.is_empty() {
            "the history holds no other run".to_string()
        } else {
            match b {
                Baseline::Run(_) => format!("the history's run ids: {}", few(&runs)),
                Baseline::Dates(from, to) if !from.is_empty() && !to.is_empty() && from > to => {
                    format!(
                        "the range ends before it starts (write date:{to}..{from}); the history's runs started on {}",
                        few(&days)
                    )
                }
                Baseline::Dates(..) => format!("the history's runs started on {}", few(&days)),
                Baseline::Kernel(_) => format!(
                    "the history's kernels (releases and sources): {}",
                    few(&kernels)
                ),
                Baseline::Label(_) => {
                    let labels = h.labels()?;
                    match labels.is_empty() {
                        true => "no run of the history is labelled (history import --label L)"
                            .to_string(),
                        false => format!(
                            "the history's labels: {}",
                            few(&labels.iter().map(String::as_str).collect())
                        ),
                    }
                }
            }
        };
        return Err(HistoryError::Refused {
            folder: format!("--baseline {b}"),
            message: format!(
                "chooses no run to judge against ({holds}); give a selector that matches, or check without --baseline"
            ),
        });
    }
    Ok(())
}

/// The candidate's point judged against every other point of `series`
/// (the baseline runs): no change points, the level is theirs.
pub fn judge_against(
    series: &Series,
    run_key: &str,
    opts: &ChangeOptions,
) -> Option<(SeriesVerdict, Vec<Change>)> {
    let at = series.points.iter().position(|p| p.run_key == run_key)?;
    let mut points: Vec<Point> = series.points.clone();
    let run = points.remove(at);
    points.push(run);
    let s = Series {
        points,
        ..series.clone()
    };
    let at = s.points.len() - 1;
    let level = Level::of(&s.points[..at]);
    let judged = at >= MIN_HISTORY;
    let mut suspects = Vec::new();
    if let (true, Some(l)) = (judged, &level) {
        suspects.extend(off_level(&s, 0, at, l, l, opts));
    }
    let kernels = kernels_in(&s.points[..at]);
    // A run that did not hold its storage profile says nothing of the
    // kernel either way: not judged, whatever its time or L.
    let mut not_judged = None;
    let held = s.points[at].profile_not_held.is_none();
    if let Some(line) = &s.points[at].profile_not_held {
        suspects.clear();
        not_judged = Some(format!(
            "{line} (the storage profile was not held: its L is the host's, not the kernel's)"
        ));
    }
    let verdict = SeriesVerdict {
        series: series.id.clone(),
        label: series.label.clone(),
        outcome: if judged && held {
            Outcome::Pass
        } else {
            Outcome::Unknown
        },
        value: Some(s.points[at].value),
        level: level.as_ref().map(|l| l.median),
        earlier_runs: at,
        unjudged_in_level: 0,
        left_out_of_level: 0,
        loaded_left_out: 0,
        not_judged,
        set_aside: None,
        against: Some(format!(
            "{at} baseline run(s) of this cell and testbed{kernels}"
        )),
        message: String::new(),
        changes: Vec::new(),
    };
    Some((verdict, suspects))
}

/// `, kernels A, B` of the baseline points (none when there are none).
fn kernels_in(points: &[Point]) -> String {
    let mut k: Vec<&str> = points.iter().map(|p| p.kernel.as_str()).collect();
    k.sort();
    k.dedup();
    if k.is_empty() {
        String::new()
    } else {
        format!(", kernel {}", k.join(", "))
    }
}

/// `history check RUN --baseline SEL...`: each series of the run judged
/// against the runs the selectors choose, of the same cell and testbed
/// whatever their kernel source (a release candidate against the last
/// release's runs). The run's own earlier history is not used.
pub fn check_against(
    h: &mut crate::History,
    run_key: &str,
    planned: &[String],
    metric: Metric,
    opts: &ChangeOptions,
    baseline: &[Baseline],
) -> Result<CheckReport, HistoryError> {
    let stored = h.stored_rows()?;
    let mut labelled = Vec::new();
    for b in baseline {
        if let Baseline::Label(l) = b {
            labelled.extend(h.runs_labelled(l)?);
        }
    }
    let candidate: Vec<&StoredRow> = stored.iter().filter(|r| r.run_key == run_key).collect();
    let chosen: Vec<&StoredRow> = stored
        .iter()
        .filter(|r| r.run_key != run_key && baseline.iter().any(|b| b.matches(r, &labelled)))
        .collect();
    let mut verdicts = Vec::new();
    let mut suspects = Vec::new();
    let mut sources = Vec::new();
    for r in &candidate {
        if !sources.contains(&r.row.axes.source) {
            sources.push(r.row.axes.source.clone());
        }
    }
    for source in sources {
        // The baseline's rows as of the candidate's source: one series
        // per cell and testbed, the candidate's point last.
        let mut rows: Vec<StoredRow> = chosen
            .iter()
            .map(|r| {
                let mut r = (*r).clone();
                r.row.axes.source = source.clone();
                r
            })
            .collect();
        rows.extend(
            candidate
                .iter()
                .filter(|r| r.row.axes.source == source)
                .map(|r| (*r).clone()),
        );
        for s in crate::names::build(&rows, metric, None) {
            if let Some((v, c)) = judge_against(&s, run_key, opts) {
                suspects.extend(c.iter().cloned());
                verdicts.push((v, c));
            }
        }
    }
    let alerts = h.raise(&suspects)?;
    let mut verdicts: Vec<SeriesVerdict> = verdicts
        .into_iter()
        .map(|(v, s)| settle(v, s, &alerts, metric.unit()))
        .collect();
    let rows: Vec<_> = candidate.iter().map(|s| &s.row).collect();
    verdicts.extend(unjudgeable(&rows, planned, metric));
    Ok(CheckReport {
        run_key: run_key.to_string(),
        metric: metric.name().to_string(),
        require_history: false,
        baseline: baseline.iter().map(Baseline::to_string).collect(),
        verdicts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A committed run's rows.
    fn rows() -> Vec<lazyinit_core::results::ResultRow> {
        let csv = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../results/quick-virtual/results.csv"
        );
        lazyinit_core::results::read_rows(csv).unwrap()
    }

    /// A resumed cell's lost row (interrupted, no machine or accel: a run
    /// killed before its guest was known) is not an error when the cell
    /// has its ok row; without that row, it is.
    #[test]
    fn a_lost_row_beside_its_cells_measurement_is_no_error() {
        let mut all = rows();
        let mut lost = all[0].clone();
        lost.status = Status::Interrupted;
        lost.testbed.machine = "".into();
        lost.testbed.accel = "".into();
        lost.error =
            "lost: the run that started this cell (pid 1) ended without recording it".into();
        all.push(lost.clone());
        let refs: Vec<_> = all.iter().collect();
        let metric = Metric::default();
        let planned: Vec<String> = all.iter().map(|r| r.cell_id.clone()).collect();
        assert!(
            unjudgeable(&refs, &planned, metric).is_empty(),
            "{:?}",
            unjudgeable(&refs, &planned, metric)
        );
        let without: Vec<_> = all.iter().skip(1).collect();
        let v = unjudgeable(&without, &planned, metric);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(matches!(v[0].outcome, Outcome::Error));
        assert!(v[0].message.contains("lost:"), "{}", v[0].message);
    }
}
