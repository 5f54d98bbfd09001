//! Where the harness checks commits out without touching the user's
//! repository: a private clone ([`Worktree`], `git clone --shared`: the
//! user's objects are read through `objects/info/alternates`, nothing is
//! written into them) where a bisection's steps are checked out and its
//! reverts committed, and a copy of a tree brought to a commit by content
//! through a private index ([`to_commit`]). The user's repository gains
//! no worktree entry, no object, no ref; its HEAD, index and files are
//! never touched.

use std::path::{Path, PathBuf};

use super::{nul_list, Git, GitError};

/// A private clone of `repo` at `dir` (`git clone --shared`), kept in
/// the cache between runs and between `bisect-step` calls, so that a
/// step rewrites only the files its commit changed (a fresh checkout
/// would give every file of the tree a new time, and the kernel slot would
/// hash all of them again). The user's repository is only read: its
/// objects through the clone's alternates, its remotes copied (so the
/// clone is named as the repository is, [`super::tree_identity`]). The
/// caller holds a lock on it (one bisection of a repository at a time).
pub struct Worktree {
    pub dir: PathBuf,
}

/// The objects folder a clone at `dir` borrows, if it is a clone whose
/// HEAD resolves (one that an interrupted `git clone` left is not).
fn borrowed_objects(dir: &Path) -> Option<PathBuf> {
    let git_dir = dir.join(".git");
    let alt = std::fs::read_to_string(git_dir.join("objects/info/alternates")).ok()?;
    let line = alt.lines().next()?.trim().to_string();
    Git::in_dir(dir)
        .args(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
        .text("git rev-parse")
        .ok()?;
    Some(PathBuf::from(line))
}

impl Worktree {
    /// Reuse the clone at `dir` when it borrows `repo`'s objects, else
    /// clone afresh (whatever else is at `dir` is removed first); then
    /// check out `at`.
    pub fn open(repo: &Path, dir: &Path, at: &str) -> Result<Worktree, GitError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| GitError::Io { path, source }
        };
        let objects = Git::in_dir(repo)
            .args(["rev-parse", "--path-format=absolute", "--git-common-dir"])
            .text("git rev-parse --git-common-dir")
            .map(|d| PathBuf::from(d).join("objects"))?;
        let same = |p: &Path| match (p.canonicalize(), objects.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        let reuse = borrowed_objects(dir).is_some_and(|p| same(&p));
        if !reuse {
            if dir.exists() || dir.is_symlink() {
                std::fs::remove_dir_all(dir).map_err(io(dir))?;
            }
            if let Some(p) = dir.parent() {
                std::fs::create_dir_all(p).map_err(io(p))?;
            }
            Git::anywhere()
                .args(["clone", "--quiet", "--shared", "--no-checkout", "--"])
                .arg(repo)
                .arg(dir)
                .run("git clone --shared")?;
        }
        let wt = Worktree {
            dir: dir.to_path_buf(),
        };
        // The clone's remotes are the repository's, as they are now.
        let mine = Git::in_dir(&wt.dir).arg("remote").text("git remote")?;
        for name in mine.lines() {
            Git::in_dir(&wt.dir)
                .args(["remote", "remove", name])
                .run("git remote remove")?;
        }
        let remotes = Git::in_dir(repo).arg("remote").text("git remote")?;
        for name in remotes.lines() {
            let url = Git::in_dir(repo)
                .args(["remote", "get-url", name])
                .text("git remote get-url")?;
            Git::in_dir(&wt.dir)
                .args(["remote", "add", name, &url])
                .run("git remote add")?;
        }
        wt.checkout(at)?;
        Ok(wt)
    }

    /// Check out `rev` exactly: only files that differ are rewritten (their
    /// copies in the build tree are then the only ones recompiled).
    pub fn checkout(&self, rev: &str) -> Result<(), GitError> {
        Git::in_dir(&self.dir)
            .args(["checkout", "-q", "--detach", "-f", rev])
            .run("git checkout")?;
        Git::in_dir(&self.dir)
            .args(["clean", "-q", "-ffdx"])
            .run("git clean")?;
        Ok(())
    }

    /// `culprit` reverted on top of `bad`, as a commit of this worktree
    /// only (author, committer and dates fixed, so a rerun makes the same
    /// commit and finds its build cached). Err when it does not revert
    /// cleanly.
    pub fn revert_on(&self, bad: &str, culprit: &str) -> Result<String, GitError> {
        self.checkout(bad)?;
        // A merge is reverted to its first parent's side.
        let parents = Git::in_dir(&self.dir)
            .args(["rev-list", "--parents", "-n", "1", culprit])
            .text("git rev-list")?;
        let merge = parents.split_whitespace().count() > 2;
        let date = Git::in_dir(&self.dir)
            .args(["log", "-1", "--format=%cI", bad])
            .text("git log")?;
        let r = Git::in_dir(&self.dir)
            .args(["revert", "--no-edit"])
            .args(if merge { &["-m", "1"][..] } else { &[][..] })
            .arg(culprit)
            .env("GIT_AUTHOR_NAME", "lazyinit-bench bisect")
            .env("GIT_AUTHOR_EMAIL", "bisect@lazyinit-bench")
            .env("GIT_COMMITTER_NAME", "lazyinit-bench bisect")
            .env("GIT_COMMITTER_EMAIL", "bisect@lazyinit-bench")
            .env("GIT_AUTHOR_DATE", &date)
            .env("GIT_COMMITTER_DATE", &date)
            .run("git revert");
        if let Err(e) = r {
            let _ = Git::in_dir(&self.dir)
                .args(["revert", "--abort"])
                .run("git revert --abort");
            let _ = self.checkout(bad);
            return Err(e);
        }
        super::resolve(&self.dir, "HEAD")
    }
}

