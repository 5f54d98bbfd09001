//! The project's statistics, in one place: descriptive statistics (mean,
//! sample variance, median, the robust spread), Student t quantiles and
//! two-sided p-values, Welch's t-test and ratio intervals. Every crate that
//! judges numbers (the report's tables and `compare`, the estimator, the
//! history's gate and change points, the bisect's ends) takes them from
//! here.
//!
//! Numerics come from statrs: the mean, the sample variance and standard
//! deviation, the median, min and max, Student t quantiles and CDF. This
//! file only combines them (the median absolute deviation, Welch's
//! statistic and degrees of freedom, the ratio's interval, which statrs
//! does not have) and says what an empty or one-value input gives. The
//! summaries return `None` where a statistic is undefined rather than NaN.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};
use statrs::statistics::{Data, Median, OrderStatistics, Statistics};

/// Confidence level of every interval the project reports.
pub const CONFIDENCE: f64 = 0.95;

/// The arithmetic mean (statrs); NaN for no values.
pub fn mean(v: &[f64]) -> f64 {
    Statistics::mean(v)
}

/// Sample variance (n - 1, statrs); 0 for fewer than two values.
pub fn variance(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    Statistics::variance(v)
}

/// The mean and the sample standard deviation (0 for fewer than two
/// values).
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    (mean(v), variance(v).sqrt())
}

/// The median (statrs: the mean of the middle two for an even count),
/// reordering `v` in place; 0 for no values, NaN when one is NaN.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    if v.iter().any(|x| x.is_nan()) {
        return f64::NAN;
    }
    OrderStatistics::median(&mut Data::new(v))
}

/// The median and 1.4826 x the median absolute deviation (the standard
/// deviation of normal noise), neither moved by a few outliers.
pub fn robust(x: &[f64]) -> (f64, f64) {
    let mut v = x.to_vec();
    let m = median(&mut v);
    let mut dev: Vec<f64> = x.iter().map(|a| (a - m).abs()).collect();
    (m, 1.4826 * median(&mut dev))
}

/// Two-sided p-value of a Student t statistic at `df` degrees of freedom;
/// 1 where the distribution is undefined (df not positive, or NaN).
pub fn t_p(t: f64, df: f64) -> f64 {
    match StudentsT::new(0.0, 1.0, df) {
        Ok(d) => (2.0 * (1.0 - d.cdf(t.abs()))).clamp(0.0, 1.0),
        Err(_) => 1.0,
    }
}

/// Summary of one cell's repetitions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    /// Sample standard deviation (n - 1); `None` with one value.
    pub stddev: Option<f64>,
    pub min: f64,
    pub max: f64,
    /// stddev / mean; `None` with one value or a zero mean.
    pub cv: Option<f64>,
    /// 95% interval for the mean, Student t with n - 1 degrees of freedom.
    pub ci95: Option<Interval>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
}

/// Two-sided Student t quantile for [`CONFIDENCE`] at `df` degrees of freedom.
pub fn t_quantile(df: f64) -> Option<f64> {
    let t = StudentsT::new(0.0, 1.0, df).ok()?;
    Some(t.inverse_cdf(1.0 - (1.0 - CONFIDENCE) / 2.0))
}

/// Summarises finite values; `None` when there are none.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    let n = v.len();
    let mean = v.iter().mean();
    let median = Data::new(v.clone()).median();
    let stddev = (n > 1).then(|| v.iter().std_dev());
    let cv = stddev.filter(|_| mean != 0.0).map(|s| s / mean.abs());
    let ci95 = stddev.and_then(|s| {
        let half = t_quantile((n - 1) as f64)? * s / (n as f64).sqrt();
        Some(Interval {
            lo: mean - half,
            hi: mean + half,
        })
    });
    Some(Summary {
        n,
        mean,
        median,
        stddev,
        min: Statistics::min(v.iter()),
        max: Statistics::max(v.iter()),
        cv,
        ci95,
    })
}

/// Welch's unequal-variance t-test of `b` against `a`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Welch {
    /// Positive when `b`'s mean is larger.
    pub t: f64,
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
}

