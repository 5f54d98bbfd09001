//! The shared vocabulary of lazyinit-bench.
//!
//! Every other crate speaks in these types: what a cell of the experiment
//! matrix is ([`cell`]) and the identity its axes, kernel and testbed
//! share ([`identity`]), what the model predicts for it ([`model`]), what a
//! result row looks like on disk ([`results`]), the figures of the 2021 report
//! ([`reported`]), the progress events the orchestrator emits ([`events`]),
//! the results folder's files ([`layout`]) and their one writer
//! ([`writer`]), and the one seam that has several
//! implementations, the [`provider::Provider`].

pub mod cell;
pub mod estimate;
pub mod events;
pub mod evidence;
pub mod exit;
pub mod identity;
pub mod input;
pub mod layout;
pub mod model;
pub mod output;
pub mod paths;
pub mod provider;
pub mod reported;
pub mod results;
pub mod shell;
pub mod size;
pub mod storage;
pub mod ticks;
pub mod writer;

pub use cell::{Arch, Cell, Hz, KernelSource, Variant};
pub use identity::{
    Accel, Axes, CellAxes, KernelId, MachineName, ProviderName, RowAxes, RowKernel, SourceId,
    StorageId, Testbed,
};
pub use layout::{CellFolder, RunFolder};
pub use provider::KernelProfile;
pub use size::ByteSize;
pub use storage::StorageProfile;
pub use writer::WriteError;

/// Version of the harness, recorded in every result row.
pub const HARNESS_VERSION: &str = env!("CARGO_PKG_VERSION");
