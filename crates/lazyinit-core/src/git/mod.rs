//! The harness's one git module: every git command it runs, and the one
//! reader and writer of a git tree's identity.
//!
//! - [`GitIdentity`]: `git:<commit>` or `git:<commit>+<diff>`, a kernel
//!   source's exact state (a work tree's, a bisect step's), parsed and
//!   written here only.
//! - [`tree`]: a work tree as a kernel source: its state, its files, what
//!   changed since a copy of it was taken, and the name of the tree
//!   ([`tree::tree_identity`]) wherever it lies.
//! - [`history`]: commits: a revision's hash, a bisection's range as a
//!   graph, a commit's subject and files.
//! - [`clone`]: the private clone a bisection checks its steps out in and
//!   commits its reverts to, and a copy of a tree brought to a commit by
//!   content ([`clone::to_commit`], the kernel cache's seeding).
//!
//! Every command is built by [`Git`] and run by the project's one runner
//! ([`crate::command`]), with `GIT_OPTIONAL_LOCKS=0`: reading a user's
//! repository never writes to it, not even the index's stat cache.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

pub mod clone;
pub mod history;
mod identity;
pub mod tree;

pub use clone::Worktree;
pub use history::{head_of, range, resolve, show, subject, Range};
pub use identity::{GitIdentity, NotGitIdentity};
pub use tree::{normalize_remote, tree_identity};

/// What a git command could not do.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// A revision that does not name a commit, a range that is not one, a
    /// folder that is not a work tree or has no commit.
    #[error("{0}")]
    BadInput(String),
    /// git could not be started (not installed, no such folder).
    #[error("{what}: {source}")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// It ran and failed: what it said on stderr.
    #[error("{what} failed: {detail}")]
    Failed { what: String, detail: String },
    /// A file of the work tree could not be read.
    #[error("{}: {source}", .path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A git command, built here only: `git -C <dir>` ([`Git::in_dir`]), over
/// a copy with a repository's objects and a private index ([`Git::over`]),
/// or in no repository ([`Git::anywhere`]); always `GIT_OPTIONAL_LOCKS=0`.
/// [`Git::run`] and [`Git::text`] run it with [`crate::command::run`].
pub struct Git {
    cmd: Command,
}

impl Git {
    /// `git` in no repository of its own (a clone names its source).
    pub fn anywhere() -> Git {
        let mut cmd = Command::new("git");
        cmd.env("GIT_OPTIONAL_LOCKS", "0");
        Git { cmd }
    }

    /// `git -C dir`.
    pub fn in_dir(dir: &Path) -> Git {
        let mut g = Git::anywhere();
        g.cmd.arg("-C").arg(dir);
        g
    }

    /// git over the copy `work_tree` with the repository whose git folder
    /// is `git_dir` and the private index `index`: reads the repository,
    /// writes only the index and the copy.
    pub fn over(git_dir: &Path, work_tree: &Path, index: &Path) -> Git {
        let mut g = Git::anywhere();
        g.cmd
            .arg("--git-dir")
            .arg(git_dir)
            .arg("--work-tree")
            .arg(work_tree)
            .env("GIT_INDEX_FILE", index)
            .current_dir(work_tree);
        g
    }

    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Git {
        self.cmd.arg(a);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Git
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Git {
        self.cmd.env(key, value);
        self
    }

    /// Its stdout; `what` names it in an error.
    pub fn run(mut self, what: &str) -> Result<Vec<u8>, GitError> {
        crate::command::run(&mut self.cmd).map_err(|e| error(what, e))
    }

    /// Its stdout as text, trailing white space trimmed.
    pub fn text(self, what: &str) -> Result<String, GitError> {
        self.run(what)
            .map(|o| String::from_utf8_lossy(&o).trim_end().to_string())
    }

    /// `input` on its stdin; its stdout.
    pub fn run_with_input(mut self, what: &str, input: &[u8]) -> Result<Vec<u8>, GitError> {
        crate::command::run_with_input(&mut self.cmd, input).map_err(|e| error(what, e))
    }

    /// Whether it exits 0 (a question git answers by its exit status:
    /// `merge-base --is-ancestor`, `cat-file -e`); an error only when it
    /// cannot be started.
    pub fn succeeds(mut self, what: &str) -> Result<bool, GitError> {
        match crate::command::run(&mut self.cmd) {
            Ok(_) => Ok(true),
            Err(e @ crate::command::CommandError::Spawn { .. }) => Err(error(what, e)),
            Err(crate::command::CommandError::Failed { .. }) => Ok(false),
        }
    }
}

fn error(what: &str, e: crate::command::CommandError) -> GitError {
    match e {
        crate::command::CommandError::Spawn { source, .. } => GitError::Spawn {
            what: what.into(),
            source,
        },
        e @ crate::command::CommandError::Failed { .. } => GitError::Failed {
            what: what.into(),
            detail: e.detail(),
        },
    }
}

/// NUL-separated names (`-z` output) as a list, empty names left out.
pub fn nul_list(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_says_what_failed_and_a_question_is_its_exit_status() {
        let d = tempfile::tempdir().unwrap();
        let e = Git::in_dir(d.path())
            .args(["rev-parse", "--verify", "HEAD"])
            .text("git rev-parse HEAD")
            .unwrap_err();
        assert!(
            matches!(&e, GitError::Failed { what, .. } if what == "git rev-parse HEAD"),
            "{e}"
        );
        assert!(
            e.to_string().starts_with("git rev-parse HEAD failed: "),
            "{e}"
        );
        assert!(!Git::in_dir(d.path())
            .args(["rev-parse", "--verify", "HEAD"])
            .succeeds("git rev-parse")
            .unwrap());
        let out = Git::anywhere()
            .args(["hash-object", "--stdin"])
            .run_with_input("git hash-object", b"x\n")
            .unwrap();
        assert_eq!(out, b"587be6b4c3f93f93c489c0111bba5596147a26cb\n");
    }

    #[test]
    fn nul_lists_drop_empty_names() {
        assert_eq!(nul_list(b"a\0b c\0\0"), ["a", "b c"]);
        assert!(nul_list(b"").is_empty());
    }
}
