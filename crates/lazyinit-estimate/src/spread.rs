//! How far the rest of a run can stray from the cycles an early stop saw
//! (docs/estimates.md): the pure parts of the interval that an
//! independent-cycles model leaves out.
//!
//! - Persistence. Extra ticks come in runs (a regime of late wakeups, or
//!   of slower zeroings), so w cycles hold fewer than w independent
//!   looks at the rate. [`block_length`] is the cycles one independent
//!   look is worth, from the window's own autocorrelation.
//! - Straddle. A zeroing that ends just before a tick crosses it when the
//!   rest of the run is a little slower; one that ends just after stops
//!   crossing when it is a little faster. [`margins`] places each cycle's
//!   zeroing on the tick grid, and [`near_tick`] counts the share of
//!   cycles that a shift of the zeroing's end by `shift` would give or
//!   take a tick: the rate could move that far without anything
//!   unusual happening.
//! - The shift. [`regime_shift`] is how far the zeroings' ends moved
//!   between stretches of the window itself; a floor of what TCG moves
//!   from one guest to the next.
//! - The load to come. Every other guest whose phase will change before
//!   this one ends moves the extra-tick rate: up for those still
//!   starting ([`load_ticks`]), either way for those in lazy-init, which
//!   may end first ([`running_ticks`]; see [`Load`]).

pub use lazyinit_core::events::Load;
use lazyinit_core::stats::{mean, mean_sd, variance};

/// The least shift of a zeroing's end the interval allows for: the rms
/// of one guest's first zeroings under TCG (docs/storage-profiles.md).
pub const FLOOR_SHIFT_S: f64 = 0.000_1;

/// Extra ticks a cycle allowed for above, per other guest that is still
/// queued, building, booting, making its filesystem or calibrating when
/// this one stops: each reaches lazy-init (or a new mkfs) while this one
/// still runs, and under TCG on a shared host wakeups then run late by
/// whole ticks, and more zeroings cross one (x86_64 at HZ=250: the
/// 24-at-once cells read up to 11% long from their first 50 groups).
/// Fitted, and validated leaving one results folder out
/// (scripts/estimate-cv.py, docs/estimates.md).
pub const LOAD_TICKS_PER_GUEST: f64 = 0.04;

/// Extra ticks a cycle allowed for both ways, per other guest in
/// lazy-init when this one stops: each may end first, and the host it
/// leaves is quieter (fewer extra ticks) or, as the next cells start,
/// busier. Fitted with [`LOAD_TICKS_PER_GUEST`].
pub const RUNNING_TICKS_PER_GUEST: f64 = 0.002;

/// Where one cycle's zeroing ended on the tick grid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Margin {
    /// From the zeroing's end to the next tick, s: a zeroing that ends
    /// this much later crosses one more tick.
    pub ahead_s: f64,
    /// Past the tick it crossed, s, when it crossed one (None when it
    /// ended in the tick it started in): this much earlier and the cycle
    /// is a tick shorter.
    pub behind_s: Option<f64>,
}

/// The cycles one independent look at the extra-tick rate is worth: the
/// integrated autocorrelation time of the per-cycle tick counts, 1 + 2
/// times the sum of their autocorrelations, summed in pairs while a pair
/// is positive (Geyer's initial positive sequence), at most a quarter of
/// the window. 1 when the counts do not vary.
pub fn block_length(ticks: &[f64]) -> f64 {
    let n = ticks.len();
    if n < 4 {
        return 1.0;
    }
    let m = mean(ticks);
    let d: Vec<f64> = ticks.iter().map(|k| k - m).collect();
    let c0 = d.iter().map(|x| x * x).sum::<f64>() / n as f64;
    if c0 <= 0.0 {
        return 1.0;
    }
    let rho = |h: usize| {
        d[..n - h]
            .iter()
            .zip(&d[h..])
            .map(|(a, b)| a * b)
            .sum::<f64>()
            / n as f64
            / c0
    };
    let max_lag = n / 4;
    let mut tau = 1.0;
    let mut h = 1;
    while h < max_lag {
        let pair = rho(h) + rho(h + 1);
        if pair <= 0.0 {
            break;
        }
        tau += 2.0 * pair;
        h += 2;
    }
    tau.clamp(1.0, (n as f64 / 4.0).max(1.0))
}

/// The phase of the tick grid (s, in [0, tick)) that puts the zeroings'
/// starts closest after a tick: the one with the smallest 95th
/// percentile of start - tick, a little earlier so that the starts right
/// at it stay in their tick (as `ticks::count` places its grid).
fn grid_phase(starts: &[f64], tick: f64) -> f64 {
    const STEPS: usize = 200;
    let mut lat = Vec::with_capacity(starts.len());
    let mut best = (f64::INFINITY, 0.0);
    for i in 0..STEPS {
        let c = i as f64 * tick / STEPS as f64;
        lat.clear();
        lat.extend(starts.iter().map(|&s| (s - c).rem_euclid(tick)));
        let k = lat.len() * 95 / 100;
        let p95 = *lat.select_nth_unstable_by(k, |a, b| a.total_cmp(b)).1;
        if p95 < best.0 {
            best = (p95, c);
        }
    }
    best.1 - tick / STEPS as f64
}

