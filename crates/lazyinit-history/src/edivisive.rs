//! Change points of one series: E-Divisive means with a Student t-test,
//! the method of Apache Otava (formerly Hunter; Fleming et al., "Hunter:
//! Using Change Point Detection to Hunt for Performance Regressions",
//! ICPE 2023), after Matteson and James's E-Divisive (2014). Pure
//! functions over a slice of values, oldest first.
//!
//! 1. **Split**: over windows of `window` points (half a window apart),
//!    repeatedly cut the segment at the point that maximises the
//!    divergence `Q` between its two sides, while the t-test between the
//!    two sides gives p below 10 x `max_p` (weak change points).
//! 2. **Merge**: over the whole series, drop the weakest change point
//!    (largest p, or with every p below `max_p` the smallest relative
//!    change when under `min_magnitude`) and test again, until every one
//!    left passes.
//!
//! 3. **Resolve** (ours, not Otava's): a change point is kept only when
//!    (a) its p is below `max_p` divided by the number of windows the
//!    series spans ([`Options::level`]: a Bonferroni correction for the
//!    many places a long history offers a cut; a series of up to one
//!    window keeps `max_p`), (b) its step is at least
//!    [`Options::min_effect`] times the series' own noise (the step of
//!    the two sides' medians over their pooled robust standard
//!    deviation, 1.4826 x MAD: a step smaller than the night-to-night
//!    scatter is not resolved, and loaded nights move neither), and
//!    (c) it is not one end of an excursion: two change points at most
//!    [`Options::max_excursion`] runs apart whose outer sides do not
//!    differ (the series left its level and came back, as the five
//!    one-core nights of results/l-stability-timer do) are both dropped.
//!
//! Cost: every cut search is over at most one window (the split step's
//! windows, and the relocation of a survivor within a window either side
//! of it), so a series of n points costs O(n x window) plus O(n) per
//! merge round, not O(n²).
//!
//! Differences from Otava: a change needs [`Options::min_size`] points
//! on each side (default 3; Otava's 1 let one outlying night pass for a
//! change, docs/history.md has the measured rates), the t-test takes the sample standard deviation
//! (n - 1; Otava passes numpy's n one to scipy, which expects n - 1), and
//! after a merge every change point's test is recomputed, not only two.

use lazyinit_core::stats::{self, mean_sd, robust};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Points per window of the split step (Otava: 50).
    pub window: usize,
    /// Significance level of a change point (Otava: 0.001).
    pub max_p: f64,
    /// Smallest relative change kept, as a fraction (Otava: 0).
    pub min_magnitude: f64,
    /// Fewest points on either side of a change (Otava: 1). One night
    /// off its level is an outlier, not a change: lkp-tests asks for 3.
    pub min_size: usize,
    /// Smallest step kept (of the two sides' medians), in units of the
    /// series' robust noise (pooled 1.4826 x MAD of the two sides). 0
    /// keeps any significant step.
    pub min_effect: f64,
    /// Longest excursion (runs between two change points whose outer
    /// sides do not differ) dropped as a loaded stretch, not a change.
    /// 0 keeps excursions.
    pub max_excursion: usize,
}

impl Options {
    /// The significance level of a change point in a series of `n`
    /// points: `max_p` over the number of windows the series spans
    /// (Bonferroni), `max_p` itself up to one window.
    pub fn level(&self, n: usize) -> f64 {
        let windows = (n as f64 / self.window.max(2) as f64).max(1.0);
        self.max_p / windows
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            window: 50,
            max_p: 0.001,
            min_magnitude: 0.0,
            min_size: 3,
            min_effect: 1.0,
            max_excursion: 25,
        }
    }
}

/// A change point: the series changes at `index` (the first point of
/// the new level), with the test between its two neighbouring segments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    pub index: usize,
    pub stats: TTest,
}

