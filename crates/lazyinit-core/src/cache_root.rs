//! Whether a cache root may be used: the harness runs what the cache
//! holds (QEMU binaries, kernels, guest images, virtual environments'
//! programs), often as root, so a cache that someone else can write is a
//! way to run their code as this user. Checked once per command, before
//! anything is read from or written to the cache:
//!
//! - the root is a real folder (not a link), and it and every folder in
//!   it down to [`DEPTH`] levels is owned by this user (or root) and
//!   writable by no one else;
//! - unless the user shares it on purpose (`LAZYINIT_CACHE_GROUP=NAME`):
//!   then a folder may be another member's and group-writable when its
//!   group is NAME, and never writable by others;
//! - the root is a cache: it holds the marker [`MARKER`], or it is not
//!   there or empty, or every entry is a name the harness makes (an older
//!   harness's cache). Anything else (a home folder, `/etc`) is refused
//!   before anything is written.
//!
//! The check only reads: a command that then refuses its input has
//! written nothing. Once the command is past its own checks and about to
//! fill the cache, [`mark`] makes the root and its marker.
//!
//! What is refused is one line naming the folder, why, where the root
//! came from (`--cache-dir` or `LAZYINIT_CACHE_DIR`) and what to do: exit 2.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::exit::{bad_input, ExitError};
use crate::writer::WriteError;

/// The file that says a folder is a cache of this harness.
pub const MARKER: &str = ".lazyinit-cache";

/// How deep under the root folders are checked: the root's own entries
/// (`kernel/`, `qemu/`), their entries (`qemu/<version>-<key>/`,
/// `kernel/work/`) and one level more (`kernel/work/<tree>/`). The work
/// trees below are the harness's own unpacking.
pub const DEPTH: usize = 3;

/// The variable that names the group a shared cache belongs to.
pub const GROUP_VAR: &str = "LAZYINIT_CACHE_GROUP";

/// The top-level names the harness (and its scripts) make in a cache: a
/// root holding only these is an older harness's cache. The harness's
/// own passing files count too: another command's write probe
/// (`.lazyinit-write-check.*`) and the marker's temporary file
/// (`..lazyinit-cache.*.tmp`), there while that command starts.
fn known_entry(name: &str) -> bool {
    if name.starts_with(".lazyinit-write-check.") || name.starts_with(&format!(".{MARKER}.")) {
        return true;
    }
    matches!(
        name,
        MARKER
            | "kernel"
            | "qemu"
            | "images"
            | "debs"
            | "bisect"
            | "bisect-ci"
            | "volumes"
            | "job-validators-bin"
            | "resolved"
    ) || name.starts_with("venv-")
}

/// Where the root came from, for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A command's `--cache-dir`.
    Flag,
    /// `LAZYINIT_CACHE_DIR`, or the default when it is unset.
    Default,
}

impl Origin {
    fn said(self, root: &Path) -> String {
        match self {
            Origin::Flag => format!("--cache-dir {}", root.display()),
            Origin::Default => match std::env::var_os("LAZYINIT_CACHE_DIR") {
                Some(_) => format!("LAZYINIT_CACHE_DIR={}", root.display()),
                None => format!("the default cache {}", root.display()),
            },
        }
    }
}

/// The cache root a command uses: its `--cache-dir`, else
/// [`crate::paths::cache_dir`], checked ([`check`]).
pub fn resolve(flag: Option<PathBuf>) -> Result<PathBuf, ExitError> {
    let (given, origin) = match flag {
        Some(d) => (d, Origin::Flag),
        None => (crate::paths::cache_dir(), Origin::Default),
    };
    // Absolute: its builds run tools from inside it (a relative one
    // would name another place from their own working folders).
    let root = std::path::absolute(&given).unwrap_or(given);
    // An output like any other first: never a run's evidence, a file,
    // or a place nothing can be made in; and never inside a results
    // folder at all, where its builds would be taken for results.
    let flag = match origin {
        Origin::Flag => "cache-dir",
        Origin::Default => "cache-dir (here LAZYINIT_CACHE_DIR or the default)",
    };
    crate::output::check_not_evidence(flag, &root).map_err(crate::exit::refused)?;
    // Trusted (a folder, not a link, no one else's) before the write
    // probe below makes anything in it.
    let group = std::env::var(GROUP_VAR).ok().filter(|g| !g.is_empty());
    check(&root, origin, group.as_deref())?;
    let real = crate::output::canonical(&root);
    if let Some(run) = real
        .ancestors()
        .find(|a| crate::RunFolder::is_results_folder(a))
    {
        return Err(bad_input(format!(
            "{}: is inside the results folder {}: keep the cache apart from results (give a folder outside it)",
            origin.said(&root),
            run.display()
        )));
    }
    crate::output::check_folder(flag, &root).map_err(crate::exit::refused)?;
    Ok(root)
}

