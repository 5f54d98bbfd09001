//! Thin wrappers over the EC2 calls the provider and the sweep share:
//! each returns a small view of what the harness needs, and a
//! `*.NotFound` answer as `None` where "gone" is an answer.

use std::time::Duration;

use aws_sdk_ec2::types::{InstanceStateName, Tag, VolumeAttachmentState, VolumeState};
use aws_sdk_ec2::Client;

use crate::error::Ec2Error;
use crate::wait::{self, Probe};

#[derive(Debug, Clone, PartialEq)]
pub struct InstanceView {
    pub id: String,
    pub state: String,
    pub az: Option<String>,
    pub public_ip: Option<String>,
    pub private_ip: Option<String>,
    pub tags: Vec<Tag>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VolumeView {
    pub id: String,
    pub state: String,
    /// (instance id, attachment state) of each attachment.
    pub attachments: Vec<(String, String)>,
    pub tags: Vec<Tag>,
}

pub(crate) fn instance_view(i: &aws_sdk_ec2::types::Instance) -> InstanceView {
    InstanceView {
        id: i.instance_id().unwrap_or_default().to_string(),
        state: i
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_string())
            .unwrap_or_else(|| "unknown".into()),
        az: i
            .placement()
            .and_then(|p| p.availability_zone())
            .map(str::to_string),
        public_ip: i.public_ip_address().map(str::to_string),
        private_ip: i.private_ip_address().map(str::to_string),
        tags: i.tags().to_vec(),
    }
}

pub(crate) fn volume_view(v: &aws_sdk_ec2::types::Volume) -> VolumeView {
    VolumeView {
        id: v.volume_id().unwrap_or_default().to_string(),
        state: v
            .state()
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|| "unknown".into()),
        attachments: v
            .attachments()
            .iter()
            .map(|a| {
                (
                    a.instance_id().unwrap_or_default().to_string(),
                    a.state()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_else(|| "unknown".into()),
                )
            })
            .collect(),
        tags: v.tags().to_vec(),
    }
}

pub async fn describe_instance(c: &Client, id: &str) -> Result<Option<InstanceView>, Ec2Error> {
    match c.describe_instances().instance_ids(id).send().await {
        Ok(out) => Ok(out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find(|i| i.instance_id() == Some(id))
            .map(instance_view)),
        Err(e) => {
            let e = Ec2Error::api("DescribeInstances", e);
            if e.is_not_found() {
                Ok(None)
            } else {
                Err(e)
            }
        }
    }
}

pub async fn describe_volume(c: &Client, id: &str) -> Result<Option<VolumeView>, Ec2Error> {
    match c.describe_volumes().volume_ids(id).send().await {
        Ok(out) => Ok(out
            .volumes()
            .iter()
            .find(|v| v.volume_id() == Some(id))
            .map(volume_view)),
        Err(e) => {
            let e = Ec2Error::api("DescribeVolumes", e);
            if e.is_not_found() {
                Ok(None)
            } else {
                Err(e)
            }
        }
    }
}

/// Timing of every wait.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub interval: Duration,
    pub timeout: Duration,
}

impl Pace {
    pub fn of(cfg: &crate::config::Ec2Config) -> Pace {
        Pace {
            interval: cfg.poll_interval,
            timeout: cfg.state_timeout,
        }
    }
}

pub async fn wait_instance_running(
    c: &Client,
    id: &str,
    pace: Pace,
) -> Result<InstanceView, Ec2Error> {
    wait::until(id, "running", pace.interval, pace.timeout, || async {
        Ok(match describe_instance(c, id).await? {
            // Eventual consistency: a fresh id may not be visible yet.
            None => Probe::Pending("not visible yet".into()),
            Some(v) if v.state == InstanceStateName::Running.as_str() => Probe::Ready(v),
            Some(v) if v.state == InstanceStateName::Pending.as_str() => Probe::Pending(v.state),
            Some(v) => Probe::Failed(v.state),
        })
    })
    .await
}

pub async fn wait_instance_gone(c: &Client, id: &str, pace: Pace) -> Result<(), Ec2Error> {
    wait::until(id, "terminated", pace.interval, pace.timeout, || async {
        Ok(match describe_instance(c, id).await? {
            None => Probe::Ready(()),
            Some(v) if v.state == InstanceStateName::Terminated.as_str() => Probe::Ready(()),
            Some(v) => Probe::Pending(v.state),
        })
    })
    .await
}

pub async fn wait_volume_available(c: &Client, id: &str, pace: Pace) -> Result<(), Ec2Error> {
    wait::until(id, "available", pace.interval, pace.timeout, || async {
        Ok(match describe_volume(c, id).await? {
            None => Probe::Pending("not visible yet".into()),
            Some(v) if v.state == VolumeState::Available.as_str() => Probe::Ready(()),
            Some(v) if v.state == VolumeState::Creating.as_str() => Probe::Pending(v.state),
            Some(v) => Probe::Failed(v.state),
        })
    })
    .await
}

/// Until the volume is in use and its attachment to `instance` is `attached`.
pub async fn wait_volume_attached(
    c: &Client,
    id: &str,
    instance: &str,
    pace: Pace,
) -> Result<(), Ec2Error> {
    wait::until(id, "attached", pace.interval, pace.timeout, || async {
        let Some(v) = describe_volume(c, id).await? else {
            return Ok(Probe::Failed("deleted".into()));
        };
        let att = v.attachments.iter().find(|(i, _)| i == instance);
        Ok(match att {
            Some((_, s)) if s == VolumeAttachmentState::Attached.as_str() => Probe::Ready(()),
            Some((_, s)) if s == VolumeAttachmentState::Attaching.as_str() => {
                Probe::Pending(format!("{} / attaching", v.state))
            }
            None if v.state == VolumeState::Available.as_str() => {
                Probe::Pending(format!("{} / not attached yet", v.state))
            }
            Some((_, s)) => Probe::Failed(format!("{} / {s}", v.state)),
            None => Probe::Failed(v.state),
        })
    })
    .await
}

/// Deletes a volume once nothing holds it: waits while it is attached to
/// an instance that is going away (or detaching), then deletes. Gone is
/// success.
pub async fn delete_volume_when_free(c: &Client, id: &str, pace: Pace) -> Result<(), Ec2Error> {
    let free = wait::until(
        id,
        "available or deleted",
        pace.interval,
        pace.timeout,
        || async {
            Ok(match describe_volume(c, id).await? {
                None => Probe::Ready(false),
                Some(v) if v.state == VolumeState::Available.as_str() => Probe::Ready(true),
                Some(v) if v.state == VolumeState::Deleted.as_str() => Probe::Ready(false),
                Some(v) if v.state == VolumeState::Deleting.as_str() => Probe::Ready(false),
                Some(v) => Probe::Pending(v.state),
            })
        },
    )
    .await?;
    if free {
        if let Err(e) = c.delete_volume().volume_id(id).send().await {
            let e = Ec2Error::api("DeleteVolume", e);
            if !e.is_not_found() {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Terminates one instance; already gone is success.
pub async fn terminate(c: &Client, id: &str) -> Result<(), Ec2Error> {
    match c.terminate_instances().instance_ids(id).send().await {
        Ok(_) => Ok(()),
        Err(e) => {
            let e = Ec2Error::api("TerminateInstances", e);
            if e.is_not_found() {
                Ok(())
            } else {
                Err(e)
            }
        }
    }
}
