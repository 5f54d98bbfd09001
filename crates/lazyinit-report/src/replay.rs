//! Validation of the early stop: replay the estimator over finished full
//! runs' per-group data (`groups.csv`) for each N and put what it would
//! have predicted, at the point a live run would have stopped, beside what
//! the run measured (`lazyinit_estimate::replay`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lazyinit_core::results::Status;
use lazyinit_estimate::{Estimate, Load, Trace};
use serde::Serialize;

use crate::input::LoadedRow;

mod phases;
pub use phases::Phases;

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
    /// The results folder's name: the condition it ran under (alone, 8
    /// or 24 at once, near a tick).
    pub folder: String,
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

/// Coverage of one results folder at one N.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FolderSummary {
    pub folder: String,
    pub after: u64,
    pub runs: usize,
    pub stopped: usize,
    /// Stopped runs whose interval holds the measured total.
    pub covered: usize,
    /// Runs within the tolerance on the part after the first group.
    pub within: usize,
    /// Median width of the stopped runs' intervals, percent of the
    /// prediction.
    pub median_width_pct: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replay {
    pub tolerance_pct: f64,
    pub runs: Vec<Run>,
    pub summary: Vec<Summary>,
    /// The same per results folder.
    pub by_folder: Vec<FolderSummary>,
    /// The smallest N at which every run is within the tolerance.
    pub smallest_within: Option<u64>,
    /// Rows left out, and why.
    pub skipped: Vec<(String, String)>,
}

fn pct(x: f64, of: f64) -> f64 {
    (x / of - 1.0) * 100.0
}

// Long: one pass over the rows (why a row is left out, one replay per N), then the summary per N, in the order the report reads them.
/// Replays every ok, measured row that has per-group data.
pub fn replay(rows: &[LoadedRow], afters: &[u64], tolerance_pct: f64) -> Replay {
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    let mut events: BTreeMap<PathBuf, Phases> = BTreeMap::new();
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
            hz: r.axes.hz,
            to_init: n,
            first_group_s,
            t_s: &g.t_s,
            zero_s: &g.zero_s,
            load: Load::default(),
        };
        let ph = events
            .entry(l.results_dir.clone())
            .or_insert_with(|| read_phases(&l.results_dir));
        // Host time of group n: the measured mount's lazy-init phase, the
        // first group's delay, then the trace.
        let mounted = ph.lazyinit_at(&r.cell_id);
        let load_at = |k: u64| match mounted {
            Some(at) => {
                let i = (k as usize).clamp(1, g.t_s.len()) - 1;
                ph.load_at(&r.cell_id, at + first_group_s + g.t_s[i] - g.t_s[0])
            }
            None => Load::default(),
        };
        let from_first = measured_s - first_group_s;
        let points = afters
            .iter()
            .map(|&after| {
                let rp = lazyinit_estimate::replay_with(&tr, after, load_at);
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
            folder: folder_name(&l.results_dir),
            run_id: r.run_id.clone(),
            cell_id: r.cell_id.clone(),
            hz: r.axes.hz.get(),
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
        by_folder: by_folder(&runs, afters, tolerance_pct),
        runs,
        summary,
        smallest_within,
        skipped,
    }
}

fn folder_name(dir: &Path) -> String {
    dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The run's phases; none when it kept no events.jsonl (every check
/// then sees an unchanging host).
fn read_phases(dir: &Path) -> Phases {
    lazyinit_core::layout::RunFolder::new(dir)
        .events_jsonl()
        .read_to_string()
        .map(|t| Phases::parse(&t))
        .unwrap_or_default()
}

fn by_folder(runs: &[Run], afters: &[u64], tolerance_pct: f64) -> Vec<FolderSummary> {
    let mut folders: Vec<&str> = runs.iter().map(|r| r.folder.as_str()).collect();
    folders.dedup();
    folders.sort_unstable();
    folders.dedup();
    let mut out = Vec::new();
    for f in folders {
        for (i, &after) in afters.iter().enumerate() {
            let pts: Vec<&Point> = runs
                .iter()
                .filter(|r| r.folder == f)
                .map(|r| &r.points[i])
                .collect();
            let mut widths: Vec<f64> = pts
                .iter()
                .filter_map(|p| p.estimate.map(|e| (e.hi_s - e.lo_s) / e.lazyinit_s * 100.0))
                .collect();
            widths.sort_by(f64::total_cmp);
            out.push(FolderSummary {
                folder: f.to_string(),
                after,
                runs: pts.len(),
                stopped: widths.len(),
                covered: pts.iter().filter(|p| p.covered == Some(true)).count(),
                within: pts
                    .iter()
                    .filter(|p| p.from_first_group_error_pct.abs() <= tolerance_pct)
                    .count(),
                median_width_pct: widths.get(widths.len() / 2).copied().unwrap_or(0.0),
            });
        }
    }
    out
}
