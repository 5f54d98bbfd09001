//! Kernel config fragments: the text under `kernels/fragments/`, merged in a
//! fixed order and checked against the resolved `.config`.
//!
//! A fragment is `.config` syntax: `CONFIG_X=value` sets, `# CONFIG_X is not
//! set` unsets; later fragments override earlier ones. The merged fragment is
//! fed to `make allnoconfig` as `KCONFIG_ALLCONFIG`, so what it does not name
//! is off (or Kconfig's non-optional default).

use std::collections::BTreeMap;
use std::fmt;

use lazyinit_core::{Arch, Hz, Variant};

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
const SERIES_5_10: &str = include_str!("../../../kernels/fragments/series-5.10.config");
const BEFORE_7_3: &str = include_str!("../../../kernels/fragments/before-7.3.config");
const SINCE_7_3: &str = include_str!("../../../kernels/fragments/since-7.3.config");

/// Fragments for a span of kernel series only, applied after the others:
/// (first series, first series no longer in the span, file, text); series
/// compare as numbers (`7.10` after `7.3`). A tree whose version does not
/// parse (a user's tree asked for by path) gets the newest span's.
const SERIES: [((u32, u32), (u32, u32), &str, &str); 3] = [
    ((5, 10), (5, 11), "series-5.10.config", SERIES_5_10),
    ((0, 0), (7, 3), "before-7.3.config", BEFORE_7_3),
    ((7, 3), (u32::MAX, 0), "since-7.3.config", SINCE_7_3),
];