/// Needs at least two values on each side. When both sides have zero
/// variance the test is degenerate: equal means give p = 1, different
/// means p = 0 (the difference is exact, not noise).
pub fn welch(a: &Summary, b: &Summary) -> Option<Welch> {
    welch_moments((a.mean, a.stddev?, a.n), (b.mean, b.stddev?, b.n))
}

/// [`welch`] from each side's (mean, sample sd, n).
pub fn welch_moments(a: (f64, f64, usize), b: (f64, f64, usize)) -> Option<Welch> {
    let ((ma, sa, na), (mb, sb, nb)) = (a, b);
    if na < 2 || nb < 2 {
        return None;
    }
    let va = sa.powi(2) / na as f64;
    let vb = sb.powi(2) / nb as f64;
    let diff = mb - ma;
    if va + vb == 0.0 {
        let (t, p) = if diff == 0.0 {
            (0.0, 1.0)
        } else {
            (diff.signum() * f64::INFINITY, 0.0)
        };
        return Some(Welch {
            t,
            df: (na + nb - 2) as f64,
            p,
        });
    }
    let t = diff / (va + vb).sqrt();
    let df = (va + vb).powi(2) / (va.powi(2) / (na - 1) as f64 + vb.powi(2) / (nb - 1) as f64);
    // Undefined where Student's t is (df not positive, or NaN).
    (df > 0.0).then(|| Welch {
        t,
        df,
        p: t_p(t, df),
    })
}

/// A ratio of two cells' means with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatioEstimate {
    pub value: f64,
    /// `None` when either side has a single value.
    pub ci95: Option<Interval>,
}

/// `num.mean / den.mean`, interval by the delta method on the log scale
/// with Welch-Satterthwaite degrees of freedom: the log of a ratio of
/// positive means is close to normal, and the interval stays positive.
pub fn ratio(num: &Summary, den: &Summary) -> Option<RatioEstimate> {
    if num.mean <= 0.0 || den.mean <= 0.0 {
        return None;
    }
    let value = num.mean / den.mean;
    let rel_var = |s: &Summary| Some(s.stddev?.powi(2) / (s.n as f64 * s.mean.powi(2)));
    let ci95 = (|| {
        let (ra, rb) = (rel_var(num)?, rel_var(den)?);
        let se = (ra + rb).sqrt();
        if se == 0.0 {
            return Some(Interval {
                lo: value,
                hi: value,
            });
        }
        let df =
            (ra + rb).powi(2) / (ra.powi(2) / (num.n - 1) as f64 + rb.powi(2) / (den.n - 1) as f64);
        let half = t_quantile(df)? * se;
        Some(Interval {
            lo: value * (-half).exp(),
            hi: value * half.exp(),
        })
    })();
    Some(RatioEstimate { value, ci95 })
}

#[cfg(test)]
mod tests {
    use super::*;

