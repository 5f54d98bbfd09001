//! The one place that names concrete providers. A spec's `provider` and
//! its `[provider-config.<name>]` table become a `dyn Provider` here; the
//! orchestrator, `run` and `plan` only ever see the trait.
//!
//! A new provider is a crate implementing `lazyinit_core::provider`'s
//! `Provider` and `Machine`, and here one line in [`PROVIDERS`] (and, if it
//! has settings, its table in [`Configs`]).

use std::sync::Arc;

use lazyinit_core::exit::bad_input;
use lazyinit_core::provider::Provider;
use lazyinit_core::KernelProfile;
use lazyinit_orchestrator::ProviderConfigs;
use serde::{Deserialize, Serialize};

/// Makes a provider from the spec's tables. No network call, no key read:
/// those wait for its `preflight` (so `plan` makes one too).
type Make = fn(&Configs) -> anyhow::Result<Arc<dyn Provider>>;

/// Every provider this binary knows, by the name a spec gives it.
const PROVIDERS: &[(&str, Make)] = &[
    ("qemu", |c| {
        Ok(Arc::new(lazyinit_qemu::QemuProvider::new(
            c.qemu.clone().unwrap_or_default(),
        )))
    }),
    ("ec2", ec2),
];

/// The providers a spec may name.
pub fn names() -> impl Iterator<Item = &'static str> {
    PROVIDERS.iter().map(|(name, _)| *name)
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
}

impl ProviderFlags {
    pub fn apply(&self, spec: &mut Spec) {
        if let Some(accel) = self.accel {
            spec.provider_config
                .qemu
                .get_or_insert_with(Default::default)
                .accel = accel;
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

/// The spec's provider (see [`Make`]).
pub fn provider(spec: &Spec) -> anyhow::Result<Arc<dyn Provider>> {
    named(&spec.provider, &spec.provider_config)
}

fn named(name: &str, configs: &Configs) -> anyhow::Result<Arc<dyn Provider>> {
    match PROVIDERS.iter().find(|(n, _)| *n == name) {
        Some((_, make)) => make(configs),
        None => Err(bad_input(format!("unknown provider `{name}`")).into()),
    }
}

/// The kernel profile rows of `provider` ran (their machines' kind), for
/// the KCIDB export; `None` for a provider this binary cannot make.
pub fn kernel_profile(provider: &str) -> Option<KernelProfile> {
    named(provider, &Configs::default())
        .ok()
        .map(|p| p.kernel_profile())
}

/// The EC2 provider from the spec's `[provider-config.ec2]` table; the
/// project's keys, converted for cloud-init, are read in its preflight.
#[cfg(feature = "ec2")]
fn ec2(configs: &Configs) -> anyhow::Result<Arc<dyn Provider>> {
    use lazyinit_ec2::userdata::KeyError;
    let cfg = ec2_config(configs)?;
    let load_keys: lazyinit_ec2::KeyLoader = Box::new(|| {
        let keys = lazyinit_ssh::Keys::load_or_create(&lazyinit_core::paths::state_dir())
            .map_err(|e| KeyError::Load(e.to_string()))?;
        lazyinit_ec2::GuestKeys::from_dropbear(
            &keys.host_private,
            &keys.host_public.public_line(),
            &keys.client_public,
        )
    });
    let p = lazyinit_ec2::Ec2Provider::new(cfg, load_keys)
        .map_err(|e| bad_input(format!("[provider-config.ec2]: {e}")))?;
    Ok(Arc::new(p))
}

#[cfg(not(feature = "ec2"))]
fn ec2(_configs: &Configs) -> anyhow::Result<Arc<dyn Provider>> {
    Err(bad_input(
        "this lazyinit-bench was built without the `ec2` feature: rebuild with default features",
    )
    .into())
}

/// The `[provider-config.ec2]` table, validated.
#[cfg(feature = "ec2")]
fn ec2_config(configs: &Configs) -> anyhow::Result<lazyinit_ec2::Ec2Config> {
    let table = configs
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

/// `cleanup`: EC2's sweep of tagged instances and volumes.
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
    let sweep = Sweep::new(a.run_id.clone(), a.expired, a.dry_run);
    let report = match lazyinit_ec2::cleanup(&c, &sweep, Pace::of(&cfg)).await {
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
pub async fn cleanup(_a: &super::cleanup::CleanupArgs) -> anyhow::Result<u8> {
    Err(lazyinit_core::exit::bad_input(
        "this lazyinit-bench was built without the `ec2` feature: rebuild with default features to use cleanup",
    )
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_provider_can_be_made_without_io() {
        for name in names() {
            let p = named(name, &Configs::default());
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
}
