//! The real runner on the fake provider (feature `fake`): scripted guests
//! answer the real guest protocol in process, so a whole run, its rows,
//! resume, interrupts and failures take milliseconds, with no QEMU.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lazyinit_core::events::EventSink;
use lazyinit_core::exit::{self, ExitCode};
use lazyinit_core::results::{ResultRow, Status};
use lazyinit_core::{KernelProfile, RunFolder};
use lazyinit_orchestrator::fake::{rows_in, Answer, FakeProvider, FakeSpec, Hook, Lab};
use lazyinit_orchestrator::{RunError, RunOptions, RunSummary};

/// Two cells (no fix and fix, 1 GiB: 8 groups), or what `extra` changes.
fn spec(extra: &str) -> FakeSpec {
    let text = format!(
        "name = \"fake\"\narches = [\"x86_64\"]\nhz = [250]\nsizes = [\"1GiB\"]\n\
         storage-profile = \"none\"\npoll-interval = \"200ms\"\n{extra}"
    );
    FakeSpec::parse(&text, "test").unwrap()
}

const NOFIX: &str = "fake-x86_64-debian-6.1-hz250-nofix-1GiB-r1";
const FIX: &str = "fake-x86_64-debian-6.1-hz250-fix-1GiB-r1";

async fn run_on(
    spec: &FakeSpec,
    lab: &Lab,
    provider: FakeProvider,
    dir: &Path,
    cancel: Arc<AtomicBool>,
) -> Result<RunSummary, RunError> {
    let plan = lazyinit_orchestrator::plan(spec, &provider, 20_000);
    let opts = RunOptions {
        folder: RunFolder::new(dir),
        on_claim: None,
        events: EventSink::discard(),
        cancel,
        prioritize_sensitive: true,
        boot_timeout: Duration::from_secs(5),
        shard_chosen_by: String::new(),
        artifacts: Arc::new(lab.artifacts()),
    };
    lazyinit_orchestrator::run(spec, &plan, Arc::new(provider), opts).await
}

async fn run(spec: &FakeSpec, lab: &Lab, dir: &Path) -> Result<RunSummary, RunError> {
    run_on(spec, lab, lab.provider(), dir, Arc::default()).await
}

fn row<'a>(rows: &'a [ResultRow], cell: &str) -> &'a ResultRow {
    rows.iter().find(|r| r.cell_id == cell).unwrap()
}

