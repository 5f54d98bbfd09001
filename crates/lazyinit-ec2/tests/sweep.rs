//! `cleanup` against moto's EC2 emulator: resources deliberately leaked
//! by a run, and resources past their expiry, are found by tag and removed;
//! others are left alone.

mod common;

use aws_sdk_ec2::types::{InstanceType, ResourceType, Tag, TagSpecification};
use aws_sdk_ec2::Client;
use chrono::{Duration, Utc};
use common::*;
use lazyinit_core::provider::Provider;
use lazyinit_core::{Arch, Variant};
use lazyinit_ec2::cleanup::{cleanup, project_instances, project_volumes, Sweep};
use lazyinit_ec2::ops::{self, Pace};
use lazyinit_ec2::tags::ResourceTags;

fn pace() -> Pace {
    Pace {
        interval: std::time::Duration::from_millis(50),
        timeout: std::time::Duration::from_secs(30),
    }
}

/// A sweep as the CLI makes it for the test's owner (`Moto::config`).
fn sweep(run_id: Option<&str>, expired: bool, dry_run: bool) -> Sweep {
    Sweep {
        run_id: run_id.map(str::to_string),
        expired,
        owner: Some("lazyinit-test".into()),
        now: Utc::now(),
        dry_run,
    }
}

#[tokio::test]
async fn leaked_run_is_swept_by_run_id() {
    let moto = Moto::start();
    let p = moto.provider(moto.config()).await;
    let c = p.client().await.clone();
    let tmp = tempfile::tempdir().unwrap();
    // Two cells of the run leak (no teardown, guards never run), one cell
    // of another run stays up and must survive.
    for (run, arch) in [
        ("leaky", Arch::X86_64),
        ("leaky", Arch::Arm64),
        ("other", Arch::Arm64),
    ] {
        let dir = tmp.path().join(format!("{run}-{arch}"));
        let m = p
            .launch(&request(run, cell(arch, 100, Variant::NoFix, "64GiB"), dir))
            .await
            .unwrap();
        std::mem::forget(m);
    }
    assert_eq!(project_instances(&c, Some("leaky")).await.unwrap().len(), 2);

    let dry = cleanup(&c, &sweep(Some("leaky"), false, true), pace())
        .await
        .unwrap();
    assert_eq!(dry.instances.len(), 2);
    // Two data volumes and two root volumes carry the run's tags.
    assert_eq!(dry.volumes.len(), 4, "{dry:?}");
    assert!(dry.render().contains("would remove instance"));
    assert_eq!(
        project_instances(&c, Some("leaky")).await.unwrap().len(),
        2,
        "dry run removed something"
    );

    let report = cleanup(&c, &sweep(Some("leaky"), false, false), pace())
        .await
        .unwrap();
    print!("{}", report.render());
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.instances.len(), 2);
    assert!(project_instances(&c, Some("leaky"))
        .await
        .unwrap()
        .is_empty());
    assert!(project_volumes(&c, Some("leaky")).await.unwrap().is_empty());
    assert_eq!(
        project_instances(&c, Some("other")).await.unwrap().len(),
        1,
        "another run was touched"
    );
    assert_eq!(project_volumes(&c, Some("other")).await.unwrap().len(), 2);

    let again = cleanup(&c, &sweep(Some("leaky"), false, false), pace())
        .await
        .unwrap();
    assert!(again.is_empty(), "second sweep found {again:?}");
}

/// Creates an instance and a loose volume tagged as the harness would,
/// with the given expiry, straight through the SDK.
async fn tagged_pair(
    c: &Client,
    p: &lazyinit_ec2::Ec2Provider,
    run: &str,
    owner: &str,
    expires_in: Duration,
) -> (String, String) {
    let tags = ResourceTags {
        run_id: run.into(),
        cell: format!("{run}-cell"),
        owner: owner.into(),
        expires_at: Utc::now() + expires_in,
    };
    let ami = p.resolve_ami(Arch::X86_64).await.unwrap();
    let out = c
        .run_instances()
        .image_id(ami)
        .instance_type(InstanceType::C52xlarge)
        .min_count(1)
        .max_count(1)
        .tag_specifications(tags.spec(ResourceType::Instance))
        .send()
        .await
        .unwrap();
    let iid = out.instances()[0].instance_id().unwrap().to_string();
    let inst = ops::wait_instance_running(c, &iid, pace()).await.unwrap();
    let vol = c
        .create_volume()
        .availability_zone(inst.az.unwrap())
        .size(1)
        .tag_specifications(tags.spec(ResourceType::Volume))
        .send()
        .await
        .unwrap();
    (iid, vol.volume_id().unwrap().to_string())
}

