//! A scripted guest (feature `fake`): answers every script of the guest
//! protocol and of a kexec install as a real guest would, from a few
//! numbers, in process. The protocol's own tests and the orchestrator's
//! fake provider drive the real code against it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lazyinit_core::{Arch, Hz, Variant};

use crate::protocol::{
    CALIBRATE_SH, FACTS_SH, MKFS_SH, MOUNT_SH, POLL_SH, READ_TRACE_SH, TRACE_SETUP_SH,
    WAIT_GROUPS_SH, WARMUP_MKFS_SH,
};
use crate::{GuestError, Remote, RemoteOutput};

/// The steps a guest is asked to do, in the names [`FakeGuest::steps`]
/// records and [`Hook`]s see.
pub const STEPS: &[&str] = &[
    "facts",
    "warmup-mkfs",
    "mkfs",
    "calibrate",
    "trace-setup",
    "mount",
    "wait",
    "first-zeroing",
    "umount",
    "poll",
    "collect",
    "mkdir",
    "install-kexec",
    "kexec-load",
    "kexec-exec",
    "boot",
    "uname",
    "find-volume",
];

/// What a hook makes of a step before the guest answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// As a healthy guest would.
    Normal,
    /// The command fails: exit 1 with this on stderr.
    Fail(String),
    /// The connection drops (SSH error).
    Drop,
}

/// Called with each step's name before it is answered; may also set a
/// cancel flag, as a Ctrl-C at that moment would.
pub type Hook = Arc<dyn Fn(&str) -> Answer + Send + Sync>;

/// A guest running (or about to kexec into) a given kernel.
pub struct FakeGuest {
    /// What `facts.sh` prints once the kernel under test runs.
    pub facts: BTreeMap<String, String>,
    /// The kernel's HZ and variant: they make the trace's cycle.
    hz: Hz,
    variant: Variant,
    /// Block groups mkfs makes, groups the trace shows, groups mkfs
    /// already marked zeroed.
    pub groups: u64,
    pub traced: u64,
    pub zeroed: u64,
    /// First zeroing times (us) the calibration mounts report.
    pub calibration_us: Vec<u64>,
    /// The first zeroing (us) each measured mount's trace shows, in turn;
    /// 3400 once they run out.
    pub first_zeroings_us: Vec<u64>,
    /// Ticks the kernel sleeps beyond its formula (0: the kernel as
    /// built; 1: a kernel patched to sleep one tick more), in the measured
    /// mounts' first groups (as its timer says) and the whole trace.
    pub extra_sleep_ticks: u64,
    /// The poll that finds the lazy-init thread gone (polls before it see
    /// it running, and the protocol sleeps a poll interval after each).
    pub exit_at_poll: u32,
    /// False while the machine still runs its own kernel (before a kexec).
    pub under_test: bool,
    pub hook: Option<Hook>,
    /// Every step asked, in order.
    pub steps: Vec<&'static str>,
    /// Remote paths uploaded to.
    pub uploads: Vec<String>,
    /// The last `kexec -l` script, as asked.
    pub kexec_loaded: Option<String>,
    /// Boots so far: a kexec makes a new one (another boot id).
    boots: u32,
    /// The first zeroing (us) of the last measured mount: the kept one's
    /// is the collected trace's first.
    kept_us: u64,
    polls: u32,
    waits: u32,
    reads: u32,
}

/// Every zeroing of the measured volume but the first, seconds.
const ZERO_S: f64 = 0.0034;
/// The first zeroing when [`FakeGuest::first_zeroings_us`] has run out.
const ZERO_US: u64 = 3400;

/// The release a machine runs before a kexec into the kernel under test.
pub const CLOUD_RELEASE: &str = "6.1.0-28-cloud-amd64";
/// Its command line (a cloud image's: two consoles).
pub const CLOUD_CMDLINE: &str =
    "BOOT_IMAGE=/boot/vmlinuz root=/dev/nvme0n1p1 ro console=tty0 console=ttyS0,115200n8";
