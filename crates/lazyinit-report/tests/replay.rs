//! The replay of early stops over full runs' per-group data, on a results
//! folder of the reported cells' shape made from the model (docs/design.md §2):
//! noise, back-to-back starts without the fix, a stall after the stop
//! point that no early stop can see, groups.csv and groups.csv.gz.

use std::io::Write;
use std::path::Path;

use lazyinit_core::results::read_rows;
use lazyinit_core::Variant;
use lazyinit_estimate::synth::{generate, Run};
use lazyinit_report::input::load;
use lazyinit_report::render::replay::{csv, markdown};
use lazyinit_report::replay::replay;

/// Full runs of the 8 reported cells, as `run reported` would leave them.
fn full_runs(dir: &Path) {
    let template =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reported/results.csv");
    let run = lazyinit_core::RunWriter::claim(&lazyinit_core::RunFolder::new(dir)).unwrap();
    let mut w = run.results().unwrap();
    for (i, mut row) in read_rows(template).unwrap().into_iter().enumerate() {
        let hz = row.axes.hz.get();
        let l = match (row.axes.variant, hz) {
            (Variant::NoFix, _) => 10,
            (Variant::Fix, 100) => 3,
            (Variant::Fix, _) => 8,
        };
        let spec = Run {
            // Without the fix, groups run back to back until a zeroing
            // crosses a tick.
            back_to_back: if row.axes.variant == Variant::NoFix {
                20
            } else {
                0
            },
            start_s: 0.5 + i as f64 * 0.6,
            // One cell stalls for a minute a third of the way in.
            stalls: if i == 5 {
                vec![(8000, 60_000.0)]
            } else {
                vec![]
            },
            ..Run::noisy(hz, l, row.measured.groups.unwrap(), i as u64 + 1)
        };
        let t = generate(&spec);
        row.run_id = "reported-synth".into();
        row.measured.sleep_ticks = Some(l);
        row.measured.lazyinit_s = Some(t.lazyinit_s());
        row.measured.first_group_s = Some(t.first_group_s());
        row.measured.traced_groups = Some(t.t_s.len() as u64);
        w.append(&row).unwrap();
        let cell = dir.join(&row.cell_id);
        std::fs::create_dir_all(&cell).unwrap();
        let text = t.groups_csv(100.0);
        if i % 2 == 0 {
            std::fs::write(cell.join("groups.csv"), text).unwrap();
        } else {
            let f = std::fs::File::create(cell.join("groups.csv.gz")).unwrap();
            let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::best());
            gz.write_all(text.as_bytes()).unwrap();
            gz.finish().unwrap();
        }
    }
}

#[test]
fn replay_puts_predictions_beside_full_runs() {
    let tmp = tempfile::tempdir().unwrap();
    // A folder of a fixed name: the coverage is summed per folder.
    let dir = tmp.path().join("reported-synth");
    std::fs::create_dir(&dir).unwrap();
    full_runs(&dir);
    let rows = load(&[dir.join("results.csv")]).unwrap();
    let r = replay(&rows, &[25, 50, 100, 200, 500], 0.5);
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    assert_eq!(r.runs.len(), 8);
    assert_eq!(r.summary.len(), 5);
    // The stall after the stop is in every estimate's error, and outside
    // its interval once that is narrower than a minute (from 100 groups).
    let stalled = &r.runs[5];
    for p in &stalled.points {
        assert!(p.from_first_group_error_pct < -2.0, "{p:?}");
    }
    for p in &stalled.points[2..] {
        assert_eq!(p.covered, Some(false), "{p:?}");
    }
    assert_eq!(r.smallest_within, None);
    // Without the fix the back-to-back start defers the first stop.
    let nofix = &r.runs[0];
    assert!(nofix.points[0].refused > 0);
    insta::assert_snapshot!("replay_markdown", markdown(&r));
    let text = csv(&r);
    assert_eq!(text.lines().count(), 1 + 8 * 5);
}

#[test]
fn replay_without_the_stalled_run_names_the_smallest_n() {
    let dir = tempfile::tempdir().unwrap();
    full_runs(dir.path());
    let rows: Vec<_> = load(&[dir.path().join("results.csv")])
        .unwrap()
        .into_iter()
        .filter(|l| !l.row.cell_id.contains("hz100-fix-3TiB"))
        .collect();
    let r = replay(&rows, &[25, 50, 100, 200, 500], 0.5);
    assert_eq!(r.runs.len(), 7);
    // With 2% of the cycles a tick long, L = 3 (a 4-tick cycle) needs 200
    // groups for 0.5% (the published runs have far fewer extra ticks).
    let n = r
        .smallest_within
        .expect("some N keeps every run within 0.5%");
    assert_eq!(n, 200);
    assert!(markdown(&r).contains(&format!(
        "Smallest N with every run within 0.5% (from first group): {n}."
    )));
}

#[test]
fn estimates_and_runs_without_groups_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    full_runs(dir.path());
    let mut rows = load(&[dir.path().join("results.csv")]).unwrap();
    rows[0].row.measured.estimated = true;
    std::fs::remove_file(dir.path().join(&rows[2].row.cell_id).join("groups.csv")).unwrap();
    let r = replay(&rows, &[50], 0.5);
    assert_eq!(r.runs.len(), 6);
    assert_eq!(r.skipped.len(), 2);
    assert!(r.skipped[0].1.contains("an estimate"));
    assert!(r.skipped[1].1.contains("no groups.csv"));
}
