//! Grouping result rows into cells and what belongs beside each cell: the
//! model's prediction and the 2021 report's figure.
//!
//! A cell is keyed by its whole configuration. Rows that differ in any key
//! field (accel, provider, machine, kernel source, ...) land in different
//! cells: a KVM run is never averaged with a TCG run.

use std::collections::{BTreeMap, BTreeSet};

use lazyinit_core::model::{self, ModelInputs, MEAN_START_DELAY_S};
use lazyinit_core::results::{ResultRow, Status};
#[cfg(test)]
use lazyinit_core::Arch;
use lazyinit_core::{reported, Variant};
use serde::Serialize;

use crate::stats::{summarize, Interval, Summary};

pub use lazyinit_core::identity::Metric;

pub use lazyinit_core::identity::CellKey;

/// The model's prediction for a cell, in the metric's unit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelValue {
    /// `L + 1` ticks per group plus, where the runs' per-group data
    /// counted them, the ticks their zeroings crossed (the host's part).
    pub value: f64,
    /// `L + 1` ticks per group alone: the kernel's part.
    pub ticks_only: f64,
    /// Mean ticks crossed per cycle that `value` includes (None: not
    /// counted, `value` is `ticks_only`).
    pub crossed_ticks: Option<f64>,
    pub sleep_ticks: u64,
    /// How `sleep_ticks` was chosen, e.g. "L=3 measured".
    pub basis: String,
}

/// The 2021 report's figure for a matching cell, in the metric's unit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportedValue {
    pub instance: &'static str,
    pub value: f64,
    /// Measured mean minus reported.
    pub diff: f64,
    pub diff_pct: f64,
    /// With noise on purpose in the storage profile (`ebs:D,sd=S,seed=N`)
    /// and at least two runs: whether the 2021 figure lies within the
    /// runs' range [min, max]. Left out otherwise (outputs as before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_range: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CellStats {
    pub key: CellKey,
    /// `None` when no run of the cell has the metric.
    pub summary: Option<Summary>,
    /// Rows with status other than ok.
    pub failed: usize,
    /// Ok rows without a value for the metric.
    pub missing_metric: usize,
    /// Distinct `sleep_ticks` among the ok rows (more than one: see notes).
    pub sleep_ticks: Vec<u64>,
    /// Distinct `concurrency` among the ok rows.
    pub concurrency: Vec<u32>,
    pub model: ModelValue,
    pub reported: Option<ReportedValue>,
    /// Estimates: the groups each was made from (distinct values).
    pub estimate_groups: Vec<u64>,
    /// An estimated cell of one run: that run's 95% prediction interval
    /// of `lazyinit_s` (other metrics have none).
    pub prediction: Option<Interval>,
    /// Each ok row whose first zeroing was outside its storage profile's
    /// window after the last attempt (`profile_held = false`), in one
    /// line with the L it slept (`L=5, profile not held: first zeroing
    /// 2.28 ms, want 3.20-3.60`): its L is the host's, not the kernel's.
    /// Left out of the JSON when empty (outputs as before).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub profile_not_held: Vec<String>,
}

impl CellStats {
    /// The cell's mark when a row did not hold its profile: the row's
    /// line, or, for several, how many and each line.
    pub fn profile_mark(&self) -> Option<String> {
        match self.profile_not_held.as_slice() {
            [] => None,
            [one] => Some(one.clone()),
            all => Some(format!(
                "{} of {} runs: {}",
                all.len(),
                self.summary.as_ref().map_or(all.len(), |s| s.n),
                all.join("; ")
            )),
        }
    }
}

/// A row's line when its profile was not held (see
/// [`CellStats::profile_not_held`]).
pub fn profile_line(r: &ResultRow) -> Option<String> {
    let miss = r.measured.profile_miss()?;
    Some(match r.measured.sleep_ticks {
        Some(l) => format!("L={l}, {miss}"),
        None => miss,
    })
}

