//! Early-stop estimates of a lazy-init run (docs/design.md §2): the
//! estimator, out of `lazyinit-core` (the shared vocabulary) into its own
//! crate; the guest protocol, the orchestrator and the replay use it.
//!
//! While a zeroing takes less than one tick, each group's cycle is L + 1
//! ticks, and L is fixed once near the start; the odd cycle gets an extra
//! tick when a wakeup or a zeroing runs late. So once the recent cycles
//! agree, the first n groups predict the rest: the run so far is measured,
//! the G - n groups left are taken at the locked cycle, and the thread
//! exits one cycle (less a zeroing) after its last group.
//!
//! [`check`] is pure and works on any prefix of a run's per-group trace
//! times: the guest protocol calls it on the trace so far, `replay` on a
//! finished run's `groups.csv` cut to n groups, both on the schedule of
//! [`next_check`], so a replay stops where a live run would have.
//!
//! The lock. Cycles are counted in whole ticks (rounded); m is the median
//! of the last [`MIN_WINDOW`] of them. A cycle two ticks or more short of
//! m means groups ran back to back (the sleep was not set yet); one more
//! than max(2, m/2) ticks long is a stall. The window is the run of cycles
//! since the last such one; the lock holds when it spans at least the
//! recent half of the trace (and [`MIN_WINDOW`] cycles), and its two
//! halves agree: the same median, and means within two standard errors.
//!
//! The cycle. Tick-locked, it is m ticks plus the x extra ticks the window
//! had over w cycles (each cycle rounded to whole ticks), counted from its
//! first on-time group to its last (an event within a quarter tick of the
//! others' phase on the tick grid): a late wakeup's long cycle and the
//! short one after it cancel, and one at an end is not multiplied by the
//! G - n groups to come. The prediction runs from that last on-time group.
//!
//! The interval. Extra ticks come at a rate with a Jeffreys posterior, so
//! those still to come are negative binomial: the spread of the future and
//! the error of the rate in one, never fewer than none. Sub-tick jitter
//! does not add up from cycle to cycle, only at the ends, and is added
//! once. Cycles that are not tick-locked (L = 0: groups back to back) get
//! a Student t interval for the sum of the cycles to come.

use serde::Serialize;
use statrs::distribution::{DiscreteCDF, NegativeBinomial};

use lazyinit_core::cell::Hz;
use lazyinit_core::stats::{mean, variance};

pub use spread::Load;

/// Groups an early stop traces at most while the zeroings straddle a
/// tick or the extra ticks come in long runs ([`NotLocked::Straddle`],
/// [`NotLocked::Regimes`]): past it, it stops with the interval widened
/// for what it could not see, and says so ([`Estimate::caveat`]).
pub const UNCERTAIN_CAP: u64 = 1000;

/// A window's cycles straddle a tick when a [`spread::FLOOR_SHIFT_S`]
/// shift would give or take a tick to more than this share of them.
const STRADDLE_SHARE: f64 = 0.2;

/// Independent looks at the extra-tick rate (window / block length) the
/// stop wants before it trusts the rate, below [`UNCERTAIN_CAP`].
const MIN_LOOKS: f64 = 8.0;

/// Cycles the lock needs in the clean recent part of the trace, at least.
pub const MIN_WINDOW: u64 = 12;

/// The fewest groups an estimate can start from: the recent half of the
/// cycles must hold [`MIN_WINDOW`] of them.
pub const MIN_GROUPS: u64 = 2 * MIN_WINDOW + 1;

/// Coverage of the prediction interval.
pub const CONFIDENCE: f64 = lazyinit_core::stats::CONFIDENCE;

/// How far apart, in standard errors, the halves of the window may be. A
/// refusal only costs more tracing, so the test need not be loose.
const DRIFT_Z: f64 = 2.0;

