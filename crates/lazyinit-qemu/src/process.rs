//! An owned QEMU process: its own process group, stderr kept in a file, and
//! killed on every exit path (explicit stop, error, drop, Ctrl-C).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

pub struct QemuProcess {
    child: Child,
    pgid: Option<i32>,
    stderr_log: PathBuf,
}

impl QemuProcess {
    pub fn spawn(binary: &str, args: &[OsString], stderr_log: &Path) -> std::io::Result<Self> {
        let stderr = std::fs::File::create(stderr_log)?;
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            // Own process group: a Ctrl-C on the terminal reaches us, not
            // QEMU, so we decide how it stops; killpg then takes all of it.
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd.spawn()?;
        let pgid = child.id().map(|p| p as i32);
        Ok(Self {
            child,
            pgid,
            stderr_log: stderr_log.to_path_buf(),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The exit status if QEMU has ended.
    pub fn try_exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn stderr_tail(&self, max_bytes: usize) -> String {
        tail_file(&self.stderr_log, max_bytes)
    }

    /// Waits up to `grace` for QEMU to end on its own (after a QMP quit),
    /// then SIGTERM, then SIGKILL to the whole group.
    pub async fn stop(&mut self, grace: Duration) {
        if tokio::time::timeout(grace, self.child.wait()).await.is_ok() {
            self.pgid = None;
            return;
        }
        self.signal(Signal::SIGTERM);
        if tokio::time::timeout(Duration::from_secs(3), self.child.wait())
            .await
            .is_ok()
        {
            self.pgid = None;
            return;
        }
        self.signal(Signal::SIGKILL);
        let _ = self.child.wait().await;
        self.pgid = None;
    }

    /// Waits for QEMU to end by itself, with a deadline.
    pub async fn wait_exit(&mut self, deadline: Duration) -> Option<std::process::ExitStatus> {
        match tokio::time::timeout(deadline, self.child.wait()).await {
            Ok(Ok(st)) => {
                self.pgid = None;
                Some(st)
            }
            _ => None,
        }
    }

    fn signal(&self, sig: Signal) {
        if let Some(pg) = self.pgid {
            let _ = killpg(Pid::from_raw(pg), sig);
        }
    }
}

impl Drop for QemuProcess {
    fn drop(&mut self) {
        // Synchronous last resort; the group may already be gone.
        self.signal(Signal::SIGKILL);
    }
}

/// Puts a process (every thread of it, with `all_threads`) or one thread
/// under SCHED_FIFO at `rt` (1-99), or back under SCHED_OTHER with `rt` None,
/// with util-linux's `chrt`. Needs root or CAP_SYS_NICE; the error says why
/// not. The kernel's real-time throttling (95% of each second by default)
/// keeps a runaway real-time thread from taking a whole CPU.
pub fn set_realtime(id: u32, all_threads: bool, rt: Option<u8>) -> Result<(), String> {
    let mut c = std::process::Command::new("chrt");
    c.arg(if rt.is_some() { "-f" } else { "-o" });
    if all_threads {
        c.arg("-a");
    }
    c.args(["-p", &rt.unwrap_or(0).to_string(), &id.to_string()]);
    run_quiet(c)
}

/// Sets the nice value of every thread of every process in a process group
/// (`setpriority(PRIO_PGRP)` through util-linux's `renice`).
pub fn set_group_nice(pgid: u32, nice: u8) -> Result<(), String> {
    let mut c = std::process::Command::new("renice");
    c.args(["-n", &nice.to_string(), "-g", &pgid.to_string()]);
    run_quiet(c)
}

/// Sets the nice value of one thread (`renice -p` on its id).
pub fn set_thread_nice(tid: u32, nice: u8) -> Result<(), String> {
    let mut c = std::process::Command::new("renice");
    c.args(["-n", &nice.to_string(), "-p", &tid.to_string()]);
    run_quiet(c)
}

fn run_quiet(mut c: std::process::Command) -> Result<(), String> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", c.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The scheduling policy of every thread of a process, from /proc (`0`
/// SCHED_OTHER, `1` SCHED_FIFO: field 41 of `stat`); empty if the process
/// is gone.
pub fn thread_policies(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            stat[stat.rfind(')')? + 2..]
                .split(' ')
                .nth(38)?
                .parse()
                .ok()
        })
        .collect()
}

/// Whether this process runs as root (real-time priorities need it, or
/// CAP_SYS_NICE).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        .unwrap_or(false)
}

/// The last `max_bytes` of a file, starting at a line boundary, lossily decoded.
pub fn tail_file(path: &Path, max_bytes: usize) -> String {
    let Ok(bytes) = std::fs::read(path) else {
        return String::new();
    };
    let start = bytes.len().saturating_sub(max_bytes);
    let mut s = String::from_utf8_lossy(&bytes[start..]).into_owned();
    if start > 0 {
        if let Some(nl) = s.find('\n') {
            s.drain(..=nl);
        }
    }
    s.replace('\r', "")
}

/// The last `n` lines of a file (console logs end lines with `\r\n`).
pub fn tail_lines(path: &Path, n: usize) -> String {
    let s = tail_file(path, 64 * 1024);
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_strip_carriage_returns() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.log");
        std::fs::write(&p, "a\r\nb\r\nc\r\n").unwrap();
        assert_eq!(tail_lines(&p, 2), "b\nc");
        assert_eq!(tail_lines(&dir.path().join("none"), 2), "");
    }

    /// Processes of a group that are not zombies, from /proc.
    fn live_members(pgid: i32) -> usize {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
            .filter(|stat| {
                // pid (comm) state ppid pgrp ...: split after the last ')'.
                let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
                rest[0] != "Z" && rest[2] == pgid.to_string()
            })
            .count()
    }

    /// Every thread of a process goes real-time and back (as root; the
    /// harness warns and goes on without it otherwise).
    #[test]
    fn realtime_on_every_thread_and_back() {
        if !is_root() {
            eprintln!("skipping: needs root");
            return;
        }
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        set_realtime(pid, true, Some(2)).unwrap();
        let fifo = thread_policies(pid);
        assert!(!fifo.is_empty() && fifo.iter().all(|p| *p == 1), "{fifo:?}");
        set_realtime(pid, true, None).unwrap();
        let other = thread_policies(pid);
        assert!(
            !other.is_empty() && other.iter().all(|p| *p == 0),
            "{other:?}"
        );
        assert!(set_realtime(999_999_999, true, Some(1)).is_err());
        // Nice by process group (the child is in ours: use a fresh group).
        let mut grp = std::process::Command::new("sleep");
        std::os::unix::process::CommandExt::process_group(&mut grp, 0);
        let mut g = grp.arg("30").spawn().unwrap();
        set_group_nice(g.id(), 7).unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", g.id())).unwrap();
        let nice = stat[stat.rfind(')').unwrap() + 2..]
            .split(' ')
            .nth(16)
            .unwrap()
            .to_string();
        assert_eq!(nice, "7");
        g.kill().unwrap();
        let _ = g.wait();
        child.kill().unwrap();
        let _ = child.wait();
    }

    #[tokio::test]
    async fn stop_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let args: Vec<OsString> = vec!["-c".into(), "sleep 300 & sleep 300".into()];
        let mut p = QemuProcess::spawn("sh", &args, &dir.path().join("err")).unwrap();
        let pg = p.pid().unwrap() as i32;
        p.stop(Duration::from_millis(100)).await;
        // Nothing of the group runs any more (the background sleep included;
        // it may linger as a zombie until its new parent reaps it).
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(live_members(pg), 0);
    }
}
