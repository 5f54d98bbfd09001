//! Detection on generated histories (scripts/detection-bench.sh writes its
//! output to results/history-bench/): for each noise (uniform, heavy-tailed)
//! and seed, `history generate`'s history of RUNS runs x 8 cells built in
//! memory, then
//! - the change points of every series at the defaults: the false ones
//!   (anything but the two planted changes at their runs) and the planted;
//! - the detection delay of each planted change: the runs from it until
//!   the gate (`check::judge_series_in` with the host's load of every
//!   series, as `history check` judges a run) fails and until `changes`
//!   over the history so far reports it;
//! - the gate on the GATE_RUNS runs before the first planted change, on
//!   quiet runs and on loaded runs (or up to 3 after one) apart: how many
//!   fail (a run failed on noise or load alone), and how many are UNKNOWN
//!   as a loaded host's.
//!
//! Usage: detection_bench [RUNS] [SEED...] (default 10000, seeds 1 2 3).

use std::time::Instant;

use lazyinit_history::changes::{self, ChangeKind, ChangeOptions};
use lazyinit_history::check::{judge_series_in, HostLoad};
use lazyinit_history::generate::{self, Noise};
use lazyinit_history::series::{build, Series, StoredRow};
use lazyinit_report::cells::Metric;

const GATE_RUNS: usize = 50;

fn series_of(runs: usize, seed: u64, noise: Noise) -> Vec<Series> {
    let rows: Vec<StoredRow> = generate::history_with(runs, seed, noise)
        .into_iter()
        .flat_map(|r| {
            let key = lazyinit_history::import::run_key(&r.rows).unwrap();
            r.rows.into_iter().map(move |row| StoredRow {
                run_started_at: row.started_at.clone(),
                row,
                kernel_build: None,
                kernel_source_identity: None,
                run_key: key.clone(),
                folder: String::new(),
            })
        })
        .collect();
    build(&rows, Metric::FromFirstGroupS, None)
}

fn prefix(s: &Series, upto: usize) -> Series {
    Series {
        points: s.points[..=upto].to_vec(),
        ..s.clone()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = args.first().map_or(10_000, |a| a.parse().expect("RUNS"));
    let seeds: Vec<u64> = if args.len() > 1 {
        args[1..].iter().map(|a| a.parse().expect("SEED")).collect()
    } else {
        vec![1, 2, 3]
    };
    let opts = ChangeOptions::default();
    // (series id part, planted run).
    let planted = [
        ("x86_64/debian-6.1/hz250/fix/2TiB", runs * 6 / 10),
        ("arm64/debian-6.1/hz100/nofix/3TiB", runs * 8 / 10),
    ];
    println!("runs: {runs} x 8 cells; metric from_first_group_s; defaults {opts:?}");
    let mut total_false = 0;
    for noise in [Noise::Uniform, Noise::HeavyTailed] {
        for &seed in &seeds {
            let t = Instant::now();
            let series = series_of(runs, seed, noise);
            let built = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let found = changes::find(&series, &opts);
            let detect = t.elapsed().as_secs_f64();
            let loaded = generate::loaded_runs(runs, seed, noise).len();
            let is_planted = |c: &changes::Change| {
                planted
                    .iter()
                    .any(|(id, at)| c.series.as_str().contains(id) && c.index == *at)
            };
            let false_ones: Vec<String> = found
                .iter()
                .filter(|c| !is_planted(c))
                .map(|c| {
                    format!(
                        "{} at {} ({:+.2}%, p={:.1e})",
                        c.series, c.index, c.change_pct, c.p
                    )
                })
                .collect();
            total_false += false_ones.len();
            println!(
                "\n== {noise:?} seed {seed}: {loaded} loaded runs; series built in {built:.2} s, changes in {detect:.2} s"
            );
            println!(
                "change points: {}, false: {}",
                found.len(),
                false_ones.len()
            );
            for f in &false_ones {
                println!("  false: {f}");
            }
            for (id, at) in planted {
                let s = series.iter().find(|s| s.id.as_str().contains(id)).unwrap();
                let hit = found
                    .iter()
                    .find(|c| c.series == s.id && c.index == at)
                    .map(|c| format!("found at run {} ({:+.2}%)", c.index, c.change_pct))
                    .unwrap_or_else(|| "NOT FOUND at its run".to_string());
                // Delays: runs after the change (0 = the first run after it).
                let mut gate = None;
                let mut reported = None;
                for k in 0..=20 {
                    let p = prefix(s, at + k);
                    if gate.is_none() {
                        let key = &p.points[at + k].run_key;
                        // The load's windows end at the run: the whole
                        // series say what its prefixes do.
                        let load = HostLoad::of(&series, key);
                        let (_, suspects) = judge_series_in(&p, key, &opts, &load).unwrap();
                        if !suspects.is_empty() {
                            gate = Some(k);
                        }
                    }
                    if reported.is_none()
                        && changes::of_series(&p, &opts).iter().any(|c| c.index == at)
                    {
                        reported = Some(k);
                    }
                    if gate.is_some() && reported.is_some() {
                        break;
                    }
                }
                let show = |d: Option<usize>| {
                    d.map_or("not within 21 runs".to_string(), |k| {
                        format!("at run {} of the new level", k + 1)
                    })
                };
                println!(
                    "planted {id} at run {at}: {hit}; gate fails {}, `changes` reports it {}",
                    show(gate),
                    show(reported)
                );
            }
            // The gate on the runs before the first planted change: on
            // quiet runs, and on loaded runs or up to 3 runs after one.
            let first = runs * 6 / 10;
            let loaded_set = generate::loaded_runs(runs, seed, noise);
            let near_load = |at: usize| loaded_set.iter().any(|&l| l <= at && at <= l + 3);
            let mut tally = [(0usize, 0usize, 0usize, 0usize, 0usize); 2];
            for at in first - GATE_RUNS..first {
                let key = series[0].points[at].run_key.clone();
                let load = HostLoad::of(&series, &key);
                for s in &series {
                    let p = prefix(s, at);
                    let (v, suspects) = judge_series_in(&p, &key, &opts, &load).unwrap();
                    let t = &mut tally[near_load(at) as usize];
                    t.0 += 1;
                    t.1 += !suspects.is_empty() as usize;
                    t.2 += suspects.iter().any(|c| c.kind == ChangeKind::NewRun) as usize;
                    t.3 += (suspects.is_empty() && v.not_judged.is_some()) as usize;
                    t.4 += v.set_aside.is_some() as usize;
                }
            }
            for (name, (judged, failed, new_run, unknown, aside)) in
                ["quiet", "loaded or <= 3 after a loaded run"]
                    .iter()
                    .zip(tally)
            {
                println!(
                    "gate on the {GATE_RUNS} runs before run {first} of each series, {name}: {failed} of {judged} fail ({new_run} as a run off its level), {unknown} UNKNOWN as a loaded host's (off on time), {aside} with a change point of loaded runs set aside"
                );
            }
        }
    }
    println!("\nfalse change points in all: {total_false}");
}