fn hook(f: impl Fn(&str, &str) -> Answer + Send + Sync + 'static) -> Hook {
    Arc::new(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cell_gets_a_measured_row_and_its_files() {
    let tmp = tempfile::tempdir().unwrap();
    let lab = Lab::new(tmp.path().join("lab"));
    let out = tmp.path().join("out");
    let s = run(&spec(""), &lab, &out).await.unwrap();
    assert_eq!((s.ok, s.failed, s.interrupted, s.skipped), (2, 0, 0, 0));

    let rows = rows_in(&out);
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!((r.status, r.error.as_str()), (Status::Ok, ""));
        assert_eq!(
            (r.testbed.provider.as_str(), r.testbed.machine.as_str()),
            ("fake", "fake-x86_64")
        );
        assert_eq!(
            r.kernel_release,
            format!("6.1.0-lazyinit-hz250-{}", r.axes.variant)
        );
        assert_eq!(r.concurrency, 2);
        let m = &r.measured;
        assert_eq!((m.groups, m.traced_groups), (Some(8), Some(8)));
        // At HZ=250 a 3.4 ms zeroing sleeps L=10 without the fix, 8 with it.
        let (l, cycle) = match r.axes.variant {
            lazyinit_core::Variant::NoFix => (10, 44.0),
            lazyinit_core::Variant::Fix => (8, 36.0),
        };
        assert_eq!(m.sleep_ticks, Some(l), "{}", r.cell_id);
        assert!((m.ms_per_group.unwrap() - cycle).abs() < 1e-6, "{m:?}");
        assert!((m.z1_ms.unwrap() - 3.4).abs() < 1e-6, "{m:?}");
        assert_eq!(m.mkfs_cmd, "mkfs.ext4 -F -q /dev/vda");
        assert!(r.boot_s.is_some());
        let cell = RunFolder::new(&out).cell(&r.cell_id);
        for f in [cell.console_log(), cell.trace_txt(), cell.groups_csv()] {
            assert!(f.is_file(), "{}", f.display());
        }
        assert!(!cell.error_txt().exists());
    }
    let folder = RunFolder::new(&out);
    assert!(folder.spec_toml().is_file());
    // Kernels built once each, for the provider's profile; every machine
    // launched was torn down.
    let journal = lab.journal();
    assert!(
        journal.contains(&"build x86_64-hz250-fix qemu".to_string()),
        "{journal:?}"
    );
    assert_eq!(
        journal.iter().filter(|l| l.starts_with("launch ")).count(),
        2
    );
    assert_eq!(
        journal
            .iter()
            .filter(|l| l.starts_with("teardown "))
            .count(),
        2
    );
    assert!(lab.live_machines().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_cells_beside_good_ones_then_a_rerun_runs_only_them() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    // Four cells: no fix and fix, 1 and 2 GiB.
    let four = FakeSpec {
        sizes: vec!["1GiB".parse().unwrap(), "2GiB".parse().unwrap()],
        ..spec("")
    };
    // mkfs fails on one cell, the launch of another.
    let lab = Lab::with_hook(
        tmp.path().join("lab"),
        hook(|step, cell| match (step, cell) {
            ("mkfs", NOFIX) => Answer::Fail("disk on fire".into()),
            ("launch", c) if c.ends_with("fix-2GiB-r1") && !c.contains("nofix") => {
                Answer::Fail("no capacity".into())
            }
            _ => Answer::Normal,
        }),
    );
    let s = run(&four, &lab, &out).await.unwrap();
    assert_eq!((s.ok, s.failed, s.interrupted), (2, 2, 0));
    let rows = rows_in(&out);
    let bad = row(&rows, NOFIX);
    assert_eq!(bad.status, Status::Failed);
    assert_eq!(bad.error, "mkfs failed in the guest (exit 1): disk on fire");
    assert_eq!(bad.measured, Default::default(), "nothing half-measured");
    let text = RunFolder::new(&out)
        .cell(NOFIX)
        .error_txt()
        .read_to_string()
        .unwrap();
    assert!(
        text.contains("--- console tail ---\nfake console of"),
        "{text}"
    );
    let unlaunched = row(&rows, "fake-x86_64-debian-6.1-hz250-fix-2GiB-r1");
    assert_eq!(
        (unlaunched.status, unlaunched.error.as_str()),
        (Status::Failed, "no capacity")
    );
    assert_eq!(unlaunched.testbed.machine, "");
    assert!(lab.live_machines().is_empty());

    // Rerun: only the two failed cells run, and no ok row is repeated.
    let lab = Lab::new(tmp.path().join("lab2"));
    let s = run(&four, &lab, &out).await.unwrap();
    assert_eq!((s.ok, s.failed, s.skipped), (2, 0, 2));
    let launched: Vec<_> = lab
        .journal()
        .into_iter()
        .filter(|l| l.starts_with("launch "))
        .collect();
    assert_eq!(launched.len(), 2, "{launched:?}");
    let rows = rows_in(&out);
    assert_eq!(rows.len(), 6);
    let ok: Vec<_> = rows.iter().filter(|r| r.status == Status::Ok).collect();
    assert_eq!(ok.len(), 4);
    let mut ids: Vec<_> = ok.iter().map(|r| &r.cell_id).collect();
    ids.dedup();
    assert_eq!(ids.len(), 4);

    // A third run has nothing left to do.
    let s = run(&four, &Lab::new(tmp.path().join("lab3")), &out)
        .await
        .unwrap();
    assert_eq!((s.ok, s.skipped), (0, 4));
}

/// What a cancel at `phase` of the one cell leaves, then a rerun.
async fn interrupt_at(phase: &'static str, kexec: bool) -> (RunSummary, Vec<ResultRow>) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let spec = spec("variants = [\"fix\"]\n");
    let cancel = Arc::new(AtomicBool::new(false));
    let c = cancel.clone();
    let lab = Lab::with_hook(
        tmp.path().join("lab"),
        hook(move |step, _| {
            if step == phase {
                c.store(true, Ordering::SeqCst);
            }
            Answer::Normal
        }),
    );
    let provider = match kexec {
        true => lab.kexec_provider(),
        false => lab.provider(),
    };
    let s = run_on(&spec, &lab, provider, &out, cancel).await.unwrap();
    assert!(lab.live_machines().is_empty(), "{phase}: a machine is left");
    let first = rows_in(&out);

    // The rerun resumes: the cell ends ok, whatever the first run left.
    let lab = Lab::new(tmp.path().join("lab2"));
    let provider = match kexec {
        true => lab.kexec_provider(),
        false => lab.provider(),
    };
    let again = run_on(&spec, &lab, provider, &out, Arc::default())
        .await
        .unwrap();
    let done = u64::from(first.iter().any(|r| r.status == Status::Ok));
    assert_eq!((again.ok + again.skipped) as u64, 1, "{phase}");
    assert_eq!(again.skipped as u64, done, "{phase}");
    let rows = rows_in(&out);
    assert_eq!(rows.last().unwrap().status, Status::Ok, "{phase}");
    (s, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_in_each_phase_stops_the_cell_and_a_rerun_resumes() {
    // Before any machine: nothing recorded, the cell not started.
    let (s, rows) = interrupt_at("build", false).await;
    assert_eq!((s.not_started, s.interrupted), (1, 0));
    assert!(rows.is_empty());
    // With a machine: an interrupted row, the machine torn down.
    for phase in [
        "launch",
        "boot",
        "facts",
        "mkfs",
        "trace-setup",
        "mount",
        "wait",
        "poll",
    ] {
        let (s, rows) = interrupt_at(phase, false).await;
        assert_eq!((s.interrupted, s.ok, s.failed), (1, 0, 0), "{phase}");
        assert_eq!(rows.len(), 1, "{phase}");
        assert_eq!(rows[0].status, Status::Interrupted, "{phase}");
        assert_eq!(rows[0].measured, Default::default(), "{phase}");
    }
    // Once the trace is read the cell is measured: it counts.
    for phase in ["collect", "teardown"] {
        let (s, rows) = interrupt_at(phase, false).await;
        assert_eq!((s.ok, s.interrupted), (1, 0), "{phase}");
        assert_eq!(rows[0].status, Status::Ok, "{phase}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_during_a_kexec_install_stops_the_cell() {
    for phase in ["mkdir", "install-kexec", "kexec-load", "kexec-exec"] {
        let (s, rows) = interrupt_at(phase, true).await;
        assert_eq!((s.interrupted, s.ok), (1, 0), "{phase}");
        assert_eq!(rows[0].status, Status::Interrupted, "{phase}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_that_boot_their_own_kernel_are_kexeced_into_the_one_under_test() {
    let tmp = tempfile::tempdir().unwrap();
    let lab = Lab::new(tmp.path().join("lab"));
    let out = tmp.path().join("out");
    let provider = lab.kexec_provider();
    assert_eq!(
        lazyinit_core::provider::Provider::kernel_profile(&provider),
        KernelProfile::Cloud
    );
    let s = run_on(&spec(""), &lab, provider, &out, Arc::default())
        .await
        .unwrap();
    assert_eq!((s.ok, s.failed), (2, 0), "{:?}", rows_in(&out));
    assert!(lab
        .journal()
        .contains(&"build x86_64-hz250-nofix cloud".to_string()));
    // The volume, given by its NVMe serial, was found in the guest.
    for r in rows_in(&out) {
        assert!(
            r.measured
                .mkfs_cmd
                .ends_with(&format!(" {}", lazyinit_guest::fake::NVME_NODE)),
            "{}",
            r.measured.mkfs_cmd
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_never_answers_fails_its_cell() {
    let tmp = tempfile::tempdir().unwrap();
    let lab = Lab::with_hook(
        tmp.path().join("lab"),
        hook(|step, cell| match (step, cell) {
            ("boot", FIX) => Answer::Drop,
            _ => Answer::Normal,
        }),
    );
    let out = tmp.path().join("out");
    let s = run(&spec(""), &lab, &out).await.unwrap();
    assert_eq!((s.ok, s.failed), (1, 1));
    let rows = rows_in(&out);
    assert_eq!(
        row(&rows, FIX).error,
        "guest did not become reachable over SSH: SSH to the guest failed: connection reset (fake)"
    );
    assert_eq!(row(&rows, FIX).testbed.machine, "fake-x86_64");
    assert!(lab.live_machines().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_cannot_be_written_is_kept_and_the_run_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let folder = RunFolder::new(&out);
    // One cell at a time, the longest first (no fix): before the with-fix
    // cell's row is written, results.csv goes away.
    // The test tampers with the file by hand, as a user or a fault would.
    let csv = folder.results_csv().shown();
    let aside = out.join("results.csv.aside");
    let (c, a) = (csv.clone(), aside.clone());
    let lab = Lab::with_hook(
        tmp.path().join("lab"),
        hook(move |step, cell| {
            if (step, cell) == ("teardown", FIX) {
                std::fs::rename(&c, &a).unwrap();
            }
            Answer::Normal
        }),
    );
    let err = run(&spec("concurrency = 1\n"), &lab, &out)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RunError::RowsNotWritten { cells, .. } if cells == &[FIX.to_string()]),
        "{err}"
    );
    assert_eq!(err.exit_code(), exit::INFRASTRUCTURE);
    assert!(exit::one_line(&err).contains("row.csv"), "{err}");
    // The row is not lost: it is in the cell's folder, header and all.
    let kept = folder.cell(FIX).row_csv().rows().unwrap();
    assert_eq!((kept.len(), kept[0].status), (1, Status::Ok));
    assert!(
        !csv.exists(),
        "results.csv is not made again without its header"
    );

    // Put the file back and rerun: the cell without a row runs again.
    std::fs::rename(&aside, &csv).unwrap();
    let s = run(
        &spec("concurrency = 1\n"),
        &Lab::new(tmp.path().join("lab2")),
        &out,
    )
    .await
    .unwrap();
    assert_eq!((s.ok, s.skipped), (1, 1));
    let rows = rows_in(&out);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.status == Status::Ok));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_the_provider_cannot_serve_fails_before_anything_is_built() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    // The fake, like most providers, serves only its own storage.
    let lab = Lab::new(tmp.path().join("lab"));
    let ebs = FakeSpec {
        storage_profile: "ebs".parse().unwrap(),
        ..spec("")
    };
    let err = run(&ebs, &lab, &out).await.unwrap_err();
    assert!(matches!(err, RunError::Refused { .. }), "{err}");
    assert_eq!(err.exit_code(), exit::BAD_INPUT);
    assert!(
        exit::one_line(&err).contains("storage profile `ebs`"),
        "{err}"
    );
    // And so does a preflight refusal.
    let lab2 = Lab::with_hook(
        tmp.path().join("lab2"),
        hook(|step, _| match step {
            "preflight" => Answer::Fail("quota: 0 instances".into()),
            _ => Answer::Normal,
        }),
    );
    let err = run(&spec(""), &lab2, &out).await.unwrap_err();
    assert_eq!(err.exit_code(), exit::BAD_INPUT);
    for lab in [lab, lab2] {
        assert!(lab.journal().is_empty(), "{:?}", lab.journal());
    }
    assert!(!out.exists(), "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_kernel_build_names_the_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let lab = Lab::with_hook(
        tmp.path().join("lab"),
        hook(|step, _| match step {
            "build" => Answer::Fail("make: *** [vmlinux] Error 2".into()),
            _ => Answer::Normal,
        }),
    );
    let err = run(&spec(""), &lab, &tmp.path().join("out"))
        .await
        .unwrap_err();
    assert_eq!(
        exit::one_line(&err),
        "building the x86_64 HZ=250 fix kernel from debian-6.1: make: *** [vmlinux] Error 2"
    );
    assert_eq!(err.exit_code(), exit::INFRASTRUCTURE);
}

/// Every file under `dir`, relative, sorted (what a run left behind).
fn files(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, dir, &mut v);
    v.sort();
    v
}

/// A rerun into a folder of another spec (storage profile, poll interval,
/// wait-mult, mkfs arguments, the cells) is refused with the key named,
/// before anything runs; spec.toml and the rows stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_with_another_spec_is_refused_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let s = run(&spec(""), &Lab::new(tmp.path().join("lab")), &out)
        .await
        .unwrap();
    assert_eq!(s.ok, 2);
    let folder = RunFolder::new(&out);
    let (spec_before, rows_before) = (
        folder.spec_toml().read_to_string().unwrap(),
        folder.results_csv().read_to_string().unwrap(),
    );
    for (change, key) in [
        ("wait-mult = 20\n", "`wait-mult` is 10 there and 20 here"),
        ("mkfs-args = [\"-E\", \"nodiscard\"]\n", "`mkfs-args`"),
        ("repetitions = 2\n", "`repetitions` is 1 there and 2 here"),
    ] {
        let lab = Lab::new(tmp.path().join("lab2"));
        let err = run(&spec(change), &lab, &out).await.unwrap_err();
        assert!(matches!(err, RunError::OtherSpec(..)), "{err}");
        assert_eq!(err.exit_code(), exit::BAD_INPUT, "{change}");
        let line = exit::one_line(&err);
        assert!(line.contains(key), "{change}: {line}");
        assert!(line.contains("another --out"), "{line}");
        assert!(lab.journal().is_empty(), "{:?}", lab.journal());
    }
    // The poll interval lives in the spec too (humantime): named the same.
    let other = FakeSpec {
        poll_interval: Duration::from_millis(300),
        ..spec("")
    };
    let err = run(&other, &Lab::new(tmp.path().join("lab3")), &out)
        .await
        .unwrap_err();
    assert!(
        exit::one_line(&err).contains("`poll-interval` is \"200ms\" there and \"300ms\" here"),
        "{err}"
    );
    assert_eq!(folder.spec_toml().read_to_string().unwrap(), spec_before);
    assert_eq!(folder.results_csv().read_to_string().unwrap(), rows_before);
    // The same spec still resumes (nothing left to do).
    let s = run(&spec(""), &Lab::new(tmp.path().join("lab4")), &out)
        .await
        .unwrap();
    assert_eq!((s.ok, s.skipped), (0, 2));
}

/// What a run killed in the middle (SIGKILL, OOM) leaves, and what the next
/// run into the folder makes of it: the torn last row is cut off and kept
/// aside, each cell the killed run had started gets a row saying it was
/// lost, and those cells run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runs_torn_row_and_lost_cells_are_recorded_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let folder = RunFolder::new(&out);
    // A complete run of one cell, then its file as a killed run leaves it:
    // the no-fix row torn in the middle, the fix cell started (its marker
    // there) and never recorded.
    run(
        &spec("variants = [\"nofix\"]\n"),
        &Lab::new(tmp.path().join("l0")),
        &out,
    )
    .await
    .unwrap();
    let csv = folder.results_csv().read_to_string().unwrap();
    let (header, row) = csv.split_once('\n').unwrap();
    let torn = &row[..row.len() / 2];
    std::fs::write(folder.results_csv().shown(), format!("{header}\n{torn}")).unwrap();
    std::fs::write(
        folder.spec_toml().shown(),
        toml::to_string_pretty(&spec("")).unwrap(),
    )
    .unwrap();
    std::fs::create_dir_all(folder.cell(FIX).path()).unwrap();
    // Started the second this run resumes in: a run killed at once.
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    std::fs::write(folder.cell(FIX).running().shown(), format!("4242 {now}\n")).unwrap();

    let lab = Lab::new(tmp.path().join("lab"));
    let s = run(&spec(""), &lab, &out).await.unwrap();
    assert_eq!((s.ok, s.failed, s.skipped), (2, 0, 0));
    let rows = rows_in(&out);
    // The lost row first, then the two measured ones.
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(
        (rows[0].cell_id.as_str(), rows[0].status),
        (FIX, Status::Interrupted)
    );
    // The lost row is the killed attempt's (its start), and the cell's
    // new row starts later: no two rows of a cell share a start, which
    // every reader takes for a file read twice.
    assert_eq!(rows[0].started_at, now);
    let mut keys: Vec<_> = rows.iter().map(|r| (&r.cell_id, &r.started_at)).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), rows.len(), "two rows share a start: {rows:?}");
    assert!(
        rows[0]
            .error
            .starts_with("lost: the run that started this cell (pid 4242)"),
        "{}",
        rows[0].error
    );
    assert!(rows[1..].iter().all(|r| r.status == Status::Ok));
    assert_eq!(
        folder.results_torn().read_to_string().unwrap(),
        format!("{torn}\n")
    );
    assert!(
        !folder.cell(FIX).running().exists(),
        "the marker is the run's, and it ended"
    );
    assert!(!folder.cell(NOFIX).running().exists());
}

/// A run killed after recording a cell's row and before its marker went:
/// the next run removes the marker and writes no lost row (the cell's
/// failed row is there, at the marker's start) and measures the cell. A marker of an older harness (pid only) is
/// dated by its own time, never by the resume's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_whose_row_was_recorded_is_not_a_lost_row() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let folder = RunFolder::new(&out);
    // The no-fix cell fails (recorded, not done: it runs again).
    let failing = Lab::with_hook(
        tmp.path().join("l0"),
        hook(|step, _| match step {
            "mkfs" => Answer::Fail("disk on fire".into()),
            _ => Answer::Normal,
        }),
    );
    run(&spec("variants = [\"nofix\"]\n"), &failing, &out)
        .await
        .unwrap();
    let first = rows_in(&out);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].status, Status::Failed);
    std::fs::write(
        folder.spec_toml().shown(),
        toml::to_string_pretty(&spec("")).unwrap(),
    )
    .unwrap();
    // The no-fix cell's marker, left after its row was written (its start).
    std::fs::write(
        folder.cell(NOFIX).running().shown(),
        format!("4242 {}\n", first[0].started_at),
    )
    .unwrap();
    // The fix cell's marker from an older harness, an hour old.
    std::fs::create_dir_all(folder.cell(FIX).path()).unwrap();
    let old = folder.cell(FIX).running().shown();
    std::fs::write(&old, "4243\n").unwrap();
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();

    let s = run(&spec(""), &Lab::new(tmp.path().join("lab")), &out)
        .await
        .unwrap();
    assert_eq!((s.ok, s.failed, s.skipped), (2, 0, 0));
    let rows = rows_in(&out);
    // The failed row, the fix cell's lost row, and the two measured.
    assert_eq!(rows.len(), 4, "{rows:?}");
    let lost: Vec<_> = rows
        .iter()
        .filter(|r| r.error.starts_with("lost:"))
        .collect();
    assert_eq!(lost.len(), 1, "{rows:?}");
    assert_eq!(lost[0].cell_id, FIX);
    let stamp: chrono::DateTime<chrono::Utc> = hour_ago.into();
    assert_eq!(
        lost[0].started_at,
        stamp.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    assert!(!folder.cell(NOFIX).running().exists());
    assert!(!folder.cell(FIX).running().exists());
}

/// Bad input and missing tools found before anything is written: a kernel
/// source that is not there is exit 2, a build tool missing is exit 4, and
/// neither creates the results folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_source_or_build_tool_fails_before_the_folder_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let lab = Lab::new(tmp.path().join("lab"));
    let err = run(&spec("sources = [\"/no/such/tree\"]\n"), &lab, &out)
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), exit::BAD_INPUT, "{err}");
    assert_eq!(
        exit::one_line(&err),
        "kernel source /no/such/tree: no such folder (give a kernel source tree, a Debian series or a version)"
    );
    let lab = Lab::with_hook(
        tmp.path().join("lab2"),
        hook(|step, _| match step {
            "check" => Answer::Fail("flex".into()),
            _ => Answer::Normal,
        }),
    );
    let err = run(&spec(""), &lab, &out).await.unwrap_err();
    assert_eq!(err.exit_code(), exit::MISSING_TOOL, "{err}");
    assert!(exit::one_line(&err).starts_with("flex is missing"), "{err}");
    assert!(lab.journal().is_empty(), "{:?}", lab.journal());
    assert!(!out.exists(), "left: {:?}", files(&out));
}

