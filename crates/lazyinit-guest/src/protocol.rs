//! The guest protocol: the same steps on every provider, once SSH answers.
//!
//! verify the kernel -> mkfs on the guest's device -> check inode tables
//! are not yet zeroed -> calibrate the storage hold on a scratch disk ->
//! arm the tracepoints -> mount -> wait (blocked, in the guest) until the
//! sleep between groups is set -> poll until the ext4lazyinit thread is
//! gone -> read the trace. Durations come from the trace clock, so they do
//! not depend on the poll interval.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lazyinit_core::events::{Event, EventSink, Phase};
pub use lazyinit_core::results::Measurement;
use lazyinit_core::{model, Arch, CellFolder, Hz, Variant};

use crate::parse::{self, key_values};
use crate::{GuestError, Remote};

pub(crate) const FACTS_SH: &str = include_str!("../scripts/facts.sh");
pub(crate) const MKFS_SH: &str = include_str!("../scripts/mkfs.sh");
pub(crate) const TRACE_SETUP_SH: &str = include_str!("../scripts/trace-setup.sh");
pub(crate) const MOUNT_SH: &str = include_str!("../scripts/mount.sh");
pub(crate) const POLL_SH: &str = include_str!("../scripts/poll.sh");
pub(crate) const WARMUP_MKFS_SH: &str = include_str!("../scripts/warmup-mkfs.sh");
pub(crate) const CALIBRATE_SH: &str = include_str!("../scripts/calibrate.sh");
pub(crate) const WAIT_GROUPS_SH: &str = include_str!("../scripts/wait-groups.sh");
/// The whole trace so far; reading it does not stop tracing (with
/// `pause-on-trace` off, as trace-setup.sh leaves it).
pub(crate) const READ_TRACE: &str = "cat /sys/kernel/tracing/trace";

/// Mounts of the scratch disk before the measured one: the first
/// [`COLD_MOUNTS`] pay for TCG translating the zeroing code (measured: 5.9,
/// 4.2, then 3.1-3.7 ms at a 2.3 ms hold) and are left out; the smallest
/// of the others gives the guest's own part of a first zeroing (see
/// `storage::guest_part`).
pub const CALIBRATION_MOUNTS: u32 = 6;
pub const COLD_MOUNTS: usize = 2;

/// Measured mounts before a first zeroing outside the target's L interval
/// is kept (each retry makes the filesystem anew, 10-15 s at 3 TiB under
/// TCG). Five: in the 48-cell run with 24 guests at once
/// (`results/reported-series-quiet`) 5 of 12 x86_64 with-fix first
/// attempts hit L, 6 of 7 second ones (each retry's hold is set from the
/// miss), and one cell missed three times and was kept at L=6.
pub const MAX_ATTEMPTS: u32 = 5;

/// The marker calibrate.sh writes before each mount.
pub(crate) const CALIBRATION_MARKER: &str = "lazyinit-cal-mount";

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
/// - `measuring`: from the calibration to the thread's exit;
/// - `critical`: the measured mount until the sleep between groups is
///   surely set (that one zeroing time sets it for the whole run, DESIGN
///   §3), and with an early stop until the groups of its first check are
///   read (the estimate extends them to the whole run). It may wait for
///   the host to be free of other guests' critical spans; it returns
///   early, holding nothing, once the run is cancelled.
pub trait Gate: Send + Sync {
    fn measuring(&self) -> Box<dyn Send>;
    fn critical(&self) -> Box<dyn Send>;
}

/// Groups traced before the critical span ends. With the fix the sleep is
/// set by the first group (two, to be sure it was timed); without it by the
/// first zeroing that crosses a tick, and zeroings that cross none run back
/// to back: with a 3.5 ms zeroing at HZ=100 one in three crosses, so 32
/// groups leave a 1e-6 chance that the sleep is still unset.
pub const SENSITIVE_GROUPS: u64 = 32;

/// Groups traced before the critical span ends with the fix: the sleep is
/// set by the first group, and 16 groups give the 13 cycles that
/// [`parse::TraceSummary::slept_ticks`] needs to count the L it set (about
/// 0.6 s at L=8, HZ=250).
pub const FIX_SENSITIVE_GROUPS: u64 = 16;

/// Groups to see before the sleep between groups is surely set (and, with
/// the fix, counted).
pub fn sensitive_groups(v: Variant) -> u64 {
    match v {
        Variant::Fix => FIX_SENSITIVE_GROUPS,
        Variant::NoFix => SENSITIVE_GROUPS,
    }
}

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
    /// The cell's folder: what the guest said, the raw trace, groups.csv,
    /// the calibration.
    pub folder: CellFolder,
    pub cancel: Arc<AtomicBool>,
    pub events: EventSink,
    pub gate: Arc<dyn Gate>,
    /// The volume's zero-request hold, when the provider holds zeroes; the
    /// warm-up device has the same.
    pub hold: Option<Arc<dyn lazyinit_core::provider::ZeroHold>>,
    /// The first zeroing time to calibrate the hold for (`ebs`).
    pub z1_target: Option<Duration>,
    /// Stop early once the cycle has locked, checking from this many
    /// groups on (`estimate-after`; see [`crate::estimate`]).
    pub estimate_after: Option<u64>,
}

