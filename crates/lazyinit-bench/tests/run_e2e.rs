//! End to end on real components: kernels built from Debian's source, real
//! QEMU (TCG here), the project's initramfs with dropbear, mkfs and mount in
//! the guest, the tracepoint, and the result CSV. Slow (minutes on a cold
//! cache: it builds the kernels it needs), so it runs the `smoke` preset.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lazyinit_core::results::{read_rows, Status};
use lazyinit_core::{model, Variant};
use lazyinit_guest::protocol::MAX_ATTEMPTS;

mod kcidb_support;
mod leftovers;
use leftovers::{files_under, sockets};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lazyinit-bench"))
}

/// QEMU processes whose command line mentions `needle`.
fn qemu_processes_with(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.starts_with("qemu-system") && cmd.contains(needle) {
            out.push(cmd);
        }
    }
    out
}

/// Pids of QEMU processes whose command line mentions `needle`.
fn qemu_pids_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (cmd.starts_with("qemu-system") && cmd.contains(needle)).then_some(pid)
        })
        .collect()
}

/// Every thread of `pid` under SCHED_FIFO.
fn all_threads_fifo(pid: u32) -> bool {
    let p = lazyinit_qemu::process::thread_policies(pid);
    !p.is_empty() && p.iter().all(|x| *x == 1)
}

