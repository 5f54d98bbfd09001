//! The EC2 path's kernel install, exercised on a local QEMU guest playing
//! the instance: boot one kernel, upload another with the project's
//! initramfs over SSH, kexec into it, reconnect with the pinned host key
//! and check that `uname -r` is the new kernel. (The EC2 API side is tested
//! against the emulator in lazyinit-ec2; its instances cannot be reached.)

use std::time::{Duration, Instant};

use lazyinit_core::provider::{LaunchRequest, Provider};
use lazyinit_core::{Arch, ByteSize, Cell, Hz, KernelSource, Variant};
use lazyinit_guest::Connect;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kexec_into_the_kernel_under_test() {
    let tmp = tempfile::tempdir().unwrap();
    let hz = Hz::new(250).unwrap();
    let build = |variant| {
        let spec = lazyinit_kernel::KernelSpec::new(Arch::X86_64, hz, variant);
        async move {
            lazyinit_kernel::build(&spec, &Default::default())
                .await
                .unwrap()
        }
    };
    let first = build(Variant::NoFix).await;
    let second = build(Variant::Fix).await;
    let keys = lazyinit_ssh::Keys::load_or_create(&tmp.path().join("state")).unwrap();
    let image = lazyinit_image::build(Arch::X86_64, &Default::default())
        .await
        .unwrap();
    let initrd =
        lazyinit_image::initramfs_for_launch(&image, &keys, &tmp.path().join("launch")).unwrap();

    let provider = lazyinit_qemu::QemuProvider::new(lazyinit_qemu::QemuConfig {
        volume_dir: Some(tmp.path().join("vols")),
        accel: lazyinit_qemu::AccelChoice::Tcg,
        warmup: false,
        ..Default::default()
    });
    let cell = Cell {
        provider: "qemu".into(),
        axes: lazyinit_core::Axes::new(
            Arch::X86_64,
            KernelSource::Debian61,
            hz,
            Variant::NoFix,
            ByteSize(1 << 30),
        ),
        repetition: 1,
    };
    let req = LaunchRequest {
        run_id: "kexec-test".into(),
        cell,
        kernel_image: first.image.clone(),
        kernel_release: first.manifest.kernel_release.clone(),
        initramfs: initrd.clone(),
        folder: lazyinit_core::RunWriter::claim(&lazyinit_core::RunFolder::new(tmp.path()))
            .unwrap()
            .cell("log"),
        extra_cmdline: vec![],
        storage_profile: lazyinit_core::StorageProfile::None,
    };
    let mut machine = provider.launch(&req).await.unwrap();
    let ep = machine.endpoint();
    let result = {
        let connect = lazyinit_guest::SshConnect::new(keys.clone());
        let kernel = second.image.clone();
        let release = second.manifest.kernel_release.clone();
        tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + Duration::from_secs(180);
            let mut before = connect.wait_ready(&ep, deadline, &mut || true)?;
            let was = before.exec("uname -r", Duration::from_secs(30))?;
            // Exactly what the runner does for an EC2 machine (its expiry
            // an hour away).
            let plan =
                lazyinit_ec2::kexec_plan(Arch::X86_64, chrono::Utc::now().timestamp() + 3600);
            let mut reconnect = || connect.wait_ready(&ep, deadline, &mut || true);
            let kut = lazyinit_guest::install::KernelUnderTest {
                image: &kernel,
                initramfs: &initrd,
                release: &release,
            };
            let mut after = lazyinit_guest::install::install_and_kexec(
                &mut *before,
                &mut reconnect,
                kut,
                &plan,
                deadline,
                &mut |step| eprintln!("{step}"),
            )?;
            let now = after.exec("uname -r", Duration::from_secs(30))?;
            Ok::<_, lazyinit_guest::GuestError>((was.stdout, now.stdout))
        })
        .await
        .unwrap()
    };
    let tail = machine.console_tail(30);
    machine.teardown().await.unwrap();
    let (before, after) = result.unwrap_or_else(|e| panic!("{e}\n--- console ---\n{tail}"));
    assert_eq!(before.trim(), first.manifest.kernel_release);
    assert_eq!(after.trim(), second.manifest.kernel_release);
    assert!(
        std::fs::read_dir(tmp.path().join("vols"))
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "volume removed"
    );
}
