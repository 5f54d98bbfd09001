//! An owned QEMU process: its own process group, stderr kept in a file, and
//! killed on every exit path (explicit stop, error, drop, Ctrl-C), and
//! also when the harness itself dies without any of them (SIGKILL, OOM, a
//! CI timeout): the kernel sends it SIGKILL then (`PR_SET_PDEATHSIG`).

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
    /// Starts `binary` with its stderr going to `stderr`, a new file at
    /// `stderr_log` (made by the cell folder's writer), read back for tails.
    pub fn spawn(
        binary: impl AsRef<std::ffi::OsStr>,
        args: &[OsString],
        stderr: std::fs::File,
        stderr_log: &Path,
    ) -> std::io::Result<Self> {
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            // Own process group: a Ctrl-C on the terminal reaches us, not
            // QEMU, so we decide how it stops; killpg then takes all of it.
            .process_group(0)
            .kill_on_drop(true);
        let child = spawn_dying_with_us(cmd)?;
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

/// Spawns `cmd` so that it gets SIGKILL when the harness dies, however it
/// dies (`PR_SET_PDEATHSIG`). The kernel sends that signal when the
/// *thread* that forked the child exits, not the process: a child forked
/// on a tokio blocking thread would be killed when that thread idles out.
/// So every such child is forked on one thread that lives as long as the
/// process, and only the process's death ends it.
#[allow(unsafe_code)] // pre_exec: the one way to set a child's death signal
pub fn spawn_dying_with_us(mut cmd: Command) -> std::io::Result<Child> {
    use std::sync::mpsc;
    type Job = Box<dyn FnOnce() + Send>;
    static FORKER: std::sync::OnceLock<std::sync::Mutex<mpsc::Sender<Job>>> =
        std::sync::OnceLock::new();
    let parent = std::process::id() as i32;
    // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The harness died between fork and prctl: go with it.
            if libc::getppid() != parent {
                libc::_exit(137);
            }
            Ok(())
        });
    }
    let forker = FORKER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("lazyinit-forker".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .expect("cannot start the thread that forks guests");
        std::sync::Mutex::new(tx)
    });
    // tokio's child reaping needs its runtime (every caller runs in one).
    let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
    let (tx, rx) = mpsc::channel();
    let job: Job = Box::new(move || {
        let _in = runtime.enter();
        let _ = tx.send(cmd.spawn());
    });
    forker
        .lock()
        .unwrap()
        .send(job)
        .map_err(|_| std::io::Error::other("the forking thread is gone"))?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the forking thread is gone"))?
}

/// Pids of live QEMU processes (`qemu-system-*`) whose command line
/// mentions `needle` (a folder their files are in).
pub fn qemu_pids_with(needle: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            let exe = cmd.split(' ').next()?.rsplit('/').next()?.to_string();
            (exe.starts_with("qemu-system") && cmd.contains(needle)).then_some(pid)
        })
        .collect()
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
    renice("-g", pgid, nice)
}

/// Sets the nice value of one thread (`renice -p` on its id).
pub fn set_thread_nice(tid: u32, nice: u8) -> Result<(), String> {
    renice("-p", tid, nice)
}

/// `renice -n nice <which> id`: `-g` a process group, `-p` one task.
fn renice(which: &str, id: u32, nice: u8) -> Result<(), String> {
    let mut c = std::process::Command::new("renice");
    c.args(["-n", &nice.to_string(), which, &id.to_string()]);
    run_quiet(c)
}

fn run_quiet(mut c: std::process::Command) -> Result<(), String> {
    use lazyinit_core::command::{self, CommandError};
    match command::run(c.stdin(Stdio::null())) {
        Ok(_) => Ok(()),
        Err(e @ CommandError::Spawn { .. }) => Err(e.to_string()),
        Err(e) => Err(e.detail()),
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

    /// Every thread of a process goes real-time and back. Needs root (the
    /// harness warns and goes on without it; CI runs as root, and this
    /// fails rather than pass without checking anything).
    #[test]
    fn realtime_on_every_thread_and_back() {
        assert!(
            is_root(),
            "this test needs root (or CAP_SYS_NICE): run it as scripts/test.sh does"
        );
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

    /// A child spawned so dies with whoever spawned it, even by SIGKILL:
    /// a helper process spawns it (on a runtime whose worker thread then
    /// ends, as blocking threads do), is killed, and the child goes too.
    #[test]
    fn children_die_with_the_harness() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        // The helper is this test binary itself, asked to spawn and wait.
        let exe = std::env::current_exe().unwrap();
        let mut helper = std::process::Command::new(exe)
            .args([
                "--exact",
                "process::tests::spawn_a_sleeper_and_wait",
                "--nocapture",
                "--include-ignored",
            ])
            .env("LAZYINIT_SLEEPER_PIDFILE", &pidfile)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let sleeper = loop {
            if let Some(p) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
            {
                break p;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the helper never spawned"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let alive = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| !s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
                .unwrap_or(false)
        };
        // The thread that spawned it has ended; the child still runs.
        std::thread::sleep(Duration::from_millis(500));
        if !alive(sleeper) {
            let _ = helper.kill();
            panic!("the sleeper died with the thread that spawned it");
        }
        helper.kill().unwrap();
        let _ = helper.wait();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive(sleeper) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let outlived = alive(sleeper);
        let _ = nix::sys::signal::kill(Pid::from_raw(sleeper), Signal::SIGKILL);
        assert!(!outlived, "the child outlived its SIGKILLed parent");
    }

    /// The helper of [`children_die_with_the_harness`]; ignored unless run by it.
    #[test]
    #[ignore]
    fn spawn_a_sleeper_and_wait() {
        let Some(pidfile) = std::env::var_os("LAZYINIT_SLEEPER_PIDFILE") else {
            return;
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_keep_alive(Duration::from_millis(10))
            .enable_all()
            .build()
            .unwrap();
        let pid = rt.block_on(async {
            // Spawned from a blocking thread, which idles out and ends.
            tokio::task::spawn_blocking(|| {
                let rt = tokio::runtime::Handle::current();
                let _in = rt.enter();
                let mut c = Command::new("sleep");
                c.arg("300");
                let child = spawn_dying_with_us(c).unwrap();
                let pid = child.id().unwrap();
                std::mem::forget(child);
                pid
            })
            .await
            .unwrap()
        });
        std::fs::write(pidfile, pid.to_string()).unwrap();
        std::thread::sleep(Duration::from_secs(300));
    }

    #[tokio::test]
    async fn stop_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let args: Vec<OsString> = vec!["-c".into(), "sleep 300 & sleep 300".into()];
        let err = dir.path().join("err");
        let err_file = std::fs::File::create(&err).unwrap();
        let mut p = QemuProcess::spawn("sh", &args, err_file, &err).unwrap();
        let pg = p.pid().unwrap() as i32;
        p.stop(Duration::from_millis(100)).await;
        // Nothing of the group runs any more (the background sleep included;
        // it may linger as a zombie until its new parent reaps it).
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(live_members(pg), 0);
    }
}
