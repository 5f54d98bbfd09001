//! The SDK client: standard credential chain, profile, region, endpoint
//! override, and a counter of the API calls it makes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_config::{BehaviorVersion, Region};
use aws_sdk_ec2::config::interceptors::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_ec2::config::{ConfigBag, Credentials, Intercept, RuntimeComponents};
use aws_sdk_ec2::error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

use crate::config::Ec2Config;

/// Calls (operations) and attempts (HTTP requests, retries included) per
/// EC2 operation name, counted by an SDK interceptor so nothing that goes
/// through the client escapes it.
#[derive(Debug, Clone, Default)]
pub struct ApiCounter {
    inner: Arc<Mutex<Counts>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub calls: BTreeMap<String, u64>,
    pub attempts: BTreeMap<String, u64>,
}

impl Counts {
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }
    /// `self - earlier`, per operation, dropping zeros.
    pub fn since(&self, earlier: &Counts) -> Counts {
        let diff = |now: &BTreeMap<String, u64>, then: &BTreeMap<String, u64>| {
            now.iter()
                .map(|(k, v)| (k.clone(), v - then.get(k).copied().unwrap_or(0)))
                .filter(|(_, v)| *v > 0)
                .collect()
        };
        Counts {
            calls: diff(&self.calls, &earlier.calls),
            attempts: diff(&self.attempts, &earlier.attempts),
        }
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.calls.iter().map(|(k, v)| format!("{k}={v}")).collect();
        write!(f, "{} calls ({})", self.total_calls(), parts.join(", "))
    }
}

impl ApiCounter {
    pub fn snapshot(&self) -> Counts {
        self.inner.lock().expect("counter lock").clone()
    }
    fn bump(&self, cfg: &ConfigBag, attempt: bool) {
        let op = cfg
            .load::<Metadata>()
            .map(|m| m.name().to_string())
            .unwrap_or_else(|| "unknown".into());
        let mut c = self.inner.lock().expect("counter lock");
        let map = if attempt {
            &mut c.attempts
        } else {
            &mut c.calls
        };
        *map.entry(op).or_default() += 1;
    }
}

impl Intercept for ApiCounter {
    fn name(&self) -> &'static str {
        "lazyinit-api-counter"
    }
    // Once per operation. Not read_before_execution: for client-level
    // interceptors that runs before the operation's metadata is in the bag.
    fn read_before_serialization(
        &self,
        _ctx: &BeforeSerializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.bump(cfg, false);
        Ok(())
    }
    fn read_before_transmit(
        &self,
        _ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.bump(cfg, true);
        Ok(())
    }
}

/// Builds the EC2 client. `credentials` overrides the standard chain (env,
/// profile, SSO, instance role); tests pass dummy ones for the emulator.
pub async fn build(
    cfg: &Ec2Config,
    credentials: Option<Credentials>,
    counter: ApiCounter,
) -> aws_sdk_ec2::Client {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(r) = &cfg.region {
        loader = loader.region(Region::new(r.clone()));
    }
    if let Some(p) = &cfg.profile {
        loader = loader.profile_name(p);
    }
    if let Some(url) = &cfg.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    if let Some(c) = credentials {
        loader = loader.credentials_provider(c);
    }
    let shared = loader.load().await;
    let conf = aws_sdk_ec2::config::Builder::from(&shared)
        .interceptor(counter)
        .build();
    aws_sdk_ec2::Client::from_conf(conf)
}

/// Every EC2 action the harness calls, and `CreateTags`, which IAM requires
/// for tag-on-create (TagSpecifications) although no CreateTags call is
/// made. `terraform/iam.tf` must grant exactly these (checked by a test),
/// and the emulator tests check that the counter saw nothing else.
pub const IAM_ACTIONS: &[&str] = &[
    "AttachVolume",
    "CreateTags",
    "CreateVolume",
    "DeleteVolume",
    "DescribeImages",
    "DescribeInstanceTypes",
    "DescribeInstances",
    "DescribeVolumes",
    "DetachVolume",
    "GetConsoleOutput",
    "ModifyInstanceAttribute",
    "RunInstances",
    "TerminateInstances",
];