/// The zeroing time of the first measured group that makes the kernel
/// choose `l` ticks of sleep, if any does: with the fix any z1 in
/// [L, L+1) / (W * HZ) (take the middle); without it L = W * k for a first
/// tick-crossing zeroing of k ticks (take half a tick under k).
fn z1_for_sleep(key: &CellKey, l: u64) -> Option<f64> {
    let (w, hz) = (key.axes.wait_mult as u64, key.axes.hz.get() as f64);
    if w == 0 {
        return None;
    }
    match key.axes.variant {
        Variant::Fix => Some((l as f64 + 0.5) / (w as f64 * hz)),
        Variant::NoFix if l > 0 && l.is_multiple_of(w) => Some(((l / w) as f64 - 0.5) / hz),
        Variant::NoFix => None,
    }
}

/// The model for a cell. The sleep `L` comes from the first group's
/// zeroing time z1, which the model cannot know (with the fix it sets L
/// directly; without it, a first tick-crossing zeroing of k ticks gives
/// L = W * k instead of W). When every run of the cell measured the same
/// L, predict at that L; otherwise at the default zeroing time. With
/// `crossed` (the runs' mean ticks crossed per cycle, measured on their
/// tick grids) each cycle is `L + 1 + crossed` ticks: the model then
/// accounts for the host's part of the cycle too (`lazyinit_core::ticks`).
pub fn model_for(
    key: &CellKey,
    sleep_ticks: &[u64],
    crossed: Option<f64>,
    metric: Metric,
) -> ModelValue {
    let groups = model::groups(key.volume());
    let measured = match sleep_ticks {
        [l] => z1_for_sleep(key, *l).map(|z1| (*l, z1)),
        _ => None,
    };
    let (pred, basis) = match measured {
        Some((l, z1_s)) => {
            let p = model::predict(ModelInputs {
                hz: key.axes.hz,
                variant: key.axes.variant,
                wait_mult: key.axes.wait_mult,
                groups,
                z1_s,
                z_s: model::zeroing_s(&key.axes.knobs),
            });
            (p, format!("L={l} measured"))
        }
        None => {
            let p = model::predict_cell(&key.axes);
            let z_ms = model::zeroing_s(&key.axes.knobs) * 1000.0;
            (p, format!("L={} from z1={z_ms} ms", p.sleep_ticks))
        }
    };
    let in_metric = |p: &model::Prediction| match metric {
        // The thread starts after a random 0-5 s delay: add its mean.
        Metric::LazyinitS => p.lazyinit_s + MEAN_START_DELAY_S,
        Metric::MsPerGroup => p.per_group_s * 1000.0,
        Metric::FromFirstGroupS => p.lazyinit_s,
    };
    let ticks_only = in_metric(&pred);
    // Crossings count only at the measured L (they were counted there).
    let crossed = crossed.filter(|_| measured.is_some());
    let (value, basis) = match crossed {
        Some(x) => (
            in_metric(&model::with_crossings(pred, key.axes.hz, groups, x)),
            format!("{basis}, +{x:.3} ticks crossed/cycle measured"),
        ),
        None => (ticks_only, basis),
    };
    ModelValue {
        value,
        ticks_only,
        crossed_ticks: crossed,
        sleep_ticks: pred.sleep_ticks,
        basis,
    }
}

/// The 2021 figure for a cell of the same arch, HZ, variant and volume.
pub fn reported_for(key: &CellKey, metric: Metric, mean: Option<f64>) -> Option<ReportedValue> {
    let r = reported::lookup(
        key.axes.arch,
        key.axes.hz,
        key.axes.variant,
        key.axes.volume.0,
    )?;
    let value = match metric {
        Metric::LazyinitS => r.seconds,
        Metric::MsPerGroup => r.seconds * 1000.0 / model::groups(key.volume()).max(1) as f64,
        // The report's figures include the start delay.
        Metric::FromFirstGroupS => return None,
    };
    let mean = mean?;
    Some(ReportedValue {
        instance: r.instance,
        value,
        diff: mean - value,
        diff_pct: (mean / value - 1.0) * 100.0,
        in_range: None,
    })
}