/// Student's two-sample t-test between two segments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TTest {
    pub mean_before: f64,
    pub mean_after: f64,
    /// Sample standard deviations (0 for a single value).
    pub sd_before: f64,
    pub sd_after: f64,
    pub n_before: usize,
    pub n_after: usize,
    pub p: f64,
}

impl TTest {
    /// `after / before - 1`.
    pub fn rel_change(&self) -> f64 {
        if self.mean_before == 0.0 {
            0.0
        } else {
            self.mean_after / self.mean_before - 1.0
        }
    }
    /// The larger of the forward and backward relative changes (Otava's).
    pub fn magnitude(&self) -> f64 {
        let back = if self.mean_after == 0.0 {
            0.0
        } else {
            self.mean_before / self.mean_after - 1.0
        };
        self.rel_change().abs().max(back.abs())
    }
}

/// The step between `left` and `right` (of their medians) in units of
/// their pooled robust noise (infinite when neither side has any): a
/// stretch of loaded nights moves neither.
pub fn effect(left: &[f64], right: &[f64]) -> f64 {
    let ((m1, a), (m2, b)) = (robust(left), robust(right));
    let (n1, n2) = (left.len() as f64, right.len() as f64);
    let noise = ((n1 * a * a + n2 * b * b) / (n1 + n2)).sqrt();
    let step = (m2 - m1).abs();
    if noise > 0.0 {
        step / noise
    } else if step > 0.0 {
        f64::INFINITY
    } else {
        0.0
    }
}

/// Two-sided Student t-test with pooled variance (scipy's
/// `ttest_ind_from_stats`, `equal_var=True`, as Otava calls it).
pub fn ttest(left: &[f64], right: &[f64]) -> TTest {
    let (m1, s1) = mean_sd(left);
    let (m2, s2) = mean_sd(right);
    let (n1, n2) = (left.len(), right.len());
    let df = (n1 + n2) as f64 - 2.0;
    let p = if n1 == 0 || n2 == 0 || df < 1.0 {
        1.0
    } else {
        let pooled = ((n1 as f64 - 1.0) * s1 * s1 + (n2 as f64 - 1.0) * s2 * s2) / df;
        let se = (pooled * (1.0 / n1 as f64 + 1.0 / n2 as f64)).sqrt();
        if se == 0.0 {
            // No noise at all: any difference is certain, none is none.
            if m1 == m2 {
                1.0
            } else {
                0.0
            }
        } else {
            stats::t_p((m1 - m2) / se, df)
        }
    };
    TTest {
        mean_before: m1,
        mean_after: m2,
        sd_before: s1,
        sd_after: s2,
        n_before: n1,
        n_after: n2,
        p,
    }
}

/// The segments `[a, b)` that change points at `cuts` (sorted) leave in `[lo, hi)`.
fn segments(cuts: &[usize], lo: usize, hi: usize) -> Vec<(usize, usize)> {
    let mut bounds = vec![lo];
    bounds.extend(cuts.iter().copied().filter(|c| *c > lo && *c < hi));
    bounds.push(hi);
    bounds.windows(2).map(|w| (w[0], w[1])).collect()
}