/// Checks the cache root `root` (see the module's rules) without writing
/// anything. `group` is the group of a cache shared on purpose.
pub fn check(root: &Path, origin: Origin, group: Option<&str>) -> Result<(), ExitError> {
    let refuse = |why: String| bad_input(format!("{}: {why}", origin.said(root)));
    let gid = match group {
        None => None,
        Some(name) => match nix::unistd::Group::from_name(name) {
            Ok(Some(g)) => Some(g.gid.as_raw()),
            _ => {
                return Err(refuse(format!(
                    "{GROUP_VAR}={name} names no group of this machine: give the group that owns the shared cache, or unset it"
                )))
            }
        },
    };
    match std::fs::symlink_metadata(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(refuse(format!("cannot read it ({e})"))),
        Ok(m) if m.file_type().is_symlink() => {
            return Err(refuse(
                "is a link: give the folder it points to, if that folder is a cache".into(),
            ))
        }
        Ok(m) if !m.is_dir() => {
            return Err(refuse(
                "is not a folder: give a folder for the cache (it is made if missing)".into(),
            ))
        }
        Ok(_) => {}
    }
    check_tree(root, 0, gid).map_err(refuse)?;
    if root.join(MARKER).is_file() {
        return Ok(());
    }
    let entries: Vec<String> = std::fs::read_dir(root)
        .map_err(|e| refuse(format!("cannot list it ({e})")))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    match entries.iter().find(|n| !known_entry(n)) {
        Some(other) => Err(refuse(format!(
            "is neither empty nor a cache of this harness (no {MARKER}; it holds {other:?}): give an empty or new folder"
        ))),
        None => Ok(()),
    }
}

/// Makes the checked cache root `root` (0755, or 2775 when shared by a
/// group) and its marker, if they are not there: what a command does once
/// it is past its checks and about to fill the cache.
pub fn mark(root: &Path) -> Result<(), WriteError> {
    let marker = root.join(MARKER);
    if marker.is_file() {
        return Ok(());
    }
    let shared = std::env::var_os(GROUP_VAR).is_some_and(|g| !g.is_empty());
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| WriteError::new(parent, e))?;
    }
    match std::fs::DirBuilder::new()
        .mode(if shared { 0o2775 } else { 0o755 })
        .create(root)
    {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(WriteError::new(root, e))
        }
        _ => {}
    }
    std::fs::write(
        &marker,
        "a cache of lazyinit-bench: content-keyed builds, safe to remove\n",
    )
    .map_err(|e| WriteError::new(&marker, e))
}

/// Checks `dir` and its folders down to [`DEPTH`]; the error says which
/// folder and why.
fn check_tree(dir: &Path, depth: usize, gid: Option<u32>) -> Result<(), String> {
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    trusted(dir, &m, gid)?;
    if depth >= DEPTH {
        return Ok(());
    }
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => return Err(format!("cannot list {} ({e})", dir.display())),
    };
    for e in rd.flatten() {
        // Links are not followed: only a writer of this folder, which
        // the check above trusts, could have made one.
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            check_tree(&e.path(), depth + 1, gid)?;
        }
    }
    Ok(())
}

