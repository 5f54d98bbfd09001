//! The next commit to test on a linear history.
//!
//! `commits[0]` is the good end, `commits[n-1]` the bad end (git's
//! `rev-list --first-parent --reverse good^..bad`). A verdict is known for
//! some indices; the first bad commit lies after the last good commit
//! before the first bad one. As `git bisect`, a skipped commit is never
//! tested again; when skips are all that is left between the bounds the
//! answer is the range, not a guess.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Good,
    Bad,
    /// Could not be measured (does not build, does not boot, undecided).
    Skip,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Good => "good",
            Verdict::Bad => "bad",
            Verdict::Skip => "skip",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Test this index.
    Test(usize),
    /// The first bad commit.
    Found(usize),
    /// The first bad commit is one of these (skips left no way to tell).
    Range(Vec<usize>),
}

/// The bounds: the last good index before the first bad one, and that
/// first bad index (the ends count as good and bad when not yet judged).
pub fn bounds(n: usize, verdicts: &BTreeMap<usize, Verdict>) -> (usize, usize) {
    let hi = verdicts
        .iter()
        .find(|(_, v)| **v == Verdict::Bad)
        .map_or(n - 1, |(i, _)| *i);
    let lo = verdicts
        .range(..hi)
        .filter(|(_, v)| **v == Verdict::Good)
        .map(|(i, _)| *i)
        .next_back()
        .unwrap_or(0);
    (lo, hi)
}

/// What to do next with `n >= 2` commits.
pub fn next(n: usize, verdicts: &BTreeMap<usize, Verdict>) -> Next {
    assert!(n >= 2, "a bisection needs a good and a bad end");
    let (lo, hi) = bounds(n, verdicts);
    if hi == lo + 1 {
        return Next::Found(hi);
    }
    // Untested commits strictly between the bounds, nearest the middle
    // first (git picks among skips' neighbours the same way: the split
    // that halves the range best).
    let mid2 = lo + hi; // twice the midpoint, to stay in integers
    let pick = (lo + 1..hi)
        .filter(|i| !verdicts.contains_key(i))
        .min_by_key(|i| (2 * i).abs_diff(mid2));
    match pick {
        Some(i) => Next::Test(i),
        None => Next::Range((lo + 1..=hi).collect()),
    }
}

/// Steps a bisection of `n` commits takes without skips: ceil(log2(n - 1)).
pub fn expected_steps(n: usize) -> u32 {
    let gaps = n.saturating_sub(1).max(1);
    usize::BITS - (gaps - 1).leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bisect a synthetic history whose first bad commit is `culprit`,
    /// with `skipped` indices unmeasurable; returns the answer and the
    /// indices tested.
    fn run(n: usize, culprit: usize, skipped: &[usize]) -> (Next, Vec<usize>) {
        let mut v = BTreeMap::new();
        let mut tested = Vec::new();
        loop {
            match next(n, &v) {
                Next::Test(i) => {
                    tested.push(i);
                    let verdict = if skipped.contains(&i) {
                        Verdict::Skip
                    } else if i >= culprit {
                        Verdict::Bad
                    } else {
                        Verdict::Good
                    };
                    v.insert(i, verdict);
                    assert!(tested.len() <= n, "no progress");
                }
                done => return (done, tested),
            }
        }
    }

    #[test]
    fn finds_every_culprit_in_log2_steps() {
        for n in [2usize, 3, 5, 16, 17, 24, 64, 65] {
            for culprit in 1..n {
                let (answer, tested) = run(n, culprit, &[]);
                assert_eq!(answer, Next::Found(culprit), "n={n} culprit={culprit}");
                assert!(
                    tested.len() as u32 <= expected_steps(n),
                    "n={n} culprit={culprit}: {} steps",
                    tested.len()
                );
            }
        }
        assert_eq!(expected_steps(17), 4);
        assert_eq!(expected_steps(2), 0);
    }

    #[test]
    fn a_skip_is_stepped_around_and_never_retested() {
        // 16 commits, the culprit at 11, the midpoint 7 does not build.
        let (answer, tested) = run(16, 11, &[7]);
        assert_eq!(answer, Next::Found(11));
        assert_eq!(tested.iter().filter(|i| **i == 7).count(), 1);
        assert_eq!(tested[0], 7);
        assert_ne!(tested[1], 7);
    }

    #[test]
    fn skips_next_to_the_culprit_leave_the_honest_range() {
        // The culprit's parent cannot be told: the answer is both.
        let (answer, _) = run(16, 9, &[8]);
        assert_eq!(answer, Next::Range(vec![8, 9]));
        // The culprit itself skipped: it and the next one.
        let (answer, _) = run(16, 9, &[9]);
        assert_eq!(answer, Next::Range(vec![9, 10]));
    }

    #[test]
    fn ends_judged_otherwise_move_the_bounds() {
        let mut v = BTreeMap::new();
        v.insert(0, Verdict::Good);
        v.insert(5, Verdict::Good);
        v.insert(6, Verdict::Bad);
        v.insert(9, Verdict::Bad);
        assert_eq!(bounds(10, &v), (5, 6));
        assert_eq!(next(10, &v), Next::Found(6));
        assert_eq!(next(2, &BTreeMap::new()), Next::Found(1));
    }
}
