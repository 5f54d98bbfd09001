//! A user's own kernel config as the base of a build (`--config FILE`):
//! a distro's `/boot/config-*`, a cloud config, a release candidate's.
//!
//! The harness sets on top only what its guest needs (`kernels/fragments/
//! needs*.config`, plus `cloud*.config` for EC2), the HZ under test and
//! `LOCALVERSION`, then `make olddefconfig` resolves the rest as the user's
//! config says. Before anything is built:
//! - a config that cannot be measured is refused with the option named
//!   ([`refuse_before`] on the user's file, [`refuse_after`] on the resolved
//!   config: no ext4, a jiffies clocksource, a needed driver that stays a
//!   module the guest cannot load);
//! - every option that differs from the user's file is reported
//!   ([`ConfigReport`]): those the harness set, and those Kconfig changed
//!   as a consequence.
//!
//! Only the kernel image is built (no modules): the guest loads none.

use std::fmt;
use std::path::{Path, PathBuf};

use lazyinit_core::{Arch, Hz, Variant};

use crate::error::KernelError;
use crate::fragments::{self, Options, Profile};

const NEEDS: &str = include_str!("../../../kernels/fragments/needs.config");
const NEEDS_X86_64: &str = include_str!("../../../kernels/fragments/needs-x86_64.config");
const NEEDS_ARM64: &str = include_str!("../../../kernels/fragments/needs-arm64.config");

/// A user's config file, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseConfig {
    pub path: PathBuf,
    pub text: String,
    pub sha256: String,
}

impl BaseConfig {
    pub fn read(path: &Path) -> Result<BaseConfig, KernelError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            KernelError::BadInput(format!("cannot read kernel config {}: {e}", path.display()))
        })?;
        if fragments::parse(&text).is_empty() {
            return Err(KernelError::BadInput(format!(
                "{} is not a kernel config (no CONFIG_ lines)",
                path.display()
            )));
        }
        Ok(BaseConfig {
            path: path.to_path_buf(),
            sha256: lazyinit_core::paths::sha256_hex(&text),
            text,
        })
    }

    /// How `kernel list` and the manifest name it: `file:<path> sha256:<16>`.
    pub fn origin(&self) -> String {
        format!("file:{} sha256:{}", self.path.display(), &self.sha256[..16])
    }
}

/// The fragments the harness applies on top of a user's config, in order.
pub fn needs_fragments(arch: Arch, hz: Hz, profile: Profile) -> Vec<(&'static str, &'static str)> {
    let mut v = vec![("needs.config", NEEDS)];
    v.push(match arch {
        Arch::X86_64 => ("needs-x86_64.config", NEEDS_X86_64),
        Arch::Arm64 => ("needs-arm64.config", NEEDS_ARM64),
    });
    // HZ and, for EC2, the instance's devices: the same fragments as the
    // minimal kernels (`fragments_for` minus base and arch).
    v.extend(
        fragments::fragments_for(arch, hz, profile, "")
            .into_iter()
            .filter(|(n, _)| n.starts_with("hz-") || n.starts_with("cloud")),
    );
    v
}

/// The options the harness needs to hold in the resolved config, with
/// `LOCALVERSION` (see [`fragments::merge`]).
pub fn needs(arch: Arch, hz: Hz, variant: Variant, profile: Profile) -> Options {
    let texts: Vec<&str> = needs_fragments(arch, hz, profile)
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    fragments::merge(&texts, &fragments::localversion(hz, variant))
}

/// Why a config cannot be measured, naming the option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub option: String,
    pub why: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.option, self.why)
    }
}

fn value<'a>(opts: &'a Options, name: &str) -> Option<&'a str> {
    opts.get(name).and_then(|v| v.as_deref())
}

fn is_on(opts: &Options, name: &str) -> bool {
    matches!(value(opts, name), Some("y"))
}

/// Kernel parameters that leave a guest on a jiffies clocksource (or
/// without the TSC), where the fixed kernel measures in ticks.
const JIFFIES_PARAMS: [&str; 4] = [
    "clocksource=jiffies",
    "clocksource=refined-jiffies",
    "notsc",
    "tsc=unstable",
];