/// Whether the 2021 figure lies within the runs' range, for a cell whose
/// storage profile draws noise into its holds and that has two runs or
/// more: its n runs are then a spread, not n copies.
fn in_range(key: &CellKey, summary: Option<&Summary>, reported: f64) -> Option<bool> {
    let noisy = matches!(
        key.testbed.storage,
        lazyinit_core::identity::StorageId::Profile(p) if p.noise().is_some()
    );
    let s = summary.filter(|s| noisy && s.n >= 2)?;
    Some((s.min..=s.max).contains(&reported))
}

/// Groups rows by configuration and summarises each cell, in key order.
pub fn aggregate(rows: &[ResultRow], metric: Metric) -> Vec<CellStats> {
    let mut by_key: BTreeMap<CellKey, Vec<&ResultRow>> = BTreeMap::new();
    for r in rows {
        by_key.entry(CellKey::of(r)).or_default().push(r);
    }
    by_key
        .into_iter()
        .map(|(key, rows)| {
            let ok: Vec<&ResultRow> = rows
                .iter()
                .copied()
                .filter(|r| r.status == Status::Ok)
                .collect();
            let values: Vec<f64> = ok.iter().filter_map(|r| metric.of(r)).collect();
            let sleep_ticks: Vec<u64> = ok
                .iter()
                .filter_map(|r| r.measured.sleep_ticks)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let concurrency: Vec<u32> = ok
                .iter()
                .map(|r| r.concurrency)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let estimate_groups: Vec<u64> = ok
                .iter()
                .filter_map(|r| r.measured.estimate_groups)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let prediction = match (ok.as_slice(), metric) {
                ([r], Metric::LazyinitS) if r.measured.estimated => {
                    match (r.measured.lazyinit_lo_s, r.measured.lazyinit_hi_s) {
                        (Some(lo), Some(hi)) => Some(Interval { lo, hi }),
                        _ => None,
                    }
                }
                _ => None,
            };
            let profile_not_held = ok.iter().filter_map(|r| profile_line(r)).collect();
            let summary = summarize(&values);
            // Every run counted its crossings, or the model leaves them out.
            let crossed: Option<Vec<f64>> = ok.iter().map(|r| r.measured.crossed_ticks).collect();
            let crossed = crossed
                .filter(|c| !c.is_empty())
                .map(|c| crate::stats::mean(&c));
            let model = model_for(&key, &sleep_ticks, crossed, metric);
            let reported = reported_for(&key, metric, summary.as_ref().map(|s| s.mean)).map(|r| {
                ReportedValue {
                    in_range: in_range(&key, summary.as_ref(), r.value),
                    ..r
                }
            });
            CellStats {
                failed: rows.len() - ok.len(),
                missing_metric: ok.len() - values.len(),
                key,
                summary,
                sleep_ticks,
                concurrency,
                model,
                reported,
                estimate_groups,
                prediction,
                profile_not_held,
            }
        })
        .collect()
}

/// A realistic ok row for unit tests elsewhere in the crate.
#[cfg(test)]
pub(crate) mod tests_support {
    use lazyinit_core::results::{Measurement, ResultRow, Status};
    use lazyinit_core::{Arch, Axes, ByteSize, Hz, Testbed, Variant};

    use super::CellKey;

    /// A cell key on the default testbed (qemu, tcg, Debian 6.1, w10).
    pub(crate) fn key(arch: Arch, hz: u32, variant: Variant, volume_bytes: u64) -> CellKey {
        CellKey {
            testbed: Testbed {
                provider: "qemu".into(),
                machine: format!("qemu-{}", arch.uname_machine()).into(),
                accel: "tcg".into(),
                storage: "none".into(),
            },
            axes: Axes::new(
                arch,
                "debian-6.1".into(),
                Hz::new(hz).unwrap(),
                variant,
                ByteSize(volume_bytes),
            ),
            estimated: false,
        }
    }

