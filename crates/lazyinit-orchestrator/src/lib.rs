//! Experiment specs, plans and the concurrent matrix runner.
//!
//! spec (TOML) -> plan (cells, kernels, estimates) -> runner (build, launch,
//! guest protocol, one CSV row per cell as it ends).

pub mod artifacts;
pub mod gate;
pub mod plan;
pub mod runner;
pub mod spec;

pub use plan::{plan, Plan};
pub use runner::{run, RunOptions, RunSummary};
pub use spec::Spec;
