//! The EC2 provider against moto's EC2 emulator (docs/design.md §6): launch,
//! states, tags, teardown, a fault mid-launch, and a dropped machine.
//!
//! The emulator's instances are not machines, so nothing listens on their
//! SSH port here: the part after launch (kexec, the volume by its NVMe
//! serial, the guest protocol, the expiry) runs on the twin, where a local
//! QEMU guest plays each instance (crate `lazyinit-twin`).

mod common;

use aws_sdk_ec2::types::{HttpTokensState, InstanceAttributeName};
use chrono::{DateTime, Utc};
use common::*;
use lazyinit_core::provider::{Provider, ProviderError};
use lazyinit_core::{Arch, Variant};
use lazyinit_ec2::cleanup::{project_instances, project_volumes};
use lazyinit_ec2::IAM_ACTIONS;

/// Two cells through the provider, one after the other so the API calls
/// of each can be counted; then teardown leaves nothing of the run.
#[tokio::test]
async fn two_cells_launch_tag_attach_and_tear_down() {
    let moto = Moto::start();
    let p = moto.provider(moto.config()).await;
    let c = p.client().await.clone();
    let run = "run-two-cells";
    let cells = [
        cell(Arch::Arm64, 100, Variant::NoFix, "2TiB"),
        cell(Arch::X86_64, 250, Variant::Fix, "3TiB"),
    ];
    p.preflight(&cells, &lazyinit_core::StorageProfile::None)
        .await
        .expect("preflight");

    let tmp = tempfile::tempdir().unwrap();
    let mut machines = Vec::new();
    for cell in &cells {
        let dir = tmp.path().join(cell.id());
        let before = p.counter().snapshot();
        let m = p
            .launch(&request(run, cell.clone(), dir.clone()))
            .await
            .unwrap_or_else(|e| panic!("launch {}: {e}\n{}", cell.id(), moto.log_text()));
        let launch_calls = p.counter().snapshot().since(&before);
        println!("API calls to launch {}: {launch_calls}", cell.id());
        for op in [
            "RunInstances",
            "CreateVolume",
            "AttachVolume",
            "ModifyInstanceAttribute",
        ] {
            assert_eq!(
                launch_calls.calls.get(op),
                Some(&1),
                "{op} once per cell: {launch_calls}"
            );
        }
        machines.push((cell.clone(), dir, m, before));
    }

    for (cell, dir, m, _) in &machines {
        let rec = record(dir);
        let iid = rec["instance_id"].as_str().unwrap();
        let vid = rec["volume_id"].as_str().unwrap();
        let want_type = if cell.arch == Arch::Arm64 {
            "c6g.2xlarge"
        } else {
            "c5.2xlarge"
        };

        // Instance: running, right type and image arch, tagged, terminate on shutdown.
        let inst = lazyinit_ec2::ops::describe_instance(&c, iid)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(inst.state, "running");
        assert_eq!(rec["instance_type"], want_type);
        let img = c
            .describe_images()
            .image_ids(rec["ami"].as_str().unwrap())
            .send()
            .await
            .unwrap();
        let img_arch = img.images()[0].architecture().unwrap().as_str().to_string();
        assert_eq!(img_arch, cell.arch.to_string());
        assert_eq!(tag(&inst.tags, "Project"), Some("lazyinit-bench"));
        assert_eq!(tag(&inst.tags, "RunId"), Some(run));
        assert_eq!(tag(&inst.tags, "Cell"), Some(cell.id().as_str()));
        assert_eq!(tag(&inst.tags, "Owner"), Some("lazyinit-test"));
        let exp: DateTime<Utc> = tag(&inst.tags, "ExpiresAt").unwrap().parse().unwrap();
        let left = exp - Utc::now();
        assert!(
            left > chrono::Duration::minutes(175) && left <= chrono::Duration::minutes(180),
            "{left}"
        );
        let sb = c
            .describe_instance_attribute()
            .instance_id(iid)
            .attribute(InstanceAttributeName::InstanceInitiatedShutdownBehavior)
            .send()
            .await
            .unwrap();
        assert_eq!(
            sb.instance_initiated_shutdown_behavior().unwrap().value(),
            Some("terminate")
        );
        let ud = c
            .describe_instance_attribute()
            .instance_id(iid)
            .attribute(InstanceAttributeName::UserData)
            .send()
            .await
            .unwrap();
        let ud = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            ud.user_data().unwrap().value().unwrap(),
        )
        .unwrap();
        let ud = String::from_utf8(ud).unwrap();
        assert!(ud.starts_with("#cloud-config\n"));
        assert!(
            ud.contains(&format!("({} - $(date +%s)) / 60", exp.timestamp())),
            "{ud}"
        );
        assert!(ud.contains("shutdown -h"));
        assert!(ud.contains(&keys().client_public));
        assert!(ud.contains(&keys().host_public));

        // Volume: cell's size, gp3, same AZ, tagged, attached, goes with the instance.
        let vol = c.describe_volumes().volume_ids(vid).send().await.unwrap();
        let vol = &vol.volumes()[0];
        let gib = (cell.volume.0 >> 30) as i32;
        assert_eq!(vol.size(), Some(gib));
        assert_eq!(vol.volume_type().unwrap().as_str(), "gp3");
        assert_eq!(vol.availability_zone(), inst.az.as_deref());
        assert_eq!(tag(vol.tags(), "RunId"), Some(run));
        assert_eq!(tag(vol.tags(), "Cell"), Some(cell.id().as_str()));
        assert!(tag(vol.tags(), "ExpiresAt").is_some());
        let att = &vol.attachments()[0];
        assert_eq!(att.instance_id(), Some(iid));
        assert_eq!(att.state().unwrap().as_str(), "attached");
        assert_eq!(att.device(), Some("/dev/sdf"));
        let full = c
            .describe_instances()
            .instance_ids(iid)
            .send()
            .await
            .unwrap();
        let bdm = full.reservations()[0].instances()[0]
            .block_device_mappings()
            .iter()
            .find(|b| b.device_name() == Some("/dev/sdf"))
            .expect("data volume in the instance's block device mapping");
        assert_eq!(bdm.ebs().unwrap().delete_on_termination(), Some(true));

        // IMDSv2 only (session tokens required), one hop: the user data
        // holds the run's host key.
        let md = full.reservations()[0].instances()[0]
            .metadata_options()
            .expect("metadata options");
        assert_eq!(md.http_tokens(), Some(&HttpTokensState::Required));
        assert_eq!(md.http_put_response_hop_limit(), Some(1));
        assert_eq!(
            md.http_endpoint().map(|e| e.as_str()),
            Some("enabled"),
            "IMDS stays on (cloud-init reads the user data through it)"
        );

        // What the guest session gets: the instance's address, and the
        // volume by its NVMe serial (no udev path: there is no udev after
        // the kexec).
        let ep = m.endpoint();
        assert_eq!(Some(ep.host.as_str()), inst.public_ip.as_deref());
        assert_eq!((ep.port, ep.user.as_str()), (22, "root"));
        let serial = vid.replace("vol-", "vol");
        assert_eq!(
            ep.volume_device,
            lazyinit_core::provider::VolumeDevice::NvmeSerial(serial.clone())
        );
        assert_eq!(rec["nvme_serial"], serial.as_str());
        // The kexec into the kernel under test, which carries the expiry.
        let lazyinit_core::provider::KernelBoot::Kexec(plan) = m.kernel_boot() else {
            panic!("an instance boots its AMI's kernel: the runner kexecs");
        };
        assert_eq!(plan, lazyinit_ec2::kexec_plan(cell.arch, exp.timestamp()));
        assert!(
            plan.cmdline
                .ends_with(&format!(" lazyinit.expires={}", exp.timestamp())),
            "{}",
            plan.cmdline
        );
        assert_eq!(m.info().provider, "ec2");
        assert_eq!(m.info().machine, want_type);
        assert_eq!(m.info().accel, "nitro");
    }

    let seen_during_run = p.counter().snapshot();
    for (cell, dir, mut m, _) in machines {
        let before = p.counter().snapshot();
        m.teardown()
            .await
            .unwrap_or_else(|e| panic!("teardown {}: {e}", cell.id()));
        assert!(!m.is_alive());
        m.teardown().await.expect("teardown is idempotent");
        println!(
            "API calls to tear down {}: {}",
            cell.id(),
            p.counter().snapshot().since(&before)
        );
        assert!(
            lazyinit_core::CellFolder::at(dir.as_path())
                .console_log()
                .exists(),
            "console saved at teardown"
        );
    }

    assert!(
        project_instances(&c, Some(run)).await.unwrap().is_empty(),
        "an instance of the run is left"
    );
    let vols = project_volumes(&c, Some(run)).await.unwrap();
    assert!(vols.is_empty(), "volumes of the run are left: {vols:?}");
    assert!(p.live_ids().is_empty());

    let all = p.counter().snapshot();
    println!("all API calls (preflight, 2 launches, checks, 2 teardowns): {all}");
    for op in all.calls.keys() {
        // DescribeInstanceAttribute is the test's own check, not the harness's.
        if op != "DescribeInstanceAttribute" {
            assert!(
                IAM_ACTIONS.contains(&op.as_str()),
                "{op} is called but not in IAM_ACTIONS"
            );
        }
    }
    assert!(seen_during_run.total_calls() < all.total_calls());
}

