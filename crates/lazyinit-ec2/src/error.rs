//! Errors of the EC2 provider, and how they map onto `ProviderError`.

use std::time::Duration;

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use lazyinit_core::provider::ProviderError;

#[derive(Debug, thiserror::Error)]
pub enum Ec2Error {
    #[error("EC2 {op} failed: {detail}")]
    Api {
        op: &'static str,
        /// The service's error code (`InvalidVolume.NotFound`), if any.
        code: Option<String>,
        detail: String,
    },
    #[error("timed out after {} waiting for {what} (last state: {last})", humantime::format_duration(*.waited))]
    Timeout {
        what: String,
        waited: Duration,
        last: String,
    },
    #[error("{what} went to state `{state}` instead of `{wanted}`")]
    UnexpectedState {
        what: String,
        state: String,
        wanted: String,
    },
    /// The endpoint took TCP but gave no (whole) answer within the budget.
    #[error("EC2 {op}: no answer within {budget}: check the endpoint, region and network (or raise api-timeout)")]
    NoAnswer { op: &'static str, budget: String },
    #[error("no AWS credentials: configure them (`aws configure`, AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) and rerun")]
    NoCredentials,
    #[error("no AMI for {arch}: {detail}")]
    NoAmi { arch: String, detail: String },
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Keys(#[from] crate::userdata::KeyError),
    #[error("{0}")]
    BadInput(String),
    /// The API answered something the harness cannot use.
    #[error("{0}")]
    Unexpected(String),
    #[error("cleanup left resources behind: {ids}; remove them with `{cleanup}`\n{errors}")]
    Leaked {
        ids: String,
        /// The command that removes them (`Ec2Config::cleanup_command`).
        cleanup: String,
        errors: String,
    },
}

impl Ec2Error {
    pub fn api<E, R>(op: &'static str, e: SdkError<E, R>) -> Ec2Error
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let timed_out = match &e {
            SdkError::TimeoutError(_) => true,
            SdkError::DispatchFailure(d) => d.is_timeout(),
            _ => false,
        };
        if timed_out {
            tracing::debug!("EC2 {op}: {}", DisplayErrorContext(&e));
            return Ec2Error::NoAnswer {
                op,
                budget: "the api-timeout".into(),
            };
        }
        Ec2Error::Api {
            op,
            code: e.code().map(str::to_string),
            detail: DisplayErrorContext(&e).to_string(),
        }
    }

    /// Names the budget a [`Ec2Error::NoAnswer`] ran out of.
    pub fn with_budget(self, budget: &crate::client::ApiBudget) -> Ec2Error {
        match self {
            Ec2Error::NoAnswer { op, .. } => Ec2Error::NoAnswer {
                op,
                budget: budget.to_string(),
            },
            other => other,
        }
    }

    /// The resource the call was about no longer exists: for teardown, done.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Ec2Error::Api { code: Some(c), .. } if c.ends_with(".NotFound"))
    }
}

impl From<Ec2Error> for ProviderError {
    fn from(e: Ec2Error) -> Self {
        match e {
            Ec2Error::Keys(crate::userdata::KeyError::Load(_)) => {
                ProviderError::infra(e.to_string())
            }
            Ec2Error::Config(_)
            | Ec2Error::Keys(_)
            | Ec2Error::BadInput(_)
            | Ec2Error::NoCredentials
            | Ec2Error::NoAmi { .. } => ProviderError::BadInput(e.to_string()),
            Ec2Error::Api { op, code, detail } => ProviderError::Infrastructure {
                message: format!(
                    "EC2 {op} failed{}",
                    code.map(|c| format!(" ({c})")).unwrap_or_default()
                ),
                detail,
            },
            other => ProviderError::infra(other.to_string()),
        }
    }
}

/// As the provider's error says it: the spec's, the keys' (one that cannot
/// be loaded aside), credentials and AMIs are the input's (2), the rest 3.
impl lazyinit_core::exit::ExitCode for Ec2Error {
    fn exit_code(&self) -> u8 {
        use lazyinit_core::exit::{BAD_INPUT, INFRASTRUCTURE};
        match self {
            Ec2Error::Keys(crate::userdata::KeyError::Load(_)) => INFRASTRUCTURE,
            Ec2Error::Config(_)
            | Ec2Error::Keys(_)
            | Ec2Error::BadInput(_)
            | Ec2Error::NoCredentials
            | Ec2Error::NoAmi { .. } => BAD_INPUT,
            _ => INFRASTRUCTURE,
        }
    }
}

/// A `[provider-config.ec2]` the harness cannot use: 2.
impl lazyinit_core::exit::ExitCode for crate::config::ConfigError {
    fn exit_code(&self) -> u8 {
        lazyinit_core::exit::BAD_INPUT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazyinit_core::exit::ExitCode;

    #[test]
    fn not_found_codes_are_recognised() {
        let e = Ec2Error::Api {
            op: "DeleteVolume",
            code: Some("InvalidVolume.NotFound".into()),
            detail: String::new(),
        };
        assert!(e.is_not_found());
        let e = Ec2Error::Api {
            op: "DeleteVolume",
            code: Some("VolumeInUse".into()),
            detail: String::new(),
        };
        assert!(!e.is_not_found());
    }

    #[test]
    fn config_errors_are_bad_input() {
        let c = Ec2Error::Config(crate::config::ConfigError("expiry".into()));
        assert_eq!(c.exit_code(), lazyinit_core::exit::BAD_INPUT);
        let n = Ec2Error::NoAnswer {
            op: "DescribeInstances",
            budget: "30s".into(),
        };
        assert_eq!(n.exit_code(), lazyinit_core::exit::INFRASTRUCTURE);
        let e: ProviderError = Ec2Error::BadInput("no".into()).into();
        assert_eq!(e.exit_code(), lazyinit_core::exit::BAD_INPUT);
        let e: ProviderError = Ec2Error::Api {
            op: "RunInstances",
            code: Some("InsufficientInstanceCapacity".into()),
            detail: "try another AZ".into(),
        }
        .into();
        assert_eq!(e.exit_code(), lazyinit_core::exit::INFRASTRUCTURE);
        assert!(e
            .to_string()
            .contains("RunInstances failed (InsufficientInstanceCapacity)"));
        assert!(e.to_string().contains("try another AZ"));
    }
}
