//! The early stop (`estimate-after = N`): once N groups are traced, read
//! the trace so far and ask [`lazyinit_estimate::check`] whether the
//! cycle has locked. Locked: record the prediction and stop (the runner
//! tears the guest down with the thread still running). Not yet: wait for
//! more groups on the estimator's schedule and ask again; a cycle that
//! never locks before the end is measured as usual.
//!
//! Waiting is in the guest (wait-groups.sh polls the group count with
//! shell builtins), in chunks so that Ctrl-C is honoured between them.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use lazyinit_core::events::{Event, Phase};
use lazyinit_core::writer::Evidence;
use lazyinit_estimate::{Estimate, Trace, MIN_GROUPS};

use crate::parse::{self, key_values};
use crate::protocol::{
    check, script_with_args, sleep_ticks, Expectation, Measurement, ProtocolOptions, POLL_SH,
    READ_TRACE, WAIT_GROUPS_SH,
};
use crate::{GuestError, Remote};

/// Groups one blocking wait in the guest covers at most: at 110 ms a group,
/// Ctrl-C waits for a few seconds at most.
const WAIT_CHUNK: u64 = 32;

/// Runs the early stop when asked. Ok(true): `m` holds the estimate and
/// the partial trace is saved. Ok(false): not asked, or the thread exited
/// before the cycle locked; measure to the end.
pub(crate) fn early_stop(
    remote: &mut dyn Remote,
    exp: &Expectation,
    opts: &ProtocolOptions,
    (to_init, mounted_at): (u64, Instant),
    critical: Box<dyn Send>,
    m: &mut Measurement,
    ev: &mut Evidence,
) -> Result<bool, GuestError> {
    let Some(after) = opts.estimate_after else {
        return Ok(false);
    };
    if on_the_virtual_clock(opts, after) {
        return Ok(false);
    }
    // The groups of the first check run with the host to this guest alone:
    // the critical span goes on until they are read. A full run's cycles
    // come beside guests that are idle between their zeroings; the groups
    // an estimate extends to the whole run must not come beside other
    // guests' mkfs and calibration instead, where at HZ=250 more zeroings
    // cross a tick (x86_64 fix 3 TiB read 3.5% long, results/nightly-quiet).
    // Later checks, if the cycle has not locked, share the host again.
    let mut critical = Some(critical);
    let cell = &opts.cell_id;
    let mut log = format!("estimate_after={after}\nto_init={to_init}\n");
    let mut target = after.max(MIN_GROUPS);
    while target < to_init {
        if !wait_for_groups(remote, opts, target, to_init, mounted_at)? {
            log.push_str("exited before the cycle locked: measured\n");
            ev.estimate_log = Some(log);
            return Ok(false);
        }
        let trace = check(
            remote.exec(READ_TRACE, Duration::from_secs(120))?,
            "read the trace so far",
        )?;
        drop(critical.take());
        let (s, done, first) = summarized(&trace)?;
        let t_s: Vec<f64> = s.groups.iter().map(|g| g.1).collect();
        let tr = Trace {
            hz: exp.hz,
            to_init,
            first_group_s: first - done,
            t_s: &t_s,
            zero_s: &s.zero_s,
            load: opts.events.load_beside(cell),
        };
        match lazyinit_estimate::check(&tr) {
            Ok(e) => {
                let _ = writeln!(log, "check at {}: locked", t_s.len());
                log.push_str(&summary(&e));
                ev.groups_csv = Some(s.groups_csv());
                ev.trace = Some(trace);
                ev.estimate_log = Some(log);
                locked(exp, opts, &e, (&s, done), m);
                return Ok(true);
            }
            Err(why) => {
                let _ = writeln!(log, "check at {}: {why}", t_s.len());
                opts.events.note(
                    cell,
                    format!("no estimate at {} groups yet: {why}", t_s.len()),
                );
                target = lazyinit_estimate::next_check(t_s.len() as u64);
            }
        }
    }
    log.push_str("the next check would be past the last group: measured\n");
    ev.estimate_log = Some(log);
    Ok(false)
}

/// The virtual clock has measured the whole run by now, in seconds of
/// host: nothing to estimate (said so).
fn on_the_virtual_clock(opts: &ProtocolOptions, after: u64) -> bool {
    if opts.guest_paced {
        opts.events.note(
            &opts.cell_id,
            format!(
                "estimate-after {after}: the virtual clock measures the whole run, not an estimate"
            ),
        );
    }
    opts.guest_paced
}

/// The trace so far, summarized, with the end of the mount and the first
/// group on its clock.
fn summarized(trace: &str) -> Result<(parse::TraceSummary, f64, f64), GuestError> {
    let s = parse::summarize(trace);
    let (Some(done), Some(first)) = (s.mount_done, s.first_group()) else {
        return Err(GuestError::Parse {
            step: "read the trace so far",
            what: "no mount marker or no group event in the trace".into(),
        });
    };
    Ok((s, done, first))
}

