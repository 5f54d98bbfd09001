//! The gate's level on real rows (the 20 quick runs of
//! results/l-stability-timer): one run cannot move it, and a run of an L
//! few recent runs measured is an L change, inside a wide interval too.

mod common;

use common::*;
use lazyinit_history::check::judge_series;
use lazyinit_history::{ChangeOptions, History, Series};
use lazyinit_report::cells::Metric;

/// The arm64 HZ100 fix series (L = 3) of the first `n` nights.
fn arm64_fix(n: usize) -> Series {
    let dir = tempfile::tempdir().unwrap();
    let mut h = History::open(&fresh_sqlite(dir.path())).unwrap();
    for night in &twenty_nights()[..n] {
        h.import(night).unwrap();
    }
    let mut all = h.series(Metric::FromFirstGroupS, None).unwrap();
    all.retain(|s| s.id.as_str().contains("arm64") && s.id.as_str().contains("/fix/"));
    assert_eq!(all.len(), 1);
    all.remove(0)
}

/// Point `i` of `s` as a run of another L, `pct` percent slower.
fn other_l(s: &mut Series, i: usize, l: u64, pct: f64) {
    let p = &mut s.points[i];
    p.sleep_ticks = vec![l];
    p.value *= 1.0 + pct / 100.0;
}

/// As in the held-out rerun: a run of L = 4 (+23.8%) judged
/// against a level that already holds one such run (one that was never
/// judged, or that passed): still an L change, L [3] -> [4].
#[test]
fn a_run_of_an_l_one_earlier_run_measured_is_an_l_change() {
    let mut s = arm64_fix(8);
    other_l(&mut s, 2, 4, 23.8);
    other_l(&mut s, 7, 4, 23.8);
    let key = s.points[7].run_key.clone();
    let (_, suspects) = judge_series(&s, &key, &ChangeOptions::default()).unwrap();
    let moved: Vec<_> = suspects
        .iter()
        .filter_map(|c| c.sleep_moved.clone())
        .collect();
    assert_eq!(moved, vec![(vec![3], vec![4])], "{suspects:#?}");
}

/// A wide level (the noisy nights 6..9 among them) holds a run of
/// another L whose time is well inside it: an L change all the same.
#[test]
fn an_l_change_inside_a_wide_interval_is_named() {
    let mut s = arm64_fix(12);
    // Night 12's time is the level's own; only its L is new.
    other_l(&mut s, 11, 4, 0.0);
    let key = s.points[11].run_key.clone();
    let (_, suspects) = judge_series(&s, &key, &ChangeOptions::default()).unwrap();
    assert_eq!(suspects.len(), 1, "{suspects:#?}");
    assert_eq!(suspects[0].sleep_moved, Some((vec![3], vec![4])));
}

/// One outlying earlier run (+40%) does not move the level: a run 2%
/// slower than the quiet nights is judged against their median, not a
/// mean the outlier pulled up to meet it.
#[test]
fn one_outlying_run_does_not_move_the_level() {
    let mut s = arm64_fix(5);
    other_l(&mut s, 3, 3, 40.0);
    other_l(&mut s, 4, 3, 2.0);
    let key = s.points[4].run_key.clone();
    let (v, suspects) = judge_series(&s, &key, &ChangeOptions::default()).unwrap();
    let quiet = s.points[1].value;
    assert!((v.level.unwrap() - quiet).abs() < 0.05, "{v:#?}");
    // The outlier widens the interval (the gate errs to pass on time),
    // but the level the run is compared with is the quiet nights'.
    assert!(
        suspects.iter().all(|c| c.before.mean < quiet + 0.05),
        "{suspects:#?}"
    );
}

