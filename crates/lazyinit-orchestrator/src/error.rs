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
}

impl CellError {
    /// A guest-side error, or the interrupt it stands for.
    pub(crate) fn guest(wrap: fn(GuestError) -> CellError, e: GuestError) -> CellError {
        match e {
            GuestError::Interrupted => CellError::Interrupted,
            e => wrap(e),
        }
    }
}
