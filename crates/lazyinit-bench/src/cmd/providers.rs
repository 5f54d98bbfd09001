//! The one place that names concrete providers. A spec's `provider` and
//! its `[provider-config.<name>]` table become a `dyn Provider` here; the
//! orchestrator, `run` and `plan` only ever see the trait.
//!
//! A new provider is a crate implementing `lazyinit_core::provider`'s
//! `Provider` and `Machine`, and here one entry in [`PROVIDERS`] (and, if
//! it has settings, its table in [`Configs`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lazyinit_core::exit::bad_input;
use lazyinit_core::provider::Provider;
use lazyinit_core::KernelProfile;
use lazyinit_orchestrator::ProviderConfigs;
use serde::{Deserialize, Serialize};

/// Makes a provider from the spec's tables, its machines reached with the
/// SSH keys in the given folder (see [`RunKeys`]). No network call, no key
/// read: those wait for its `preflight` (so `plan` makes one too).
type Make = fn(&Configs, &Path) -> anyhow::Result<Arc<dyn Provider>>;

/// A provider this binary knows.
struct Known {
    /// The name a spec gives it.
    name: &'static str,
    make: Make,
    /// Its machines carry the SSH host key's private half off this host
    /// (EC2: in every instance's user data), so each run gets keys of its
    /// own rather than one key for every machine forever.
    keys_per_run: bool,
}

/// Every provider this binary knows.
const PROVIDERS: &[Known] = &[
    Known {
        name: "qemu",
        make: |c, _keys| {
            Ok(Arc::new(lazyinit_qemu::QemuProvider::new(
                c.qemu.clone().unwrap_or_default(),
            )))
        },
        keys_per_run: false,
    },
    Known {
        name: "ec2",
        make: ec2,
        keys_per_run: true,
    },
];

/// The providers a spec may name.
pub fn names() -> impl Iterator<Item = &'static str> {
    PROVIDERS.iter().map(|k| k.name)
}

/// `[provider-config]`: one table per provider, typed by it where this
/// binary can (so the spec's hash covers the defaults filled in).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Configs {
    #[serde(default)]
    pub qemu: Option<lazyinit_qemu::QemuConfig>,
    /// Checked by the EC2 provider (its crate is an optional feature).
    #[serde(default)]
    pub ec2: Option<toml::Value>,
}

impl ProviderConfigs for Configs {
    fn default_provider() -> String {
        "qemu".into()
    }
}

/// An experiment spec as this binary reads it.
pub type Spec = lazyinit_orchestrator::Spec<Configs>;

/// Flags of `run` and `plan` that set a provider's table.
#[derive(clap::Args, Debug, Default)]
pub struct ProviderFlags {
    /// QEMU accelerator: auto (KVM if it works, else TCG), kvm, tcg.
    #[arg(long)]
    pub accel: Option<lazyinit_qemu::AccelChoice>,
    /// QEMU's clock: real (default), virtual / virtual:N (TCG on QEMU's
    /// virtual clock at icount shift N: exact to the microsecond under any
    /// host load; docs/virtual-clock.md), or auto (real where KVM boots a
    /// guest, virtual under TCG: quick's). A spec's `clock` under
    /// `[provider-config.qemu]`.
    #[arg(long)]
    pub clock: Option<lazyinit_qemu::Clock>,
}

impl ProviderFlags {
    pub fn apply(&self, spec: &mut Spec) {
        if let Some(accel) = self.accel {
            spec.provider_config
                .qemu
                .get_or_insert_with(Default::default)
                .accel = accel;
        }
        if let Some(clock) = self.clock {
            spec.provider_config
                .qemu
                .get_or_insert_with(Default::default)
                .clock = clock;
        }
    }
}

/// Refuses a spec that names a provider this binary does not know.
pub fn check_name(spec: &Spec, origin: &str) -> anyhow::Result<()> {
    if names().any(|n| n == spec.provider) {
        return Ok(());
    }
    Err(bad_input(format!(
        "{origin}: provider `{}`: use {}",
        spec.provider,
        names().collect::<Vec<_>>().join(" or ")
    ))
    .into())
}

