//! A generated history (`history generate`): nightly runs of the eight
//! reported cells (arm64 / x86_64, fix / no fix, 2 / 3 TiB) with the
//! cycle of each (L + 1 ticks plus a little host noise), for benchmarks
//! and the dashboard. Deterministic for a seed. Two changes are planted so
//! a reader sees what one looks like: from run 60% on, x86_64 HZ250 fix
//! 2 TiB sleeps L = 7 instead of 8 (an L change), and from run 80% on
//! arm64 no fix 3 TiB cycles 2% slower.
//!
//! [`Noise::HeavyTailed`] adds loaded stretches as the five one-core
//! nights of results/l-stability-timer are (+0.2% to +8% there): a stretch
//! of 1-5 nights starts on 1% of nights, and in it each cell's cycle is
//! `1 + 0.002 + 0.1 u²` slower (u uniform): mostly a little, sometimes a
//! lot, and its guests boot 1.5x as long. Its runs are no change: a
//! detector must not report them.

/// The host noise of a generated history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Noise {
    /// Up to 8% of a tick, uniform (the `history generate` default).
    Uniform,
    /// Uniform, plus loaded stretches (see the module's doc).
    HeavyTailed,
}

use lazyinit_core::model::groups;
use lazyinit_core::results::{Measurement, ResultRow, Status};
use lazyinit_core::size::TIB;
use lazyinit_core::{Arch, Axes, ByteSize, Hz, Testbed, Variant};
use rand::{Rng, SeedableRng};

use crate::import::RunImport;
use crate::provenance::RunFacts;

/// (arch, HZ, variant, L).
const CELLS: [(Arch, u32, Variant, u64); 4] = [
    (Arch::Arm64, 100, Variant::Fix, 3),
    (Arch::Arm64, 100, Variant::NoFix, 10),
    (Arch::X86_64, 250, Variant::Fix, 8),
    (Arch::X86_64, 250, Variant::NoFix, 10),
];

/// Run `i` of `runs` (0-based), eight rows.
pub fn run(i: usize, runs: usize, rng: &mut impl Rng) -> RunImport {
    run_loaded(i, runs, rng, false)
}

/// Run `i` as [`run`], on a loaded night when `loaded`.
pub fn run_loaded(i: usize, runs: usize, rng: &mut impl Rng, loaded: bool) -> RunImport {
    let day = chrono::DateTime::parse_from_rfc3339("2024-01-01T02:00:00Z")
        .expect("a date")
        .with_timezone(&chrono::Utc)
        + chrono::Duration::days(i as i64);
    let started_at = day.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let run_id = format!("nightly-{:08x}", i);
    // A kernel point release every 50 nights.
    let point = 150 + i / 50;
    let mut rows = Vec::new();
    for (arch, hz, variant, l) in CELLS {
        for size in [2 * TIB, 3 * TIB] {
            let (l, ms) = sleep_and_ms(i, runs, (arch, hz, variant, l), size, loaded, rng);
            let g = groups(ByteSize(size));
            let from_first = g as f64 * ms / 1000.0;
            let first_group_s = rng.gen_range(0.5..5.0);
            let machine = format!("qemu-{}", arch.uname_machine());
            let cell_id = format!(
                "qemu-{arch}-debian-6.1-hz{hz}-{variant}-{}-r1",
                ByteSize(size)
            );
            rows.push(ResultRow {
                run_id: run_id.clone(),
                cell_id,
                testbed: Testbed {
                    provider: "qemu".into(),
                    machine: machine.into(),
                    accel: "tcg".into(),
                    storage: "ebs".into(),
                },
                axes: Axes::new(
                    arch,
                    "debian-6.1".into(),
                    Hz::new(hz).expect("a valid HZ"),
                    variant,
                    ByteSize(size),
                ),
                kernel_profile: None,
                kernel_tree: String::new(),
                kernel_release: format!("6.1.{point}-lazyinit-hz{hz}-{variant}"),
                repetition: 1,
                started_at: started_at.clone(),
                harness_version: env!("CARGO_PKG_VERSION").into(),
                harness_commit: lazyinit_core::harness_commit().into(),
                status: Status::Ok,
                error: String::new(),
                // A loaded host boots its guests slowly too (the one-core
                // nights: 1.3-1.6x).
                boot_s: Some(rng.gen_range(5.0..9.0) * if loaded { 1.5 } else { 1.0 }),
                concurrency: 8,
                estimate_after: None,
                shard: String::new(),
                host: String::new(),
                measured: Measurement {
                    groups: Some(g),
                    lazyinit_s: Some(first_group_s + from_first),
                    ms_per_group: Some(ms),
                    traced_groups: Some(g),
                    clocksource: "tsc".into(),
                    sleep_ticks: Some(l),
                    first_group_s: Some(first_group_s),
                    mkfs_cmd: "mkfs.ext4 -F -q /dev/vda".into(),
                    ..Measurement::default()
                },
            });
        }
    }
    RunImport {
        folder: format!("generated/{run_id}"),
        rows,
        facts: RunFacts::default(),
        cells: Default::default(),
    }
}

/// A cell's sleep and time per group on night `i` of `runs`: L drops to 7
/// for x86_64 with the fix at 2 TiB from 60% of the nights on, arm64
/// without it at 3 TiB is 2% slower from 80% on, and a loaded night is
/// slower by up to a tenth.
fn sleep_and_ms(
    i: usize,
    runs: usize,
    (arch, hz, variant, l): (Arch, u32, Variant, u64),
    size: u64,
    loaded: bool,
    rng: &mut impl Rng,
) -> (u64, f64) {
    let mut l = l;
    if arch == Arch::X86_64 && variant == Variant::Fix && size == 2 * TIB && i >= runs * 6 / 10 {
        l = 7;
    }
    let tick_ms = 1000.0 / hz as f64;
    let mut ms = (l + 1) as f64 * tick_ms + rng.gen_range(0.0..0.08) * tick_ms;
    if arch == Arch::Arm64 && variant == Variant::NoFix && size == 3 * TIB && i >= runs * 8 / 10 {
        ms *= 1.02;
    }
    if loaded {
        let u: f64 = rng.gen();
        ms *= 1.0 + 0.002 + 0.1 * u * u;
    }
    (l, ms)
}

