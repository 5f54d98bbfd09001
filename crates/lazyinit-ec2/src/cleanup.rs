//! The sweep: finds this project's instances and volumes by tag (of one
//! run, or past their expiry) and removes them. The last line of defence
//! behind the per-cell teardown and the instances' own expiry timer.

use aws_sdk_ec2::Client;
use chrono::{DateTime, Utc};

use crate::error::Ec2Error;
use crate::ops::{self, InstanceView, Pace, VolumeView};
use crate::tags::{self, tag_value};

/// Which tagged resources to remove: those of `run_id`, those past their
/// `ExpiresAt`, or both (a resource matching either is selected), and of
/// those only the ones whose `Owner` tag is `owner`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    pub run_id: Option<String>,
    pub expired: bool,
    /// The caller's `Owner` tag; `None` sweeps every owner's resources
    /// (`--all-owners`). Two people running the same spec share run ids,
    /// and one's expired resources are not another's to remove.
    pub owner: Option<String>,
    pub now: DateTime<Utc>,
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub id: String,
    pub state: String,
    pub run_id: String,
    pub cell: String,
    pub owner: String,
    pub expires_at: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupReport {
    pub instances: Vec<Found>,
    pub volumes: Vec<Found>,
    /// Ids that could not be removed, with the reason.
    pub failed: Vec<(String, String)>,
    pub dry_run: bool,
}

impl CleanupReport {
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty() && self.volumes.is_empty()
    }
    /// Lines for the terminal, one per resource.
    pub fn render(&self) -> String {
        let verb = if self.dry_run {
            "would remove"
        } else {
            "removed"
        };
        let mut s = String::new();
        for (kind, list) in [("instance", &self.instances), ("volume", &self.volumes)] {
            for f in list {
                if self.failed.iter().any(|(id, _)| id == &f.id) {
                    continue;
                }
                s.push_str(&format!(
                    "{verb} {kind} {} ({}) run={} cell={} owner={} expires={}\n",
                    f.id, f.state, f.run_id, f.cell, f.owner, f.expires_at
                ));
            }
        }
        for (id, why) in &self.failed {
            s.push_str(&format!("FAILED to remove {id}: {why}\n"));
        }
        if s.is_empty() {
            s.push_str("nothing to remove\n");
        }
        s
    }
}

impl Sweep {
    /// A sweep as of now.
    pub fn new(
        run_id: Option<String>,
        expired: bool,
        owner: Option<String>,
        dry_run: bool,
    ) -> Sweep {
        Sweep {
            run_id,
            expired,
            owner,
            now: Utc::now(),
            dry_run,
        }
    }

    pub fn selects(&self, tags: &[aws_sdk_ec2::types::Tag]) -> bool {
        let of_run = self
            .run_id
            .as_deref()
            .is_some_and(|r| tag_value(tags, tags::RUN_ID) == Some(r));
        let mine = self
            .owner
            .as_deref()
            .is_none_or(|o| tag_value(tags, tags::OWNER) == Some(o));
        mine && (of_run || (self.expired && tags::is_expired(tags, self.now)))
    }
}

fn found(id: &str, state: &str, t: &[aws_sdk_ec2::types::Tag]) -> Found {
    let get = |k| tag_value(t, k).unwrap_or("-").to_string();
    Found {
        id: id.to_string(),
        state: state.to_string(),
        run_id: get(tags::RUN_ID),
        cell: get(tags::CELL),
        owner: get(tags::OWNER),
        expires_at: get(tags::EXPIRES_AT),
    }
}

/// Project-tagged instances that are not terminated yet.
pub async fn project_instances(
    c: &Client,
    run_id: Option<&str>,
) -> Result<Vec<InstanceView>, Ec2Error> {
    let mut out = Vec::new();
    let mut pages = c
        .describe_instances()
        .set_filters(Some(tags::project_filters(run_id)))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| Ec2Error::api("DescribeInstances", e))?;
        for r in page.reservations() {
            out.extend(r.instances().iter().map(ops::instance_view));
        }
    }
    out.retain(|i| i.state != "terminated");
    Ok(out)
}

/// Project-tagged volumes (every state but deleted).
pub async fn project_volumes(
    c: &Client,
    run_id: Option<&str>,
) -> Result<Vec<VolumeView>, Ec2Error> {
    let mut out = Vec::new();
    let mut pages = c
        .describe_volumes()
        .set_filters(Some(tags::project_filters(run_id)))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| Ec2Error::api("DescribeVolumes", e))?;
        out.extend(page.volumes().iter().map(ops::volume_view));
    }
    out.retain(|v| v.state != "deleted" && v.state != "deleting");
    Ok(out)
}

