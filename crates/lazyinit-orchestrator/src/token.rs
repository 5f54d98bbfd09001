//! The host-wide token of the critical span (see [`crate::gate`]): an
//! exclusive `flock` on `critical.lock` in a directory made for it, which
//! every harness process on the host, of every user, opens. Released when
//! its guard drops, or when the process dies, whatever way it dies.
//!
//! The directory is `$LAZYINIT_RUNTIME_DIR`, else `/run/lazyinit-bench`
//! when it exists (scripts/setup-host.sh makes it), else
//! `/tmp/lazyinit-bench`, made by the first run. It must be a real
//! directory (not a link) owned by root or by the caller, and sticky if
//! others may write in it (mode 01777, as /tmp): then no other user can
//! remove or replace the lock file. The file is opened without following
//! links and must be a regular file. Any local user can still take the
//! token (it guards the host's CPU for everyone's runs), so a wait says
//! who holds it and since when.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

/// The lock file's name in its directory.
pub const LOCK_FILE: &str = "critical.lock";
/// The directory setup-host.sh makes (root's, 01777).
pub const RUN_DIR: &str = "/run/lazyinit-bench";
/// The directory a run makes when there is no [`RUN_DIR`].
pub const TMP_DIR: &str = "/tmp/lazyinit-bench";
/// How often a wait on another process says so again.
const REMIND: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("the host token's directory {}: {why}; remove it (or set LAZYINIT_RUNTIME_DIR to a directory of your own)", .dir.display())]
    UnsafeDir { dir: PathBuf, why: String },
    #[error("cannot open the host token {}: {source}", .path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, Clone)]
pub struct HostToken {
    path: PathBuf,
}

/// Holds the host token until dropped.
pub struct TokenGuard {
    _lock: Flock<File>,
}

impl HostToken {
    /// The token in `dir` (made if missing, checked either way).
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            path: dir.into().join(LOCK_FILE),
        }
    }

    /// The token every run on this host shares.
    pub fn host() -> Self {
        let dir = std::env::var_os("LAZYINIT_RUNTIME_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| match Path::new(RUN_DIR).is_dir() {
                true => PathBuf::from(RUN_DIR),
                false => PathBuf::from(TMP_DIR),
            });
        Self::in_dir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the directory if missing, checks it and opens the lock file:
    /// what a run does once before its first cell, so that a directory
    /// planted by someone else stops it with what to do.
    pub fn open(&self) -> Result<File, TokenError> {
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        ensure_dir(dir)?;
        open_lock(&self.path)
    }

    /// Waits for the token; None once `cancel` is set, or if the lock file
    /// cannot be opened (logged: then nothing is serialized; a run checks
    /// with [`HostToken::open`] first).
    pub fn acquire(&self, cancel: &AtomicBool) -> Option<TokenGuard> {
        let mut file = match self.open() {
            Ok(f) => f,
            Err(e) => {
                tracing::error!("{e}: critical spans are not serialized");
                return None;
            }
        };
        let (asked, mut said) = (Instant::now(), None::<Instant>);
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Some(TokenGuard::taken(lock, &self.path)),
                Err((f, _)) => {
                    if cancel.load(Ordering::SeqCst) {
                        return None;
                    }
                    file = f;
                    if said.is_none_or(|t| t.elapsed() >= REMIND) {
                        said = Some(Instant::now());
                        self.say_who_holds(&mut file, asked.elapsed());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }

    /// Logs the holder, when it is another process (this run's own cells
    /// take turns all the time).
    fn say_who_holds(&self, file: &mut File, waited: Duration) {
        if let Some(who) = who_holds(file) {
            tracing::warn!(
                "waiting for the host token {} ({}s so far): {who}",
                self.path.display(),
                waited.as_secs(),
            );
        }
    }
}

impl TokenGuard {
    /// Notes in the file who holds the token since when, for whoever waits.
    fn taken(mut lock: Flock<File>, path: &Path) -> TokenGuard {
        let note = format!(
            "pid {} since {}\n",
            std::process::id(),
            chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ")
        );
        let written = lock
            .set_len(0)
            .and_then(|()| lock.rewind())
            .and_then(|_| lock.write_all(note.as_bytes()));
        if let Err(e) = written {
            // Opened read-only (another user's file): the holder's pid is
            // still found in /proc/locks.
            tracing::debug!("cannot note the holder in {}: {e}", path.display());
        }
        TokenGuard { _lock: lock }
    }
}

/// Who holds the token `file` is open on, unless it is this process.
fn who_holds(file: &mut File) -> Option<String> {
    let inode = file.metadata().map(|m| m.ino()).ok();
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let holder = inode.and_then(|i| flock_holder(&locks, i));
    if holder == Some(std::process::id()) {
        return None;
    }
    let mut note = String::new();
    if let Err(e) = file.rewind().and_then(|_| file.read_to_string(&mut note)) {
        tracing::debug!("cannot read the host token's note: {e}");
    }
    Some(describe_holder(holder, &note))
}

/// The pid holding an exclusive flock on inode `ino`, from /proc/locks
/// (`1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`; waiters' lines,
/// marked `->`, skipped).
pub fn flock_holder(proc_locks: &str, ino: u64) -> Option<u32> {
    proc_locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || f[1] != "FLOCK" || f[3] != "WRITE" {
            return None;
        }
        let file_ino: u64 = f[5].rsplit(':').next()?.parse().ok()?;
        (file_ino == ino).then(|| f[4].parse().ok()).flatten()
    })
}

