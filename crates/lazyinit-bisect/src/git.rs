//! The git a bisection needs, read-only on the user's repository: the
//! commits of the range as a graph, their subjects and files, and a private
//! clone (`git clone --shared`: the user's objects are read through
//! `objects/info/alternates`, nothing is written into them) where steps are
//! checked out and reverts committed. The user's repository gains no
//! worktree entry, no object, no ref; its HEAD, index and files are never
//! touched.

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
    lazyinit_core::command::run_text(cmd)
        .map(|s| s.trim_end().to_string())
        .map_err(|e| GitError::Failed {
            what: what.into(),
            detail: e.detail(),
        })
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

/// The commits a bisection from `good` to `bad` walks, as `git bisect`
/// walks them: `good` first, then every commit that is an ancestor of
/// `bad` and not of `good` (merged side branches included), parents before
/// children, `bad` last; and each one's parents among them (indices; a
/// parent outside is an ancestor of `good`, so good). Refused unless good
/// is an ancestor of bad.
pub fn range(repo: &Path, good: &str, bad: &str) -> Result<Range, GitError> {
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
            "--topo-order",
            "--reverse",
            "--parents",
            bad,
            &format!("^{good}"),
        ]),
        "git rev-list",
    )?;
    let mut commits = vec![good.to_string()];
    let mut parents: Vec<Vec<String>> = vec![Vec::new()];
    for line in list.lines() {
        let mut words = line.split_whitespace().map(String::from);
        if let Some(c) = words.next() {
            commits.push(c);
            parents.push(words.collect());
        }
    }
    let index: std::collections::HashMap<&str, usize> = commits
        .iter()
        .enumerate()
        .map(|(i, c)| (c.as_str(), i))
        .collect();
    let within: Vec<Vec<usize>> = parents
        .iter()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| index.get(p.as_str()).copied())
                .collect()
        })
        .collect();
    // --topo-order puts bad last; a bad that is not last would be a bug.
    if commits.last().map(String::as_str) != Some(bad) {
        return Err(GitError::Failed {
            what: "git rev-list".into(),
            detail: format!("{bad} is not the last of its own range"),
        });
    }
    Ok(Range {
        graph: crate::search::Graph::new(within),
        commits,
        parents,
    })
}

/// A bisection's commits (see [`range`]).
#[derive(Debug, Clone)]
pub struct Range {
    /// Oldest first: `good`, the rest parents before children, `bad` last.
    pub commits: Vec<String>,
    /// Each commit's parents (full hashes, in or out of the range).
    pub parents: Vec<Vec<String>>,
    pub graph: crate::search::Graph,
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

/// A private clone of `repo` at `dir` (`git clone --shared`), kept in
/// the cache between runs and between `bisect-step` calls, so that a
/// step rewrites only the files its commit changed (a fresh checkout
/// would give every file of the tree a new time, and the kernel slot would
/// hash all of them again). The user's repository is only read: its
/// objects through the clone's alternates, its remotes copied (so the
/// clone is named as the repository is, [`tree_identity`]). The caller
/// holds a lock on it (one bisection of a repository at a time).
pub struct Worktree {
    pub dir: PathBuf,
}

/// The objects folder a clone at `dir` borrows, if it is a clone whose
/// HEAD resolves (one that an interrupted `git clone` left is not).
fn borrowed_objects(dir: &Path) -> Option<PathBuf> {
    let git_dir = dir.join(".git");
    let alt = std::fs::read_to_string(git_dir.join("objects/info/alternates")).ok()?;
    let line = alt.lines().next()?.trim().to_string();
    run(
        git(dir).args(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]),
        "git rev-parse",
    )
    .ok()?;
    Some(PathBuf::from(line))
}