/// Where a volume asked for by NVMe serial is found.
pub const NVME_NODE: &str = "/dev/nvme1n1";

impl FakeGuest {
    /// A guest running the kernel `release` built for `arch`, `hz`,
    /// `variant`, with `groups` block groups on its volume.
    pub fn new(arch: Arch, hz: Hz, variant: Variant, release: &str, groups: u64) -> Self {
        let facts = [
            ("release", release.to_string()),
            ("machine", arch.uname_machine().to_string()),
            ("hz", hz.to_string()),
            ("localversion", format!("-lazyinit-hz{hz}-{variant}")),
            ("clocksource", "tsc".to_string()),
            ("tracing", "yes".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        FakeGuest {
            facts,
            hz,
            variant,
            groups,
            traced: groups,
            zeroed: 0,
            calibration_us: vec![5900, 3300, 3400, 3900, 8600, 3500],
            first_zeroings_us: Vec::new(),
            extra_sleep_ticks: 0,
            exit_at_poll: 3,
            under_test: true,
            hook: None,
            steps: Vec::new(),
            uploads: Vec::new(),
            kexec_loaded: None,
            boots: 1,
            kept_us: ZERO_US,
            polls: 0,
            waits: 0,
            reads: 0,
        }
    }

    /// Polls answered so far.
    pub fn polls(&self) -> u32 {
        self.polls
    }

    fn step_of(&self, script: &str) -> Option<&'static str> {
        let by_text = [
            ("facts", FACTS_SH),
            ("warmup-mkfs", WARMUP_MKFS_SH),
            ("mkfs", MKFS_SH),
            ("calibrate", CALIBRATE_SH),
            ("trace-setup", TRACE_SETUP_SH),
            ("mount", MOUNT_SH),
            ("wait", WAIT_GROUPS_SH),
            ("poll", POLL_SH),
            ("collect", READ_TRACE_SH),
        ];
        if let Some((name, _)) = by_text.iter().find(|(_, text)| script.ends_with(text)) {
            return Some(name);
        }
        Some(if script.starts_with("cat /sys/kernel/tracing/trace") {
            // Read right after a measured mount's wait: its first zeroing.
            match self.waits > self.reads {
                true => "first-zeroing",
                false => "collect",
            }
        } else if script == "umount /mnt/vol" {
            "umount"
        } else if script.starts_with("mkdir -p ") {
            "mkdir"
        } else if script.contains("kexec-tools") {
            "install-kexec"
        } else if script.starts_with("kexec -l ") {
            "kexec-load"
        } else if script.contains("kexec -e") {
            "kexec-exec"
        } else if script == "uname -r" {
            "uname"
        } else if script == crate::install::BOOT_SH {
            "boot"
        } else if script.ends_with(crate::volume::NVME_BY_SERIAL_SH) {
            "find-volume"
        } else {
            return None;
        })
    }

    fn release(&self) -> String {
        if self.under_test {
            self.facts["release"].clone()
        } else {
            CLOUD_RELEASE.to_string()
        }
    }

    fn answer(&mut self, step: &str, script: &str) -> String {
        match step {
            "facts" => {
                let mut f = self.facts.clone();
                f.insert("release".into(), self.release());
                f.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
            }
            "calibrate" => self.calibration_trace(),
            "wait" => {
                self.waits += 1;
                "seen=2\ngap_us=44000\n".into()
            }
            "first-zeroing" => self.first_zeroing(),
            "mkfs" => format!(
                "mkfs_s=1.50\nblocks={}\nblocks_per_group=32768\nzeroed={}\n",
                self.groups * 32768,
                self.zeroed
            ),
            "trace-setup" => "trace_clock=mono\n".into(),
            "mount" => "pid=120\n".into(),
            "poll" => {
                self.polls += 1;
                if self.polls < self.exit_at_poll {
                    "pid=120\ngroups=10\nstate=D\nwchan=blk_mq_get_tag\n".into()
                } else {
                    format!("pid=\ngroups={}\n", self.traced)
                }
            }
            "collect" if script.ends_with(READ_TRACE_SH) => {
                let text = self.trace();
                let raw = raw_read(&text);
                format!("{text}{}\n{raw}", crate::parse::RAW_MARK)
            }
            "collect" => self.trace(),
            "kexec-load" => {
                self.kexec_loaded = Some(script.to_string());
                String::new()
            }
            "kexec-exec" => {
                // The jump: every later connection reaches the new kernel.
                if self.kexec_loaded.is_some() {
                    self.under_test = true;
                    self.boots += 1;
                }
                String::new()
            }
            "uname" => format!("{}\n", self.release()),
            "boot" => {
                let cmdline = match self.under_test {
                    true => "console=ttyS0 rdinit=/init",
                    false => CLOUD_CMDLINE,
                };
                format!(
                    "00000000-0000-4000-8000-{:012}\n{}\n{cmdline}\n",
                    self.boots,
                    self.release()
                )
            }
            "find-volume" => format!("{NVME_NODE}\n"),
            _ => String::new(),
        }
    }

    /// The calibration's trace: one first zeroing per scratch mount, of
    /// the lengths given.
    fn calibration_trace(&self) -> String {
        let mut tr = String::from("# tracer: nop\n");
        for (i, us) in self.calibration_us.iter().enumerate() {
            let t0 = 10.0 + i as f64;
            tr.push_str(&format!(
                "  sh-1 [000] ..... {:.6}: tracing_mark_write: {}\n",
                t0 - 0.5,
                crate::protocol::CALIBRATION_MARKER
            ));
            tr.push_str(&format!("  ext4lazyinit-{i} [000] ..... {t0:.6}: ext4_journal_start: dev 254,16 blocks 1, rsv_blocks 0, revoke_creds 8, caller 0x0\n"));
            let t1 = t0 + *us as f64 / 1e6;
            tr.push_str(&format!("  ext4lazyinit-{i} [000] ..... {t1:.6}: ext4_lazy_itable_init: dev 254,16 group {i}\n"));
        }
        tr
    }

    /// The measured mount's first groups so far, the kept first zeroing
    /// the next of those given (or the default).
    fn first_zeroing(&mut self) -> String {
        self.reads += 1;
        let us = match self.first_zeroings_us.is_empty() {
            true => ZERO_US,
            false => self.first_zeroings_us.remove(0),
        };
        self.kept_us = us;
        // The first groups so far, each followed by the sleep the
        // kernel armed (its timer), as trace-setup.sh traces them.
        let l = self.slept();
        let cycle = (l + 1) as f64 * self.hz.tick_s();
        let mut t = String::new();
        for g in 0..3u64 {
            let ts = 102.0 + g as f64 * cycle;
            let z = match g {
                0 => us as f64 / 1e6,
                _ => ZERO_S,
            };
            t.push_str(&format!("  ext4lazyinit-120 [000] ..... {:.6}: ext4_journal_start: dev 254,0 blocks 1\n  ext4lazyinit-120 [000] ..... {ts:.6}: ext4_lazy_itable_init: dev 254,0 group {}\n", ts - z, g + 1));
            t.push_str(&timer(ts, g, l));
        }
        t
    }

    /// The sleep L the kernel sets on the kept first zeroing (its
    /// formula, plus [`Self::extra_sleep_ticks`]).
    fn slept(&self) -> u64 {
        let z1 = self.kept_us as f64 / 1e6;
        lazyinit_core::model::sleep_ticks(self.hz, self.variant, 10, z1) + self.extra_sleep_ticks
    }

    /// The trace of a lazy-init whose first zeroing is the kept mount's
    /// (3.4 ms unless set) and every other 3.4 ms, after a 2 s start
    /// delay, one group every L+1 ticks, L as the kernel sets it (at
    /// HZ=250: 44 ms without the fix, 36 ms with it).
    fn trace(&self) -> String {
        let l = self.slept();
        let cycle = (l + 1) as f64 * self.hz.tick_s();
        let mut t = String::from("# tracer: nop\n");
        t.push_str("  sh-1 [000] ..... 100.000000: tracing_mark_write: lazyinit-mount-start\n");
        t.push_str("  sh-1 [000] ..... 100.020000: tracing_mark_write: lazyinit-mount-done\n");
        for g in 0..self.traced {
            let ts = 102.0 + g as f64 * cycle;
            let start = ts
                - if g == 0 {
                    self.kept_us as f64 / 1e6
                } else {
                    ZERO_S
                };
            t.push_str(&format!("  ext4lazyinit-120 [000] ..... {start:.6}: ext4_journal_start: dev 254,0 blocks 1, rsv_blocks 0, revoke_creds 8, caller 0x0\n"));
            t.push_str(&format!("  ext4lazyinit-120 [000] ..... {ts:.6}: ext4_lazy_itable_init: dev 254,0 group {g}\n"));
            if self.extra_sleep_ticks > 0 {
                t.push_str(&timer(ts, g, l));
            }
        }
        let end = 102.0 + self.traced as f64 * cycle;
        t.push_str(&format!("  ext4lazyinit-120 [000] ..... {end:.6}: sched_process_exit: comm=ext4lazyinit pid=120 prio=120\n"));
        t
    }
}

/// The lazy-init thread's sleep timer armed after group `g`'s event at
/// `ts`, for `l` ticks.
fn timer(ts: f64, g: u64, l: u64) -> String {
    format!("  ext4lazyinit-120 [000] ..... {:.6}: timer_start: timer=00000000a1b2c3d4 function=process_timeout expires={} [timeout={l}] cpu=0 idx=9 flags=\n", ts + 0.0001, 4294970000 + g * (l + 1))
}

impl Remote for FakeGuest {
    fn exec(&mut self, script: &str, _timeout: Duration) -> Result<RemoteOutput, GuestError> {
        let Some(step) = self.step_of(script) else {
            return Err(GuestError::Transport(format!(
                "unexpected script: {script}"
            )));
        };
        self.steps.push(step);
        match self.hook.as_ref().map_or(Answer::Normal, |h| h(step)) {
            Answer::Normal => Ok(RemoteOutput {
                status: 0,
                stdout: self.answer(step, script),
                stderr: String::new(),
            }),
            Answer::Fail(stderr) => Ok(RemoteOutput {
                status: 1,
                stdout: String::new(),
                stderr,
            }),
            Answer::Drop => Err(GuestError::Transport(format!(
                "connection lost during {step} (fake)"
            ))),
        }
    }

