//! The guest protocol: the same steps on every provider, once SSH answers.
//!
//! verify the kernel -> mkfs on the guest's device -> check inode tables
//! are not yet zeroed -> arm the tracepoints -> mount -> poll until the
//! ext4lazyinit thread is gone -> read the trace. Durations come from the
//! trace clock, so they do not depend on the poll interval.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lazyinit_core::events::{Event, EventSink, Phase};
use lazyinit_core::{model, Arch, Hz, Variant};

use crate::parse::{self, key_values};
use crate::{GuestError, Remote};

const FACTS_SH: &str = include_str!("../scripts/facts.sh");
const MKFS_SH: &str = include_str!("../scripts/mkfs.sh");
const TRACE_SETUP_SH: &str = include_str!("../scripts/trace-setup.sh");
const MOUNT_SH: &str = include_str!("../scripts/mount.sh");
const POLL_SH: &str = include_str!("../scripts/poll.sh");
const WARMUP_SH: &str = include_str!("../scripts/warmup.sh");

/// What the booted guest must be.
#[derive(Debug, Clone)]
pub struct Expectation {
    pub arch: Arch,
    pub hz: Hz,
    pub variant: Variant,
    /// Exactly what `uname -r` must print.
    pub kernel_release: String,
}

/// How a cell shares the host with its neighbours (see the orchestrator's
/// gate). Each returns a guard held for the span it names:
/// - `measuring`: the measured phase, from mount to the thread's exit;
/// - `critical`: inside it, until the sleep between groups is surely set
///   (that one zeroing time sets it for the whole run, DESIGN §3).
pub trait Gate: Send + Sync {
    fn measuring(&self) -> Box<dyn Send>;
    fn critical(&self) -> Box<dyn Send>;
}

/// Groups traced before the sensitive window ends. With the fix the sleep
/// is set by the first group; without it by the first zeroing that crosses
/// a tick, and zeroings that cross none run back to back. With a ~1 ms
/// zeroing at HZ=250 a zeroing crosses a tick one time in four, so 32
/// groups leave a 1e-4 chance that the sleep is still unset.
pub const SENSITIVE_GROUPS: u64 = 32;

/// A gate that never waits (one cell alone, or tests).
pub struct NoGate;

impl Gate for NoGate {
    fn measuring(&self) -> Box<dyn Send> {
        Box::new(())
    }
    fn critical(&self) -> Box<dyn Send> {
        Box::new(())
    }
}

#[derive(Clone)]
pub struct ProtocolOptions {
    pub cell_id: String,
    /// The blank volume inside the guest.
    pub device: String,
    /// Scratch device for a warm-up lazy-init before the measured one.
    pub warmup_device: Option<String>,
    /// Extra mkfs.ext4 arguments (recorded in the row).
    pub mkfs_args: Vec<String>,
    pub wait_mult: u32,
    pub poll_interval: Duration,
    /// Give up on lazy-init after this long.
    pub lazyinit_deadline: Duration,
    /// Where the raw trace and groups.csv go.
    pub log_dir: PathBuf,
    pub cancel: Arc<AtomicBool>,
    pub events: EventSink,
    pub gate: Arc<dyn Gate>,
}

/// Everything one run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measurement {
    pub kernel_release: String,
    pub hz: u32,
    pub clocksource: String,
    pub mkfs_cmd: String,
    pub mkfs_s: Option<f64>,
    pub groups: u64,
    pub zeroed_at_mkfs: u64,
    pub mount_s: Option<f64>,
    pub lazyinit_s: Option<f64>,
    pub lazyinit_poll_s: Option<f64>,
    pub ms_per_group: Option<f64>,
    pub median_cycle_ms: Option<f64>,
    pub traced_groups: u64,
    pub first_group_s: Option<f64>,
    pub sleep_ticks: Option<u64>,
}

/// Quotes an argument for the guest's POSIX shell.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A script with positional arguments, as one command string.
pub fn script_with_args(script: &str, args: &[String]) -> String {
    let quoted: Vec<String> = args.iter().map(|a| sh_quote(a)).collect();
    format!("set -- {}\n{}", quoted.join(" "), script)
}

