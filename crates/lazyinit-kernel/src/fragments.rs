//! Kernel config fragments: the text under `kernels/fragments/`, merged in a
//! fixed order and checked against the resolved `.config`.
//!
//! A fragment is `.config` syntax: `CONFIG_X=value` sets, `# CONFIG_X is not
//! set` unsets; later fragments override earlier ones. The merged fragment is
//! fed to `make allnoconfig` as `KCONFIG_ALLCONFIG`, so what it does not name
//! is off (or Kconfig's non-optional default).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use lazyinit_core::{Arch, Hz, Variant};
use serde::{Deserialize, Serialize};

const BASE: &str = include_str!("../../../kernels/fragments/base.config");
const X86_64: &str = include_str!("../../../kernels/fragments/arch-x86_64.config");
const ARM64: &str = include_str!("../../../kernels/fragments/arch-arm64.config");
const HZ_100: &str = include_str!("../../../kernels/fragments/hz-100.config");
const HZ_250: &str = include_str!("../../../kernels/fragments/hz-250.config");
const HZ_300: &str = include_str!("../../../kernels/fragments/hz-300.config");
const HZ_1000: &str = include_str!("../../../kernels/fragments/hz-1000.config");
const CLOUD: &str = include_str!("../../../kernels/fragments/cloud.config");
const CLOUD_X86_64: &str = include_str!("../../../kernels/fragments/cloud-x86_64.config");
const CLOUD_ARM64: &str = include_str!("../../../kernels/fragments/cloud-arm64.config");

/// Which machines the kernel must boot on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Profile {
    /// Local QEMU guests (virtio only): small and fast to build.
    #[default]
    Qemu,
    /// Also EC2 instances: NVMe (EBS), ENA, ACPI on arm64.
    Cloud,
}

impl Profile {
    /// The profile a provider's guests need: EC2 instances boot `cloud`
    /// kernels, local guests `qemu` ones.
    pub fn for_provider(provider: &str) -> Profile {
        if provider == "ec2" {
            Profile::Cloud
        } else {
            Profile::Qemu
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Profile::Qemu => "qemu",
            Profile::Cloud => "cloud",
        })
    }
}

impl FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "qemu" => Ok(Profile::Qemu),
            "cloud" | "ec2" => Ok(Profile::Cloud),
            _ => Err(format!("unknown kernel profile `{s}`: use qemu or cloud")),
        }
    }
}

impl Serialize for Profile {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}
impl<'de> Deserialize<'de> for Profile {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// `CONFIG_LOCALVERSION`: what `uname -r` appends to the kernel version, so
/// a booted guest names its HZ and variant.
pub fn localversion(hz: Hz, variant: Variant) -> String {
    format!("-lazyinit-hz{hz}-{variant}")
}

/// The fragments for one build, in merge order, with their file names.
pub fn fragments_for(arch: Arch, hz: Hz, profile: Profile) -> Vec<(&'static str, &'static str)> {
    let mut v = vec![("base.config", BASE)];
    v.push(match arch {
        Arch::X86_64 => ("arch-x86_64.config", X86_64),
        Arch::Arm64 => ("arch-arm64.config", ARM64),
    });
    v.push(match hz.get() {
        100 => ("hz-100.config", HZ_100),
        250 => ("hz-250.config", HZ_250),
        300 => ("hz-300.config", HZ_300),
        _ => ("hz-1000.config", HZ_1000),
    });
    if profile == Profile::Cloud {
        v.push(("cloud.config", CLOUD));
        v.push(match arch {
            Arch::X86_64 => ("cloud-x86_64.config", CLOUD_X86_64),
            Arch::Arm64 => ("cloud-arm64.config", CLOUD_ARM64),
        });
    }
    v
}

/// Option name (with `CONFIG_`) to value; `None` means "is not set".
pub type Options = BTreeMap<String, Option<String>>;

/// Parse one fragment or `.config`. Lines that are neither a setting nor a
/// "not set" comment are ignored, as Kconfig does.
pub fn parse(text: &str) -> Options {
    let mut out = Options::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("# ") {
            if let Some(name) = rest.strip_suffix(" is not set") {
                if name.starts_with("CONFIG_") && !name.contains(' ') {
                    out.insert(name.to_string(), None);
                }
            }
        } else if line.starts_with("CONFIG_") {
            if let Some((k, v)) = line.split_once('=') {
                out.insert(k.trim().to_string(), Some(v.trim().to_string()));
            }
        }
    }
    out
}