/// The spec's provider (see [`Make`]), its machines reached with the keys
/// in `keys_dir` ([`RunKeys::dir`] for a run; `plan` reads no keys).
pub fn provider(spec: &Spec, keys_dir: &Path) -> anyhow::Result<Arc<dyn Provider>> {
    named(&spec.provider, &spec.provider_config, keys_dir)
}

fn known(name: &str) -> anyhow::Result<&'static Known> {
    PROVIDERS
        .iter()
        .find(|k| k.name == name)
        .ok_or_else(|| bad_input(format!("unknown provider `{name}`")).into())
}

fn named(name: &str, configs: &Configs, keys_dir: &Path) -> anyhow::Result<Arc<dyn Provider>> {
    (known(name)?.make)(configs, keys_dir)
}

/// The SSH keys of one run: the project's own (made once, in the state
/// folder), or, for a provider whose machines carry the host key off this
/// host, keys made for this run alone, in a private folder that goes (keys
/// and keyed guest images) when this is dropped.
pub struct RunKeys {
    dir: PathBuf,
    _own: Option<lazyinit_ssh::RunKeys>,
}

impl RunKeys {
    /// The folder of the keys, and of the guest images that hold them.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The folder that goes with the run (none for the project's own
    /// keys): what a `process::exit` must remove itself.
    pub fn own_dir(&self) -> Option<&Path> {
        self._own.as_ref().map(|o| o.state_dir())
    }
}

/// Removes the key folders of `provider`'s runs that were killed (nothing
/// holds them), saying so; a run and `cleanup` call it.
pub fn sweep_stale_keys(provider: &str) -> anyhow::Result<()> {
    let state = lazyinit_core::paths::state_dir();
    for dir in lazyinit_ssh::RunKeys::sweep_stale(&state, &run_keys_prefix(provider))? {
        eprintln!(
            "removed the key folder of a run that was killed: {}",
            dir.display()
        );
    }
    Ok(())
}

fn run_keys_prefix(provider: &str) -> String {
    format!("{provider}-run-")
}

/// The keys a run of `spec` uses (see [`RunKeys`]).
pub fn run_keys(spec: &Spec) -> anyhow::Result<RunKeys> {
    let state = lazyinit_core::paths::state_dir();
    if !known(&spec.provider)?.keys_per_run {
        return Ok(RunKeys {
            dir: state,
            _own: None,
        });
    }
    sweep_stale_keys(&spec.provider)?;
    let own = lazyinit_ssh::RunKeys::create(&state, &run_keys_prefix(&spec.provider))?;
    Ok(RunKeys {
        dir: own.state_dir().to_path_buf(),
        _own: Some(own),
    })
}

/// The kernel profile rows of `provider` ran (their machines' kind), for
/// the KCIDB export; `None` for a provider this binary cannot make.
pub fn kernel_profile(provider: &str) -> Option<KernelProfile> {
    named(
        provider,
        &Configs::default(),
        &lazyinit_core::paths::state_dir(),
    )
    .ok()
    .map(|p| p.kernel_profile())
}

/// The EC2 provider from the spec's `[provider-config.ec2]` table; the
/// run's keys (in `keys_dir`), converted for cloud-init, are read in its
/// preflight.
#[cfg(feature = "ec2")]
fn ec2(configs: &Configs, keys_dir: &Path) -> anyhow::Result<Arc<dyn Provider>> {
    use lazyinit_ec2::userdata::KeyError;
    let cfg = ec2_config(configs)?;
    let keys_dir = keys_dir.to_path_buf();
    let load_keys: lazyinit_ec2::KeyLoader = Box::new(move || {
        let keys = lazyinit_ssh::Keys::load_or_create(&keys_dir)
            .map_err(|e| KeyError::Load(e.to_string()))?;
        lazyinit_ec2::GuestKeys::from_dropbear(
            &keys.host_private,
            &keys.host_public.public_line(),
            &keys.client_public,
        )
    });
    let p = lazyinit_ec2::Ec2Provider::new(cfg, load_keys)?;
    Ok(Arc::new(p))
}

