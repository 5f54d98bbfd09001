//! Faults on the twin (issue 12): the API refuses CreateVolume mid-matrix;
//! the SSH connection drops during lazy-init; the harness is killed with
//! SIGKILL mid-run, after which a later `cleanup --expired`, or the expiry
//! the kexec'd kernel carries, removes everything; a teardown the API
//! refuses makes the run exit 3 naming what is left and how to remove it.
//!
//! Small volumes (8 GiB, 64 groups) and the x86_64 kernel the c5 cell
//! test builds keep each a guest boot and a few seconds of lazy-init.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::*;
use lazyinit_core::events::{Event, Phase};
use lazyinit_core::results::Status;
use lazyinit_core::{Arch, RunFolder};
use lazyinit_ec2::cleanup::{cleanup, project_instances, Sweep};
use lazyinit_ec2::ops::Pace;
use lazyinit_twin::harness::HarnessConfig;
use lazyinit_twin::{Calls, Happening};

const OWNER: &str = "lazyinit-twin";

fn small_spec(name: &str, reps: u32) -> String {
    spec(name, Arch::X86_64, 250, "nofix", "8GiB", reps)
}

fn pace() -> Pace {
    Pace {
        interval: Duration::from_millis(100),
        timeout: Duration::from_secs(60),
    }
}

/// The API refuses the second of three CreateVolume calls: that cell fails
/// with the refusal in its row, its instance is terminated, and the cells
/// before and after it run to their rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_volume_refused_mid_matrix() {
    let tmp = tempfile::tempdir().unwrap();
    let twin = twin(tmp.path(), &[Arch::X86_64]).await;
    twin.api
        .refuse("CreateVolume", Calls::Nth(2), "VolumeLimitExceeded", 400);
    let h = twin.harness(&tmp.path().join("results"), &small_spec("twin-cv", 3), "3h");
    let (r, _) = run(&h, |_| {}).await;
    let consoles = twin.controller.consoles();
    let o = r.unwrap_or_else(|e| panic!("{e:#}\n{consoles}"));
    let mut rows = o.rows.clone();
    rows.sort_by_key(|r| r.repetition);
    let st: Vec<Status> = rows.iter().map(|r| r.status).collect();
    assert_eq!(
        st,
        [Status::Ok, Status::Failed, Status::Ok],
        "{rows:?}\n{consoles}"
    );
    let err = &rows[1].error;
    assert!(
        err.contains("CreateVolume") && err.contains("VolumeLimitExceeded"),
        "{err}"
    );
    let api = twin.api.counts();
    println!(
        "API calls: {}; refused: {:?}",
        counts(&api),
        twin.api.refused()
    );
    assert_eq!(api.get("CreateVolume"), Some(&3));
    assert_eq!(api.get("RunInstances"), Some(&3));
    assert_eq!(
        api.get("TerminateInstances"),
        Some(&3),
        "the refused cell's instance went too"
    );
    assert!(o.summary.leaks.is_empty(), "{:?}", o.summary.leaks);
    assert_eq!(
        o.summary.exit_code(false),
        lazyinit_core::exit::REGRESSION_OR_CELL_FAILED
    );
    // No guest ever started for the instance without a volume.
    let started = twin
        .controller
        .events()
        .iter()
        .filter(|e| matches!(e.what, Happening::Started { .. }))
        .count();
    assert_eq!(started, 2);
    println!(
        "outcome: exit {}, rows {st:?}, error: {err}",
        o.summary.exit_code(false)
    );
    nothing_left(&twin, tmp.path()).await;
}

/// The harness's SSH connection is cut while lazy-init runs: the cell fails
/// saying so, and its instance and volume are released through the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_drop_during_lazyinit_fails_the_cell_and_releases_it() {
    let tmp = tempfile::tempdir().unwrap();
    let twin = twin(tmp.path(), &[Arch::X86_64]).await;
    let h = twin.harness(
        &tmp.path().join("results"),
        &small_spec("twin-ssh", 1),
        "3h",
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let severing = async {
        rx.recv().await;
        let live = twin.controller.live();
        assert_eq!(live.len(), 1);
        let n = twin.controller.sever_ssh(&live[0].instance).unwrap();
        println!("severed {n} SSH connection(s) of {}", live[0].instance);
        live[0].instance.clone()
    };
    let (ran, iid) = tokio::join!(
        run(&h, move |e| {
            if matches!(
                e,
                Event::Phase {
                    phase: Phase::Lazyinit,
                    ..
                }
            ) {
                let _ = tx.send(());
            }
        }),
        severing
    );
    let o = ran.0.unwrap_or_else(|e| panic!("{e:#}"));
    let row = &o.rows[0];
    assert_eq!(row.status, Status::Failed);
    assert!(
        row.error.contains("SSH to the guest failed"),
        "{}",
        row.error
    );
    println!(
        "outcome: exit {}, error: {}",
        o.summary.exit_code(false),
        row.error
    );
    assert!(o.summary.leaks.is_empty(), "{:?}", o.summary.leaks);
    assert_eq!(
        o.summary.exit_code(false),
        lazyinit_core::exit::REGRESSION_OR_CELL_FAILED
    );
    nothing_left(&twin, tmp.path()).await;
    assert!(
        twin.controller
            .events_of(&iid)
            .iter()
            .any(|e| matches!(&e.what, Happening::Stopped { instance_state } if instance_state.contains("terminated"))),
        "{:?}",
        twin.controller.events_of(&iid)
    );
}

