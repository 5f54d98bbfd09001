//! `Ec2Provider`: one instance and one EBS volume per cell.
//!
//! Per cell: RunInstances (shutdown behaviour terminate, IMDSv2 only, user
//! data with the run's keys and the expiry timer, tags), wait running,
//! CreateVolume in the instance's AZ, wait available, AttachVolume, wait
//! attached, mark the volume delete-on-termination (so the instance's own
//! expiry takes the volume with it), then ask the [`InstanceResolver`]
//! where SSH answers. Any failure on the way tears down what exists.
//!
//! Making a provider does no I/O: the SDK client (which may ask the
//! instance metadata service for a region) is made at the first API call
//! and the keys are read in `preflight`, so `plan` can make one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_ec2::config::Credentials;
use aws_sdk_ec2::types::{
    EbsInstanceBlockDeviceSpecification, Filter, HttpTokensState,
    InstanceBlockDeviceMappingSpecification, InstanceMetadataEndpointState,
    InstanceMetadataOptionsRequest, InstanceType, ResourceType, ShutdownBehavior, VolumeType,
};
use aws_sdk_ec2::Client;
use chrono::Utc;
use lazyinit_core::provider::{
    CellEstimate, Cost, LaunchRequest, Machine, Provider, ProviderError,
};
use lazyinit_core::{Arch, ByteSize, Cell, KernelProfile};
use tokio::sync::OnceCell;

use crate::client::{self, ApiCounter};
use crate::config::Ec2Config;
use crate::error::Ec2Error;
use crate::machine::{Ec2Machine, LaunchRecord};
use crate::nvme;
use crate::ops::{self, Pace};
use crate::reach::{InstanceAddress, InstanceResolver};
use crate::resources::{self, Guard, Registry};
use crate::tags::{rfc3339, ResourceTags};
use crate::userdata::{self, GuestKeys, KeyError};

/// gp2/gp3/io1/io2 volumes hold at most 16 TiB.
const MAX_VOLUME_GIB: u64 = 16384;

/// Reads the project's keys for instances (dropbear host key converted).
pub type KeyLoader = Box<dyn Fn() -> Result<GuestKeys, KeyError> + Send + Sync>;

pub struct Ec2Provider {
    cfg: Arc<Ec2Config>,
    keys: OnceCell<GuestKeys>,
    load_keys: KeyLoader,
    client: OnceCell<Client>,
    credentials: Option<Credentials>,
    counter: ApiCounter,
    registry: Arc<Registry>,
    resolver: Arc<dyn InstanceResolver>,
    amis: Mutex<BTreeMap<Arch, String>>,
    /// Run id of the last launch, for the cleanup hint of `release_all`.
    last_run: Mutex<String>,
}

/// EBS sizes are whole GiB; a cell's volume rounds up.
pub fn volume_gib(size: ByteSize) -> u64 {
    size.0.div_ceil(lazyinit_core::size::GIB)
}

impl Ec2Provider {
    /// Standard credential chain (environment, profile, SSO, instance
    /// role); the keys are read by `load_keys` in `preflight`.
    pub fn new(cfg: Ec2Config, load_keys: KeyLoader) -> Result<Self, Ec2Error> {
        Self::build(cfg, load_keys, None)
    }

    /// Given keys and fixed credentials, e.g. dummy ones for an emulator.
    pub fn with_credentials(
        cfg: Ec2Config,
        keys: GuestKeys,
        creds: Credentials,
    ) -> Result<Self, Ec2Error> {
        keys.validate()?;
        Self::build(cfg, Box::new(move || Ok(keys.clone())), Some(creds))
    }

    fn build(
        cfg: Ec2Config,
        load_keys: KeyLoader,
        credentials: Option<Credentials>,
    ) -> Result<Self, Ec2Error> {
        cfg.validate()?;
        let resolver = Arc::new(InstanceAddress {
            use_private_ip: cfg.use_private_ip,
        });
        Ok(Ec2Provider {
            cfg: Arc::new(cfg),
            keys: OnceCell::new(),
            load_keys,
            client: OnceCell::new(),
            credentials,
            counter: ApiCounter::default(),
            registry: Arc::default(),
            resolver,
            amis: Mutex::default(),
            last_run: Mutex::default(),
        })
    }

