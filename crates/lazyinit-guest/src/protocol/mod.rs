//! The guest protocol: the same steps on every provider, once SSH answers.
//!
//! verify the kernel -> mkfs on the guest's device -> check inode tables
//! are not yet zeroed -> calibrate the storage hold on a scratch disk ->
//! arm the tracepoints -> mount -> wait (blocked, in the guest) until the
//! sleep between groups is set -> poll until the ext4lazyinit thread is
//! gone -> read the trace. Durations come from the trace clock, so they do
//! not depend on the poll interval.
//!
//! This module has the step order ([`run`]); the steps are in `steps`,
//! the calibration in `calibrate`, the retried measured mount in `retry`
//! and the kernel check in `verify`. The protocol writes no file: what it
//! keeps beside the row it returns in an [`Evidence`], which the cell
//! writes.

mod calibrate;
mod retry;
pub(crate) mod steps;
#[cfg(test)]
mod tests;
mod verify;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use lazyinit_core::events::{EventSink, Phase};
pub use lazyinit_core::results::Measurement;
use lazyinit_core::writer::Evidence;
use lazyinit_core::{Arch, Hz, Variant};

use crate::parse::key_values;
use crate::{GuestError, Remote};

#[cfg(any(test, feature = "fake"))]
pub(crate) use calibrate::CALIBRATION_MARKER;
pub use calibrate::{CALIBRATION_MOUNTS, COLD_MOUNTS};
pub use retry::{kept_window, sleep_ticks, z1_window, GUARD_BAND, MAX_ATTEMPTS};
pub(crate) use steps::check;
pub use steps::{script_with_args, trace_buffer_kb};
pub use verify::verify_facts;

pub(crate) const FACTS_SH: &str = include_str!("../../scripts/facts.sh");
pub(crate) const MKFS_SH: &str = include_str!("../../scripts/mkfs.sh");
pub(crate) const TRACE_SETUP_SH: &str = include_str!("../../scripts/trace-setup.sh");
pub(crate) const MOUNT_SH: &str = include_str!("../../scripts/mount.sh");
pub(crate) const POLL_SH: &str = include_str!("../../scripts/poll.sh");
/// The virtual clock's wait: inside the guest, on its own clock.
pub(crate) const WAIT_SH: &str = include_str!("../../scripts/wait.sh");
pub(crate) const WARMUP_MKFS_SH: &str = include_str!("../../scripts/warmup-mkfs.sh");
pub(crate) const CALIBRATE_SH: &str = include_str!("../../scripts/calibrate.sh");
pub(crate) const WAIT_GROUPS_SH: &str = include_str!("../../scripts/wait-groups.sh");
/// The whole trace so far; reading it does not stop tracing (with
/// `pause-on-trace` off, as trace-setup.sh leaves it).
pub(crate) const READ_TRACE: &str = "cat /sys/kernel/tracing/trace";
/// The whole trace, read as text and then raw: its events timed to the
/// nanosecond ([`crate::parse::trace_events`]). Read once the thread is
/// gone.
pub(crate) const READ_TRACE_SH: &str = include_str!("../../scripts/read-trace.sh");

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
///   surely set (that one zeroing time sets it for the whole run, docs/design.md
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
    /// Wait for the thread inside the guest, not by polling from the host
    /// (the virtual clock: a host-timed poll would land in the measured
    /// span at a moment the host chose).
    pub guest_paced: bool,
}

/// Runs the protocol on a guest that answers SSH. What it keeps beside the
/// row goes into `ev`, on every outcome (the caller writes it).
pub fn run(
    remote: &mut dyn Remote,
    exp: &Expectation,
    opts: &ProtocolOptions,
    ev: &mut Evidence,
) -> Result<Measurement, GuestError> {
    let cell = &opts.cell_id;
    // An interrupt ends a long command (mkfs, a wait) at once, not at its end.
    remote.set_cancel(opts.cancel.clone());

    opts.events.phase(cell, Phase::Verify);
    let mut m = verify(remote, exp, ev)?;

    steps::interrupted(opts)?;
    opts.events.phase(cell, Phase::Mkfs);
    if let Some(dev) = &opts.warmup_device {
        steps::warmup_mkfs(remote, dev)?;
    }
    let groups = steps::mkfs(remote, opts, &mut m)?;
    let kb = trace_buffer_kb(groups.total).to_string();
    let mount_opts = steps::mount_options(opts.wait_mult);
    steps::interrupted(opts)?;
    // From here on the guest runs above unmeasured work on the host. On
    // the virtual clock nothing of the host reaches the guest's figures:
    // no priority and no host token (its whole wait is one guest command,
    // which the token would serialize). Shown under load without either:
    // crates/lazyinit-bench/tests/vclock_e2e.rs.
    let unpaced = || -> Box<dyn Send> { Box::new(()) };
    let measuring = match opts.guest_paced {
        true => unpaced(),
        false => opts.gate.measuring(),
    };
    let window = window(exp, opts);
    let calibrated_part = calibrate_on_scratch(remote, opts, &mount_opts, window, &mut m, ev)?;
    steps::arm_trace(remote, &kb)?;
    // The critical span: the mount and the first zeroing(s), after the
    // random 0-5 s start delay and the bitmap prefetch, which set the sleep
    // for the whole run, with the host to this guest alone (the
    // orchestrator's gate): no other guest's mount or first zeroings.
    let critical = match opts.guest_paced {
        true => unpaced(),
        false => opts.gate.critical(),
    };
    steps::interrupted(opts)?;
    let mounting = retry::Mounting {
        to_init: groups.to_init,
        kb: &kb,
        mount_opts: &mount_opts,
        calibrated_part,
        window,
    };
    let (mounted_at, attempts) = retry::measured_mount(remote, exp, opts, &mounting, &mut m, ev)?;
    // Recorded with the calibration that aimed the hold.
    m.z1_attempts = m.z1_target_ms.map(|_| attempts);
    m.zero_hold_ms = opts.hold.as_ref().map(|h| ms(h.get()));
    // An estimate keeps the critical span until its groups are read.
    let stopped = crate::estimate::early_stop(
        remote,
        exp,
        opts,
        (groups.to_init, mounted_at),
        critical,
        &mut m,
        ev,
    )?;
    if stopped {
        retry::record_window(&mut m, window);
        return Ok(m);
    }
    steps::poll_until_done(remote, exp, opts, groups.to_init, mounted_at, &mut m)?;
    drop(measuring);

    opts.events.phase(cell, Phase::Collect);
    steps::collect(remote, exp, opts, groups, &mut m, ev)?;
    retry::record_window(&mut m, window);
    Ok(m)
}

