//! A kernel source that is a git work tree: its exact state (the commit,
//! plus whatever differs from it) is the source's identity, and what a build
//! copies is what git calls the tree's files (tracked and untracked, never
//! ignored ones: build outputs of an in-tree build stay behind).
//!
//! The user's repository is only read. Every git command runs with
//! `GIT_OPTIONAL_LOCKS=0`, so not even the index's stat cache is refreshed.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::KernelError;

/// What a work tree holds, relative to its commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitState {
    /// `HEAD`'s full hash.
    pub commit: String,
    /// sha256 of the differences (tracked changes and untracked files),
    /// None when the tree is exactly its commit.
    pub dirty: Option<String>,
}

impl GitState {
    /// `git:<commit>` or `git:<commit>+<16 hex of the differences>`.
    pub fn identity(&self) -> String {
        match &self.dirty {
            None => format!("git:{}", self.commit),
            Some(d) => format!("git:{}+{}", self.commit, &d[..16]),
        }
    }
}

fn git(root: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C").arg(root).env("GIT_OPTIONAL_LOCKS", "0");
    c
}

/// Runs a command of the kernel crate: its stdout, or a step error that
/// keeps what it said (`lazyinit_core::command`).
pub(crate) fn output(cmd: &mut Command, what: &str) -> Result<Vec<u8>, KernelError> {
    use lazyinit_core::command::{self, CommandError};
    command::run(cmd).map_err(|e| match e {
        CommandError::Spawn { source, .. } => KernelError::Step(format!("{what}: {source}")),
        e @ CommandError::Failed { .. } => {
            KernelError::Step(format!("{what} failed: {}", e.detail()))
        }
    })
}

/// Whether `root` is the top of a git work tree (a kernel inside a larger
/// repository is treated as a plain tree).
pub fn is_work_tree(root: &Path) -> bool {
    let Ok(out) = git(root).args(["rev-parse", "--show-toplevel"]).output() else {
        return false;
    };
    let top = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    out.status.success()
        && top.canonicalize().ok().is_some()
        && top.canonicalize().ok() == root.canonicalize().ok()
}

/// The differences' digest: the binary diff against the commit, then each
/// untracked file's name and content.
pub fn dirty_digest(diff: &[u8], untracked: &[(String, Vec<u8>)]) -> Option<String> {
    if diff.is_empty() && untracked.is_empty() {
        return None;
    }
    let mut acc = Vec::with_capacity(diff.len() + 64 * untracked.len());
    acc.extend_from_slice(b"diff\n");
    acc.extend_from_slice(diff);
    for (name, content) in untracked {
        acc.extend_from_slice(format!("\nuntracked {name} ").as_bytes());
        acc.extend_from_slice(lazyinit_core::paths::sha256_hex(content).as_bytes());
    }
    Some(lazyinit_core::paths::sha256_hex(&acc))
}

pub(crate) fn nul_list(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// Read the tree's state (a second or two on a kernel tree).
pub fn state(root: &Path) -> Result<GitState, KernelError> {
    let commit = output(
        git(root).args(["rev-parse", "--verify", "HEAD^{commit}"]),
        "git rev-parse HEAD",
    )
    .map_err(|e| {
        KernelError::BadInput(format!(
            "{} is a git work tree without a commit: {e}",
            root.display()
        ))
    })?;
    let commit = String::from_utf8_lossy(&commit).trim().to_string();
    let diff = output(
        git(root).args(["diff", "HEAD", "--binary", "--no-ext-diff", "--no-color"]),
        "git diff HEAD",
    )?;
    let mut untracked = Vec::new();
    for name in nul_list(&output(
        git(root).args(["ls-files", "-z", "--others", "--exclude-standard"]),
        "git ls-files --others",
    )?) {
        let p = root.join(&name);
        // A symlink's target, not what it points at.
        let content = match std::fs::read_link(&p) {
            Ok(t) => t.to_string_lossy().into_owned().into_bytes(),
            Err(_) => std::fs::read(&p).map_err(|e| KernelError::io(&p, e))?,
        };
        untracked.push((name, content));
    }
    Ok(GitState {
        commit,
        dirty: dirty_digest(&diff, &untracked),
    })
}

/// The tree's files as git sees them (tracked and untracked, not ignored,
/// not deleted), NUL-separated for `tar --null -T`.
pub fn file_list(root: &Path) -> Result<Vec<u8>, KernelError> {
    let all = output(
        git(root).args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ]),
        "git ls-files",
    )?;
    let mut out = Vec::with_capacity(all.len());
    for name in nul_list(&all) {
        // Deleted in the work tree but still in the index: not part of it.
        if std::fs::symlink_metadata(root.join(&name)).is_ok() {
            out.extend_from_slice(name.as_bytes());
            out.push(0);
        }
    }
    Ok(out)
}

/// The names that differ from the commit in the work tree: tracked
/// changes and untracked (not ignored) files.
pub fn dirty_names(root: &Path) -> Result<Vec<String>, KernelError> {
    let mut names = nul_list(&output(
        git(root).args(["diff", "HEAD", "--name-only", "-z", "--no-renames"]),
        "git diff --name-only HEAD",
    )?);
    names.extend(nul_list(&output(
        git(root).args(["ls-files", "-z", "--others", "--exclude-standard"]),
        "git ls-files --others",
    )?));
    Ok(names)
}