/// Finds and (unless `dry_run`) removes what `sweep` selects: instances
/// first (attached volumes come free or go with them), then volumes.
pub async fn cleanup(c: &Client, sweep: &Sweep, pace: Pace) -> Result<CleanupReport, Ec2Error> {
    if sweep.run_id.is_none() && !sweep.expired {
        return Err(Ec2Error::BadInput(
            "say what to clean up: --run-id ID, --expired, or both".into(),
        ));
    }
    // Server-side filter on the run id only when it alone selects.
    let run_filter = if sweep.expired {
        None
    } else {
        sweep.run_id.as_deref()
    };
    let instances: Vec<InstanceView> = project_instances(c, run_filter)
        .await?
        .into_iter()
        .filter(|i| sweep.selects(&i.tags))
        .collect();
    let volumes: Vec<VolumeView> = project_volumes(c, run_filter)
        .await?
        .into_iter()
        .filter(|v| sweep.selects(&v.tags))
        .collect();
    let mut report = CleanupReport {
        instances: instances
            .iter()
            .map(|i| found(&i.id, &i.state, &i.tags))
            .collect(),
        volumes: volumes
            .iter()
            .map(|v| found(&v.id, &v.state, &v.tags))
            .collect(),
        failed: Vec::new(),
        dry_run: sweep.dry_run,
    };
    if sweep.dry_run {
        return Ok(report);
    }
    for i in &instances {
        let r = match ops::terminate(c, &i.id).await {
            Ok(()) => ops::wait_instance_gone(c, &i.id, pace).await,
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            report.failed.push((i.id.clone(), e.to_string()));
        }
    }
    for v in &volumes {
        // Attached to an instance the sweep did not select (another run's,
        // still in use): detach first, the tag says the volume is ours.
        let foreign: Vec<&String> = v
            .attachments
            .iter()
            .map(|(inst, _)| inst)
            .filter(|inst| !instances.iter().any(|i| &i.id == *inst))
            .collect();
        for inst in foreign {
            if let Err(e) = c
                .detach_volume()
                .volume_id(&v.id)
                .instance_id(inst)
                .send()
                .await
            {
                let e = Ec2Error::api("DetachVolume", e);
                if !e.is_not_found() {
                    report.failed.push((v.id.clone(), e.to_string()));
                }
            }
        }
        if report.failed.iter().any(|(id, _)| id == &v.id) {
            continue;
        }
        if let Err(e) = ops::delete_volume_when_free(c, &v.id, pace).await {
            report.failed.push((v.id.clone(), e.to_string()));
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::Tag;
    use chrono::TimeZone;

    fn t(k: &str, v: &str) -> Tag {
        Tag::builder().key(k).value(v).build()
    }

    #[test]
    fn selection_is_run_or_expired() {
        let now = Utc.with_ymd_and_hms(2026, 11, 29, 22, 0, 0).unwrap();
        let mine = t("Owner", "me");
        let live = vec![
            t("RunId", "a"),
            t("ExpiresAt", "2026-11-29T23:00:00Z"),
            mine.clone(),
        ];
        let old = vec![
            t("RunId", "b"),
            t("ExpiresAt", "2026-11-29T21:00:00Z"),
            mine,
        ];
        let mut s = Sweep {
            run_id: Some("a".into()),
            expired: false,
            owner: Some("me".into()),
            now,
            dry_run: false,
        };
        assert!(s.selects(&live));
        assert!(!s.selects(&old));
        s.expired = true;
        assert!(s.selects(&old));
        s.run_id = None;
        assert!(!s.selects(&live));
        // Someone else's, expired or of the same run id: only with every owner.
        let theirs = vec![
            t("RunId", "a"),
            t("ExpiresAt", "2026-11-29T21:00:00Z"),
            t("Owner", "you"),
        ];
        s.run_id = Some("a".into());
        assert!(!s.selects(&theirs));
        s.owner = None;
        assert!(s.selects(&theirs));
    }

    #[test]
    fn report_renders_one_line_per_resource() {
        let f = |id: &str| Found {
            id: id.into(),
            state: "running".into(),
            run_id: "r".into(),
            cell: "c".into(),
            owner: "me".into(),
            expires_at: "x".into(),
        };
        let r = CleanupReport {
            instances: vec![f("i-1")],
            volumes: vec![f("vol-1")],
            failed: vec![("vol-1".into(), "VolumeInUse".into())],
            dry_run: false,
        };
        let s = r.render();
        assert!(
            s.contains("removed instance i-1 (running) run=r cell=c owner=me"),
            "{s}"
        );
        assert!(!s.contains("removed volume vol-1"), "{s}");
        assert!(s.contains("FAILED to remove vol-1: VolumeInUse"), "{s}");
        assert_eq!(CleanupReport::default().render(), "nothing to remove\n");
    }
}
