//! The shared vocabulary of lazyinit-bench.
//!
//! Every other crate speaks in these types: what a cell of the experiment
//! matrix is ([`cell`]) and the identity its axes, kernel and testbed
//! share ([`identity`]), what the model predicts for it ([`model`]), what a
//! result row looks like on disk ([`results`]), the figures of the 2021 report
//! ([`reported`]), the progress events the orchestrator emits ([`events`]),
//! the results folder's files ([`layout`]) and their one writer
//! ([`writer`]), the statistics every judge uses ([`stats`]), and the one
//! seam that has several implementations, the [`provider::Provider`].

pub mod aside;
pub mod cache_root;
pub mod cell;
pub mod command;
pub mod events;
pub mod evidence;
pub mod exit;
pub mod git;
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
pub mod stats;
pub mod storage;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

/// serde, for the exported text macros (`open_name!`, `text_value!`).
#[doc(hidden)]
pub use serde as __serde;

/// `first` then `then`, as one array: a const table made of the first
/// table's entries and the knobs' (`identity::FIELDS`,
/// `results::COLUMN_KINDS`). `first` is never empty.
pub(crate) const fn concat<T: Copy, const A: usize, const B: usize, const N: usize>(
    first: [T; A],
    then: [T; B],
) -> [T; N] {
    assert!(A > 0 && A + B == N, "concat: N is A + B, and A is not 0");
    let mut all = [first[0]; N];
    let mut i = 0;
    while i < A {
        all[i] = first[i];
        i += 1;
    }
    let mut i = 0;
    while i < B {
        all[A + i] = then[i];
        i += 1;
    }
    all
}
pub mod ticks;
pub mod writer;

pub use cell::{Arch, Cell, DebianRef, Hz, KernelSource, Variant};
pub use git::GitIdentity;
pub use identity::{
    Accel, Axes, CellAxes, KernelId, MachineName, ProviderName, RowAxes, RowKernel, SourceId,
    StorageId, Testbed,
};
pub use layout::{CellFolder, FileName, RunFile, RunFolder};
pub use provider::KernelProfile;
pub use size::ByteSize;
pub use storage::{Noise, StorageProfile};
pub use writer::{CellWriter, ClaimError, RunWriter, WriteError};

/// Version of the harness, recorded in every result row.
pub const HARNESS_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The harness's git commit when no binary said it (library code run
/// without `lazyinit-bench`, a build outside git).
pub const UNKNOWN_COMMIT: &str = "unknown";

static HARNESS_COMMIT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The harness's git commit, recorded in every result row and
/// `shard.toml`: `<40 hex>`, `<40 hex>-dirty` when a tracked file
/// differed from it, or [`UNKNOWN_COMMIT`]. The binary takes it when it
/// is built (its `build.rs`) and sets it once at start
/// ([`set_harness_commit`]).
pub fn harness_commit() -> &'static str {
    HARNESS_COMMIT.get().map_or(UNKNOWN_COMMIT, String::as_str)
}

/// Whether `s` reads as a [`harness_commit`]: 40 lowercase hex digits,
/// then `-dirty` or nothing, or [`UNKNOWN_COMMIT`].
pub fn is_harness_commit(s: &str) -> bool {
    let hex = s.strip_suffix("-dirty").unwrap_or(s);
    s == UNKNOWN_COMMIT
        || (hex.len() == 40 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// Sets [`harness_commit`] (the first call wins; blank reads as unknown).
pub fn set_harness_commit(commit: &str) {
    let commit = commit.trim();
    if !commit.is_empty() {
        let _ = HARNESS_COMMIT.set(commit.to_string());
    }
}