/// Each timed zeroing's place on the tick grid, from the groups' event
/// times (the zeroing's end) and zeroing times. None when fewer than
/// half of them are timed: the grid cannot be placed.
pub fn margins(t_s: &[f64], zero_s: &[Option<f64>], tick: f64) -> Option<Vec<Margin>> {
    let spans: Vec<(f64, f64)> = t_s
        .iter()
        .zip(zero_s)
        .filter_map(|(&e, z)| z.map(|z| (e - z, e)))
        .collect();
    if spans.is_empty() || spans.len() * 2 < t_s.len() {
        return None;
    }
    let starts: Vec<f64> = spans.iter().map(|s| s.0).collect();
    let phase = grid_phase(&starts, tick);
    let jiffy = |t: f64| ((t - phase) / tick).floor();
    Some(
        spans
            .iter()
            .map(|&(s, e)| {
                let pos = (e - phase).rem_euclid(tick);
                Margin {
                    ahead_s: tick - pos,
                    behind_s: (jiffy(e) > jiffy(s)).then_some(pos),
                }
            })
            .collect(),
    )
}

/// The shares of cycles that a shift of every zeroing's end by `shift_s`
/// later (first) or earlier (second) would give or take a tick.
pub fn near_tick(margins: &[Margin], shift_s: f64) -> (f64, f64) {
    if margins.is_empty() {
        return (0.0, 0.0);
    }
    let n = margins.len() as f64;
    let above = margins.iter().filter(|m| m.ahead_s < shift_s).count() as f64;
    let below = margins
        .iter()
        .filter(|m| m.behind_s.is_some_and(|b| b < shift_s))
        .count() as f64;
    (above / n, below / n)
}

/// How far the zeroings' ends moved between stretches of the window:
/// twice the spread of the median end (as distance to the next tick)
/// over blocks of `block` cycles, less what the scatter within blocks
/// alone gives a median of `block` (pi/2 sigma^2 / block): a shift of
/// the regime, not the noise of a few dozen cycles. 0 with fewer than
/// two blocks.
pub fn regime_shift(margins: &[Margin], block: usize) -> f64 {
    let block = block.max(2);
    let chunks: Vec<Vec<f64>> = margins
        .chunks(block)
        .filter(|c| c.len() == block)
        .map(|c| {
            let mut a: Vec<f64> = c.iter().map(|m| m.ahead_s).collect();
            a.sort_by(f64::total_cmp);
            a
        })
        .collect();
    if chunks.len() < 2 {
        return 0.0;
    }
    let k = chunks.len() as f64;
    let medians: Vec<f64> = chunks.iter().map(|a| a[a.len() / 2]).collect();
    let mm = mean(&medians);
    // The medians' spread over the blocks (population: / k); each block's
    // sample variance (blocks hold at least two values).
    let between = medians.iter().map(|m| (m - mm).powi(2)).sum::<f64>() / k;
    let within = chunks.iter().map(|a| variance(a)).sum::<f64>() / k;
    let noise = std::f64::consts::FRAC_PI_2 * within / block as f64;
    2.0 * (between - noise).max(0.0).sqrt()
}

/// The shift the interval allows for: the floor, or what the window
/// itself showed if more (the load to come is [`load_ticks`]).
pub fn allowed_shift(regime_s: f64) -> f64 {
    regime_s.max(FLOOR_SHIFT_S)
}

/// Extra ticks a cycle the guests still starting may add:
/// [`LOAD_TICKS_PER_GUEST`] each, at most one.
pub fn load_ticks(load: Load) -> f64 {
    (LOAD_TICKS_PER_GUEST * f64::from(load.changing)).min(1.0)
}

/// Extra ticks a cycle, either way, that the guests in lazy-init may
/// add or take when they end: [`RUNNING_TICKS_PER_GUEST`] each, at most
/// one.
pub fn running_ticks(load: Load) -> f64 {
    (RUNNING_TICKS_PER_GUEST * f64::from(load.running)).min(1.0)
}