/// Refusals that the user's file alone shows (instant, before any work).
pub fn refuse_before(user: &Options, arch: Arch) -> Vec<Refusal> {
    let mut out = Vec::new();
    if !matches!(value(user, "CONFIG_EXT4_FS"), Some("y" | "m")) {
        out.push(Refusal {
            option: "CONFIG_EXT4_FS".into(),
            why: "not set: this kernel has no ext4, so there is no lazy init to measure".into(),
        });
    }
    // A command line built into the kernel that wins over the harness's
    // (console, TSC reference, init_itable) or that forces a tick clock.
    let (forced, builtin_used) = match arch {
        Arch::X86_64 => (
            ["CONFIG_CMDLINE_OVERRIDE"].as_slice(),
            is_on(user, "CONFIG_CMDLINE_BOOL"),
        ),
        Arch::Arm64 => (
            ["CONFIG_CMDLINE_FORCE"].as_slice(),
            is_on(user, "CONFIG_CMDLINE_FORCE") || is_on(user, "CONFIG_CMDLINE_EXTEND"),
        ),
    };
    for f in forced {
        if is_on(user, f) {
            out.push(Refusal {
                option: f.to_string(),
                why: "=y: the kernel ignores the command line the harness boots it with (console, clock reference, init_itable)".into(),
            });
        }
    }
    if builtin_used {
        let cmdline = value(user, "CONFIG_CMDLINE")
            .unwrap_or("")
            .trim_matches('"');
        for w in cmdline.split_whitespace() {
            if JIFFIES_PARAMS.contains(&w) {
                out.push(Refusal {
                    option: "CONFIG_CMDLINE".into(),
                    why: format!("its `{w}` would leave the guest on a jiffies clocksource, where the fixed kernel measures in ticks like the unfixed one"),
                });
            }
        }
    }
    out
}

/// What the guest's clock needs in the resolved config: the only
/// clocksources finer than a tick under QEMU.
fn clock_needs(arch: Arch) -> (&'static str, &'static str) {
    match arch {
        Arch::X86_64 => ("CONFIG_X86_TSC", "the TSC clocksource"),
        Arch::Arm64 => ("CONFIG_ARM_ARCH_TIMER", "the architected timer"),
    }
}

/// String options naming files in the source tree that a distro config
/// points at its own packaging (`debian/certs/...`); a build from another
/// tree fails on them late, so one that is missing is emptied (reported).
const TREE_FILES: [&str; 2] = [
    "CONFIG_SYSTEM_TRUSTED_KEYS",
    "CONFIG_SYSTEM_REVOCATION_KEYS",
];

/// One option set differently from the user's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub option: String,
    /// In the user's file (None: not set or not named).
    pub from: Option<String>,
    /// In the resolved config (None: not set or absent).
    pub to: Option<String>,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "not set".into());
        write!(
            f,
            "{}: {} -> {}",
            self.option,
            show(&self.from),
            show(&self.to)
        )
    }
}

/// The user's options with the needs on top: the `.config` that
/// `olddefconfig` resolves. `tree_has(path)` says whether the source tree
/// holds a file (for [`TREE_FILES`]). Returns it and what the harness set.
pub fn overlay(
    user: &Options,
    needs: &Options,
    tree_has: impl Fn(&str) -> bool,
) -> (Options, Vec<Change>) {
    let mut merged = user.clone();
    let mut set = Vec::new();
    let mut put = |merged: &mut Options, k: &str, v: Option<String>| {
        let from = user.get(k).cloned().flatten();
        if from != v {
            set.push(Change {
                option: k.to_string(),
                from,
                to: v.clone(),
            });
        }
        merged.insert(k.to_string(), v);
    };
    for (k, v) in needs {
        put(&mut merged, k, v.clone().filter(|v| v != "n"));
    }
    for k in TREE_FILES {
        if let Some(v) = value(user, k) {
            let files = v.trim_matches('"');
            if !files.is_empty() && !files.split_whitespace().all(&tree_has) {
                put(&mut merged, k, Some("\"\"".into()));
            }
        }
    }
    (merged, set)
}

