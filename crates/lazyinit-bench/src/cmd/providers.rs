//! Glue from the CLI to the providers and to the report, kept apart from the
//! subcommand modules so each of those stays about one thing.

use std::path::Path;
use std::sync::Arc;

use lazyinit_core::exit::bad_input;
use lazyinit_core::provider::Provider;
use lazyinit_orchestrator::{Plan, Spec};

/// The `[provider-config.ec2]` table of a spec, validated.
#[cfg(feature = "ec2")]
fn ec2_config(spec: &Spec) -> anyhow::Result<lazyinit_ec2::Ec2Config> {
    let table = spec
        .provider_config
        .ec2
        .clone()
        .unwrap_or_else(|| toml::Value::Table(Default::default()));
    let cfg: lazyinit_ec2::Ec2Config = table
        .try_into()
        .map_err(|e: toml::de::Error| bad_input(format!("[provider-config.ec2]: {e}")))?;
    cfg.validate()
        .map_err(|e| bad_input(format!("[provider-config.ec2]: {e}")))?;
    Ok(cfg)
}

/// The run's keys (in `state_dir`) as the EC2 user data needs them: the
/// pinned host key converted to OpenSSH format by the EC2 crate (never
/// logged).
#[cfg(feature = "ec2")]
fn guest_keys(state_dir: &Path) -> anyhow::Result<lazyinit_ec2::GuestKeys> {
    let keys = lazyinit_ssh::Keys::load_or_create(state_dir)?;
    Ok(lazyinit_ec2::GuestKeys::from_dropbear(
        &keys.host_private,
        &keys.host_public.public_line(),
        &keys.client_public,
    )?)
}

/// The EC2 provider from the spec's `[provider-config.ec2]` table, with the
/// keys of `state_dir` (the run's own: see `run`).
#[cfg(feature = "ec2")]
pub async fn ec2_provider(spec: &Spec, state_dir: &Path) -> anyhow::Result<Arc<dyn Provider>> {
    let cfg = ec2_config(spec)?;
    let p = lazyinit_ec2::Ec2Provider::new(cfg, guest_keys(state_dir)?).await?;
    Ok(Arc::new(p))
}

#[cfg(not(feature = "ec2"))]
pub async fn ec2_provider(_spec: &Spec, _state_dir: &Path) -> anyhow::Result<Arc<dyn Provider>> {
    Err(bad_input(
        "this lazyinit-bench was built without the `ec2` feature: rebuild with default features",
    )
    .into())
}

/// The EC2 cost estimate for `plan`.
#[cfg(feature = "ec2")]
pub fn plan_cost(spec: &Spec, plan: &Plan) -> anyhow::Result<String> {
    let cfg = ec2_config(spec)?;
    let cells: Vec<lazyinit_core::Cell> = plan.cells.iter().map(|c| c.cell.clone()).collect();
    let durations: Vec<_> = cells.iter().map(lazyinit_ec2::predicted_lazyinit).collect();
    let est =
        lazyinit_ec2::estimate(&cells, &durations, &cfg).map_err(|e| bad_input(e.to_string()))?;
    Ok(format!(
        "ec2: {:.1} instance-hours, {:.0} GB-hours of volumes, about ${:.2} on demand",
        est.instance_hours, est.volume_gb_hours, est.usd
    ))
}

#[cfg(not(feature = "ec2"))]
pub fn plan_cost(_spec: &Spec, _plan: &Plan) -> anyhow::Result<String> {
    Ok("ec2: cost estimate unavailable (built without the `ec2` feature)".into())
}

/// The table printed at the end of `run`: the same markdown as `report`.
pub fn table_for(csv: &Path) -> anyhow::Result<String> {
    let rows = lazyinit_core::results::read_rows(csv)?;
    let rep = lazyinit_report::build(&rows, lazyinit_report::Metric::default());
    Ok(lazyinit_report::render::markdown::render(&rep))
}
