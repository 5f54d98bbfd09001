//! Seeding a git tree's build slot from a built tarball slot.
//!
//! A git tree committed from a released source (a kernel engineer's clone of
//! 6.1.y, the bisect's history of Debian's 6.1) holds mostly the same files
//! as the tarball slot of the same arch and HZ that the cache already
//! built. Its first build need not be cold: the tarball slot's tree,
//! objects and all, is copied with its times kept, then brought to the
//! commit by git itself (a private index over the copy: every file whose
//! content differs from the commit, or is missing, is written from the
//! repository's objects, and the tarball's own files that the commit does
//! not have are removed). Make then recompiles what depends on the files
//! that changed, as in any incremental step.
//!
//! What makes it safe: the copy is compared by content with the commit (not
//! by name or time), so the tree that is built is exactly the commit's
//! whatever the seed was; the tarball's file list is recorded when it is
//! unpacked (`.lazyinit-files`), so no source file of the tarball survives
//! that the commit lacks; a slot without that list is never a seed. The
//! user's repository is only read: the index lives in the slot.

use std::path::{Path, PathBuf};

use lazyinit_core::git::nul_list;
use lazyinit_core::{Arch, Hz};

use crate::error::KernelError;

/// In a tarball's unpacked tree: the names of its own files (NUL-separated),
/// recorded before anything is built in it.
pub const FILES_MARKER: &str = ".lazyinit-files";

