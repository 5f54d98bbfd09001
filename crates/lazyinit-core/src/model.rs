//! The timing model of ext4 lazy inode-table initialisation (docs/design.md §2).
//!
//! While a zeroing takes less than one tick, the thread wakes on a tick,
//! zeroes, and sleeps `L` ticks from the next one: each block group's cycle
//! is exactly `L + 1` ticks, whatever `z` (the published full-scale runs
//! agree to 0.15%). Only a zeroing of a tick or more adds its own time. Without the fix `L = W * k` where `k` is the
//! number of ticks the first tick-crossing zeroing took (so `L = W` when
//! zeroing is shorter than a tick); with the fix `L = floor(W * z1 * HZ)`
//! from the first group's zeroing time in nanoseconds.

use serde::Serialize;

use crate::cell::{Hz, Variant};
use crate::identity::{Axes, Knobs};
use crate::size::{ByteSize, MIB};

/// Bytes covered by one block group with 4 KiB blocks (32768 blocks).
pub const GROUP_BYTES: u64 = 128 * MIB;

/// Zeroing time per group assumed when none was measured: 3.4 ms, which is
/// what the 2021 report's with-fix figures imply on EBS at both HZ values
/// (`storage::EBS_NOMINAL_Z1`, what the `ebs` profile aims at).
pub const DEFAULT_ZEROING_S: f64 = 0.0034;

/// Mean of the thread's random start delay (uniform in 0..5 s).
pub const MEAN_START_DELAY_S: f64 = 2.5;

/// Number of block groups mkfs.ext4 makes for a volume (4 KiB blocks).
/// A trailing partial group is kept by mke2fs only when it is large enough
/// to hold its metadata; we count whole groups, which is exact for the
/// power-of-two sizes the harness uses.
pub fn groups(volume: ByteSize) -> u64 {
    volume.0 / GROUP_BYTES
}

/// What the model predicts for one cell.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prediction {
    /// Sleep between groups in ticks (`L`).
    pub sleep_ticks: u64,
    /// One group's cycle: sleep and a tick of rounding (plus the zeroing,
    /// when it takes a tick or more).
    pub per_group_s: f64,
    /// Groups times cycle, without the start delay.
    pub lazyinit_s: f64,
}

/// Parameters the model needs beyond the cell itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelInputs {
    pub hz: Hz,
    pub variant: Variant,
    pub wait_mult: u32,
    pub groups: u64,
    /// Zeroing time of the first measured group (sets `L` with the fix).
    pub z1_s: f64,
    /// Zeroing time of a typical group.
    pub z_s: f64,
}

/// Sleep length in ticks that the kernel computes from the first group.
pub fn sleep_ticks(hz: Hz, variant: Variant, wait_mult: u32, z1_s: f64) -> u64 {
    let tick = hz.tick_s();
    let w = wait_mult as u64;
    match variant {
        Variant::NoFix => {
            // Groups measured at 0 ticks are re-measured; the first that
            // crosses a tick sees ceil(z1 / tick) ticks, at least one.
            let k = (z1_s / tick).ceil().max(1.0) as u64;
            w * k
        }
        // nsecs_to_jiffies truncates. A tiny epsilon keeps 10*0.003*100 at 3.
        Variant::Fix => (wait_mult as f64 * z1_s * hz.get() as f64 + 1e-9).floor() as u64,
    }
}

pub fn predict(inp: ModelInputs) -> Prediction {
    let l = sleep_ticks(inp.hz, inp.variant, inp.wait_mult, inp.z1_s);
    let tick = inp.hz.tick_s();
    // With L = 0 the groups run back to back: the cycle is the zeroing alone.
    // A zeroing shorter than a tick ends before the tick that starts the
    // sleep: the cycle is L + 1 ticks. A longer one adds its own time.
    let per_group_s = if l == 0 {
        inp.z_s
    } else if inp.z_s < tick {
        (l as f64 + 1.0) * tick
    } else {
        (l as f64 + 1.0) * tick + inp.z_s
    };
    Prediction {
        sleep_ticks: l,
        per_group_s,
        lazyinit_s: per_group_s * inp.groups as f64,
    }
}

/// `p` with each cycle `crossed` ticks longer: the mean ticks a zeroing
/// crossed per cycle, as a run's tick grid counted them
/// (`ticks::count`). With L = 0 the cycle is the zeroing itself, which
/// already holds them.
pub fn with_crossings(p: Prediction, hz: Hz, groups: u64, crossed: f64) -> Prediction {
    if p.sleep_ticks == 0 {
        return p;
    }
    let per_group_s = (p.sleep_ticks as f64 + 1.0 + crossed) * hz.tick_s();
    Prediction {
        per_group_s,
        lazyinit_s: per_group_s * groups as f64,
        ..p
    }
}

/// The zeroing time assumed for a cell's knobs when none was measured:
/// [`DEFAULT_ZEROING_S`] (a group's inode table as mkfs made it in 2021)
/// in proportion to the knobs that scale the zeroing
/// ([`Knobs::zeroing_scale`]): the model takes a zeroing as a rate, as
/// a volume that writes the table's bytes zeroes (an assumption: EBS's
/// time for another table size was not measured).
pub fn zeroing_s(knobs: &Knobs) -> f64 {
    DEFAULT_ZEROING_S * knobs.zeroing_scale()
}