/// Checks the guest's facts against the expectation. Pure, so every refusal
/// reason is unit-tested.
pub fn verify_facts(
    facts: &std::collections::BTreeMap<String, String>,
    exp: &Expectation,
) -> Result<(), GuestError> {
    let get = |k: &str| facts.get(k).map(String::as_str).unwrap_or("");
    if get("release") != exp.kernel_release {
        return Err(GuestError::WrongKernel {
            what: "release".into(),
            expected: exp.kernel_release.clone(),
            found: get("release").into(),
        });
    }
    if get("machine") != exp.arch.uname_machine() {
        return Err(GuestError::WrongKernel {
            what: "machine".into(),
            expected: exp.arch.uname_machine().into(),
            found: get("machine").into(),
        });
    }
    if get("hz") != exp.hz.to_string() {
        return Err(GuestError::WrongKernel {
            what: "CONFIG_HZ (from /proc/config.gz)".into(),
            expected: exp.hz.to_string(),
            found: get("hz").into(),
        });
    }
    let variant_tag = format!("-{}", exp.variant);
    if !get("localversion").ends_with(&variant_tag) {
        return Err(GuestError::WrongKernel {
            what: "variant (CONFIG_LOCALVERSION)".into(),
            expected: format!("…{variant_tag}"),
            found: get("localversion").into(),
        });
    }
    let cs = get("clocksource");
    if cs.is_empty() || cs.contains("jiffies") {
        return Err(GuestError::JiffiesClocksource(cs.into()));
    }
    if get("tracing") != "yes" {
        return Err(GuestError::NoTracing);
    }
    Ok(())
}

/// Trace buffer per CPU, sized for every group's event (~100 bytes each as
/// stored) with room to spare; at least 4 MiB (DESIGN §3).
pub fn trace_buffer_kb(groups: u64) -> u64 {
    (groups * 256 / 1024).max(4096)
}

fn check(out: crate::RemoteOutput, step: &'static str) -> Result<String, GuestError> {
    if out.status != 0 {
        return Err(GuestError::Command {
            step,
            status: out.status,
            stderr: out.stderr.trim().to_string(),
        });
    }
    Ok(out.stdout)
}

fn num<T: std::str::FromStr>(
    kv: &std::collections::BTreeMap<String, String>,
    k: &str,
    step: &'static str,
) -> Result<T, GuestError> {
    kv.get(k)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| GuestError::Parse {
            step,
            what: format!("no numeric `{k}` in the output"),
        })
}

/// Sleeps in small steps so Ctrl-C is honoured promptly.
fn sleep_unless_cancelled(d: Duration, cancel: &AtomicBool) -> Result<(), GuestError> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if cancel.load(Ordering::SeqCst) {
            return Err(GuestError::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(100).min(d));
    }
    Ok(())
}

