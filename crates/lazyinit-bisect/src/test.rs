//! The two levels, and the sequential test that places a step on one.
//!
//! Both ends are measured first, with repetitions. They must differ (a
//! Welch t-test at the error rate, or a sleep L that is unanimous at each
//! end and not the same): otherwise there is nothing to bisect. A step's
//! samples then feed Wald's sequential probability ratio test between
//! "this is the good level" and "this is the bad level" (normal, with the
//! ends' pooled noise): it stops at the first sample that makes one of them
//! `(1 - e) / e` times likelier than the other, so either wrong verdict has
//! probability about `e`. The sleep L counts as evidence too, when the ends
//! show it unanimously and differently: a step sample with the bad end's L
//! is as likely under "bad" as the bad end's own samples showed it, and
//! under "good" at most the rule-of-succession rate 1/(n + 2). A step that
//! reaches the sample cap undecided is "unknown" (Pinpoint's answer): the
//! caller skips it rather than guess.

use lazyinit_core::stats;

/// One measurement of a commit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// The metric (ms per group, or seconds of lazy init).
    pub value: f64,
    /// The sleep L the guest inferred, in ticks, when it did.
    pub sleep_ticks: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    pub n: usize,
    pub mean: f64,
    pub sd: f64,
    /// The sleep L every sample showed, if they all showed the same one.
    pub ticks: Option<u64>,
}