/// The best cut of `x[s..e]`: the τ (s < τ < e) and κ (τ < κ <= e) that
/// maximise Matteson and James's `Q(x[s..τ], x[τ..κ])`, with prefix sums
/// of the pairwise distances so each segment costs O(len²).
fn best_cut(x: &[f64], s: usize, e: usize, min_size: usize) -> Option<(usize, f64)> {
    let min_size = min_size.max(1);
    if e - s < 2 * min_size {
        return None;
    }
    let len = e - s;
    let d = |i: usize, j: usize| (x[s + i] - x[s + j]).abs();
    // col[c][r]: sum of d(i, c) for i < r.
    let col: Vec<Vec<f64>> = (0..len)
        .map(|c| {
            let mut acc = vec![0.0; len + 1];
            for r in 0..len {
                acc[r + 1] = acc[r] + d(r, c);
            }
            acc
        })
        .collect();
    let colsum = |c: usize, from: usize, to: usize| col[c][to] - col[c][from];
    let mut best: Option<(usize, f64)> = None;
    let mut within_x = 0.0;
    for tau in 1..=len - min_size {
        if tau > 1 {
            within_x += colsum(tau - 1, 0, tau - 1);
        }
        let (mut cross, mut within_y) = (0.0, 0.0);
        for kappa in tau + 1..=len {
            cross += colsum(kappa - 1, 0, tau);
            within_y += colsum(kappa - 1, tau, kappa - 1);
            let (n, m) = (tau as f64, (kappa - tau) as f64);
            let mut q = 2.0 / (m + n) * cross;
            if n > 1.0 {
                q -= 2.0 * m / ((m + n) * (n - 1.0)) * within_x;
            }
            if m > 1.0 {
                q -= 2.0 * n / ((m + n) * (m - 1.0)) * within_y;
            }
            if tau >= min_size && kappa - tau >= min_size && best.is_none_or(|(_, b)| q > b) {
                best = Some((s + tau, q));
            }
        }
    }
    best
}

/// Otava's detector on `x[lo..hi]`: cut the most divergent segment while
/// the cut is significant at `max_p`.
fn detect(x: &[f64], lo: usize, hi: usize, max_p: f64, min_size: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> = Vec::new();
    loop {
        let candidate = segments(&cuts, lo, hi)
            .into_iter()
            .filter_map(|(a, b)| best_cut(x, a, b, min_size).map(|(i, q)| (i, q, a, b)))
            .max_by(|p, q| p.1.total_cmp(&q.1));
        let Some((i, _, a, b)) = candidate else { break };
        if ttest(&x[a..i], &x[i..b]).p > max_p {
            break;
        }
        cuts.push(i);
        cuts.sort_unstable();
    }
    cuts
}

/// Each cut tested against its neighbouring segments.
fn tested(x: &[f64], cuts: &[usize]) -> Vec<Split> {
    let bounds: Vec<usize> = std::iter::once(0)
        .chain(cuts.iter().copied())
        .chain(std::iter::once(x.len()))
        .collect();
    cuts.iter()
        .enumerate()
        .map(|(k, &i)| Split {
            index: i,
            stats: ttest(&x[bounds[k]..i], &x[i..bounds[k + 2]]),
        })
        .collect()
}

/// Each change point moved to the best cut between its neighbours. A
/// window that ended within `min_size` points after a step could only cut
/// beside it; once the merge has left one change per segment pair, the
/// segment between the neighbours is cut again where the step is.
///
/// The search is over at most `window` points either side of the cut, so
/// it costs O(window²) however long the segments are.
fn relocated(x: &[f64], mut cuts: Vec<usize>, min_size: usize, window: usize) -> Vec<usize> {
    for k in 0..cuts.len() {
        let lo = if k == 0 { 0 } else { cuts[k - 1] };
        let hi = cuts.get(k + 1).copied().unwrap_or(x.len());
        let lo = lo.max(cuts[k].saturating_sub(window));
        let hi = hi.min(cuts[k] + window);
        if let Some((i, _)) = best_cut(x, lo, hi, min_size) {
            cuts[k] = i;
        }
    }
    cuts
}

