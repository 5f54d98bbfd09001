//! A git work tree as a kernel source: its exact state (the commit, plus
//! whatever differs from it) is the source's identity ([`state`]), and
//! what a build copies is what git calls the tree's files ([`file_list`]:
//! tracked and untracked, never ignored ones, so the outputs of an
//! in-tree build stay behind). The tree itself is named by its remote, or
//! its first commit, wherever it lies ([`tree_identity`]).
//!
//! The user's repository is only read.

use std::path::{Path, PathBuf};

use super::{nul_list, Git, GitError, GitIdentity};

/// Whether `root` is the top of a git work tree (a kernel inside a larger
/// repository is treated as a plain tree).
pub fn is_work_tree(root: &Path) -> bool {
    let Ok(top) = Git::in_dir(root)
        .args(["rev-parse", "--show-toplevel"])
        .text("git rev-parse --show-toplevel")
    else {
        return false;
    };
    let top = PathBuf::from(top.trim());
    top.canonicalize().ok().is_some() && top.canonicalize().ok() == root.canonicalize().ok()
}

/// The differences' digest: the binary diff against the commit, then each
/// untracked file's name and content. None when there are none.
pub fn dirty_digest(diff: &[u8], untracked: &[(String, Vec<u8>)]) -> Option<String> {
    if diff.is_empty() && untracked.is_empty() {
        return None;
    }
    let mut acc = Vec::with_capacity(diff.len() + 64 * untracked.len());
    acc.extend_from_slice(b"diff\n");
    acc.extend_from_slice(diff);
    for (name, content) in untracked {
        acc.extend_from_slice(format!("\nuntracked {name} ").as_bytes());
        acc.extend_from_slice(crate::paths::sha256_hex(content).as_bytes());
    }
    Some(crate::paths::sha256_hex(&acc))
}

/// The tree's state as its identity: `git:<commit>`, with `+<diff>` when
/// it differs from the commit (a second or two on a kernel tree).
pub fn state(root: &Path) -> Result<GitIdentity, GitError> {
    let commit = Git::in_dir(root)
        .args(["rev-parse", "--verify", "HEAD^{commit}"])
        .text("git rev-parse HEAD")
        .map_err(|e| {
            GitError::BadInput(format!(
                "{} is a git work tree without a commit: {e}",
                root.display()
            ))
        })?;
    let diff = Git::in_dir(root)
        .args(["diff", "HEAD", "--binary", "--no-ext-diff", "--no-color"])
        .run("git diff HEAD")?;
    let mut untracked = Vec::new();
    for name in nul_list(
        &Git::in_dir(root)
            .args(["ls-files", "-z", "--others", "--exclude-standard"])
            .run("git ls-files --others")?,
    ) {
        let p = root.join(&name);
        // A symlink's target, not what it points at.
        let content = match std::fs::read_link(&p) {
            Ok(t) => t.to_string_lossy().into_owned().into_bytes(),
            Err(_) => std::fs::read(&p).map_err(|source| GitError::Io { path: p, source })?,
        };
        untracked.push((name, content));
    }
    let digest = dirty_digest(&diff, &untracked);
    GitIdentity::new(commit.trim(), digest.as_deref()).map_err(|e| GitError::Failed {
        what: "git rev-parse HEAD".into(),
        detail: e.to_string(),
    })
}

/// The tree's files as git sees them (tracked and untracked, not ignored,
/// not deleted), NUL-separated for `tar --null -T`.
pub fn file_list(root: &Path) -> Result<Vec<u8>, GitError> {
    let all = Git::in_dir(root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .run("git ls-files")?;
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
pub fn dirty_names(root: &Path) -> Result<Vec<String>, GitError> {
    let mut names = nul_list(
        &Git::in_dir(root)
            .args(["diff", "HEAD", "--name-only", "-z", "--no-renames"])
            .run("git diff --name-only HEAD")?,
    );
    names.extend(nul_list(
        &Git::in_dir(root)
            .args(["ls-files", "-z", "--others", "--exclude-standard"])
            .run("git ls-files --others")?,
    ));
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
) -> Result<Option<Vec<String>>, GitError> {
    let known = Git::in_dir(root)
        .args(["cat-file", "-e", &format!("{from}^{{commit}}")])
        .succeeds("git cat-file")?;
    if !known {
        return Ok(None);
    }
    let mut names = nul_list(
        &Git::in_dir(root)
            .args(["diff", "--name-only", "-z", "--no-renames", from, "HEAD"])
            .run("git diff --name-only")?,
    );
    names.extend(from_dirty.iter().cloned());
    names.extend(dirty_names(root)?);
    names.sort();
    names.dedup();
    Ok(Some(names))
}

/// A remote's URL as a tree's identity: no scheme, no credentials, no
/// `.git` or trailing `/`, the host in lower case; `git@host:path` (scp
/// form) as `host/path`. A local path is kept as it is.
pub fn normalize_remote(url: &str) -> String {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest.to_string(),
        None => match url.split_once(':') {
            // scp form, not a Windows drive or a path.
            Some((host, path)) if !host.contains('/') && host.len() > 1 => {
                format!("{host}/{path}")
            }
            _ => return url.trim_end_matches('/').to_string(),
        },
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest.as_str(), ""));
    let host = host
        .rsplit_once('@')
        .map_or(host, |(_, h)| h)
        .to_lowercase();
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    if path.is_empty() {
        host
    } else {
        format!("{host}/{path}")
    }
}

