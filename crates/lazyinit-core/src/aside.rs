//! Building a cache entry aside and renaming it in: the harness's one way
//! to publish a folder that other processes may be reading or building at
//! the same time (kernel builds, guest images, the virtual clock's QEMU,
//! the SSH keys).
//!
//! The entry is built in a temporary folder beside its place (same parent,
//! so one `rename(2)` moves it), which goes away with the [`Aside`] unless
//! it is published: a failed or interrupted build leaves nothing behind
//! but, after a kill, a dot-named folder (`.<prefix>…`) that listings skip.
//! Publishing never leaves a moment with no entry: a free place takes ours
//! in one rename; a complete entry already there stays (the first one
//! wins, ours is dropped); an entry the caller does not want (damaged, or a
//! forced rebuild) is exchanged with ours in one `renameat2(RENAME_EXCHANGE)`
//! and removed from where ours was.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What [`Aside::publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Ours moved into a free place.
    Ours,
    /// An entry the caller keeps was there first: ours was dropped.
    Kept,
    /// An entry the caller does not keep was exchanged with ours and removed.
    Replaced,
}

/// A temporary folder beside a cache entry's place, removed on drop unless
/// published.
#[derive(Debug)]
pub struct Aside {
    dir: tempfile::TempDir,
    dest: PathBuf,
}

impl Aside {
    /// An empty folder beside `dest`, named `.<prefix>` and a random
    /// suffix (a `prefix` of its own lets a builder find a killed one's
    /// leftovers); `dest`'s parent is made if missing.
    pub fn new(dest: &Path, prefix: &str) -> io::Result<Aside> {
        Aside::with_mode(dest, prefix, 0o755)
    }

    /// [`Aside::new`] with the folder's permissions (0700: private keys).
    pub fn with_mode(dest: &Path, prefix: &str, mode: u32) -> io::Result<Aside> {
        let parent = dest.parent().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "a cache entry needs a parent")
        })?;
        std::fs::create_dir_all(parent)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!(".{prefix}"))
            .permissions(std::fs::Permissions::from_mode(mode))
            .tempdir_in(parent)?;
        Ok(Aside {
            dir,
            dest: dest.to_path_buf(),
        })
    }

    /// Where to build.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The entry's place.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Moves the folder into its place. When an entry is already there,
    /// `keep(dest)` says whether it stays (complete: the first one wins)
    /// or is replaced by ours in one exchange. An error leaves the place
    /// as it was and ours is removed.
    pub fn publish(self, keep: impl Fn(&Path) -> bool) -> io::Result<Published> {
        let (tmp, dest) = (self.dir.path(), self.dest.as_path());
        // A racer may remove or replace the entry between two steps: each
        // step is tried again from the start, a few times.
        let mut last = None;
        for _ in 0..3 {
            match std::fs::rename(tmp, dest) {
                Ok(()) => {
                    // Ours is the entry now: nothing left to remove.
                    let _ = self.dir.keep();
                    return Ok(Published::Ours);
                }
                Err(e) if occupied(&e) => {}
                Err(e) => return Err(e),
            }
            if keep(dest) {
                return Ok(Published::Kept);
            }
            match exchange(tmp, dest) {
                // The old entry is where ours was: removed with `self.dir`.
                Ok(()) => return Ok(Published::Replaced),
                // Gone since the rename: try the rename again.
                Err(e) if e.kind() == io::ErrorKind::NotFound => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("the cache entry kept changing")))
    }
}

/// Whether a rename failed because a non-empty folder holds the place.
fn occupied(e: &io::Error) -> bool {
    use nix::libc::{EEXIST, ENOTEMPTY};
    matches!(e.raw_os_error(), Some(ENOTEMPTY | EEXIST))
}

/// Swaps `a` and `b` in one step (both must exist).
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use nix::fcntl::{renameat2, RenameFlags};
    renameat2(None, a, None, b, RenameFlags::RENAME_EXCHANGE).map_err(io::Error::from)
}