/// No QMP or NBD socket left in a results folder.
#[test]
fn smoke_run_measures_both_variants() {
    let out = tempfile::tempdir().unwrap();
    let vols = tempfile::tempdir().unwrap();
    let spec = out.path().join("smoke.toml");
    std::fs::write(
        &spec,
        format!(
            "{}\n[provider-config.qemu]\nvolume-dir = \"{}\"\n",
            include_str!("../../../specs/smoke.toml"),
            vols.path().display()
        ),
    )
    .unwrap();
    // Each row goes into a history as it is written (`run --history`).
    let db = format!("sqlite:{}", out.path().join("history.sqlite").display());
    let mut child = Command::new(bin())
        .args(["run", spec.to_str().unwrap(), "--history", &db, "--out"])
        .arg(out.path().join("res"))
        .spawn()
        .unwrap();
    // While a cell is in its measured phase, its guest runs at real-time
    // priority on the host (docs/concurrency.md): seen in /proc.
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut saw_realtime = false;
    while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        if qemu_pids_with(out.path().to_str().unwrap())
            .iter()
            .any(|pid| all_threads_fifo(*pid))
        {
            saw_realtime = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = child.wait().unwrap();
    let csv = out.path().join("res/results.csv");
    let rows = read_rows(&csv).unwrap();
    for r in &rows {
        if r.status != Status::Ok {
            let err =
                std::fs::read_to_string(out.path().join("res").join(&r.cell_id).join("error.txt"))
                    .unwrap_or_default();
            panic!("cell {} {}: {}\n{err}", r.cell_id, r.status, r.error);
        }
    }
    assert!(status.success(), "run exited with {status}");
    assert_eq!(rows.len(), 2);
    // The history holds both rows, with the values the CSV has.
    let show = Command::new(bin())
        .args([
            "history",
            "show",
            "--db",
            &db,
            "--metric",
            "lazyinit_s",
            "--format",
            "csv",
        ])
        .output()
        .unwrap();
    assert!(
        show.status.success(),
        "{}",
        String::from_utf8_lossy(&show.stderr)
    );
    let mut values: Vec<f64> = csv::Reader::from_reader(&show.stdout[..])
        .records()
        .map(|r| r.unwrap()[6].parse().unwrap())
        .collect();
    let mut want: Vec<f64> = rows
        .iter()
        .map(|r| r.measured.lazyinit_s.unwrap())
        .collect();
    values.sort_by(f64::total_cmp);
    want.sort_by(f64::total_cmp);
    assert_eq!(
        values,
        want,
        "history show: {}",
        String::from_utf8_lossy(&show.stdout)
    );
    // CI runs as root (scripts/test.sh); without root the harness only
    // warns, and this test says why it fails.
    assert!(
        lazyinit_qemu::process::is_root(),
        "this test needs root (or CAP_SYS_NICE): guests' priorities are part of what it checks"
    );
    assert!(
        saw_realtime,
        "no guest ran at real-time priority during its measured phase"
    );
    for r in &rows {
        let groups = r.measured.groups.unwrap();
        assert_eq!(
            groups,
            model::groups(lazyinit_core::ByteSize(r.axes.volume.0))
        );
        assert_eq!(r.measured.traced_groups, Some(groups), "every group traced");
        assert!(r
            .kernel_release
            .contains(&format!("hz{}-{}", r.axes.hz, r.axes.variant)));
        assert!(!r.measured.clocksource.contains("jiffies"));
        assert!(
            r.measured.lazyinit_s.unwrap() > 0.0
                && r.measured.mkfs_s.is_some()
                && r.measured.mount_s.is_some()
        );
        assert!(
            r.boot_s.is_some()
                && r.measured.first_group_s.is_some()
                && r.measured.sleep_ticks.is_some()
        );
        assert!(
            !r.testbed.machine.as_str().is_empty()
                && !r.testbed.accel.to_string().is_empty()
                && !r.measured.mkfs_cmd.is_empty()
        );
        assert!(out
            .path()
            .join("res")
            .join(&r.cell_id)
            .join("groups.csv")
            .exists());
    }
    let nofix = rows
        .iter()
        .find(|r| r.axes.variant == Variant::NoFix)
        .unwrap();
    let fix = rows
        .iter()
        .find(|r| r.axes.variant == Variant::Fix)
        .unwrap();
    // Without the fix a cycle is the sleep's W = 10 ticks and the tick it
    // starts in, whatever the zeroing time, plus the ticks the host's part
    // crossed: bounded on that part (`check_nofix_cycle`), as the model's
    // (W + 1) ticks are not a band a loaded host holds (50.5 ms/group
    // against 44.0 in a cold CI run, 1.6 ticks crossed).
    lazyinit_core::testing::check_nofix_cycle(
        &nofix.measured,
        nofix.axes.hz.get(),
        u64::from(nofix.axes.wait_mult),
        &lazyinit_report::input::cell_groups(
            &lazyinit_core::RunFolder::new(out.path().join("res")).cell(&nofix.cell_id),
        )
        .unwrap()
        .expect("groups.csv")
        .zeroings_ms(),
    )
    .unwrap_or_else(|e| panic!("no-fix cell: {e}"));
    // The smoke preset uses the `ebs` profile: every zero request goes
    // through the harness's NBD server with a hold, calibrated on each guest
    // so that the first zeroing z1 comes to 3.4 ms, the middle of the z1
    // interval [3.2, 3.6) ms that sleeps L = floor(10 z1 HZ) = 8 ticks at
    // HZ=250 with the fix. Both variants get the same storage.
    //
    // A host too noisy to hold that window (the cold CI run of 66374ab:
    // calibration spread 3.55-5.19 ms, five attempts, kept z1 4.80 ms and
    // L=12) must say so in the row (issue 37: never a silent L), and then
    // L is whatever that z1 gives: L=8 is asserted when the profile held.
    let l = fix.measured.sleep_ticks.unwrap();
    let fix_z1 = fix.measured.z1_ms.unwrap();
    let held = fix.measured.profile_held;
    println!("run_e2e: fix z1 {fix_z1:.3} ms, L={l}, profile held: {held:?}");
    if held == Some(false) {
        assert!(
            !(3.2..3.6).contains(&fix_z1),
            "profile_held=false with z1 {fix_z1} ms (in the window) after {:?} attempts",
            fix.measured.z1_attempts
        );
        let report = std::fs::read_to_string(out.path().join("res/report.md")).unwrap();
        assert!(report.contains("profile not held"), "{report}");
    } else {
        assert_eq!(held, Some(true), "profile_held unset on a calibrated cell");
        // The kernel's L on the kernel's own z1, which the trace reads 0 to
        // 0.3 ms low (docs/storage-profiles.md): a traced 3.576 ms slept 9
        // twice in 40 slowed runs (results/l-held-median), so a z1 within
        // 0.3 ms of the window's top may sleep 9; anywhere else 8.
        let hi = ((fix_z1 + 0.3) * 2.5).floor() as u64;
        assert!(
            l == 8 || l == 9 && hi >= 9,
            "fix slept L={l}; a traced z1 of {fix_z1} ms gives 8..={hi}"
        );
    }
    for r in &rows {
        assert_eq!(r.measured.z1_target_ms, Some(3.4), "{}", r.cell_id);
        let (g, h) = (
            r.measured.guest_part_ms.unwrap(),
            r.measured.zero_hold_ms.unwrap(),
        );
        assert!(g > 0.0 && g < 3.4, "guest part {g} ms");
        // The calibrated hold, unless a missed first zeroing set it again
        // (from that zeroing's own guest part) for a further attempt.
        let attempts = r.measured.z1_attempts.unwrap();
        assert!(
            (1..=MAX_ATTEMPTS).contains(&attempts),
            "{attempts} attempts"
        );
        if attempts == 1 {
            assert!((g + h - 3.4).abs() < 0.002, "hold {h} + guest part {g}");
        } else {
            assert!(h > 0.0 && h < 3.4, "hold {h}");
        }
        // Without the fix, a first zeroing outside [3.2, 3.6) ms is only
        // ever kept as the last attempt (z1 is the controlled quantity;
        // each zeroing's own part varies by ~0.1 ms under TCG). With the
        // fix, the L counted on the tick grid decides (the trace's z1 reads
        // a little below the kernel's): the L=8 above, whatever z1 says.
        let z1 = r.measured.z1_ms.unwrap();
        assert!(
            (3.2..3.6).contains(&z1) || attempts == MAX_ATTEMPTS || r.axes.variant == Variant::Fix,
            "{}: measured z1 {z1} ms after {attempts} attempts",
            r.cell_id
        );
        let dir = out.path().join("res").join(&r.cell_id);
        let st = std::fs::read_to_string(dir.join("storage.txt")).unwrap();
        assert!(st.contains("z1_target_us=3400\n"), "{st}");
        let cal = std::fs::read_to_string(dir.join("calibration.csv")).unwrap();
        assert_eq!(cal.lines().count(), 7, "{cal}");
        let groups = std::fs::read_to_string(dir.join("groups.csv")).unwrap();
        assert!(groups.starts_with("group,t_s,zero_ms\n"), "{groups}");
    }
    // Log lines go to the run's log, not only to stderr.
    let log = std::fs::read_to_string(out.path().join("res/run.log")).unwrap();
    assert!(log.contains("launching"), "{log}");
    // The fix shortens the sleep and so the cycle (the point of the fix).
    // With EBS-like zeroing the gain at HZ=250 is small, as in the report
    // (x86_64: 544 against 743 s at 2 TiB, 932 against 1110 at 3 TiB): L
    // about 8 against 10, so a cycle about 18% shorter.
    assert!(
        held == Some(false)
            || fix.measured.sleep_ticks.unwrap() < nofix.measured.sleep_ticks.unwrap()
                && fix.measured.ms_per_group < nofix.measured.ms_per_group,
        "fix {:?} ms/group (L={l}) vs nofix {:?} (L={:?})",
        fix.measured.ms_per_group,
        nofix.measured.ms_per_group,
        nofix.measured.sleep_ticks
    );
    // Nothing left behind.
    assert!(
        files_under(vols.path()).is_empty(),
        "volumes left: {:?}",
        files_under(vols.path())
    );
    assert!(qemu_processes_with(vols.path().to_str().unwrap()).is_empty());
    assert!(qemu_processes_with(out.path().to_str().unwrap()).is_empty());
    let left = sockets(&out.path().join("res"));
    assert!(left.is_empty(), "sockets left: {left:?}");

    // Rerunning the same spec into the same folder resumes: nothing to do,
    // no duplicated rows.
    let again = Command::new(bin())
        .args(["run", spec.to_str().unwrap(), "--no-report", "--out"])
        .arg(out.path().join("res"))
        .status()
        .unwrap();
    assert!(again.success());
    assert_eq!(read_rows(&csv).unwrap().len(), 2);

    // The fresh run as a KCIDB report, accepted by kcidb-io's validator:
    // both cells measured, the kernels this run built described from the
    // cache's manifests, each cell's console.log its tests' log.
    let v = kcidb_support::export_valid(&bin(), &csv, &[]);
    let tests = v["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 2 * 3);
    assert!(tests.iter().all(|t| t["status"] == "DONE"), "{v}");
    assert!(tests.iter().all(|t| t["log_url"]
        .as_str()
        .is_some_and(|u| u.ends_with("/console.log"))));
    let builds = v["builds"].as_array().unwrap();
    assert_eq!(builds.len(), 2);
    assert!(builds.iter().all(|b| b.get("compiler").is_some()), "{v}");
}

/// Waits until the run's event log shows `phase` for some cell.
fn wait_for_phase(events: &Path, phase: &str, deadline: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if std::fs::read_to_string(events)
            .unwrap_or_default()
            .contains(&format!("\"phase\":\"{phase}\""))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

fn interrupt_during(phase: &str) {
    let out = tempfile::tempdir().unwrap();
    let vols = tempfile::tempdir().unwrap();
    let spec = out.path().join("smoke.toml");
    std::fs::write(
        &spec,
        format!(
            "{}\n[provider-config.qemu]\nvolume-dir = \"{}\"\n",
            include_str!("../../../specs/smoke.toml").replace("32GiB", "128GiB"),
            vols.path().display()
        ),
    )
    .unwrap();
    let res = out.path().join("res");
    let mut child = Command::new(bin())
        .args(["run", spec.to_str().unwrap(), "--no-report", "--out"])
        .arg(&res)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let reached = wait_for_phase(&res.join("events.jsonl"), phase, Duration::from_secs(900));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let signalled = Instant::now();
    let status = child.wait().unwrap();
    let took = signalled.elapsed();
    assert!(reached, "the run never reached {phase}");
    assert_eq!(status.code(), Some(130), "interrupted runs exit 130");
    assert!(
        took < Duration::from_secs(10),
        "exit took {took:?} after SIGINT"
    );
    assert!(
        qemu_processes_with(vols.path().to_str().unwrap()).is_empty()
            && qemu_processes_with(res.to_str().unwrap()).is_empty(),
        "QEMU left running"
    );
    let left = sockets(&res);
    assert!(left.is_empty(), "sockets left: {left:?}");
    assert!(
        files_under(vols.path()).is_empty(),
        "volumes left: {:?}",
        files_under(vols.path())
    );
    let rows = read_rows(res.join("results.csv")).unwrap();
    // At least the cell that reached the phase has its row (an empty
    // results.csv would pass the check below without checking anything).
    assert!(!rows.is_empty(), "no row recorded");
    assert!(
        rows.iter().all(|r| r.status == Status::Interrupted),
        "{rows:?}"
    );
}

/// The early stop on real guests: the smoke cells stop once their cycle
/// has locked after 25 of their 256 groups, and say they are estimates.
/// Whether a cycle locks is the host's: the with-fix cell's zeroing is
/// held at 3.4 ms of a 4 ms tick, and on a loaded host the share of its
/// cycles that cross a tick can change mid-run (a CI run saw 40.3 then
/// 42.4 ms a cycle, and no check of the 256 groups locked). Such a cell
/// must be measured to its end, as a measurement, with every check's
/// reason in its log; at least one cell must stop early, or the test has
/// not seen the early stop at all.
#[test]
fn smoke_run_with_estimates_stops_early() {
    let out = tempfile::tempdir().unwrap();
    let vols = tempfile::tempdir().unwrap();
    let spec = out.path().join("smoke.toml");
    std::fs::write(
        &spec,
        format!(
            "{}\n[provider-config.qemu]\nvolume-dir = \"{}\"\n",
            include_str!("../../../specs/smoke.toml"),
            vols.path().display()
        ),
    )
    .unwrap();
    let res = out.path().join("res");
    let status = Command::new(bin())
        .args([
            "run",
            spec.to_str().unwrap(),
            "--estimate-after",
            "25",
            "--out",
        ])
        .arg(&res)
        .status()
        .unwrap();
    let rows = read_rows(res.join("results.csv")).unwrap();
    assert!(status.success(), "run exited with {status}: {rows:?}");
    assert_eq!(rows.len(), 2);
    let mut stopped_early = 0;
    for r in &rows {
        assert_eq!(r.status, Status::Ok, "{}: {}", r.cell_id, r.error);
        assert_eq!(r.estimate_after, Some(25));
        let cell = res.join(&r.cell_id);
        let log = std::fs::read_to_string(cell.join("estimate.txt")).unwrap();
        if !r.measured.estimated {
            // Never locked: measured to the end, a measurement, and the
            // log gives each check's reason.
            eprintln!(
                "{}: the cycle never locked; measured to its end:\n{log}",
                r.cell_id
            );
            assert!(!log.contains(": locked"), "{log}");
            assert!(log.contains("check at "), "{log}");
            assert!(log.trim_end().ends_with(": measured"), "{log}");
            assert_eq!(r.measured.traced_groups, r.measured.groups, "{}", r.cell_id);
            assert_eq!(r.measured.estimate_groups, None, "{}", r.cell_id);
            assert_eq!(r.measured.lazyinit_lo_s, None, "{}", r.cell_id);
            assert!(r.measured.lazyinit_s.is_some(), "{}", r.cell_id);
            continue;
        }
        stopped_early += 1;
        let n = r.measured.estimate_groups.unwrap();
        let groups = r.measured.groups.unwrap();
        assert!((25..groups).contains(&n), "{n} of {groups}");
        assert_eq!(r.measured.traced_groups, Some(n));
        let (lo, hi, est) = (
            r.measured.lazyinit_lo_s.unwrap(),
            r.measured.lazyinit_hi_s.unwrap(),
            r.measured.lazyinit_s.unwrap(),
        );
        assert!(lo <= est && est <= hi, "{lo} {est} {hi}");
        // docs/design.md §2: (L + 1) ticks a group, from the first group
        // on, plus one more tick for each cycle whose zeroing crosses a
        // tick. On a quiet host the estimate is within 1% of L + 1; beside
        // other tests' guests (CI runs two tests at once, a bisect's guests
        // and builds among them) up to a quarter of the cycles cross, and
        // an honest estimate follows them: it must sit between every cycle
        // at L + 1 ticks and every cycle at L + 2, or at the slowest cycle it
        // traced when a wakeup came more than a tick late (a loaded CI host
        // saw 10.273 s against 10.24 s at L + 2 for 256 groups).
        let traced = std::fs::read_to_string(cell.join("groups.csv")).unwrap();
        assert_eq!(traced.lines().count() as u64, n + 1);
        let times: Vec<f64> = traced
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
            .collect();
        let slowest_cycle = times
            .windows(2)
            .map(|w| w[1] - w[0])
            .fold(f64::NAN, f64::max);
        assert!(slowest_cycle > 0.0, "no cycle in {traced}");
        let l = r.measured.sleep_ticks.unwrap() as f64;
        let tick = 1.0 / r.axes.hz.get() as f64;
        let (fastest, slowest) = (
            groups as f64 * (l + 1.0) * tick,
            groups as f64 * ((l + 2.0) * tick).max(slowest_cycle),
        );
        let from_first = est - r.measured.first_group_s.unwrap();
        assert!(
            from_first >= fastest * 0.99 && from_first <= slowest,
            "{from_first} s from the first group, outside {fastest}..{slowest} s (L = {l}, slowest traced cycle {slowest_cycle} s)"
        );
        assert!(log.contains(": locked"), "{log}");
    }
    assert!(stopped_early >= 1, "no cell stopped early: {rows:?}");
    assert!(qemu_processes_with(out.path().to_str().unwrap()).is_empty());
}

#[test]
fn sigint_during_boot_leaves_nothing() {
    interrupt_during("boot");
}

#[test]
fn sigint_during_lazyinit_leaves_nothing() {
    interrupt_during("lazyinit");
}

#[test]
fn bad_input_fails_before_anything_starts() {
    for (args, needle) in [
        (
            vec![
                "run",
                "--arch",
                "sparc",
                "--hz",
                "100",
                "--variant",
                "fix",
                "--size",
                "8GiB",
            ],
            "sparc",
        ),
        (
            vec![
                "run",
                "--arch",
                "x86_64",
                "--hz",
                "100",
                "--variant",
                "fix",
                "--size",
                "lots",
            ],
            "not a size",
        ),
        (
            vec![
                "run",
                "--arch",
                "x86_64",
                "--hz",
                "100",
                "--variant",
                "fix",
                "--size",
                "1000TiB",
            ],
            "sparse",
        ),
        (
            vec![
                "run",
                "--arch",
                "x86_64",
                "--hz",
                "100",
                "--variant",
                "fix",
                "--size",
                "1000000TiB",
            ],
            "use at most 1024TiB",
        ),
        (
            vec!["run", "no-such-spec"],
            "neither a spec file nor a preset",
        ),
        (
            vec!["run", "--arch", "x86_64", "--hz", "100"],
            "needs all of",
        ),
    ] {
        let out = Command::new(bin()).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