/// Runs the protocol on a guest that answers SSH.
pub fn run(
    remote: &mut dyn Remote,
    exp: &Expectation,
    opts: &ProtocolOptions,
) -> Result<Measurement, GuestError> {
    let cell = &opts.cell_id;
    let short = Duration::from_secs(120);
    let cancelled = || opts.cancel.load(Ordering::SeqCst);

    opts.events.phase(cell, Phase::Verify);
    let facts = key_values(&check(remote.exec(FACTS_SH, short)?, "facts")?);
    verify_facts(&facts, exp)?;
    let mut m = Measurement {
        kernel_release: facts["release"].clone(),
        hz: exp.hz.get(),
        clocksource: facts["clocksource"].clone(),
        ..Default::default()
    };

    if cancelled() {
        return Err(GuestError::Interrupted);
    }
    opts.events.phase(cell, Phase::Mkfs);
    let mut mkfs_args = vec![opts.device.clone()];
    mkfs_args.extend(opts.mkfs_args.iter().cloned());
    m.mkfs_cmd = std::iter::once("mkfs.ext4 -F -q".to_string())
        .chain(opts.mkfs_args.iter().cloned())
        .chain(std::iter::once(opts.device.clone()))
        .collect::<Vec<_>>()
        .join(" ");
    // mkfs and dumpe2fs of a 3 TiB device take a while under emulation.
    if let Some(dev) = &opts.warmup_device {
        check(
            remote.exec(
                &script_with_args(WARMUP_SH, std::slice::from_ref(dev)),
                short,
            )?,
            "warm-up",
        )?;
    }
    let kv = key_values(&check(
        remote.exec(
            &script_with_args(MKFS_SH, &mkfs_args),
            Duration::from_secs(1800),
        )?,
        "mkfs",
    )?);
    m.mkfs_s = kv.get("mkfs_s").and_then(|v| v.parse().ok());
    let blocks: u64 = num(&kv, "blocks", "mkfs")?;
    let bpg: u64 = num(&kv, "blocks_per_group", "mkfs")?;
    m.groups = blocks.div_ceil(bpg.max(1));
    m.zeroed_at_mkfs = num(&kv, "zeroed", "mkfs")?;
    // DESIGN §3: if mkfs marked the tables zeroed, lazy-init has nothing to
    // do and the number would be meaningless.
    if m.zeroed_at_mkfs * 2 >= m.groups {
        return Err(GuestError::AlreadyZeroed {
            groups: m.groups,
            zeroed: m.zeroed_at_mkfs,
        });
    }
    let to_init = m.groups - m.zeroed_at_mkfs;

    let kb = trace_buffer_kb(m.groups).to_string();
    check(
        remote.exec(&script_with_args(TRACE_SETUP_SH, &[kb]), short)?,
        "trace setup",
    )?;

    if cancelled() {
        return Err(GuestError::Interrupted);
    }
    // The measured phase starts with the mount. The first zeroing(s), after
    // a random 0-5 s delay and the bitmap prefetch, set the sleep for the
    // whole run: the critical span lasts from the end of the mount (a CPU
    // burst that must not compete with other guests' first zeroings at the
    // same level) until that is surely done.
    let measuring = opts.gate.measuring();
    opts.events.phase(cell, Phase::Mount);
    let mount_opts = if opts.wait_mult != lazyinit_core::cell::DEFAULT_WAIT_MULT {
        format!("init_itable={}", opts.wait_mult)
    } else {
        String::new()
    };
    let mount_out = check(
        remote.exec(
            &script_with_args(MOUNT_SH, &[opts.device.clone(), mount_opts]),
            short,
        )?,
        "mount",
    )?;
    let mounted_at = Instant::now();
    let mut quiet = Some(opts.gate.critical());
    if key_values(&mount_out)
        .get("pid")
        .is_none_or(|p| p.is_empty())
    {
        return Err(GuestError::Parse {
            step: "mount",
            what: "no ext4lazyinit thread after mount".into(),
        });
    }

    opts.events.phase(cell, Phase::Lazyinit);
    let per_group = model::predict(model::ModelInputs {
        hz: exp.hz,
        variant: exp.variant,
        wait_mult: opts.wait_mult,
        groups: to_init,
        z1_s: model::DEFAULT_ZEROING_S,
        z_s: model::DEFAULT_ZEROING_S,
    })
    .per_group_s;
    if quiet.is_some() {
        // The thread starts after a random 0-5 s delay; polling (process
        // spawns in this very guest) would disturb the measured zeroing.
        sleep_unless_cancelled(Duration::from_secs(6), &opts.cancel)?;
    }
    loop {
        let poll = key_values(&check(remote.exec(POLL_SH, short)?, "poll")?);
        let entries: u64 = poll
            .get("entries")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let done = entries.saturating_sub(2).min(to_init);
        if done >= SENSITIVE_GROUPS.min(to_init) && quiet.is_some() {
            quiet = None;
        }
        let eta = (to_init - done) as f64 * per_group;
        opts.events.emit(Event::Groups {
            cell: cell.clone(),
            done,
            total: to_init,
            eta_s: Some(eta),
        });
        if poll.get("pid").is_none_or(|p| p.is_empty()) {
            m.lazyinit_poll_s = Some(mounted_at.elapsed().as_secs_f64());
            break;
        }
        if mounted_at.elapsed() > opts.lazyinit_deadline {
            return Err(GuestError::Timeout {
                step: "lazyinit",
                after: opts.lazyinit_deadline,
            });
        }
        // Every poll runs a shell in this very guest: no faster than asked,
        // so that one rarely lands on a zeroing that sets the sleep.
        sleep_unless_cancelled(opts.poll_interval, &opts.cancel)?;
    }
    drop(quiet);
    drop(measuring);

    opts.events.phase(cell, Phase::Collect);
    let trace = check(
        remote.exec("cat /sys/kernel/tracing/trace", short)?,
        "collect trace",
    )?;
    let _ = std::fs::write(opts.log_dir.join("trace.txt"), &trace);
    let s = parse::summarize(&trace);
    let _ = std::fs::write(opts.log_dir.join("groups.csv"), s.groups_csv());
    m.traced_groups = s.distinct_groups;
    m.mount_s = match (s.mount_start, s.mount_done) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    m.lazyinit_s = s.lazyinit_s();
    m.ms_per_group = s.ms_per_group();
    m.median_cycle_ms = s.median_cycle_ms();
    m.first_group_s = match (s.first_group(), s.mount_done) {
        (Some(f), Some(d)) => Some(f - d),
        _ => None,
    };
    m.sleep_ticks = m
        .median_cycle_ms
        .and_then(|c| model::infer_sleep_ticks(exp.hz, c));
    if m.lazyinit_s.is_none() {
        return Err(GuestError::Parse {
            step: "collect trace",
            what: "no mount marker or no thread-exit event in the trace".into(),
        });
    }
    if m.traced_groups != to_init {
        return Err(GuestError::GroupCount {
            traced: m.traced_groups,
            expected: to_init,
            groups: m.groups,
        });
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn exp() -> Expectation {
        Expectation {
            arch: Arch::X86_64,
            hz: Hz::new(250).unwrap(),
            variant: Variant::NoFix,
            kernel_release: "6.1.158-lazyinit-hz250-nofix".into(),
        }
    }

    fn facts() -> BTreeMap<String, String> {
        key_values(
            "release=6.1.158-lazyinit-hz250-nofix\nmachine=x86_64\nhz=250\nlocalversion=-lazyinit-hz250-nofix\nclocksource=tsc\ntracing=yes\n",
        )
    }

    #[test]
    fn accepts_the_right_kernel() {
        verify_facts(&facts(), &exp()).unwrap();
    }

    #[test]
    fn refuses_wrong_release_hz_variant_arch() {
        for (k, v) in [
            ("release", "6.1.0-other"),
            ("hz", "100"),
            ("localversion", "-lazyinit-hz250-fix"),
            ("machine", "aarch64"),
        ] {
            let mut f = facts();
            f.insert(k.into(), v.into());
            assert!(
                matches!(
                    verify_facts(&f, &exp()),
                    Err(GuestError::WrongKernel { .. })
                ),
                "{k}"
            );
        }
    }

    #[test]
    fn refuses_jiffies_clocksources() {
        for cs in ["jiffies", "refined-jiffies", ""] {
            let mut f = facts();
            f.insert("clocksource".into(), cs.into());
            assert!(
                matches!(
                    verify_facts(&f, &exp()),
                    Err(GuestError::JiffiesClocksource(_))
                ),
                "{cs}"
            );
        }
    }

    #[test]
    fn refuses_without_tracepoint() {
        let mut f = facts();
        f.insert("tracing".into(), "no".into());
        assert!(matches!(
            verify_facts(&f, &exp()),
            Err(GuestError::NoTracing)
        ));
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(sh_quote("a'b"), "'a'\\''b'");
        assert_eq!(
            script_with_args("echo $1", &["x y".into()]),
            "set -- 'x y'\necho $1"
        );
    }

    #[test]
    fn buffer_sized_for_groups() {
        assert_eq!(trace_buffer_kb(512), 4096);
        assert!(trace_buffer_kb(24576) * 1024 >= 24576 * 200);
    }

    /// A scripted guest: answers each protocol step like a real one would.
    struct FakeGuest {
        groups: u64,
        traced: u64,
        polls: u32,
        zeroed: u64,
    }

    impl Remote for FakeGuest {
        fn exec(&mut self, script: &str, _t: Duration) -> Result<crate::RemoteOutput, GuestError> {
            let ok = |s: String| {
                Ok(crate::RemoteOutput {
                    status: 0,
                    stdout: s,
                    stderr: String::new(),
                })
            };
            if script == FACTS_SH {
                let f = facts();
                return ok(f.iter().map(|(k, v)| format!("{k}={v}\n")).collect());
            }
            if script.contains("mkfs.ext4 -F") {
                return ok(format!(
                    "mkfs_s=1.50\nblocks={}\nblocks_per_group=32768\nzeroed={}\n",
                    self.groups * 32768,
                    self.zeroed
                ));
            }
            if script.contains("buffer_size_kb") {
                return ok("trace_clock=mono\n".into());
            }
            if script.contains("lazyinit-mount-start") {
                return ok("pid=120\n".into());
            }
            if script.contains("per_cpu") {
                self.polls += 1;
                return ok(if self.polls < 3 {
                    "pid=120\nentries=10\n".into()
                } else {
                    format!("pid=\nentries={}\n", self.traced + 3)
                });
            }
            if script.starts_with("cat /sys/kernel/tracing/trace") {
                let mut t = String::from("# tracer: nop\n");
                t.push_str(
                    "  sh-1 [000] ..... 100.000000: tracing_mark_write: lazyinit-mount-start\n",
                );
                t.push_str(
                    "  sh-1 [000] ..... 100.020000: tracing_mark_write: lazyinit-mount-done\n",
                );
                for g in 0..self.traced {
                    let ts = 102.0 + g as f64 * 0.044;
                    t.push_str(&format!("  ext4lazyinit-120 [000] ..... {ts:.6}: ext4_lazy_itable_init: dev 254,0 group {g}\n"));
                }
                let end = 102.0 + self.traced as f64 * 0.044;
                t.push_str(&format!("  ext4lazyinit-120 [000] ..... {end:.6}: sched_process_exit: comm=ext4lazyinit pid=120 prio=120\n"));
                return ok(t);
            }
            Err(GuestError::Ssh(format!("unexpected script: {script}")))
        }
    }

    fn opts(dir: &std::path::Path) -> ProtocolOptions {
        ProtocolOptions {
            cell_id: "c".into(),
            device: "/dev/vda".into(),
            warmup_device: None,
            mkfs_args: vec![],
            wait_mult: 10,
            poll_interval: Duration::from_millis(1),
            lazyinit_deadline: Duration::from_secs(60),
            log_dir: dir.to_path_buf(),
            cancel: Arc::new(AtomicBool::new(false)),
            events: EventSink::discard(),
            gate: Arc::new(NoGate),
        }
    }

    #[test]
    fn whole_protocol_on_a_scripted_guest() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = FakeGuest {
            groups: 64,
            traced: 64,
            polls: 0,
            zeroed: 0,
        };
        let m = run(&mut g, &exp(), &opts(dir.path())).unwrap();
        assert_eq!(m.groups, 64);
        assert_eq!(m.traced_groups, 64);
        assert!((m.ms_per_group.unwrap() - 44.0).abs() < 1e-6);
        assert!((m.lazyinit_s.unwrap() - (2.0 - 0.02 + 64.0 * 0.044)).abs() < 1e-6);
        assert!((m.mount_s.unwrap() - 0.02).abs() < 1e-9);
        assert_eq!(m.mkfs_cmd, "mkfs.ext4 -F -q /dev/vda");
        assert_eq!(m.sleep_ticks, Some(10), "44 ms at HZ=250 is 11 ticks");
        assert!(dir.path().join("trace.txt").exists());
        assert!(
            std::fs::read_to_string(dir.path().join("groups.csv"))
                .unwrap()
                .lines()
                .count()
                == 65
        );
    }

    #[test]
    fn lost_events_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = FakeGuest {
            groups: 64,
            traced: 60,
            polls: 0,
            zeroed: 0,
        };
        assert!(matches!(
            run(&mut g, &exp(), &opts(dir.path())),
            Err(GuestError::GroupCount {
                traced: 60,
                expected: 64,
                ..
            })
        ));
    }

    #[test]
    fn zeroed_tables_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = FakeGuest {
            groups: 64,
            traced: 0,
            polls: 0,
            zeroed: 64,
        };
        assert!(matches!(
            run(&mut g, &exp(), &opts(dir.path())),
            Err(GuestError::AlreadyZeroed { .. })
        ));
    }

    #[test]
    fn cancel_stops_polling() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        o.cancel.store(true, Ordering::SeqCst);
        let mut g = FakeGuest {
            groups: 64,
            traced: 64,
            polls: 0,
            zeroed: 0,
        };
        assert!(matches!(
            run(&mut g, &exp(), &o),
            Err(GuestError::Interrupted)
        ));
    }
}