    /// Reaches instances through `resolver` instead of their own address:
    /// for a test twin, whose instances are played by local guests (see
    /// [`crate::reach`]). Production code never calls this.
    pub fn with_instance_resolver(mut self, resolver: Arc<dyn InstanceResolver>) -> Self {
        self.resolver = resolver;
        self
    }

    pub fn config(&self) -> &Ec2Config {
        &self.cfg
    }
    /// The SDK client, made at the first call.
    pub async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| {
                client::build(&self.cfg, self.credentials.clone(), self.counter.clone())
            })
            .await
    }

    /// The keys instances carry, read once.
    async fn keys(&self) -> Result<&GuestKeys, Ec2Error> {
        self.keys
            .get_or_try_init(|| async { Ok((self.load_keys)()?) })
            .await
    }
    pub fn counter(&self) -> &ApiCounter {
        &self.counter
    }
    /// Ids created by this provider and not yet confirmed gone.
    pub fn live_ids(&self) -> Vec<String> {
        self.registry.live_ids()
    }

    fn pace(&self) -> Pace {
        Pace::of(&self.cfg)
    }

    fn budget(&self) -> client::ApiBudget {
        client::ApiBudget::of(&self.cfg)
    }

    /// Tears down everything this provider still owns and waits for
    /// background cleanups. Call it on Ctrl-C and at the end of a run.
    pub async fn release_all(&self) -> Result<(), Ec2Error> {
        let run = self.last_run.lock().expect("run").clone();
        let Some(client) = self.client.get() else {
            return Ok(()); // no call made, nothing made
        };
        let cleanup = self.cfg.cleanup_command(&run);
        resources::release_all(client, &self.registry, self.pace(), &cleanup).await
    }

    /// The configured AMI for `arch`, or the newest image matching the
    /// lookup filter with that architecture. Cached per provider.
    pub async fn resolve_ami(&self, arch: Arch) -> Result<String, Ec2Error> {
        if let Some(a) = self.amis.lock().expect("amis").get(&arch) {
            return Ok(a.clone());
        }
        let lookup = &self.cfg.ami.lookup;
        let mut req = self.client().await.describe_images();
        if let Some(fixed) = self.cfg.ami.fixed(arch) {
            req = req.image_ids(fixed);
        } else {
            req = req
                .owners(&lookup.owner)
                .filters(Filter::builder().name("name").values(&lookup.name).build())
                .filters(Filter::builder().name("state").values("available").build());
        }
        let req = req.filters(
            Filter::builder()
                .name("architecture")
                .values(arch.to_string())
                .build(),
        );
        let out = req
            .send()
            .await
            .map_err(|e| Ec2Error::api("DescribeImages", e))?;
        // The architecture is checked here too: a fixed id is returned
        // whatever the filter says by some endpoints. ISO 8601 creation
        // dates sort as strings.
        let newest = out
            .images()
            .iter()
            .filter(|i| i.image_id().is_some())
            .filter(|i| i.architecture().map(|a| a.as_str()) == Some(arch.to_string().as_str()))
            .max_by_key(|i| i.creation_date().unwrap_or_default().to_string())
            .and_then(|i| i.image_id())
            .map(str::to_string);
        let ami = newest.ok_or_else(|| Ec2Error::NoAmi {
            arch: arch.to_string(),
            detail: match self.cfg.ami.fixed(arch) {
                Some(f) => format!("{f} does not exist in this region or is not {arch}"),
                None => format!(
                    "no available image of owner {} named `{}`; set ami.{arch} or ami.lookup",
                    lookup.owner, lookup.name
                ),
            },
        })?;
        self.amis.lock().expect("amis").insert(arch, ami.clone());
        Ok(ami)
    }

    /// Checks that the instance type exists and runs `arch`.
    async fn check_instance_type(&self, arch: Arch) -> Result<(), Ec2Error> {
        let ty = self.cfg.instance_types.get(arch);
        let out = self
            .client()
            .await
            .describe_instance_types()
            .instance_types(InstanceType::from(ty))
            .send()
            .await
            .map_err(|e| Ec2Error::api("DescribeInstanceTypes", e))?;
        let archs: Vec<String> = out
            .instance_types()
            .iter()
            .filter_map(|t| t.processor_info())
            .flat_map(|p| p.supported_architectures())
            .map(|a| a.as_str().to_string())
            .collect();
        if !archs.iter().any(|a| a == &arch.to_string()) {
            return Err(Ec2Error::BadInput(format!(
                "instance type {ty} runs [{}], not {arch}: set instance-types.{arch}",
                archs.join(", ")
            )));
        }
        Ok(())
    }

    // Long: the AWS steps in the order they happen, each registered with the one guard that undoes them all.
    async fn launch_inner(
        &self,
        req: &LaunchRequest,
        guard: &Guard,
    ) -> Result<LaunchRecord, Ec2Error> {
        let cell = &req.cell;
        let arch = cell.arch;
        let ami = self.resolve_ami(arch).await?;
        let instance_type = self.cfg.instance_types.get(arch).to_string();
        let expires_at = Utc::now()
            + chrono::Duration::from_std(self.cfg.expiry).expect("validated expiry fits");
        let tags = ResourceTags {
            run_id: req.run_id.clone(),
            cell: cell.id(),
            owner: self.cfg.owner_tag(),
            expires_at,
        };
        let user_data = userdata::cloud_config(self.keys().await?, expires_at)?;
        let client = self.client().await;
        let token = client_token(&req.run_id, &cell.id());

        let out = client
            .run_instances()
            .image_id(&ami)
            .instance_type(InstanceType::from(instance_type.as_str()))
            .min_count(1)
            .max_count(1)
            .user_data(userdata::encode(&user_data))
            .instance_initiated_shutdown_behavior(ShutdownBehavior::Terminate)
            // IMDSv2 only, one hop: the user data (with the run's host key)
            // is served to a session-token holder on the instance itself,
            // never to a plain GET or a forwarded request.
            .metadata_options(
                InstanceMetadataOptionsRequest::builder()
                    .http_endpoint(InstanceMetadataEndpointState::Enabled)
                    .http_tokens(HttpTokensState::Required)
                    .http_put_response_hop_limit(1)
                    .build(),
            )
            .set_subnet_id(self.cfg.subnet_id.clone())
            .set_security_group_ids(self.cfg.security_group_id.clone().map(|s| vec![s]))
            .set_key_name(self.cfg.key_name.clone())
            .tag_specifications(tags.spec(ResourceType::Instance))
            .tag_specifications(tags.spec(ResourceType::Volume))
            // Makes the SDK's retries of a lost answer idempotent: without
            // it a retry could start a second instance nobody knows of.
            .client_token(format!("{token}-i"))
            .send()
            .await
            .map_err(|e| Ec2Error::api("RunInstances", e))?;
        let instance_id = out
            .instances()
            .first()
            .and_then(|i| i.instance_id())
            .ok_or_else(|| {
                Ec2Error::Unexpected("RunInstances answered without an instance".into())
            })?
            .to_string();
        guard.set_instance(&instance_id);
        tracing::info!(
            "{}: instance {instance_id} ({instance_type}, {ami})",
            cell.id()
        );

        let view = ops::wait_instance_running(client, &instance_id, self.pace()).await?;
        let az = view.az.clone().ok_or_else(|| {
            Ec2Error::Unexpected(format!("instance {instance_id} has no availability zone"))
        })?;

        let out = client
            .create_volume()
            .availability_zone(&az)
            .size(volume_gib(cell.volume) as i32)
            .volume_type(VolumeType::from(self.cfg.volume.volume_type.as_str()))
            .set_iops(self.cfg.volume.iops)
            .set_throughput(self.cfg.volume.throughput)
            .tag_specifications(tags.spec(ResourceType::Volume))
            .client_token(format!("{token}-v"))
            .send()
            .await
            .map_err(|e| Ec2Error::api("CreateVolume", e))?;
        let volume_id = out
            .volume_id()
            .ok_or_else(|| {
                Ec2Error::Unexpected("CreateVolume answered without a volume id".into())
            })?
            .to_string();
        guard.set_volume(&volume_id);
        tracing::info!(
            "{}: volume {volume_id} ({}) in {az}",
            cell.id(),
            cell.volume
        );
        ops::wait_volume_available(client, &volume_id, self.pace()).await?;

        let device = self.cfg.device_name.clone();
        client
            .attach_volume()
            .device(&device)
            .instance_id(&instance_id)
            .volume_id(&volume_id)
            .send()
            .await
            .map_err(|e| Ec2Error::api("AttachVolume", e))?;
        ops::wait_volume_attached(client, &volume_id, &instance_id, self.pace()).await?;

        client
            .modify_instance_attribute()
            .instance_id(&instance_id)
            .block_device_mappings(
                InstanceBlockDeviceMappingSpecification::builder()
                    .device_name(&device)
                    .ebs(
                        EbsInstanceBlockDeviceSpecification::builder()
                            .delete_on_termination(true)
                            .build(),
                    )
                    .build(),
            )
            .send()
            .await
            .map_err(|e| Ec2Error::api("ModifyInstanceAttribute", e))?;

        let (host, ssh_port) = self.resolver.ssh_endpoint(&view).await?;
        Ok(LaunchRecord {
            instance_id,
            instance_type,
            ami,
            availability_zone: az,
            nvme_serial: nvme::serial(&volume_id),
            volume_id,
            attach_device: device,
            host,
            ssh_port,
            platform: self.resolver.platform(),
            expires_at: rfc3339(expires_at),
            expires_at_unix: expires_at.timestamp(),
        })
    }
}

