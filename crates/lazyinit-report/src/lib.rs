//! Tables, plots and the regression gate; reads only result CSVs.
//!
//! Pipeline: [`input::load`] the CSVs, [`report::build`] (cells keyed by
//! their whole configuration, statistics, model, 2021 figures, ratios),
//! then render with [`render`] or plot with [`plot`]. [`compare`] matches
//! two sets of cells and decides whether the candidate regressed. [`kcidb`]
//! exports the rows as a KCIDB report for KernelCI. [`replay`] validates
//! the early-stop estimates on full runs' per-group data.

pub mod cells;
pub mod compare;
pub mod input;
pub mod kcidb;
pub mod kernels;
pub mod plot;
pub mod ratios;
pub mod render;
pub mod replay;
pub mod report;
/// The project's statistics live in `lazyinit_core::stats`; this name keeps
/// the report's paths.
pub use lazyinit_core::stats;

pub use cells::{CellKey, CellStats, Metric};
pub use report::{build, Report};

/// A bad `--origin` is the input's fault: 2.
impl lazyinit_core::exit::ExitCode for kcidb::KcidbError {
    fn exit_code(&self) -> u8 {
        lazyinit_core::exit::BAD_INPUT
    }
}