/// The cycle locked: say so, and fill the row from the estimate and the
/// groups so far (`done`: the trace clock at the end of the mount).
fn locked(
    exp: &Expectation,
    opts: &ProtocolOptions,
    e: &Estimate,
    (s, done): (&parse::TraceSummary, f64),
    m: &mut Measurement,
) {
    let cell = &opts.cell_id;
    opts.events.note(
        cell,
        format!(
            "estimate from {} groups: {:.1} s (95% {:.1}-{:.1}), L={}",
            e.groups_traced,
            e.lazyinit_s,
            e.lo_s,
            e.hi_s,
            e.sleep_ticks()
        ),
    );
    opts.events.phase(cell, Phase::Collect);
    fill(m, s, done, e);
    // The kernel's L, as a measured run says it (with the fix from z1: a
    // cycle of L + 2 ticks is not L + 1).
    let locked_ms = e.ticks as f64 * 1000.0 / exp.hz.get() as f64;
    m.sleep_ticks =
        sleep_ticks(exp, opts.wait_mult, m.z1_ms, Some(locked_ms)).or(Some(e.sleep_ticks()));
}

/// Blocks until `target` groups are traced. False when the thread exited
/// first.
fn wait_for_groups(
    remote: &mut dyn Remote,
    opts: &ProtocolOptions,
    target: u64,
    to_init: u64,
    mounted_at: Instant,
) -> Result<bool, GuestError> {
    let short = Duration::from_secs(120);
    loop {
        if opts.cancel.load(Ordering::SeqCst) {
            return Err(GuestError::Interrupted);
        }
        let poll = key_values(&check(remote.exec(POLL_SH, short)?, "poll")?);
        let done = poll
            .get("groups")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        opts.events.emit(Event::Groups {
            cell: opts.cell_id.clone(),
            done: done.min(to_init),
            total: to_init,
            eta_s: None,
        });
        if done >= target {
            return Ok(true);
        }
        if poll.get("pid").is_none_or(|p| p.is_empty()) {
            return Ok(false);
        }
        if mounted_at.elapsed() > opts.lazyinit_deadline {
            return Err(crate::protocol::steps::lazyinit_timeout(
                opts,
                &poll,
                done.min(to_init),
                to_init,
            ));
        }
        let k = (target - done).min(WAIT_CHUNK);
        // Up to K more groups (wait-groups.sh counts every group since the
        // trace was armed). A group takes well under a minute; 60 s without
        // one means the thread is gone or stuck, and the poll says which.
        check(
            remote.exec(
                &script_with_args(WAIT_GROUPS_SH, &[(done + k).to_string(), "60".into()]),
                Duration::from_secs(60 * (k + 2)),
            )?,
            "wait for groups",
        )?;
    }
}

/// The measurement of a stopped run: measured where the trace so far
/// says, predicted where the estimate does.
fn fill(m: &mut Measurement, s: &parse::TraceSummary, mount_done: f64, e: &Estimate) {
    m.traced_groups = Some(s.distinct_groups);
    m.mount_s = s.mount_start.map(|a| mount_done - a);
    m.first_group_s = Some(e.first_group_s);
    m.lazyinit_s = Some(e.lazyinit_s);
    m.ms_per_group = e.ms_per_group();
    m.z1_ms = s.z1_s().map(|z| z * 1000.0);
    m.zero_median_ms = s.median_zero_s().map(|z| z * 1000.0);
    m.estimated = true;
    m.estimate_groups = Some(e.groups_traced);
    m.estimate_cycle_ms = Some(e.cycle_s * 1000.0);
    m.lazyinit_lo_s = Some(e.lo_s);
    m.lazyinit_hi_s = Some(e.hi_s);
    m.estimate_caveat = e.caveat();
}

/// `key=value` lines of an estimate, for the cell's estimate.txt: the
/// prediction, then what widened its interval and why.
fn summary(e: &Estimate) -> String {
    let sp = &e.spread;
    let why = format!(
        "block_cycles={:.1}\nshift_ms={:.3}\nnear_tick_gain={:.3}\nnear_tick_lose={:.3}\nothers_changing={}\nothers_running={}\ncapped={}\ncaveat={}\n",
        sp.block_cycles,
        sp.shift_ms,
        sp.near_tick.0,
        sp.near_tick.1,
        sp.load.changing,
        sp.load.running,
        sp.capped,
        e.caveat().unwrap_or_default()
    );
    let head = format!(
        "groups_traced={}\nwindow={}\nticks={}\ncycle_ms={:.4}\ntail_ms={:.3}\nfirst_group_s={:.6}\nlazyinit_s={:.3}\nlo_s={:.3}\nhi_s={:.3}\n",
        e.groups_traced,
        e.window,
        e.ticks,
        e.cycle_s * 1000.0,
        e.tail_s * 1000.0,
        e.first_group_s,
        e.lazyinit_s,
        e.lo_s,
        e.hi_s
    );
    head + &why
}

#[cfg(test)]
mod tests;