/// Night 14 as a release candidate of another kernel source: a series of
/// its own, so without a baseline every series is UNKNOWN; against the
/// last release's nights (`kernel:6.1.192`) each is judged, and its
/// x86_64 fix cell of another L fails as an L change.
#[test]
fn a_release_candidate_is_judged_against_the_chosen_baseline() {
    use lazyinit_history::check::{check, check_against, Baseline, Outcome};
    let dir = tempfile::tempdir().unwrap();
    let mut h = History::open(&fresh_sqlite(dir.path())).unwrap();
    let mut nights = twenty_nights();
    for night in &nights[..13] {
        h.import(night).unwrap();
    }
    let mut rc = nights.remove(13);
    for r in &mut rc.rows {
        r.axes.source = lazyinit_core::SourceId::from("6.1.200");
        r.kernel_release = r.kernel_release.replace("6.1.192", "6.1.200");
        if r.cell_id.contains("x86_64-debian-6.1-hz250-fix") {
            r.measured.sleep_ticks = Some(7);
        }
    }
    let key = h.import(&rc).unwrap().run_key;
    let opts = ChangeOptions::default();
    let m = Metric::FromFirstGroupS;
    let alone = check(&mut h, &key, &[], m, &opts).unwrap();
    assert_eq!(alone.verdicts.len(), 4);
    assert!(alone.verdicts.iter().all(|v| v.outcome == Outcome::Unknown));
    let base: Baseline = "kernel:6.1.192".parse().unwrap();
    let r = check_against(&mut h, &key, &[], m, &opts, &[base]).unwrap();
    let outcomes: Vec<_> = r
        .verdicts
        .iter()
        .map(|v| (v.series.clone(), v.outcome))
        .collect();
    assert_eq!(outcomes.len(), 4, "{outcomes:?}");
    for (series, outcome) in &outcomes {
        let want = if series.as_str().contains("x86_64") && series.as_str().contains("/fix/") {
            Outcome::Fail
        } else {
            Outcome::Pass
        };
        assert_eq!(*outcome, want, "{series}: {:#?}", r.verdicts);
    }
    let fail = r
        .verdicts
        .iter()
        .find(|v| v.outcome == Outcome::Fail)
        .unwrap();
    assert!(
        fail.message.contains("an L change: L [8] -> [7]"),
        "{}",
        fail.message
    );
    let pass = r
        .verdicts
        .iter()
        .find(|v| v.outcome == Outcome::Pass)
        .unwrap();
    assert!(
        pass.message.contains("the median of 13 baseline run(s)"),
        "{}",
        pass.message
    );
    // Dates and runs choose too; a day range that holds none leaves it unknown.
    let day: Baseline = "date:2026-11-30..2026-11-30".parse().unwrap();
    let r = check_against(&mut h, &key, &[], m, &opts, &[day]).unwrap();
    assert_eq!(
        r.verdicts
            .iter()
            .filter(|v| v.outcome == Outcome::Pass)
            .count(),
        3
    );
    let none: Baseline = "date:2027-01-01..".parse().unwrap();
    let r = check_against(&mut h, &key, &[], m, &opts, &[none]).unwrap();
    assert!(
        r.verdicts.iter().all(|v| v.outcome == Outcome::Unknown),
        "{:#?}",
        r.verdicts
    );
    let first = nights[0].rows[0].run_id.clone();
    let run: Baseline = format!("run:{first}").parse().unwrap();
    assert!(run.matches_key(&format!("{first}@x")));
    // A label given at import chooses the runs it names.
    let mut keys: Vec<String> = h
        .stored_rows()
        .unwrap()
        .into_iter()
        .map(|r| r.run_key)
        .filter(|k| *k != key)
        .collect();
    keys.dedup();
    for k in &keys[..3] {
        h.set_label(k, "6.1.192").unwrap();
    }
    let label: Baseline = "label:6.1.192".parse().unwrap();
    let r = check_against(&mut h, &key, &[], m, &opts, &[label]).unwrap();
    let pass = r
        .verdicts
        .iter()
        .find(|v| v.outcome == Outcome::Pass)
        .unwrap();
    assert!(
        pass.message.contains("the median of 3 baseline run(s)"),
        "{}",
        pass.message
    );
    for bad in ["kernel:", "date:2026-11-30", "date:30/11/2026..", "tag:x"] {
        assert!(bad.parse::<Baseline>().is_err(), "{bad}");
    }
}

/// The held-out case: L = 4 runs (+19.75%) imported without a
/// check sit in the series after its first baseline. Were they part of
/// the level (as they were), a new L = 4 run would pass: L 4 seen in 2 of
/// 8 runs is not rare, and their spread widens the interval. They are
/// judged against the level before them instead, are off it, and stay
/// out: the new run fails as an L change and as a time change.
#[test]
fn a_run_never_judged_does_not_join_the_level() {
    use lazyinit_history::check::{level_runs, Level};
    // The first three nights and six quiet ones after the noisy 6..9.
    let mut s = arm64_fix(15);
    s.points = [0, 1, 2, 9, 10, 11, 12, 13, 14]
        .iter()
        .map(|&i| s.points[i].clone())
        .collect();
    for i in [3, 4, 8] {
        other_l(&mut s, i, 4, 19.75);
    }
    let opts = ChangeOptions::default();
    let key = s.points[8].run_key.clone();
    // With them in the level, the run passed.
    let with_them = Level::of(&s.points[..8]).unwrap();
    assert!(!with_them.is_rare(4), "{with_them:?}");
    assert!(
        with_them.test(s.points[8].value).p >= opts.run_p,
        "{with_them:?}"
    );
    let (v, suspects) = judge_series(&s, &key, &opts).unwrap();
    let off: Vec<_> = suspects
        .iter()
        .filter(|c| c.sleep_moved.is_some())
        .collect();
    assert_eq!(off.len(), 1, "{suspects:#?}");
    assert_eq!(off[0].sleep_moved, Some((vec![3], vec![4])));
    assert!(off[0].p < opts.run_p, "a time change too: {:#?}", off[0]);
    let quiet = s.points[1].value;
    assert!((v.level.unwrap() - quiet).abs() / quiet < 0.01, "{v:#?}");
    // They are left out.
    assert_eq!(v.left_out_of_level, 2, "{v:#?}");
    assert_eq!(level_runs(&s, 0, 8, &opts), vec![0, 1, 2, 5, 6, 7]);
}

/// A run whose storage profile was not held (its first zeroing outside
/// the window after the last attempt) slept the host's L: the same L
/// change as above is not judged, the verdict is UNKNOWN with that
/// reason, never a change of the kernel (issue 37).
#[test]
fn a_run_whose_profile_was_not_held_is_unknown_not_an_l_change() {
    let mut s = arm64_fix(8);
    other_l(&mut s, 2, 4, 23.8);
    other_l(&mut s, 7, 4, 23.8);
    let line = "L=4, profile not held: first zeroing 4.10 ms, want 3.00-4.00";
    s.points[7].profile_not_held = Some(line.into());
    let key = s.points[7].run_key.clone();
    let (v, suspects) = judge_series(&s, &key, &ChangeOptions::default()).unwrap();
    assert!(suspects.is_empty(), "{suspects:#?}");
    let v = lazyinit_history::check::settle(v, suspects, &[], "s");
    assert_eq!(v.outcome, lazyinit_history::check::Outcome::Unknown);
    assert!(v.message.contains(line), "{}", v.message);
}
