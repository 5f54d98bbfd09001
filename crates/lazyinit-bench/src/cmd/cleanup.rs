//! `lazyinit-bench cleanup`: find this project's EC2 instances and volumes
//! by tag (of one run, or past their expiry) and remove them: the caller's
//! own (Owner tag) unless `--all-owners`.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct CleanupArgs {
    /// Remove the resources tagged with this run id.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Remove every project resource whose ExpiresAt tag has passed.
    #[arg(long)]
    pub expired: bool,
    /// List what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Only resources with this Owner tag (default: the spec's `owner`, else $USER).
    #[arg(long, value_name = "NAME", conflicts_with = "all_owners")]
    pub owner: Option<String>,
    /// Every owner's resources, not only the caller's.
    #[arg(long)]
    pub all_owners: bool,
    /// Experiment spec whose [provider-config.ec2] table says region, profile and endpoint.
    #[arg(long, value_name = "SPEC.toml")]
    pub config: Option<PathBuf>,
    /// EC2 API endpoint (an emulator or a VPC endpoint); overrides the spec.
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// AWS region; overrides the spec and the environment.
    #[arg(long)]
    pub region: Option<String>,
    /// AWS profile; overrides the spec.
    #[arg(long)]
    pub profile: Option<String>,
}

#[cfg(feature = "ec2")]
pub async fn run(a: CleanupArgs) -> anyhow::Result<u8> {
    use anyhow::Context;
    use lazyinit_core::exit;
    use lazyinit_ec2::{cleanup, client, config, ops::Pace, Ec2Error, Sweep};

    if a.run_id.is_none() && !a.expired {
        return Err(
            exit::bad_input("say what to clean up: --run-id ID, --expired, or both").into(),
        );
    }
    let mut cfg = match &a.config {
        Some(p) => config::from_spec_file(p).map_err(|e| exit::bad_input(e.to_string()))?,
        None => config::Ec2Config::default(),
    };
    if a.endpoint_url.is_some() {
        cfg.endpoint_url = a.endpoint_url.clone();
    }
    if a.region.is_some() {
        cfg.region = a.region.clone();
    }
    if a.profile.is_some() {
        cfg.profile = a.profile.clone();
    }
    let counter = client::ApiCounter::default();
    let c = client::build(&cfg, None, counter.clone()).await;
    let owner = if a.all_owners {
        None
    } else {
        Some(a.owner.clone().unwrap_or_else(|| cfg.owner_tag()))
    };
    let sweep = Sweep::new(a.run_id.clone(), a.expired, owner, a.dry_run);
    let report = match cleanup(&c, &sweep, Pace::of(&cfg)).await {
        Ok(r) => r,
        Err(e @ Ec2Error::BadInput(_)) => return Err(exit::bad_input(e.to_string()).into()),
        Err(e) => return Err(e).context("cleanup could not list or remove resources"),
    };
    print!("{}", report.render());
    tracing::info!("cleanup used {}", counter.snapshot());
    if report.failed.is_empty() {
        Ok(exit::OK)
    } else {
        anyhow::bail!(
            "{} resource(s) could not be removed (listed above); rerun the same command",
            report.failed.len()
        )
    }
}

#[cfg(not(feature = "ec2"))]
pub async fn run(_a: CleanupArgs) -> anyhow::Result<u8> {
    Err(lazyinit_core::exit::bad_input(
        "this lazyinit-bench was built without the `ec2` feature: rebuild with default features to use cleanup",
    )
    .into())
}