/// Whether one folder is this user's (or root's) and writable by no one
/// else; or, shared on purpose, of the group `gid` and not writable by
/// others.
fn trusted(dir: &Path, m: &std::fs::Metadata, gid: Option<u32>) -> Result<(), String> {
    let me = nix::unistd::geteuid().as_raw();
    let mine = m.uid() == me || m.uid() == 0;
    let mode = m.mode();
    let owner = |uid: u32| match nix::unistd::User::from_uid(uid.into()) {
        Ok(Some(u)) => u.name,
        _ => format!("uid {uid}"),
    };
    let what = format!("{:o}", mode & 0o7777);
    if mode & 0o002 != 0 {
        return Err(format!(
            "{} is writable by every user (mode {what}): anyone could put a binary there that this harness runs; make it private (chmod o-w) or give another cache",
            dir.display()
        ));
    }
    match gid {
        Some(g) if m.gid() == g => Ok(()),
        Some(_) if mine && mode & 0o020 == 0 => Ok(()),
        Some(_) => Err(format!(
            "{} is not of the shared cache's group ({GROUP_VAR}) and is {}'s (mode {what}): chgrp it to that group, or remove it",
            dir.display(),
            owner(m.uid())
        )),
        None if !mine => Err(format!(
            "{} belongs to {}, not this user: a cache others write could run their code here; give a cache of your own, or share it on purpose with {GROUP_VAR}=GROUP",
            dir.display(),
            owner(m.uid())
        )),
        None if mode & 0o020 != 0 => Err(format!(
            "{} is group-writable (mode {what}): make it private (chmod g-w), or share the cache on purpose with {GROUP_VAR}=GROUP",
            dir.display()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn err(root: &Path, group: Option<&str>) -> String {
        check(root, Origin::Flag, group).unwrap_err().to_string()
    }

    #[test]
    fn a_new_or_empty_folder_is_a_cache_once_marked_and_the_check_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let new = d.path().join("a/b/cache");
        check(&new, Origin::Flag, None).unwrap();
        assert!(!d.path().join("a").exists(), "the check writes nothing");
        mark(&new).unwrap();
        assert!(new.join(MARKER).is_file());
        let empty = d.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        check(&empty, Origin::Flag, None).unwrap();
        std::fs::write(empty.join("whatever"), "").unwrap();
        assert!(err(&empty, None).contains("neither empty nor a cache"));
        mark(&empty).unwrap();
        check(&empty, Origin::Flag, None).unwrap();
    }

    #[test]
    fn an_older_harness_cache_is_adopted_and_another_folder_refused() {
        let d = tempfile::tempdir().unwrap();
        let old = d.path().join("old");
        for sub in ["kernel/work", "qemu", "venv-moto/bin"] {
            std::fs::create_dir_all(old.join(sub)).unwrap();
        }
        check(&old, Origin::Flag, None).unwrap();
        // Another command starting on a fresh cache: its probe and the
        // marker's temporary file are there for a moment.
        let fresh = d.path().join("fresh");
        std::fs::create_dir_all(&fresh).unwrap();
        std::fs::write(fresh.join(".lazyinit-write-check.BhVhYe"), "").unwrap();
        std::fs::write(fresh.join(format!(".{MARKER}.x1Y2z3.tmp")), "").unwrap();
        check(&fresh, Origin::Flag, None).unwrap();
        let etc = d.path().join("etc");
        std::fs::create_dir_all(etc.join("ssh")).unwrap();
        std::fs::write(etc.join("passwd"), "").unwrap();
        let e = err(&etc, None);
        assert!(e.contains("neither empty nor a cache"), "{e}");
        assert!(e.starts_with("--cache-dir "), "{e}");
        assert!(!etc.join(MARKER).exists(), "nothing written");
        assert!(!etc.join("volumes").exists());
    }

    #[test]
    fn a_link_a_file_and_folders_others_can_write_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        mark(&real).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(err(&link, None).contains("is a link"));
        let file = d.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(err(&file, None).contains("is not a folder"));

        chmod(&real, 0o777);
        let e = err(&real, None);
        assert!(e.contains("writable by every user (mode 777)"), "{e}");
        chmod(&real, 0o775);
        assert!(err(&real, None).contains("group-writable"));
        chmod(&real, 0o755);
        // A folder deep in it: the QEMU's own.
        let deep = real.join("qemu/10.0.2-key");
        std::fs::create_dir_all(&deep).unwrap();
        check(&real, Origin::Flag, None).unwrap();
        chmod(&deep, 0o757);
        let e = err(&real, None);
        assert!(
            e.contains("qemu/10.0.2-key is writable by every user"),
            "{e}"
        );
        chmod(&deep, 0o755);
        check(&real, Origin::Flag, None).unwrap();
    }

    /// Another user's folder (root makes one `nobody`'s, as a shared
    /// cache of a fleet would be) is refused; with the cache shared on
    /// purpose it is taken when its group is the one named, and a folder
    /// writable by others never.
    #[test]
    fn another_users_folder_is_refused_unless_shared_by_a_named_group() {
        if !nix::unistd::geteuid().is_root() {
            panic!("this test makes folders of another user: run it as root (CI does)");
        }
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("shared");
        mark(&root).unwrap();
        let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
        let group = nix::unistd::Group::from_gid(nix::unistd::getegid())
            .unwrap()
            .unwrap();
        std::os::unix::fs::chown(&root, Some(nobody.uid.as_raw()), Some(nobody.gid.as_raw()))
            .unwrap();
        let e = err(&root, None);
        assert!(e.contains("belongs to nobody"), "{e}");
        assert!(e.contains(GROUP_VAR), "{e}");
        // Shared on purpose, by this user's group: nobody's folder of
        // another group is still refused; of the group, taken.
        assert!(err(&root, Some(&group.name)).contains("not of the shared cache's group"));
        std::os::unix::fs::chown(&root, None, Some(group.gid.as_raw())).unwrap();
        chmod(&root, 0o2775);
        check(&root, Origin::Flag, Some(&group.name)).unwrap();
        chmod(&root, 0o2777);
        assert!(err(&root, Some(&group.name)).contains("writable by every user"));
        assert!(err(&root, Some("no-such-group-here")).contains("names no group"));
    }
}
