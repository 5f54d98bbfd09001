//! `history` end to end on real databases: every committed run imports,
//! a folder whose rows are not its spec's is refused, and the nightly job
//! (run -> check) fails on an L change until the alert is acknowledged.
//! PostgreSQL is the server scripts/test.sh starts (LAZYINIT_TEST_POSTGRES);
//! without it these tests fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lazyinit-bench"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn history(args: &[&str]) -> Output {
    Command::new(bin())
        .current_dir(repo())
        .arg("history")
        .args(args)
        .env_remove("LAZYINIT_HISTORY")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

use lazyinit_core::testing::fresh_postgres;

/// Every run folder under results/ (a results.csv beside its spec.toml: a
/// bisect folder's own results.csv gathers its runs, which are imported
/// from its runs/).
fn committed_runs() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.join("results.csv").is_file() && p.join("spec.toml").is_file() {
                    out.push(p.strip_prefix(repo()).unwrap().display().to_string());
                }
                walk(&p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo().join("results"), &mut out);
    out.sort();
    out
}

/// What a committed run folder is, by what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Measured rows only, all ok, of a packaged kernel, not a shard, a
    /// merge or a bisect's run.
    Full,
    /// Some row an estimate (`estimated` true).
    Estimates,
    /// A merged run (merge.toml).
    Merged,
    /// A shard of a run (shard.toml).
    Shard,
    /// Some row not ok.
    Failures,
    /// A run in a bisect's runs/ folder.
    BisectRun,
    /// A kernel built from a tree of the host (a path source, not a
    /// tarball).
    Tree,
}

fn kinds(run: &str) -> std::collections::BTreeSet<Kind> {
    let dir = repo().join(run);
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (status, estimated, source) = (col("status"), col("estimated"), col("kernel_source"));
    let mut out = std::collections::BTreeSet::new();
    let bisect = dir.parent().is_some_and(|p| {
        p.file_name().is_some_and(|n| n == "runs")
            && p.parent().is_some_and(|b| b.join("bisect.log").is_file())
    });
    if bisect {
        out.insert(Kind::BisectRun);
    }
    if dir.join("merge.toml").is_file() {
        out.insert(Kind::Merged);
    }
    if dir.join("shard.toml").is_file() {
        out.insert(Kind::Shard);
    }
    for l in lines {
        // No committed field holds a comma before kernel_source or in
        // status/estimated's place; a row with fewer fields reads as blank.
        let f: Vec<&str> = l.split(',').collect();
        let get = |c: Option<usize>| c.and_then(|c| f.get(c).copied()).unwrap_or("");
        if get(status) != "ok" {
            out.insert(Kind::Failures);
        }
        if get(estimated) == "true" {
            out.insert(Kind::Estimates);
        }
        let s = get(source);
        if s.starts_with('/') && !s.ends_with(".tar.xz") && !s.ends_with(".tar.gz") {
            out.insert(Kind::Tree);
        }
    }
    if out.is_empty() {
        out.insert(Kind::Full);
    }
    out
}

/// The committed runs PostgreSQL is asked about: one of each kind (the
/// one of fewest rows), a merged run with all its shards, and the whole
/// runs/ folder of one bisect.
fn runs_of_every_kind(runs: &[String]) -> Vec<String> {
    let rows = |r: &String| {
        std::fs::read_to_string(repo().join(r).join("results.csv"))
            .unwrap()
            .lines()
            .count()
    };
    let mut pick = std::collections::BTreeSet::new();
    for kind in [Kind::Full, Kind::Estimates, Kind::Failures, Kind::Tree] {
        if let Some(r) = runs
            .iter()
            .filter(|r| kinds(r).contains(&kind) && !kinds(r).contains(&Kind::BisectRun))
            .min_by_key(|r| (rows(r), r.to_string()))
        {
            pick.insert(r.clone());
        }
    }
    if let Some(merged) = runs.iter().find(|r| kinds(r).contains(&Kind::Merged)) {
        let parent = Path::new(merged).parent().unwrap();
        pick.insert(merged.clone());
        pick.extend(
            runs.iter()
                .filter(|r| {
                    Path::new(r).parent() == Some(parent) && kinds(r).contains(&Kind::Shard)
                })
                .cloned(),
        );
    }
    if let Some(first) = runs.iter().find(|r| kinds(r).contains(&Kind::BisectRun)) {
        let folder = Path::new(first).parent().unwrap();
        pick.extend(
            runs.iter()
                .filter(|r| Path::new(r).parent() == Some(folder))
                .cloned(),
        );
    }
    pick.into_iter().collect()
}

/// Imports `runs` into `db` twice: each a new run the first time (each
/// shard of a merged run imported before it the same run, its rows
/// already there), a known run with nothing added the second; then
/// `show --format csv` and `changes --format json`.
fn import_twice(db: &str, runs: &[String]) -> (Vec<u8>, Vec<u8>) {
    let mut args = vec!["import", "--db", db];
    args.extend(runs.iter().map(String::as_str));
    let o = history(&args);
    assert!(o.status.success(), "{db}: {}", text(&o));
    // quick-shards/merged sorts before its shards.
    let out = text(&o);
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(" run (")).collect();
    assert_eq!(lines.len(), runs.len(), "{out}");
    for l in &lines {
        // A shard after its merge: one run, nothing new in it.
        match l.starts_with("results/quick-shards/shard-") {
            true => assert!(l.contains(": known run (0 rows added"), "{l}"),
            false => assert!(l.contains(": new run ("), "{l}"),
        }
    }
    let again = history(&args);
    assert!(again.status.success());
    assert_eq!(
        text(&again).matches(": known run (0 rows added").count(),
        runs.len()
    );
    let show = history(&["show", "--db", db, "--format", "csv"]);
    assert!(show.status.success(), "{}", text(&show));
    let changes = history(&["changes", "--db", db, "--format", "json"]);
    assert!(changes.status.success(), "{}", text(&changes));
    (show.stdout, changes.stdout)
}

/// Every committed run imports (and again as known) on SQLite; SQLite and
/// PostgreSQL answer the same on a run of every kind of folder (all of
/// them on PostgreSQL took most of this test's time in CI).
#[test]
fn every_committed_run_imports_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    let runs = committed_runs();
    assert!(runs.len() >= 50, "{runs:?}");
    let all = format!("sqlite:{}", dir.path().join("all.sqlite").display());
    import_twice(&all, &runs);

    let subset = runs_of_every_kind(&runs);
    let covered: std::collections::BTreeSet<Kind> = subset.iter().flat_map(|r| kinds(r)).collect();
    let anywhere: std::collections::BTreeSet<Kind> = runs.iter().flat_map(|r| kinds(r)).collect();
    // These kinds are committed today; a choice gone stale fails here.
    for k in [
        Kind::Full,
        Kind::Estimates,
        Kind::Merged,
        Kind::Shard,
        Kind::BisectRun,
    ] {
        assert!(covered.contains(&k), "no {k:?} run among {subset:?}");
    }
    // And the others if some committed run is one.
    assert_eq!(covered, anywhere, "{subset:?}");
    assert!(subset.iter().any(|r| r.ends_with("/merged")));
    assert!(
        subset.len() * 2 < runs.len(),
        "{} of {} runs: not a subset",
        subset.len(),
        runs.len()
    );
    let sqlite = format!("sqlite:{}", dir.path().join("some.sqlite").display());
    assert_eq!(
        import_twice(&sqlite, &subset),
        import_twice(&fresh_postgres("all"), &subset),
        "the same output on SQLite and PostgreSQL"
    );
}

/// A copy of a committed run folder (results.csv and spec.toml).
fn copy_run(from: &str, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in ["results.csv", "spec.toml", "command.txt"] {
        std::fs::copy(repo().join(from).join(f), to.join(f)).unwrap();
    }
}

