//! Keys made for one run, in a private folder under a base directory that
//! goes (private keys included) when the run ends. For a cloud run: the
//! host key's private half travels in every instance's user data, so it
//! must not be one key for every instance forever.
//!
//! The run holds an exclusive `flock` on `<folder>/.owner` for its whole
//! life. A run that ends any way but dying goes with its folder (drop, or
//! [`RunKeys::remove_now`] before `process::exit`); one killed outright
//! (SIGKILL, OOM, power) leaves it behind with the lock released, and the
//! next run or `cleanup` sweeps it ([`RunKeys::sweep_stale`]).

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::error::SshError;
use crate::keys::{create_dir_private, Keys};

/// The lock file a live run holds in its key folder.
const OWNER: &str = ".owner";

#[derive(Debug)]
pub struct RunKeys {
    dir: tempfile::TempDir,
    _held: Flock<File>,
    pub keys: Keys,
}

impl RunKeys {
    /// A new folder `<base>/<prefix>XXXXXX` (0700), held, with new keys.
    pub fn create(base: &Path, prefix: &str) -> Result<RunKeys, SshError> {
        create_dir_private(base)?;
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in(base)
            .map_err(|source| SshError::KeyFile {
                action: "create a run's key folder in",
                path: base.to_path_buf(),
                source,
            })?;
        let held = hold(&dir.path().join(OWNER)).map_err(|source| SshError::KeyFile {
            action: "lock the run's key folder",
            path: dir.path().to_path_buf(),
            source,
        })?;
        let keys = Keys::load_or_create(dir.path())?;
        Ok(RunKeys {
            dir,
            _held: held,
            keys,
        })
    }

    /// The run's state folder: its keys, and whatever else is keyed with
    /// them (initramfs copies).
    pub fn state_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Removes the folder at once, for a path that will not run drops
    /// (`process::exit`).
    pub fn remove_now(dir: &Path) -> std::io::Result<()> {
        fs::remove_dir_all(dir)
    }

    /// Removes the folders `<base>/<prefix>*` no live process holds (their
    /// run was killed), and says which. A folder without its lock file is
    /// one being made right now, or not ours: left alone.
    pub fn sweep_stale(base: &Path, prefix: &str) -> Result<Vec<PathBuf>, SshError> {
        let err = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| SshError::KeyFile {
                action,
                path,
                source,
            }
        };
        let entries = match fs::read_dir(base) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(err("list run key folders in", base)(e)),
        };
        let mut removed = Vec::new();
        for entry in entries {
            let entry = entry.map_err(err("list run key folders in", base))?;
            let path = entry.path();
            let ours = entry.file_name().to_string_lossy().starts_with(prefix);
            // A link is never followed into: only real folders are ours.
            if !ours || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(lock) = open_nofollow(&path.join(OWNER)) else {
                continue;
            };
            if let Ok(held) = Flock::lock(lock, FlockArg::LockExclusiveNonblock) {
                fs::remove_dir_all(&path).map_err(err("remove the stale key folder", &path))?;
                drop(held);
                removed.push(path);
            }
        }
        Ok(removed)
    }
}

fn open_nofollow(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
}

fn hold(path: &Path) -> std::io::Result<Flock<File>> {
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)?;
    Flock::lock(f, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| e.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the real ssh-keygen and dropbearkey: each run has a host key of
    /// its own, and dropping the run's keys removes them.
    #[test]
    fn each_run_gets_its_own_keys_gone_with_it() {
        let base = tempfile::tempdir().unwrap();
        let a = RunKeys::create(base.path(), "run-").unwrap();
        let b = RunKeys::create(base.path(), "run-").unwrap();
        assert_ne!(a.keys.host_public, b.keys.host_public);
        assert_ne!(a.keys.client_public, b.keys.client_public);
        assert!(a.keys.host_private.starts_with(a.state_dir()));
        let (dir, private) = (a.state_dir().to_path_buf(), a.keys.host_private.clone());
        assert!(private.exists());
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "the run's key folder is private");
        drop(a);
        assert!(
            !dir.exists() && !private.exists(),
            "the run's keys outlived it"
        );
        assert!(b.keys.host_private.exists());
    }

    /// A live run's folder is never swept; a dead run's (its lock released,
    /// as the kernel does when a process dies) is, and nothing else is.
    #[test]
    fn only_folders_of_dead_runs_are_swept() {
        let base = tempfile::tempdir().unwrap();
        let live = RunKeys::create(base.path(), "ec2-run-").unwrap();
        // A killed run: its folder as it made it, its lock gone with it.
        let dead = base.path().join("ec2-run-dead");
        fs::create_dir(&dead).unwrap();
        File::create(dead.join(OWNER)).unwrap();
        fs::write(dead.join("client_ed25519"), "private").unwrap();
        // Not ours: another prefix, a folder without a lock file, a link.
        let other = base.path().join("qemu-run-x");
        fs::create_dir(&other).unwrap();
        File::create(other.join(OWNER)).unwrap();
        let making = base.path().join("ec2-run-making");
        fs::create_dir(&making).unwrap();
        let outside = tempfile::tempdir().unwrap();
        File::create(outside.path().join(OWNER)).unwrap();
        std::os::unix::fs::symlink(outside.path(), base.path().join("ec2-run-link")).unwrap();

        let removed = RunKeys::sweep_stale(base.path(), "ec2-run-").unwrap();
        assert_eq!(removed, vec![dead.clone()]);
        assert!(!dead.exists());
        assert!(
            live.keys.client_private.exists(),
            "a live run's keys were swept"
        );
        assert!(other.exists() && making.exists() && outside.path().join(OWNER).exists());
        // A base that is not there has nothing stale; one unreadable says so.
        assert!(RunKeys::sweep_stale(&base.path().join("none"), "x")
            .unwrap()
            .is_empty());
        let file = base.path().join("a-file");
        File::create(&file).unwrap();
        assert!(RunKeys::sweep_stale(&file, "x").is_err());
    }
}