/// `twin-run`, the harness as a process of its own.
struct Harness {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: std::path::PathBuf,
}

fn spawn_harness(h: &HarnessConfig, dir: &Path) -> Harness {
    let cfg = dir.join("harness.json");
    std::fs::write(&cfg, serde_json::to_string(h).unwrap()).unwrap();
    let stderr = dir.join("harness.stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_twin-run"))
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    Harness {
        child,
        lines,
        stderr,
    }
}

impl Harness {
    fn wait_phase(&self, phase: &str, within: Duration) -> bool {
        let until = Instant::now() + within;
        let want = format!("\"phase\":\"{phase}\"");
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(&want) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    }
    fn sigkill(&mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let st = self.child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&st),
            Some(9),
            "{st}"
        );
    }
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

/// The one instance of the twin, with its expiry tag.
async fn the_instance(twin: &lazyinit_twin::Twin) -> (String, DateTime<Utc>) {
    let c = twin.client().await;
    let inst = project_instances(&c, None).await.unwrap();
    assert_eq!(inst.len(), 1, "{inst:?}");
    let exp = lazyinit_ec2::tags::tag_value(&inst[0].tags, "ExpiresAt").unwrap();
    (inst[0].id.clone(), exp.parse().unwrap())
}

/// A harness killed with SIGKILL mid-run tears nothing down: its instance,
/// volumes and guest stay. A later `cleanup --expired` (the caller's own
/// resources, as the CLI sweeps them, run once they have expired) removes
/// everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_then_cleanup_expired_removes_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let twin = twin(tmp.path(), &[Arch::X86_64]).await;
    let h = twin.harness(
        &tmp.path().join("results"),
        &small_spec("twin-kill", 1),
        "1h",
    );
    let mut harness = spawn_harness(&h, tmp.path());
    assert!(
        harness.wait_phase("lazyinit", Duration::from_secs(900)),
        "no lazy-init phase:\n{}\n{}",
        harness.stderr(),
        twin.controller.consoles()
    );
    harness.sigkill();
    let (iid, exp) = the_instance(&twin).await;
    let c = twin.client().await;
    // Nothing tore it down: the instance runs, its guest too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        lazyinit_ec2::ops::describe_instance(&c, &iid)
            .await
            .unwrap()
            .unwrap()
            .state,
        "running"
    );
    assert_eq!(twin.controller.live().len(), 1);
    let vols = lazyinit_ec2::cleanup::project_volumes(&c, None)
        .await
        .unwrap();
    println!(
        "after SIGKILL: instance {iid} running, volumes {:?}, guest live",
        vols.iter().map(|v| &v.id).collect::<Vec<_>>()
    );

    // Before the expiry the sweep leaves it alone...
    let now = Sweep::new(None, true, Some(OWNER.into()), false);
    assert!(cleanup(&c, &now, pace()).await.unwrap().is_empty());
    // ...and after it, removes all of it.
    let mut later = now.clone();
    later.now = exp + chrono::Duration::seconds(1);
    let report = cleanup(&c, &later, pace()).await.unwrap();
    print!(
        "cleanup --expired as of {}:\n{}",
        later.now,
        report.render()
    );
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.instances.len(), 1);
    assert_eq!(report.volumes.len(), 2, "data and root volume: {report:?}");
    nothing_left(&twin, tmp.path()).await;
}