impl Worktree {
    /// Reuse the clone at `dir` when it borrows `repo`'s objects, else
    /// clone afresh (whatever else is at `dir` is removed first); then
    /// check out `at`.
    pub fn open(repo: &Path, dir: &Path, at: &str) -> Result<Worktree, GitError> {
        let failed = |what: String| {
            move |e: std::io::Error| GitError::Failed {
                what,
                detail: e.to_string(),
            }
        };
        let objects = run(
            git(repo).args(["rev-parse", "--path-format=absolute", "--git-common-dir"]),
            "git rev-parse --git-common-dir",
        )
        .map(|d| PathBuf::from(d).join("objects"))?;
        let same = |p: &Path| match (p.canonicalize(), objects.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        let reuse = borrowed_objects(dir).is_some_and(|p| same(&p));
        if !reuse {
            if dir.exists() || dir.is_symlink() {
                std::fs::remove_dir_all(dir)
                    .map_err(failed(format!("removing {}", dir.display())))?;
            }
            if let Some(p) = dir.parent() {
                std::fs::create_dir_all(p).map_err(failed(format!("creating {}", p.display())))?;
            }
            run(
                Command::new("git")
                    .env("GIT_OPTIONAL_LOCKS", "0")
                    .args(["clone", "--quiet", "--shared", "--no-checkout", "--"])
                    .arg(repo)
                    .arg(dir),
                "git clone --shared",
            )?;
        }
        let wt = Worktree {
            dir: dir.to_path_buf(),
        };
        // The clone's remotes are the repository's, as they are now.
        let mine = run(git(&wt.dir).arg("remote"), "git remote")?;
        for name in mine.lines() {
            run(
                git(&wt.dir).args(["remote", "remove", name]),
                "git remote remove",
            )?;
        }
        let remotes = run(git(repo).arg("remote"), "git remote")?;
        for name in remotes.lines() {
            let url = run(
                git(repo).args(["remote", "get-url", name]),
                "git remote get-url",
            )?;
            run(
                git(&wt.dir).args(["remote", "add", name, &url]),
                "git remote add",
            )?;
        }
        wt.checkout(at)?;
        Ok(wt)
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
        // A merge is reverted to its first parent's side.
        let parents = run(
            git(&self.dir).args(["rev-list", "--parents", "-n", "1", culprit]),
            "git rev-list",
        )?;
        let merge = parents.split_whitespace().count() > 2;
        let date = run(
            git(&self.dir).args(["log", "-1", "--format=%cI", bad]),
            "git log",
        )?;
        let r = run(
            git(&self.dir)
                .args(["revert", "--no-edit"])
                .args(if merge { &["-m", "1"][..] } else { &[][..] })
                .arg(culprit)
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

    use lazyinit_core::testing::sh;

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
    fn range_worktree_and_revert_leave_the_users_tree_alone() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        sh(&repo, "git init -q -b main && printf '/*\\n' > .gitignore && for i in 1 2 3 4 5; do echo $i > f; git add -f .gitignore f; git commit -qm c$i; done && echo local > f && echo u > untracked");
        let good = resolve(&repo, "HEAD~4").unwrap();
        let bad = resolve(&repo, "HEAD").unwrap();
        let r = range(&repo, &good, &bad).unwrap().commits;
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
        assert_eq!(std::fs::read_to_string(wt.dir.join("f")).unwrap(), "1\n");
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
        // No worktree entry, no revert among its objects.
        assert!(!repo.join(".git/worktrees").exists());
        assert!(
            run(git(&repo).args(["cat-file", "-e", &rev]), "git cat-file").is_err(),
            "the revert is in the user's objects"
        );
        // Opened again, the clone is reused: a file its commit does not
        // change keeps its inode and time (a kernel slot recompiles
        // nothing for it), and the checkout is exact.
        let dir = wt.dir.clone();
        std::fs::write(dir.join("stray"), "x").unwrap();
        let keep = dir.join(".gitignore");
        let before = std::fs::metadata(&keep).unwrap();
        drop(wt);
        let wt = Worktree::open(&repo, &dir, &r[3]).unwrap();
        let after = std::fs::metadata(&keep).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (before.ino(), before.mtime_nsec()),
            (after.ino(), after.mtime_nsec())
        );
        assert_eq!(std::fs::read_to_string(wt.dir.join("f")).unwrap(), "4\n");
        assert!(!wt.dir.join("stray").exists());
        // A clone of another repository at that place is replaced.
        let other = d.path().join("other");
        std::fs::create_dir(&other).unwrap();
        sh(
            &other,
            "git init -q -b main && echo o > o && git add o && git commit -qm o",
        );
        let o = resolve(&other, "HEAD").unwrap();
        let wt = Worktree::open(&other, &dir, &o).unwrap();
        assert!(wt.dir.join("o").exists() && !wt.dir.join("f").exists());
        // A half-made clone (an interrupted run's) is replaced too.
        std::fs::remove_dir_all(dir.join(".git/objects/info")).unwrap();
        let wt = Worktree::open(&repo, &dir, &r[1]).unwrap();
        assert_eq!(std::fs::read_to_string(wt.dir.join("f")).unwrap(), "2\n");
    }
}