/// What names the git tree holding `dir` wherever it lies and whatever it
/// has checked out (a row's `kernel_tree`, hashed): its `origin` remote's
/// URL (else its first remote's), normalized ([`normalize_remote`]);
/// without a remote, `root:<commit>`, its first root commit, which every
/// clone of its history shares. A bisect's private clone copies its
/// repository's remotes, so it gets the repository's identity.
pub fn tree_identity(dir: &Path) -> Result<String, GitError> {
    let remotes = Git::in_dir(dir).arg("remote").text("git remote")?;
    let mut names: Vec<&str> = remotes.lines().collect();
    names.sort_by_key(|n| *n != "origin");
    if let Some(name) = names.first() {
        let url = Git::in_dir(dir)
            .args(["remote", "get-url", name])
            .text("git remote get-url")?;
        return Ok(normalize_remote(&url));
    }
    let roots = Git::in_dir(dir)
        .args(["rev-list", "--max-parents=0", "HEAD"])
        .text("git rev-list")?;
    let mut roots: Vec<&str> = roots.lines().collect();
    roots.sort();
    match roots.first() {
        Some(r) => Ok(format!("root:{r}")),
        None => Err(GitError::BadInput(format!(
            "{} has no commit",
            dir.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::git::{resolve, Worktree};
    use crate::testing::sh;

    #[test]
    fn a_remote_is_named_without_scheme_credentials_or_dot_git() {
        for url in [
            "https://user:token@GitHub.com/torvalds/linux.git",
            "git@github.com:torvalds/linux.git",
            "ssh://git@github.com/torvalds/linux/",
            "https://github.com/torvalds/linux",
        ] {
            assert_eq!(normalize_remote(url), "github.com/torvalds/linux", "{url}");
        }
        assert_eq!(normalize_remote("/srv/git/linux/"), "/srv/git/linux");
    }

    #[test]
    fn a_tree_is_named_the_same_wherever_it_lies_and_in_its_private_clone() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::create_dir(&a).unwrap();
        sh(
            &a,
            "git init -q -b main && echo 1 > f && git add f && git commit -qm c1",
        );
        let root = resolve(&a, "HEAD").unwrap();
        assert_eq!(tree_identity(&a).unwrap(), format!("root:{root}"));
        // A clone elsewhere, a commit later (a nightly), no remote: the
        // same root commit.
        let b = d.path().join("elsewhere/b");
        std::fs::create_dir_all(&b).unwrap();
        sh(
            &b,
            &format!(
                "git clone -q {} . && git remote remove origin && echo 2 > f && git commit -qam c2",
                a.display()
            ),
        );
        assert_eq!(tree_identity(&b).unwrap(), format!("root:{root}"));
        // With a remote: its URL, in the repository and in a private
        // clone of it.
        sh(
            &a,
            "git remote add origin https://u:secret@example.org/k/linux.git",
        );
        let wt = d.path().join("cache/bisect/0123456789ab/linux");
        let _clone = Worktree::open(&a, &wt, &root).unwrap();
        assert_eq!(tree_identity(&a).unwrap(), "example.org/k/linux");
        assert_eq!(tree_identity(&wt).unwrap(), "example.org/k/linux");
    }

    #[test]
    fn changed_since_names_commits_and_both_sides_dirt() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        sh(root, "git init -q -b main && printf '/*\\n' > .gitignore && echo 1 > a && echo 1 > b && mkdir -p fs/ext4 && echo 1 > fs/ext4/super.c && git add -f .gitignore a b fs && git commit -qm one");
        let one = state(root).unwrap();
        assert!(one.is_commit());
        sh(
            root,
            "echo 2 > fs/ext4/super.c && git rm -q b && git commit -qam two",
        );
        // Committed changes only: the edit and the removal.
        let names = changed_since(root, one.commit(), &[]).unwrap().unwrap();
        assert_eq!(names, ["b", "fs/ext4/super.c"]);
        // What was dirty in the old copy comes back; a new edit is named.
        sh(root, "echo 3 > a");
        let names = changed_since(root, one.commit(), &["c".into()])
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
        let commit = resolve(root, "HEAD").unwrap();
        assert_eq!(clean.diff(), None);
        assert_eq!(clean.to_string(), format!("git:{commit}"));
        // A build output (ignored) changes nothing.
        sh(root, "echo obj > main.o");
        assert_eq!(state(root).unwrap(), clean);
        // An edit, then an untracked file: each a new identity, of the
        // same commit, with the differences' 16 digits.
        sh(root, "echo '# edit' >> Makefile");
        let edited = state(root).unwrap();
        assert_eq!(edited.commit(), commit);
        assert_eq!(edited.base(), clean);
        let text = edited.to_string();
        let diff = text.strip_prefix(&format!("git:{commit}+")).unwrap();
        assert_eq!(diff.len(), 16);
        assert!(diff.bytes().all(|b| b.is_ascii_hexdigit()));
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
        assert!(two.is_commit());
        assert_ne!(two.commit(), clean.commit());
    }
}
