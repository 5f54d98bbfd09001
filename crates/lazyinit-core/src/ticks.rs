//! A run's cycles counted on the guest's tick grid.
//!
//! The lazy-init thread wakes on a tick, zeroes one group, and sleeps L
//! ticks from the tick after the zeroing ended. So each cycle, counted in
//! jiffies from one zeroing's start to the next one's, is
//!
//! ```text
//! cycle = slept + 1 + crossed
//! ```
//!
//! where `slept` is the sleep the kernel chose (L), `1` is the timer's
//! rounding up to the next tick, and `crossed` is the number of ticks the
//! zeroing itself crossed (its start's wake-up latency plus its duration
//! reaching past the tick it started in). `slept` is the kernel's part;
//! `crossed` is the host's (a 3.5 ms zeroing at HZ=250 crosses the 4 ms
//! tick whenever the thread wakes more than 0.5 ms late). The model
//! (`model::predict`) is `L + 1` ticks. [`TickCycles::crossed_at`] is the
//! rest of the mean cycle at a given L: an accounting, not a prediction,
//! that says how much of a run's time the host added. A cycle that slept
//! another L is counted in it too; [`TickCycles::slept_exactly`] says how
//! many did not.

use std::collections::BTreeMap;

/// What the tick grid says about one run's cycles.
#[derive(Debug, Clone, PartialEq)]
pub struct TickCycles {
    /// Cycles counted (zeroings with a known start, after the first,
    /// minus one).
    pub cycles: usize,
    /// The most common sleep, in ticks: L.
    pub slept: u64,
    /// Cycles that slept exactly `slept`.
    pub slept_exactly: usize,
    /// Mean cycle, in ticks (`slept + 1 + crossed` on average, plus the
    /// cycles that slept another L).
    pub ticks_per_cycle: f64,
}

impl TickCycles {
    /// Mean ticks a zeroing crossed per cycle at sleep `l` (the kernel's,
    /// or this grid's `slept`): the mean cycle less `l + 1`. The guest's
    /// rows (`crossed_ticks`) and `report` for older rows both take it
    /// from here.
    pub fn crossed_at(&self, l: u64) -> f64 {
        self.ticks_per_cycle - (l as f64 + 1.0)
    }
}

/// Fewest zeroings (after the first) the grid is fitted on: 13, so 12
/// cycles.
pub const MIN_SPANS: usize = 13;

/// Counts `spans` — each zeroing's (start, end) on the guest's trace
/// clock, in seconds, in order, the first (which follows the random start
/// delay) left out by the caller — on the tick grid of `hz`. The grid's
/// phase is where zeroings start: just after a tick. None with fewer than
/// [`MIN_SPANS`] spans, or when no sleep holds half of the cycles.
pub fn count(spans: &[(f64, f64)], hz: u32) -> Option<TickCycles> {
    if spans.len() < MIN_SPANS || hz == 0 {
        return None;
    }
    // Times from a file: a non-finite one has no tick.
    if spans.iter().any(|(s, e)| !s.is_finite() || !e.is_finite()) {
        return None;
    }
    let tick = 1.0 / hz as f64;
    // The phase that puts the starts closest after a tick: the one with
    // the smallest 95th percentile of start - tick.
    const STEPS: usize = 200;
    let mut lat: Vec<f64> = Vec::with_capacity(spans.len());
    let mut best = (f64::INFINITY, 0.0);
    for i in 0..STEPS {
        let c = i as f64 * tick / STEPS as f64;
        lat.clear();
        lat.extend(spans.iter().map(|&(s, _)| (s - c).rem_euclid(tick)));
        let k = lat.len() * 95 / 100;
        let p95 = *lat.select_nth_unstable_by(k, |a, b| a.total_cmp(b)).1;
        if p95 < best.0 {
            best = (p95, c);
        }
    }
    // A step earlier, so the starts right at the chosen phase stay in
    // their tick.
    let phase = best.1 - tick / STEPS as f64;
    // i128 over a saturating cast: times of any size (1e300 s) count
    // without overflow; such a trace then just locks to no sleep.
    let jiffy = |t: f64| ((t - phase) / tick).floor() as i64 as i128;
    let mut slept_counts = BTreeMap::<i128, usize>::new();
    let mut total = 0i128;
    for w in spans.windows(2) {
        let slept = jiffy(w[1].0) - jiffy(w[0].1) - 1;
        *slept_counts.entry(slept).or_default() += 1;
        total += jiffy(w[1].0) - jiffy(w[0].0);
    }
    let cycles = spans.len() - 1;
    let (&l, &n) = slept_counts.iter().max_by_key(|(_, &n)| n)?;
    let slept = u64::try_from(l).ok()?;
    (2 * n >= cycles).then(|| TickCycles {
        cycles,
        slept,
        slept_exactly: n,
        ticks_per_cycle: total as f64 / cycles as f64,
    })
}