/// Refusals that only the resolved config shows (seconds of `olddefconfig`,
/// still before the long build): a need Kconfig would not give, a driver
/// left a module, no clocksource finer than a tick.
pub fn refuse_after(needs: &Options, resolved: &Options, arch: Arch) -> Vec<Refusal> {
    let mut out: Vec<Refusal> = needs
        .iter()
        .filter_map(|(k, want)| {
            let want = want.clone().filter(|v| v != "n");
            let got = resolved.get(k).cloned().flatten();
            if got == want {
                return None;
            }
            let why = match (want.as_deref(), got.as_deref()) {
                (Some("y"), Some("m")) => "stays a module (=m) after the harness set it =y: the guest loads no modules (its initramfs has none), and a dependency of it is a module or limits it to one; make that dependency =y".to_string(),
                (w, g) => format!(
                    "the harness needs {} but the resolved config has {} (a dependency of it is off, or this tree has no such option)",
                    w.unwrap_or("it not set"),
                    g.unwrap_or("it not set")
                ),
            };
            Some(Refusal {
                option: k.clone(),
                why,
            })
        })
        .collect();
    let (clock, what) = clock_needs(arch);
    if !is_on(resolved, clock) {
        out.push(Refusal {
            option: clock.into(),
            why: format!("not set: without {what} the guest's clocksource is jiffies, where the fixed kernel measures in ticks like the unfixed one"),
        });
    }
    out
}

/// Every difference between the user's file and the resolved config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigReport {
    /// Set by the harness (needs, HZ, LOCALVERSION, missing tree files).
    pub set: Vec<Change>,
    /// Changed by Kconfig as a consequence (selects, dependencies, options
    /// this tree does not have).
    pub followed: Vec<Change>,
    /// Options the user's file does not name, given their defaults (a
    /// config from another version).
    pub defaulted: usize,
}

impl ConfigReport {
    pub fn new(user: &Options, set: &[Change], resolved: &Options) -> ConfigReport {
        let followed = user
            .iter()
            .filter(|(k, _)| !set.iter().any(|c| &c.option == *k))
            .filter_map(|(k, from)| {
                let to = resolved.get(k).cloned().flatten();
                (from.clone().filter(|v| v != "n") != to).then(|| Change {
                    option: k.clone(),
                    from: from.clone(),
                    to,
                })
            })
            .collect();
        let defaulted = resolved.keys().filter(|k| !user.contains_key(*k)).count();
        ConfigReport {
            set: set.to_vec(),
            followed,
            defaulted,
        }
    }