    fn upload(&mut self, local: &Path, remote: &str, _mode: u32) -> Result<(), GuestError> {
        if !local.is_file() {
            return Err(GuestError::Transport(format!(
                "cannot upload {}: no such file",
                local.display()
            )));
        }
        self.uploads.push(remote.to_string());
        Ok(())
    }
}

/// One guest shared between its machine and every connection to it.
#[derive(Clone)]
pub struct SharedGuest(pub Arc<Mutex<FakeGuest>>);

impl SharedGuest {
    pub fn new(g: FakeGuest) -> Self {
        SharedGuest(Arc::new(Mutex::new(g)))
    }
    pub fn lock(&self) -> std::sync::MutexGuard<'_, FakeGuest> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Remote for SharedGuest {
    fn exec(&mut self, script: &str, timeout: Duration) -> Result<RemoteOutput, GuestError> {
        self.lock().exec(script, timeout)
    }
    fn upload(&mut self, local: &Path, remote: &str, mode: u32) -> Result<(), GuestError> {
        self.lock().upload(local, remote, mode)
    }
}

/// A text trace's events as `scripts/read-trace.sh`'s raw read prints
/// them: pid, CPU, nanoseconds (here the text's microseconds).
fn raw_read(text: &str) -> String {
    text.lines()
        .filter_map(crate::parse::text_pid_us)
        .map(|(pid, us)| format!("{pid} 0 {} type: 1\n", us * 1000))
        .collect()
}
