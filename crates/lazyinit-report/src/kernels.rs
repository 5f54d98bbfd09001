//! Kernels side by side: the same cell (arch, HZ, variant, volume,
//! testbed) on every kernel a run measured, in version order, each beside
//! the one before it.
//!
//! What is compared is the thread's own time, from its first group to its
//! exit (`from_first_group_s`): the kernel starts the thread after a random
//! 0-5 s delay, which would otherwise read as a change between two kernels
//! that behave the same. The time before the first group (that delay, and
//! since v5.13 the block-bitmap prefetch) is shown beside it, never mixed
//! in.
//!
//! A difference is beyond the measurement's resolution when it exceeds
//! both the clock's (two trace timestamps on the virtual clock, which
//! repeats to the microsecond) and the spread the cells' own runs show.
//! On the real clock with one run a side there is no spread to judge by:
//! the table says so instead of guessing.

use std::collections::BTreeMap;

use lazyinit_core::identity::Accel;
use lazyinit_core::results::{ResultRow, Status};
use serde::Serialize;

use crate::cells::{CellKey, Metric};
use crate::stats::{summarize, Summary};

/// The virtual clock's resolution of a span between two trace
/// timestamps, seconds: each is exact to the microsecond.
pub const VIRTUAL_RESOLUTION_S: f64 = 2e-6;

/// One kernel's measurement of a cell.
#[derive(Debug, Clone, Serialize)]
pub struct KernelCell {
    /// The row's source (`debian:7.2.13-1`, `debian-6.1`, a path, ...).
    pub source: String,
    /// The kernel's version, from `uname -r` (`7.2.13`).
    pub version: String,
    pub kernel_release: String,
    /// First group to the thread's exit, seconds.
    pub thread: Option<Summary>,
    /// Mount to the thread's exit, seconds.
    pub lazyinit: Option<Summary>,
    /// Mount to the first group: the start delay, the prefetch and the
    /// first zeroing, seconds.
    pub before_first_group: Option<Summary>,
    pub ms_per_group: Option<Summary>,
    /// Sleep between groups, ticks (every value the runs had).
    pub sleep_ticks: Vec<u64>,
    pub failed: usize,
    /// Against the kernel before it in the table (none for the first).
    pub versus_previous: Option<Difference>,
}

/// The thread's time on a kernel against the kernel before it.
#[derive(Debug, Clone, Serialize)]
pub struct Difference {
    pub previous: String,
    pub diff_s: f64,
    pub diff_pct: f64,
    /// What a difference must exceed to be the kernel's (None: one run a
    /// side on the real clock, no spread measured).
    pub resolution_s: Option<f64>,
    /// Whether `|diff_s|` exceeds the resolution (None when unknown).
    pub beyond: Option<bool>,
}

/// One cell across kernels.
#[derive(Debug, Clone, Serialize)]
pub struct KernelSeries {
    /// The cell without its kernel (`axes.source` and `kernel_release`
    /// emptied).
    pub key: CellKey,
    pub kernels: Vec<KernelCell>,
}

/// The cells of `rows` that more than one kernel measured, each with its
/// kernels in version order. Empty when the rows have one kernel a cell.
pub fn compare(rows: &[ResultRow]) -> Vec<KernelSeries> {
    let mut by_cell: BTreeMap<CellKey, BTreeMap<String, Vec<&ResultRow>>> = BTreeMap::new();
    for r in rows {
        let mut key = CellKey::of(r);
        key.axes.source = "".into();
        by_cell
            .entry(key)
            .or_default()
            .entry(r.axes.source.to_string())
            .or_default()
            .push(r);
    }
    by_cell
        .into_iter()
        .filter(|(_, kernels)| kernels.len() > 1)
        .map(|(key, kernels)| {
            let virtual_clock = matches!(key.testbed.accel, Accel::Icount(_));
            let mut cells: Vec<KernelCell> = kernels
                .into_iter()
                .map(|(source, rows)| kernel_cell(source, &rows))
                .collect();
            cells.sort_by(|a, b| {
                (version_order(&a.version), &a.source).cmp(&(version_order(&b.version), &b.source))
            });
            for i in 1..cells.len() {
                let (before, after) = cells.split_at_mut(i);
                let prev = &before[i - 1];
                after[0].versus_previous = difference(prev, &after[0], virtual_clock);
            }
            KernelSeries {
                key,
                kernels: cells,
            }
        })
        .collect()
}