/// CreateVolume fails after the instance is running (the API refuses IOPS
/// on st1): the launch must return the error and leave nothing behind.
#[tokio::test]
async fn a_fault_mid_launch_leaks_nothing() {
    let moto = Moto::start();
    let mut cfg = moto.config();
    cfg.volume.volume_type = "st1".into();
    cfg.volume.iops = Some(500);
    let p = moto.provider(cfg).await;
    let c = p.client().await.clone();
    let run = "run-fault";
    let tmp = tempfile::tempdir().unwrap();
    let err = p
        .launch(&request(
            run,
            cell(Arch::X86_64, 250, Variant::NoFix, "2TiB"),
            tmp.path().into(),
        ))
        .await
        .err()
        .expect("CreateVolume must fail");
    let msg = err.to_string();
    assert!(matches!(err, ProviderError::Infrastructure { .. }), "{msg}");
    assert!(msg.contains("CreateVolume"), "{msg}");
    let counts = p.counter().snapshot();
    assert_eq!(
        counts.calls.get("RunInstances"),
        Some(&1),
        "the instance was created: {counts}"
    );
    assert_eq!(
        counts.calls.get("TerminateInstances"),
        Some(&1),
        "and terminated: {counts}"
    );

    assert!(
        project_instances(&c, Some(run)).await.unwrap().is_empty(),
        "instance leaked"
    );
    assert!(
        project_volumes(&c, Some(run)).await.unwrap().is_empty(),
        "volume leaked"
    );
    assert!(p.live_ids().is_empty());
}

