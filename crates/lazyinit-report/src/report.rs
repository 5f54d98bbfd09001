//! The report: cells, ratios, failures and notes, ready for any renderer.

use lazyinit_core::results::{ResultRow, Status};
use serde::Serialize;

use lazyinit_core::Variant;

use crate::cells::{aggregate, CellKey, CellStats, Metric};
use crate::kernels::KernelSeries;
use crate::ratios::{ratios, RatioRow};
use crate::stats::{summarize, Summary};

/// A run that did not end ok: counted and listed, never aggregated.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub key: CellKey,
    pub run_id: String,
    pub cell_id: String,
    pub status: Status,
    pub error: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub metric: Metric,
    pub rows: usize,
    pub cells: Vec<CellStats>,
    pub ratios: Vec<RatioRow>,
    pub failures: Vec<Failure>,
    /// Things a reader must know to trust the numbers.
    pub notes: Vec<String>,
    /// With `lazyinit_s`, which includes the kernel's random 0-5 s start
    /// delay: the same cells on the thread's own time, from its first
    /// group to its exit, beside the time before it.
    pub thread: Option<ThreadPart>,
    /// Cells measured on more than one kernel, the kernels side by side.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<KernelSeries>,
}

/// The cells on `from_first_group_s`, and each cell's time before its
/// first group (start delay, prefetch, first zeroing).
#[derive(Debug, Clone, Serialize)]
pub struct ThreadPart {
    pub cells: Vec<CellStats>,
    pub ratios: Vec<RatioRow>,
    pub before_first_group: Vec<Option<Summary>>,
}

fn thread_part(rows: &[ResultRow]) -> ThreadPart {
    let cells = aggregate(rows, Metric::FromFirstGroupS);
    let ratios = ratios(&cells);
    let before_first_group = cells
        .iter()
        .map(|c| {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| r.status == Status::Ok && CellKey::of(r) == c.key)
                .filter_map(|r| r.measured.first_group_s)
                .collect();
            summarize(&v)
        })
        .collect();
    ThreadPart {
        cells,
        ratios,
        before_first_group,
    }
}

