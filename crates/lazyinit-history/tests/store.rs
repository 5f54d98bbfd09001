//! The store on both real backends: migrations, import (idempotent,
//! atomic), and the same answers from SQLite and PostgreSQL.

mod common;

use common::*;
use lazyinit_history::render;
use lazyinit_history::{ChangeOptions, DbUrl, History};
use lazyinit_report::cells::Metric;

fn both(tag: &str) -> (tempfile::TempDir, Vec<DbUrl>) {
    let dir = tempfile::tempdir().unwrap();
    let urls = vec![fresh_sqlite(dir.path()), fresh_postgres(tag)];
    (dir, urls)
}

#[test]
fn migrations_apply_once_and_are_recorded() {
    let (_d, urls) = both("migrate");
    for url in &urls {
        let mut h = History::open(url).unwrap();
        assert_eq!(h.schema_versions().unwrap(), vec![1, 2, 3, 4, 5], "{url}");
        drop(h);
        // Opening again applies nothing twice.
        let mut h = History::open(url).unwrap();
        assert_eq!(h.schema_versions().unwrap(), vec![1, 2, 3, 4, 5], "{url}");
    }
}

#[test]
fn import_is_idempotent_and_keeps_every_column() {
    let (_d, urls) = both("idem");
    let runs = twenty_nights();
    for url in &urls {
        let mut h = History::open(url).unwrap();
        let first = h.import(&runs[0]).unwrap();
        assert!(first.new_run);
        assert_eq!((first.rows_added, first.rows_known), (4, 0));
        let again = h.import(&runs[0]).unwrap();
        assert!(!again.new_run, "{url}");
        assert_eq!((again.rows_added, again.rows_known), (0, 4));
        // A resumed run: the same run with a row more.
        let mut fewer = runs[1].clone();
        let last = fewer.rows.pop().unwrap();
        assert_eq!(h.import(&fewer).unwrap().rows_added, 3);
        let resumed = h.import(&runs[1]).unwrap();
        assert_eq!(
            (resumed.new_run, resumed.rows_added, resumed.rows_known),
            (false, 1, 3)
        );
        let stored = h.stored_rows().unwrap();
        assert_eq!(stored.len(), 8, "{url}");
        // Every CSV column back as it was (floats to the bit).
        let back = stored.iter().find(|s| s.row == last);
        assert!(back.is_some(), "{url}: {last:?} not stored as it was");
        let s = back.unwrap();
        assert_eq!(
            s.folder,
            "results/l-stability-timer/".to_string() + s.folder.rsplit('/').next().unwrap()
        );
        assert!(s
            .kernel_build
            .as_deref()
            .unwrap()
            .starts_with("debian-6.1-"));
    }
}

#[test]
fn a_failing_import_leaves_nothing() {
    let (_d, urls) = both("atomic");
    let runs = twenty_nights();
    for url in &urls {
        let mut h = History::open(url).unwrap();
        h.import(&runs[0]).unwrap();
        // The fourth row cannot be stored (a volume no BIGINT holds goes
        // in as NULL, which the schema refuses) after the run and three
        // rows went in: the transaction takes them all back.
        let mut bad = runs[1].clone();
        bad.rows[3].axes.volume.0 = u64::MAX;
        let err = lazyinit_core::exit::chain_text(&h.import(&bad).unwrap_err());
        assert!(
            err.contains("volume_bytes") || err.to_lowercase().contains("null"),
            "{url}: {err}"
        );
        assert_eq!(
            h.stored_rows().unwrap().len(),
            4,
            "{url}: no row of the failed import"
        );
        let runs_left = h.backend().query("SELECT COUNT(*) FROM runs", &[]).unwrap();
        assert_eq!(runs_left[0].int(0), Some(1), "{url}: nor its run");
        // The folder fixed, it imports whole.
        assert_eq!(h.import(&runs[1]).unwrap().rows_added, 4);
    }
}

/// The same commands, the same output, on both backends.
#[test]
fn sqlite_and_postgres_answer_the_same() {
    let (_d, urls) = both("same");
    let runs = twenty_nights();
    let mut outputs = Vec::new();
    for url in &urls {
        let mut h = History::open(url).unwrap();
        for r in &runs {
            h.import(r).unwrap();
        }
        let series = h.series(Metric::FromFirstGroupS, None).unwrap();
        let changes = h
            .changes(Metric::FromFirstGroupS, None, &ChangeOptions::default())
            .unwrap();
        outputs.push((
            render::series_text(&series),
            render::series_csv(&series),
            render::json(&series),
            render::json(&changes),
        ));
    }
    assert_eq!(outputs[0].0, outputs[1].0);
    assert_eq!(outputs[0].1, outputs[1].1);
    assert_eq!(outputs[0].2, outputs[1].2);
    assert_eq!(outputs[0].3, outputs[1].3);
    assert_eq!(outputs[0].1.lines().count(), 1 + 4 * 20);
}

/// The rows are read a page at a time (a long history is never all in
/// memory): pages of 7 rows, which split the nights' 4 rows across
/// pages, give the same rows and series as one page, on both backends;
/// the series built a row at a time are `series::build`'s.
#[test]
fn rows_read_a_page_at_a_time_are_the_same_rows() {
    let (_d, urls) = both("paged");
    for url in &urls {
        let mut h = History::open(url).unwrap();
        for r in &twenty_nights() {
            h.import(r).unwrap();
        }
        let whole = h.stored_rows().unwrap();
        let series = h.series(Metric::FromFirstGroupS, None).unwrap();
        assert_eq!(whole.len(), 80, "{url}");
        h.set_page_rows(7);
        assert_eq!(h.stored_rows().unwrap(), whole, "{url}");
        assert_eq!(
            h.series(Metric::FromFirstGroupS, None).unwrap(),
            series,
            "{url}"
        );
        assert_eq!(
            lazyinit_history::series::build(&whole, Metric::FromFirstGroupS, None),
            series,
            "{url}"
        );
        h.set_page_rows(80);
        assert_eq!(
            h.stored_rows().unwrap(),
            whole,
            "{url}: a last page that is full"
        );
    }
}