/// Writes the list of every file and link under `tree` (relative names) to
/// `tree/.lazyinit-files`. Called on a fresh unpack, when every file there
/// is the source's own.
pub fn record_files(tree: &Path) -> Result<(), KernelError> {
    let mut names = Vec::new();
    walk(tree, Path::new(""), &mut names).map_err(|e| KernelError::io(tree, e))?;
    names.sort();
    let mut out = Vec::with_capacity(names.len() * 32);
    for n in names {
        out.extend_from_slice(n.as_bytes());
        out.push(0);
    }
    let p = tree.join(FILES_MARKER);
    std::fs::write(&p, out).map_err(|e| KernelError::io(&p, e))
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for e in std::fs::read_dir(root.join(rel))? {
        let e = e?;
        let name = rel.join(e.file_name());
        let t = e.file_type()?;
        if t.is_dir() {
            walk(root, &name, out)?;
        } else {
            out.push(name.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// The `VERSION`, `PATCHLEVEL` and `SUBLEVEL` lines of a tree's Makefile.
fn makefile_version(tree: &Path) -> Option<String> {
    let text = std::fs::read_to_string(tree.join("Makefile")).ok()?;
    let v: Vec<&str> = text
        .lines()
        .take(8)
        .filter(|l| {
            l.starts_with("VERSION") || l.starts_with("PATCHLEVEL") || l.starts_with("SUBLEVEL")
        })
        .collect();
    (v.len() == 3).then(|| v.join("\n"))
}

/// A built tarball slot of the same arch, HZ and base config as `slot`
/// whose release matches the git tree at `root` (same Makefile version), or
/// None. Slots are named `<source>-<arch>-hz<HZ><cfg>` (cache::slot_dir).
pub fn find(slot: &Path, arch: Arch, hz: Hz, root: &Path) -> Option<PathBuf> {
    let work = slot.parent()?;
    let this = slot.file_name()?.to_string_lossy().into_owned();
    let cfg = this
        .rsplit_once(&format!("-{arch}-hz{hz}"))
        .map(|(_, c)| c.to_string())?;
    let suffix = format!("-{arch}-hz{hz}{cfg}");
    let want = makefile_version(root)?;
    let mut found: Vec<PathBuf> = std::fs::read_dir(work)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            n != this && n.ends_with(&suffix)
        })
        .filter(|p| {
            let tree = p.join("linux");
            tree.join(FILES_MARKER).is_file()
                && std::fs::read_to_string(tree.join(".lazyinit-source"))
                    .is_ok_and(|m| m.starts_with("sha256:"))
                && makefile_version(&tree).as_deref() == Some(want.as_str())
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

/// The names the tarball had that the commit's index does not: to remove.
pub fn only_in_seed(seed_files: &[String], commit_files: &[String]) -> Vec<String> {
    let keep: std::collections::HashSet<&str> = commit_files.iter().map(|s| s.as_str()).collect();
    seed_files
        .iter()
        .filter(|n| n.as_str() != FILES_MARKER && !keep.contains(n.as_str()))
        .cloned()
        .collect()
}

/// Brings the copy `tree` to `commit`'s content through a private index
/// (`lazyinit_core::git::clone::to_commit`: writes what differs or is
/// missing), then removes the seed's own files the commit lacks. Returns
/// (written, removed).
pub fn to_commit(
    root: &Path,
    tree: &Path,
    index: &Path,
    commit: &str,
) -> Result<(usize, usize), KernelError> {
    let (written, commit_files) = lazyinit_core::git::clone::to_commit(root, tree, index, commit)?;
    let seed_files =
        std::fs::read(tree.join(FILES_MARKER)).map_err(|e| KernelError::io(tree, e))?;
    let gone = only_in_seed(&nul_list(&seed_files), &commit_files);
    for n in &gone {
        let p = tree.join(n);
        if std::fs::symlink_metadata(&p).is_ok() {
            std::fs::remove_file(&p).map_err(|e| KernelError::io(&p, e))?;
        }
    }
    Ok((written, gone.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    use lazyinit_core::testing::sh;

    #[test]
    fn the_file_list_holds_every_file_and_link() {
        let t = tempfile::tempdir().unwrap();
        sh(
            t.path(),
            "mkdir -p a/b && echo 1 > a/b/c && echo 2 > d && ln -s d e",
        );
        record_files(t.path()).unwrap();
        let names = nul_list(&std::fs::read(t.path().join(FILES_MARKER)).unwrap());
        assert_eq!(names, ["a/b/c", "d", "e"]);
    }

    #[test]
    fn a_seed_matches_arch_hz_config_and_release() {
        let cache = tempfile::tempdir().unwrap();
        let work = cache.path().join("work");
        let repo = cache.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        let mk = "VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 5\nEXTRAVERSION =\n";
        std::fs::write(repo.join("Makefile"), mk).unwrap();
        let slot = |name: &str, version: &str, listed: bool| {
            let tree = work.join(name).join("linux");
            std::fs::create_dir_all(&tree).unwrap();
            std::fs::write(tree.join("Makefile"), version).unwrap();
            std::fs::write(tree.join(".lazyinit-source"), "sha256:ab\n").unwrap();
            if listed {
                record_files(&tree).unwrap();
            }
        };
        slot("debian-6.1-arm64-hz250", mk, true);
        slot("debian-6.1-x86_64-hz100", mk, true);
        slot(
            "debian-6.12-arm64-hz100",
            &mk.replace("PATCHLEVEL = 1", "PATCHLEVEL = 12"),
            true,
        );
        slot("old-arm64-hz100", mk, false);
        let this = work.join("path-linux-0011aabb-arm64-hz100");
        let hz = Hz::new(100).unwrap();
        assert_eq!(find(&this, Arch::Arm64, hz, &repo), None);
        slot("debian-6.1-arm64-hz100", mk, true);
        assert_eq!(
            find(&this, Arch::Arm64, hz, &repo),
            Some(work.join("debian-6.1-arm64-hz100"))
        );
        // Another base config is another slot family.
        let cfg = work.join("path-linux-0011aabb-arm64-hz100-cfg12345678");
        assert_eq!(find(&cfg, Arch::Arm64, hz, &repo), None);
    }

    #[test]
    fn a_seeded_copy_is_the_commit_by_content_with_its_objects_kept() {
        let t = tempfile::tempdir().unwrap();
        // The tarball as unpacked, then built in place.
        let tree = t.path().join("seed");
        std::fs::create_dir_all(tree.join("fs")).unwrap();
        sh(
            &tree,
            "printf 'same\\n' > fs/same.c && printf 'old\\n' > fs/changed.c \
             && printf 'tarball only\\n' > fs/gone.c && printf 'VERSION = 6\\n' > Makefile",
        );
        record_files(&tree).unwrap();
        sh(
            &tree,
            "printf obj > fs/same.o && touch -d '2020-01-01' fs/same.c fs/same.o",
        );
        // The repository: the same source, one file changed, one removed,
        // one added.
        let repo = t.path().join("repo");
        std::fs::create_dir_all(repo.join("fs")).unwrap();
        sh(
            &repo,
            "printf 'same\\n' > fs/same.c && printf 'new\\n' > fs/changed.c \
             && printf 'added\\n' > fs/added.c && printf 'VERSION = 6\\n' > Makefile \
             && git init -q && git add -A && git commit -q -m c",
        );
        let commit = lazyinit_core::git::resolve(&repo, "HEAD").unwrap();
        let before = std::fs::metadata(tree.join("fs/same.c"))
            .unwrap()
            .modified()
            .unwrap();
        let (written, removed) =
            to_commit(&repo, &tree, &t.path().join("seed.index"), &commit).unwrap();
        assert_eq!((written, removed), (2, 1));
        let read = |n: &str| std::fs::read_to_string(tree.join(n)).ok();
        assert_eq!(read("fs/changed.c").as_deref(), Some("new\n"));
        assert_eq!(read("fs/added.c").as_deref(), Some("added\n"));
        assert_eq!(read("fs/gone.c"), None);
        // What did not change keeps its time, and the objects stay.
        let after = std::fs::metadata(tree.join("fs/same.c"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(before, after);
        assert_eq!(read("fs/same.o").as_deref(), Some("obj"));
        // The repository was only read: no index of its own was written.
        assert!(!repo.join(".git/index.lock").exists());
        assert!(!t.path().join("seed.index").exists());
    }

    #[test]
    fn only_the_tarballs_own_files_missing_from_the_commit_go() {
        let seed: Vec<String> = ["a", "b", "c", FILES_MARKER].map(String::from).to_vec();
        let commit: Vec<String> = ["a", "c", "d"].map(String::from).to_vec();
        assert_eq!(only_in_seed(&seed, &commit), ["b"]);
    }
}
