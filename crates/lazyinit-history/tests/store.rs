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
    let every: Vec<i64> = lazyinit_history::migrate::MIGRATIONS
        .iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(every[..7], [1, 2, 3, 4, 5, 6, 7]);
    for url in &urls {
        let mut h = History::open(url).unwrap();
        assert_eq!(h.schema_versions().unwrap(), every, "{url}");
        drop(h);
        // Opening again applies nothing twice.
        let mut h = History::open(url).unwrap();
        assert_eq!(h.schema_versions().unwrap(), every, "{url}");
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

/// A run the history holds is not replaced by a folder whose rows differ
/// (a value edited): the import is refused naming the row and column,
/// and the stored run is as it was; a resumed run's new rows still go
/// in, and a folder with fewer of its rows (a shard of a merged run) is
/// the same run. On both backends.
#[test]
fn a_stored_run_whose_rows_changed_is_refused() {
    let (_d, urls) = both("changed");
    let runs = twenty_nights();
    for url in &urls {
        let mut h = History::open(url).unwrap();
        let mut first = runs[0].clone();
        let resumed = first.rows.pop().unwrap();
        h.import(&first).unwrap();
        let before = h.stored_rows().unwrap();
        let mut edited = runs[0].clone();
        edited.rows[1].measured.first_group_s =
            edited.rows[1].measured.first_group_s.map(|v| v + 1.0);
        let e = h.import(&edited).unwrap_err();
        assert!(e.is_bad_input(), "{url}: {e:?}");
        let line = lazyinit_core::exit::chain_text(&e);
        assert!(
            line.contains("results.csv line 3:") && line.contains("`first_group_s` is"),
            "{url}: {line}"
        );
        assert!(h.refuse_changed(&edited).is_err(), "{url}");
        assert_eq!(
            h.stored_rows().unwrap().len(),
            before.len(),
            "{url}: nothing added"
        );
        // The run resumed: its new row is added, the rest known.
        let mut whole = first.clone();
        whole.rows.push(resumed);
        let o = h.import(&whole).unwrap();
        assert_eq!((o.rows_added, o.rows_known), (1, 3), "{url}");
        let mut part = whole.clone();
        part.rows.truncate(2);
        assert_eq!(h.import(&part).unwrap().rows_known, 2, "{url}");
    }
}

/// What `history check` cannot judge is refused by reading only: a run
/// dated before the history's first, a run of another spec (by name)
/// than its series' latest earlier run; an edited spec of the same name
/// is judged. On both backends.
#[test]
fn what_the_gate_cannot_judge_is_refused() {
    let (_d, urls) = both("judgeable");
    let runs = twenty_nights();
    for url in &urls {
        let mut h = History::open(url).unwrap();
        for r in &runs[1..6] {
            h.import(r).unwrap();
        }
        let line =
            lazyinit_core::exit::chain_text(&h.refuse_unjudgeable(&runs[0], true).unwrap_err());
        assert!(
            line.contains("before the history's first run"),
            "{url}: {line}"
        );
        // A stored run (the history's first) is placed already.
        h.refuse_unjudgeable(&runs[1], true).unwrap();
        let mut other = runs[6].clone();
        for r in &mut other.rows {
            r.run_id = r.run_id.replace("quick-", "nightly-");
        }
        let e = h.refuse_unjudgeable(&other, true).unwrap_err();
        assert!(e.is_bad_input(), "{url}");
        let line = lazyinit_core::exit::chain_text(&e);
        assert!(
            line.contains("is of spec `nightly`") && line.contains("of spec `quick`"),
            "{url}: {line}"
        );
        // Chosen runs (--baseline) may be of any spec.
        h.refuse_unjudgeable(&other, false).unwrap();
        // The same name with another hash: an edited spec, judged.
        let mut edited = runs[6].clone();
        for r in &mut edited.rows {
            r.run_id = "quick-0badc0de".into();
        }
        h.refuse_unjudgeable(&edited, true).unwrap();
        assert_eq!(
            h.stored_rows().unwrap().len(),
            5 * 4,
            "{url}: nothing written"
        );
    }
}

/// `--db` that is another application's database (tables of its own, a
/// `schema_migrations` of another shape) is refused before anything is
/// written; a read-only open of an empty database creates nothing. On
/// both backends.
#[test]
fn another_applications_database_is_not_migrated() {
    use lazyinit_history::Access;
    let (_d, urls) = both("foreign");
    for url in &urls {
        let mut raw = History::open_as(url, Access::Read);
        let line = lazyinit_core::exit::chain_text(raw.as_ref().err().unwrap());
        assert!(
            line.contains("holds no history yet") || line.contains("no such file"),
            "{url}: {line}"
        );
        raw = History::open(url);
        let mut h = raw.unwrap();
        h.backend()
            .batch("DROP TABLE result_rows; DROP TABLE alerts; DROP TABLE runs; DROP TABLE schema_migrations;
                    CREATE TABLE schema_migrations (version TEXT PRIMARY KEY); CREATE TABLE users (name TEXT)")
            .unwrap();
        drop(h);
        for access in [Access::Read, Access::Create] {
            let e = History::open_as(url, access).err().unwrap();
            assert!(e.is_bad_input(), "{url}");
            let line = lazyinit_core::exit::chain_text(&e);
            assert!(
                line.contains(
                    "a database of another application (tables schema_migrations, users)"
                ),
                "{url}: {line}"
            );
        }
    }
}
