//! Validation of the early stop: replay the estimator over finished full
//! runs' per-group data (`groups.csv`) for each N and put what it would
//! have predicted, at the point a live run would have stopped, beside what
//! the run measured (`lazyinit_core::estimate::replay`).

use lazyinit_core::estimate::{self, Estimate, Trace};
use lazyinit_core::results::Status;
use serde::Serialize;

use crate::input::LoadedRow;

/// One N on one full run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub after: u64,
    /// Checks that refused before the one that locked (or all of them).
    pub refused: usize,
    /// None: the cycle never locked before the end; a live run would have
    /// been measured to the end.
    pub estimate: Option<Estimate>,
    /// Predicted over measured, minus one, percent (0 when not stopped).
    pub error_pct: f64,
    /// The same without `first_group_s`, which the run measures itself.
    pub from_first_group_error_pct: f64,
    /// Whether the 95% interval holds the measured total.
    pub covered: Option<bool>,
}

/// One full run and its replays.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub run_id: String,
    pub cell_id: String,
    pub hz: u32,
    pub groups: u64,
    pub first_group_s: f64,
    pub measured_s: f64,
    pub points: Vec<Point>,
}

/// All runs at one N.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub after: u64,
    pub runs: usize,
    /// Runs whose cycle locked before the end.
    pub stopped: usize,
    pub mean_groups_traced: f64,
    pub max_groups_traced: u64,
    pub worst_error_pct: f64,
    pub worst_from_first_group_error_pct: f64,
    /// Runs within the tolerance on the part after the first group.
    pub within: usize,
    /// Stopped runs whose interval holds the measured total.
    pub covered: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replay {
    pub tolerance_pct: f64,
    pub runs: Vec<Run>,
    pub summary: Vec<Summary>,
    /// The smallest N at which every run is within the tolerance.
    pub smallest_within: Option<u64>,
    /// Rows left out, and why.
    pub skipped: Vec<(String, String)>,
}

fn pct(x: f64, of: f64) -> f64 {
    (x / of - 1.0) * 100.0
}

/// Replays every ok, measured row that has per-group data.
pub fn replay(rows: &[LoadedRow], afters: &[u64], tolerance_pct: f64) -> Replay {
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for l in rows {
        let r = &l.row;
        let name = format!("{}/{}", r.run_id, r.cell_id);
        let why = if r.status != Status::Ok {
            Some(format!("status {}", r.status))
        } else if r.measured.estimated {
            Some("an estimate, not a full run".into())
        } else {
            None
        };
        if let Some(w) = why {
            skipped.push((name, w));
            continue;
        }
        let g = match l.groups() {
            Ok(Some(g)) => g,
            Ok(None) => {
                skipped.push((name, "no groups.csv(.gz) beside the results".into()));
                continue;
            }
            Err(e) => {
                skipped.push((name, e));
                continue;
            }
        };
        let (Some(measured_s), Some(first_group_s)) =
            (r.measured.lazyinit_s, r.measured.first_group_s)
        else {
            skipped.push((name, "no lazyinit_s or first_group_s".into()));
            continue;
        };
        let n = g.t_s.len() as u64;
        if r.measured.traced_groups.is_some_and(|t| t != n) {
            skipped.push((
                name,
                format!(
                    "groups.csv has {n} groups, the row traced {}",
                    r.measured.traced_groups.unwrap_or(0)
                ),
            ));
            continue;
        }
        let tr = Trace {
            hz: r.hz,
            to_init: n,
            first_group_s,
            t_s: &g.t_s,
            zero_s: &g.zero_s,
        };
        let from_first = measured_s - first_group_s;
        let points = afters
            .iter()
            .map(|&after| {
                let rp = estimate::replay(&tr, after);
                let (error_pct, ff, covered) = match &rp.estimate {
                    Some(e) => (
                        pct(e.lazyinit_s, measured_s),
                        pct(e.from_first_group_s(), from_first),
                        Some(e.lo_s <= measured_s && measured_s <= e.hi_s),
                    ),
                    None => (0.0, 0.0, None),
                };
                Point {
                    after,
                    refused: rp.refused.len(),
                    estimate: rp.estimate,
                    error_pct,
                    from_first_group_error_pct: ff,
                    covered,
                }
            })
            .collect();
        runs.push(Run {
            run_id: r.run_id.clone(),
            cell_id: r.cell_id.clone(),
            hz: r.hz.get(),
            groups: n,
            first_group_s,
            measured_s,
            points,
        });
    }
    let summary: Vec<Summary> = afters
        .iter()
        .enumerate()
        .map(|(i, &after)| {
            let pts: Vec<&Point> = runs.iter().map(|r| &r.points[i]).collect();
            let traced: Vec<u64> = runs
                .iter()
                .zip(&pts)
                .map(|(r, p)| p.estimate.map_or(r.groups, |e| e.groups_traced))
                .collect();
            let worst = |f: fn(&Point) -> f64| pts.iter().map(|p| f(p).abs()).fold(0.0, f64::max);
            Summary {
                after,
                runs: pts.len(),
                stopped: pts.iter().filter(|p| p.estimate.is_some()).count(),
                mean_groups_traced: traced.iter().sum::<u64>() as f64 / traced.len().max(1) as f64,
                max_groups_traced: traced.iter().copied().max().unwrap_or(0),
                worst_error_pct: worst(|p| p.error_pct),
                worst_from_first_group_error_pct: worst(|p| p.from_first_group_error_pct),
                within: pts
                    .iter()
                    .filter(|p| p.from_first_group_error_pct.abs() <= tolerance_pct)
                    .count(),
                covered: pts.iter().filter(|p| p.covered == Some(true)).count(),
            }
        })
        .collect();
    let smallest_within = summary
        .iter()
        .filter(|s| s.runs > 0 && s.within == s.runs)
        .map(|s| s.after)
        .min();
    Replay {
        tolerance_pct,
        runs,
        summary,
        smallest_within,
        skipped,
    }
}
