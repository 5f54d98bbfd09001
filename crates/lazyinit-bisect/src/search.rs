//! The next commit to test, on the commit graph as `git bisect` walks it.
//!
//! Index 0 is the good end, the last index the bad end, every other index
//! a commit that is an ancestor of bad and not of good, parents before
//! children (git's `rev-list --topo-order --reverse bad ^good`). A verdict
//! is known for some indices. As `git bisect`: a good commit makes its
//! ancestors good, the first bad commit is an ancestor of the latest bad
//! one, the candidates are bad's ancestors that are no good commit's, and
//! the next test is the candidate whose ancestors among them come nearest
//! half of them. A culprit on a merged side branch is named as itself,
//! not as the merge. A skipped commit is never tested again; when skips
//! are all that is left beside the bad one the answer is the range, not a
//! guess.

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

/// The commits of a bisection and their parents among them (each parent's
/// index below its child's), with every commit's ancestors (itself
/// included) as a bit set.
#[derive(Debug, Clone)]
pub struct Graph {
    ancestors: Vec<Vec<u64>>,
}

fn has(set: &[u64], i: usize) -> bool {
    (set[i / 64] >> (i % 64)) & 1 == 1
}

impl Graph {
    /// From each commit's parents (indices below its own; others dropped).
    pub fn new(parents: Vec<Vec<usize>>) -> Graph {
        let words = parents.len().div_ceil(64).max(1);
        let mut ancestors: Vec<Vec<u64>> = Vec::with_capacity(parents.len());
        for (i, ps) in parents.iter().enumerate() {
            let mut set = vec![0u64; words];
            set[i / 64] |= 1 << (i % 64);
            for &p in ps.iter().filter(|p| **p < i) {
                for (w, a) in set.iter_mut().zip(&ancestors[p]) {
                    *w |= a;
                }
            }
            ancestors.push(set);
        }
        Graph { ancestors }
    }

    /// `n` commits in a line.
    pub fn linear(n: usize) -> Graph {
        Graph::new(
            (0..n)
                .map(|i| i.checked_sub(1).into_iter().collect())
                .collect(),
        )
    }

    pub fn len(&self) -> usize {
        self.ancestors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ancestors.is_empty()
    }

    /// Whether `a` is an ancestor of `b` (or `b` itself).
    pub fn is_ancestor(&self, a: usize, b: usize) -> bool {
        has(&self.ancestors[b], a)
    }
}

/// The latest bad commit (the bad end until a step is bad: each bad step
/// is an ancestor of the one before, so the lowest index) and the
/// candidates for the first bad commit: its ancestors that are no good
/// commit's (the good end's included), as a bit set.
fn candidates(g: &Graph, verdicts: &BTreeMap<usize, Verdict>) -> (usize, Vec<u64>) {
    let n = g.len();
    let bad = verdicts
        .iter()
        .filter(|(_, v)| **v == Verdict::Bad)
        .map(|(i, _)| *i)
        .min()
        .unwrap_or(n - 1);
    let mut set = g.ancestors[bad].clone();
    let goods = verdicts
        .iter()
        .filter(|(_, v)| **v == Verdict::Good)
        .map(|(i, _)| *i)
        .chain([0]);
    for good in goods {
        for (w, a) in set.iter_mut().zip(&g.ancestors[good]) {
            *w &= !a;
        }
    }
    (bad, set)
}

/// What to do next on `g` (at least 2 commits).
pub fn next(g: &Graph, verdicts: &BTreeMap<usize, Verdict>) -> Next {
    assert!(g.len() >= 2, "a bisection needs a good and a bad end");
    let (bad, set) = candidates(g, verdicts);
    let total: u32 = set.iter().map(|w| w.count_ones()).sum();
    if total <= 1 {
        return Next::Found(bad);
    }
    // The untested candidate whose ancestors among the candidates (its
    // weight w) best halve them: the largest min(w, total - w), the
    // oldest on a tie (git's rule; on a line, the middle).
    let pick = (0..g.len())
        .filter(|&i| has(&set, i) && i != bad && !verdicts.contains_key(&i))
        .max_by_key(|&i| {
            let w: u32 = g.ancestors[i]
                .iter()
                .zip(&set)
                .map(|(a, c)| (a & c).count_ones())
                .sum();
            (w.min(total - w), std::cmp::Reverse(i))
        });
    match pick {
        Some(i) => Next::Test(i),
        None => Next::Range((0..g.len()).filter(|&i| has(&set, i)).collect()),
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
        let g = Graph::linear(n);
        run_on(&g, |i| i >= culprit, skipped)
    }

    fn run_on(g: &Graph, bad: impl Fn(usize) -> bool, skipped: &[usize]) -> (Next, Vec<usize>) {
        let n = g.len();
        let mut v = BTreeMap::new();
        let mut tested = Vec::new();
        loop {
            match next(g, &v) {
                Next::Test(i) => {
                    tested.push(i);
                    let verdict = if skipped.contains(&i) {
                        Verdict::Skip
                    } else if bad(i) {
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
        assert_eq!(next(&Graph::linear(10), &v), Next::Found(6));
        assert_eq!(next(&Graph::linear(2), &BTreeMap::new()), Next::Found(1));
    }

    /// good 0 - 1 - 2 - 3 ------------- 8 (merge) - 9 (bad)
    ///               \ 4 - 5 - 6 - 7 /
    /// (the side branch forks at 2 and is merged by 8).
    fn merged() -> Graph {
        Graph::new(vec![
            vec![],
            vec![0],
            vec![1],
            vec![2],
            vec![2],
            vec![4],
            vec![5],
            vec![6],
            vec![3, 7],
            vec![8],
        ])
    }

    #[test]
    fn a_culprit_on_a_merged_branch_is_named_not_the_merge() {
        let g = merged();
        for culprit in 1..10 {
            let bad = |i: usize| g.is_ancestor(culprit, i);
            let (answer, tested) = run_on(&g, bad, &[]);
            assert_eq!(answer, Next::Found(culprit), "culprit {culprit}");
            assert!(tested.len() <= 4, "culprit {culprit}: {tested:?}");
        }
        // The side branch's commit 6 is the culprit: 3 (mainline, before
        // the merge) is good though it comes after the fork.
        let bad = |i: usize| g.is_ancestor(6, i);
        assert!(!bad(3) && bad(8) && !bad(5));
    }

    #[test]
    fn a_skip_on_a_merged_branch_leaves_the_range() {
        let g = merged();
        let (answer, _) = run_on(&g, |i| g.is_ancestor(6, i), &[5]);
        assert_eq!(answer, Next::Range(vec![5, 6]));
    }
}