/// The SSH connection drops while lazy-init is polled: the cell fails
/// with an error that says so (no reconnect: the guest's state after a
/// drop is unknown), its machine is torn down, the other cell is measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssh_drop_while_polling_fails_only_that_cell() {
    let tmp = tempfile::tempdir().unwrap();
    let lab = Lab::with_hook(
        tmp.path().join("lab"),
        hook(|step, cell| match (step, cell) {
            ("poll", NOFIX) => Answer::Drop,
            _ => Answer::Normal,
        }),
    );
    let out = tmp.path().join("out");
    let s = run(&spec(""), &lab, &out).await.unwrap();
    assert_eq!((s.ok, s.failed, s.interrupted), (1, 1, 0));
    let rows = rows_in(&out);
    let dropped = row(&rows, NOFIX);
    assert_eq!(dropped.status, Status::Failed);
    assert_eq!(
        dropped.error,
        "SSH to the guest failed: connection lost during poll (fake)"
    );
    assert_eq!(
        dropped.measured,
        Default::default(),
        "nothing half-measured"
    );
    assert_eq!(row(&rows, FIX).status, Status::Ok);
    assert!(lab.live_machines().is_empty());
    assert!(!RunFolder::new(&out).cell(NOFIX).running().exists());
}

/// A cell whose teardown fails is named in the summary and left to the
/// provider's `finish`; when that cannot remove it either, the run says
/// what is left and exits 3, whatever the cells measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teardown_that_fails_is_retried_and_a_leak_exits_3() {
    for finish_fails in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let lab = Lab::with_hook(
            tmp.path().join("lab"),
            hook(move |step, cell| match (step, cell) {
                ("teardown", FIX) => Answer::Fail("TerminateInstances refused (fake)".into()),
                ("finish", _) if finish_fails => {
                    Answer::Fail("left behind: i-fake; remove them with `cleanup`".into())
                }
                _ => Answer::Normal,
            }),
        );
        let s = run(&spec(""), &lab, &tmp.path().join("out")).await.unwrap();
        assert_eq!((s.ok, s.failed), (2, 0), "the measurements stand");
        assert_eq!(s.teardown_failures.len(), 1, "{:?}", s.teardown_failures);
        assert!(
            s.teardown_failures[0].starts_with(&format!("{FIX}: "))
                && s.teardown_failures[0].contains("TerminateInstances refused"),
            "{:?}",
            s.teardown_failures
        );
        match finish_fails {
            false => {
                assert!(s.leaks.is_empty(), "{:?}", s.leaks);
                assert_eq!(s.exit_code(false), exit::OK);
            }
            true => {
                assert_eq!(s.leaks, ["left behind: i-fake; remove them with `cleanup`"]);
                assert_eq!(s.exit_code(false), exit::INFRASTRUCTURE);
                assert_eq!(
                    s.exit_code(true),
                    exit::INFRASTRUCTURE,
                    "before an interrupt"
                );
            }
        }
    }
}

