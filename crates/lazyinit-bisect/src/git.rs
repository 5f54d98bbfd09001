//! The git a bisection needs, read-only on the user's repository: the
//! commits of the range, their subjects and files, and a private linked
//! worktree (`git worktree add --detach`) where steps are checked out, so
//! the user's HEAD, index and working files are never touched.

use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// A revision that does not name a commit, a range that is not one.
    #[error("{0}")]
    BadInput(String),
    #[error("{what} failed: {detail}")]
    Failed { what: String, detail: String },
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C").arg(dir).env("GIT_OPTIONAL_LOCKS", "0");
    c
}

fn run(cmd: &mut Command, what: &str) -> Result<String, GitError> {
    let out = cmd.output().map_err(|e| GitError::Failed {
        what: what.into(),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(GitError::Failed {
            what: what.into(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
}

/// The full hash of a revision, or bad input naming it.
pub fn resolve(repo: &Path, rev: &str) -> Result<String, GitError> {
    run(
        git(repo).args([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ]),
        "git rev-parse",
    )
    .map_err(|_| {
        GitError::BadInput(format!(
            "`{rev}` is not a commit of {}: give a revision `git log` shows there",
            repo.display()
        ))
    })
}

/// `good`, then every commit on bad's first-parent line after it, oldest
/// first, ending with `bad`. Refused unless good is an ancestor of bad.
pub fn range(repo: &Path, good: &str, bad: &str) -> Result<Vec<String>, GitError> {
    let ancestor = git(repo)
        .args(["merge-base", "--is-ancestor", good, bad])
        .status()
        .map_err(|e| GitError::Failed {
            what: "git merge-base".into(),
            detail: e.to_string(),
        })?
        .success();
    if !ancestor || good == bad {
        return Err(GitError::BadInput(format!(
            "--good {} is not an ancestor of --bad {}: give an older good commit",
            &good[..12.min(good.len())],
            &bad[..12.min(bad.len())]
        )));
    }
    let list = run(
        git(repo).args([
            "rev-list",
            "--first-parent",
            "--reverse",
            bad,
            &format!("^{good}"),
        ]),
        "git rev-list",
    )?;
    let mut commits = vec![good.to_string()];
    commits.extend(list.lines().map(String::from));
    Ok(commits)
}

pub fn subject(repo: &Path, commit: &str) -> String {
    run(
        git(repo).args(["log", "-1", "--format=%s", commit]),
        "git log",
    )
    .unwrap_or_default()
}

/// A file's text at a commit (None when it has none there).
pub fn show(repo: &Path, commit: &str, path: &str) -> Option<String> {
    run(
        git(repo).args(["show", &format!("{commit}:{path}")]),
        "git show",
    )
    .ok()
}

/// The top of the work tree holding `dir`, and its HEAD commit.
pub fn head_of(dir: &Path) -> Result<(PathBuf, String), GitError> {
    let top = run(
        git(dir).args(["rev-parse", "--show-toplevel"]),
        "git rev-parse",
    )
    .map_err(|_| GitError::BadInput(format!("{} is not in a git work tree", dir.display())))?;
    let head = resolve(dir, "HEAD")?;
    Ok((PathBuf::from(top), head))
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
/// has checked out: its `origin` remote's URL (else its first remote's),
/// normalized ([`normalize_remote`]); without a remote, `root:<commit>`,
/// its first root commit, which every clone of its history shares. A
/// linked worktree (a bisect's) shares its repository's remotes, so it
/// gets the repository's identity.
pub fn tree_identity(dir: &Path) -> Result<String, GitError> {
    let remotes = run(git(dir).arg("remote"), "git remote")?;
    let mut names: Vec<&str> = remotes.lines().collect();
    names.sort_by_key(|n| *n != "origin");
    if let Some(name) = names.first() {
        let url = run(
            git(dir).args(["remote", "get-url", name]),
            "git remote get-url",
        )?;
        return Ok(normalize_remote(&url));
    }
    let roots = run(
        git(dir).args(["rev-list", "--max-parents=0", "HEAD"]),
        "git rev-list",
    )?;
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

/// A private linked worktree of `repo` at `dir`, detached.
pub struct Worktree {
    pub dir: PathBuf,
}

impl Worktree {
    /// Add the worktree unless it is already there (from an earlier run).
    pub fn open(repo: &Path, dir: &Path, at: &str) -> Result<Worktree, GitError> {
        if !dir.join(".git").exists() {
            if let Some(p) = dir.parent() {
                std::fs::create_dir_all(p).map_err(|e| GitError::Failed {
                    what: format!("creating {}", p.display()),
                    detail: e.to_string(),
                })?;
            }
            // A worktree whose folder vanished is still registered.
            let _ = run(git(repo).args(["worktree", "prune"]), "git worktree prune");
            run(
                git(repo)
                    .args(["worktree", "add", "--detach", "--force"])
                    .arg(dir)
                    .arg(at),
                "git worktree add",
            )?;
        }
        Ok(Worktree {
            dir: dir.to_path_buf(),
        })
    }

    /// Check out `rev` exactly: only files that differ are rewritten (their
    /// copies in the build tree are then the only ones recompiled).
    pub fn checkout(&self, rev: &str) -> Result<(), GitError> {
        run(
            git(&self.dir).args(["checkout", "-q", "--detach", "-f", rev]),
            "git checkout",
        )?;
        run(git(&self.dir).args(["clean", "-q", "-ffdx"]), "git clean")?;
        Ok(())
    }

    /// `culprit` reverted on top of `bad`, as a commit of this worktree
    /// only (author, committer and dates fixed, so a rerun makes the same
    /// commit and finds its build cached). Err when it does not revert
    /// cleanly.
    pub fn revert_on(&self, bad: &str, culprit: &str) -> Result<String, GitError> {
        self.checkout(bad)?;
        let date = run(
            git(&self.dir).args(["log", "-1", "--format=%cI", bad]),
            "git log",
        )?;
        let r = run(
            git(&self.dir)
                .args(["revert", "--no-edit", culprit])
                .env("GIT_AUTHOR_NAME", "lazyinit-bench bisect")
                .env("GIT_AUTHOR_EMAIL", "bisect@lazyinit-bench")
                .env("GIT_COMMITTER_NAME", "lazyinit-bench bisect")
                .env("GIT_COMMITTER_EMAIL", "bisect@lazyinit-bench")
                .env("GIT_AUTHOR_DATE", &date)
                .env("GIT_COMMITTER_DATE", &date),
            "git revert",
        );
        if let Err(e) = r {
            let _ = run(
                git(&self.dir).args(["revert", "--abort"]),
                "git revert --abort",
            );
            let _ = self.checkout(bad);
            return Err(e);
        }
        resolve(&self.dir, "HEAD")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, script: &str) {
        let st = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .unwrap();
        assert!(st.success(), "{script}");
    }

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
    fn a_tree_is_named_the_same_wherever_it_lies_and_in_its_worktrees() {
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
        // linked worktree of it.
        sh(
            &a,
            "git remote add origin https://u:secret@example.org/k/linux.git",
        );
        let wt = d.path().join("cache/bisect/0123456789ab/linux");
        Worktree::open(&a, &wt, &root).unwrap();
        assert_eq!(tree_identity(&a).unwrap(), "example.org/k/linux");
        assert_eq!(tree_identity(&wt).unwrap(), "example.org/k/linux");
    }

    #[test]
    fn range_worktree_and_revert_leave_the_users_tree_alone() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        sh(&repo, "git init -q -b main && printf '/*\\n' > .gitignore && for i in 1 2 3 4 5; do echo $i > f; git add -f .gitignore f; git commit -qm c$i; done && echo local > f && echo u > untracked");
        let good = resolve(&repo, "HEAD~4").unwrap();
        let bad = resolve(&repo, "HEAD").unwrap();
        let r = range(&repo, &good, &bad).unwrap();
        assert_eq!(r.len(), 5);
        assert_eq!(
            (r[0].as_str(), r[4].as_str()),
            (good.as_str(), bad.as_str())
        );
        assert_eq!(subject(&repo, &r[2]), "c3");
        assert_eq!(show(&repo, &r[1], "f").as_deref(), Some("2"));
        assert!(matches!(
            range(&repo, &bad, &good),
            Err(GitError::BadInput(_))
        ));
        assert!(matches!(resolve(&repo, "nope"), Err(GitError::BadInput(_))));

        let wt = Worktree::open(&repo, &d.path().join("private/linux"), &good).unwrap();
        wt.checkout(&r[2]).unwrap();
        assert_eq!(std::fs::read_to_string(wt.dir.join("f")).unwrap(), "3\n");
        // Reverting c5 on c5 gives c4's text, as a new commit.
        let rev = wt.revert_on(&bad, &r[4]).unwrap();
        assert_ne!(rev, bad);
        assert_eq!(std::fs::read_to_string(wt.dir.join("f")).unwrap(), "4\n");
        // The same revert again: the same commit (its build is cached).
        assert_eq!(wt.revert_on(&bad, &r[4]).unwrap(), rev);
        // A revert that conflicts is an error, and the worktree is clean.
        assert!(wt.revert_on(&bad, &r[2]).is_err());
        // The user's HEAD, edit and untracked file are as they were.
        assert_eq!(resolve(&repo, "HEAD").unwrap(), bad);
        assert_eq!(std::fs::read_to_string(repo.join("f")).unwrap(), "local\n");
        assert!(repo.join("untracked").exists());
    }
}