/// Whether a folder entry's name is one of an [`Aside`]'s (dot-named):
/// listings of a cache skip them.
pub fn is_aside(name: &std::ffi::OsStr) -> bool {
    name.to_string_lossy().starts_with('.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Barrier};

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A complete entry: its `done` file, written last.
    fn complete(dir: &Path) -> bool {
        dir.join("done").is_file()
    }

    fn build(a: &Aside, who: &str) {
        std::fs::write(a.path().join("who"), who).unwrap();
        std::fs::write(a.path().join("done"), "").unwrap();
    }

    #[test]
    fn two_racers_one_entry_the_first_ones() {
        for _ in 0..20 {
            let d = tempfile::tempdir().unwrap();
            let dest = d.path().join("cache/entry");
            let start = Arc::new(Barrier::new(2));
            let racers: Vec<_> = ["a", "b"]
                .into_iter()
                .map(|who| {
                    let (dest, start) = (dest.clone(), start.clone());
                    std::thread::spawn(move || {
                        let a = Aside::new(&dest, "tmp-entry-").unwrap();
                        build(&a, who);
                        start.wait();
                        (who, a.publish(complete).unwrap())
                    })
                })
                .collect();
            let got: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
            let ours: Vec<_> = got.iter().filter(|(_, p)| *p == Published::Ours).collect();
            assert_eq!(ours.len(), 1, "{got:?}");
            assert!(got.iter().any(|(_, p)| *p == Published::Kept), "{got:?}");
            let who = std::fs::read_to_string(dest.join("who")).unwrap();
            assert_eq!(who, ours[0].0);
            // Nothing else beside the entry: the loser's folder is gone.
            assert_eq!(names(&d.path().join("cache")), ["entry"]);
        }
    }

    #[test]
    fn a_complete_entry_stays_and_an_incomplete_one_is_replaced() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("entry");
        std::fs::create_dir(&dest).unwrap();
        std::fs::write(dest.join("who"), "first").unwrap();
        std::fs::write(dest.join("done"), "").unwrap();
        let a = Aside::new(&dest, "tmp-").unwrap();
        build(&a, "second");
        assert_eq!(a.publish(complete).unwrap(), Published::Kept);
        assert_eq!(std::fs::read_to_string(dest.join("who")).unwrap(), "first");
        assert_eq!(names(d.path()), ["entry"]);

        // Damaged (no `done`): exchanged, and the old one removed.
        std::fs::remove_file(dest.join("done")).unwrap();
        let a = Aside::new(&dest, "tmp-").unwrap();
        build(&a, "third");
        assert_eq!(a.publish(complete).unwrap(), Published::Replaced);
        assert_eq!(std::fs::read_to_string(dest.join("who")).unwrap(), "third");
        assert_eq!(names(d.path()), ["entry"]);

        // A forced rebuild replaces even a complete one.
        let a = Aside::new(&dest, "tmp-").unwrap();
        build(&a, "fourth");
        assert_eq!(a.publish(|_| false).unwrap(), Published::Replaced);
        assert_eq!(std::fs::read_to_string(dest.join("who")).unwrap(), "fourth");
    }

    #[test]
    fn a_replaced_entry_is_never_missing() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("entry");
        let a = Aside::new(&dest, "tmp-").unwrap();
        build(&a, "0");
        a.publish(complete).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (dest, stop) = (dest.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut missing = 0;
                while !stop.load(Ordering::Relaxed) {
                    if !dest.join("who").is_file() {
                        missing += 1;
                    }
                }
                missing
            })
        };
        for i in 1..200 {
            let a = Aside::new(&dest, "tmp-").unwrap();
            build(&a, &i.to_string());
            assert_eq!(a.publish(|_| false).unwrap(), Published::Replaced);
        }
        stop.store(true, Ordering::Relaxed);
        assert_eq!(reader.join().unwrap(), 0, "a reader found no entry");
        assert_eq!(std::fs::read_to_string(dest.join("who")).unwrap(), "199");
    }

    #[test]
    fn a_failed_build_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("cache/entry");
        let failing = || -> io::Result<()> {
            let a = Aside::new(&dest, "tmp-entry-")?;
            std::fs::write(a.path().join("half"), "")?;
            Err(io::Error::other("the build failed"))?;
            a.publish(complete).map(drop)
        };
        assert!(failing().is_err());
        assert!(names(&d.path().join("cache")).is_empty());
        assert!(!dest.exists());
    }

    #[test]
    fn a_private_aside_is_0700_and_dot_named() {
        let d = tempfile::tempdir().unwrap();
        let a = Aside::with_mode(&d.path().join("ssh"), "ssh.tmp-", 0o700).unwrap();
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(is_aside(a.path().file_name().unwrap()));
        assert!(a
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".ssh.tmp-"));
        assert!(!is_aside(std::ffi::OsStr::new("entry")));
    }
}