/// Merge fragments in order (later wins) and add the identity line.
pub fn merge(fragments: &[&str], localversion: &str) -> Options {
    let mut all = Options::new();
    for f in fragments {
        all.extend(parse(f));
    }
    all.insert(
        "CONFIG_LOCALVERSION".into(),
        Some(format!("\"{localversion}\"")),
    );
    all.insert("CONFIG_LOCALVERSION_AUTO".into(), None);
    all
}

/// Render merged options as a `KCONFIG_ALLCONFIG` file (sorted, so the same
/// request always gives the same bytes and the same cache key).
pub fn render(opts: &Options) -> String {
    let mut s =
        String::from("# Generated by lazyinit-kernel from kernels/fragments; do not edit.\n");
    for (k, v) in opts {
        match v {
            Some(v) => s.push_str(&format!("{k}={v}\n")),
            None => s.push_str(&format!("# {k} is not set\n")),
        }
    }
    s
}

/// The merged fragment for a build request, rendered.
pub fn merged_config(arch: Arch, hz: Hz, variant: Variant, profile: Profile) -> String {
    let texts: Vec<&str> = fragments_for(arch, hz, profile)
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    render(&merge(&texts, &localversion(hz, variant)))
}

/// One requested option the resolved config does not honour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub option: String,
    pub wanted: Option<String>,
    pub got: Option<String>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "not set".into());
        write!(
            f,
            "{} (asked {}, got {})",
            self.option,
            show(&self.wanted),
            show(&self.got)
        )
    }
}

