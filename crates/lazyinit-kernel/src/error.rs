//! What can go wrong in a kernel build, each with what to do about it.

use std::path::{Path, PathBuf};

use lazyinit_core::exit;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// A wrong request: unknown source, unreadable path, not a kernel tree.
    #[error("{0}")]
    BadInput(String),
    /// A kernel source given as a path that is not a folder.
    #[error("kernel source {}: no such folder (give a kernel source tree, a Debian series or a version)", .0.display())]
    NoSourceFolder(PathBuf),
    #[error("{tool} is missing: install it with `{install}` (or run scripts/setup-host.sh)")]
    MissingTool { tool: String, install: String },
    #[error(
        "kernel {0} is not downloaded yet: build it with `--source {0}` (which fetches it) first"
    )]
    NotFetched(String),
    /// No variant patch applies to this tree.
    #[error("cannot make the `{variant}` variant of {source_name} ({version}): {detail}")]
    Patch {
        source_name: String,
        version: String,
        variant: String,
        detail: String,
    },
    /// After patching, the text of ext4_run_li_request says another variant.
    #[error("variant check failed: asked `{wanted}` but ext4_run_li_request in {tree} reads as `{found}`")]
    VariantCheck {
        wanted: String,
        found: String,
        tree: PathBuf,
    },
    /// The resolved .config does not honour the fragments.
    #[error("the resolved kernel config is missing required options: {}; see {}", .missing.join(", "), .config.display())]
    ConfigCheck {
        missing: Vec<String>,
        config: PathBuf,
    },
    /// A user's config that the harness cannot measure, each refusal naming
    /// its option.
    #[error("the kernel config {config} cannot be measured:\n  {}", .refusals.join("\n  "))]
    Unmeasurable {
        config: String,
        refusals: Vec<String>,
    },
    /// A build step (unpack, patch, make) failed; the log has the details.
    #[error("{step} failed (exit {code}); log: {}\n{tail}", .log.display())]
    Build {
        step: String,
        code: i32,
        log: PathBuf,
        tail: String,
    },
    #[error("{0}")]
    Step(String),
    #[error("downloading {url} failed: {detail} (mirror: {mirror}; set --mirror or `mirror` in the config file for a local mirror or proxy)")]
    Download {
        url: String,
        mirror: String,
        detail: String,
    },
    #[error("{url}: no such kernel release on the mirror (HTTP 404): check the version")]
    UnknownVersion { url: String },
    #[error(
        "checksum mismatch for {file}: expected {expected}, got {got}; the download was deleted"
    )]
    Checksum {
        file: String,
        expected: String,
        got: String,
    },
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl KernelError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        KernelError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Runs a command of the kernel crate with core's runner: its stdout, or
/// a step error that keeps what it said.
pub(crate) fn run(cmd: &mut std::process::Command, what: &str) -> Result<Vec<u8>, KernelError> {
    use lazyinit_core::command::{self, CommandError};
    command::run(cmd).map_err(|e| match e {
        CommandError::Spawn { source, .. } => KernelError::Step(format!("{what}: {source}")),
        e @ CommandError::Failed { .. } => {
            KernelError::Step(format!("{what} failed: {}", e.detail()))
        }
    })
}

/// A git tree that is not one (or has no commit) is bad input; a file of
/// it that cannot be read, an I/O error; a git command that failed, a
/// step that failed, in git's words.
impl From<lazyinit_core::git::GitError> for KernelError {
    fn from(e: lazyinit_core::git::GitError) -> Self {
        use lazyinit_core::git::GitError;
        match e {
            GitError::BadInput(m) => KernelError::BadInput(m),
            GitError::Io { path, source } => KernelError::Io { path, source },
            e @ (GitError::Spawn { .. } | GitError::Failed { .. }) => {
                KernelError::Step(e.to_string())
            }
        }
    }
}

/// Bad input 2 (the request), missing tool 4, else infrastructure 3.
impl exit::ExitCode for KernelError {
    fn exit_code(&self) -> u8 {
        match self {
            KernelError::BadInput(_)
            | KernelError::NoSourceFolder(_)
            | KernelError::NotFetched(_)
            | KernelError::Patch { .. }
            | KernelError::Unmeasurable { .. }
            | KernelError::UnknownVersion { .. } => exit::BAD_INPUT,
            KernelError::MissingTool { .. } => exit::MISSING_TOOL,
            _ => exit::INFRASTRUCTURE,
        }
    }
}