/// What a binary built without the `ec2` feature tells a user who asks for it.
#[cfg(not(feature = "ec2"))]
const BUILD_EC2: &str = "build it with `cargo build --release -p lazyinit-bench --features ec2`";

#[cfg(not(feature = "ec2"))]
fn ec2(_configs: &Configs, _keys_dir: &Path) -> anyhow::Result<Arc<dyn Provider>> {
    Err(bad_input(format!(
        "this lazyinit-bench was built without the EC2 provider: {BUILD_EC2}"
    ))
    .into())
}

/// The `[provider-config.ec2]` table, validated.
#[cfg(feature = "ec2")]
fn ec2_config(configs: &Configs) -> anyhow::Result<lazyinit_ec2::Ec2Config> {
    let table = configs
        .ec2
        .clone()
        .unwrap_or_else(|| toml::Value::Table(Default::default()));
    let cfg: lazyinit_ec2::Ec2Config = table.try_into().map_err(|e: toml::de::Error| {
        lazyinit_core::exit::refused_in("[provider-config.ec2]", e)
    })?;
    cfg.validate()?;
    Ok(cfg)
}

/// `cleanup`: EC2's sweep of tagged instances and volumes, the caller's
/// own (Owner tag) unless `--all-owners`.
#[cfg(feature = "ec2")]
pub async fn cleanup(a: &super::cleanup::CleanupArgs) -> anyhow::Result<u8> {
    use anyhow::Context;
    use lazyinit_core::exit;
    use lazyinit_ec2::{client, config, ops::Pace, Ec2Error, Sweep};

    if a.run_id.is_none() && !a.expired {
        return Err(
            exit::bad_input("say what to clean up: --run-id ID, --expired, or both").into(),
        );
    }
    if !a.dry_run {
        sweep_stale_keys("ec2")?;
    }
    let mut cfg = match &a.config {
        Some(p) => config::from_spec_file(p)?,
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
    cfg.validate()?;
    let counter = client::ApiCounter::default();
    let c = client::build_checked(&cfg, None, counter.clone())
        .await
        .map_err(exit::refused)?;
    let budget = client::ApiBudget::of(&cfg);
    let owner = match a.all_owners {
        true => None,
        false => Some(a.owner.clone().unwrap_or_else(|| cfg.owner_tag())),
    };
    let sweep = Sweep::new(a.run_id.clone(), a.expired, owner, a.dry_run);
    let report = match lazyinit_ec2::cleanup(&c, &sweep, Pace::of(&cfg)).await {
        Ok(r) => r,
        Err(e @ Ec2Error::BadInput(_)) => return Err(e.into()),
        // Said in one line: the budget it ran out of is the whole story.
        Err(e @ Ec2Error::NoAnswer { .. }) => {
            anyhow::bail!("cleanup: {}", e.with_budget(&budget))
        }
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
pub async fn cleanup(_a: &super::cleanup::CleanupArgs) -> anyhow::Result<u8> {
    Err(lazyinit_core::exit::bad_input(format!(
        "this lazyinit-bench was built without the EC2 provider, which cleanup sweeps: {BUILD_EC2}"
    ))
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_provider_can_be_made_without_io() {
        for name in names() {
            let p = named(name, &Configs::default(), Path::new("/nonexistent"));
            if cfg!(feature = "ec2") || name != "ec2" {
                assert_eq!(p.unwrap().name(), name);
            }
        }
        assert_eq!(kernel_profile("qemu"), Some(KernelProfile::Qemu));
        if cfg!(feature = "ec2") {
            assert_eq!(kernel_profile("ec2"), Some(KernelProfile::Cloud));
        }
        assert_eq!(kernel_profile("gce"), None);
    }

    /// Only a provider whose machines take the host key off this host
    /// (EC2's user data) makes keys for each run.
    #[test]
    fn keys_of_their_own_for_cloud_runs_only() {
        assert!(known("ec2").unwrap().keys_per_run);
        assert!(!known("qemu").unwrap().keys_per_run);
        assert!(known("gce").is_err());
    }
}