impl Level {
    pub fn of(samples: &[Sample]) -> Option<Level> {
        let n = samples.len();
        if n == 0 {
            return None;
        }
        let values: Vec<f64> = samples.iter().map(|s| s.value).collect();
        let (mean, sd) = stats::mean_sd(&values);
        let first = samples[0].sleep_ticks;
        let ticks = first.filter(|_| samples.iter().all(|s| s.sleep_ticks == first));
        Some(Level { n, mean, sd, ticks })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Ends {
    pub good: Level,
    pub bad: Level,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EndsError {
    #[error("each end needs at least 2 samples (good {good}, bad {bad})")]
    TooFew { good: usize, bad: usize },
    #[error("the ends do not differ: good {good:.2} ± {good_sd:.2} (L {good_l}), bad {bad:.2} ± {bad_sd:.2} (L {bad_l}); Welch p = {p:.3} ≥ {alpha}")]
    Same {
        good: f64,
        good_sd: f64,
        good_l: String,
        bad: f64,
        bad_sd: f64,
        bad_l: String,
        p: f64,
        alpha: f64,
    },
}

fn show_l(t: Option<u64>) -> String {
    t.map_or_else(|| "mixed".into(), |t| t.to_string())
}

/// Two-sided Welch t-test p-value (1.0 when it cannot be computed).
pub fn welch_p(a: &Level, b: &Level) -> f64 {
    stats::welch_moments((a.mean, a.sd, a.n), (b.mean, b.sd, b.n)).map_or(1.0, |w| w.p)
}

impl Ends {
    /// The ends' levels, refused when they do not differ at `alpha`.
    pub fn new(good: &[Sample], bad: &[Sample], alpha: f64) -> Result<Ends, EndsError> {
        let (Some(g), Some(b)) = (Level::of(good), Level::of(bad)) else {
            return Err(EndsError::TooFew {
                good: good.len(),
                bad: bad.len(),
            });
        };
        if g.n < 2 || b.n < 2 {
            return Err(EndsError::TooFew {
                good: g.n,
                bad: b.n,
            });
        }
        let p = welch_p(&g, &b);
        let l_differs = matches!((g.ticks, b.ticks), (Some(x), Some(y)) if x != y);
        if p >= alpha && !l_differs {
            return Err(EndsError::Same {
                good: g.mean,
                good_sd: g.sd,
                good_l: show_l(g.ticks),
                bad: b.mean,
                bad_sd: b.sd,
                bad_l: show_l(b.ticks),
                p,
                alpha,
            });
        }
        Ok(Ends { good: g, bad: b })
    }

    /// The noise both hypotheses share: the pooled sd, floored at 2% of the
    /// gap so that two quiet ends do not make one sample infinitely sure.
    pub fn sigma(&self) -> f64 {
        let (g, b) = (&self.good, &self.bad);
        let dof = (g.n + b.n).saturating_sub(2).max(1) as f64;
        let pooled =
            (((g.n as f64 - 1.0) * g.sd.powi(2) + (b.n as f64 - 1.0) * b.sd.powi(2)) / dof).sqrt();
        pooled.max(0.02 * (b.mean - g.mean).abs())
    }

    /// Whether the sleep L tells the ends apart.
    pub fn ticks(&self) -> Option<(u64, u64)> {
        match (self.good.ticks, self.bad.ticks) {
            (Some(g), Some(b)) if g != b => Some((g, b)),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Good,
    Bad,
    /// Not decided yet: measure again (or, at the cap, unknown).
    More,
    /// The cap was reached undecided.
    Unknown,
}

/// How far (in sigmas) a step's mean may lie from the end it is judged to
/// be: beyond, it is neither end (Pinpoint's "unknown").
pub const BAND: f64 = 4.0;

/// Wald's SPRT between the two ends, error rate `e` each way.
#[derive(Debug, Clone, PartialEq)]
pub struct Sprt {
    pub ends: Ends,
    pub error_rate: f64,
    pub max_samples: usize,
}

impl Sprt {
    /// ln(P(samples | bad) / P(samples | good)).
    pub fn llr(&self, samples: &[Sample]) -> f64 {
        let (mg, mb) = (self.ends.good.mean, self.ends.bad.mean);
        let s2 = self.ends.sigma().powi(2);
        let ticks = self.ends.ticks();
        samples
            .iter()
            .map(|x| {
                let time = ((x.value - mg).powi(2) - (x.value - mb).powi(2)) / (2.0 * s2);
                time + ticks.map_or(0.0, |(lg, lb)| self.tick_llr(x.sleep_ticks, lg, lb))
            })
            .sum()
    }

    fn tick_llr(&self, seen: Option<u64>, lg: u64, lb: u64) -> f64 {
        let (ng, nb) = (self.ends.good.n as f64, self.ends.bad.n as f64);
        // P(an end shows its own L) and P(it shows the other's), by the
        // rule of succession over what it showed (all its own).
        let own = |n: f64| (n + 1.0) / (n + 2.0);
        let other = |n: f64| 1.0 / (n + 2.0);
        match seen {
            Some(t) if t == lb => (own(nb) / other(ng)).ln(),
            Some(t) if t == lg => (other(nb) / own(ng)).ln(),
            _ => 0.0,
        }
    }

    /// Wald's thresholds: (lower: accept good, upper: accept bad).
    pub fn thresholds(&self) -> (f64, f64) {
        let e = self.error_rate;
        (((e) / (1.0 - e)).ln(), ((1.0 - e) / e).ln())
    }

    /// Whether the samples' mean lies within `BAND` sigmas of `level`:
    /// a step at a third level is closer to one end without being it.
    fn near(&self, samples: &[Sample], level: f64) -> bool {
        let values: Vec<f64> = samples.iter().map(|s| s.value).collect();
        let mean = if values.is_empty() {
            0.0
        } else {
            stats::mean(&values)
        };
        (mean - level).abs() <= BAND * self.ends.sigma()
    }

    pub fn decide(&self, samples: &[Sample]) -> Decision {
        let llr = self.llr(samples);
        let (lo, hi) = self.thresholds();
        if llr >= hi && self.near(samples, self.ends.bad.mean) {
            Decision::Bad
        } else if llr <= lo && self.near(samples, self.ends.good.mean) {
            Decision::Good
        } else if samples.len() >= self.max_samples {
            Decision::Unknown
        } else {
            Decision::More
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(value: f64, l: u64) -> Sample {
        Sample {
            value,
            sleep_ticks: Some(l),
        }
    }

    /// The arm64 HZ=100 ends: fix ~40 ms/group at L=3, nofix ~110 at L=10.
    fn arm64_ends() -> Ends {
        let good = [s(39.0, 3), s(41.0, 3), s(40.5, 3)];
        let bad = [s(108.0, 10), s(112.0, 10), s(110.0, 10)];
        Ends::new(&good, &bad, 0.01).unwrap()
    }

    fn sprt(ends: Ends) -> Sprt {
        Sprt {
            ends,
            error_rate: 0.01,
            max_samples: 6,
        }
    }

    #[test]
    fn one_clear_sample_decides_each_way() {
        let t = sprt(arm64_ends());
        assert_eq!(t.decide(&[s(42.0, 3)]), Decision::Good);
        assert_eq!(t.decide(&[s(107.0, 10)]), Decision::Bad);
    }

    #[test]
    fn a_sample_halfway_asks_for_more_then_gives_up_at_the_cap() {
        let t = sprt(arm64_ends());
        let mid = Sample {
            value: (t.ends.good.mean + t.ends.bad.mean) / 2.0,
            sleep_ticks: None,
        };
        assert_eq!(t.decide(&[mid]), Decision::More);
        assert_eq!(t.decide(&[mid; 6]), Decision::Unknown);
        // Nearer the bad end, yet far from it: a third level, not "bad".
        let third = Sample {
            value: 80.0,
            sleep_ticks: None,
        };
        assert!(t.llr(&[third]) > t.thresholds().1);
        assert_eq!(t.decide(&[third]), Decision::More);
        assert_eq!(t.decide(&[third; 6]), Decision::Unknown);
    }

    #[test]
    fn the_sleep_l_decides_when_times_are_close() {
        // Ends 2 ms apart with 3 ms noise: times alone need many samples,
        // L=3 against L=10 settles it in a few.
        let good = [s(50.0, 3), s(53.0, 3), s(47.0, 3), s(50.0, 3), s(51.0, 3)];
        let bad = [
            s(52.0, 10),
            s(55.0, 10),
            s(49.0, 10),
            s(52.0, 10),
            s(53.0, 10),
        ];
        let t = sprt(Ends::new(&good, &bad, 0.01).unwrap());
        assert!(t.ends.ticks().is_some());
        let n = (1..=6)
            .find(|k| t.decide(&vec![s(52.0, 10); *k]) == Decision::Bad)
            .unwrap();
        assert!(n <= 3, "{n} samples");
        let untimed = Sprt {
            ends: Ends {
                good: Level {
                    ticks: None,
                    ..t.ends.good.clone()
                },
                bad: Level {
                    ticks: None,
                    ..t.ends.bad.clone()
                },
            },
            ..t.clone()
        };
        assert_eq!(untimed.decide(&[s(52.0, 10); 3]), Decision::More);
    }

    #[test]
    fn ends_that_do_not_differ_are_refused_with_both_figures() {
        let a = [s(40.0, 3), s(41.0, 3), s(39.0, 3)];
        let b = [s(40.5, 3), s(39.5, 3), s(41.5, 3)];
        let e = Ends::new(&a, &b, 0.01).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("good 40.00") && msg.contains("bad 40.50"),
            "{msg}"
        );
        assert!(matches!(
            Ends::new(&a[..1], &b, 0.01),
            Err(EndsError::TooFew { .. })
        ));
    }

    #[test]
    fn the_stated_error_rate_holds_on_noisy_synthetic_steps() {
        // Ends 10 apart with sd 5 (d' = 2): a seeded LCG draws normal
        // samples at each level; wrong verdicts must stay near e = 0.05.
        let mut seed = 7u64;
        let mut uniform = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let mut normal = |mu: f64, sd: f64| {
            let (u1, u2) = (uniform(), uniform());
            mu + sd * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        };
        let ends = Ends {
            good: Level {
                n: 30,
                mean: 40.0,
                sd: 5.0,
                ticks: None,
            },
            bad: Level {
                n: 30,
                mean: 50.0,
                sd: 5.0,
                ticks: None,
            },
        };
        let t = Sprt {
            ends,
            error_rate: 0.05,
            max_samples: 40,
        };
        let (mut wrong, trials) = (0, 2000);
        for i in 0..trials {
            let truth_bad = i % 2 == 1;
            let mu = if truth_bad { 50.0 } else { 40.0 };
            let mut xs = Vec::new();
            let d = loop {
                xs.push(Sample {
                    value: normal(mu, 5.0),
                    sleep_ticks: None,
                });
                match t.decide(&xs) {
                    Decision::More => continue,
                    d => break d,
                }
            };
            if (d == Decision::Bad) != truth_bad {
                wrong += 1;
            }
        }
        let rate = wrong as f64 / trials as f64;
        assert!(rate < 0.05, "wrong verdicts {rate}");
        assert!(wrong > 0, "a test this noisy must err sometimes");
    }
}
