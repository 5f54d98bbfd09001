//! The protocol's steps, one guest command each: run a script, check its
//! exit, parse what it printed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lazyinit_core::events::Event;
use lazyinit_core::model;
use lazyinit_core::writer::Evidence;

use super::{
    Expectation, Groups, Measurement, ProtocolOptions, MKFS_SH, MOUNT_SH, POLL_SH, READ_TRACE_SH,
    TRACE_SETUP_SH, WAIT_GROUPS_SH, WARMUP_MKFS_SH,
};
use crate::parse::{self, key_values};
use crate::{GuestError, Remote};

/// A script with positional arguments, as one command string.
pub fn script_with_args(script: &str, args: &[String]) -> String {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| lazyinit_core::shell::quote(a))
        .collect();
    format!("set -- {}\n{}", quoted.join(" "), script)
}

/// Trace buffer per CPU, sized for every group's events (its zeroing's
/// journal start and end, and the sleep timer armed after it: ~150 bytes
/// as stored) with room to spare; at least 4 MiB (docs/design.md §3).
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

pub(super) fn num<T: std::str::FromStr>(
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

/// [`GuestError::Interrupted`] once the run is cancelled.
pub(super) fn interrupted(opts: &ProtocolOptions) -> Result<(), GuestError> {
    match opts.cancel.load(Ordering::SeqCst) {
        true => Err(GuestError::Interrupted),
        false => Ok(()),
    }
}

/// Sleeps in small steps so Ctrl-C is honoured promptly.
pub(super) fn sleep_unless_cancelled(d: Duration, cancel: &AtomicBool) -> Result<(), GuestError> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if cancel.load(Ordering::SeqCst) {
            return Err(GuestError::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(100).min(d));
    }
    Ok(())
}

/// mkfs of the scratch disk the calibration mounts.
pub(super) fn warmup_mkfs(remote: &mut dyn Remote, dev: &str) -> Result<(), GuestError> {
    let script = script_with_args(WARMUP_MKFS_SH, &[dev.to_string()]);
    check(
        remote.exec(&script, Duration::from_secs(120))?,
        "scratch disk mkfs",
    )?;
    Ok(())
}

/// Mount options for the measured mount and the calibration's: the
/// wait multiplier when it is not the kernel's default.
pub(super) fn mount_options(wait_mult: u32) -> String {
    if wait_mult != lazyinit_core::cell::DEFAULT_WAIT_MULT {
        format!("init_itable={wait_mult}")
    } else {
        String::new()
    }
}

/// Arms the tracepoints (an empty buffer of `kb` KiB per CPU) for a mount.
pub(super) fn arm_trace(remote: &mut dyn Remote, kb: &str) -> Result<(), GuestError> {
    check(
        remote.exec(
            &script_with_args(TRACE_SETUP_SH, &[kb.to_string()]),
            Duration::from_secs(120),
        )?,
        "trace setup",
    )?;
    Ok(())
}

/// The model's seconds a group, for the wait's first sleep and the ETA.
fn per_group_s(exp: &Expectation, opts: &ProtocolOptions, to_init: u64) -> f64 {
    model::predict(model::ModelInputs {
        hz: exp.hz,
        variant: exp.variant,
        wait_mult: opts.wait_mult,
        groups: to_init,
        z1_s: model::DEFAULT_ZEROING_S,
        z_s: model::DEFAULT_ZEROING_S,
    })
    .per_group_s
}

/// The line between the mount's output and the wait's, in one command.
const WAIT_MARK: &str = "lazyinit-wait";
/// Where the guest keeps the mount's output until the wait is over.
const MOUNTED: &str = "/tmp/lazyinit-mounted";

