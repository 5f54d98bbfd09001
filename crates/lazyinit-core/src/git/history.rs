//! Commits of a repository, read only: a revision's hash, the range a
//! bisection walks, a commit's subject and files.

use std::path::{Path, PathBuf};

use super::{Git, GitError};

/// The full hash of a revision, or bad input naming it.
pub fn resolve(repo: &Path, rev: &str) -> Result<String, GitError> {
    Git::in_dir(repo)
        .args([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ])
        .text("git rev-parse")
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
/// children, `bad` last; and each one's parents. Refused unless good is an
/// ancestor of bad.
pub fn range(repo: &Path, good: &str, bad: &str) -> Result<Range, GitError> {
    let ancestor = Git::in_dir(repo)
        .args(["merge-base", "--is-ancestor", good, bad])
        .succeeds("git merge-base")?;
    if !ancestor || good == bad {
        return Err(GitError::BadInput(format!(
            "--good {} is not an ancestor of --bad {}: give an older good commit",
            &good[..12.min(good.len())],
            &bad[..12.min(bad.len())]
        )));
    }
    let list = Git::in_dir(repo)
        .args([
            "rev-list",
            "--topo-order",
            "--reverse",
            "--parents",
            bad,
            &format!("^{good}"),
        ])
        .text("git rev-list")?;
    let mut commits = vec![good.to_string()];
    let mut parents: Vec<Vec<String>> = vec![Vec::new()];
    for line in list.lines() {
        let mut words = line.split_whitespace().map(String::from);
        if let Some(c) = words.next() {
            commits.push(c);
            parents.push(words.collect());
        }
    }
    // --topo-order puts bad last; a bad that is not last would be a bug.
    if commits.last().map(String::as_str) != Some(bad) {
        return Err(GitError::Failed {
            what: "git rev-list".into(),
            detail: format!("{bad} is not the last of its own range"),
        });
    }
    Ok(Range { commits, parents })
}

/// A bisection's commits (see [`range`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// Oldest first: `good`, the rest parents before children, `bad` last.
    pub commits: Vec<String>,
    /// Each commit's parents (full hashes, in or out of the range).
    pub parents: Vec<Vec<String>>,
}

impl Range {
    /// Each commit's parents that are in the range, as indices of
    /// [`Range::commits`] (a parent outside is an ancestor of `good`, so
    /// good): the graph a bisection searches.
    pub fn within(&self) -> Vec<Vec<usize>> {
        let index: std::collections::HashMap<&str, usize> = self
            .commits
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_str(), i))
            .collect();
        self.parents
            .iter()
            .map(|ps| {
                ps.iter()
                    .filter_map(|p| index.get(p.as_str()).copied())
                    .collect()
            })
            .collect()
    }
}

/// A commit's subject line (empty when git cannot say).
pub fn subject(repo: &Path, commit: &str) -> String {
    Git::in_dir(repo)
        .args(["log", "-1", "--format=%s", commit])
        .text("git log")
        .unwrap_or_default()
}

/// A file's text at a commit (None when it has none there).
pub fn show(repo: &Path, commit: &str, path: &str) -> Option<String> {
    Git::in_dir(repo)
        .args(["show", &format!("{commit}:{path}")])
        .text("git show")
        .ok()
}

/// The top of the work tree holding `dir`, and its HEAD commit.
pub fn head_of(dir: &Path) -> Result<(PathBuf, String), GitError> {
    let top = Git::in_dir(dir)
        .args(["rev-parse", "--show-toplevel"])
        .text("git rev-parse")
        .map_err(|_| GitError::BadInput(format!("{} is not in a git work tree", dir.display())))?;
    let head = resolve(dir, "HEAD")?;
    Ok((PathBuf::from(top), head))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::sh;

    #[test]
    fn a_range_is_the_commits_between_its_ends_with_a_merged_side_inside() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path();
        // good - a - m - bad, with b merged at m from a side branch of good.
        sh(
            repo,
            "git init -q -b main && echo 0 > f && git add f && git commit -qm good \
             && git checkout -qb side && echo b > g && git add g && git commit -qm b \
             && git checkout -q main && echo a > f && git commit -qam a \
             && git merge -q --no-edit side && echo bad > f && git commit -qam bad",
        );
        let good = resolve(repo, "HEAD~3").unwrap();
        let bad = resolve(repo, "HEAD").unwrap();
        let r = range(repo, &good, &bad).unwrap();
        assert_eq!(r.commits.len(), 5);
        assert_eq!((&r.commits[0], &r.commits[4]), (&good, &bad));
        let subjects: Vec<String> = r.commits.iter().map(|c| subject(repo, c)).collect();
        let at = |s: &str| subjects.iter().position(|x| x.starts_with(s)).unwrap();
        let within = r.within();
        // The merge's two parents are both in the range; good's are not.
        let merge = at("Merge");
        let mut ps = within[merge].clone();
        ps.sort();
        let mut want = vec![at("a"), at("b")];
        want.sort();
        assert_eq!(ps, want);
        assert!(within[0].is_empty());
        assert_eq!(within[at("a")], [0]);
        assert_eq!(within[4], [merge]);
        assert_eq!(r.parents[4], [r.commits[merge].clone()]);
    }
}