/// A run's per-group trace so far.
#[derive(Debug, Clone, Copy)]
pub struct Trace<'a> {
    pub hz: Hz,
    /// Groups the run zeroes in all (G): those mkfs left not zeroed.
    pub to_init: u64,
    /// Mount done to the first group's event, seconds (the random start
    /// delay and the bitmap prefetch: measured, never predicted).
    pub first_group_s: f64,
    /// Event times of the groups traced so far, trace order, seconds.
    pub t_s: &'a [f64],
    /// Each group's zeroing time, seconds, where traced (may be shorter
    /// than `t_s`, or empty).
    pub zero_s: &'a [Option<f64>],
    /// What the rest of the matrix will do to the host meanwhile.
    pub load: Load,
}

/// A prediction of `lazyinit_s` from the first `groups_traced` groups.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub groups_traced: u64,
    pub to_init: u64,
    /// Measured: mount done to the first group.
    pub first_group_s: f64,
    /// Predicted first to last group: measured to the last on-time group,
    /// then the locked cycle for each group after it.
    pub groups_span_s: f64,
    /// Cycles the locked cycle was measured over: the clean recent part,
    /// from its first on-time group to its last.
    pub window: u64,
    /// The locked cycle in whole ticks (median of the latest cycles): L + 1.
    pub ticks: u64,
    /// The locked cycle, seconds: `ticks` plus the extra ticks the window
    /// saw per cycle (its mean cycle when the cycle is not tick-locked).
    pub cycle_s: f64,
    /// Predicted last group to the thread's exit, seconds.
    pub tail_s: f64,
    /// Predicted mount to the thread's exit, seconds.
    pub lazyinit_s: f64,
    /// Cycles still to come after the last counted group (the exit's
    /// included): what the interval's per-cycle allowances are times.
    pub future: u64,
    /// [`CONFIDENCE`] prediction interval of `lazyinit_s`.
    pub lo_s: f64,
    pub hi_s: f64,
    /// Why the interval is wider than independent cycles would make it.
    pub spread: Spread,
}

/// What widened the interval past independent cycles (docs/estimates.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Cycles one independent look at the extra-tick rate is worth
    /// ([`spread::block_length`]; 1: independent).
    pub block_cycles: f64,
    /// The shift of the zeroings' ends allowed for, ms.
    pub shift_ms: f64,
    /// How far the ticks may run from nominal, ms a cycle, both ways
    /// ([`spread::tick_drift`]).
    pub drift_ms: f64,
    /// Extra ticks a cycle the guests still starting may add
    /// ([`spread::load_ticks`]), above only.
    pub load_ticks: f64,
    /// Extra ticks a cycle the guests in lazy-init may add or take when
    /// they end ([`spread::running_ticks`]), both ways.
    pub running_ticks: f64,
    /// Shares of cycles that shift would give (first) or take a tick.
    pub near_tick: (f64, f64),
    pub load: Load,
    /// The stop came at [`UNCERTAIN_CAP`] still straddling a tick or
    /// seeing runs of extra ticks.
    pub capped: bool,
}

impl Spread {
    fn none(load: Load) -> Spread {
        Spread {
            block_cycles: 1.0,
            shift_ms: 0.0,
            drift_ms: 0.0,
            load_ticks: 0.0,
            running_ticks: 0.0,
            near_tick: (0.0, 0.0),
            load,
            capped: false,
        }
    }
}