/// Every run of a generated history, oldest first.
pub fn history(runs: usize, seed: u64) -> Vec<RunImport> {
    history_with(runs, seed, Noise::Uniform)
}

/// The most runs `history generate` makes: 10 times the benchmarks'
/// 10,000 (80,000 rows a run's worth of seconds each on a 2-core host).
pub const MAX_RUNS: usize = 100_000;

/// Every run of a generated history with `noise`, oldest first. The
/// uniform history is the one [`history`] gives for the seed.
pub fn history_with(runs: usize, seed: u64, noise: Noise) -> Vec<RunImport> {
    runs_with(runs, seed, noise).collect()
}

/// The runs of [`history_with`], made one at a time (a long history is
/// never all in memory).
pub fn runs_with(runs: usize, seed: u64, noise: Noise) -> impl Iterator<Item = RunImport> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut load = rand::rngs::StdRng::seed_from_u64(seed ^ 0x10ad);
    let mut stretch = 0usize;
    (0..runs).map(move |i| {
        if noise == Noise::HeavyTailed && stretch == 0 && load.gen_bool(0.01) {
            stretch = load.gen_range(1..=5);
        }
        let loaded = stretch > 0;
        stretch = stretch.saturating_sub(1);
        run_loaded(i, runs, &mut rng, loaded)
    })
}

/// The runs (0-based) of a generated history that are loaded.
pub fn loaded_runs(runs: usize, seed: u64, noise: Noise) -> Vec<usize> {
    let mut load = rand::rngs::StdRng::seed_from_u64(seed ^ 0x10ad);
    let mut stretch = 0usize;
    let mut out = Vec::new();
    for i in 0..runs {
        if noise == Noise::HeavyTailed && stretch == 0 && load.gen_bool(0.01) {
            stretch = load.gen_range(1..=5);
        }
        if stretch > 0 {
            out.push(i);
        }
        stretch = stretch.saturating_sub(1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::{build, StoredRow};
    use lazyinit_report::cells::Metric;

    fn stored(runs: Vec<RunImport>) -> Vec<StoredRow> {
        runs.into_iter()
            .flat_map(|r| {
                let key = crate::import::run_key(&r.rows).unwrap();
                r.rows.into_iter().map(move |row| StoredRow {
                    run_started_at: row.started_at.clone(),
                    row,
                    kernel_build: None,
                    kernel_source_identity: None,
                    run_key: key.clone(),
                    folder: String::new(),
                })
            })
            .collect()
    }

    /// 10,000 runs x 8 cells, uniform and heavy-tailed noise, seeds other
    /// than the 28 below: the two planted changes at their runs and
    /// nothing else (before the level was corrected for the length and a
    /// step had to exceed the noise, 10,000 runs gave 32 false ones).
    #[test]
    fn long_histories_have_only_the_planted_changes() {
        for (noise, seed) in [(Noise::Uniform, 11), (Noise::HeavyTailed, 12)] {
            let series = build(
                &stored(history_with(10_000, seed, noise)),
                Metric::FromFirstGroupS,
                None,
            );
            assert_eq!(series.len(), 8);
            let found: Vec<(String, usize)> = crate::changes::find(&series, &Default::default())
                .into_iter()
                .map(|c| (c.series.to_string(), c.index))
                .collect();
            let want = vec![
                (
                    "qemu/qemu-aarch64/tcg/arm64/debian-6.1/hz100/nofix/3TiB/w10/ebs/measured"
                        .to_string(),
                    8000,
                ),
                (
                    "qemu/qemu-x86_64/tcg/x86_64/debian-6.1/hz250/fix/2TiB/w10/ebs/measured"
                        .to_string(),
                    6000,
                ),
            ];
            assert_eq!(found, want, "{noise:?} seed {seed}");
        }
    }

    /// The heavy-tailed history has loaded stretches of 1-5 runs.
    #[test]
    fn heavy_tails_load_some_runs() {
        let loaded = loaded_runs(10_000, 12, Noise::HeavyTailed);
        assert!((50..=600).contains(&loaded.len()), "{}", loaded.len());
        assert_eq!(loaded_runs(10_000, 12, Noise::Uniform), Vec::<usize>::new());
        // The uniform history is the one `history` gives.
        assert_eq!(
            history(30, 3)[29].rows,
            history_with(30, 3, Noise::Uniform)[29].rows
        );
    }

    /// The two planted changes are found at the run they were planted,
    /// the L change named as one.
    #[test]
    fn the_planted_changes_are_found_where_planted() {
        let rows = stored(history(200, 28));
        let series = build(&rows, Metric::FromFirstGroupS, None);
        assert_eq!(series.len(), 8);
        let found = crate::changes::find(&series, &Default::default());
        let at = |needle: &str| {
            found
                .iter()
                .find(|c| c.series.as_str().contains(needle))
                .map(|c| (c.index, c.sleep_moved.clone()))
        };
        assert_eq!(
            at("x86_64/debian-6.1/hz250/fix/2TiB"),
            Some((120, Some((vec![8], vec![7]))))
        );
        assert_eq!(
            at("arm64/debian-6.1/hz100/nofix/3TiB").map(|c| c.0),
            Some(160)
        );
    }
}