/// "pid N (command) since T", from /proc/locks' pid and the note the
/// holder left (its time trusted only if the note names the same pid).
pub fn describe_holder(pid: Option<u32>, note: &str) -> String {
    let noted: Option<(u32, &str)> = note.trim().strip_prefix("pid ").and_then(|r| {
        let (p, since) = r.split_once(" since ")?;
        Some((p.parse().ok()?, since))
    });
    let pid = match (pid, noted) {
        (Some(p), _) => p,
        (None, Some((p, _))) => p,
        (None, None) => return "held by a process that left no note".into(),
    };
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| format!(" ({})", c.trim()))
        .unwrap_or_default();
    let since = match noted {
        Some((p, s)) if p == pid => format!(" since {s}"),
        _ => String::new(),
    };
    format!("held by pid {pid}{comm}{since}")
}

/// Makes `dir` (01777, like /tmp, so every user's runs share it) unless it
/// exists, then checks it is safe to open the token in.
fn ensure_dir(dir: &Path) -> Result<(), TokenError> {
    let unsafe_dir = |why: String| TokenError::UnsafeDir {
        dir: dir.to_path_buf(),
        why,
    };
    if std::fs::symlink_metadata(dir).is_err() {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            // Made private first, then opened up: no moment where it is
            // world-writable without the sticky bit.
            Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
                .map_err(|e| unsafe_dir(format!("cannot set its mode: {e}")))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(unsafe_dir(format!("cannot create it: {e}"))),
        }
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| unsafe_dir(e.to_string()))?;
    judge_dir(&DirFacts {
        is_dir: m.file_type().is_dir(),
        is_symlink: m.file_type().is_symlink(),
        owner: m.uid(),
        mode: m.mode(),
        me: my_uid(),
    })
    .map_err(unsafe_dir)
}

/// The effective uid: the owner of this process's /proc entry (std has no
/// geteuid, and this crate allows no unsafe code).
fn my_uid() -> u32 {
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

/// What [`judge_dir`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct DirFacts {
    pub is_dir: bool,
    pub is_symlink: bool,
    pub owner: u32,
    pub mode: u32,
    pub me: u32,
}

/// Whether the token may live in a directory so described.
pub fn judge_dir(f: &DirFacts) -> Result<(), String> {
    if f.is_symlink {
        return Err("it is a symbolic link".into());
    }
    if !f.is_dir {
        return Err("it is not a directory".into());
    }
    if f.owner != 0 && f.owner != f.me {
        return Err(format!("it belongs to uid {}, not root or you", f.owner));
    }
    let others_write = f.mode & 0o022 != 0;
    if others_write && f.mode & 0o1000 == 0 {
        return Err(format!(
            "others may write in it without the sticky bit (mode {:o})",
            f.mode & 0o7777
        ));
    }
    Ok(())
}