/// Convenience: the prediction for a cell's axes with the zeroing time
/// of its knobs ([`zeroing_s`]).
pub fn predict_cell<S>(axes: &Axes<S>) -> Prediction {
    let z = zeroing_s(&axes.knobs);
    predict(ModelInputs {
        hz: axes.hz,
        variant: axes.variant,
        wait_mult: axes.wait_mult,
        groups: groups(axes.volume),
        z1_s: z,
        z_s: z,
    })
}

/// Infers the sleep `L` a run used from its measured cycle time, assuming
/// zeroing shorter than one tick: cycle = (L + 1) ticks + z, z < 1/2 tick.
pub fn infer_sleep_ticks(hz: Hz, ms_per_group: f64) -> Option<u64> {
    if !ms_per_group.is_finite() || ms_per_group <= 0.0 {
        return None;
    }
    let ticks = ms_per_group / 1000.0 * hz.get() as f64;
    // Measured cycles run a little under or over whole ticks; round.
    Some((ticks.round() as i64 - 1).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::size::TIB;

    fn hz(n: u32) -> Hz {
        Hz::new(n).unwrap()
    }

    #[test]
    fn group_counts_match_design() {
        assert_eq!(groups(ByteSize(2 * TIB)), 16384);
        assert_eq!(groups(ByteSize(3 * TIB)), 24576);
        assert_eq!(groups("64GiB".parse().unwrap()), 512);
    }

    #[test]
    fn nofix_matches_design_figures() {
        // docs/design.md §2: 2 TiB is 1802 s at HZ=100 and 721 s at HZ=250 (z ~ 0).
        let p = |h| {
            predict(ModelInputs {
                hz: hz(h),
                variant: Variant::NoFix,
                wait_mult: 10,
                groups: 16384,
                z1_s: 0.0005,
                z_s: 0.0,
            })
        };
        assert_eq!(p(100).sleep_ticks, 10);
        assert!((p(100).lazyinit_s - 1802.24).abs() < 0.01);
        assert!((p(250).lazyinit_s - 720.9).abs() < 0.1);
        assert!((p(100).lazyinit_s / p(250).lazyinit_s - 2.5).abs() < 1e-9);
    }

    #[test]
    fn nofix_scales_with_ticks_seen() {
        // A zeroing of 1.5 ticks is seen as 2 ticks: L = 20.
        assert_eq!(sleep_ticks(hz(1000), Variant::NoFix, 10, 0.0015), 20);
    }

    #[test]
    fn fix_depends_on_first_zeroing() {
        assert_eq!(sleep_ticks(hz(100), Variant::Fix, 10, 0.003), 3);
        assert_eq!(sleep_ticks(hz(250), Variant::Fix, 10, 0.003), 7);
        assert_eq!(sleep_ticks(hz(100), Variant::Fix, 10, 0.0009), 0);
        let p = predict(ModelInputs {
            hz: hz(100),
            variant: Variant::Fix,
            wait_mult: 10,
            groups: 512,
            z1_s: 0.0009,
            z_s: 0.0009,
        });
        assert!(
            (p.per_group_s - 0.0009).abs() < 1e-12,
            "L=0 runs back to back"
        );
    }

    fn axes(h: u32, variant: Variant, v: ByteSize) -> Axes<crate::KernelSource> {
        Axes::new(
            crate::Arch::X86_64,
            crate::KernelSource::Debian61,
            hz(h),
            variant,
            v,
        )
    }

    #[test]
    fn default_prediction_is_near_report() {
        // Reported with fix, 2 TiB: 660 s (HZ=100), 544 s (HZ=250).
        let v = ByteSize(2 * TIB);
        let a = predict_cell(&axes(100, Variant::Fix, v)).lazyinit_s;
        let b = predict_cell(&axes(250, Variant::Fix, v)).lazyinit_s;
        assert!((a / 660.0 - 1.0).abs() < 0.10, "{a}");
        assert!((b / 544.0 - 1.0).abs() < 0.10, "{b}");
    }

    /// A knob that scales the zeroing (half the inode table, half the
    /// time) moves the fix's L as floor(W z1 HZ) says, and leaves the
    /// no-fix L (a sub-tick zeroing either way) where it was.
    #[test]
    fn a_knob_that_halves_the_zeroing_halves_the_fixs_sleep() {
        let v = ByteSize(8 << 30);
        let mut small = axes(250, Variant::Fix, v);
        small.knobs = toml::from_str::<crate::identity::SpecKnobs>("inode-size = 128")
            .unwrap()
            .resolve()
            .unwrap()
            .remove(0);
        assert!((zeroing_s(&small.knobs) - 0.0017).abs() < 1e-12);
        let (l_small, l_plain) = (
            predict_cell(&small).sleep_ticks,
            predict_cell(&axes(250, Variant::Fix, v)).sleep_ticks,
        );
        assert_eq!((l_small, l_plain), (4, 8));
        assert!((predict_cell(&small).per_group_s - 0.020).abs() < 1e-12);
        small.variant = Variant::NoFix;
        assert_eq!(predict_cell(&small).sleep_ticks, 10);
    }

    #[test]
    fn infers_sleep_from_cycle() {
        assert_eq!(infer_sleep_ticks(hz(100), 109.5), Some(10));
        assert_eq!(infer_sleep_ticks(hz(100), 110.4), Some(10));
        assert_eq!(infer_sleep_ticks(hz(100), 41.0), Some(3));
        assert_eq!(infer_sleep_ticks(hz(100), f64::NAN), None);
    }
}