/// Compare the requested options with a resolved `.config`. An option the
/// resolved config omits entirely counts as "not set" (that is how Kconfig
/// writes invisible options), so asking for `=y` and getting nothing fails.
pub fn check_resolved(wanted: &Options, resolved_text: &str) -> Vec<Mismatch> {
    let have = parse(resolved_text);
    wanted
        .iter()
        .filter_map(|(k, v)| {
            let got = have.get(k).cloned().flatten();
            let want = v.clone().filter(|v| v != "n");
            (got != want).then(|| Mismatch {
                option: k.clone(),
                wanted: want,
                got,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hz(n: u32) -> Hz {
        Hz::new(n).unwrap()
    }

    #[test]
    fn later_fragments_override_earlier_ones() {
        let m = merge(
            &[
                "CONFIG_A=y\nCONFIG_B=y\n# CONFIG_C is not set\n",
                "# CONFIG_A is not set\nCONFIG_C=m\n",
            ],
            "-x",
        );
        assert_eq!(m["CONFIG_A"], None);
        assert_eq!(m["CONFIG_B"].as_deref(), Some("y"));
        assert_eq!(m["CONFIG_C"].as_deref(), Some("m"));
        assert_eq!(m["CONFIG_LOCALVERSION"].as_deref(), Some("\"-x\""));
        assert_eq!(m["CONFIG_LOCALVERSION_AUTO"], None);
    }

    #[test]
    fn comments_and_blank_lines_are_not_options() {
        let p = parse(
            "# Tracing: the ground truth\n\n# CONFIG_X is not set because\nCONFIG_Y=\"a b\"\n",
        );
        assert_eq!(p.len(), 1);
        assert_eq!(p["CONFIG_Y"].as_deref(), Some("\"a b\""));
    }

    #[test]
    fn hz_fragment_sets_exactly_one_choice() {
        for (n, arch, profile) in Hz::SUPPORTED.into_iter().flat_map(|n| {
            [Arch::X86_64, Arch::Arm64]
                .into_iter()
                .flat_map(move |a| [(n, a, Profile::Qemu), (n, a, Profile::Cloud)])
        }) {
            let text = merged_config(arch, hz(n), Variant::Fix, profile);
            let p = parse(&text);
            assert_eq!(p["CONFIG_HZ"].as_deref(), Some(n.to_string().as_str()));
            for other in Hz::SUPPORTED {
                let want = (other == n).then(|| "y".to_string());
                assert_eq!(p[&format!("CONFIG_HZ_{other}")], want, "HZ {n} vs {other}");
            }
            if profile == Profile::Cloud {
                for o in ["CONFIG_BLK_DEV_NVME", "CONFIG_ENA_ETHERNET", "CONFIG_KEXEC"] {
                    assert_eq!(p[o].as_deref(), Some("y"), "{arch} HZ {n}: {o}");
                }
            }
        }
    }

    #[test]
    fn arch_fragments_carry_their_console_and_the_base() {
        let x = parse(&merged_config(
            Arch::X86_64,
            hz(250),
            Variant::NoFix,
            Profile::Qemu,
        ));
        let a = parse(&merged_config(
            Arch::Arm64,
            hz(100),
            Variant::Fix,
            Profile::Qemu,
        ));
        assert_eq!(x["CONFIG_SERIAL_8250_CONSOLE"].as_deref(), Some("y"));
        assert!(!x.contains_key("CONFIG_SERIAL_AMBA_PL011_CONSOLE"));
        assert_eq!(a["CONFIG_SERIAL_AMBA_PL011_CONSOLE"].as_deref(), Some("y"));
        for p in [&x, &a] {
            for o in [
                "CONFIG_EXT4_FS",
                "CONFIG_VIRTIO_BLK",
                "CONFIG_IKCONFIG_PROC",
                "CONFIG_EVENT_TRACING",
            ] {
                assert_eq!(p[o].as_deref(), Some("y"), "{o}");
            }
        }
        assert_eq!(
            x["CONFIG_LOCALVERSION"].as_deref(),
            Some("\"-lazyinit-hz250-nofix\"")
        );
    }

    #[test]
    fn cloud_profile_adds_instance_devices() {
        let q = parse(&merged_config(
            Arch::Arm64,
            hz(100),
            Variant::Fix,
            Profile::Qemu,
        ));
        let c = parse(&merged_config(
            Arch::Arm64,
            hz(100),
            Variant::Fix,
            Profile::Cloud,
        ));
        assert!(!q.contains_key("CONFIG_BLK_DEV_NVME"));
        assert_eq!(c["CONFIG_BLK_DEV_NVME"].as_deref(), Some("y"));
        assert_eq!(c["CONFIG_ENA_ETHERNET"].as_deref(), Some("y"));
        assert_eq!(c["CONFIG_ACPI"].as_deref(), Some("y"));
        // The kexec'd kernel runs our initramfs only: no AMI root filesystem.
        assert!(!c.contains_key("CONFIG_XFS_FS"));
    }

    #[test]
    fn rendering_is_stable_and_round_trips() {
        let a = merged_config(Arch::Arm64, hz(300), Variant::Fix, Profile::Qemu);
        let b = merged_config(Arch::Arm64, hz(300), Variant::Fix, Profile::Qemu);
        assert_eq!(a, b);
        let opts = parse(&a);
        assert_eq!(render(&opts), a);
    }

    #[test]
    fn check_reports_dropped_and_changed_options() {
        let wanted =
            parse("CONFIG_A=y\nCONFIG_B=y\n# CONFIG_C is not set\nCONFIG_HZ=100\nCONFIG_D=n\n");
        let resolved = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_HZ=250\n";
        let bad: Vec<String> = check_resolved(&wanted, resolved)
            .iter()
            .map(|m| m.option.clone())
            .collect();
        assert_eq!(bad, ["CONFIG_B", "CONFIG_HZ"]);
        let m = &check_resolved(&wanted, resolved)[1];
        assert_eq!(m.to_string(), "CONFIG_HZ (asked 100, got 250)");
    }
}