/// A machine dropped without teardown (a cell task cancelled by Ctrl-C):
/// its guard starts the teardown and `release_all` waits for it.
#[tokio::test]
async fn a_dropped_machine_is_torn_down_by_its_guard() {
    let moto = Moto::start();
    let p = moto.provider(moto.config()).await;
    let c = p.client().await.clone();
    let run = "run-dropped";
    let tmp = tempfile::tempdir().unwrap();
    let m = p
        .launch(&request(
            run,
            cell(Arch::Arm64, 100, Variant::Fix, "2TiB"),
            tmp.path().into(),
        ))
        .await
        .unwrap();
    assert_eq!(p.live_ids().len(), 2, "instance and volume registered");
    assert_eq!(project_instances(&c, Some(run)).await.unwrap().len(), 1);
    drop(m);
    p.release_all().await.expect("background teardown");
    assert!(
        project_instances(&c, Some(run)).await.unwrap().is_empty(),
        "instance leaked"
    );
    assert!(
        project_volumes(&c, Some(run)).await.unwrap().is_empty(),
        "volume leaked"
    );
    assert!(p.live_ids().is_empty());
}

/// The emulator runs with AMI and instance-type validation: unknown ones
/// are refused as EC2 would, and preflight catches them before launching.
#[tokio::test]
async fn unknown_ami_and_instance_type_are_refused() {
    let moto = Moto::start();
    let p = moto.provider(moto.config()).await;
    let c = p.client().await.clone();
    let raw = c
        .run_instances()
        .image_id("ami-12345678")
        .instance_type(aws_sdk_ec2::types::InstanceType::C52xlarge)
        .min_count(1)
        .max_count(1)
        .send()
        .await;
    assert!(raw.is_err(), "emulator AMI validation is off");
    let ami = p.resolve_ami(Arch::X86_64).await.unwrap();
    let raw = c
        .run_instances()
        .image_id(&ami)
        .instance_type(aws_sdk_ec2::types::InstanceType::from("c5.9000xlarge"))
        .min_count(1)
        .max_count(1)
        .send()
        .await;
    assert!(raw.is_err(), "emulator instance-type validation is off");

    let mut cfg = moto.config();
    cfg.instance_types.arm64 = "c5.2xlarge".into();
    let p = moto.provider(cfg).await;
    let e = p
        .preflight(
            &[cell(Arch::Arm64, 100, Variant::Fix, "2TiB")],
            &lazyinit_core::StorageProfile::None,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not arm64"), "{e}");

    let mut cfg = moto.config();
    cfg.ami.x86_64 = Some("ami-0e9271c829888680e".into()); // the emulator's arm64 AL2022
    let p = moto.provider(cfg).await;
    let e = p
        .preflight(
            &[cell(Arch::X86_64, 250, Variant::Fix, "2TiB")],
            &lazyinit_core::StorageProfile::None,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ProviderError::BadInput(_)), "{e}");

    let e = p
        .preflight(
            &[cell(Arch::X86_64, 250, Variant::Fix, "17TiB")],
            &lazyinit_core::StorageProfile::None,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("16 TiB"), "{e}");
}
