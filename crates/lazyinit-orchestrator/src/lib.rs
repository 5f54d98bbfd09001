//! Experiment specs, plans and the concurrent matrix runner.
//!
//! spec (TOML) -> plan (cells, kernels, estimates, the provider's price)
//! -> runner (build what the cells boot, launch, guest protocol, one CSV
//! row per cell as it ends). Providers come in as `dyn Provider`: the
//! orchestrator names none.

pub mod artifacts;
pub mod bisect;
mod cell;
pub mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod gate;
pub mod merge;
pub mod plan;
pub mod ran;
pub mod record;
pub mod runner;
pub mod shard;
pub mod spec;
pub mod token;

pub use error::{CellError, RunError};
pub use plan::{plan, Plan};
pub use runner::{run, RunOptions, RunSummary};
pub use shard::{Shard, ShardArg};
pub use spec::{ProviderConfigs, Spec};