/// The last word when a provider goes away with resources still
/// registered (a run that ended without `release_all`): name them and
/// the sweep that removes them. Guards may still be tearing them down.
impl Drop for Ec2Provider {
    fn drop(&mut self) {
        let ids = self.registry.live_ids();
        if !ids.is_empty() {
            let run = self.last_run.lock().map(|r| r.clone()).unwrap_or_default();
            tracing::error!(
                "EC2 resources may outlive this run: {}; remove them with `{}`",
                ids.join(", "),
                self.cfg.cleanup_command(&run)
            );
        }
    }
}

/// Unique per launch attempt, at most 64 ASCII characters.
fn client_token(run_id: &str, cell: &str) -> String {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let h = lazyinit_core::paths::sha256_hex(format!(
        "{run_id}/{cell}/{nanos}/{seq}/{}",
        std::process::id()
    ));
    format!("lazyinit-{}", &h[..40])
}

#[async_trait]
impl Provider for Ec2Provider {
    fn name(&self) -> &str {
        "ec2"
    }

    /// NVMe and ENA besides virtio: the `cloud` kernel.
    fn kernel_profile(&self) -> KernelProfile {
        KernelProfile::Cloud
    }

    /// Instance and volume time at the configured prices, and the API
    /// calls a run makes (see [`cost::api_calls`]).
    fn cost(
        &self,
        cells: &[CellEstimate<'_>],
        _storage: &lazyinit_core::StorageProfile,
        _concurrency: usize,
    ) -> Result<Cost, ProviderError> {
        let plain: Vec<Cell> = cells.iter().map(|c| c.cell.clone()).collect();
        let lazyinit: Vec<_> = cells.iter().map(|c| c.lazyinit).collect();
        let est = crate::cost::estimate(&plain, &lazyinit, &self.cfg)?;
        Ok(Cost::Cloud {
            instance_hours: est.instance_hours,
            volume_gb_hours: est.volume_gb_hours,
            usd: est.usd,
            api_calls: crate::cost::api_calls(&plain),
        })
    }

    /// The EBS volume is the storage: `ebs` (the default) and `none` both
    /// mean it as it is; nothing can be held or calibrated. A volume is 1
    /// GiB to 16 TiB.
    fn refuse(
        &self,
        cells: &[Cell],
        storage: &lazyinit_core::StorageProfile,
    ) -> Result<(), ProviderError> {
        use lazyinit_core::StorageProfile;
        match storage {
            StorageProfile::None | StorageProfile::Ebs { z1: None, noise: None } => {}
            other => {
                return Err(ProviderError::BadInput(format!(
                    "storage profile `{other}` is not available on EC2: the EBS volume is the storage (use `ebs` or `none`)"
                )))
            }
        }
        for cell in cells {
            let gib = volume_gib(cell.volume);
            if gib == 0 || gib > MAX_VOLUME_GIB {
                return Err(ProviderError::BadInput(format!(
                    "{}: an EBS volume holds 1 GiB to 16 TiB, not {}",
                    cell.id(),
                    cell.volume
                )));
            }
        }
        Ok(())
    }

    async fn preflight(
        &self,
        cells: &[Cell],
        storage: &lazyinit_core::StorageProfile,
    ) -> Result<(), ProviderError> {
        self.refuse(cells, storage)?;
        // Read now, so a missing dropbearconvert fails before any build.
        self.keys().await?;
        self.client
            .get_or_try_init(|| {
                client::build_checked(&self.cfg, self.credentials.clone(), self.counter.clone())
            })
            .await?;
        let mut archs: Vec<Arch> = cells.iter().map(|c| c.arch).collect();
        archs.sort();
        archs.dedup();
        for arch in archs {
            let checked = match self.check_instance_type(arch).await {
                Ok(()) => self.resolve_ami(arch).await.map(|_| ()),
                Err(e) => Err(e),
            };
            checked.map_err(|e| e.with_budget(&self.budget()))?;
        }
        Ok(())
    }

    /// Retries what a cell's teardown could not remove and waits for the
    /// teardowns of dropped machines; what is still left is named with the
    /// command that removes it.
    async fn finish(&self) -> Result<(), ProviderError> {
        Ok(self.release_all().await?)
    }

    async fn launch(&self, req: &LaunchRequest) -> Result<Box<dyn Machine>, ProviderError> {
        self.refuse(std::slice::from_ref(&req.cell), &req.storage_profile)?;
        *self.last_run.lock().expect("run") = req.run_id.clone();
        let mut guard = Guard::new(
            self.client().await.clone(),
            self.registry.clone(),
            self.pace(),
            &self.cfg.cleanup_command(&req.run_id),
        );
        let launched = self
            .launch_inner(req, &guard)
            .await
            .map_err(|e| e.with_budget(&self.budget()));
        let record = match launched {
            Ok(r) => r,
            Err(e) => {
                let err: ProviderError = e.into();
                return Err(match guard.release().await {
                    Ok(()) => err,
                    Err(leak) => ProviderError::infra(format!("{err}\nand then: {leak}")),
                });
            }
        };
        // The launch record is the only note of what this cell owns: a
        // launch that cannot keep it fails and gives what it made back.
        let json = serde_json::to_string_pretty(&record).unwrap_or_default();
        let kept = req
            .folder
            .create()
            .and_then(|()| req.folder.put(lazyinit_core::CellFolder::EC2_JSON, json));
        if let Err(e) = kept {
            let err = ProviderError::Write(e);
            return Err(match guard.release().await {
                Ok(()) => err,
                Err(leak) => ProviderError::infra(format!(
                    "{}\nand then: {leak}",
                    lazyinit_core::exit::chain_text(&err)
                )),
            });
        }
        Ok(Box::new(Ec2Machine {
            guard,
            client: self.client().await.clone(),
            kexec: crate::machine::kexec_plan(req.cell.arch, record.expires_at_unix),
            record,
            user: self.cfg.ssh_user.clone(),
            folder: req.folder.clone(),
            console: Arc::default(),
            torn_down: false,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_sizes_round_up_to_gib() {
        assert_eq!(volume_gib("2TiB".parse().unwrap()), 2048);
        assert_eq!(volume_gib("3TiB".parse().unwrap()), 3072);
        assert_eq!(volume_gib("1500MiB".parse().unwrap()), 2);
    }

    #[test]
    fn client_tokens_are_short_and_unique() {
        let a = client_token("r1", "cell");
        let b = client_token("r1", "cell");
        assert!(a.len() + 2 <= 64 && a.is_ascii());
        assert_ne!(a, b);
    }
}