/// A script with positional arguments, as one command string.
pub fn script_with_args(script: &str, args: &[String]) -> String {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| lazyinit_core::shell::quote(a))
        .collect();
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

/// Trace buffer per CPU, sized for every group's events (its zeroing's
/// journal start and end, and the sleep timer armed after it: ~150 bytes
/// as stored) with room to spare; at least 4 MiB (DESIGN §3).
pub fn trace_buffer_kb(groups: u64) -> u64 {
    (groups * 384 / 1024).max(4096)
}

pub(crate) fn check(out: crate::RemoteOutput, step: &'static str) -> Result<String, GuestError> {
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
    // An interrupt ends a long command (mkfs, a wait) at once, not at its end.
    remote.set_cancel(opts.cancel.clone());

    opts.events.phase(cell, Phase::Verify);
    let facts_text = check(remote.exec(FACTS_SH, short)?, "facts")?;
    // What the guest said it is, kept beside the row as evidence.
    let _ = std::fs::write(opts.folder.facts_txt(), &facts_text);
    let facts = key_values(&facts_text);
    verify_facts(&facts, exp)?;
    let mut m = Measurement {
        clocksource: facts["clocksource"].clone(),
        ..Default::default()
    };

    if cancelled() {
        return Err(GuestError::Interrupted);
    }
    opts.events.phase(cell, Phase::Mkfs);
    if let Some(dev) = &opts.warmup_device {
        check(
            remote.exec(
                &script_with_args(WARMUP_MKFS_SH, std::slice::from_ref(dev)),
                short,
            )?,
            "scratch disk mkfs",
        )?;
    }
    let groups = mkfs(remote, opts, &mut m)?;
    let to_init = groups.to_init;

    let kb = trace_buffer_kb(groups.total).to_string();
    let mount_opts = if opts.wait_mult != lazyinit_core::cell::DEFAULT_WAIT_MULT {
        format!("init_itable={}", opts.wait_mult)
    } else {
        String::new()
    };
    if cancelled() {
        return Err(GuestError::Interrupted);
    }
    // From here on the guest runs above unmeasured work on the host.
    let measuring = opts.gate.measuring();
    let mut calibrated_part = None;
    if let Some(dev) = &opts.warmup_device {
        opts.events
            .note(cell, "calibrating the first zeroing on the scratch disk");
        if let Some(c) = calibrate(remote, opts, dev, &mount_opts)? {
            m.z1_target_ms = Some(ms(c.z1_target));
            m.guest_part_ms = Some(ms(c.guest_part));
            calibrated_part = Some(c.guest_part);
        }
    }
    arm_trace(remote, &kb)?;
    // The critical span: the mount and the first zeroing(s), after the
    // random 0-5 s start delay and the bitmap prefetch, which set the sleep
    // for the whole run, with the host to this guest alone (the
    // orchestrator's gate): no other guest's mount or first zeroings.
    let critical = opts.gate.critical();
    if cancelled() {
        return Err(GuestError::Interrupted);
    }
    // With a z1 target, the first zeroing is the controlled quantity of
    // the experiment (EBS-like storage), not its result: a first zeroing
    // outside the target's L interval (each zeroing's own part varies by
    // about 0.1 ms under TCG, and at HZ=250 the interval is 0.4 ms wide) is
    // not kept; the filesystem is made anew and mounted again, at most
    // MAX_ATTEMPTS times. The same interval holds for both variants, so
    // that fix and no fix are compared on the same storage. The row counts
    // the attempts.
    let window = opts.z1_target.map(|t| z1_window(exp.hz, opts.wait_mult, t));
    // The L a first zeroing in that window sleeps with the fix.
    let target_l = opts
        .z1_target
        .map(|t| model::sleep_ticks(exp.hz, Variant::Fix, opts.wait_mult, t.as_secs_f64()));
    let mut mounted_at;
    let mut attempt = 1;
    // The guest's own part of each missed first zeroing.
    let mut missed_parts = Vec::new();
    loop {
        opts.events.phase(cell, Phase::Mount);
        mounted_at = mount(remote, opts, &mount_opts)?;
        opts.events.phase(cell, Phase::Lazyinit);
        wait_for_sleep(remote, exp, to_init)?;
        let so_far = parse::summarize(&check(
            remote.exec(READ_TRACE, short)?,
            "read the first zeroing",
        )?);
        let z1 = so_far.z1_s();
        // With the fix, the L the kernel set, counted on the tick grid of
        // the groups so far, is what must hit the target's L: the trace's
        // z1 reads a little below the kernel's, so a z1 just under a
        // boundary was kept at one L more (3.57 ms in [3.2, 3.6) slept 9
        // at HZ=250) and one just over it was thrown away. The z1 window
        // decides where the groups are too few to count, and without the
        // fix (same storage for both variants).
        let slept = match exp.variant {
            Variant::Fix => so_far.sleep(so_far.tick_cycles(exp.hz.get()).as_ref()),
            Variant::NoFix => None,
        };
        tracing::info!(cell = %cell, attempt, ?z1, ?slept, ?target_l, ?window, "critical span over: the sleep is set");
        let missed = match (slept, target_l, window, z1) {
            (Some(l), Some(want), _, _) => l != want,
            (_, _, Some((lo, hi)), Some(z)) => z < lo || z >= hi,
            _ => false,
        };
        if !missed || attempt == MAX_ATTEMPTS {
            break;
        }
        let why = match (slept, target_l) {
            (Some(l), Some(want)) => format!(
                "slept L={l}, not the target's L={want} (first zeroing {:.3} ms)",
                z1.unwrap_or(0.0) * 1e3
            ),
            _ => format!(
                "first zeroing {:.3} ms, outside the target's [{:.3}, {:.3}) ms",
                z1.unwrap_or(0.0) * 1e3,
                window.map(|w| w.0 * 1e3).unwrap_or(0.0),
                window.map(|w| w.1 * 1e3).unwrap_or(0.0),
            ),
        };
        opts.events.note(
            cell,
            format!(
                "{why}: making the filesystem anew (attempt {})",
                attempt + 1
            ),
        );
        // The missed zeroing is a calibration sample taken under the very
        // conditions of the next one (the host to itself). A calibration
        // whose samples were all disturbed (every neighbour busy) aimed
        // 0.5 ms low; the misses pull it back. Aimed at the median of the
        // calibration and every miss, not at the last miss alone, whose
        // own part swings by as much as the L interval is wide.
        if let (Some(h), Some(t), Some(z)) = (&opts.hold, opts.z1_target, z1) {
            let used = h.get();
            let part = Duration::from_secs_f64(z).saturating_sub(used);
            missed_parts.push(part);
            let aim = lazyinit_core::storage::next_guest_part(calibrated_part, &missed_parts)
                .unwrap_or(part);
            let next = lazyinit_core::storage::hold_for(t, aim);
            h.set(next);
            tracing::info!(cell = %cell, attempt, hold_us = used.as_micros() as u64, guest_part_us = part.as_micros() as u64, aimed_part_us = aim.as_micros() as u64, next_hold_us = next.as_micros() as u64, "hold set again from the missed first zeroings");
            let _ = std::fs::OpenOptions::new()
                .append(true)
                .open(opts.folder.storage_txt())
                .and_then(|mut f| {
                    use std::io::Write;
                    writeln!(
                        f,
                        "attempt_{attempt}_z1_us={}\nattempt_{attempt}_guest_part_us={}\nattempt_{}_aimed_part_us={}\nattempt_{}_hold_us={}",
                        (z * 1e6).round() as u64,
                        part.as_micros(),
                        attempt + 1,
                        aim.as_micros(),
                        attempt + 1,
                        next.as_micros()
                    )
                });
        }
        check(remote.exec("umount /mnt/vol", short)?, "umount")?;
        if cancelled() {
            return Err(GuestError::Interrupted);
        }
        opts.events.phase(cell, Phase::Mkfs);
        mkfs(remote, opts, &mut m)?;
        arm_trace(remote, &kb)?;
        attempt += 1;
    }
    // Recorded with the calibration that aimed the hold.
    m.z1_attempts = m.z1_target_ms.map(|_| attempt);
    m.zero_hold_ms = opts.hold.as_ref().map(|h| ms(h.get()));
    // An estimate keeps the critical span until its groups are read.
    if crate::estimate::early_stop(remote, exp, opts, to_init, mounted_at, critical, &mut m)? {
        return Ok(m);
    }
    poll_until_done(remote, exp, opts, to_init, mounted_at, &mut m)?;
    drop(measuring);

    opts.events.phase(cell, Phase::Collect);
    collect(remote, exp, opts, groups, &mut m)?;
    Ok(m)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Block groups of the measured filesystem, and those left for lazy-init.
#[derive(Clone, Copy)]
pub(crate) struct Groups {
    pub total: u64,
    pub to_init: u64,
}

/// The sleep L the kernel chose, where the trace has too few cycles for
/// [`parse::TraceSummary::slept_ticks`] (which counts it on the tick grid).
/// With the fix it is floor(W z1 HZ), the
/// kernel's own formula on the z1 the trace measured: the cycle cannot
/// tell, because a zeroing that ends after the next tick (a 3.6 ms zeroing
/// plus 0.4 ms of wake-up latency at HZ=250) makes every cycle L+2 ticks,
/// and on one core a run slept L=8 in 10-tick cycles. Without the fix it is
/// W times the ticks of the first zeroing that crossed one: the median
/// cycle's ticks minus one, to the nearest multiple of W.
pub fn sleep_ticks(
    exp: &Expectation,
    wait_mult: u32,
    z1_ms: Option<f64>,
    median_cycle_ms: Option<f64>,
) -> Option<u64> {
    let from_cycle = median_cycle_ms.and_then(|c| model::infer_sleep_ticks(exp.hz, c));
    match (exp.variant, z1_ms) {
        (Variant::Fix, Some(z)) => Some(model::sleep_ticks(
            exp.hz,
            Variant::Fix,
            wait_mult,
            z / 1000.0,
        )),
        (Variant::NoFix, _) => from_cycle.map(|l| {
            let w = wait_mult.max(1) as u64;
            (((l + w / 2) / w).max(1)) * w
        }),
        (Variant::Fix, None) => from_cycle,
    }
}

/// The z1 interval, seconds, that sleeps the same L as `target` with the
/// fix: [L, L+1) / (W HZ).
pub fn z1_window(hz: lazyinit_core::Hz, wait_mult: u32, target: Duration) -> (f64, f64) {
    let per = wait_mult.max(1) as f64 * hz.get() as f64;
    let l = model::sleep_ticks(hz, Variant::Fix, wait_mult, target.as_secs_f64()) as f64;
    (l / per, (l + 1.0) / per)
}

/// Arms the tracepoints (an empty buffer of `kb` KiB per CPU) for a mount.
fn arm_trace(remote: &mut dyn Remote, kb: &str) -> Result<(), GuestError> {
    check(
        remote.exec(
            &script_with_args(TRACE_SETUP_SH, &[kb.to_string()]),
            Duration::from_secs(120),
        )?,
        "trace setup",
    )?;
    Ok(())
}

/// Mounts the volume (trace markers around it); returns when it was mounted.
fn mount(
    remote: &mut dyn Remote,
    opts: &ProtocolOptions,
    mount_opts: &str,
) -> Result<Instant, GuestError> {
    let mount_out = check(
        remote.exec(
            &script_with_args(MOUNT_SH, &[opts.device.clone(), mount_opts.to_string()]),
            Duration::from_secs(120),
        )?,
        "mount",
    )?;
    let mounted_at = Instant::now();
    if key_values(&mount_out)
        .get("pid")
        .is_none_or(|p| p.is_empty())
    {
        return Err(GuestError::Parse {
            step: "mount",
            what: "no ext4lazyinit thread after mount".into(),
        });
    }
    Ok(mounted_at)
}

/// Waits in the guest, polling with shell builtins (no process starts,
/// no trace-pipe reader is woken inside a zeroing), until the groups that
/// set the sleep were zeroed ([`sensitive_groups`]).
fn wait_for_sleep(
    remote: &mut dyn Remote,
    exp: &Expectation,
    to_init: u64,
) -> Result<(), GuestError> {
    let k = sensitive_groups(exp.variant).min(to_init);
    check(
        remote.exec(
            &script_with_args(WAIT_GROUPS_SH, &[k.to_string(), "60".into()]),
            Duration::from_secs(60 * (k + 2)),
        )?,
        "wait for the sleep to be set",
    )?;
    Ok(())
}

/// mkfs of the volume.
fn mkfs(
    remote: &mut dyn Remote,
    opts: &ProtocolOptions,
    m: &mut Measurement,
) -> Result<Groups, GuestError> {
    let mut mkfs_args = vec![opts.device.clone()];
    mkfs_args.extend(opts.mkfs_args.iter().cloned());
    m.mkfs_cmd = std::iter::once("mkfs.ext4 -F -q".to_string())
        .chain(opts.mkfs_args.iter().cloned())
        .chain(std::iter::once(opts.device.clone()))
        .collect::<Vec<_>>()
        .join(" ");
    // mkfs of a 3 TiB device takes a while under emulation (3-7 s alone,
    // longer beside other guests' work).
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
    let total = blocks.div_ceil(bpg.max(1));
    m.groups = Some(total);
    let zeroed: u64 = num(&kv, "zeroed", "mkfs")?;
    // DESIGN §3: if mkfs marked the tables zeroed, lazy-init has nothing to
    // do and the number would be meaningless.
    if zeroed * 2 >= total {
        return Err(GuestError::AlreadyZeroed {
            groups: total,
            zeroed,
        });
    }
    Ok(Groups {
        total,
        to_init: total - zeroed,
    })
}

/// Times the first zeroing of [`CALIBRATION_MOUNTS`] lazy-init requests on
/// the scratch disk and, with a hold and a target, sets the hold so that
/// the measured first zeroing comes to the target. Keeps every sample in
/// `calibration.csv` and what was set in `storage.txt`.
fn calibrate(
    remote: &mut dyn Remote,
    opts: &ProtocolOptions,
    dev: &str,
    mount_opts: &str,
) -> Result<Option<lazyinit_core::storage::Calibration>, GuestError> {
    use lazyinit_core::storage;
    let hold = opts.hold.as_ref().map(|h| h.get());
    let out = check(
        remote.exec(
            &script_with_args(
                CALIBRATE_SH,
                &[
                    dev.to_string(),
                    CALIBRATION_MOUNTS.to_string(),
                    mount_opts.to_string(),
                ],
            ),
            Duration::from_secs(60 * (CALIBRATION_MOUNTS as u64 + 1)),
        )?,
        "calibration",
    )?;
    let zeroings: Vec<Duration> = parse::first_zeroings_after(&out, CALIBRATION_MARKER)
        .into_iter()
        .flatten()
        .map(Duration::from_secs_f64)
        .collect();
    let mut csv = String::from("mount,hold_us,zero_us\n");
    for (i, z) in zeroings.iter().enumerate() {
        csv.push_str(&format!(
            "{},{},{}\n",
            i + 1,
            hold.map(|h| h.as_micros().to_string()).unwrap_or_default(),
            z.as_micros()
        ));
    }
    let _ = std::fs::write(opts.folder.calibration_csv(), csv);
    if zeroings.len() < CALIBRATION_MOUNTS as usize {
        return Err(GuestError::Parse {
            step: "calibration",
            what: format!(
                "timed {} of {CALIBRATION_MOUNTS} first zeroings (no journal start traced before a group event?)",
                zeroings.len()
            ),
        });
    }
    let (Some(h), Some(target), Some(handle)) = (hold, opts.z1_target, &opts.hold) else {
        return Ok(None);
    };
    let samples: Vec<(Duration, Duration)> =
        zeroings.iter().skip(COLD_MOUNTS).map(|z| (h, *z)).collect();
    let guest_part = storage::guest_part(&samples).expect("samples checked above");
    let set = storage::hold_for(target, guest_part);
    handle.set(set);
    let _ = std::fs::write(
        opts.folder.storage_txt(),
        format!(
            "z1_target_us={}\ncalibration_hold_us={}\nguest_part_us={}\nhold_us={}\nsamples_us={}\n",
            target.as_micros(),
            h.as_micros(),
            guest_part.as_micros(),
            set.as_micros(),
            zeroings
                .iter()
                .map(|z| z.as_micros().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        ),
    );
    Ok(Some(storage::Calibration {
        z1_target: target,
        guest_part,
        hold: set,
    }))
}

fn poll_until_done(
    remote: &mut dyn Remote,
    exp: &Expectation,
    opts: &ProtocolOptions,
    to_init: u64,
    mounted_at: Instant,
    m: &mut Measurement,
) -> Result<(), GuestError> {
    let short = Duration::from_secs(120);
    let per_group = model::predict(model::ModelInputs {
        hz: exp.hz,
        variant: exp.variant,
        wait_mult: opts.wait_mult,
        groups: to_init,
        z1_s: model::DEFAULT_ZEROING_S,
        z_s: model::DEFAULT_ZEROING_S,
    })
    .per_group_s;
    loop {
        let poll = key_values(&check(remote.exec(POLL_SH, short)?, "poll")?);
        let done = poll
            .get("groups")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            .min(to_init);
        let eta = (to_init - done) as f64 * per_group;
        opts.events.emit(Event::Groups {
            cell: opts.cell_id.clone(),
            done,
            total: to_init,
            eta_s: Some(eta),
        });
        if poll.get("pid").is_none_or(|p| p.is_empty()) {
            m.lazyinit_poll_s = Some(mounted_at.elapsed().as_secs_f64());
            return Ok(());
        }
        if mounted_at.elapsed() > opts.lazyinit_deadline {
            return Err(GuestError::Timeout {
                step: "lazyinit",
                after: opts.lazyinit_deadline,
            });
        }
        // Every poll runs a shell in this very guest: no faster than asked,
        // so that one rarely lands on a zeroing.
        sleep_unless_cancelled(opts.poll_interval, &opts.cancel)?;
    }
}

/// How long reading the whole trace may take: about 400 bytes of text a
/// group (three events) go over SSH from a TCG guest that shares the host
/// with measured guests.
/// 120 s, plus 20 ms a group (3 TiB: 612 s).
fn collect_timeout(groups: u64) -> Duration {
    Duration::from_secs(120) + Duration::from_millis(20) * groups.min(10_000_000) as u32
}

fn collect(
    remote: &mut dyn Remote,
    exp: &Expectation,
    opts: &ProtocolOptions,
    groups: Groups,
    m: &mut Measurement,
) -> Result<(), GuestError> {
    let trace = check(
        remote.exec(READ_TRACE, collect_timeout(groups.total))?,
        "collect trace",
    )?;
    let _ = std::fs::write(opts.folder.trace_txt(), &trace);
    let s = parse::summarize(&trace);
    let _ = std::fs::write(opts.folder.groups_csv(), s.groups_csv());
    m.traced_groups = Some(s.distinct_groups);
    m.mount_s = match (s.mount_start, s.mount_done) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    m.lazyinit_s = s.lazyinit_s();
    m.ms_per_group = s.ms_per_group();
    m.first_group_s = match (s.first_group(), s.mount_done) {
        (Some(f), Some(d)) => Some(f - d),
        _ => None,
    };
    m.z1_ms = s.z1_s().map(|z| z * 1000.0);
    m.zero_median_ms = s.median_zero_s().map(|z| z * 1000.0);
    // The tick grid, counted once: the sleep's fallback and the crossings.
    let grid = s.tick_cycles(exp.hz.get());
    m.sleep_ticks = s
        .sleep(grid.as_ref())
        .or_else(|| sleep_ticks(exp, opts.wait_mult, m.z1_ms, s.median_cycle_ms()));
    m.crossed_ticks = m.sleep_ticks.zip(grid).map(|(l, c)| c.crossed_at(l));
    if m.lazyinit_s.is_none() {
        return Err(GuestError::Parse {
            step: "collect trace",
            what: "no mount marker or no thread-exit event in the trace".into(),
        });
    }
    if s.distinct_groups != groups.to_init {
        return Err(GuestError::GroupCount {
            traced: s.distinct_groups,
            expected: groups.to_init,
            groups: groups.total,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{Answer, FakeGuest};
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
    fn script_arguments_are_quoted() {
        assert_eq!(
            script_with_args("echo $1", &["x y".into(), String::new()]),
            "set -- 'x y' ''\necho $1"
        );
    }

    #[test]
    fn buffer_sized_for_groups() {
        assert_eq!(trace_buffer_kb(512), 4096);
        assert!(trace_buffer_kb(24576) * 1024 >= 24576 * 200);
    }

    fn guest(groups: u64, traced: u64, zeroed: u64) -> FakeGuest {
        let e = exp();
        let mut g = FakeGuest::new(e.arch, e.hz, e.variant, &e.kernel_release, groups);
        g.traced = traced;
        g.zeroed = zeroed;
        g
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
            folder: CellFolder::at(dir),
            cancel: Arc::new(AtomicBool::new(false)),
            events: EventSink::discard(),
            gate: Arc::new(NoGate),
            hold: None,
            z1_target: None,
            estimate_after: None,
        }
    }

    #[test]
    fn whole_protocol_on_a_scripted_guest() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = guest(64, 64, 0);
        let m = run(&mut g, &exp(), &opts(dir.path())).unwrap();
        assert_eq!(m.groups, Some(64));
        assert_eq!(m.traced_groups, Some(64));
        assert_eq!(m.clocksource, "tsc");
        assert!((m.ms_per_group.unwrap() - 44.0).abs() < 1e-6);
        assert!((m.lazyinit_s.unwrap() - (2.0 - 0.02 + 64.0 * 0.044)).abs() < 1e-6);
        assert!((m.mount_s.unwrap() - 0.02).abs() < 1e-9);
        assert_eq!(m.mkfs_cmd, "mkfs.ext4 -F -q /dev/vda");
        assert_eq!(m.sleep_ticks, Some(10), "44 ms at HZ=250 is 11 ticks");
        assert!((m.z1_ms.unwrap() - 3.4).abs() < 1e-6, "{:?}", m.z1_ms);
        assert_eq!(
            (m.z1_target_ms, m.guest_part_ms, m.zero_hold_ms),
            (None, None, None)
        );
        assert_eq!(m.z1_attempts, None, "no calibration, nothing counted");
        assert_eq!(
            g.steps,
            [
                "facts",
                "mkfs",
                "trace-setup",
                "mount",
                "wait",
                "first-zeroing",
                "poll",
                "poll",
                "poll",
                "collect"
            ]
        );
        let folder = CellFolder::at(dir.path());
        assert!(folder.trace_txt().exists());
        assert!(folder.facts_txt().exists());
        assert_eq!(
            std::fs::read_to_string(folder.groups_csv())
                .unwrap()
                .lines()
                .count(),
            65
        );
    }

    #[test]
    fn lost_events_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = guest(64, 60, 0);
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
        let mut g = guest(64, 0, 64);
        assert!(matches!(
            run(&mut g, &exp(), &opts(dir.path())),
            Err(GuestError::AlreadyZeroed { .. })
        ));
    }

    #[test]
    fn cancel_stops_polling() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let mut g = guest(64, 64, 0);
        let cancel = o.cancel.clone();
        g.hook = Some(Arc::new(move |step| {
            if step == "poll" {
                cancel.store(true, Ordering::SeqCst);
            }
            Answer::Normal
        }));
        assert!(matches!(
            run(&mut g, &exp(), &o),
            Err(GuestError::Interrupted)
        ));
        // The interrupt came during lazy-init: one poll, then nothing more.
        assert_eq!(g.polls(), 1);
        assert_eq!(g.steps.last(), Some(&"poll"));
    }

    #[test]
    fn a_failing_step_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = guest(64, 64, 0);
        g.hook = Some(Arc::new(|step| match step {
            "mount" => Answer::Fail("mount: wrong fs type".into()),
            _ => Answer::Normal,
        }));
        let e = run(&mut g, &exp(), &opts(dir.path())).unwrap_err();
        assert!(
            matches!(
                e,
                GuestError::Command {
                    step: "mount",
                    status: 1,
                    ..
                }
            ),
            "{e}"
        );
    }

    /// A settable hold, as the QEMU provider's NBD server has.
    struct FakeHold(std::sync::Mutex<Duration>);

    impl lazyinit_core::provider::ZeroHold for FakeHold {
        fn get(&self) -> Duration {
            *self.0.lock().unwrap()
        }
        fn set(&self, d: Duration) {
            *self.0.lock().unwrap() = d;
        }
    }

    fn close(x: Option<f64>, want: f64) -> bool {
        x.is_some_and(|x| (x - want).abs() < 1e-9)
    }

    #[test]
    fn calibration_sets_the_hold_from_the_least_disturbed_zeroing() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(dir.path());
        o.warmup_device = Some("/dev/vdb".into());
        let hold = Arc::new(FakeHold(std::sync::Mutex::new(Duration::from_micros(2300))));
        o.hold = Some(hold.clone());
        o.z1_target = Some(Duration::from_micros(3500));
        let mut g = guest(64, 64, 0);
        // Two cold mounts (left out), then four: the smallest excess over
        // the 2300 us hold is 1100 us, so the hold becomes 3500 - 1100.
        g.calibration_us = vec![5900, 3300, 3400, 3900, 8600, 3500];
        let m = run(&mut g, &exp(), &o).unwrap();
        assert_eq!(
            lazyinit_core::provider::ZeroHold::get(&*hold),
            Duration::from_micros(2400)
        );
        assert!(close(m.z1_target_ms, 3.5), "{:?}", m.z1_target_ms);
        assert!(close(m.guest_part_ms, 1.1), "{:?}", m.guest_part_ms);
        assert!(close(m.zero_hold_ms, 2.4), "{:?}", m.zero_hold_ms);
        assert_eq!(m.z1_attempts, Some(1));
        assert_eq!(
            &g.steps[..5],
            ["facts", "warmup-mkfs", "mkfs", "calibrate", "trace-setup"]
        );
        let folder = CellFolder::at(dir.path());
        let csv = std::fs::read_to_string(folder.calibration_csv()).unwrap();
        assert_eq!(csv.lines().count(), 7, "{csv}");
        let st = std::fs::read_to_string(folder.storage_txt()).unwrap();
        assert!(st.contains("guest_part_us=1100\nhold_us=2400\n"), "{st}");
    }

    #[test]
    fn a_first_zeroing_outside_the_target_interval_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(dir.path());
        // With the fix at HZ=250 a 3.4 ms target sleeps L=8 (36 ms cycles).
        o.z1_target = Some(Duration::from_micros(3400));
        let fix = Expectation {
            variant: Variant::Fix,
            kernel_release: "6.1.158-lazyinit-hz250-fix".into(),
            ..exp()
        };
        let mut g = guest(64, 64, 0);
        // 3.62 ms is past [3.2, 3.6): made again; 3.45 ms is kept.
        g.first_zeroings_us = vec![3620, 3450];
        g.facts = facts_for(&fix);
        let hold = Arc::new(FakeHold(std::sync::Mutex::new(Duration::from_micros(2300))));
        o.hold = Some(hold.clone());
        let m = run(&mut g, &fix, &o).unwrap();
        // The missed zeroing (3620 us at a 2300 us hold: a guest part of
        // 1320 us) set the hold for the next attempt: 3400 - 1320.
        assert!(close(m.zero_hold_ms, 2.08), "{:?}", m.zero_hold_ms);
        // Without a calibration the row does not count the attempts.
        assert_eq!(m.z1_attempts, None);
        o.hold = None;
        assert_eq!(
            &g.steps[..11],
            [
                "facts",
                "mkfs",
                "trace-setup",
                "mount",
                "wait",
                "first-zeroing",
                "umount",
                "mkfs",
                "trace-setup",
                "mount",
                "wait"
            ]
        );
        // Never more than MAX_ATTEMPTS: the last one is kept as it is.
        let mut g = guest(64, 64, 0);
        g.first_zeroings_us = vec![3100; 5];
        g.facts = facts_for(&fix);
        run(&mut g, &fix, &o).unwrap();
        let mounts = g.steps.iter().filter(|s| **s == "mount").count();
        assert_eq!(mounts, MAX_ATTEMPTS as usize);
        // Without a target nothing is retried.
        o.z1_target = None;
        let mut g = guest(64, 64, 0);
        g.first_zeroings_us = vec![3100];
        g.facts = facts_for(&fix);
        run(&mut g, &fix, &o).unwrap();
        assert_eq!(g.steps.iter().filter(|s| **s == "mount").count(), 1);
    }

    /// With a calibration, the row counts the measured mounts it took.
    #[test]
    fn attempts_are_counted_with_a_calibration() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(dir.path());
        o.warmup_device = Some("/dev/vdb".into());
        o.z1_target = Some(Duration::from_micros(3400));
        o.hold = Some(Arc::new(FakeHold(std::sync::Mutex::new(
            Duration::from_micros(2300),
        ))));
        let fix = Expectation {
            variant: Variant::Fix,
            kernel_release: "6.1.158-lazyinit-hz250-fix".into(),
            ..exp()
        };
        let mut g = guest(64, 64, 0);
        g.first_zeroings_us = vec![3100; 5];
        g.facts = facts_for(&fix);
        let m = run(&mut g, &fix, &o).unwrap();
        assert_eq!(m.z1_attempts, Some(MAX_ATTEMPTS));
        // Each next hold is aimed at the median of the calibrated guest
        // part and every missed one, not at the last miss alone.
        let kv = key_values(&std::fs::read_to_string(o.folder.storage_txt()).unwrap());
        let us = |k: String| -> u64 { kv[&k].parse().unwrap() };
        let calibrated = (m.guest_part_ms.unwrap() * 1000.0).round() as u64;
        let mut parts = vec![calibrated];
        for k in 1..MAX_ATTEMPTS {
            parts.push(us(format!("attempt_{k}_guest_part_us")));
            parts.sort();
            let n = parts.len();
            let median = if n % 2 == 1 {
                parts[n / 2]
            } else {
                (parts[n / 2 - 1] + parts[n / 2]) / 2
            };
            let aimed = us(format!("attempt_{}_aimed_part_us", k + 1));
            assert!(
                aimed.abs_diff(median) <= 1,
                "attempt {}: {aimed} vs {median} of {parts:?}",
                k + 1
            );
            let hold = us(format!("attempt_{}_hold_us", k + 1));
            assert!(
                hold.abs_diff(3400 - aimed) <= 1,
                "attempt {}: hold {hold}",
                k + 1
            );
        }
    }

    fn facts_for(e: &Expectation) -> BTreeMap<String, String> {
        let mut f = facts();
        f.insert("release".into(), e.kernel_release.clone());
        f.insert(
            "localversion".into(),
            format!("-lazyinit-hz250-{}", e.variant),
        );
        f
    }

    #[test]
    fn the_sleep_is_the_kernels_formula_with_the_fix_and_a_multiple_of_w_without() {
        let fix = Expectation {
            variant: Variant::Fix,
            ..exp()
        };
        // 3.578 ms at HZ=250 is L=8, even in 10-tick (40 ms) cycles.
        assert_eq!(sleep_ticks(&fix, 10, Some(3.578), Some(40.0)), Some(8));
        assert_eq!(sleep_ticks(&fix, 10, None, Some(36.0)), Some(8));
        // Without the fix: 11 or 12 ticks a cycle is L=10; 21 is L=20.
        assert_eq!(sleep_ticks(&exp(), 10, Some(3.4), Some(44.0)), Some(10));
        assert_eq!(sleep_ticks(&exp(), 10, Some(3.4), Some(48.0)), Some(10));
        assert_eq!(sleep_ticks(&exp(), 10, Some(3.4), Some(84.0)), Some(20));
        assert_eq!(sleep_ticks(&exp(), 10, None, None), None);
    }

    #[test]
    fn z1_windows() {
        let w = z1_window(Hz::new(250).unwrap(), 10, Duration::from_micros(3400));
        assert!(
            (w.0 - 0.0032).abs() < 1e-12 && (w.1 - 0.0036).abs() < 1e-12,
            "{w:?}"
        );
        let w = z1_window(Hz::new(100).unwrap(), 10, Duration::from_micros(3500));
        assert!(
            (w.0 - 0.003).abs() < 1e-12 && (w.1 - 0.004).abs() < 1e-12,
            "{w:?}"
        );
    }

    #[test]
    fn calibration_without_every_zeroing_timed_fails() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(dir.path());
        o.warmup_device = Some("/dev/vdb".into());
        let mut g = guest(64, 64, 0);
        g.calibration_us = vec![5200, 3400];
        assert!(matches!(
            run(&mut g, &exp(), &o),
            Err(GuestError::Parse {
                step: "calibration",
                ..
            })
        ));
    }
}
