use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use lazyinit_core::events::EventSink;
use lazyinit_core::{Arch, Hz, Variant};
use lazyinit_estimate::synth::{self, generate, Run};

use super::*;
use crate::{NoGate, RemoteOutput};

/// The trace clock at the end of the mount.
const MOUNT_DONE: f64 = 100.0;

/// A guest in its measured phase, on a synthetic run: time moves on only
/// while the protocol blocks in wait-groups.sh, to the group it waits for.
struct Lazyinit {
    run: synth::Trace,
    /// Guest clock, seconds since the end of the mount.
    now: f64,
    /// What the protocol ran, in order, and when the critical span ended
    /// (shared with the span's guard).
    scripts: Arc<Mutex<Vec<String>>>,
    /// Set at the first wait (an interrupt while the groups come).
    cancel_at_wait: Option<Arc<AtomicBool>>,
}

impl Lazyinit {
    fn new(run: synth::Trace) -> Self {
        Lazyinit {
            now: run.t_s[0] - 0.5,
            run,
            scripts: Arc::default(),
            cancel_at_wait: None,
        }
    }
    fn record(&self, what: String) {
        self.scripts.lock().unwrap().push(what);
    }
    fn scripts(&self) -> Vec<String> {
        self.scripts.lock().unwrap().clone()
    }
    fn done(&self) -> usize {
        self.run.t_s.iter().filter(|&&t| t <= self.now).count()
    }
    fn trace(&self) -> String {
        let mut t = String::from("# tracer: nop\n");
        let at = |ts: f64| MOUNT_DONE + ts;
        t.push_str(&format!(
            "  sh-1 [000] ..... {:.6}: tracing_mark_write: lazyinit-mount-start\n",
            at(-0.15)
        ));
        t.push_str(&format!(
            "  sh-1 [000] ..... {:.6}: tracing_mark_write: lazyinit-mount-done\n",
            at(0.0)
        ));
        for (g, (ts, z)) in self.run.t_s.iter().zip(&self.run.zero_s).enumerate() {
            if *ts > self.now {
                break;
            }
            let start = ts - z.unwrap_or(0.0);
            t.push_str(&format!("  ext4lazyinit-120 [000] ..... {:.6}: ext4_journal_start: dev 254,0 blocks 1, rsv_blocks 0, revoke_creds 8, caller 0x0\n", at(start)));
            t.push_str(&format!(
                "  ext4lazyinit-120 [000] ..... {:.6}: ext4_lazy_itable_init: dev 254,0 group {}\n",
                at(*ts),
                g + 1
            ));
        }
        if self.now >= self.run.exit_s {
            t.push_str(&format!("  ext4lazyinit-120 [000] ..... {:.6}: sched_process_exit: comm=ext4lazyinit pid=120 prio=120\n", at(self.run.exit_s)));
        }
        t
    }
}

fn ok(stdout: String) -> Result<RemoteOutput, GuestError> {
    Ok(RemoteOutput {
        status: 0,
        stdout,
        stderr: String::new(),
    })
}

impl Remote for Lazyinit {
    fn exec(&mut self, script: &str, _t: Duration) -> Result<RemoteOutput, GuestError> {
        if script == POLL_SH {
            self.record("poll".into());
            let pid = if self.now < self.run.exit_s {
                "120"
            } else {
                ""
            };
            return ok(format!("pid={pid}\ngroups={}\n", self.done()));
        }
        if script.ends_with(WAIT_GROUPS_SH) {
            // `set -- K T`: wait until K groups in all were zeroed.
            let args = script
                .lines()
                .next()
                .unwrap()
                .strip_prefix("set -- ")
                .unwrap();
            let upto: usize = args.split_whitespace().next().unwrap().parse().unwrap();
            let k = upto.saturating_sub(self.done());
            self.record(format!("wait {k}"));
            if let Some(c) = &self.cancel_at_wait {
                c.store(true, Ordering::SeqCst);
            }
            self.now = match self.run.t_s.get(upto - 1) {
                Some(t) => *t,
                None => self.run.exit_s,
            };
            return ok(format!("seen={k}\n"));
        }
        if script == READ_TRACE {
            self.record(format!("trace {}", self.done()));
            return ok(self.trace());
        }
        Err(GuestError::Transport(format!(
            "unexpected script: {script}"
        )))
    }

    fn upload(&mut self, _local: &Path, remote: &str, _mode: u32) -> Result<(), GuestError> {
        Err(GuestError::Transport(format!(
            "unexpected upload to {remote}"
        )))
    }
}

fn exp(hz: u32) -> Expectation {
    Expectation {
        arch: Arch::Arm64,
        hz: Hz::new(hz).unwrap(),
        variant: Variant::NoFix,
        kernel_release: "6.1.192-lazyinit-hz100-nofix".into(),
    }
}

fn opts(after: Option<u64>) -> ProtocolOptions {
    ProtocolOptions {
        cell_id: "c".into(),
        device: "/dev/vda".into(),
        warmup_device: None,
        mkfs_args: vec![],
        wait_mult: 10,
        poll_interval: Duration::from_millis(1),
        lazyinit_deadline: Duration::from_secs(60),
        cancel: Arc::new(AtomicBool::new(false)),
        events: EventSink::discard(),
        gate: Arc::new(NoGate),
        hold: None,
        z1_target: None,
        estimate_after: after,
        guest_paced: false,
    }
}

/// The critical span's guard: says in the guest's log when it is dropped.
struct Critical(Arc<Mutex<Vec<String>>>);

impl Drop for Critical {
    fn drop(&mut self) {
        self.0.lock().unwrap().push("critical over".into());
    }
}

