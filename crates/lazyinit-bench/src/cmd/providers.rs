//! Glue from the CLI to the providers and to the report, kept apart from the
//! subcommand modules so each of those stays about one thing.

use std::path::Path;
use std::sync::Arc;

use lazyinit_core::exit::bad_input;
use lazyinit_core::provider::Provider;
use lazyinit_orchestrator::{Plan, Spec};

/// The EC2 provider from the spec's `[provider-config.ec2]` table.
pub fn ec2_provider(_spec: &Spec) -> anyhow::Result<Arc<dyn Provider>> {
    Err(bad_input("the ec2 provider is not wired into `run` yet").into())
}

/// The EC2 cost estimate line for `plan`.
pub fn plan_cost(_spec: &Spec, _plan: &Plan) -> anyhow::Result<String> {
    Ok("cost: the ec2 estimate is not wired into `plan` yet".into())
}

/// The table printed at the end of `run`: the same markdown as `report`.
pub fn table_for(csv: &Path) -> anyhow::Result<String> {
    let rows = lazyinit_core::results::read_rows(csv)?;
    let rep = lazyinit_report::build(&rows, lazyinit_report::Metric::default());
    Ok(lazyinit_report::render::markdown::render(&rep))
}