/// What to recopy into a copy of `root` taken at `from` (a commit, plus
/// `from_dirty`, the names that differed from it then) to make it a copy
/// of the tree now: every name changed between the commits, and whatever
/// was or is dirty. None when `from` is not a commit of this repository
/// (a copy of another tree: copy everything).
pub fn changed_since(
    root: &Path,
    from: &str,
    from_dirty: &[String],
) -> Result<Option<Vec<String>>, KernelError> {
    let known = git(root)
        .args(["cat-file", "-e", &format!("{from}^{{commit}}")])
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| KernelError::Step(format!("git cat-file: {e}")))?
        .success();
    if !known {
        return Ok(None);
    }
    let mut names = nul_list(&output(
        git(root).args(["diff", "--name-only", "-z", "--no-renames", from, "HEAD"]),
        "git diff --name-only",
    )?);
    names.extend(from_dirty.iter().cloned());
    names.extend(dirty_names(root)?);
    names.sort();
    names.dedup();
    Ok(Some(names))
}

/// The commit of an identity written by [`GitState::identity`]
/// (`git:<commit>[+<diff hash>]`): the project's one reader of it. None
/// for another identity, or one whose commit is not a hash (7 or more hex
/// digits).
pub fn identity_commit(identity: &str) -> Option<&str> {
    let rest = identity.strip_prefix("git:")?;
    let c = rest.split('+').next().unwrap_or(rest);
    (c.len() >= 7 && c.chars().all(|ch| ch.is_ascii_hexdigit())).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    use lazyinit_core::testing::sh;

    #[test]
    fn identity_commit_reads_only_a_hash() {
        assert_eq!(identity_commit("git:abcdef0+0123"), Some("abcdef0"));
        assert_eq!(
            identity_commit("git:0123456789abcdef"),
            Some("0123456789abcdef")
        );
        assert_eq!(identity_commit("git:abc"), None);
        assert_eq!(identity_commit("git:main"), None);
        assert_eq!(identity_commit("debian-6.1.158"), None);
    }

    #[test]
    fn changed_since_names_commits_and_both_sides_dirt() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        sh(root, "git init -q -b main && printf '/*\\n' > .gitignore && echo 1 > a && echo 1 > b && mkdir -p fs/ext4 && echo 1 > fs/ext4/super.c && git add -f .gitignore a b fs && git commit -qm one");
        let one = state(root).unwrap();
        assert_eq!(identity_commit(&one.identity()), Some(one.commit.as_str()));
        sh(
            root,
            "echo 2 > fs/ext4/super.c && git rm -q b && git commit -qam two",
        );
        // Committed changes only: the edit and the removal.
        let names = changed_since(root, &one.commit, &[]).unwrap().unwrap();
        assert_eq!(names, ["b", "fs/ext4/super.c"]);
        // What was dirty in the old copy comes back; a new edit is named.
        sh(root, "echo 3 > a");
        let names = changed_since(root, &one.commit, &["c".into()])
            .unwrap()
            .unwrap();
        assert_eq!(names, ["a", "b", "c", "fs/ext4/super.c"]);
        assert_eq!(dirty_names(root).unwrap(), ["a"]);
        // A commit this repository does not have: copy everything.
        assert_eq!(changed_since(root, &"0".repeat(40), &[]).unwrap(), None);
    }

    #[test]
    fn digest_is_none_only_for_a_clean_tree() {
        assert_eq!(dirty_digest(b"", &[]), None);
        let a = dirty_digest(b"x", &[]).unwrap();
        let b = dirty_digest(b"", &[("x".into(), b"".to_vec())]).unwrap();
        let c = dirty_digest(b"", &[("x".into(), b"1".to_vec())]).unwrap();
        assert_ne!(a, b);
        assert_ne!(b, c);
    }

    #[test]
    fn state_follows_commits_edits_and_untracked_files_but_not_ignored_ones() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        sh(root, "git init -q -b main && printf 'VERSION = 6\\n' > Makefile && printf '*.o\\n' > .gitignore && git add -A && git commit -qm one");
        assert!(is_work_tree(root));
        assert!(!is_work_tree(&root.join(".git")));
        let clean = state(root).unwrap();
        assert_eq!(clean.dirty, None);
        assert_eq!(clean.identity(), format!("git:{}", clean.commit));
        // A build output (ignored) changes nothing.
        sh(root, "echo obj > main.o");
        assert_eq!(state(root).unwrap(), clean);
        // An edit, then an untracked file: each a new identity.
        sh(root, "echo '# edit' >> Makefile");
        let edited = state(root).unwrap();
        assert_eq!(edited.commit, clean.commit);
        assert!(edited
            .identity()
            .starts_with(&format!("git:{}+", clean.commit)));
        sh(root, "echo new > new.c");
        let untracked = state(root).unwrap();
        assert_ne!(untracked, edited);
        // The list to copy: tracked and untracked, no build outputs, no
        // deleted files.
        sh(
            root,
            "git rm -q --cached .gitignore && rm .gitignore && echo '*.o' > .git/info/exclude",
        );
        let list = String::from_utf8(file_list(root).unwrap()).unwrap();
        let mut names: Vec<&str> = list.split('\0').filter(|s| !s.is_empty()).collect();
        names.sort();
        assert_eq!(names, ["Makefile", "new.c"]);
        // Committing makes it clean again, under a new commit; reading
        // never touched the index.
        let index = std::fs::metadata(root.join(".git/index"))
            .unwrap()
            .modified()
            .unwrap();
        let _ = state(root).unwrap();
        assert_eq!(
            std::fs::metadata(root.join(".git/index"))
                .unwrap()
                .modified()
                .unwrap(),
            index
        );
        sh(root, "git add -A && git commit -qm two");
        let two = state(root).unwrap();
        assert_eq!(two.dirty, None);
        assert_ne!(two.commit, clean.commit);
    }
}