/// `X.Y` of a kernel version as numbers (`7.3.4-1~bpo13+1` is (7, 3);
/// `7.3~rc7` is (7, 3)).
pub(crate) fn series_number(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split(['.', '~', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Which machines the kernel must boot on: the provider says
/// (`Provider::kernel_profile`).
pub use lazyinit_core::KernelProfile as Profile;

/// `CONFIG_LOCALVERSION`: what `uname -r` appends to the kernel version, so
/// a booted guest names its HZ and variant.
pub fn localversion(hz: Hz, variant: Variant) -> String {
    format!("-lazyinit-hz{hz}-{variant}")
}

/// The fragments for one build of a tree of `version`, in merge order, with
/// their file names.
pub fn fragments_for(
    arch: Arch,
    hz: Hz,
    profile: Profile,
    version: &str,
) -> Vec<(&'static str, &'static str)> {
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
    let series = series_number(version).unwrap_or((u32::MAX - 1, 0));
    v.extend(
        SERIES
            .iter()
            .filter(|(from, until, _, _)| *from <= series && series < *until)
            .map(|&(_, _, name, text)| (name, text)),
    );
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

/// The merged fragment for a build request on a tree of `version`, rendered.
pub fn merged_config(
    arch: Arch,
    hz: Hz,
    variant: Variant,
    profile: Profile,
    version: &str,
) -> String {
    let texts: Vec<&str> = fragments_for(arch, hz, profile, version)
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
        // Every HZ, arch and profile, on a 6.1 and a 5.10 tree (whose series
        // fragment comes last).
        let versions = ["6.1.192", "5.10.218"];
        for (n, arch, profile, version) in Hz::SUPPORTED.into_iter().flat_map(|n| {
            [Arch::X86_64, Arch::Arm64].into_iter().flat_map(move |a| {
                versions
                    .into_iter()
                    .flat_map(move |v| [(n, a, Profile::Qemu, v), (n, a, Profile::Cloud, v)])
            })
        }) {
            let text = merged_config(arch, hz(n), Variant::Fix, profile, version);
            let p = parse(&text);
            assert_eq!(p["CONFIG_HZ"].as_deref(), Some(n.to_string().as_str()));
            for other in Hz::SUPPORTED {
                let want = (other == n).then(|| "y".to_string());
                assert_eq!(p[&format!("CONFIG_HZ_{other}")], want, "HZ {n} vs {other}");
            }
            if profile == Profile::Cloud {
                for o in ["CONFIG_BLK_DEV_NVME", "CONFIG_ENA_ETHERNET", "CONFIG_KEXEC"] {
                    assert_eq!(p[o].as_deref(), Some("y"), "{arch} HZ {n} {version}: {o}");
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
            "6.1.192",
        ));
        let a = parse(&merged_config(
            Arch::Arm64,
            hz(100),
            Variant::Fix,
            Profile::Qemu,
            "6.1.192",
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
            "6.1.192",
        ));
        let c = parse(&merged_config(
            Arch::Arm64,
            hz(100),
            Variant::Fix,
            Profile::Cloud,
            "6.1.192",
        ));
        assert!(!q.contains_key("CONFIG_BLK_DEV_NVME"));
        assert_eq!(c["CONFIG_BLK_DEV_NVME"].as_deref(), Some("y"));
        assert_eq!(c["CONFIG_ENA_ETHERNET"].as_deref(), Some("y"));
        assert_eq!(c["CONFIG_ACPI"].as_deref(), Some("y"));
        // The platform is in both, so that a cloud build is a small delta
        // of the QEMU tree (ACPI changes most of its objects): only the
        // instance's devices differ.
        assert_eq!(q["CONFIG_ACPI"].as_deref(), Some("y"));
        let differ: Vec<&String> = c
            .keys()
            .filter(|k| q.get(*k) != c.get(*k))
            .chain(q.keys().filter(|k| !c.contains_key(*k)))
            .collect();
        assert_eq!(
            differ,
            [
                "CONFIG_BLK_DEV_NVME",
                "CONFIG_ENA_ETHERNET",
                "CONFIG_ETHERNET",
                "CONFIG_NET_VENDOR_AMAZON",
                "CONFIG_NVME_CORE"
            ],
            "the cloud profile's delta"
        );
        // The kexec'd kernel runs our initramfs only: no AMI root filesystem.
        assert!(!c.contains_key("CONFIG_XFS_FS"));
    }

    #[test]
    fn rendering_is_stable_and_round_trips() {
        let a = merged_config(Arch::Arm64, hz(300), Variant::Fix, Profile::Qemu, "6.1.192");
        let b = merged_config(Arch::Arm64, hz(300), Variant::Fix, Profile::Qemu, "6.1.192");
        assert_eq!(a, b);
        let opts = parse(&a);
        assert_eq!(render(&opts), a);
    }

    #[test]
    fn only_5_10_trees_get_the_series_fragment() {
        for arch in Arch::ALL {
            for profile in [Profile::Qemu, Profile::Cloud] {
                let names = |v: &str| -> Vec<&str> {
                    fragments_for(arch, hz(250), profile, v)
                        .iter()
                        .map(|(n, _)| *n)
                        .collect()
                };
                assert!(names("5.10.262").contains(&"series-5.10.config"));
                assert!(names("5.10.79").contains(&"series-5.10.config"));
                for other in [
                    "6.1.192",
                    "6.12.117",
                    "5.4.160",
                    "5.1.10",
                    "7.3.4-1~bpo13+1",
                ] {
                    assert!(!names(other).contains(&"series-5.10.config"), "{other}");
                }
                // /proc/sys: PROC_SYSCTL before 7.3, SYSCTL from 7.3 (also
                // 7.10, which sorts before 7.3 as text).
                for before in ["5.10.262", "6.1.192", "6.12.118-1", "7.2.13-1"] {
                    assert!(names(before).contains(&"before-7.3.config"), "{before}");
                    assert!(!names(before).contains(&"since-7.3.config"), "{before}");
                }
                for since in ["7.3.4-1~bpo13+1", "7.3~rc7", "7.10.1", "8.0"] {
                    assert!(names(since).contains(&"since-7.3.config"), "{since}");
                    assert!(!names(since).contains(&"before-7.3.config"), "{since}");
                }
            }
        }
        let p = parse(&merged_config(
            Arch::X86_64,
            hz(250),
            Variant::Fix,
            Profile::Qemu,
            "5.10.262",
        ));
        assert_eq!(p["CONFIG_EMBEDDED"], None);
        assert_eq!(p["CONFIG_EXPERT"], None);
        assert_eq!(p["CONFIG_EXT4_FS"].as_deref(), Some("y"));
        // 6.1's merged fragment is what it was before 5.10 existed (its
        // cache keys do not move).
        assert!(!merged_config(
            Arch::X86_64,
            hz(250),
            Variant::Fix,
            Profile::Qemu,
            "6.1.192"
        )
        .contains("CONFIG_EMBEDDED"));
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