#[test]
fn a_folder_whose_rows_are_not_its_specs_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    copy_run("results/l-stability-timer/matrix-1", &run);
    let db = dir.path().join("h.sqlite");
    let db_arg = format!("sqlite:{}", db.display());
    let import = |run: &Path| history(&["import", "--db", &db_arg, run.to_str().unwrap()]);
    // A row of a cell its spec does not plan (HZ 300).
    let csv = std::fs::read_to_string(run.join("results.csv")).unwrap();
    std::fs::write(
        run.join("results.csv"),
        csv.replace("hz100-fix-64GiB-r1", "hz300-fix-64GiB-r1"),
    )
    .unwrap();
    let o = import(&run);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let msg = text(&o);
    assert!(
        msg.contains("cell `qemu-arm64-debian-6.1-hz300-fix-64GiB-r1` is not one spec.toml plans"),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1, "one line: {msg}");
    assert!(!db.exists(), "nothing created");
    // Rows of another spec (the spec edited after the run).
    std::fs::write(run.join("results.csv"), csv).unwrap();
    let spec = std::fs::read_to_string(run.join("spec.toml")).unwrap();
    std::fs::write(run.join("spec.toml"), spec.replace("    \"arm64\",\n", "")).unwrap();
    let o = import(&run);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is not this spec's"), "{}", text(&o));
    assert!(!db.exists(), "nothing created");
    // A good folder beside a bad one: nothing of either is imported.
    let good = dir.path().join("good");
    copy_run("results/l-stability-timer/matrix-2", &good);
    let o = history(&[
        "import",
        "--db",
        &db_arg,
        good.to_str().unwrap(),
        run.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!db.exists(), "nothing created");
    // Not a run folder at all.
    let o = import(dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!db.exists());
    // A database name that is neither.
    let o = history(&["show", "--db", "mysql://x"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// The nights of results/l-stability-timer in the order they ran.
fn nights() -> Vec<String> {
    let mut runs: Vec<(String, String)> = committed_runs()
        .into_iter()
        .filter(|r| r.starts_with("results/l-stability-timer/"))
        .map(|r| {
            let csv = std::fs::read_to_string(repo().join(&r).join("results.csv")).unwrap();
            let first = csv
                .lines()
                .nth(1)
                .unwrap()
                .split(',')
                .nth(20)
                .unwrap()
                .to_string();
            (first, r)
        })
        .collect();
    runs.sort();
    runs.into_iter().map(|(_, r)| r).collect()
}

/// The nightly job, run -> check: a quiet night passes; a night whose
/// x86_64 fix cell's kernel chose L = 7 (rows of results/distro-config-
/// 64GiB-fix) fails with JUnit, until its alert is acknowledged.
#[test]
fn check_fails_on_an_l_change_until_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let nights = nights();
    assert_eq!(nights.len(), 20);
    for db in [
        format!("sqlite:{}", dir.path().join("h.sqlite").display()),
        fresh_postgres("check"),
    ] {
        let mut args = vec!["import", "--db", db.as_str()];
        args.extend(nights[..13].iter().map(String::as_str));
        assert!(history(&args).status.success());
        // Night 14 as it ran: passes.
        let quiet = history(&["check", "--db", &db, &nights[13]]);
        assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet));
        assert_eq!(text(&quiet).matches("PASS").count(), 4, "{}", text(&quiet));
        // Night 15 with the x86_64 fix row of another L.
        let night = dir.path().join(format!("night15-{}", db.len()));
        copy_run(&nights[14], &night);
        graft_l7(&night, &l7_row());
        let junit = dir.path().join("check.xml");
        let night_s = night.to_str().unwrap();
        let fail = history(&[
            "check",
            "--db",
            &db,
            night_s,
            "--format",
            "junit",
            "--out",
            junit.to_str().unwrap(),
        ]);
        assert_eq!(fail.status.code(), Some(1), "{}", text(&fail));
        let xml = std::fs::read_to_string(&junit).unwrap();
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let failures: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("failure"))
            .collect();
        assert_eq!(failures.len(), 1, "{xml}");
        let msg = failures[0].attribute("message").unwrap();
        assert!(
            msg.contains("L [8] -> [7]") || msg.contains("off its level"),
            "{msg}"
        );
        let id = msg
            .split('[')
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap()
            .to_string();
        assert_eq!(id.len(), 8, "{msg}");
        let ack = history(&[
            "ack",
            "--db",
            &db,
            &id,
            "--note",
            "L = 7 expected: z1 under 3.2 ms",
        ]);
        assert!(ack.status.success(), "{}", text(&ack));
        let pass = history(&["check", "--db", &db, night_s]);
        assert_eq!(pass.status.code(), Some(0), "{}", text(&pass));
        let unknown = history(&["ack", "--db", &db, "deadbeef", "--note", "x"]);
        assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));
    }
}

/// The JUnit test cases of a check: (name, the kind of its child).
fn junit_cases(xml: &str) -> Vec<(String, String)> {
    let doc = roxmltree::Document::parse(xml).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .map(|c| {
            let kind = c
                .children()
                .find(|n| n.is_element())
                .map(|n| n.tag_name().name().to_string())
                .unwrap_or_default();
            (c.attribute("name").unwrap().to_string(), kind)
        })
        .collect()
}