    // R's `sleep` data set (Student 1908): extra sleep under two drugs.
    const G1: [f64; 10] = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0];
    const G2: [f64; 10] = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4];

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn summary_matches_r() {
        // R: mean 0.75, median 0.35, sd 1.789010,
        // t.test(x)$conf.int = -0.5297804 2.0297804
        let s = summarize(&G1).unwrap();
        assert_eq!(s.n, 10);
        assert!(close(s.mean, 0.75, 1e-12));
        assert!(close(s.median, 0.35, 1e-12));
        assert!(close(s.stddev.unwrap(), 1.789010, 1e-6));
        assert_eq!((s.min, s.max), (-1.6, 3.7));
        let ci = s.ci95.unwrap();
        assert!(close(ci.lo, -0.5297804, 1e-6), "{ci:?}");
        assert!(close(ci.hi, 2.0297804, 1e-6), "{ci:?}");
    }

    #[test]
    fn t_quantiles_match_tables() {
        assert!(close(t_quantile(2.0).unwrap(), 4.302653, 1e-6));
        assert!(close(t_quantile(9.0).unwrap(), 2.262157, 1e-6));
        assert!(close(t_quantile(1e4).unwrap(), 1.960201, 1e-6));
    }

    #[test]
    fn welch_matches_r_sleep_example() {
        // R: t.test(extra ~ group, data = sleep)
        //    t = -1.8608, df = 17.776, p-value = 0.07939
        let (a, b) = (summarize(&G2).unwrap(), summarize(&G1).unwrap());
        let w = welch(&a, &b).unwrap();
        assert!(close(w.t, -1.8608, 1e-4), "{w:?}");
        assert!(close(w.df, 17.776, 1e-3), "{w:?}");
        assert!(close(w.p, 0.07939, 1e-5), "{w:?}");
        // Symmetric in the sign of t only.
        let r = welch(&b, &a).unwrap();
        assert!(close(r.t, -w.t, 1e-12) && close(r.p, w.p, 1e-12));
    }

    #[test]
    fn single_values_have_no_spread() {
        let s = summarize(&[60.6]).unwrap();
        assert_eq!((s.stddev, s.cv, s.ci95), (None, None, None));
        assert_eq!(s.median, 60.6);
        assert!(welch(&s, &summarize(&G1).unwrap()).is_none());
        assert!(summarize(&[]).is_none());
        assert!(summarize(&[f64::NAN]).is_none());
    }

    #[test]
    fn primitives_by_hand() {
        assert_eq!(mean(&[1.0, 2.0, 6.0]), 3.0);
        assert_eq!(variance(&[1.0, 2.0, 6.0]), 7.0);
        assert_eq!(variance(&[5.0]), 0.0);
        assert_eq!(mean_sd(&[2.0, 4.0]), (3.0, 2f64.sqrt()));
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
        // Not a middle value that happens to sit beside a NaN.
        assert!(median(&mut [1.0, f64::NAN, 2.0]).is_nan());
        // MAD of 1, 2, 3, 4, 100: median 3, deviations 2 1 0 1 97 -> 1.
        assert_eq!(robust(&[1.0, 2.0, 3.0, 4.0, 100.0]), (3.0, 1.4826));
        // R: 2 * pt(-2.262157, 9) = 0.05
        assert!(close(t_p(2.262157, 9.0), 0.05, 1e-6));
        assert!(close(t_p(-2.262157, 9.0), 0.05, 1e-6));
        assert_eq!(t_p(3.0, 0.0), 1.0);
        assert_eq!(t_p(3.0, f64::NAN), 1.0);
    }

    #[test]
    fn welch_degenerate_variance() {
        let a = summarize(&[100.0, 100.0]).unwrap();
        let b = summarize(&[110.0, 110.0]).unwrap();
        assert_eq!(welch(&a, &a).unwrap().p, 1.0);
        assert_eq!(welch(&a, &b).unwrap().p, 0.0);
        assert!(welch(&a, &b).unwrap().t > 0.0);
    }

    #[test]
    fn ratio_interval_by_hand() {
        // num: mean 110, sd 2 (n=3); den: mean 40, sd 1 (n=3).
        // rel vars: 4/(3*12100)=1.10193e-4, 1/(3*1600)=2.08333e-4
        // se = sqrt(3.18526e-4) = 0.0178473
        // df = 3.18526e-4^2 / ((1.10193e-4^2 + 2.08333e-4^2)/2) = 3.65320
        // t(0.975, 3.65320) = 2.883546 (Simpson integration of the t density
        // to 0.975, checked against qt(0.975, 2) = 4.302653 the same way)
        // CI = 2.75 * exp(-/+ t * se) = 2.612055 .. 2.895230
        let num = summarize(&[108.0, 110.0, 112.0]).unwrap();
        let den = summarize(&[39.0, 40.0, 41.0]).unwrap();
        let r = ratio(&num, &den).unwrap();
        assert!(close(r.value, 2.75, 1e-12));
        let ci = r.ci95.unwrap();
        assert!(close(ci.lo, 2.612055, 1e-5), "{ci:?}");
        assert!(close(ci.hi, 2.895230, 1e-5), "{ci:?}");
        assert!(ratio(&summarize(&[1.0]).unwrap(), &den)
            .unwrap()
            .ci95
            .is_none());
    }
}