/// A cell whose folder cannot be made fails with the file and the reason
/// in its row, and is not started (a killed run could not tell that it
/// had), beside a cell that runs as usual. The run exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_whose_folder_cannot_be_made_fails_saying_which() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let folder = RunFolder::new(&out);
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(folder.cell(NOFIX).path(), "not a folder").unwrap();

    let lab = Lab::new(tmp.path().join("lab"));
    let s = run(&spec(""), &lab, &out).await.unwrap();
    assert_eq!((s.ok, s.failed), (1, 1));
    assert_eq!(s.exit_code(false), exit::REGRESSION_OR_CELL_FAILED);
    let rows = rows_in(&out);
    let nofix = row(&rows, NOFIX);
    assert_eq!(nofix.status, Status::Failed);
    assert_eq!(
        nofix.error,
        format!(
            "cannot write {}: File exists (os error 17)",
            folder.cell(NOFIX).path().display()
        )
    );
    assert!(
        !lab.journal().iter().any(|l| l.contains(NOFIX)),
        "not launched: {:?}",
        lab.journal()
    );
    assert_eq!(row(&rows, FIX).status, Status::Ok);
}

/// The results folder's disk fills while a cell measures (a real tmpfs,
/// filled by the guest's trace step): the cell cannot keep its evidence,
/// which is the host's fault, not the kernel's. No cell is recorded
/// `failed` and no further cell starts; the run ends exit 3 naming the
/// folder, the file and the free space, and leaves no half-written file.
/// Once there is room, the same run resumes and measures both cells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_results_disk_stops_the_run_exit_3_and_a_rerun_measures_every_cell() {
    let disk = Arc::new(lazyinit_core::testing::SmallDisk::new(4096));
    let tmp = tempfile::tempdir().unwrap();
    let out = disk.path().join("out");
    let filler = disk.clone();
    let once = AtomicBool::new(false);
    let lab = Lab::with_hook(
        tmp.path().join("lab"),
        hook(move |step, cell| {
            if step == "collect" && cell == NOFIX && !once.swap(true, Ordering::SeqCst) {
                filler.fill();
            }
            Answer::Normal
        }),
    );
    let one = spec("concurrency = 1\n");
    let err = run(&one, &lab, &out).await.unwrap_err();
    assert_eq!(err.exit_code(), exit::INFRASTRUCTURE, "{err}");
    let RunError::DiskFull { folder, file, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(folder, &out);
    assert!(file.as_ref().unwrap().starts_with(&out), "{file:?}");
    let text = exit::chain_text(&err);
    assert!(
        text.starts_with(&format!(
            "the disk of the results folder {} is full (",
            out.display()
        )) && text.contains(" free; ")
            && text.contains("rerun the same command to resume"),
        "{text}"
    );
    // Nothing failed, nothing half-written: every file there is whole
    // (no empty file, no temporary one).
    let rows = rows_in(&out);
    assert!(rows.iter().all(|r| r.status != Status::Failed), "{rows:?}");
    assert!(
        !rows.iter().any(|r| r.cell_id == FIX),
        "not started: {rows:?}"
    );
    let mut files = vec![out.clone()];
    while let Some(f) = files.pop() {
        if f.is_dir() {
            files.extend(std::fs::read_dir(&f).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.ends_with(".tmp"), "{}", f.display());
        let len = std::fs::metadata(&f).unwrap().len();
        assert!(len > 0 || name == ".lock", "empty: {}", f.display());
    }
    disk.free();
    let s = run(&one, &lab, &out).await.unwrap();
    assert_eq!((s.ok, s.failed), (2, 0));
    let rows = rows_in(&out);
    let statuses: Vec<_> = rows
        .iter()
        .map(|r| (r.cell_id.as_str(), r.status))
        .collect();
    assert_eq!(
        statuses,
        [
            (NOFIX, Status::Interrupted),
            (NOFIX, Status::Ok),
            (FIX, Status::Ok)
        ]
    );
    drop(disk);
}
