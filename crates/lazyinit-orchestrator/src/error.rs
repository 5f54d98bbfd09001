//! What can go wrong in a run, and in one cell of it.
//!
//! Each error says what failed and keeps what caused it as its source; a
//! [`RunError`] says its exit code from its sources
//! ([`lazyinit_core::exit::ExitCode`]), and the CLI prints the whole chain.
//! A cell's error becomes its row's `error` column on one line
//! (`exit::one_line`).

use std::path::PathBuf;

use lazyinit_core::exit::{self, ExitCode, ExitError};
use lazyinit_core::provider::ProviderError;
use lazyinit_core::results::ResultsError;
use lazyinit_core::Arch;
use lazyinit_guest::GuestError;
use lazyinit_image::ImageError;
use lazyinit_kernel::KernelError;
use lazyinit_ssh::SshError;

use crate::plan::KernelNeed;

/// Why a run stopped before its cells ended, or what it lost.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("provider {provider} cannot run these cells")]
    Refused {
        provider: String,
        #[source]
        source: ProviderError,
    },
    /// A kernel source that is not there, build tools missing (the
    /// error's own exit code).
    #[error("{0}")]
    Unbuildable(#[source] KernelError),
    #[error("the results folder {} holds the rows of another spec", .0.display())]
    OtherSpec(PathBuf, #[source] ExitError),
    #[error("cannot read the rows already in {}", .0.display())]
    Resume(PathBuf, #[source] ResultsError),
    #[error("cannot create the results folder {}", .0.display())]
    Folder(PathBuf, #[source] std::io::Error),
    #[error("the results folder {} is in use: another lazyinit-bench run (pid {pid}) is using it: wait for it to end, or give this run another --out", .folder.display())]
    Busy { folder: PathBuf, pid: String },
    #[error("cannot append rows to the results")]
    Results(#[source] ResultsError),
    #[error("cannot write {}", .0.display())]
    Write(PathBuf, #[source] std::io::Error),
    #[error(transparent)]
    Token(crate::token::TokenError),
    #[error("building the {} HZ={} {} kernel from {}", .0.arch, .0.hz, .0.variant, .0.source)]
    Kernel(Box<KernelNeed>, #[source] KernelError),
    #[error("preparing the {0} guest image")]
    Image(Arch, #[source] ImageError),
    #[error("cannot set up the way into the guests")]
    Connect(#[source] SshError),
    /// A write into the results folder found its disk full: the run
    /// stopped starting cells, and the cells it cost are `interrupted`
    /// (a rerun measures them), never `failed`.
    #[error("the disk of the results folder {} is full ({free}{}): make room on it, or move the folder to a disk with room, then rerun the same command to resume", .folder.display(), .file.as_ref().map(|f| format!("; {} could not be written", f.display())).unwrap_or_default())]
    DiskFull {
        folder: PathBuf,
        file: Option<PathBuf>,
        free: String,
    },
    /// Every cell ran, but these rows are not in `results.csv`: each is
    /// kept in its cell's folder, and a rerun runs those cells again.
    #[error("the rows of {} could not be written to {} (each is kept as {} in its cell's folder): {}", .cells.len(), .results_csv.display(), lazyinit_core::CellFolder::ROW_CSV, .cells.join(", "))]
    RowsNotWritten {
        cells: Vec<String>,
        results_csv: PathBuf,
        #[source]
        source: ResultsError,
    },
}

/// Bad input and missing tools keep their codes through the run: a
/// refused spec, a kernel source that is not there, build or key tools
/// missing, a folder of another spec or in use. Anything else is the
/// infrastructure's.
impl ExitCode for RunError {
    fn exit_code(&self) -> u8 {
        match self {
            RunError::Refused { source, .. } => source.exit_code(),
            RunError::Unbuildable(e) | RunError::Kernel(_, e) => e.exit_code(),
            RunError::OtherSpec(_, e) => e.exit_code(),
            RunError::Busy { .. } => exit::BAD_INPUT,
            RunError::Image(_, e) => e.exit_code(),
            RunError::Connect(e) => e.exit_code(),
            RunError::Resume(..)
            | RunError::Folder(..)
            | RunError::Results(_)
            | RunError::Write(..)
            | RunError::Token(_)
            | RunError::DiskFull { .. }
            | RunError::RowsNotWritten { .. } => exit::INFRASTRUCTURE,
        }
    }
}

/// Why one cell did not end ok. The messages are the `error` column's.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    #[error(transparent)]
    Launch(ProviderError),
    #[error("guest did not become reachable over SSH")]
    Boot(#[source] GuestError),
    /// The guest did not answer before the run's boot timeout.
    #[error("guest did not become reachable over SSH within --boot-timeout ({secs} s): a slow host (TCG, a loaded machine) needs more; rerun with a larger --boot-timeout")]
    BootTimeout {
        secs: u64,
        #[source]
        source: GuestError,
    },
    #[error("installing the kernel under test failed")]
    Install(#[source] GuestError),
    #[error(transparent)]
    Protocol(GuestError),
    #[error("{0} panicked")]
    Panicked(&'static str, #[source] tokio::task::JoinError),
    #[error("interrupted")]
    Interrupted,
    /// The cell's folder, its marker or a file it keeps.
    #[error(transparent)]
    Write(#[from] lazyinit_core::WriteError),
    /// The guest failed, and the host says why (its volume's disk full).
    #[error("{note}")]
    OnHost {
        note: String,
        #[source]
        source: Box<CellError>,
    },
}

impl RunError {
    /// This error as a [`RunError::DiskFull`] of `folder` when a full disk
    /// (ENOSPC, EDQUOT) is what caused it; otherwise itself.
    pub(crate) fn or_disk_full(self, folder: &std::path::Path) -> RunError {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&self);
        while let Some(c) = cause {
            if c.downcast_ref::<std::io::Error>()
                .is_some_and(lazyinit_core::writer::disk_full)
            {
                return RunError::DiskFull {
                    folder: folder.to_path_buf(),
                    file: None,
                    free: lazyinit_core::writer::free_text(folder),
                };
            }
            cause = c.source();
        }
        self
    }
}

impl CellError {
    /// The file a cell could not write for want of room, if that is why
    /// it ended.
    pub(crate) fn disk_full(&self) -> Option<&std::path::Path> {
        match self {
            CellError::Write(w) if w.is_disk_full() => Some(&w.path),
            _ => None,
        }
    }

    /// A guest-side error, or the interrupt it stands for.
    pub(crate) fn guest(wrap: fn(GuestError) -> CellError, e: GuestError) -> CellError {
        match e {
            GuestError::Interrupted => CellError::Interrupted,
            e => wrap(e),
        }
    }
}