impl Estimate {
    /// The sleep L the locked cycle implies.
    pub fn sleep_ticks(&self) -> u64 {
        self.ticks.saturating_sub(1)
    }
    /// Predicted first-to-last group time per group, ms (`ms_per_group`).
    pub fn ms_per_group(&self) -> Option<f64> {
        (self.to_init > 1).then(|| self.groups_span_s / (self.to_init - 1) as f64 * 1000.0)
    }
    /// Predicted first group to the thread's exit: the part of
    /// `lazyinit_s` that the random start delay does not move.
    pub fn from_first_group_s(&self) -> f64 {
        self.lazyinit_s - self.first_group_s
    }
    /// Why the interval was widened, in one line (`estimate_caveat` in
    /// the row); None when the cycles looked independent and clear of a
    /// tick, on a host no other guest will change.
    pub fn caveat(&self) -> Option<String> {
        let sp = &self.spread;
        let mut why = Vec::new();
        if sp.capped {
            why.push(format!(
                "stopped at the {UNCERTAIN_CAP}-group cap still uncertain"
            ));
        }
        if sp.near_tick.0 + sp.near_tick.1 > 0.0 {
            why.push(format!(
                "{:.0}% of cycles within {:.2} ms of a tick",
                100.0 * (sp.near_tick.0 + sp.near_tick.1),
                sp.shift_ms
            ));
        }
        if sp.block_cycles >= 2.0 {
            why.push(format!(
                "extra ticks in runs of ~{:.0} cycles",
                sp.block_cycles
            ));
        }
        if sp.load.changing > 0 {
            why.push(format!(
                "{} other guest(s) still starting when it stopped",
                sp.load.changing
            ));
        }
        if sp.load.running > 0 {
            why.push(format!(
                "{} other guest(s) in lazy-init that may end first",
                sp.load.running
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// Why the trace so far does not allow an estimate yet.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum NotLocked {
    /// Fewer groups than [`MIN_GROUPS`].
    TooFew { traced: u64, need: u64 },
    /// Every group is traced: the run is measured, not estimated.
    Complete { traced: u64 },
    /// The clean recent run of cycles is too short: a cycle before it ran
    /// back to back or stalled.
    Unsettled {
        /// 1-based trace position of the group that ended the odd cycle.
        group: u64,
        cycle_ms: f64,
        ticks: u64,
        kind: Odd,
        clean: u64,
        need: u64,
    },
    /// The halves of the window have different median cycles.
    Changed { first_ticks: u64, second_ticks: u64 },
    /// The halves' mean cycles are further apart than their noise allows.
    Drift {
        first_ms: f64,
        second_ms: f64,
        allowed_ms: f64,
    },
    /// The zeroings end so close to a tick that a small shift would give
    /// or take a tick to many cycles: trace on, up to [`UNCERTAIN_CAP`].
    Straddle { near_pct: f64, shift_ms: f64 },
    /// Extra ticks come in runs too long for the window to have seen
    /// enough of them: trace on, up to [`UNCERTAIN_CAP`].
    Regimes { block_cycles: f64, window: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Odd {
    /// Two ticks or more short of the locked cycle: back to back.
    Short,
    /// Longer than the locked cycle by max(2, m/2) ticks.
    Stall,
}

impl std::fmt::Display for NotLocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotLocked::TooFew { traced, need } => {
                write!(f, "{traced} groups traced; an estimate needs {need}")
            }
            NotLocked::Complete { traced } => {
                write!(f, "all {traced} groups traced: measured, not estimated")
            }
            NotLocked::Unsettled {
                group,
                cycle_ms,
                ticks,
                kind,
                clean,
                need,
            } => {
                let what = match kind {
                    Odd::Short => "ran back to back (the sleep was not set yet)",
                    Odd::Stall => "stalled",
                };
                write!(
                    f,
                    "group {group}'s cycle ({cycle_ms:.1} ms, {ticks} ticks) {what}; the {clean} cycles since agree, the lock needs {need}"
                )
            }
            NotLocked::Changed {
                first_ticks,
                second_ticks,
            } => write!(
                f,
                "the recent cycles changed from {first_ticks} to {second_ticks} ticks"
            ),
            NotLocked::Drift {
                first_ms,
                second_ms,
                allowed_ms,
            } => write!(
                f,
                "the recent cycles drift: {first_ms:.3} ms then {second_ms:.3} ms (more than the {allowed_ms:.3} ms their noise allows)"
            ),
            NotLocked::Straddle { near_pct, shift_ms } => write!(
                f,
                "the zeroings straddle a tick: {near_pct:.0}% of cycles would gain or lose one if they ended {shift_ms:.2} ms later or earlier; tracing on (up to {UNCERTAIN_CAP} groups)"
            ),
            NotLocked::Regimes {
                block_cycles,
                window,
            } => write!(
                f,
                "extra ticks come in runs of ~{block_cycles:.0} cycles: {window} cycles are fewer than {MIN_LOOKS} runs; tracing on (up to {UNCERTAIN_CAP} groups)"
            ),
        }
    }
}

/// Where the next check goes after one at `n` groups did not lock: half
/// as many groups again (at least [`MIN_WINDOW`]), so that reading the
/// trace so far costs O(G) in all however long the lock takes.
pub fn next_check(n: u64) -> u64 {
    n.saturating_add((n / 2).max(MIN_WINDOW))
}

fn median_u64(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Two-sided Student t quantile for [`CONFIDENCE`] (1.96 where undefined).
fn t_quantile(df: f64) -> f64 {
    lazyinit_core::stats::t_quantile(df.max(1.0)).unwrap_or(1.96)
}

/// The spread of cycles, for the drift test and the interval.
struct Noise {
    /// Per-cycle variance of what adds up over cycles, s².
    per_cycle: f64,
    /// Variance that enters once, at the ends (sub-tick jitter), s².
    ends: f64,
}

/// The window's noise: whole ticks and sub-tick residuals when the cycle
/// is tick-locked (`m >= 1`), raw cycles otherwise.
fn noise(cycles: &[f64], tick: f64, m: u64) -> Noise {
    let w = cycles.len() as f64;
    if m == 0 {
        return Noise {
            per_cycle: variance(cycles),
            ends: 0.0,
        };
    }
    let ticks: Vec<f64> = cycles.iter().map(|c| (c / tick).round()).collect();
    let resid: Vec<f64> = cycles
        .iter()
        .zip(&ticks)
        .map(|(c, k)| c - k * tick)
        .collect();
    // No extra tick seen in w cycles does not mean none will come: at
    // least the variance of one at the rate (0 + 1/2) / (w + 1).
    let p0 = 0.5 / (w + 1.0);
    Noise {
        per_cycle: variance(&ticks).max(p0 * (1.0 - p0)) * tick * tick,
        ends: variance(&resid),
    }
}

/// How far below and above the prediction the [`CONFIDENCE`] interval of
/// `future` more cycles reaches, from a window of `w` cycles whose extra
/// ticks come in runs of `block` cycles.
///
/// Tick-locked, the window had `extra` = x ticks past m ticks a cycle.
/// Extra ticks come at a rate with a Jeffreys posterior; counted in
/// blocks of `block` cycles (one independent look each: w / block of them
/// with x / block extra ticks), the future ones are negative binomial,
/// NB(x / block + 1/2, w / (w + future)), times the block: the spread of
/// the future and the error of the rate in one, never below no extra
/// tick at all. The jitter at the two ends (a late wakeup of the last
/// traced group or of the exit) adds to both sides. Not tick-locked:
/// Student t on the raw cycles, for a sum of `future` more of them, the
/// variance times the block.
fn interval(
    w: f64,
    extra: Option<f64>,
    tick: f64,
    nz: &Noise,
    future: u64,
    block: f64,
) -> (f64, f64) {
    let f = future as f64;
    let Some(x) = extra else {
        let looks = (w / block).max(2.0);
        let v = block * nz.per_cycle;
        let half = t_quantile(looks - 1.0) * (f * v + f * f * v / w).sqrt();
        return (half, half);
    };
    // Fewer than none (a timer base a tick behind shortens a cycle):
    // centred on the count seen, spread as for none.
    let x = x.max(0.0);
    let expected = f * x / w;
    let ends = 1.96 * nz.ends.sqrt();
    let Ok(nb) = NegativeBinomial::new(x / block + 0.5, w / (w + f)) else {
        return (ends, ends);
    };
    let alpha = 1.0 - CONFIDENCE;
    let lo = block * quantile(&nb, alpha / 2.0) as f64;
    let hi = block * quantile(&nb, 1.0 - alpha / 2.0) as f64;
    (
        (expected - lo).max(0.0) * tick + ends,
        (hi - expected).max(0.0) * tick + ends,
    )
}

/// The smallest k with P(X <= k) >= p, by bisection (statrs's generic
/// search starts from a fixed bracket too narrow for thousands of ticks).
fn quantile(nb: &NegativeBinomial, p: f64) -> u64 {
    let mut hi = 1u64;
    while nb.cdf(hi) < p {
        hi *= 2;
        if hi > 1 << 40 {
            return hi;
        }
    }
    let mut lo = 0u64;
    if nb.cdf(0) >= p {
        return 0;
    }
    // cdf(lo) < p <= cdf(hi)
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if nb.cdf(mid) >= p {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// The first and the last on-time group of a run of tick-locked events:
/// each event's phase on the tick grid, against their circular mean, is
/// within a quarter tick (a late wakeup shifts one event, not the grid).
/// None when fewer than half of them are on time.
fn anchors(t_s: &[f64], tick: f64) -> Option<(usize, usize)> {
    use std::f64::consts::TAU;
    let phase = |t: f64| (t / tick).fract();
    let (sin, cos) = t_s.iter().fold((0.0, 0.0), |(s, c), &t| {
        let a = TAU * phase(t);
        (s + a.sin(), c + a.cos())
    });
    let reference = sin.atan2(cos) / TAU;
    let on_time = |t: f64| {
        let d = phase(t) - reference;
        (d - d.round()).abs() <= 0.25
    };
    let s = t_s.iter().position(|&t| on_time(t))?;
    let e = t_s.iter().rposition(|&t| on_time(t))?;
    ((e - s) * 2 >= t_s.len()).then_some((s, e))
}

// Long: the estimator in the order it reasons (cycle, lock, groups counted, tail, interval), each step with the comment the model needs.
/// Estimates the run from its trace so far, or says why not yet.
pub fn check(tr: &Trace) -> Result<Estimate, NotLocked> {
    let n = tr.t_s.len() as u64;
    if n >= tr.to_init {
        return Err(NotLocked::Complete { traced: n });
    }
    if n < MIN_GROUPS {
        return Err(NotLocked::TooFew {
            traced: n,
            need: MIN_GROUPS,
        });
    }
    let tick = tr.hz.tick_s();
    let cycles: Vec<f64> = tr.t_s.windows(2).map(|w| w[1] - w[0]).collect();
    let ticks_of = |c: f64| (c / tick).round().max(0.0) as u64;
    // The cycle the latest groups agree on: the median of the last
    // MIN_WINDOW cycles (whether it holds for longer is the lock's test).
    let recent = &cycles[cycles.len() - MIN_WINDOW as usize..];
    let m = median_u64(&mut recent.iter().map(|&c| ticks_of(c)).collect::<Vec<_>>());
    let short = |c: f64| c < (m as f64 - 1.5) * tick;
    // Saturating: a trace from a file may hold any time (1e300 s).
    let stall = |c: f64| c > m.saturating_add(2.max(m.div_ceil(2))) as f64 * tick;
    // Never the first cycle: it follows the start delay and the bitmap
    // prefetch, and may be a tick short (a timer base left behind while
    // the CPU idled) or long.
    let clean = cycles[1..]
        .iter()
        .rev()
        .take_while(|&&c| !short(c) && !stall(c))
        .count();
    let need = MIN_WINDOW.max((cycles.len() as u64).div_ceil(2));
    if (clean as u64) < need {
        // The odd cycle before the clean run (it never reaches back to
        // the first cycle while short of `need`).
        let i = cycles.len() - clean - 1;
        let c = cycles[i];
        return Err(NotLocked::Unsettled {
            // Cycle i ends at group i + 1 (0-based), the (i + 2)th traced.
            group: i as u64 + 2,
            cycle_ms: c * 1000.0,
            ticks: ticks_of(c),
            kind: if short(c) { Odd::Short } else { Odd::Stall },
            clean: clean as u64,
            need,
        });
    }
    let window = &cycles[cycles.len() - clean..];
    let (a, b) = window.split_at(window.len() / 2);
    let (ma, mb) = (
        median_u64(&mut a.iter().map(|&c| ticks_of(c)).collect::<Vec<_>>()),
        median_u64(&mut b.iter().map(|&c| ticks_of(c)).collect::<Vec<_>>()),
    );
    if ma != mb {
        return Err(NotLocked::Changed {
            first_ticks: ma,
            second_ticks: mb,
        });
    }
    let nz = noise(window, tick, m);
    let var_mean = |len: usize| {
        let l = len as f64;
        nz.per_cycle / l + nz.ends / (l * l)
    };
    let allowed = (DRIFT_Z * (var_mean(a.len()) + var_mean(b.len())).sqrt()).max(1e-6);
    let (mean_a, mean_b) = (mean(a), mean(b));
    if (mean_b - mean_a).abs() > allowed {
        return Err(NotLocked::Drift {
            first_ms: mean_a * 1000.0,
            second_ms: mean_b * 1000.0,
            allowed_ms: allowed * 1000.0,
        });
    }

    // The cycle, and the last group it is counted from.
    let first = tr.t_s.len() - 1 - window.len();
    let (cycle_s, extra, w, last) = match anchors(&tr.t_s[first..], tick) {
        Some((s, e)) if m >= 1 => {
            // Tick-locked: m ticks plus the extra ticks seen per cycle,
            // counted between two on-time groups, so that a late wakeup at
            // either end of the window is not multiplied by G - n.
            // Each cycle rounded on its own: a small error in the tick's
            // length does not add up, and a late wakeup's long cycle and
            // the short one after it cancel.
            let w = (e - s) as f64;
            let ticks: f64 = cycles[first + s..first + e]
                .iter()
                .map(|&c| (c / tick).round())
                .sum();
            let x = ticks - w * m as f64;
            ((m as f64 + x / w) * tick, Some(x), w, first + e)
        }
        _ => (mean(window), None, window.len() as f64, tr.t_s.len() - 1),
    };
    let zeroings: Vec<f64> = tr
        .zero_s
        .iter()
        .take(tr.t_s.len())
        .skip(first + 1)
        .flatten()
        .copied()
        .collect();
    let zero = if zeroings.is_empty() {
        0.0
    } else {
        let mut z = zeroings;
        z.sort_by(f64::total_cmp);
        z[z.len() / 2]
    };
    let sp = spread_of(tr, first, last, m)?;
    // The last group sets the next wake one cycle on; the thread finds no
    // group left there and exits, without zeroing.
    let tail_s = (cycle_s - zero).max(0.0);
    let after = tr.to_init - 1 - last as u64;
    let groups_span_s = tr.t_s[last] - tr.t_s[0] + after as f64 * cycle_s;
    let lazyinit_s = tr.first_group_s + groups_span_s + tail_s;
    // To come: the cycles after the last counted group and the tail.
    let future = after + 1;
    let (below, above) = interval(w, extra, tick, &nz, future, sp.block_cycles);
    // The rate may move by the share of cycles a shift of the zeroings
    // would give or take a tick, on top of its own error.
    let (gain, lose) = sp.near_tick;
    let f = future as f64;
    Ok(Estimate {
        groups_traced: n,
        to_init: tr.to_init,
        first_group_s: tr.first_group_s,
        groups_span_s,
        window: w as u64,
        ticks: m,
        cycle_s,
        tail_s,
        lazyinit_s,
        future,
        lo_s: lazyinit_s - below - f * ((lose + sp.running_ticks) * tick + sp.drift_ms / 1000.0),
        hi_s: lazyinit_s
            + above
            + f * ((gain + sp.load_ticks + sp.running_ticks) * tick + sp.drift_ms / 1000.0),
        spread: sp,
    })
}

/// The window's persistence and closeness to a tick (module `spread`),
/// from its first group (`first`, trace index) to the last counted one;
/// or the refusal when either leaves the rate unknown and the trace is
/// still under [`UNCERTAIN_CAP`].
fn spread_of(tr: &Trace, first: usize, last: usize, m: u64) -> Result<Spread, NotLocked> {
    let n = tr.t_s.len() as u64;
    if m == 0 || last <= first + 1 {
        return Ok(Spread::none(tr.load));
    }
    let tick = tr.hz.tick_s();
    let ticks: Vec<f64> = tr.t_s[first..=last]
        .windows(2)
        .map(|c| ((c[1] - c[0]) / tick).round())
        .collect();
    let block_cycles = spread::block_length(&ticks);
    let capped = n >= UNCERTAIN_CAP;
    let w = ticks.len() as f64;
    let zero = &tr.zero_s[first.min(tr.zero_s.len())..(last + 1).min(tr.zero_s.len())];
    // The cycle after group i is set by where group i's zeroing ended:
    // every group of the window but the last counted one.
    let t = &tr.t_s[first..last];
    let margins = spread::margins(t, &zero[..zero.len().min(t.len())], tick);
    let (near_tick, shift_s) = match &margins {
        Some(mg) => {
            let regime = spread::regime_shift(mg, (mg.len() / 8).max(MIN_WINDOW as usize));
            let shift = spread::allowed_shift(regime);
            let (floor_gain, floor_lose) = spread::near_tick(mg, spread::FLOOR_SHIFT_S);
            if !capped && floor_gain + floor_lose > STRADDLE_SHARE {
                return Err(NotLocked::Straddle {
                    near_pct: 100.0 * (floor_gain + floor_lose),
                    shift_ms: spread::FLOOR_SHIFT_S * 1000.0,
                });
            }
            (spread::near_tick(mg, shift), shift)
        }
        None => ((0.0, 0.0), 0.0),
    };
    if !capped && w / block_cycles < MIN_LOOKS {
        return Err(NotLocked::Regimes {
            block_cycles,
            window: w as u64,
        });
    }
    let uncertain = near_tick.0 + near_tick.1 > STRADDLE_SHARE || w / block_cycles < MIN_LOOKS;
    let cycles: Vec<f64> = tr.t_s[first..=last]
        .windows(2)
        .map(|c| c[1] - c[0])
        .collect();
    Ok(Spread {
        block_cycles,
        shift_ms: shift_s * 1000.0,
        drift_ms: spread::tick_drift(&cycles, tick) * 1000.0,
        load_ticks: spread::load_ticks(tr.load),
        running_ticks: spread::running_ticks(tr.load),
        near_tick,
        load: tr.load,
        capped: capped && uncertain,
    })
}

/// What an early stop after `after` groups would have done on a finished
/// run: the checks it made, and the estimate if one locked before the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replay {
    pub after: u64,
    /// Each refused check: groups traced and why.
    pub refused: Vec<(u64, NotLocked)>,
    pub estimate: Option<Estimate>,
}

/// Replays the early stop on a finished run's whole trace (`tr.t_s` holds
/// every group), checking at `after` groups, then on [`next_check`]'s
/// schedule, as the guest protocol does.
pub fn replay(tr: &Trace, after: u64) -> Replay {
    replay_with(tr, after, |_| tr.load)
}

/// [`replay`] with the matrix's load at each check: `load_at(n)` is what
/// the host's other guests were doing when group n was traced.
pub fn replay_with(tr: &Trace, after: u64, load_at: impl Fn(u64) -> Load) -> Replay {
    let mut out = Replay {
        after,
        refused: Vec::new(),
        estimate: None,
    };
    let total = tr.t_s.len() as u64;
    let mut n = after.max(MIN_GROUPS);
    while n < total.min(tr.to_init) {
        let cut = Trace {
            t_s: &tr.t_s[..n as usize],
            zero_s: &tr.zero_s[..(n as usize).min(tr.zero_s.len())],
            load: load_at(n),
            ..*tr
        };
        match check(&cut) {
            Ok(e) => {
                out.estimate = Some(e);
                break;
            }
            Err(why) => out.refused.push((n, why)),
        }
        n = next_check(n);
    }
    out
}

pub mod spread;
pub mod synth;

#[cfg(test)]
mod tests;