fn kernel_cell(source: String, rows: &[&ResultRow]) -> KernelCell {
    let ok: Vec<&ResultRow> = rows
        .iter()
        .copied()
        .filter(|r| r.status == Status::Ok)
        .collect();
    let of = |f: &dyn Fn(&ResultRow) -> Option<f64>| {
        summarize(&ok.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
    };
    let mut sleep_ticks: Vec<u64> = ok.iter().filter_map(|r| r.measured.sleep_ticks).collect();
    sleep_ticks.sort_unstable();
    sleep_ticks.dedup();
    // Rows written before the column have no release: take one that has.
    let release = rows
        .iter()
        .map(|r| r.kernel_release.clone())
        .find(|k| !k.is_empty())
        .unwrap_or_default();
    KernelCell {
        source,
        version: version_text(&release),
        kernel_release: release,
        thread: of(&|r| Metric::FromFirstGroupS.of(r)),
        lazyinit: of(&|r| r.measured.lazyinit_s),
        before_first_group: of(&|r| r.measured.first_group_s),
        ms_per_group: of(&|r| r.measured.ms_per_group),
        sleep_ticks,
        failed: rows.len() - ok.len(),
        versus_previous: None,
    }
}

fn difference(prev: &KernelCell, this: &KernelCell, virtual_clock: bool) -> Option<Difference> {
    let (p, t) = (prev.thread.as_ref()?, this.thread.as_ref()?);
    let diff_s = t.mean - p.mean;
    let spread = |s: &Summary| (s.n >= 2).then_some(s.max - s.min);
    let runs = match (spread(p), spread(t)) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (Some(a), None) | (None, Some(a)) => Some(a),
        (None, None) => None,
    };
    let resolution_s = match (virtual_clock, runs) {
        (true, Some(r)) => Some(r.max(VIRTUAL_RESOLUTION_S)),
        (true, None) => Some(VIRTUAL_RESOLUTION_S),
        (false, r) => r,
    };
    Some(Difference {
        previous: prev.version.clone(),
        diff_s,
        diff_pct: if p.mean != 0.0 {
            (t.mean / p.mean - 1.0) * 100.0
        } else {
            0.0
        },
        resolution_s,
        beyond: resolution_s.map(|r| diff_s.abs() > r),
    })
}

/// `7.2.13` of `7.2.13-lazyinit-hz250-fix` (what `uname -r` says before the
/// harness's local version).
pub fn version_text(release: &str) -> String {
    release
        .split_once("-lazyinit")
        .map_or(release, |(v, _)| v)
        .to_string()
}

/// The numeric parts of a release, for ordering: `6.12.118` after `6.1.192`.
fn version_order(release: &str) -> Vec<u64> {
    version_text(release)
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::tests_support::row;

    fn at(source: &str, release: &str, lazyinit: f64, first: f64) -> ResultRow {
        let mut r = row(source, lazyinit);
        r.kernel_release = release.into();
        r.measured.first_group_s = Some(first);
        r.testbed.accel = Accel::Icount(3);
        r
    }

    /// Two kernels whose threads take the same time but whose start
    /// delays differ read as no change; a kernel whose thread is slower
    /// reads as beyond the resolution. Versions order numerically.
    #[test]
    fn kernels_compare_on_the_threads_own_time_in_version_order() {
        let rows = vec![
            at(
                "debian:6.12.118-1",
                "6.12.118-lazyinit-hz250-fix",
                26.0,
                3.0,
            ),
            at("debian-6.1", "6.1.192-lazyinit-hz250-fix", 24.5, 1.5),
            at("debian:7.2.13-1", "7.2.13-lazyinit-hz250-fix", 30.0, 2.0),
        ];
        let s = compare(&rows);
        assert_eq!(s.len(), 1);
        let k = &s[0].kernels;
        let versions: Vec<&str> = k.iter().map(|c| c.version.as_str()).collect();
        assert_eq!(versions, ["6.1.192", "6.12.118", "7.2.13"]);
        assert!(k[0].versus_previous.is_none());
        let d = k[1].versus_previous.as_ref().unwrap();
        assert_eq!(d.previous, "6.1.192");
        assert!(d.diff_s.abs() < 1e-9, "{d:?}");
        assert_eq!(d.beyond, Some(false));
        let d = k[2].versus_previous.as_ref().unwrap();
        assert!((d.diff_s - 5.0).abs() < 1e-9, "{d:?}");
        assert_eq!(d.beyond, Some(true));
        assert!((k[2].before_first_group.as_ref().unwrap().mean - 2.0).abs() < 1e-9);
    }

    /// On the real clock one run a side has no spread: no verdict.
    #[test]
    fn one_run_a_side_on_the_real_clock_has_no_resolution() {
        let mut rows = vec![
            at("a", "6.1.1-lazyinit-hz250-fix", 20.0, 1.0),
            at("b", "6.1.2-lazyinit-hz250-fix", 21.0, 1.0),
        ];
        for r in &mut rows {
            r.testbed.accel = Accel::Tcg;
        }
        let s = compare(&rows);
        let d = s[0].kernels[1].versus_previous.as_ref().unwrap();
        assert_eq!(d.resolution_s, None);
        assert_eq!(d.beyond, None);
    }

    /// One kernel a cell: nothing to put side by side.
    #[test]
    fn one_kernel_is_no_comparison() {
        assert!(compare(&[at("a", "6.1.1-lazyinit-hz250-fix", 20.0, 1.0)]).is_empty());
    }
}