/// Opens the lock file without following a link and without blocking on
/// a FIFO, read-write if it may (to note the holder), and checks it is a
/// regular file.
fn open_lock(path: &Path) -> Result<File, TokenError> {
    let err = |source| TokenError::Open {
        path: path.to_path_buf(),
        source,
    };
    let flags = nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC;
    let rw = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o666)
        .custom_flags(flags)
        .open(path);
    let file = match rw {
        Ok(f) => {
            // Writable by every user's runs, whatever the umask (only its
            // owner can change that, and only in a sticky directory).
            if let Ok(m) = f.metadata() {
                if m.uid() == my_uid() && m.mode() & 0o666 != 0o666 {
                    f.set_permissions(std::fs::Permissions::from_mode(0o666))
                        .map_err(err)?;
                }
            }
            f
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(path)
            .map_err(err)?,
        Err(e) => return Err(err(e)),
    };
    let m = file.metadata().map_err(err)?;
    if !m.file_type().is_file() {
        return Err(err(std::io::Error::other("not a regular file")));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(mode: u32, owner: u32) -> DirFacts {
        DirFacts {
            is_dir: true,
            is_symlink: false,
            owner,
            mode: 0o040000 | mode,
            me: 1000,
        }
    }

    #[test]
    fn only_own_or_roots_sticky_directories_hold_the_token() {
        assert!(judge_dir(&facts(0o1777, 0)).is_ok());
        assert!(judge_dir(&facts(0o1777, 1000)).is_ok());
        assert!(judge_dir(&facts(0o755, 1000)).is_ok());
        let e = judge_dir(&facts(0o777, 0)).unwrap_err();
        assert!(e.contains("without the sticky bit (mode 777)"), "{e}");
        let e = judge_dir(&facts(0o1777, 1001)).unwrap_err();
        assert!(e.contains("uid 1001"), "{e}");
        let link = DirFacts {
            is_symlink: true,
            ..facts(0o1777, 0)
        };
        assert!(judge_dir(&link).unwrap_err().contains("symbolic link"));
        let file = DirFacts {
            is_dir: false,
            ..facts(0o644, 1000)
        };
        assert!(judge_dir(&file).unwrap_err().contains("not a directory"));
    }

    #[test]
    fn holder_is_read_from_proc_locks() {
        let locks = "1: POSIX  ADVISORY  WRITE 11 fd:01:77 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4242 fd:01:5678 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 4343 fd:01:5678 0 EOF\n";
        assert_eq!(flock_holder(locks, 5678), Some(4242));
        assert_eq!(flock_holder(locks, 77), None);
        assert_eq!(flock_holder(locks, 9), None);
    }

    #[test]
    fn holder_description_trusts_the_note_only_for_the_same_pid() {
        let note = "pid 4242 since 2026-12-01T09:00:00Z\n";
        assert!(
            describe_holder(Some(4242), note).starts_with("held by pid 4242")
                && describe_holder(Some(4242), note).ends_with("since 2026-12-01T09:00:00Z")
        );
        assert!(!describe_holder(Some(7), note).contains("since"));
        assert!(describe_holder(None, note).starts_with("held by pid 4242"));
        assert_eq!(
            describe_holder(None, ""),
            "held by a process that left no note"
        );
    }

    #[test]
    fn a_link_in_place_of_the_lock_file_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(LOCK_FILE)).unwrap();
        let e = HostToken::in_dir(dir.path()).open().unwrap_err();
        assert!(e.to_string().contains("cannot open the host token"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // Nor a FIFO (opening one read-only would block).
        let dir2 = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(
            &dir2.path().join(LOCK_FILE),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let e = HostToken::in_dir(dir2.path()).open().unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn a_missing_directory_is_made_sticky_and_a_linked_one_refused() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("rt");
        let f = HostToken::in_dir(&dir).open().unwrap();
        let m = std::fs::symlink_metadata(&dir).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o1777);
        assert_eq!(f.metadata().unwrap().mode() & 0o777, 0o666);
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = HostToken::in_dir(&link).open().unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }

    /// Another process (util-linux `flock`, holding the file as any other
    /// run would) holds the token: a waiter names it.
    #[test]
    fn a_wait_on_another_process_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let token = HostToken::in_dir(dir.path());
        let mut file = token.open().unwrap();
        // -o: the lock is flock's own, not its sleep's, and goes with it.
        // A group of its own, killed whole: a kill of flock alone left its
        // sleep holding the test's output for 30 s (nextest: "leaky").
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("flock")
            .arg("-o")
            .arg(token.path())
            .args(["sleep", "30"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .expect("flock (util-linux) runs");
        let ino = file.metadata().unwrap().ino();
        let start = Instant::now();
        while flock_holder(&std::fs::read_to_string("/proc/locks").unwrap(), ino).is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "flock never took it"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let who = who_holds(&mut file);
        nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        child.wait().unwrap();
        assert_eq!(who, Some(format!("held by pid {} (flock)", child.id())));
        // Our own hold is not news.
        let _held = token.acquire(&AtomicBool::new(false)).unwrap();
        assert_eq!(who_holds(&mut token.open().unwrap()), None);
    }

    #[test]
    fn the_holder_leaves_a_note_and_proc_locks_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let token = HostToken::in_dir(dir.path());
        let _held = token.acquire(&AtomicBool::new(false)).unwrap();
        let note = std::fs::read_to_string(token.path()).unwrap();
        assert!(
            note.starts_with(&format!("pid {} since 20", std::process::id())),
            "{note}"
        );
        let ino = std::fs::metadata(token.path()).unwrap().ino();
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        assert_eq!(flock_holder(&locks, ino), Some(std::process::id()));
    }
}