/// The change points of `x`, oldest first.
pub fn change_points(x: &[f64], opts: &Options) -> Vec<Split> {
    let window = opts.window.max(2);
    let first_pass = if opts.max_p < 0.05 {
        opts.max_p * 10.0
    } else if opts.max_p < 0.5 {
        opts.max_p * 2.0
    } else {
        opts.max_p
    };
    // Split.
    let mut cuts: Vec<usize> = Vec::new();
    let mut start = 0;
    while start < x.len() {
        let end = (start + window).min(x.len());
        let found = detect(x, start, end, first_pass, opts.min_size);
        let last = found.last().copied().unwrap_or(0);
        for c in found {
            if !cuts.contains(&c) {
                cuts.push(c);
            }
        }
        start = last.max(start + window / 2);
    }
    cuts.sort_unstable();
    // Merge; then move each survivor to its best cut, and merge again if
    // that moved any (bounded: each round either drops or settles).
    let level = opts.level(x.len());
    let mut rounds = 0;
    loop {
        let splits = tested(x, &cuts);
        let Some(weakest) = splits.iter().max_by(|a, b| a.stats.p.total_cmp(&b.stats.p)) else {
            return splits;
        };
        let drop = if weakest.stats.p >= level {
            weakest.index
        } else {
            let small = splits
                .iter()
                .min_by(|a, b| a.stats.magnitude().total_cmp(&b.stats.magnitude()))
                .expect("not empty");
            if opts.min_magnitude > 0.0 && small.stats.magnitude() <= opts.min_magnitude {
                small.index
            } else if let Some(i) = unresolved(x, &splits, opts.min_effect) {
                i
            } else if let Some((a, b)) = excursion(x, &cuts, opts, level) {
                cuts.retain(|c| *c != a && *c != b);
                continue;
            } else {
                let moved = relocated(x, cuts.clone(), opts.min_size, window);
                rounds += 1;
                if moved == cuts || rounds > 10 {
                    return splits;
                }
                cuts = moved;
                cuts.dedup();
                continue;
            }
        };
        cuts.retain(|c| *c != drop);
    }
}

/// The bounds `0, cuts.., n` of the segments.
fn bounds_of(n: usize, cuts: &[usize]) -> Vec<usize> {
    std::iter::once(0)
        .chain(cuts.iter().copied())
        .chain(std::iter::once(n))
        .collect()
}