/// The virtual clock's mount: the mount and the wait for the thread in
/// one command, so that nothing the host times (a command's shell, a
/// poll) runs in the guest between the mount and the thread's exit. The
/// wait sleeps on the guest's own clock: first the model's time for
/// every group, a quarter more and a second, then 10 s at a time. The
/// mount's lines are kept in a file and sent after the wait: sent at
/// once, they were a packet out and an acknowledgement in, an interrupt
/// at a moment the host chose, while the thread waited out its start.
/// Returns when it was mounted (the command's start: the host's clock is
/// not the measure here) and sets `lazyinit_poll_s`.
pub(super) fn mount_and_wait(
    remote: &mut dyn Remote,
    exp: &Expectation,
    opts: &ProtocolOptions,
    mount_opts: &str,
    to_init: u64,
    m: &mut Measurement,
) -> Result<Instant, GuestError> {
    let first = (to_init as f64 * per_group_s(exp, opts, to_init) * 1.25 + 1.0).ceil() as u64;
    let script = format!(
        "{{\n{}\n}} >{MOUNTED}\n{}\ncat {MOUNTED}\necho {WAIT_MARK}\n{POLL_SH}",
        script_with_args(MOUNT_SH, &[opts.device.clone(), mount_opts.to_string()]),
        script_with_args(super::WAIT_SH, &[first.to_string()]),
    );
    let started = Instant::now();
    let out = check(
        remote.exec(&script, opts.lazyinit_deadline)?,
        "mount and wait",
    )?;
    let (mounted, waited) =
        out.split_once(&format!("{WAIT_MARK}\n"))
            .ok_or_else(|| GuestError::Parse {
                step: "mount",
                what: "the mount did not finish".into(),
            })?;
    if key_values(mounted).get("pid").is_none_or(|p| p.is_empty()) {
        return Err(GuestError::Parse {
            step: "mount",
            what: "no ext4lazyinit thread after mount".into(),
        });
    }
    let poll = key_values(waited);
    m.lazyinit_poll_s = Some(started.elapsed().as_secs_f64());
    if poll.get("pid").is_some_and(|p| !p.is_empty()) {
        return Err(lazyinit_timeout(opts, &poll, 0, to_init));
    }
    Ok(started)
}

/// Mounts the volume (trace markers around it); returns when it was mounted.
pub(super) fn mount(
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
/// set the sleep were zeroed ([`super::sensitive_groups`]).
pub(super) fn wait_for_sleep(
    remote: &mut dyn Remote,
    exp: &Expectation,
    to_init: u64,
) -> Result<(), GuestError> {
    let k = super::sensitive_groups(exp.variant).min(to_init);
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
pub(super) fn mkfs(
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
    // docs/design.md §3: if mkfs marked the tables zeroed, lazy-init has nothing to
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

/// Polls until the ext4lazyinit thread is gone (or the deadline passes),
/// telling the events how far it is.
pub(super) fn poll_until_done(
    remote: &mut dyn Remote,
    exp: &Expectation,
    opts: &ProtocolOptions,
    to_init: u64,
    mounted_at: Instant,
    m: &mut Measurement,
) -> Result<(), GuestError> {
    let short = Duration::from_secs(120);
    if opts.guest_paced {
        // Waited for by the mount's own command (mount_and_wait).
        return match m.lazyinit_poll_s {
            Some(_) => Ok(()),
            None => Err(GuestError::Parse {
                step: "wait",
                what: "the mount's command did not wait for the thread".into(),
            }),
        };
    }
    let per_group = per_group_s(exp, opts, to_init);
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
            return Err(lazyinit_timeout(opts, &poll, done, to_init));
        }
        // Every poll runs a shell in this very guest: no faster than asked,
        // so that one rarely lands on a zeroing.
        sleep_unless_cancelled(opts.poll_interval, &opts.cancel)?;
    }
}

/// The deadline passed with the thread alive: how far it got and the
/// state and wait channel the last poll saw (`D` in a block layer
/// function is a stuck request, `S`/`R` with groups still coming a slow
/// host).
pub(crate) fn lazyinit_timeout(
    opts: &ProtocolOptions,
    poll: &std::collections::BTreeMap<String, String>,
    done: u64,
    total: u64,
) -> GuestError {
    let field = |k: &str| poll.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let thread = match (field("state"), field("wchan")) {
        (Some(s), Some(w)) => format!("in state {s}, waiting in {w}"),
        (Some(s), None) => format!("in state {s}"),
        _ => "state unknown".to_string(),
    };
    GuestError::LazyinitTimeout {
        after: opts.lazyinit_deadline,
        done,
        total,
        thread,
    }
}

/// How long reading the whole trace may take: about 400 bytes of text a
/// group (three events) go over SSH from a TCG guest that shares the host
/// with measured guests.
/// 120 s, plus 20 ms a group (3 TiB: 612 s).
pub(super) fn collect_timeout(groups: u64) -> Duration {
    Duration::from_secs(120) + Duration::from_millis(20) * groups.min(10_000_000) as u32
}

/// Reads the whole trace (kept, with its groups, in `ev`) and fills the
/// row's measurements from it.
pub(super) fn collect(
    remote: &mut dyn Remote,
    exp: &Expectation,
    opts: &ProtocolOptions,
    groups: Groups,
    m: &mut Measurement,
    ev: &mut Evidence,
) -> Result<(), GuestError> {
    let trace = check(
        remote.exec(READ_TRACE_SH, collect_timeout(groups.total))?,
        "collect trace",
    )?;
    let s = parse::summarize(&trace);
    ev.trace = Some(trace);
    ev.groups_csv = Some(s.groups_csv());
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
        .or_else(|| super::retry::sleep_ticks(exp, opts.wait_mult, m.z1_ms, s.median_cycle_ms()));
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
