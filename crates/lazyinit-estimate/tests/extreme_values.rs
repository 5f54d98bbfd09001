//! Property tests: the estimator and the tick counting take any times a
//! file can hold (1e300 s, NaN, inf, negative, huge group counts) without
//! a panic (debug builds check overflow), and keep their invariants.

use lazyinit_core::{ticks, Hz};
use lazyinit_estimate::{check, next_check, Load, Trace};
use proptest::prelude::*;

/// Any f64 a CSV can spell, weighted to the edges.
fn time() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0f64..10_000.0,
        1 => Just(1e300),
        1 => Just(-1e300),
        1 => Just(f64::MAX),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(5e-324),
        2 => any::<f64>(),
    ]
}

fn hz() -> impl Strategy<Value = Hz> {
    prop::sample::select(Hz::SUPPORTED.to_vec()).prop_map(|h| Hz::new(h).unwrap())
}

/// Regular cycles of `cycle` s from `start`, each time scaled by `scale`.
fn regular(start: f64, cycle: f64, n: usize, scale: f64) -> Vec<f64> {
    (0..n).map(|i| (start + cycle * i as f64) * scale).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn tick_counting_never_panics(
        spans in prop::collection::vec((time(), time()), 0..80),
        hz in hz(),
    ) {
        if let Some(c) = ticks::count(&spans, hz.get()) {
            prop_assert_eq!(c.cycles, spans.len() - 1);
            prop_assert!(c.slept_exactly <= c.cycles);
            prop_assert!(2 * c.slept_exactly >= c.cycles);
        }
    }

    #[test]
    fn tick_counting_of_huge_regular_times_never_panics(
        scale in prop_oneof![Just(1.0), Just(1e100), Just(1e300), Just(1e308)],
        n in 13usize..60,
        hz in hz(),
    ) {
        let t = regular(3.0, 0.044, n + 1, scale);
        let z: Vec<Option<f64>> = t.iter().map(|_| Some(0.0035 * scale)).collect();
        let _ = ticks::count(&ticks::spans(&t, &z), hz.get());
    }

    #[test]
    fn the_estimator_never_panics(
        t_s in prop::collection::vec(time(), 0..300),
        zero in prop::collection::vec(prop::option::of(time()), 0..300),
        to_init in prop_oneof![Just(u64::MAX), Just(0u64), any::<u64>(), 0u64..100_000],
        first in time(),
        hz in hz(),
        changing in prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()],
    ) {
        let load = Load { changing, running: changing };
        let tr = Trace { hz, to_init, first_group_s: first, t_s: &t_s, zero_s: &zero, load };
        if let Ok(e) = check(&tr) {
            prop_assert_eq!(e.groups_traced, t_s.len() as u64);
            prop_assert!(e.groups_traced < e.to_init);
        }
    }

    #[test]
    fn the_estimator_takes_huge_regular_traces(
        scale in prop_oneof![Just(1.0), Just(1e100), Just(1e300), Just(1e308)],
        n in 25usize..300,
        to_init in prop_oneof![Just(u64::MAX), 300u64..10_000_000],
        hz in hz(),
    ) {
        let t = regular(3.0, hz.tick_s() * 11.0, n, scale);
        let z: Vec<Option<f64>> = t.iter().map(|_| Some(0.0035 * scale)).collect();
        let load = Load { changing: u32::MAX, running: u32::MAX };
        let tr = Trace { hz, to_init, first_group_s: 3.0 * scale, t_s: &t, zero_s: &z, load };
        let _ = check(&tr);
    }

    #[test]
    fn next_check_grows_and_saturates(n in any::<u64>()) {
        let next = next_check(n);
        prop_assert!(next > n || n == u64::MAX);
    }
}

/// The unscaled regular trace locks (so the huge ones above exercise the
/// same code path, not only an early refusal).
#[test]
fn a_regular_trace_locks() {
    let hz = Hz::new(250).unwrap();
    let t = regular(3.0, hz.tick_s() * 11.0, 100, 1.0);
    let z: Vec<Option<f64>> = t.iter().map(|_| Some(0.0035)).collect();
    let tr = Trace {
        hz,
        to_init: 10_000,
        first_group_s: 3.0,
        t_s: &t,
        zero_s: &z,
        load: Load::default(),
    };
    let e = check(&tr).unwrap();
    assert_eq!(e.ticks, 11);
}
