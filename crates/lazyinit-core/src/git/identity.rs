//! The `git:` identity: the one reader ([`FromStr`]) and writer
//! ([`fmt::Display`]) of the text.

use std::fmt;
use std::str::FromStr;

/// A git tree's exact state as a kernel source's identity:
///
/// - `git:<commit>`: the tree is exactly the commit (a clean work tree, a
///   bisect's step, a revert it committed);
/// - `git:<commit>+<diff>`: the work tree at `<commit>` with changes it
///   has not committed (edits, untracked files), `<diff>` the first 16 hex
///   digits of their digest ([`super::tree::dirty_digest`]).
///
/// What `+diff` means, decided here once: the text names another source
/// than the commit (another build, another cache key: the whole text is
/// the identity), whose *base* is still the commit: [`GitIdentity::commit`]
/// is `<commit>` with or without it, so a history's commit range, a build
/// tree's sync and a seed start from it. [`GitIdentity::base`] is the
/// commit's own identity, without the changes.
///
/// The commit is 7 or more hex digits (a hash, full or abbreviated; never
/// a branch name), the diff one or more. Any other text, `git:main`
/// included, is not a `GitIdentity` (a row keeps it as its text). Parsed
/// and written back, a text is the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GitIdentity {
    commit: String,
    diff: Option<String>,
}

/// A text that is not a [`GitIdentity`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a git identity (git:<commit> or git:<commit>+<diff>, each in hex)")]
pub struct NotGitIdentity(pub String);

impl GitIdentity {
    /// Every identity's first four bytes.
    pub const PREFIX: &'static str = "git:";

    /// How many hex digits of the differences' digest the text keeps.
    pub const DIFF_DIGITS: usize = 16;

    /// The identity of `commit` itself (a hash).
    pub fn of_commit(commit: &str) -> Result<GitIdentity, NotGitIdentity> {
        GitIdentity::new(commit, None)
    }

    /// `commit` with the differences whose digest is `diff` (a full
    /// digest is cut to [`GitIdentity::DIFF_DIGITS`]), or the commit
    /// itself when there are none.
    pub fn new(commit: &str, diff: Option<&str>) -> Result<GitIdentity, NotGitIdentity> {
        let diff = diff.map(|d| d.get(..GitIdentity::DIFF_DIGITS).unwrap_or(d));
        GitIdentity::checked(commit, diff).ok_or_else(|| {
            NotGitIdentity(match diff {
                None => format!("{}{commit}", GitIdentity::PREFIX),
                Some(d) => format!("{}{commit}+{d}", GitIdentity::PREFIX),
            })
        })
    }

    /// The identity of these parts as they are, when they are one.
    fn checked(commit: &str, diff: Option<&str>) -> Option<GitIdentity> {
        let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
        (commit.len() >= 7 && hex(commit) && diff.is_none_or(hex)).then(|| GitIdentity {
            commit: commit.to_string(),
            diff: diff.map(String::from),
        })
    }

    /// The commit, whether or not the tree differed from it.
    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// The differences' digest (its first hex digits), None when the tree
    /// is its commit.
    pub fn diff(&self) -> Option<&str> {
        self.diff.as_deref()
    }

    /// Whether the tree is exactly its commit.
    pub fn is_commit(&self) -> bool {
        self.diff.is_none()
    }

    /// The commit's own identity: `git:<commit>`.
    pub fn base(&self) -> GitIdentity {
        GitIdentity {
            commit: self.commit.clone(),
            diff: None,
        }
    }
}

impl FromStr for GitIdentity {
    type Err = NotGitIdentity;
    /// As written, whatever the diff's length (not cut: the text writes
    /// back the same).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.strip_prefix(GitIdentity::PREFIX)
            .and_then(|rest| match rest.split_once('+') {
                Some((c, d)) => GitIdentity::checked(c, Some(d)),
                None => GitIdentity::checked(rest, None),
            })
            .ok_or_else(|| NotGitIdentity(s.to_string()))
    }
}

impl fmt::Display for GitIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(GitIdentity::PREFIX)?;
        f.write_str(&self.commit)?;
        if let Some(d) = &self.diff {
            write!(f, "+{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = "116c914995f624ae685e0b59d43b1b39fb456e70";

    #[test]
    fn a_commit_and_a_commit_with_changes_read_and_write_back_the_same() {
        for text in [
            format!("git:{FULL}"),
            format!("git:{FULL}+feedfacefeedface"),
            "git:abcdef0".to_string(),
            "git:abcdef0+0123".to_string(),
            "git:ABCDEF0".to_string(),
            // Longer than the writer's 16 digits: kept whole.
            format!("git:{FULL}+{}", "0".repeat(64)),
        ] {
            let g: GitIdentity = text.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(g.to_string(), text);
            assert_eq!(g.to_string().parse::<GitIdentity>().unwrap(), g);
        }
    }

    /// The cases the two old readers disagreed on: `SourceId::from` kept
    /// `+<diff>` as part of the commit, `gittree::identity_commit` cut it.
    /// The commit is the hash before `+` either way, and the diff is kept
    /// as what tells the two sources apart.
    #[test]
    fn the_commit_of_a_tree_with_changes_is_its_hash_and_the_changes_tell_it_apart() {
        let dirty: GitIdentity = format!("git:{FULL}+0123456789abcdef").parse().unwrap();
        let clean: GitIdentity = format!("git:{FULL}").parse().unwrap();
        assert_eq!(dirty.commit(), FULL);
        assert_eq!(dirty.diff(), Some("0123456789abcdef"));
        assert!(!dirty.is_commit() && clean.is_commit());
        assert_ne!(dirty, clean);
        assert_eq!(dirty.base(), clean);
        assert_eq!(clean.base(), clean);
        assert_eq!(
            "git:abcdef0+0123".parse::<GitIdentity>().unwrap().commit(),
            "abcdef0"
        );
    }

    #[test]
    fn a_branch_a_short_hash_and_other_sources_are_not_identities() {
        for text in [
            "git:abc",
            "git:main",
            "git:",
            "git:+0123",
            "git:abcdef0+",
            "git:abcdef0+xyz",
            "git:abcdef0+01+23",
            " git:abcdef0",
            "git:abcdef0 ",
            "debian-6.1",
            "sha256:0123456789abcdef",
            "tree:0123abcd",
            "/src/linux",
        ] {
            assert_eq!(
                text.parse::<GitIdentity>(),
                Err(NotGitIdentity(text.to_string())),
                "{text}"
            );
        }
    }

    #[test]
    fn the_writer_keeps_sixteen_digits_of_a_digest_and_refuses_what_it_could_not_read() {
        let digest = "ab".repeat(32);
        let g = GitIdentity::new(FULL, Some(&digest)).unwrap();
        assert_eq!(g.to_string(), format!("git:{FULL}+abababababababab"));
        assert_eq!(
            GitIdentity::of_commit(FULL).unwrap().to_string(),
            format!("git:{FULL}")
        );
        assert!(GitIdentity::of_commit("main").is_err());
        assert!(GitIdentity::new(FULL, Some("")).is_err());
        assert!(GitIdentity::new(FULL, Some("not hex")).is_err());
    }
}