// Long: the report assembled in the order it prints, one block per part.
pub fn build(rows: &[ResultRow], metric: Metric) -> Report {
    let cells = aggregate(rows, metric);
    let ratios = ratios(&cells);
    let failures = rows
        .iter()
        .filter(|r| r.status != Status::Ok)
        .map(|r| Failure {
            key: CellKey::of(r),
            run_id: r.run_id.clone(),
            cell_id: r.cell_id.clone(),
            status: r.status,
            error: r.error.clone(),
        })
        .collect();
    let mut notes = Vec::new();
    let ok = || rows.iter().filter(|r| r.status == Status::Ok);
    let jiffies = ok()
        .filter(|r| r.measured.clocksource.contains("jiffies"))
        .count();
    if jiffies > 0 {
        notes.push(format!(
            "{jiffies} ok run(s) on a jiffies clocksource: the fix measures zeroing with tick \
             resolution there, so with-fix results look unfixed (docs/design.md §3); rerun them"
        ));
    }
    for c in &cells {
        if c.key.axes.variant == Variant::Fix && c.concurrency.len() > 1 {
            let cs: Vec<String> = c.concurrency.iter().map(u32::to_string).collect();
            notes.push(format!(
                "{}: runs at different concurrency ({} guests at once) pooled; with the fix, \
                 z1 and so L depend on host load",
                c.key.label(),
                cs.join(", ")
            ));
        }
        if c.sleep_ticks.len() > 1 {
            let ls: Vec<String> = c.sleep_ticks.iter().map(u64::to_string).collect();
            notes.push(format!(
                "{}: runs slept different numbers of ticks between groups (L = {}), pooled; \
                 L is set by the first group's zeroing time z1 (with the fix directly, without \
                 it as W x ticks seen), so compare runs at equal L",
                c.key.label(),
                ls.join(", ")
            ));
        }
        if let ([l], Variant::NoFix) = (c.sleep_ticks.as_slice(), c.key.axes.variant) {
            let w = c.key.axes.wait_mult as u64;
            if *l != w {
                notes.push(format!(
                    "{}: runs slept L = {l} ticks between groups, not W = {w}: the first group \
                     whose zeroing crossed a tick took {} ticks (slow zeroing or a loaded host); \
                     the model is shown at the measured L",
                    c.key.label(),
                    if w > 0 && l % w == 0 {
                        (l / w).to_string()
                    } else {
                        "an unexpected number of".into()
                    }
                ));
            }
        }
        if c.key.estimated {
            let gs: Vec<String> = c.estimate_groups.iter().map(u64::to_string).collect();
            notes.push(format!(
                "{}: estimated from the first {} groups of each run, not measured to the \
                 thread's exit; a stall or a drift after that cannot be seen",
                c.key.label(),
                gs.join(", ")
            ));
        }
        if c.missing_metric > 0 {
            notes.push(format!(
                "{}: {} ok run(s) without a {} value, left out",
                c.key.label(),
                c.missing_metric,
                metric.name()
            ));
        }
    }
    Report {
        metric,
        rows: rows.len(),
        cells,
        ratios,
        failures,
        notes,
        thread: (metric == Metric::LazyinitS).then(|| thread_part(rows)),
        kernels: crate::kernels::compare(rows),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::tests_support::row;

    #[test]
    fn notes_flag_jiffies_and_mixed_concurrency() {
        let mut a = row("debian-6.1", 24.0);
        a.axes.variant = Variant::Fix;
        let mut b = a.clone();
        b.run_id = "other".into();
        b.concurrency = 4;
        b.measured.clocksource = "refined-jiffies".into();
        let r = build(&[a.clone(), b], Metric::LazyinitS);
        assert_eq!(r.notes.len(), 2, "{:?}", r.notes);
        assert!(r.notes[0].starts_with("1 ok run(s) on a jiffies clocksource"));
        assert!(
            r.notes[1].contains("(1, 4 guests at once)"),
            "{:?}",
            r.notes
        );
        assert!(build(&[a], Metric::LazyinitS).notes.is_empty());
    }

    #[test]
    fn estimates_are_their_own_cells_and_say_so() {
        let a = row("debian-6.1", 60.6);
        let mut e = a.clone();
        e.run_id = "nightly".into();
        e.measured.estimated = true;
        e.measured.estimate_groups = Some(50);
        e.measured.lazyinit_lo_s = Some(60.0);
        e.measured.lazyinit_hi_s = Some(61.5);
        let r = build(&[a, e], Metric::LazyinitS);
        assert_eq!(r.cells.len(), 2, "never pooled with the measurement");
        let est = r.cells.iter().find(|c| c.key.estimated).unwrap();
        assert_eq!(est.estimate_groups, [50]);
        assert_eq!(est.prediction.map(|p| (p.lo, p.hi)), Some((60.0, 61.5)));
        assert!(r.ratios.is_empty());
        assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
        assert!(r.notes[0].contains("(estimate): estimated from the first 50 groups"));
        assert!(build(&[est_row_for_ms()], Metric::MsPerGroup).cells[0]
            .prediction
            .is_none());
    }

    fn est_row_for_ms() -> ResultRow {
        let mut e = row("debian-6.1", 60.6);
        e.measured.estimated = true;
        e.measured.lazyinit_lo_s = Some(60.0);
        e.measured.lazyinit_hi_s = Some(61.5);
        e
    }

    #[test]
    fn notes_flag_a_nofix_sleep_other_than_w() {
        let mut a = row("debian-6.1", 16.5);
        a.measured.sleep_ticks = Some(30);
        let r = build(&[a], Metric::LazyinitS);
        assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
        assert!(r.notes[0].contains("L = 30 ticks") && r.notes[0].contains("took 3 ticks"));
        assert_eq!(r.cells[0].model.sleep_ticks, 30);
    }
}