/// The change point with the smallest step relative to its sides' noise,
/// when that step is under `min_effect`.
fn unresolved(x: &[f64], splits: &[Split], min_effect: f64) -> Option<usize> {
    if min_effect <= 0.0 {
        return None;
    }
    let cuts: Vec<usize> = splits.iter().map(|s| s.index).collect();
    let b = bounds_of(x.len(), &cuts);
    splits
        .iter()
        .enumerate()
        .map(|(k, s)| (s.index, effect(&x[b[k]..s.index], &x[s.index..b[k + 2]])))
        .filter(|(_, e)| *e < min_effect)
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

/// Two neighbouring change points at most `max_excursion` runs apart
/// whose outer sides do not differ (not significant at `level`, or a step
/// under `min_effect`): the series left its level and came back.
fn excursion(x: &[f64], cuts: &[usize], opts: &Options, level: f64) -> Option<(usize, usize)> {
    if opts.max_excursion == 0 {
        return None;
    }
    let b = bounds_of(x.len(), cuts);
    (0..cuts.len().saturating_sub(1)).find_map(|k| {
        let (a, c) = (cuts[k], cuts[k + 1]);
        if c - a > opts.max_excursion {
            return None;
        }
        let (left, right) = (&x[b[k]..a], &x[c..b[k + 3]]);
        let t = ttest(left, right);
        let differ = t.p < level && effect(left, right) >= opts.min_effect;
        (!differ).then_some((a, c))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn noise(rng: &mut rand::rngs::StdRng, n: usize, mean: f64, sd: f64) -> Vec<f64> {
        // Sum of uniforms: near normal, no extra crate.
        (0..n)
            .map(|_| mean + sd * ((0..12).map(|_| rng.gen::<f64>()).sum::<f64>() - 6.0))
            .collect()
    }

    #[test]
    fn a_step_is_found_where_it_is() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut x = noise(&mut rng, 30, 100.0, 1.0);
        x.extend(noise(&mut rng, 30, 110.0, 1.0));
        let cps = change_points(&x, &Options::default());
        assert_eq!(cps.len(), 1, "{cps:?}");
        assert_eq!(cps[0].index, 30);
        assert!(cps[0].stats.p < 1e-6);
        assert!((cps[0].stats.rel_change() - 0.10).abs() < 0.01);
    }

    #[test]
    fn two_steps_in_a_long_series() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let mut x = noise(&mut rng, 120, 50.0, 0.5);
        x.extend(noise(&mut rng, 80, 47.0, 0.5));
        x.extend(noise(&mut rng, 100, 52.0, 0.5));
        let idx: Vec<usize> = change_points(&x, &Options::default())
            .iter()
            .map(|c| c.index)
            .collect();
        assert_eq!(idx, vec![120, 200]);
    }

    #[test]
    fn noise_alone_has_no_change() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let x = noise(&mut rng, 100, 20.0, 0.3);
        assert_eq!(change_points(&x, &Options::default()), vec![]);
        assert_eq!(change_points(&[], &Options::default()), vec![]);
        assert_eq!(change_points(&[1.0], &Options::default()), vec![]);
    }

    /// A long history of noise alone: no change point (before the level
    /// was corrected for the history's length and a step had to exceed
    /// the noise, 10,000 points gave false ones).
    #[test]
    fn a_long_history_of_noise_has_no_change() {
        for seed in [4, 5] {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let x = noise(&mut rng, 10_000, 40.0, 0.2);
            let cps = change_points(&x, &Options::default());
            assert_eq!(cps, vec![], "seed {seed}");
        }
    }

    /// Heavy tails: 2% of points 1-10% high, at random. No change.
    #[test]
    fn loaded_points_in_a_long_history_are_no_change() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(6);
        let x: Vec<f64> = noise(&mut rng, 10_000, 40.0, 0.2)
            .into_iter()
            .map(|v| {
                if rng.gen_bool(0.02) {
                    v * (1.01 + 0.09 * rng.gen::<f64>())
                } else {
                    v
                }
            })
            .collect();
        assert_eq!(change_points(&x, &Options::default()), vec![]);
    }

    /// A step of 0.8 of the noise over 4,000 points is significant (t
    /// near 25) but not resolved: not a change at the defaults, one with
    /// `min_effect` 0.
    #[test]
    fn a_step_under_the_noise_is_not_a_change() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut x = noise(&mut rng, 2000, 100.0, 1.0);
        x.extend(noise(&mut rng, 2000, 100.8, 1.0));
        assert_eq!(change_points(&x, &Options::default()), vec![]);
        let any = Options {
            min_effect: 0.0,
            ..Options::default()
        };
        let idx: Vec<usize> = change_points(&x, &any).iter().map(|c| c.index).collect();
        assert_eq!(idx.len(), 1, "{idx:?}");
        // Near the step: a step this small is placed within a few windows.
        assert!(idx[0].abs_diff(2000) < 150, "{idx:?}");
    }

    /// Five nights 2-8% high between two stretches at one level (the
    /// one-core nights of results/l-stability-timer): an excursion, no
    /// change; kept with `max_excursion` 0.
    #[test]
    fn an_excursion_is_not_a_change() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        let mut x = noise(&mut rng, 40, 20.5, 0.01);
        x.extend([20.9, 21.0, 20.9, 22.2, 20.7]);
        x.extend(noise(&mut rng, 40, 20.5, 0.01));
        assert_eq!(change_points(&x, &Options::default()), vec![]);
        let keep = Options {
            max_excursion: 0,
            ..Options::default()
        };
        let idx: Vec<usize> = change_points(&x, &keep).iter().map(|c| c.index).collect();
        assert_eq!((idx.len(), idx[0]), (2, 40), "{idx:?}");
    }

    /// A step that stays is still found after a short excursion.
    #[test]
    fn a_step_after_an_excursion_is_found() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let mut x = noise(&mut rng, 40, 20.5, 0.01);
        x.extend([20.9, 21.0, 20.9, 22.2, 20.7]);
        x.extend(noise(&mut rng, 20, 20.5, 0.01));
        x.extend(noise(&mut rng, 20, 18.5, 0.01));
        let idx: Vec<usize> = change_points(&x, &Options::default())
            .iter()
            .map(|c| c.index)
            .collect();
        assert_eq!(idx, vec![65]);
    }

    #[test]
    fn the_level_is_corrected_for_the_length_of_the_history() {
        let o = Options::default();
        assert_eq!(o.level(20), 0.001);
        assert_eq!(o.level(50), 0.001);
        assert!((o.level(10_000) - 0.001 / 200.0).abs() < 1e-12);
    }

    /// 20,000 points with a step: the relocation searches a window, not
    /// the segment (a 20,000² matrix would be 3.2 GB).
    #[test]
    fn a_very_long_series_costs_no_square_matrix() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(10);
        let mut x = noise(&mut rng, 15_000, 50.0, 0.5);
        x.extend(noise(&mut rng, 5_000, 52.0, 0.5));
        let idx: Vec<usize> = change_points(&x, &Options::default())
            .iter()
            .map(|c| c.index)
            .collect();
        assert_eq!(idx, vec![15_000]);
    }

    #[test]
    fn min_magnitude_drops_small_significant_changes() {
        let mut x = vec![100.0, 100.1, 99.9, 100.0, 100.05, 99.95];
        x.extend([100.5, 100.6, 100.4, 100.5, 100.55, 100.45]);
        assert_eq!(change_points(&x, &Options::default()).len(), 1);
        let strict = Options {
            min_magnitude: 0.01,
            ..Options::default()
        };
        assert_eq!(change_points(&x, &strict), vec![]);
    }

    #[test]
    fn the_t_test_matches_scipy() {
        // t = -2.1909 at 6 df: p = 0.07099 (scipy.stats.ttest_ind gives the same)
        let t = ttest(&[1.0, 2.0, 3.0, 4.0], &[3.0, 4.0, 5.0, 6.0]);
        assert!((t.p - 0.07099).abs() < 1e-4, "{t:?}");
        assert_eq!(ttest(&[1.0], &[2.0]).p, 1.0);
        assert_eq!(ttest(&[1.0, 1.0], &[1.0, 1.0]).p, 1.0);
        assert_eq!(ttest(&[1.0, 1.0], &[2.0, 2.0]).p, 0.0);
    }

    /// The O(len²) sums equal Q computed from its definition.
    #[test]
    fn best_cut_matches_the_definition() {
        let x = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0];
        let q = |a: &[f64], b: &[f64]| {
            let (n, m) = (a.len() as f64, b.len() as f64);
            let cross: f64 = a
                .iter()
                .flat_map(|p| b.iter().map(move |q| (p - q).abs()))
                .sum();
            let within = |v: &[f64]| -> f64 {
                let mut s = 0.0;
                for i in 0..v.len() {
                    for k in i + 1..v.len() {
                        s += (v[i] - v[k]).abs();
                    }
                }
                s
            };
            let mut out = 2.0 / (m + n) * cross;
            if n > 1.0 {
                out -= 2.0 * m / ((m + n) * (n - 1.0)) * within(a);
            }
            if m > 1.0 {
                out -= 2.0 * n / ((m + n) * (m - 1.0)) * within(b);
            }
            out
        };
        let mut want = (0, f64::MIN);
        for tau in 1..x.len() {
            for kappa in tau + 1..=x.len() {
                let v = q(&x[..tau], &x[tau..kappa]);
                if v > want.1 {
                    want = (tau, v);
                }
            }
        }
        let got = best_cut(&x, 0, x.len(), 1).unwrap();
        assert_eq!(got.0, want.0);
        assert!((got.1 - want.1).abs() < 1e-9);
    }
}
