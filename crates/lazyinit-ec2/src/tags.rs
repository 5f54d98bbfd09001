//! The tags every resource carries from its creation on, and reading them back.
//!
//! Tags are set in the create call itself (TagSpecifications), so there is
//! no moment when a resource exists untagged and invisible to the sweep.

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use chrono::{DateTime, SecondsFormat, Utc};

pub const PROJECT: &str = "Project";
pub const PROJECT_VALUE: &str = "lazyinit-bench";
pub const RUN_ID: &str = "RunId";
pub const CELL: &str = "Cell";
pub const OWNER: &str = "Owner";
pub const EXPIRES_AT: &str = "ExpiresAt";

/// The tag values of one cell's resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceTags {
    pub run_id: String,
    pub cell: String,
    pub owner: String,
    pub expires_at: DateTime<Utc>,
}

impl ResourceTags {
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        vec![
            (PROJECT, PROJECT_VALUE.to_string()),
            (RUN_ID, self.run_id.clone()),
            (CELL, self.cell.clone()),
            (OWNER, self.owner.clone()),
            (EXPIRES_AT, rfc3339(self.expires_at)),
            ("Name", format!("{PROJECT_VALUE}/{}", self.cell)),
        ]
    }

    pub fn spec(&self, kind: ResourceType) -> TagSpecification {
        let tags = self
            .pairs()
            .into_iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect();
        TagSpecification::builder()
            .resource_type(kind)
            .set_tags(Some(tags))
            .build()
    }
}

pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Value of tag `key` in an SDK tag list.
pub fn tag_value<'a>(tags: &'a [Tag], key: &str) -> Option<&'a str> {
    tags.iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
}

/// Server-side filter for this project's resources, optionally of one run.
pub fn project_filters(run_id: Option<&str>) -> Vec<Filter> {
    let mut f = vec![Filter::builder()
        .name(format!("tag:{PROJECT}"))
        .values(PROJECT_VALUE)
        .build()];
    if let Some(id) = run_id {
        f.push(
            Filter::builder()
                .name(format!("tag:{RUN_ID}"))
                .values(id)
                .build(),
        );
    }
    f
}

/// Whether a resource with these tags is past its expiry at `now`. A
/// project resource without a readable `ExpiresAt` counts as expired: it
/// cannot prove it is still wanted, and only a broken writer makes one.
pub fn is_expired(tags: &[Tag], now: DateTime<Utc>) -> bool {
    match tag_value(tags, EXPIRES_AT).map(DateTime::parse_from_rfc3339) {
        Some(Ok(t)) => t.with_timezone(&Utc) <= now,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn tags() -> ResourceTags {
        ResourceTags {
            run_id: "r1".into(),
            cell: "ec2-arm64-debian-6.1-hz100-fix-2TiB-r1".into(),
            owner: "ci".into(),
            expires_at: Utc.with_ymd_and_hms(2026, 11, 29, 23, 0, 0).unwrap(),
        }
    }

    #[test]
    fn spec_carries_every_required_tag() {
        let spec = tags().spec(ResourceType::Instance);
        assert_eq!(spec.resource_type(), Some(&ResourceType::Instance));
        let t = spec.tags();
        assert_eq!(tag_value(t, PROJECT), Some("lazyinit-bench"));
        assert_eq!(tag_value(t, RUN_ID), Some("r1"));
        assert_eq!(tag_value(t, OWNER), Some("ci"));
        assert_eq!(tag_value(t, EXPIRES_AT), Some("2026-11-29T23:00:00Z"));
        assert_eq!(
            tag_value(t, CELL),
            Some("ec2-arm64-debian-6.1-hz100-fix-2TiB-r1")
        );
    }

    #[test]
    fn expiry_reads_back() {
        let t = tags().spec(ResourceType::Volume).tags().to_vec();
        let before = Utc.with_ymd_and_hms(2026, 11, 29, 22, 59, 59).unwrap();
        let after = Utc.with_ymd_and_hms(2026, 11, 29, 23, 0, 1).unwrap();
        assert!(!is_expired(&t, before));
        assert!(is_expired(&t, after));
        // Missing or garbled expiry: treated as expired.
        assert!(is_expired(&[], before));
        let bad = vec![Tag::builder().key(EXPIRES_AT).value("tomorrow").build()];
        assert!(is_expired(&bad, before));
    }

    #[test]
    fn filters_scope_to_project_and_run() {
        assert_eq!(project_filters(None).len(), 1);
        let f = project_filters(Some("r1"));
        assert_eq!(f[1].name(), Some("tag:RunId"));
        assert_eq!(f[1].values(), ["r1".to_string()]);
    }
}
