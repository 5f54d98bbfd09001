//! A local twin of EC2, for tests: the real `lazyinit-ec2` provider runs
//! a cell from launch to CSV row with no AWS in reach (docs/design.md §6).
//!
//! - the API is moto's EC2 emulator on loopback ([`moto`]), reached by the
//!   harness through a proxy that counts calls and injects refusals
//!   ([`faults`]);
//! - each instance the emulator runs is played by a QEMU guest
//!   ([`controller`], [`guest`]): x86_64 for c5, arm64 for c6g, booting a
//!   stand-in for the AMI (our qemu-profile kernel and initramfs, with the
//!   keys from the instance's user data), its volumes NVMe controllers with
//!   the serials Nitro gives EBS volumes, its SSH port behind a relay that
//!   can drop connections ([`relay`]);
//! - the provider reaches those guests through its one seam,
//!   `lazyinit_ec2::InstanceResolver`, here [`endpoints::TwinEndpoints`];
//!   rows say `accel = twin-tcg`, which the report never pools with real
//!   EC2 or QEMU rows.
//!
//! Not played: the instance metadata service, EC2's console capture
//! (GetConsoleOutput answers the emulator's canned text; the guest's real
//! console is in its folder), and the AMI userspace's own shutdown timer
//! (the stand-in has none; the kernel under test's /init does).

pub mod controller;
pub mod endpoints;
pub mod faults;
pub mod guest;
pub mod harness;
pub mod moto;
pub mod relay;
pub mod userdata;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use lazyinit_core::{Arch, Hz, Variant};

pub use controller::{Controller, Happening, StandIn, TwinEvent};
pub use endpoints::TwinEndpoints;
pub use faults::{ApiProxy, Calls};
pub use moto::Emulator;

pub fn dummy_credentials() -> aws_sdk_ec2::config::Credentials {
    aws_sdk_ec2::config::Credentials::new("testing", "testing", None, None, "lazyinit-twin")
}

/// The stand-in AMI of each arch: the qemu-profile kernel the other guest
/// tests build anyway (x86_64 HZ=250, arm64 HZ=100, without the fix) and
/// the guest image. Built, or taken from the cache.
pub async fn stand_ins(archs: &[Arch]) -> anyhow::Result<BTreeMap<Arch, StandIn>> {
    let mut out = BTreeMap::new();
    for &arch in archs {
        let hz = match arch {
            Arch::X86_64 => 250,
            Arch::Arm64 => 100,
        };
        let spec = lazyinit_kernel::KernelSpec::new(arch, Hz::new(hz)?, Variant::NoFix);
        let k = lazyinit_kernel::build(&spec, &Default::default()).await?;
        let image = lazyinit_image::build(arch, &Default::default()).await?;
        out.insert(
            arch,
            StandIn {
                kernel: k.image,
                image,
            },
        );
    }
    Ok(out)
}

/// Emulator, fault proxy and controller, with their files in one folder.
pub struct Twin {
    pub emulator: Emulator,
    pub api: ApiProxy,
    pub controller: Controller,
}

impl Twin {
    pub async fn start(dir: &Path, stand_ins: BTreeMap<Arch, StandIn>) -> anyhow::Result<Twin> {
        let emulator = Emulator::start(dir)?;
        let api = ApiProxy::start(&emulator.url).await?;
        let controller = Controller::start(controller::ControllerOptions {
            api_url: emulator.url.clone(),
            dir: dir.join("twin"),
            stand_ins,
            memory_mib: 512,
            tsc_khz: lazyinit_qemu::tsc::host_tsc_khz(),
            tick: Duration::from_millis(250),
        })
        .await?;
        Ok(Twin {
            emulator,
            api,
            controller,
        })
    }

    /// A harness configuration against this twin.
    pub fn harness(&self, out_dir: &Path, spec_toml: &str, expiry: &str) -> harness::HarnessConfig {
        harness::HarnessConfig {
            api_url: self.api.url.clone(),
            endpoints_dir: self.controller.endpoints_dir().to_path_buf(),
            out_dir: out_dir.to_path_buf(),
            spec_toml: spec_toml.to_string(),
            expiry: expiry.to_string(),
            owner: "lazyinit-twin".into(),
        }
    }

    /// A client straight to the emulator, for a test's own checks.
    pub async fn client(&self) -> aws_sdk_ec2::Client {
        let cfg = harness::ec2_config(&self.emulator.url, "lazyinit-twin", "3h")
            .expect("the twin's config is valid");
        lazyinit_ec2::client::build(&cfg, Some(dummy_credentials()), Default::default()).await
    }
}