    pub fn row(kernel_source: &str, lazyinit_s: f64) -> ResultRow {
        ResultRow {
            run_id: "r".into(),
            cell_id: "qemu-x86_64-debian-6.1-hz100-nofix-64GiB-r1".into(),
            testbed: Testbed {
                provider: "qemu".into(),
                machine: "qemu-x86_64".into(),
                accel: "tcg".into(),
                storage: "none".into(),
            },
            axes: Axes::new(
                Arch::X86_64,
                kernel_source.into(),
                Hz::new(100).unwrap(),
                Variant::NoFix,
                ByteSize(64 << 30),
            ),
            kernel_profile: None,
            kernel_tree: String::new(),
            kernel_release: "6.1.158".into(),
            repetition: 1,
            started_at: "2026-11-29T19:00:00Z".into(),
            harness_version: "0.1.0".into(),
            harness_commit: String::new(),
            status: Status::Ok,
            error: String::new(),
            boot_s: Some(1.1),
            concurrency: 1,
            estimate_after: None,
            shard: String::new(),
            host: String::new(),
            measured: Measurement {
                groups: Some(512),
                mkfs_s: Some(1.3),
                mount_s: Some(0.04),
                lazyinit_s: Some(lazyinit_s),
                lazyinit_poll_s: Some(lazyinit_s + 0.5),
                ms_per_group: Some(109.5),
                traced_groups: Some(512),
                clocksource: "tsc".into(),
                sleep_ticks: Some(10),
                first_group_s: Some(2.9),
                mkfs_cmd: "mkfs.ext4 -F /dev/vda".into(),
                z1_ms: None,
                z1_target_ms: None,
                guest_part_ms: None,
                zero_hold_ms: None,
                zero_median_ms: None,
                z1_attempts: None,
                estimated: false,
                estimate_groups: None,
                estimate_cycle_ms: None,
                lazyinit_lo_s: None,
                lazyinit_hi_s: None,
                crossed_ticks: None,
                estimate_caveat: None,
                profile_held: None,
                z1_lo_ms: None,
                z1_hi_ms: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::{key, row};
    use super::*;
    use lazyinit_core::size::{GIB, TIB};
    use lazyinit_core::{Axes, ByteSize, Hz};

    #[test]
    fn nofix_model_follows_the_measured_multiple_of_w() {
        let k = key(Arch::X86_64, 100, Variant::NoFix, 64 * GIB);
        let m = model_for(&k, &[10], None, Metric::MsPerGroup);
        // (10 + 1) ticks of 10 ms: the zeroing fits inside the cycle.
        assert!((m.value - 110.0).abs() < 1e-9, "{m:?}");
        assert_eq!((m.sleep_ticks, m.basis.as_str()), (10, "L=10 measured"));
        // A first zeroing of 3 ticks (a loaded host): L = 30.
        let m = model_for(&k, &[30], None, Metric::MsPerGroup);
        assert_eq!(m.sleep_ticks, 30);
        assert!((m.value - 310.0).abs() < 1e-9, "{m:?}");
        // 11 is no multiple of W: the kernel cannot have chosen it.
        assert_eq!(
            model_for(&k, &[11], None, Metric::MsPerGroup).sleep_ticks,
            10
        );
        assert!(model_for(&k, &[11], None, Metric::MsPerGroup)
            .basis
            .contains("z1"));
    }

    #[test]
    fn fix_model_uses_the_measured_sleep_when_unanimous() {
        let k = key(Arch::Arm64, 100, Variant::Fix, 64 * GIB);
        let m = model_for(&k, &[3], None, Metric::MsPerGroup);
        assert_eq!((m.sleep_ticks, m.basis.as_str()), (3, "L=3 measured"));
        assert!((m.value - 40.0).abs() < 1e-9);
        let l4 = model_for(&k, &[4], None, Metric::LazyinitS);
        assert!((l4.value - (512.0 * 0.050 + 2.5)).abs() < 1e-9, "{l4:?}");
        // Disagreeing runs: fall back to the default zeroing time.
        assert!(model_for(&k, &[3, 4], None, Metric::MsPerGroup)
            .basis
            .contains("z1"));
    }

    #[test]
    fn measured_crossings_add_their_ticks_at_the_measured_sleep() {
        let k = key(Arch::X86_64, 250, Variant::NoFix, 2 * TIB);
        let m = model_for(&k, &[10], Some(0.25), Metric::MsPerGroup);
        // 11 ticks of 4 ms, plus a quarter tick crossed per cycle.
        assert!((m.ticks_only - 44.0).abs() < 1e-9, "{m:?}");
        assert!((m.value - 45.0).abs() < 1e-9, "{m:?}");
        assert_eq!(m.crossed_ticks, Some(0.25));
        assert!(m.basis.contains("0.250 ticks crossed"), "{}", m.basis);
        let s = model_for(&k, &[10], Some(0.25), Metric::LazyinitS);
        assert!((s.value - (16384.0 * 0.045 + 2.5)).abs() < 1e-6, "{s:?}");
        // Runs that disagree on L: no measured L, so no crossings either.
        let d = model_for(&k, &[10, 20], Some(0.25), Metric::MsPerGroup);
        assert_eq!((d.crossed_ticks, d.value), (None, d.ticks_only));
    }

    /// With noise on purpose, n runs are a spread: the report says whether
    /// the 2021 figure lies in it; without noise it says nothing.
    #[test]
    fn a_noisy_cells_runs_say_whether_2021_lies_in_their_range() {
        let rows = |storage: &str, secs: &[f64]| -> Vec<ResultRow> {
            secs.iter()
                .enumerate()
                .map(|(i, &s)| {
                    let mut r = row("debian-6.1", s);
                    r.testbed.storage = storage.into();
                    r.axes = Axes::new(
                        Arch::X86_64,
                        "debian-6.1".into(),
                        Hz::new(250).unwrap(),
                        Variant::NoFix,
                        ByteSize(2 * TIB),
                    );
                    r.repetition = i as u32 + 1;
                    r
                })
                .collect()
        };
        let noisy = "ebs:3.4ms,sd=200us,seed=1";
        let in_range = |storage: &str, secs: &[f64]| {
            let c = aggregate(&rows(storage, secs), Metric::LazyinitS);
            assert_eq!(c.len(), 1);
            c[0].reported.as_ref().unwrap().in_range
        };
        // 2021: 743 s.
        assert_eq!(in_range(noisy, &[735.0, 750.0, 741.0]), Some(true));
        assert_eq!(in_range(noisy, &[723.0, 724.0, 726.0]), Some(false));
        assert_eq!(in_range(noisy, &[735.0]), None, "one run is no range");
        assert_eq!(in_range("ebs", &[735.0, 750.0]), None, "no noise");
    }

    #[test]
    fn reported_only_for_matching_cells() {
        let k = key(Arch::X86_64, 250, Variant::NoFix, 2 * TIB);
        let r = reported_for(&k, Metric::LazyinitS, Some(817.3)).unwrap();
        assert_eq!(r.value, 743.0);
        assert!((r.diff_pct - 10.0).abs() < 1e-9);
        let ms = reported_for(&k, Metric::MsPerGroup, Some(45.0)).unwrap();
        assert!((ms.value - 743_000.0 / 16384.0).abs() < 1e-9);
        assert!(reported_for(
            &key(Arch::X86_64, 100, Variant::NoFix, 2 * TIB),
            Metric::LazyinitS,
            Some(1.0)
        )
        .is_none());
    }
}
