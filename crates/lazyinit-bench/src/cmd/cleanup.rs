//! `lazyinit-bench cleanup`: find this project's cloud resources (EC2
//! instances and volumes) by tag, of one run or past their expiry, and
//! remove them: the caller's own (Owner tag) unless `--all-owners`. The
//! sweep itself is the provider's (`providers::cleanup`).

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

pub async fn run(a: CleanupArgs) -> anyhow::Result<u8> {
    super::providers::cleanup(&a).await
}
