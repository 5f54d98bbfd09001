//! The harness on the twin: the real runner with the real EC2 provider,
//! its API calls sent to the emulator (through the fault proxy), its
//! instances reached through the twin's endpoints: the one thing that
//! differs from a run on AWS (`lazyinit_ec2::reach`). Used in-process by
//! the tests, and by the `twin-run` binary, the harness a test can kill.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use lazyinit_core::events::EventSink;
use lazyinit_core::results::ResultRow;
use lazyinit_orchestrator::{ProviderConfigs, RunSummary};
use serde::{Deserialize, Serialize};

use crate::endpoints::TwinEndpoints;

/// `[provider-config]` of a twin spec: the EC2 table, which the harness
/// replaces with [`ec2_config`] (the emulator's endpoint and AMIs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Configs {
    #[serde(default)]
    pub ec2: Option<toml::Value>,
}

impl ProviderConfigs for Configs {
    fn default_provider() -> String {
        "ec2".into()
    }
}

/// An experiment spec as the twin's harness reads it.
pub type Spec = lazyinit_orchestrator::Spec<Configs>;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HarnessConfig {
    /// The EC2 API the provider calls (the fault proxy's URL).
    pub api_url: String,
    pub endpoints_dir: PathBuf,
    pub out_dir: PathBuf,
    /// An experiment spec with `provider = "ec2"`.
    pub spec_toml: String,
    /// The resources' life (`expiry` of `[provider-config.ec2]`: `3h`).
    pub expiry: String,
    /// Their `Owner` tag.
    pub owner: String,
}

pub struct Outcome {
    pub summary: RunSummary,
    /// What the SDK's interceptor counted.
    pub sdk_calls: lazyinit_ec2::Counts,
    pub rows: Vec<ResultRow>,
}

/// `[provider-config.ec2]` for the twin: the emulator's Amazon Linux
/// images stand for the AMIs (the twin boots its stand-in whatever the AMI).
pub fn ec2_config(
    api_url: &str,
    owner: &str,
    expiry: &str,
) -> anyhow::Result<lazyinit_ec2::Ec2Config> {
    Ok(lazyinit_ec2::Ec2Config::from_toml(&format!(
        r#"
        region = "us-east-1"
        endpoint-url = "{api_url}"
        owner = "{owner}"
        expiry = "{expiry}"
        poll-interval = "100ms"
        state-timeout = "60s"
        ami = {{ lookup = {{ owner = "137112412989", name = "al2022-ami-*" }} }}
        "#
    ))?)
}

/// Runs the spec's cells to their rows, as `lazyinit-bench run` does: its
/// own keys for the run (in a folder that goes with it, the initramfs
/// copies that hold them too), cloud kernels from the cache.
pub async fn run(
    h: &HarnessConfig,
    events: EventSink,
    cancel: Arc<AtomicBool>,
) -> anyhow::Result<Outcome> {
    let spec = Spec::parse(&h.spec_toml, "twin spec")?;
    anyhow::ensure!(
        spec.provider == "ec2",
        "a twin spec says provider = \"ec2\""
    );
    // Its own keys, as `lazyinit-bench run` makes them for an EC2 run.
    let run_keys = lazyinit_ssh::RunKeys::create(&lazyinit_core::paths::state_dir(), "twin-run-")?;
    let keys = &run_keys.keys;
    let guest_keys = lazyinit_ec2::GuestKeys::from_dropbear(
        &keys.host_private,
        &keys.host_public.public_line(),
        &keys.client_public,
    )?;
    let provider = lazyinit_ec2::Ec2Provider::with_credentials(
        ec2_config(&h.api_url, &h.owner, &h.expiry)?,
        guest_keys,
        crate::dummy_credentials(),
    )?
    .with_instance_resolver(Arc::new(TwinEndpoints {
        dir: h.endpoints_dir.clone(),
        wait: Duration::from_secs(120),
    }));
    let provider = Arc::new(provider);
    let plan = lazyinit_orchestrator::plan(&spec, &*provider, u64::MAX / 2);
    let opts = lazyinit_orchestrator::RunOptions {
        folder: lazyinit_core::RunFolder::new(&h.out_dir),
        on_claim: None,
        events,
        cancel,
        prioritize_sensitive: false,
        boot_timeout: Duration::from_secs(900),
        shard_chosen_by: String::new(),
        artifacts: Arc::new(lazyinit_orchestrator::artifacts::Built::new(
            lazyinit_core::paths::cache_dir(),
            run_keys.state_dir().to_path_buf(),
            std::thread::available_parallelism().map_or(2, |n| n.get()),
        )),
    };
    let summary = lazyinit_orchestrator::run(&spec, &plan, provider.clone(), opts).await?;
    let rows = if summary.results_csv.exists() {
        lazyinit_core::results::read_rows(&summary.results_csv)?
    } else {
        Vec::new()
    };
    Ok(Outcome {
        summary,
        sdk_calls: provider.counter().snapshot(),
        rows,
    })
}