/// Brings `copy`, a copy of some tree (its files' times kept), to
/// `commit` of the repository at `repo` by content, through the private
/// index `index`: every file whose content differs from the commit's, or
/// is missing, is written from the repository's objects; the others keep
/// their times. Returns how many were written and the commit's file
/// names (what the copy had beyond them is the caller's to remove). The
/// repository is only read; the index is removed after.
pub fn to_commit(
    repo: &Path,
    copy: &Path,
    index: &Path,
    commit: &str,
) -> Result<(usize, Vec<String>), GitError> {
    let git_dir = Git::in_dir(repo)
        .args(["rev-parse", "--absolute-git-dir"])
        .text("git rev-parse --absolute-git-dir")?;
    let git = || Git::over(Path::new(git_dir.trim()), copy, index);
    let _ = std::fs::remove_file(index);
    git().args(["read-tree", commit]).run("git read-tree")?;
    // Exits 1 when files need updating, which is what diff-files then lists.
    let _ = git()
        .args(["update-index", "-q", "--refresh"])
        .succeeds("git update-index");
    let differ = git()
        .args(["diff-files", "--name-only", "-z", "--no-renames"])
        .run("git diff-files")?;
    let written = nul_list(&differ).len();
    if written > 0 {
        git()
            .args(["checkout-index", "-f", "-z", "--stdin"])
            .run_with_input("git checkout-index", &differ)?;
    }
    let listed = git().args(["ls-files", "-z"]).run("git ls-files")?;
    let _ = std::fs::remove_file(index);
    Ok((written, nul_list(&listed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::git::{range, resolve, show, subject};
    use crate::testing::sh;

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
            !Git::in_dir(&repo)
                .args(["cat-file", "-e", &rev])
                .succeeds("git cat-file")
                .unwrap(),
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

    #[test]
    fn a_copy_is_brought_to_the_commit_by_content_and_the_repository_only_read() {
        let t = tempfile::tempdir().unwrap();
        let copy = t.path().join("copy");
        std::fs::create_dir_all(copy.join("fs")).unwrap();
        sh(
            &copy,
            "printf 'same\\n' > fs/same.c && printf 'old\\n' > fs/changed.c \
             && printf 'extra\\n' > fs/extra.c && touch -d '2020-01-01' fs/same.c",
        );
        let repo = t.path().join("repo");
        std::fs::create_dir_all(repo.join("fs")).unwrap();
        sh(
            &repo,
            "printf 'same\\n' > fs/same.c && printf 'new\\n' > fs/changed.c \
             && printf 'added\\n' > fs/added.c && git init -q && git add -A && git commit -q -m c",
        );
        let commit = resolve(&repo, "HEAD").unwrap();
        let before = std::fs::metadata(copy.join("fs/same.c")).unwrap();
        let index = t.path().join("copy.index");
        let (written, mut files) = to_commit(&repo, &copy, &index, &commit).unwrap();
        files.sort();
        assert_eq!(written, 2);
        assert_eq!(files, ["fs/added.c", "fs/changed.c", "fs/same.c"]);
        let read = |n: &str| std::fs::read_to_string(copy.join(n)).unwrap();
        assert_eq!(
            (read("fs/changed.c"), read("fs/added.c")),
            ("new\n".into(), "added\n".into())
        );
        // What the commit does not have is the caller's to remove.
        assert_eq!(read("fs/extra.c"), "extra\n");
        let after = std::fs::metadata(copy.join("fs/same.c")).unwrap();
        assert_eq!(before.modified().unwrap(), after.modified().unwrap());
        assert!(!index.exists());
        assert!(!repo.join(".git/index.lock").exists());
        // A commit the repository does not have.
        assert!(to_commit(&repo, &copy, &index, &"0".repeat(40)).is_err());
    }
}
