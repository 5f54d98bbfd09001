//! The SDK client: standard credential chain, profile, region, endpoint
//! override, a time budget for every call ([`ApiBudget`]), and a counter
//! of the API calls it makes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_ec2::config::interceptors::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_ec2::config::{
    ConfigBag, Credentials, Intercept, ProvideCredentials, RuntimeComponents,
};
use aws_sdk_ec2::error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

use crate::config::Ec2Config;
use crate::error::Ec2Error;

/// How long one EC2 API call may take: a TCP connect, a wait for the next
/// byte of an answer, one attempt, and the whole operation with its
/// retries. Without these an endpoint that accepts and never answers held
/// `cleanup` and `run` forever (the SDK's defaults bound only the connect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiBudget {
    pub connect: Duration,
    pub read: Duration,
    pub attempt: Duration,
    /// Every attempt and the pauses between them (`api-timeout`).
    pub operation: Duration,
    /// Attempts per operation, the first included (standard retry mode:
    /// throttling, 5xx and timeouts are retried, with backoff).
    pub attempts: u32,
}

impl ApiBudget {
    /// The budget of `cfg`: its `api-timeout` for the operation; no part
    /// longer than the whole.
    pub fn of(cfg: &Ec2Config) -> ApiBudget {
        let op = cfg.api_timeout;
        // An EC2 call answers in well under a second; 10 s without a byte
        // is a dead endpoint, and three such attempts fit in the default
        // 40 s operation.
        ApiBudget {
            connect: Duration::from_secs(5).min(op),
            read: Duration::from_secs(10).min(op),
            attempt: Duration::from_secs(12).min(op),
            operation: op,
            attempts: 3,
        }
    }

    pub fn timeouts(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .read_timeout(self.read)
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }

    pub fn retries(&self) -> RetryConfig {
        RetryConfig::standard()
            .with_max_attempts(self.attempts)
            .with_initial_backoff(Duration::from_millis(500))
            .with_max_backoff(Duration::from_secs(5))
    }
}

impl std::fmt::Display for ApiBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        write!(
            f,
            "{} per call ({} attempts, connect {}, read {})",
            d(self.operation),
            self.attempts,
            d(self.connect),
            d(self.read)
        )
    }
}

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
    client_of(&shared(cfg, credentials).await, counter)
}

/// [`build`], having asked the credential chain for credentials once, so
/// that a machine without any gets one line saying what to configure
/// rather than the chain's every attempt at the first API call.
pub async fn build_checked(
    cfg: &Ec2Config,
    credentials: Option<Credentials>,
    counter: ApiCounter,
) -> Result<aws_sdk_ec2::Client, Ec2Error> {
    let shared = shared(cfg, credentials).await;
    let Some(provider) = shared.credentials_provider() else {
        return Err(Ec2Error::NoCredentials);
    };
    if let Err(e) = provider.provide_credentials().await {
        tracing::debug!(
            "no credentials: {}",
            aws_sdk_ec2::error::DisplayErrorContext(&e)
        );
        return Err(Ec2Error::NoCredentials);
    }
    Ok(client_of(&shared, counter))
}

async fn shared(cfg: &Ec2Config, credentials: Option<Credentials>) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(https_client());
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
    let budget = ApiBudget::of(cfg);
    loader
        .timeout_config(budget.timeouts())
        .retry_config(budget.retries())
        .load()
        .await
}

/// HTTPS with rustls on ring (the SDK's default features, which would
/// pick aws-lc, are off: see the workspace's Cargo.toml). Plain HTTP still
/// works for an `endpoint_url` such as the emulator's on loopback.
fn https_client() -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

fn client_of(shared: &aws_config::SdkConfig, counter: ApiCounter) -> aws_sdk_ec2::Client {
    let conf = aws_sdk_ec2::config::Builder::from(shared)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_has_a_bounded_budget() {
        let cfg = Ec2Config::default();
        let b = ApiBudget::of(&cfg);
        assert_eq!(b.operation, Duration::from_secs(40));
        let t = b.timeouts();
        assert_eq!(t.connect_timeout(), Some(Duration::from_secs(5)));
        assert_eq!(t.read_timeout(), Some(Duration::from_secs(10)));
        assert_eq!(t.operation_attempt_timeout(), Some(Duration::from_secs(12)));
        assert_eq!(t.operation_timeout(), Some(Duration::from_secs(40)));
        assert_eq!(b.retries().max_attempts(), 3);
        // A short api-timeout bounds every part.
        let short = Ec2Config {
            api_timeout: Duration::from_secs(3),
            ..Ec2Config::default()
        };
        let b = ApiBudget::of(&short);
        assert!([b.connect, b.read, b.attempt]
            .iter()
            .all(|d| *d <= b.operation));
        assert_eq!(
            b.to_string(),
            "3s per call (3 attempts, connect 3s, read 3s)"
        );
    }
}