/// A night whose x86_64 fix cell failed: the cell is an ERROR (exit 1, a
/// JUnit `error`), the other three series judged as ever.
#[test]
fn a_failed_cell_of_the_plan_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let nights = nights();
    let db = format!("sqlite:{}", dir.path().join("h.sqlite").display());
    let mut args = vec!["import", "--db", db.as_str()];
    args.extend(nights[..13].iter().map(String::as_str));
    assert!(history(&args).status.success());
    let night = dir.path().join("night14");
    copy_run(&nights[13], &night);
    let csv = std::fs::read_to_string(night.join("results.csv")).unwrap();
    let failed: String = csv
        .lines()
        .map(|l| {
            if l.contains("x86_64-debian-6.1-hz250-fix") {
                l.replace(",ok,", ",failed,")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(failed, csv.trim_end());
    std::fs::write(night.join("results.csv"), failed + "\n").unwrap();
    let junit = dir.path().join("check.xml");
    let o = history(&[
        "check",
        "--db",
        &db,
        night.to_str().unwrap(),
        "--format",
        "junit",
        "--out",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("ERROR"), "{}", text(&o));
    let cases = junit_cases(&std::fs::read_to_string(&junit).unwrap());
    assert_eq!(cases.len(), 4, "{cases:?}");
    let errors: Vec<_> = cases.iter().filter(|(_, k)| k == "error").collect();
    assert_eq!(errors.len(), 1, "{cases:?}");
    assert!(
        errors[0].0.contains("x86_64") && errors[0].0.contains("/fix/"),
        "{cases:?}"
    );
    assert_eq!(cases.iter().filter(|(_, k)| k == "system-out").count(), 3);
}

/// A run with no history: UNKNOWN with its reason, a JUnit `skipped`,
/// exit 0; `--require-history` makes it exit 1.
#[test]
fn a_run_without_history_is_unknown_and_can_be_required() {
    let dir = tempfile::tempdir().unwrap();
    let nights = nights();
    let db = format!("sqlite:{}", dir.path().join("h.sqlite").display());
    let junit = dir.path().join("check.xml");
    let o = history(&[
        "check",
        "--db",
        &db,
        &nights[0],
        "--format",
        "junit",
        "--out",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(text(&o).matches("UNKNOWN").count(), 4, "{}", text(&o));
    assert!(text(&o).contains("at least 3 are needed"), "{}", text(&o));
    let cases = junit_cases(&std::fs::read_to_string(&junit).unwrap());
    assert_eq!(cases.len(), 4, "{cases:?}");
    assert!(cases.iter().all(|(_, k)| k == "skipped"), "{cases:?}");
    let o = history(&["check", "--db", &db, &nights[0], "--require-history"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

/// The README's `history import results/*/`: every run under them, a
/// line for each folder that is not a run and why; exit 0.
#[test]
fn import_of_every_results_folder_imports_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("h.sqlite").display());
    let mut folders: Vec<String> = std::fs::read_dir(repo().join("results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| format!("{}/", p.strip_prefix(repo()).unwrap().display()))
        .collect();
    folders.sort();
    let mut args = vec!["import", "--db", db.as_str()];
    args.extend(folders.iter().map(String::as_str));
    let o = history(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    let runs = out.lines().filter(|l| l.contains(" run (")).count();
    assert_eq!(runs, committed_runs().len(), "{out}");
    assert!(
        out.contains("results/bisect-ci-17: not a run folder (a bisect's folder"),
        "{out}"
    );
    assert!(
        out.contains("results/bad-input: not a run folder (no spec.toml or results.csv), and no run folder under it: skipped"),
        "{out}"
    );
}

/// The x86_64 HZ=250 with-fix row of a committed run whose kernel chose
/// L = 7.
fn l7_row() -> String {
    let other = std::fs::read_to_string(repo().join("results/distro-config-64GiB-fix/results.csv"))
        .unwrap();
    other
        .lines()
        .find(|l| l.contains("hz250-fix") && l.contains(",ok,"))
        .unwrap()
        .to_string()
}

/// The run folder `night` with its x86_64 fix row's measurement replaced
/// by `l7`'s: its identity (run, cell, kernel, start) stays.
fn graft_l7(night: &Path, l7: &str) {
    let csv = std::fs::read_to_string(night.join("results.csv")).unwrap();
    let mine = csv
        .lines()
        .find(|l| l.contains("x86_64-debian-6.1-hz250-fix"))
        .unwrap();
    let (m, o): (Vec<&str>, Vec<&str>) = (mine.split(',').collect(), l7.split(',').collect());
    let mixed: Vec<&str> = (0..m.len())
        .map(|i| {
            if [0, 1, 6, 7, 20].contains(&i) {
                m[i]
            } else {
                o[i]
            }
        })
        .collect();
    std::fs::write(
        night.join("results.csv"),
        csv.replace(mine, &mixed.join(",")),
    )
    .unwrap();
}

/// The 20 nights with the x86_64 fix cell's row from night 14 on taken
/// from a run whose kernel chose L = 7 (its identity kept): copies under
/// `dir` for nights 14..20, the committed folders before.
fn nights_with_an_l_change(dir: &Path) -> Vec<String> {
    let l7 = l7_row();
    let mut out = Vec::new();
    for (i, n) in nights().into_iter().enumerate() {
        if i < 13 {
            out.push(n);
            continue;
        }
        let night = dir.join(format!("night{}", i + 1));
        copy_run(&n, &night);
        graft_l7(&night, &l7);
        out.push(night.display().to_string());
    }
    out
}

/// `history publish` (its default metric, `check`'s and `changes`'):
/// the alert id a series page shows is the database's, with its state,
/// and `history ack` takes it as copied from the page.
#[test]
fn the_sites_alert_ids_are_the_databases_and_ack_takes_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("h.sqlite").display());
    let mut args = vec!["import".to_string(), "--db".into(), db.clone()];
    args.extend(nights_with_an_l_change(dir.path()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(history(&args).status.success());
    let site = dir.path().join("site");
    let publish = || {
        let _ = std::fs::remove_dir_all(&site);
        let o = history(&["publish", "--db", &db, "--out", site.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o));
        let mut pages = String::new();
        for p in std::fs::read_dir(site.join("series")).unwrap() {
            pages.push_str(&std::fs::read_to_string(p.unwrap().path()).unwrap());
        }
        pages
    };
    let pages = publish();
    let cell = pages
        .split("<td>")
        .find(|c| c.contains(" (new)</td>"))
        .unwrap_or_else(|| panic!("no alert with its state on any page"));
    let id = cell.split(' ').next().unwrap().to_string();
    assert_eq!(id.len(), 8, "{cell}");
    let ack = history(&["ack", "--db", &db, &id, "--note", "L = 7 expected"]);
    assert_eq!(ack.status.code(), Some(0), "{}", text(&ack));
    assert!(publish().contains(&format!("{id} (acknowledged)")));
}

/// The bisect line `history changes` prints for a git-tree nightly runs
/// as printed: `bisect` takes its flags and settings, resolves its
/// commits in the tree, and stops only at the results folder this test
/// holds with other arguments (nothing is built or booted).
#[test]
fn the_bisect_line_changes_prints_runs_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("linux");
    std::fs::create_dir(&tree).unwrap();
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .arg("-C")
            .arg(&tree)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    let nights = nights_with_an_l_change(dir.path());
    let mut commits = Vec::new();
    for i in 0..nights.len() {
        std::fs::write(tree.join("night"), i.to_string()).unwrap();
        git(&["add", "night"]);
        git(&["commit", "-q", "-m", &format!("night {}", i + 1)]);
        commits.push(git(&["rev-parse", "HEAD"]));
    }
    let db_file = dir.path().join("h.sqlite");
    let db = format!("sqlite:{}", db_file.display());
    let mut args = vec!["import".to_string(), "--db".into(), db.clone()];
    args.extend(nights.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(history(&args).status.success());
    // Each night's x86_64 fix cell as built from the tree, a commit a night.
    let sql = rusqlite::Connection::open(&db_file).unwrap();
    let runs: Vec<String> = {
        let mut q = sql
            .prepare("SELECT run_key FROM runs ORDER BY first_started_at")
            .unwrap();
        q.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(runs.len(), commits.len());
    for (run, commit) in runs.iter().zip(&commits) {
        sql.execute(
            "UPDATE result_rows SET kernel_source = ?1, kernel_source_identity = ?2
             WHERE run_key = ?3 AND cell_id LIKE '%x86_64%hz250-fix%'",
            (tree.display().to_string(), format!("git:{commit}"), run),
        )
        .unwrap();
    }
    let o = history(&["changes", "--db", &db]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    // The series is named by its tree, not by where the tree lies.
    let tree_s = tree.display().to_string();
    let heads: Vec<&str> = out.lines().filter(|l| l.starts_with('[')).collect();
    assert!(!heads.is_empty(), "{out}");
    assert!(
        heads
            .iter()
            .all(|l| !l.contains(&tree_s) && l.contains("/tree-")),
        "{out}"
    );
    let show = text(&history(&["show", "--db", &db, "--format", "csv"]));
    assert!(!show.contains(&format!("{tree_s}/")), "{show}");
    let line = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("to name the commit: "))
        .unwrap_or_else(|| panic!("no bisect line: {out}"));
    assert!(
        line.contains(&format!("--good {} --bad {}", commits[12], commits[13])),
        "{line}"
    );
    // On the series' own clock (these nights are the real clock's).
    assert!(line.ends_with(" --clock real"), "{line}");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..2], ["lazyinit-bench", "bisect"], "{line}");
    // The results folder the bisect would take, held by another bisection.
    let cwd = dir.path().join("cwd");
    let cell = words[words.iter().position(|w| *w == "--cell").unwrap() + 1];
    let parts: Vec<&str> = cell.split(':').collect();
    let held = cwd.join("results").join(format!(
        "bisect-{}-{}-{}-hz{}-{}",
        &commits[12][..12],
        &commits[13][..12],
        parts[0],
        parts[1],
        parts[2]
    ));
    std::fs::create_dir_all(&held).unwrap();
    std::fs::write(held.join("bisect.args"), "another bisection\n").unwrap();
    let o = Command::new(bin())
        .current_dir(&cwd)
        .args(&words[1..])
        .output()
        .unwrap();
    assert!(
        text(&o).contains("holds a bisection of other arguments"),
        "{line}: {}",
        text(&o)
    );
}

/// `check --baseline`: the run judged against the chosen runs, said so;
/// a selector that is none is bad input (exit 2).
#[test]
fn check_against_a_baseline_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let nights = nights();
    let db = format!("sqlite:{}", dir.path().join("h.sqlite").display());
    let mut args = vec!["import", "--db", db.as_str()];
    args.extend(nights[..13].iter().map(String::as_str));
    assert!(history(&args).status.success());
    let o = history(&[
        "check",
        "--db",
        &db,
        &nights[13],
        "--baseline",
        "kernel:6.1.192",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("against the baseline kernel:6.1.192"), "{out}");
    assert_eq!(
        out.matches("13 baseline run(s) of this cell and testbed")
            .count(),
        4,
        "{out}"
    );
    // The same runs chosen by the label they were imported with.
    let mut args = vec!["import", "--db", db.as_str(), "--label", "6.1.192"];
    args.extend(nights[..3].iter().map(String::as_str));
    let o = history(&args);
    assert_eq!(
        text(&o).matches(", labelled 6.1.192").count(),
        3,
        "{}",
        text(&o)
    );
    let o = history(&[
        "check",
        "--db",
        &db,
        &nights[13],
        "--baseline",
        "label:6.1.192",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        text(&o).matches("3 baseline run(s)").count(),
        4,
        "{}",
        text(&o)
    );
    let o = history(&["check", "--db", &db, &nights[13], "--baseline", "release"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Issue 41: a PostgreSQL that accepts and never answers (here a listener
/// on loopback that holds every socket) ends every history command within
/// its deadline, the URL's connect_timeout or 10 s without one: one line,
/// exit 3 (infrastructure), no hang.
#[test]
fn a_silent_postgres_ends_every_command_within_its_deadline() {
    use std::time::{Duration, Instant};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        // Bounded: the commands below connect 7 times.
        for s in listener.incoming().take(32) {
            held.push(s);
        }
        std::thread::sleep(Duration::from_secs(60));
    });
    let quick = format!("postgres://u@127.0.0.1:{port}/h?connect_timeout=2");
    let plain = format!("postgres://u@127.0.0.1:{port}/h");
    let site = tempfile::tempdir().unwrap();
    let out = site.path().join("site");
    let run = "results/nightly-quiet";
    let cases: Vec<(Vec<String>, u64)> = vec![
        (
            vec!["import".into(), "--db".into(), quick.clone(), run.into()],
            2,
        ),
        (vec!["show".into(), "--db".into(), quick.clone()], 2),
        (vec!["changes".into(), "--db".into(), quick.clone()], 2),
        (
            vec!["check".into(), "--db".into(), quick.clone(), run.into()],
            2,
        ),
        (
            vec![
                "ack".into(),
                "--db".into(),
                quick.clone(),
                "deadbeef".into(),
                "--note".into(),
                "x".into(),
            ],
            2,
        ),
        (
            vec![
                "publish".into(),
                "--db".into(),
                quick.clone(),
                "--out".into(),
                out.display().to_string(),
            ],
            2,
        ),
        (vec!["show".into(), "--db".into(), plain.clone()], 10),
    ];
    let runs: Vec<_> = cases
        .into_iter()
        .map(|(args, secs)| {
            std::thread::spawn(move || {
                let t = Instant::now();
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let o = history(&args);
                (args.join(" "), secs, t.elapsed(), o)
            })
        })
        .collect();
    for r in runs {
        let (args, secs, took, o) = r.join().unwrap();
        let msg = text(&o);
        assert_eq!(o.status.code(), Some(3), "{args}: {msg}");
        assert_eq!(msg.trim_end().lines().count(), 1, "{args}: one line: {msg}");
        assert!(
            msg.contains(&format!("did not answer within {secs} s")),
            "{args}: {msg}"
        );
        // The deadline, plus what reading the run folder takes before the
        // connection (7.7 s for an import beside four other tests here): a
        // hang is unbounded, so the margin does not hide one.
        assert!(
            took < Duration::from_secs(secs + 20),
            "{args} took {took:?}, deadline {secs} s"
        );
    }
    assert!(!out.exists(), "publish wrote nothing");
}

/// `nights()[i]` copied to `dir/name`, its results.csv passed through `edit`.
fn edited_night(i: usize, dir: &Path, name: &str, edit: impl Fn(String) -> String) -> String {
    let to = dir.join(name);
    copy_run(&nights()[i], &to);
    let csv = std::fs::read_to_string(to.join("results.csv")).unwrap();
    std::fs::write(to.join("results.csv"), edit(csv)).unwrap();
    to.display().to_string()
}

/// `history check` judges the folder it is given, or refuses it with one
/// line and exit 2, the history as it was: a stored run whose values
/// changed, a run dated 1970 or before the history's first run, a run of
/// another spec than its series', a torn last line (whole fields or
/// not). On both backends; then the next night is judged as before.
#[test]
fn check_refuses_what_it_cannot_judge_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let nights = nights();
    // Night 7 with the spec's name changed: its run id is the renamed
    // spec's (the harness's own hash, read from import's refusal).
    let other = d.join("other");
    copy_run(&nights[7], &other);
    let spec = std::fs::read_to_string(other.join("spec.toml")).unwrap();
    std::fs::write(
        other.join("spec.toml"),
        spec.replace("name = \"quick\"", "name = \"nightly\""),
    )
    .unwrap();
    let o = history(&[
        "import",
        "--db",
        "sqlite:/nonexistent/x",
        other.to_str().unwrap(),
    ]);
    let msg = text(&o);
    let id = msg
        .split("this spec's (`")
        .nth(1)
        .and_then(|s| s.split('`').next())
        .unwrap_or_else(|| panic!("{msg}"));
    assert!(id.starts_with("nightly-"), "{msg}");
    let csv = std::fs::read_to_string(other.join("results.csv")).unwrap();
    let old_id = csv
        .lines()
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .to_string();
    std::fs::write(other.join("results.csv"), csv.replace(&old_id, id)).unwrap();
    let other = other.display().to_string();
    let changed = edited_night(3, d, "changed", |csv| {
        // Night 3's second row with another first_group_s (column 28;
        // a digit appended to it can parse to the same f64).
        let mut lines: Vec<String> = csv.lines().map(String::from).collect();
        let mut f: Vec<String> = lines[2].split(',').map(String::from).collect();
        f[27] = "3.25".into();
        lines[2] = f.join(",");
        lines.join("\n") + "\n"
    });
    let epoch = edited_night(8, d, "epoch", |csv| {
        csv.replace("2026-11-30T", "1970-01-01T")
    });
    let early = edited_night(8, d, "early", |csv| {
        csv.replace("2026-11-30T", "2026-11-02T")
    });
    let torn = edited_night(8, d, "torn", |csv| csv.trim_end_matches('\n').to_string());
    let short = edited_night(8, d, "short", |csv| csv[..csv.len() - 30].to_string());
    for db in [
        format!("sqlite:{}", d.join("h.sqlite").display()),
        fresh_postgres("judge"),
    ] {
        for n in &nights[..4] {
            let o = history(&["check", "--db", &db, n]);
            assert!(o.status.code().is_some_and(|c| c < 2), "{db}: {}", text(&o));
        }
        let before = history(&["show", "--db", &db, "--format", "csv"]).stdout;
        let cases = [
            (&changed, "with other values: cell"),
            (
                &epoch,
                "is before 2000-01-01T00:00:00Z: the host's clock was not set",
            ),
            (&early, "before the history's first run"),
            (&other, "is of spec `nightly`, and cell"),
            (&torn, "the last line is torn"),
            (&short, "the last line is torn"),
        ];
        for (folder, says) in cases {
            let o = history(&["check", "--db", &db, folder]);
            let msg = text(&o);
            assert_eq!(o.status.code(), Some(2), "{db} {folder}: {msg}");
            assert!(msg.contains(says), "{db} {folder}: {msg}");
            assert_eq!(msg.lines().count(), 1, "{db}: one line: {msg}");
            let after = history(&["show", "--db", &db, "--format", "csv"]).stdout;
            assert_eq!(after, before, "{db} {folder}: the history as it was");
        }
        // `import` refuses the changed run and the torn one too.
        for folder in [&changed, &torn] {
            let o = history(&["import", "--db", &db, &nights[4], folder]);
            assert_eq!(o.status.code(), Some(2), "{db}: {}", text(&o));
            assert!(
                !text(&o).contains("new run"),
                "{db}: nothing imported: {}",
                text(&o)
            );
        }
        // With chosen runs, a run of another spec is judged.
        let o = history(&[
            "check",
            "--db",
            &db,
            &other,
            "--baseline",
            "date:2026-11-30..",
        ]);
        assert!(o.status.code().is_some_and(|c| c < 2), "{db}: {}", text(&o));
        let o = history(&["check", "--db", &db, &nights[4]]);
        assert!(o.status.code().is_some_and(|c| c < 2), "{db}: {}", text(&o));
    }
}

/// `--db` that is not a history is refused with one line naming it and
/// what is wrong, exit 2, before anything is written: a folder, a text
/// file, /dev/null, another application's SQLite (not switched to WAL),
/// a path whose folder is a typo (nothing created). A read-only command
/// creates no database; an import creates one where the folder exists.
#[test]
fn a_db_that_is_not_a_history_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let night = &nights()[0];
    let text_file = d.join("notes.txt");
    std::fs::write(&text_file, "a person's notes\n").unwrap();
    let other = d.join("other.sqlite");
    let c = rusqlite::Connection::open(&other).unwrap();
    c.execute_batch("CREATE TABLE contacts (name TEXT); INSERT INTO contacts VALUES ('x');")
        .unwrap();
    drop(c);
    let other_bytes = std::fs::read(&other).unwrap();
    let typo = d.join("typo/h.sqlite");
    let missing = d.join("missing.sqlite");
    let cases: Vec<(&Path, &str)> = vec![
        (d, "a folder, not a history file"),
        (&text_file, "not a SQLite database"),
        (Path::new("/dev/null"), "not a regular file"),
        (
            &other,
            "a database of another application (tables contacts)",
        ),
        (&typo, "does not exist (a typo?): nothing was created"),
    ];
    let site = d.join("site");
    let commands = |db: &str| -> Vec<Vec<String>> {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect();
        vec![
            s(&["import", "--db", db, night]),
            s(&["check", "--db", db, night]),
            s(&["show", "--db", db]),
            s(&["changes", "--db", db]),
            s(&["ack", "--db", db, "deadbeef", "--note", "x"]),
            s(&["publish", "--db", db, "--out", site.to_str().unwrap()]),
        ]
    };
    for (path, says) in &cases {
        let db = format!("sqlite:{}", path.display());
        for args in commands(&db) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = history(&args);
            let msg = text(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {msg}");
            assert!(
                msg.contains(&format!("--db {db}: ")) && msg.contains(says),
                "{args:?}: {msg}"
            );
            assert_eq!(msg.lines().count(), 1, "{args:?}: {msg}");
        }
    }
    assert_eq!(
        std::fs::read(&other).unwrap(),
        other_bytes,
        "another app's database untouched"
    );
    assert!(!d.join("other.sqlite-wal").exists(), "not switched to WAL");
    assert!(!d.join("typo").exists(), "no folder created");
    assert_eq!(
        std::fs::read_to_string(&text_file).unwrap(),
        "a person's notes\n"
    );
    // Read-only commands on a database that does not exist create none.
    let db = format!("sqlite:{}", missing.display());
    for args in &commands(&db)[2..] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = history(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            text(&o).contains("no such file, and this command creates none"),
            "{}",
            text(&o)
        );
        assert!(!missing.exists(), "{args:?} created it");
    }
    assert!(!site.exists());
    // An import creates it, its folder being there.
    let o = history(&["import", "--db", &db, night]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(history(&["show", "--db", &db]).status.success());
    // PostgreSQL: another application's database is not migrated, and a
    // read of an empty one creates no table.
    let pg = fresh_postgres("foreign");
    let o = history(&["show", "--db", &pg]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("holds no history yet"), "{}", text(&o));
    let mut c = postgres::Client::connect(&pg, postgres::NoTls).unwrap();
    let tables = |c: &mut postgres::Client| -> i64 {
        c.query_one(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()",
            &[],
        )
        .unwrap()
        .get(0)
    };
    assert_eq!(tables(&mut c), 0, "show created nothing");
    c.batch_execute("CREATE TABLE contacts (name TEXT)")
        .unwrap();
    for args in commands(&pg) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = history(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            text(&o).contains("a database of another application (tables contacts)"),
            "{}",
            text(&o)
        );
    }
    assert_eq!(tables(&mut c), 1, "nothing migrated into it");
}

/// A sharded run is one run in the history whatever is imported and in
/// what order (results/quick-shards: its two shards and their merge, one
/// import each): the first import is the run, the others join it and add
/// only the rows not there yet; the history then reads the same in every
/// order (but for the run's key, the first import's), on both backends.
#[test]
fn a_sharded_run_is_one_run_whatever_is_imported_in_any_order() {
    let dir = tempfile::tempdir().unwrap();
    let s1 = "results/quick-shards/shard-1-of-2";
    let s2 = "results/quick-shards/shard-2-of-2";
    let merged = "results/quick-shards/merged";
    let orders: [&[&str]; 7] = [
        &[merged, s1, s2],
        &[s1, merged, s2],
        &[s1, s2, merged],
        &[s2, s1, merged],
        &[s2, merged, s1],
        &[merged],
        &[s2, s1],
    ];
    // The run's key column out, the rest as show prints it.
    let without_key = |csv: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(csv)
            .lines()
            .map(|l| {
                let mut f: Vec<&str> = l.split(',').collect();
                f.remove(2);
                f.join(",")
            })
            .collect()
    };
    for (i, order) in orders.iter().enumerate() {
        let mut shown = Vec::new();
        for db in [
            format!(
                "sqlite:{}",
                dir.path().join(format!("{i}.sqlite")).display()
            ),
            fresh_postgres(&format!("shards{i}")),
        ] {
            let mut rows = 0;
            for (n, folder) in order.iter().enumerate() {
                let o = history(&["import", "--db", &db, folder]);
                assert!(o.status.success(), "{order:?} {db}: {}", text(&o));
                let out = text(&o);
                let want = if n == 0 {
                    ": new run ("
                } else {
                    ": known run ("
                };
                assert!(out.contains(want), "{order:?} {folder}: {out}");
                let added: usize = out
                    .split(" run (")
                    .nth(1)
                    .and_then(|t| t.split(' ').next())
                    .and_then(|t| t.parse().ok())
                    .unwrap();
                rows += added;
            }
            // 4 cells, each measured once: one point per series.
            assert_eq!(rows, 4, "{order:?} {db}");
            let show = history(&["show", "--db", &db, "--format", "csv"]);
            assert!(show.status.success(), "{}", text(&show));
            let lines = without_key(&show.stdout);
            assert_eq!(lines.len(), 1 + 4, "{order:?}: {lines:?}");
            let keys: std::collections::BTreeSet<String> = String::from_utf8_lossy(&show.stdout)
                .lines()
                .skip(1)
                .map(|l| l.split(',').nth(2).unwrap().to_string())
                .collect();
            assert_eq!(keys.len(), 1, "one run: {order:?} {keys:?}");
            shown.push(lines);
        }
        assert_eq!(shown[0], shown[1], "{order:?}: SQLite and PostgreSQL");
        // The run's date is its first row's, whichever shard came first,
        // and its folder the merged one once the merge is in.
        for l in &shown[0][1..] {
            assert!(l.contains(",2026-12-01T09:25:38Z,"), "{order:?}: {l}");
            let folder = if order.contains(&merged) {
                merged
            } else {
                order[0]
            };
            assert!(l.contains(&format!(",{folder},")), "{order:?}: {l}");
        }
    }
}

/// Two nights of one spec, each split in two, are two runs: the second
/// night's shards join neither the first night's run (a day apart, no row
/// in common) nor each other's night by mistake.
#[test]
fn two_nights_of_shards_are_two_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("h.sqlite").display());
    let s1 = "results/quick-shards/shard-1-of-2";
    let s2 = "results/quick-shards/shard-2-of-2";
    // The next night: the same shards a day later.
    let next = |from: &str, name: &str| -> String {
        let to = dir.path().join(name);
        copy_run(from, &to);
        let csv = std::fs::read_to_string(to.join("results.csv")).unwrap();
        std::fs::write(
            to.join("results.csv"),
            csv.replace("2026-12-01T09:2", "2026-12-02T09:2"),
        )
        .unwrap();
        to.display().to_string()
    };
    let (n1, n2) = (next(s1, "n1"), next(s2, "n2"));
    for (folder, want) in [
        (s1, ": new run ("),
        (n2.as_str(), ": new run ("),
        (s2, ": known run (2 rows added"),
        (n1.as_str(), ": known run (2 rows added"),
    ] {
        let o = history(&["import", "--db", &db, folder]);
        assert!(text(&o).contains(want), "{folder}: {}", text(&o));
    }
    let show = history(&["show", "--db", &db, "--format", "csv"]);
    let keys: std::collections::BTreeSet<String> = String::from_utf8_lossy(&show.stdout)
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(2).unwrap().to_string())
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
}

/// scripts/nightly.sh on a finished run (`--results`: no guest), into a
/// real SQLite history: import, gate, changes and publish, exiting as the
/// gate does (0 on a quiet night, 1 on the night of L = 7, whose site is
/// published all the same); bad arguments are one line, exit 2, nothing
/// created.
#[test]
fn the_nightly_script_imports_gates_finds_changes_and_publishes() {
    let dir = tempfile::tempdir().unwrap();
    let nights = nights();
    let db_path = dir.path().join("h.sqlite");
    let db = format!("sqlite:{}", db_path.display());
    let site = dir.path().join("site");
    let nightly = |args: &[&str]| -> Output {
        Command::new("bash")
            .arg(repo().join("scripts/nightly.sh"))
            .args(args)
            .current_dir(repo())
            .env("LAZYINIT_BENCH", bin())
            .env_remove("LAZYINIT_HISTORY")
            .output()
            .unwrap()
    };
    // Bad arguments: one line, exit 2, no history, no site.
    for bad in [
        vec!["--site", site.to_str().unwrap(), "--results", &nights[0]],
        vec!["--db", &db, "--results", &nights[0]],
        vec![
            "--db",
            &db,
            "--site",
            site.to_str().unwrap(),
            "--results",
            "results",
        ],
        vec!["--db", &db, "--site", site.to_str().unwrap(), "--bogus"],
    ] {
        let o = nightly(&bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", text(&o));
        assert_eq!(text(&o).lines().count(), 1, "{bad:?}: {}", text(&o));
        assert!(!db_path.exists() && !site.exists(), "{bad:?}");
    }
    let mut args = vec!["import", "--db", db.as_str()];
    args.extend(nights[..13].iter().map(String::as_str));
    assert!(history(&args).status.success());
    let site_s = site.to_str().unwrap();
    // Night 14 as it ran: passes, imported, published.
    let quiet = nightly(&["--db", &db, "--site", site_s, "--results", &nights[13]]);
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet));
    let out = text(&quiet);
    assert!(out.contains(": new run (4 rows added"), "{out}");
    assert_eq!(out.matches("PASS").count(), 4, "{out}");
    assert!(site.join("index.html").is_file(), "{out}");
    // Night 15 with the x86_64 fix row of another L: the gate fails (1),
    // changes raises its alert, and the site is published with it.
    let night = dir.path().join("night15");
    copy_run(&nights[14], &night);
    graft_l7(&night, &l7_row());
    let junit = dir.path().join("check.xml");
    let fail = nightly(&[
        "--db",
        &db,
        "--site",
        site_s,
        "--results",
        night.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(fail.status.code(), Some(1), "{}", text(&fail));
    let out = text(&fail);
    for step in ["import", "check", "changes", "publish"] {
        assert!(out.contains(&format!("nightly: {step}: ")), "{step}: {out}");
    }
    assert!(out.contains("nightly: the gate exited 1"), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let failure = doc
        .descendants()
        .find(|n| n.has_tag_name("failure"))
        .and_then(|n| n.attribute("message"))
        .unwrap_or_else(|| panic!("{xml}"));
    // Its alert, by id, is on the published site.
    let id = failure
        .split('[')
        .nth(1)
        .unwrap()
        .split(']')
        .next()
        .unwrap();
    assert_eq!(id.len(), 8, "{failure}");
    let index = std::fs::read_to_string(site.join("index.html")).unwrap();
    assert!(index.contains(id), "alert {id} not on the site");
}

/// Every RFC 3339 date of a results.csv rewritten by `f` (parsed, so the
/// same instant can be written with another offset).
fn redate(csv: &str, f: impl Fn(chrono::DateTime<chrono::FixedOffset>) -> String) -> String {
    csv.lines()
        .map(|l| {
            l.split(',')
                .map(|field| match chrono::DateTime::parse_from_rfc3339(field) {
                    Ok(d) => f(d),
                    Err(_) => field.to_string(),
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Issue 52: a run dated after now (beyond an hour of clock skew) is
/// refused as 1970 is, by `import` and `check`, nothing written; the same
/// instant written `+14:00` is the run already there, not a second one.
#[test]
fn a_future_date_is_refused_and_one_instant_is_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let nights = nights();
    let future = edited_night(8, d, "future", |csv| {
        csv.replace("2026-11-30T", "2100-11-30T")
    });
    let east = edited_night(8, d, "east", |csv| {
        redate(&csv, |t| {
            t.with_timezone(&chrono::FixedOffset::east_opt(14 * 3600).unwrap())
                .to_rfc3339()
        })
    });
    assert!(
        std::fs::read_to_string(Path::new(&east).join("results.csv"))
            .unwrap()
            .contains("+14:00")
    );
    for db in [
        format!("sqlite:{}", d.join("h.sqlite").display()),
        fresh_postgres("future"),
    ] {
        for n in &nights[..8] {
            assert!(history(&["import", "--db", &db, n]).status.success());
        }
        let before = history(&["show", "--db", &db, "--format", "csv"]).stdout;
        for cmd in ["import", "check"] {
            let o = history(&[cmd, "--db", &db, &future]);
            let msg = text(&o);
            assert_eq!(o.status.code(), Some(2), "{db} {cmd}: {msg}");
            assert!(
                msg.contains("started_at 2100-11-30T") && msg.contains("clock was set ahead"),
                "{db} {cmd}: {msg}"
            );
            assert_eq!(msg.lines().count(), 1, "{db} {cmd}: {msg}");
            let after = history(&["show", "--db", &db, "--format", "csv"]).stdout;
            assert_eq!(after, before, "{db} {cmd}: nothing written");
        }
        let o = history(&["import", "--db", &db, &nights[8]]);
        assert!(text(&o).contains("new run"), "{db}: {}", text(&o));
        let o = history(&["import", "--db", &db, &east]);
        assert!(
            o.status.success() && text(&o).contains("known run (0 rows added"),
            "{db}: the same instant is the same run: {}",
            text(&o)
        );
    }
}

/// Issue 52: a `--baseline` that chooses no run (a run that is not
/// there, a reversed date range, a kernel no row has, a label no run
/// has) is exit 2 with one line naming it and what the history holds,
/// the candidate not imported; before, every cell was UNKNOWN, exit 0.
#[test]
fn a_baseline_that_chooses_no_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let nights = nights();
    for db in [
        format!("sqlite:{}", dir.path().join("h.sqlite").display()),
        fresh_postgres("nobaseline"),
    ] {
        let mut args = vec!["import", "--db", db.as_str()];
        args.extend(nights[..6].iter().map(String::as_str));
        assert!(history(&args).status.success());
        let before = history(&["show", "--db", &db, "--format", "csv"]).stdout;
        for (sel, says) in [
            (
                "run:nosuch@2026-11-30T00:00:00Z",
                "the history's run ids: quick-",
            ),
            (
                "date:2026-12-01..2026-11-01",
                "the range ends before it starts",
            ),
            (
                "date:2027-01-01..",
                "the history's runs started on 2026-11-30",
            ),
            (
                "kernel:9.99",
                "the history's kernels (releases and sources): ",
            ),
            ("label:6.1.999", "no run of the history is labelled"),
        ] {
            let o = history(&["check", "--db", &db, &nights[13], "--baseline", sel]);
            let msg = text(&o);
            assert_eq!(o.status.code(), Some(2), "{db} {sel}: {msg}");
            assert!(
                msg.contains(&format!("--baseline {sel}: chooses no run")) && msg.contains(says),
                "{db} {sel}: {msg}"
            );
            assert_eq!(msg.lines().count(), 1, "{db} {sel}: {msg}");
            let after = history(&["show", "--db", &db, "--format", "csv"]).stdout;
            assert_eq!(after, before, "{db} {sel}: the candidate not imported");
        }
        // One selector that matches is not enough when another does not.
        let o = history(&[
            "check",
            "--db",
            &db,
            &nights[13],
            "--baseline",
            "date:2026-11-30..",
            "--baseline",
            "kernel:9.99",
        ]);
        assert_eq!(o.status.code(), Some(2), "{db}: {}", text(&o));
        let o = history(&[
            "check",
            "--db",
            &db,
            &nights[13],
            "--baseline",
            "date:2026-11-30..",
        ]);
        assert_eq!(o.status.code(), Some(0), "{db}: {}", text(&o));
    }
}

/// Issue 52: every threshold of `changes` and `check` is range-checked
/// (finite, a percentage from 0 to 10000, a level between 0 and 1): one
/// line naming the flag and its bounds, exit 2, nothing imported.
#[test]
fn thresholds_out_of_range_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("h.sqlite").display());
    let nights = nights();
    assert!(history(&["import", "--db", &db, &nights[0]])
        .status
        .success());
    let before = history(&["show", "--db", &db, "--format", "csv"]).stdout;
    for (flag, value, says) in [
        ("--run-min-change-pct", "inf", "percentage from 0 to 10000"),
        (
            "--run-min-change-pct",
            "1e308",
            "percentage from 0 to 10000",
        ),
        (
            "--run-min-change-pct",
            "10000.5",
            "percentage from 0 to 10000",
        ),
        ("--run-min-change-pct", "NaN", "percentage from 0 to 10000"),
        ("--run-min-change-pct", "-1", "percentage from 0 to 10000"),
        ("--min-change-pct", "inf", "percentage from 0 to 10000"),
        ("--max-p", "1e308", "between 0 and 1"),
        ("--run-p", "NaN", "between 0 and 1"),
    ] {
        let arg = format!("{flag}={value}");
        for cmd in [
            vec!["changes", "--db", &db, &arg],
            vec!["check", "--db", &db, &nights[1], &arg],
        ] {
            let o = history(&cmd);
            let msg = text(&o);
            assert_eq!(o.status.code(), Some(2), "{cmd:?}: {msg}");
            assert!(msg.contains(flag) && msg.contains(says), "{cmd:?}: {msg}");
            assert_eq!(msg.lines().count(), 1, "{cmd:?}: {msg}");
        }
        let after = history(&["show", "--db", &db, "--format", "csv"]).stdout;
        assert_eq!(after, before, "{flag} {value}: nothing imported");
    }
    let help = text(&history(&["check", "--help"]));
    assert!(help.contains("0 to 10000"), "{help}");
}

/// Issue 52: `changes` at thresholds of one look (`--min-change-pct 50`)
/// raises and closes no stored alert: the real -11% L change's alert
/// stays open and `check` keeps failing on it. Only `--update-alerts`
/// records another threshold's answer.
#[test]
fn a_look_at_other_thresholds_leaves_the_alerts_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("h.sqlite").display());
    let nights = nights_with_an_l_change(dir.path());
    let mut args = vec!["import", "--db", db.as_str()];
    args.extend(nights.iter().map(String::as_str));
    assert!(history(&args).status.success());
    let o = history(&["changes", "--db", &db]);
    let out = text(&o);
    assert!(
        o.status.success() && out.contains("1 change(s)") && out.contains("(new)"),
        "{out}"
    );
    let last = nights.last().unwrap();
    assert_eq!(
        history(&["check", "--db", &db, last]).status.code(),
        Some(1)
    );
    let o = history(&["changes", "--db", &db, "--min-change-pct", "50"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(!out.contains("closed ["), "a look closed an alert: {out}");
    assert!(
        out.contains("no alert raised or closed, 1 open alert(s)"),
        "{out}"
    );
    let o = history(&["changes", "--db", &db]);
    assert!(
        text(&o).contains("(new)"),
        "the alert is open: {}",
        text(&o)
    );
    let o = history(&["check", "--db", &db, last]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "the gate still fails: {}",
        text(&o)
    );
    // A look with a looser level raises nothing either.
    let o = history(&["changes", "--db", &db, "--max-p", "0.2"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = history(&["changes", "--db", &db]);
    assert!(text(&o).contains("1 change(s)"), "{}", text(&o));
    // Asked for, the look's answer is recorded.
    let o = history(&[
        "changes",
        "--db",
        &db,
        "--min-change-pct",
        "50",
        "--update-alerts",
    ]);
    assert!(text(&o).contains("closed ["), "{}", text(&o));
    let o = history(&["check", "--db", &db, last]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// The number of runs a SQLite history holds (0 when it has no runs table).
fn runs_in(path: &Path) -> i64 {
    let c = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    c.query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .unwrap_or(0)
}

/// Issue 52: `history generate` bounds its count (u64::MAX panicked on
/// capacity overflow and left an empty database; 10,000,000 ran on),
/// writes all of its runs or none (killed half-way, the history holds
/// none), and refuses a history that holds real runs.
#[test]
fn generate_is_bounded_whole_and_never_mixes_with_real_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for runs in ["18446744073709551615", "10000000", "0", "-1"] {
        let path = d.join(format!("g{runs}.sqlite"));
        let db = format!("sqlite:{}", path.display());
        let o = history(&["generate", "--db", &db, &format!("--runs={runs}")]);
        let msg = text(&o);
        assert_eq!(o.status.code(), Some(2), "{runs}: {msg}");
        assert!(
            msg.contains("--runs") && !msg.contains("panicked"),
            "{runs}: {msg}"
        );
        assert!(!path.exists(), "{runs}: no database made");
    }
    // Killed half-way: nothing of it is kept.
    let path = d.join("killed.sqlite");
    let db = format!("sqlite:{}", path.display());
    let mut child = Command::new(bin())
        .args(["history", "generate", "--db", &db, "--runs", "100000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert!(
        child.try_wait().unwrap().is_none(),
        "100,000 runs take longer than 4 s"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(runs_in(&path), 0, "a killed generate left runs behind");
    // A whole one, then the same into a history of real runs.
    let o = history(&["generate", "--db", &db, "--runs", "3"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(runs_in(&path), 3);
    let real = d.join("real.sqlite");
    let real_db = format!("sqlite:{}", real.display());
    assert!(history(&["import", "--db", &real_db, &nights()[0]])
        .status
        .success());
    let before = std::fs::read(&real).unwrap();
    let o = history(&["generate", "--db", &real_db, "--runs", "3"]);
    let msg = text(&o);
    assert_eq!(o.status.code(), Some(2), "{msg}");
    assert!(msg.contains("holds real runs"), "{msg}");
    assert_eq!(msg.lines().count(), 1, "{msg}");
    assert_eq!(runs_in(&real), 1);
    assert_eq!(
        std::fs::read(&real).unwrap(),
        before,
        "the real history as it was"
    );
}

/// Issue 52: `history import results/*/` skips, with a line, a run still
/// in progress (its .lock held: here by flock(1)) and a folder with no
/// row yet, and imports the others; before, the one live folder made the
/// whole import exit 2 ("results.csv has no rows yet").
#[test]
fn import_skips_a_run_in_progress_and_imports_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let nights = nights();
    for (i, name) in [(0, "a"), (1, "b"), (2, "live"), (3, "empty")] {
        copy_run(&nights[i], &d.join(name));
    }
    for name in ["live", "empty"] {
        let csv = d.join(name).join("results.csv");
        let header = std::fs::read_to_string(&csv)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_string();
        std::fs::write(&csv, header + "\n").unwrap();
    }
    let lock = d.join("live/.lock");
    std::fs::write(&lock, "").unwrap();
    let mut holder = Command::new("flock")
        .args(["-x", "--no-fork", lock.to_str().unwrap(), "sleep", "60"])
        .spawn()
        .unwrap();
    // The lock is taken once flock(1) runs sleep.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string("/proc/locks")
        .unwrap()
        .contains(&format!(
            ":{} ",
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&lock).unwrap())
        ))
    {
        assert!(std::time::Instant::now() < deadline, "flock took no lock");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let db = format!("sqlite:{}", d.join("h.sqlite").display());
    let folders: Vec<String> = ["a", "b", "live", "empty"]
        .iter()
        .map(|n| d.join(n).display().to_string() + "/")
        .collect();
    let mut args = vec!["import", "--db", db.as_str()];
    args.extend(folders.iter().map(String::as_str));
    let o = history(&args);
    let out = text(&o);
    // `check` refuses the run in progress as import skips it, here with
    // its first row written (before: imported as a 1-row run and judged,
    // exit 1), and leaves the history as it was.
    let csv = d.join("live/results.csv");
    let whole = std::fs::read_to_string(repo().join(&nights[2]).join("results.csv")).unwrap();
    let two: Vec<&str> = whole.lines().take(2).collect();
    std::fs::write(&csv, two.join("\n") + "\n").unwrap();
    let fresh = format!("sqlite:{}", d.join("fresh.sqlite").display());
    let c = history(&["check", "--db", &fresh, &folders[2]]);
    let live_check = text(&c);
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("live: a run in progress (its .lock held by pid") && out.contains("skipped"),
        "{out}"
    );
    assert!(
        out.contains("empty: results.csv has no rows yet: skipped"),
        "{out}"
    );
    assert_eq!(out.matches("new run").count(), 2, "{out}");
    assert_eq!(c.status.code(), Some(2), "{live_check}");
    assert!(
        live_check.contains("a run in progress (its .lock held by pid")
            && live_check.contains("check it once it ends"),
        "{live_check}"
    );
    assert!(!d.join("fresh.sqlite").exists(), "check made a history");
    // Only skipped folders: nothing to import, exit 2.
    let o = history(&["import", "--db", &db, &folders[3]]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Issue 52: a PostgreSQL URL's parameters are checked before any
/// connection (a `connect_timeout` of 99999999999 s waited on a silent
/// server past 90 s; `abc` or an unknown parameter was exit 3 "invalid
/// connection string" naming none): exit 2, one line naming the
/// parameter, at once.
#[test]
fn a_postgres_urls_parameters_are_checked_and_named() {
    // A listener that never answers: a connection tried would wait.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    for (q, says) in [
        (
            "connect_timeout=abc",
            "connect_timeout=abc: connect_timeout must be",
        ),
        (
            "connect_timeout=99999999999",
            "connect_timeout=99999999999: connect_timeout must be an integer from 1 to 300",
        ),
        ("connect_timeout=2&foo=1", "unknown parameter `foo`"),
    ] {
        let url = format!("postgres://u@127.0.0.1:{port}/h?{q}");
        let t = std::time::Instant::now();
        let o = history(&["show", "--db", &url]);
        let msg = text(&o);
        assert_eq!(o.status.code(), Some(2), "{q}: {msg}");
        assert!(msg.contains(says), "{q}: {msg}");
        assert_eq!(msg.lines().count(), 1, "{q}: {msg}");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{q}: {:?}",
            t.elapsed()
        );
    }
}

/// `lazyinit-bench history ARGS` as a user who cannot write what root
/// made (nobody, when the tests run as root; else this user, the files
/// made read-only by their mode).
fn history_as_reader(args: &[&str]) -> Output {
    let root = nix::unistd::geteuid().is_root();
    let mut c = match root {
        true => {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(bin_for_nobody());
            c
        }
        false => Command::new(bin()),
    };
    c.current_dir("/")
        .arg("history")
        .args(args)
        .env_remove("LAZYINIT_HISTORY")
        .output()
        .unwrap()
}

/// The binary where `nobody` can run it: cargo's target folder may sit
/// under a folder only root may enter (a clone under /root, as CI's).
fn bin_for_nobody() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    static COPY: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let b = d.path().join("lazyinit-bench");
        std::fs::copy(bin(), &b).unwrap();
        std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o755)).unwrap();
        (d, b)
    })
    .1
    .clone()
}

/// A copy of a committed run folder where `nobody` can read it.
fn readable_copy(run: &Path) -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let to = d.path().join("night");
    let st = Command::new("cp")
        .arg("-r")
        .arg(run)
        .arg(&to)
        .status()
        .unwrap();
    assert!(st.success(), "cp -r {}", run.display());
    let st = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&to)
        .status()
        .unwrap();
    assert!(st.success());
    (d, to)
}

/// Issue 52: a history this user cannot write is read read-only (`show`
/// leaves no -wal or -shm beside it, its folder writable or not), and a
/// command that writes to it is refused with one line naming it and what
/// to do, exit 2 (before: the driver's `attempt to write a readonly
/// database`, exit 3, naming nothing to do; `show` failed the same way
/// in a folder it could not write, and left -wal/-shm in one it could).
#[test]
fn a_read_only_history_is_read_read_only_and_a_write_refused_naming_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = d.join("h.sqlite");
    let db = format!("sqlite:{}", path.display());
    let nights = nights();
    assert!(history(&["import", "--db", &db, &nights[0]])
        .status
        .success());
    let (_keep, night1) = readable_copy(&repo().join(&nights[1]));
    let night1 = night1.display().to_string();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    let before = std::fs::read(&path).unwrap();
    let listing = || {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    for mode in [0o555, 0o777] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
        let o = history_as_reader(&["show", "--db", &db]);
        assert_eq!(o.status.code(), Some(0), "folder {mode:o}: {}", text(&o));
        assert!(text(&o).contains("4 series"), "{}", text(&o));
        assert_eq!(
            listing(),
            ["h.sqlite"],
            "folder {mode:o}: nothing left beside it"
        );
        let o = history_as_reader(&["import", "--db", &db, &night1]);
        let msg = text(&o);
        assert_eq!(o.status.code(), Some(2), "folder {mode:o}: {msg}");
        assert!(
            msg.contains(&format!("--db {db}: read-only for this user"))
                && msg.contains("run it as the history's owner"),
            "folder {mode:o}: {msg}"
        );
        assert_eq!(msg.lines().count(), 1, "{msg}");
        assert_eq!(
            listing(),
            ["h.sqlite"],
            "folder {mode:o}: nothing left beside it"
        );
    }
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the history as it was"
    );
}

/// `url` with its user (and password) replaced by `userinfo`.
fn as_user(url: &str, userinfo: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (_, host) = rest.split_once('@').unwrap();
    format!("{scheme}://{userinfo}@{host}")
}

/// Issue 52: a PostgreSQL role that may only read (a role made here with
/// SELECT on the history's tables; the test cluster's `postgres` role
/// makes it, with trust logins on loopback as scripts/history-postgres.sh
/// sets up) reads the history, and a command that writes is refused in one
/// line naming the database (without the password) and what to do, exit
/// 2, nothing written; a new database it cannot create tables in too. It
/// was the server's raw `permission denied for ...`, exit 3.
#[test]
fn a_postgres_role_without_write_rights_is_told_what_to_do() {
    let pg = fresh_postgres("rights");
    let empty = fresh_postgres("rightsempty");
    let nights = nights();
    let o = history(&["import", "--db", &pg, &nights[0]]);
    assert!(o.status.success(), "{}", text(&o));
    let role = format!("ro_{}", std::process::id());
    let mut admin = postgres::Client::connect(&as_user(&pg, "postgres"), postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN; GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"
        ))
        .unwrap();
    let ro = as_user(&pg, &format!("{role}:secret"));
    let shown = as_user(&pg, &format!("{role}:***"));
    let rows = |url: &str| -> i64 {
        let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
        c.query_one("SELECT COUNT(*) FROM result_rows", &[])
            .map(|r| r.get(0))
            .unwrap_or(-1)
    };
    let before = rows(&pg);
    let o = history(&["show", "--db", &ro]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "a read needs only SELECT: {}",
        text(&o)
    );
    let night1 = nights[1].clone();
    let ro_empty = as_user(&empty, &format!("{role}:secret"));
    for (db, shown) in [
        (&ro, shown.clone()),
        (&ro_empty, as_user(&empty, &format!("{role}:***"))),
    ] {
        let o = history(&["import", "--db", db, &night1]);
        let msg = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(2), "{msg}");
        assert_eq!(msg.trim_end().lines().count(), 1, "{msg}");
        assert!(
            msg.contains(&format!("--db {shown}: the role {role} lacks the rights this command needs (the server: permission denied for"))
                && msg.contains("or use a role that has them"),
            "{msg}"
        );
        assert!(!msg.contains("secret"), "{msg}");
    }
    assert_eq!(rows(&pg), before, "nothing written");
    let _ = admin.batch_execute(&format!(
        "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}"
    ));
    let mut in_db = postgres::Client::connect(&as_user(&pg, "postgres"), postgres::NoTls).unwrap();
    let _ = in_db.batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"));
}