/// The early stop's outcome, its row's measurements and its files.
fn stop(
    g: &mut Lazyinit,
    hz: u32,
    o: &ProtocolOptions,
) -> Result<(bool, Measurement, Evidence), GuestError> {
    let (mut m, mut ev) = (Measurement::default(), Evidence::default());
    let to_init = g.run.t_s.len() as u64;
    let critical = Box::new(Critical(g.scripts.clone()));
    let at = (to_init, Instant::now());
    let stopped = early_stop(g, &exp(hz), o, at, critical, &mut m, &mut ev)?;
    Ok((stopped, m, ev))
}

#[test]
fn stops_once_n_groups_are_traced_and_the_cycle_locked() {
    let mut g = Lazyinit::new(generate(&Run::noisy(100, 10, 16384, 4)));
    let (stopped, m, ev) = stop(&mut g, 100, &opts(Some(50))).unwrap();
    assert!(stopped);
    // Blocked in the guest in chunks of at most 32, then one trace read.
    // The critical span lasts until the groups of the first check are read.
    assert_eq!(
        g.scripts(),
        [
            "poll",
            "wait 32",
            "poll",
            "wait 18",
            "poll",
            "trace 50",
            "critical over"
        ]
    );
    assert!(m.estimated);
    assert_eq!((m.estimate_groups, m.traced_groups), (Some(50), Some(50)));
    let (lo, hi) = (m.lazyinit_lo_s.unwrap(), m.lazyinit_hi_s.unwrap());
    assert!(lo <= m.lazyinit_s.unwrap() && m.lazyinit_s.unwrap() <= hi);
    assert!((m.estimate_cycle_ms.unwrap() - 110.0).abs() < 1.0);
    assert_eq!(m.sleep_ticks, Some(10));
    let truth = g.run.lazyinit_s();
    assert!((m.lazyinit_s.unwrap() / truth - 1.0).abs() < 0.005);
    assert!((m.first_group_s.unwrap() - g.run.first_group_s()).abs() < 1e-6);
    assert!((m.mount_s.unwrap() - 0.15).abs() < 1e-6);
    assert!((m.ms_per_group.unwrap() - 110.0).abs() < 1.0);
    assert!((m.z1_ms.unwrap() - 3.4).abs() < 1e-3);
    assert_eq!(m.lazyinit_poll_s, None, "nothing was seen to exit");
    // The partial trace is kept, with what was decided.
    let groups = ev.groups_csv.unwrap();
    assert_eq!(groups.lines().count(), 51);
    let log = ev.estimate_log.clone().unwrap();
    assert!(
        log.contains("check at 50: locked\ngroups_traced=50\n"),
        "{log}"
    );
    // What widened the interval is said beside it.
    assert!(
        log.contains("\nblock_cycles=") && log.contains("\ncaveat="),
        "{log}"
    );
    assert_eq!(
        m.estimate_caveat.is_some(),
        log.contains("\ncaveat=") && !log.ends_with("caveat=\n")
    );
    assert!(ev.trace.is_some());
}

#[test]
fn goes_on_while_the_cycles_disagree() {
    // Without the fix, 40 groups back to back before the sleep is set.
    let mut g = Lazyinit::new(generate(&Run {
        back_to_back: 40,
        ..Run::noisy(100, 10, 16384, 2)
    }));
    let (stopped, m, ev) = stop(&mut g, 100, &opts(Some(50))).unwrap();
    assert!(stopped);
    let scripts = g.scripts();
    let reads: Vec<&String> = scripts
        .iter()
        .filter(|s| s.starts_with("trace") || s.starts_with("critical"))
        .collect();
    // Only the first check's groups have the host to themselves.
    assert_eq!(
        reads,
        ["trace 50", "critical over", "trace 75", "trace 112"]
    );
    assert_eq!(m.estimate_groups, Some(112));
    let log = ev.estimate_log.clone().unwrap();
    assert!(log.contains("check at 50: group 40's cycle"), "{log}");
    assert!(log.contains("ran back to back"), "{log}");
    assert!(log.contains("check at 112: locked"), "{log}");
}

#[test]
fn a_cycle_that_never_locks_is_measured() {
    // 30 groups: the first check would be at 25, its window too short
    // to lock until past the end.
    let mut g = Lazyinit::new(generate(&Run {
        back_to_back: 20,
        ..Run::clean(250, 10, 30)
    }));
    let (stopped, m, ev) = stop(&mut g, 250, &opts(Some(25))).unwrap();
    assert!(!stopped);
    assert!(!m.estimated);
    assert_eq!(m.estimate_groups, None);
    let log = ev.estimate_log.clone().unwrap();
    assert!(log.ends_with("past the last group: measured\n"), "{log}");
}

#[test]
fn not_asked_does_nothing() {
    let mut g = Lazyinit::new(generate(&Run::clean(100, 3, 512)));
    let (stopped, _, ev) = stop(&mut g, 100, &opts(None)).unwrap();
    assert!(!stopped);
    // Not asked: the critical span ends at once, with nothing run.
    assert_eq!(g.scripts(), ["critical over"]);
    assert_eq!(ev, Evidence::default(), "and nothing kept");
}

#[test]
fn ctrl_c_while_waiting_stops() {
    let o = opts(Some(200));
    let mut g = Lazyinit::new(generate(&Run::clean(100, 3, 16384)));
    g.cancel_at_wait = Some(o.cancel.clone());
    assert!(matches!(
        stop(&mut g, 100, &o),
        Err(GuestError::Interrupted)
    ));
    // Interrupted before the first check: the span ends on the way out.
    assert_eq!(g.scripts(), ["poll", "wait 32", "critical over"]);
}