/// How far the guest's ticks may run from their nominal length, s a
/// cycle: the window's mean sub-tick residual (cycle less its whole
/// ticks) and twice its standard error. Rounding each cycle to whole
/// ticks hides a timer that runs 0.1% slow under TCG; thousands of
/// cycles to come do not.
pub fn tick_drift(cycles: &[f64], tick: f64) -> f64 {
    if cycles.len() < 2 {
        return 0.0;
    }
    let r: Vec<f64> = cycles
        .iter()
        .map(|c| c - (c / tick).round() * tick)
        .collect();
    let (m, sd) = mean_sd(&r);
    m.abs() + 2.0 * sd / (r.len() as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread at HZ=250 that wakes `lat` after a tick, zeroes for `z`,
    /// and sleeps `l` ticks from the tick after its end: (event times,
    /// zeroing times).
    fn physical(l: u64, zs: &[f64], lats: &[f64]) -> (Vec<f64>, Vec<Option<f64>>) {
        let tick = 0.004;
        let mut j = 100.0;
        let (mut t, mut z) = (Vec::new(), Vec::new());
        for (&zi, &lat) in zs.iter().zip(lats) {
            let s = j * tick + lat;
            let e = s + zi;
            t.push(e);
            z.push(Some(zi));
            j = (e / tick).floor() + 1.0 + l as f64;
        }
        (t, z)
    }

    #[test]
    fn independent_counts_have_a_block_of_one_and_runs_a_longer_one() {
        // Alternating 0/1: negatively correlated, no longer than one.
        let alt: Vec<f64> = (0..400).map(|i| (i % 2) as f64).collect();
        assert_eq!(block_length(&alt), 1.0);
        // Runs of 50 crossings, then 50 without: one look per run.
        let runs: Vec<f64> = (0..400).map(|i| ((i / 50) % 2) as f64).collect();
        let b = block_length(&runs);
        assert!(b > 20.0 && b <= 100.0, "{b}");
        // Constant counts carry no information on persistence.
        assert_eq!(block_length(&[11.0; 100]), 1.0);
    }

    #[test]
    fn zeroings_just_under_a_tick_are_near_it_and_short_ones_are_not() {
        // Prompt wakeups (the grid is placed by the earliest starts).
        let lats: Vec<f64> = (0..100).map(|i| (i % 2) as f64 * 0.000_01).collect();
        // 3.9 ms zeroings end under 0.1 ms before the next tick.
        let (t, z) = physical(9, &vec![0.0039; 100], &lats);
        let m = margins(&t, &z, 0.004).unwrap();
        assert_eq!(near_tick(&m, FLOOR_SHIFT_S), (1.0, 0.0));
        // 3.0 ms: a whole 0.9 ms from the tick.
        let (t, z) = physical(9, &vec![0.003; 100], &lats);
        let m = margins(&t, &z, 0.004).unwrap();
        assert_eq!(near_tick(&m, FLOOR_SHIFT_S), (0.0, 0.0));
        // 4.02 ms: every one crosses, a few 10 us past the tick.
        let (t, z) = physical(9, &vec![0.004_02; 100], &lats);
        let m = margins(&t, &z, 0.004).unwrap();
        assert!(m.iter().all(|m| m.behind_s.is_some()), "{m:?}");
        assert_eq!(near_tick(&m, FLOOR_SHIFT_S), (0.0, 1.0));
    }

    #[test]
    fn a_move_of_the_zeroings_between_stretches_is_measured() {
        let lats = vec![0.0001; 200];
        let zs: Vec<f64> = (0..200)
            .map(|i| if i < 100 { 0.0032 } else { 0.0035 })
            .collect();
        let (t, z) = physical(8, &zs, &lats);
        let m = margins(&t, &z, 0.004).unwrap();
        let shift = regime_shift(&m, 50);
        assert!((shift - 0.0003).abs() < 2e-5, "{shift}");
        // One stretch: nothing to compare.
        assert_eq!(regime_shift(&m[..60], 50), 0.0);
        assert_eq!(allowed_shift(0.0), FLOOR_SHIFT_S);
        assert_eq!(allowed_shift(0.0003), 0.0003);
        let load = |changing, running| Load { changing, running };
        assert_eq!(load_ticks(load(2, 5)), 2.0 * LOAD_TICKS_PER_GUEST);
        assert_eq!(running_ticks(load(2, 5)), 5.0 * RUNNING_TICKS_PER_GUEST);
        assert_eq!(load_ticks(load(1000, 0)), 1.0);
        assert_eq!(running_ticks(load(0, u32::MAX)), 1.0);
    }

    #[test]
    fn a_slow_timer_is_seen_in_the_residuals() {
        // 11-tick cycles of a timer 0.1% slow, with +-20 us of jitter.
        let c: Vec<f64> = (0..100)
            .map(|i| 0.044 * 1.001 + if i % 2 == 0 { 2e-5 } else { -2e-5 })
            .collect();
        let d = tick_drift(&c, 0.004);
        assert!(d > 0.000_044 && d < 0.000_050, "{d}");
        assert_eq!(tick_drift(&[0.044; 10], 0.004), 0.0);
    }

    #[test]
    fn untimed_zeroings_place_no_grid() {
        assert!(margins(&[1.0, 2.0, 3.0], &[None, None, Some(0.001)], 0.004).is_none());
        assert!(margins(&[], &[], 0.004).is_none());
    }
}