/// A harness killed with SIGKILL mid-run, and nobody sweeping: at the
/// expiry the kexec'd kernel's /init powers the guest off, QEMU exits, and
/// (shutdown behaviour terminate) the instance and its volumes go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_then_the_expiry_removes_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let twin = twin(tmp.path(), &[Arch::X86_64]).await;
    let h = twin.harness(
        &tmp.path().join("results"),
        &small_spec("twin-expiry", 1),
        "90s",
    );
    let mut harness = spawn_harness(&h, tmp.path());
    assert!(
        harness.wait_phase("lazyinit", Duration::from_secs(80)),
        "no lazy-init phase before the expiry:\n{}\n{}",
        harness.stderr(),
        twin.controller.consoles()
    );
    harness.sigkill();
    let killed = Utc::now();
    let (iid, exp) = the_instance(&twin).await;
    println!(
        "SIGKILL at {killed}; the expiry {exp} is {:.0} s away",
        (exp - killed).num_milliseconds() as f64 / 1000.0
    );
    let pid = twin.controller.live()[0].qemu_pid;
    let until = Instant::now()
        + Duration::from_secs(((exp - Utc::now()).num_seconds().max(0) + 120) as u64);
    let off = loop {
        if let Some(e) = twin
            .controller
            .events_of(&iid)
            .into_iter()
            .find(|e| e.what == Happening::PoweredOff)
        {
            break e.at;
        }
        assert!(
            Instant::now() < until,
            "no power-off by {exp} + 120 s:\n{}",
            twin.controller.console(&iid)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let late = (off - exp).num_milliseconds() as f64 / 1000.0;
    println!("guest powered off at {off}: {late:+.1} s from the expiry; QEMU pid {pid:?} exited");
    assert!(late >= -2.0, "powered off {late} s before the expiry");
    assert!(late < 60.0, "powered off {late} s after the expiry");
    let console = twin.controller.console(&iid);
    assert!(
        console.contains("lazyinit: expiry reached: powering off"),
        "{console}"
    );
    if let Some(pid) = pid {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "QEMU {pid} still runs"
        );
    }
    // EC2's part: shutdown behaviour terminate.
    let until = Instant::now() + Duration::from_secs(30);
    while !twin
        .controller
        .events_of(&iid)
        .iter()
        .any(|e| e.what == Happening::ShutdownApplied("terminate".into()))
    {
        assert!(
            Instant::now() < until,
            "{:?}",
            twin.controller.events_of(&iid)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    nothing_left(&twin, tmp.path()).await;
}

/// The API refuses TerminateInstances: the cell's teardown fails, the
/// retry at the end of the run too, and the run exits 3 naming the ids and
/// the command that removes them; that command's sweep then does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_teardown_exits_3_with_ids_and_the_cleanup_command() {
    let tmp = tempfile::tempdir().unwrap();
    let twin = twin(tmp.path(), &[Arch::X86_64]).await;
    twin.api.refuse(
        "TerminateInstances",
        Calls::All,
        "UnauthorizedOperation",
        403,
    );
    let out = tmp.path().join("results");
    let h = twin.harness(&out, &small_spec("twin-leak", 1), "3h");
    let mut harness = spawn_harness(&h, tmp.path());
    let st = harness.child.wait().unwrap();
    let stderr = harness.stderr();
    assert_eq!(st.code(), Some(3), "{stderr}");
    let folder = RunFolder::new(&out);
    let rows = folder.results_csv().rows().unwrap();
    assert_eq!(rows[0].status, Status::Ok, "the measurement itself worked");
    let (iid, _) = the_instance(&twin).await;
    let rec: serde_json::Value = serde_json::from_str(
        &folder
            .cell(&rows[0].cell_id)
            .ec2_json()
            .read_to_string()
            .unwrap(),
    )
    .unwrap();
    let vid = rec["volume_id"].as_str().unwrap();
    let command = format!(
        "lazyinit-bench cleanup --run-id {} --owner {OWNER} --region us-east-1 --endpoint-url {}",
        rows[0].run_id, twin.api.url
    );
    let leak = stderr
        .lines()
        .find(|l| l.starts_with("error: cleanup left resources behind"))
        .unwrap_or_else(|| panic!("{stderr}"));
    println!("exit 3: {leak}");
    assert!(leak.contains(&iid) && leak.contains(vid), "{leak}");
    assert!(leak.contains(&command), "{leak}\nwanted: {command}");

    // The command's sweep, once the API lets it.
    twin.api.allow("TerminateInstances");
    let c = twin.client().await;
    let sweep = Sweep::new(
        Some(rows[0].run_id.clone()),
        false,
        Some(OWNER.into()),
        false,
    );
    let report = cleanup(&c, &sweep, pace()).await.unwrap();
    print!("{}", report.render());
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    nothing_left(&twin, tmp.path()).await;
}