#[tokio::test]
async fn expired_resources_are_swept_and_live_ones_kept() {
    let moto = Moto::start();
    let p = moto.provider(moto.config()).await;
    let c = p.client().await.clone();
    let (old_i, old_v) = tagged_pair(&c, &p, "old", "lazyinit-test", Duration::hours(-1)).await;
    let (new_i, new_v) = tagged_pair(&c, &p, "fresh", "lazyinit-test", Duration::hours(2)).await;
    // Someone else's volume without our tags: never ours to delete.
    let az = ops::describe_instance(&c, &new_i)
        .await
        .unwrap()
        .unwrap()
        .az
        .unwrap();
    let foreign = c
        .create_volume()
        .availability_zone(az)
        .size(1)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Volume)
                .tags(
                    Tag::builder()
                        .key("ExpiresAt")
                        .value("2000-01-01T00:00:00Z")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let foreign = foreign.volume_id().unwrap().to_string();

    let report = cleanup(&c, &sweep(None, true, false), pace())
        .await
        .unwrap();
    print!("{}", report.render());
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let ids: Vec<&str> = report
        .instances
        .iter()
        .chain(&report.volumes)
        .map(|f| f.id.as_str())
        .collect();
    assert!(
        ids.contains(&old_i.as_str()) && ids.contains(&old_v.as_str()),
        "{ids:?}"
    );
    assert!(
        !ids.contains(&new_i.as_str()) && !ids.contains(&new_v.as_str()),
        "{ids:?}"
    );

    let gone = ops::describe_instance(&c, &old_i)
        .await
        .unwrap()
        .map(|i| i.state);
    assert!(
        gone.is_none() || gone.as_deref() == Some("terminated"),
        "{gone:?}"
    );
    assert!(ops::describe_volume(&c, &old_v).await.unwrap().is_none());
    assert_eq!(
        ops::describe_instance(&c, &new_i)
            .await
            .unwrap()
            .unwrap()
            .state,
        "running"
    );
    assert!(ops::describe_volume(&c, &new_v).await.unwrap().is_some());
    assert!(ops::describe_volume(&c, &foreign).await.unwrap().is_some());

    // Neither --run-id nor --expired: refused, nothing touched.
    let e = cleanup(&c, &sweep(None, false, false), pace())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("--run-id"), "{e}");
}

/// The sweep and the provider agree on what "of this run" means: a
/// normal launch is found by the run-id sweep before its teardown.
#[tokio::test]
async fn a_running_cell_is_visible_to_the_sweep() {
    let moto = Moto::start();
    let p = moto.provider(moto.config()).await;
    let c = p.client().await.clone();
    let tmp = tempfile::tempdir().unwrap();
    let mut m = p
        .launch(&request(
            "visible",
            cell(Arch::X86_64, 250, Variant::Fix, "64GiB"),
            tmp.path().into(),
        ))
        .await
        .unwrap();
    let dry = cleanup(&c, &sweep(Some("visible"), false, true), pace())
        .await
        .unwrap();
    assert_eq!(dry.instances.len(), 1);
    assert_eq!(
        dry.instances[0].cell,
        "ec2-x86_64-debian-6.1-hz250-fix-64GiB-r1"
    );
    m.teardown().await.unwrap();
    let after = cleanup(&c, &sweep(Some("visible"), false, true), pace())
        .await
        .unwrap();
    assert!(after.is_empty(), "{after:?}");
}

/// `cleanup --expired` removes the caller's own expired resources only:
/// a colleague's, expired too and even of the same run id, stays until
/// `--all-owners`.
#[tokio::test]
async fn expired_sweep_is_the_callers_own_unless_all_owners() {
    let moto = Moto::start();
    let p = moto.provider(moto.config()).await;
    let c = p.client().await.clone();
    let (mine_i, mine_v) =
        tagged_pair(&c, &p, "quick-1", "lazyinit-test", Duration::hours(-1)).await;
    let (theirs_i, theirs_v) =
        tagged_pair(&c, &p, "quick-1", "colleague", Duration::hours(-1)).await;

    let report = cleanup(&c, &sweep(Some("quick-1"), true, false), pace())
        .await
        .unwrap();
    print!("{}", report.render());
    let ids: Vec<&str> = report
        .instances
        .iter()
        .chain(&report.volumes)
        .map(|f| f.id.as_str())
        .collect();
    assert!(
        ids.contains(&mine_i.as_str()) && ids.contains(&mine_v.as_str()),
        "{ids:?}"
    );
    assert!(
        !ids.contains(&theirs_i.as_str()) && !ids.contains(&theirs_v.as_str()),
        "{ids:?}"
    );
    assert_eq!(
        ops::describe_instance(&c, &theirs_i)
            .await
            .unwrap()
            .unwrap()
            .state,
        "running",
        "someone else's instance was touched"
    );
    assert!(ops::describe_volume(&c, &theirs_v).await.unwrap().is_some());

    let mut all = sweep(None, true, false);
    all.owner = None;
    let report = cleanup(&c, &all, pace()).await.unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert!(report
        .instances
        .iter()
        .any(|f| f.id == theirs_i && f.owner == "colleague"));
    assert!(ops::describe_volume(&c, &theirs_v).await.unwrap().is_none());
}