/// The profile's window (the calibration aims at its target), and
/// whether the kept first zeroing (the row's z1) is in it: said in the
/// row, never silent.
fn window(exp: &Expectation, opts: &ProtocolOptions) -> Option<(f64, f64)> {
    opts.z1_target
        .map(|t| retry::kept_window(exp.hz, opts.wait_mult, t, opts.guest_paced))
}

/// What the guest says it is (kept in `ev`), checked against what was
/// asked; the row's measurement starts with its clocksource.
fn verify(
    remote: &mut dyn Remote,
    exp: &Expectation,
    ev: &mut Evidence,
) -> Result<Measurement, GuestError> {
    let facts_text = check(remote.exec(FACTS_SH, Duration::from_secs(120))?, "facts")?;
    let facts = key_values(&facts_text);
    // What the guest said it is, kept beside the row as evidence.
    ev.facts = Some(facts_text);
    verify_facts(&facts, exp)?;
    Ok(Measurement {
        clocksource: facts["clocksource"].clone(),
        ..Default::default()
    })
}

/// The first zeroing calibrated on the scratch disk, when the guest has
/// one: its target and guest part in the row, and the guest part the
/// measured mount's hold aims with. Then, calibrated or not, noise on
/// purpose starts ([`lazyinit_core::provider::ZeroHold::start_noise`]):
/// after the calibration it would throw, before the measured mount.
fn calibrate_on_scratch(
    remote: &mut dyn Remote,
    opts: &ProtocolOptions,
    mount_opts: &str,
    window: Option<(f64, f64)>,
    m: &mut Measurement,
    ev: &mut Evidence,
) -> Result<Option<Duration>, GuestError> {
    let cell = &opts.cell_id;
    let mut calibrated_part = None;
    if let Some(dev) = &opts.warmup_device {
        opts.events
            .note(cell, "calibrating the first zeroing on the scratch disk");
        if let Some(c) = calibrate::calibrate(remote, opts, dev, mount_opts, ev)? {
            m.z1_target_ms = Some(ms(c.z1_target));
            m.guest_part_ms = Some(ms(c.guest_part));
            calibrated_part = Some(c.guest_part);
            // Told before the measured mount, not after its attempts: a
            // host that moves the first zeroing by more than the window
            // is unlikely to hold the target's L.
            let samples = ev.storage.calibration.as_ref().map(|n| &n.samples[..]);
            if let Some(w) = samples.zip(window).and_then(|(s, w)| noisy_host(s, w)) {
                opts.events.note(cell, w);
            }
        }
    }
    if let Some(h) = &opts.hold {
        h.start_noise();
    }
    Ok(calibrated_part)
}

/// The warning a calibration gives when its warm first zeroings (the
/// cold ones left out) spread over at least the window that holds the
/// target's L: the host's noise is then larger than what the profile can
/// aim at, whatever the hold. None when they fit (or are too few to say).
pub(crate) fn noisy_host(samples: &[Duration], (lo, hi): (f64, f64)) -> Option<String> {
    let warm: Vec<f64> = samples
        .iter()
        .skip(calibrate::COLD_MOUNTS)
        .map(|d| d.as_secs_f64())
        .collect();
    if warm.len() < 2 {
        return None;
    }
    let min = warm.iter().copied().fold(f64::INFINITY, f64::min);
    let max = warm.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let width = hi - lo;
    (max - min >= width).then(|| {
        format!(
            "warning: this host moved the first zeroing over {:.2} ms in calibration \
             ({:.2}-{:.2} ms), as wide as or wider than the {:.2} ms window that holds \
             the target's L: the L may miss (up to {MAX_ATTEMPTS} attempts, then the row \
             says profile_held=false); fewer cells at once (--concurrency) or a quieter \
             host hold it better",
            (max - min) * 1e3,
            min * 1e3,
            max * 1e3,
            width * 1e3,
        )
    })
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