/// The (start, end) of each zeroing after the first, from each group's
/// event time (the zeroing's end) and zeroing time; groups whose zeroing
/// was not timed are left out.
pub fn spans(event_s: &[f64], zero_s: &[Option<f64>]) -> Vec<(f64, f64)> {
    event_s
        .iter()
        .zip(zero_s)
        .skip(1)
        .filter_map(|(&t, z)| z.map(|z| (t - z, t)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Zeroings at HZ=250 (4 ms ticks) that start `lat` after a tick, last
    /// `z`, and sleep `l` ticks from the tick after their end.
    fn run(l: i64, z: f64, lats: &[f64]) -> Vec<(f64, f64)> {
        run_varying(&vec![l; lats.len()], z, lats)
    }

    fn run_varying(ls: &[i64], z: f64, lats: &[f64]) -> Vec<(f64, f64)> {
        let (tick, phase) = (0.004, 0.0007);
        let mut j: i64 = 1000; // the tick the next zeroing wakes on
        let mut out = Vec::new();
        for (&lat, &l) in lats.iter().zip(ls) {
            let s = j as f64 * tick + phase + lat;
            let e = s + z;
            out.push((s, e));
            let end_jiffy = ((e - phase) / tick).floor() as i64;
            j = end_jiffy + 1 + l;
        }
        out
    }

    #[test]
    fn cycles_are_sleep_plus_one_plus_crossed() {
        // 3.5 ms zeroings; 1 in 4 wakes 0.8 ms late and crosses a tick.
        let lats: Vec<f64> = (0..400)
            .map(|i| if i % 4 == 0 { 0.0008 } else { 0.0001 })
            .collect();
        let c = count(&run(10, 0.0035, &lats), 250).unwrap();
        assert_eq!(c.slept, 10);
        assert_eq!(c.slept_exactly, c.cycles);
        assert!((c.crossed_at(c.slept) - 0.25).abs() < 0.01, "{c:?}");
        assert!((c.ticks_per_cycle - 11.25).abs() < 0.01, "{c:?}");
    }

    #[test]
    fn no_crossings_when_the_zeroing_fits_in_its_tick() {
        let lats = vec![0.0001; 100];
        let c = count(&run(8, 0.0030, &lats), 250).unwrap();
        assert_eq!((c.slept, c.cycles), (8, 99));
        assert_eq!(c.crossed_at(c.slept), 0.0);
        assert_eq!(c.ticks_per_cycle, 9.0);
    }

    #[test]
    fn too_few_spans_or_no_majority_is_none() {
        let lats = vec![0.0001; MIN_SPANS - 1];
        assert!(count(&run(8, 0.003, &lats), 250).is_none());
        // Three sleeps, a third of the cycles each: none holds half.
        let ls: Vec<i64> = (0..30).map(|i| [3, 6, 9][i % 3]).collect();
        let spans = run_varying(&ls, 0.003, &[0.0001; 30]);
        assert!(count(&spans, 250).is_none());
    }

    #[test]
    fn spans_skip_the_first_group_and_untimed_ones() {
        let s = spans(
            &[1.0, 2.0, 3.0, 4.0],
            &[Some(0.1), Some(0.2), None, Some(0.4)],
        );
        assert_eq!(s.len(), 2);
        assert!((s[0].0 - 1.8).abs() < 1e-12 && s[0].1 == 2.0);
        assert!((s[1].0 - 3.6).abs() < 1e-12 && s[1].1 == 4.0);
    }
}