    /// `config-changes.txt` beside the build.
    pub fn render(&self, origin: &str) -> String {
        let mut s = format!("# The resolved config against {origin}\n");
        s.push_str(&format!("\n## set by the harness ({})\n", self.set.len()));
        for c in &self.set {
            s.push_str(&format!("{c}\n"));
        }
        s.push_str(&format!(
            "\n## changed by Kconfig as a consequence ({})\n",
            self.followed.len()
        ));
        for c in &self.followed {
            s.push_str(&format!("{c}\n"));
        }
        s.push_str(&format!(
            "\n## not named in the user's config, given their defaults: {}\n",
            self.defaulted
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hz(n: u32) -> Hz {
        Hz::new(n).unwrap()
    }

    fn opts(text: &str) -> Options {
        fragments::parse(text)
    }

    const DISTRO: &str = "CONFIG_EXT4_FS=m\nCONFIG_VIRTIO_BLK=m\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n# CONFIG_IKCONFIG is not set\nCONFIG_SERIAL_8250=y\nCONFIG_SYSTEM_TRUSTED_KEYS=\"debian/certs/debian-uefi-certs.pem\"\nCONFIG_JBD2=m\nCONFIG_NFS_FS=m\n";

    #[test]
    fn needs_carry_hz_identity_and_the_arch_console() {
        let n = needs(Arch::X86_64, hz(100), Variant::NoFix, Profile::Qemu);
        assert_eq!(value(&n, "CONFIG_HZ"), Some("100"));
        assert_eq!(n["CONFIG_HZ_250"], None);
        assert_eq!(value(&n, "CONFIG_IKCONFIG_PROC"), Some("y"));
        assert_eq!(value(&n, "CONFIG_SERIAL_8250_CONSOLE"), Some("y"));
        assert_eq!(
            value(&n, "CONFIG_LOCALVERSION"),
            Some("\"-lazyinit-hz100-nofix\"")
        );
        assert!(!n.contains_key("CONFIG_BLK_DEV_NVME"));
        let a = needs(Arch::Arm64, hz(250), Variant::Fix, Profile::Cloud);
        assert_eq!(value(&a, "CONFIG_SERIAL_AMBA_PL011_CONSOLE"), Some("y"));
        assert_eq!(value(&a, "CONFIG_BLK_DEV_NVME"), Some("y"));
        // Only what the guest needs: none of the minimal build's own
        // choices (its base.config) beyond them.
        for o in [
            "CONFIG_64BIT",
            "CONFIG_DM_DELAY",
            "CONFIG_FUNCTION_GRAPH_TRACER",
            "CONFIG_KEXEC",
        ] {
            assert!(!n.contains_key(o), "{o}");
        }
    }

    #[test]
    fn a_config_without_ext4_is_refused() {
        let r = refuse_before(&opts("# CONFIG_EXT4_FS is not set\n"), Arch::X86_64);
        assert_eq!(r[0].option, "CONFIG_EXT4_FS");
        let r = refuse_before(&opts("CONFIG_EXT2_FS=y\n"), Arch::Arm64);
        assert_eq!(r[0].option, "CONFIG_EXT4_FS");
        assert!(refuse_before(&opts(DISTRO), Arch::X86_64).is_empty());
    }

    #[test]
    fn a_forced_or_jiffies_command_line_is_refused() {
        let x = "CONFIG_EXT4_FS=y\nCONFIG_CMDLINE_BOOL=y\nCONFIG_CMDLINE=\"quiet clocksource=jiffies\"\nCONFIG_CMDLINE_OVERRIDE=y\n";
        let r: Vec<String> = refuse_before(&opts(x), Arch::X86_64)
            .iter()
            .map(|r| r.option.clone())
            .collect();
        assert_eq!(r, ["CONFIG_CMDLINE_OVERRIDE", "CONFIG_CMDLINE"]);
        // A built-in command line that is not used says nothing.
        let unused =
            "CONFIG_EXT4_FS=y\n# CONFIG_CMDLINE_BOOL is not set\nCONFIG_CMDLINE=\"notsc\"\n";
        assert!(refuse_before(&opts(unused), Arch::X86_64).is_empty());
        let arm = "CONFIG_EXT4_FS=m\nCONFIG_CMDLINE=\"tsc=unstable\"\nCONFIG_CMDLINE_EXTEND=y\n";
        let r = refuse_before(&opts(arm), Arch::Arm64);
        assert_eq!(r.len(), 1);
        assert!(
            r[0].to_string()
                .starts_with("CONFIG_CMDLINE: its `tsc=unstable`"),
            "{}",
            r[0]
        );
    }

    #[test]
    fn overlay_sets_only_what_differs_and_says_so() {
        let user = opts(DISTRO);
        let needs = needs(Arch::X86_64, hz(100), Variant::Fix, Profile::Qemu);
        let (merged, set) = overlay(&user, &needs, |_| false);
        let names: Vec<&str> = set.iter().map(|c| c.option.as_str()).collect();
        for o in [
            "CONFIG_EXT4_FS",
            "CONFIG_VIRTIO_BLK",
            "CONFIG_HZ",
            "CONFIG_HZ_100",
            "CONFIG_HZ_250",
            "CONFIG_IKCONFIG",
            "CONFIG_LOCALVERSION",
            "CONFIG_SYSTEM_TRUSTED_KEYS",
        ] {
            assert!(names.contains(&o), "{o} not in {names:?}");
        }
        // Already as needed: not reported.
        assert!(!names.contains(&"CONFIG_SERIAL_8250"));
        let ext4 = set.iter().find(|c| c.option == "CONFIG_EXT4_FS").unwrap();
        assert_eq!(ext4.to_string(), "CONFIG_EXT4_FS: m -> y");
        assert_eq!(value(&merged, "CONFIG_SYSTEM_TRUSTED_KEYS"), Some("\"\""));
        // Untouched: what the guest does not need.
        assert_eq!(value(&merged, "CONFIG_NFS_FS"), Some("m"));
        // A cert file the tree has stays.
        let (merged, _) = overlay(&user, &needs, |p| p == "debian/certs/debian-uefi-certs.pem");
        assert_eq!(
            value(&merged, "CONFIG_SYSTEM_TRUSTED_KEYS"),
            Some("\"debian/certs/debian-uefi-certs.pem\"")
        );
    }

    #[test]
    fn a_needed_driver_left_a_module_is_refused_by_name() {
        let needs = opts("CONFIG_VIRTIO_BLK=y\nCONFIG_EXT4_FS=y\n");
        let resolved = opts("CONFIG_VIRTIO_BLK=m\nCONFIG_EXT4_FS=y\nCONFIG_X86_TSC=y\n");
        let r = refuse_after(&needs, &resolved, Arch::X86_64);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].option, "CONFIG_VIRTIO_BLK");
        assert!(r[0].why.contains("loads no modules"), "{}", r[0]);
        let resolved = opts("CONFIG_VIRTIO_BLK=y\nCONFIG_EXT4_FS=y\n");
        let r = refuse_after(&needs, &resolved, Arch::Arm64);
        assert_eq!(r[0].option, "CONFIG_ARM_ARCH_TIMER");
        assert!(r[0].why.contains("jiffies"));
    }

    #[test]
    fn report_separates_the_harness_from_kconfig() {
        let user = opts(DISTRO);
        let needs = opts("CONFIG_EXT4_FS=y\n");
        let (_, set) = overlay(&user, &needs, |_| true);
        let resolved = opts("CONFIG_EXT4_FS=y\nCONFIG_JBD2=y\nCONFIG_VIRTIO_BLK=m\nCONFIG_HZ_250=y\nCONFIG_HZ=250\nCONFIG_SERIAL_8250=y\nCONFIG_SYSTEM_TRUSTED_KEYS=\"debian/certs/debian-uefi-certs.pem\"\nCONFIG_NFS_FS=m\nCONFIG_NEW=y\n# CONFIG_IKCONFIG is not set\n");
        let r = ConfigReport::new(&user, &set, &resolved);
        assert_eq!(r.set.len(), 1);
        assert_eq!(r.followed.len(), 1);
        assert_eq!(r.followed[0].to_string(), "CONFIG_JBD2: m -> y");
        assert_eq!(r.defaulted, 1);
        let text = r.render("file:/boot/config-x sha256:00");
        assert!(
            text.contains("## set by the harness (1)\nCONFIG_EXT4_FS: m -> y\n"),
            "{text}"
        );
        assert!(text.contains("## changed by Kconfig as a consequence (1)\nCONFIG_JBD2: m -> y\n"));
    }

    #[test]
    fn base_config_must_be_a_config() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config");
        std::fs::write(&p, "hello\n").unwrap();
        assert!(matches!(
            BaseConfig::read(&p),
            Err(KernelError::BadInput(_))
        ));
        std::fs::write(&p, DISTRO).unwrap();
        let b = BaseConfig::read(&p).unwrap();
        assert!(b
            .origin()
            .starts_with(&format!("file:{} sha256:", p.display())));
        assert!(BaseConfig::read(&d.path().join("nope")).is_err());
    }
}
