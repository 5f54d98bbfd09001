//! The content-keyed cache of built kernels, and the manifest beside each.
//!
//! Layout under `<cache>/kernel/`:
//! - `builds/<name>-<key16>/` one finished kernel: the image, `manifest.json`,
//!   the resolved `config` and the `build.log`. Written under a `.tmp-` name
//!   and renamed when complete, so a directory with this name is never half
//!   built.
//! - `work/<source>-<arch>-hz<HZ>-<profile>/` a build slot: one source copy
//!   (`linux/`), built in place and reused across variants, so a variant
//!   switch only recompiles fs/ext4 and what names the kernel release.
//! - `sources.json` remembered identities of source tarballs.

use std::path::{Path, PathBuf};

use lazyinit_core::identity::KernelId;
use lazyinit_core::{Arch, Hz, KernelSource, Variant};
use serde::{Deserialize, Serialize};

use crate::fragments::Profile;
use crate::variant::{Method, Patch};

/// Bumped when the build recipe changes in a way the inputs below miss.
pub const RECIPE_VERSION: u32 = 1;

/// What a finished build records (`manifest.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The kernel built (its fields at the top of `manifest.json`, as
    /// before the type): the source as asked (`debian-6.1`, `5.10.79` or
    /// a path).
    #[serde(flatten)]
    pub id: KernelId,
    /// `sha256:<hex>` of the tarball or `tree:<hex>` of a tree.
    pub source_identity: String,
    /// `make kernelversion`, e.g. `6.1.192`.
    pub source_version: String,
    /// The Debian package and its version, for a Debian source
    /// (`linux-source-5.10 5.10.262-1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debian_package: Option<String>,
    /// Exactly what `uname -r` prints in the guest.
    pub kernel_release: String,
    pub localversion: String,
    /// How the variant was made from the released tree.
    pub variant_method: Method,
    /// The patch applied (none when as released).
    pub patch: Option<String>,
    pub patch_sha256: Option<String>,
    /// The released tree's own variant, read from its text.
    pub released_variant: Option<Variant>,
    /// Built as committed (a bisect's commit): what the compiled
    /// `ext4_run_li_request` reads as, fix, nofix or unknown, a fact of
    /// the build and never a reason not to build it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_text: Option<crate::variant::Detected>,
    /// sha256 of the resolved `.config` (kept beside as `config`).
    pub config_sha256: String,
    /// Where the config came from: `fragments` (allnoconfig plus
    /// kernels/fragments) or `file:<path> sha256:<16 hex>` (`--config`).
    #[serde(default = "fragments_origin")]
    pub config_origin: String,
    /// With a user's config: the options the harness set, `NAME: from -> to`
    /// (all of them, with Kconfig's consequences, in `config-changes.txt`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_set: Vec<String>,
    /// With a user's config: how many other options Kconfig changed as a
    /// consequence.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub config_followed: usize,
    /// sha256 of the merged fragment that went into `allnoconfig`.
    pub fragment_sha256: String,
    /// Image file name inside the build directory (`bzImage` or `Image`).
    pub image_file: String,
    pub image_sha256: String,
    pub image_bytes: u64,
    /// First line of `<cc> --version`.
    pub compiler: String,
    pub build_seconds: f64,
    /// CPU-seconds (user + system) of the build's commands: the
    /// builder's children while it built (one build per `kernel build`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_cpu_seconds: Option<f64>,
    /// The compiler cache during this build: objects copied from it and
    /// objects compiled (absent: built without ccache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ccache: Option<CcacheCounts>,
    pub built_at: chrono::DateTime<chrono::Utc>,
    pub cache_key: String,
    pub recipe_version: u32,
}

/// ccache's counters over one build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CcacheCounts {
    pub hits: u64,
    pub misses: u64,
}

fn fragments_origin() -> String {
    FRAGMENTS_ORIGIN.to_string()
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `config_origin` of a kernel configured from kernels/fragments.
pub const FRAGMENTS_ORIGIN: &str = "fragments";

/// Everything that determines a build's output, rendered as text and hashed
/// into the cache key: the source's identity, arch, profile, HZ, variant, the
/// merged config fragment (the resolved config is a function of it, the
/// source and the compiler), the candidate patches, the compiler, the recipe.
#[allow(clippy::too_many_arguments)]
pub fn key_material(
    source_identity: &str,
    arch: Arch,
    profile: Profile,
    hz: Hz,
    variant: Variant,
    method: Method,
    patches: &[Patch],
    merged_config: &str,
    compiler: &str,
    base_config_sha256: Option<&str>,
) -> String {
    let patches: Vec<String> = patches
        .iter()
        .map(|p| format!("{}:{}", p.name, lazyinit_core::paths::sha256_hex(p.text)))
        .collect();
    let mut m = format!(
        "lazyinit-kernel recipe {RECIPE_VERSION}\nsource {source_identity}\narch {arch}\nprofile {profile}\nhz {hz}\nvariant {variant}\nmethod {method}\npatches {}\ncompiler {compiler}\nconfig {}\n",
        patches.join(" "),
        lazyinit_core::paths::sha256_hex(merged_config)
    );
    // Only with a user's config, so the keys of the minimal kernels stay.
    if let Some(sha) = base_config_sha256 {
        m.push_str(&format!("base-config sha256:{sha}\n"));
    }
    m
}

pub fn cache_key(material: &str) -> String {
    lazyinit_core::paths::sha256_hex(material)
}

/// A file-name-safe short name for a source. A path's name comes from the
/// path, not its state, so one tree keeps one build slot (recopied when its
/// state changes) instead of leaving one behind per edit.
pub fn source_slug(source: &KernelSource) -> String {
    match source {
        KernelSource::Debian61
        | KernelSource::Debian612
        | KernelSource::Debian510
        | KernelSource::Version(_) => source.to_string(),
        // `debian-7.2.12-1_bpo13_1`: Debian's `~` and `+` kept out of names.
        KernelSource::Debian(d) => format!(
            "debian-{}",
            d.as_str()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                })
                .collect::<String>()
        ),
        KernelSource::Path(p) => {
            let base: String = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .take(32)
                .collect();
            // `/src/linux`, `/src/linux/` and a symlink to it: one slot.
            let p = p.canonicalize().unwrap_or_else(|_| p.clone());
            let hex = lazyinit_core::paths::sha256_hex(p.display().to_string());
            format!("path-{base}-{}", &hex[..8])
        }
    }
}

pub fn kernel_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("kernel")
}

pub fn builds_dir(cache_dir: &Path) -> PathBuf {
    kernel_dir(cache_dir).join("builds")
}

/// The finished build's directory name: readable, and unique by key.
pub fn build_dir_name(
    slug: &str,
    arch: Arch,
    hz: Hz,
    variant: Variant,
    profile: Profile,
    key: &str,
) -> String {
    format!("{slug}-{arch}-hz{hz}-{variant}-{profile}-{}", &key[..16])
}

/// The build slot of one source/arch/HZ (and user config, by its sha256:
/// another config rebuilds everything), shared by both variants: Kbuild
/// rebuilds only what the variant's patch touches. The `cloud` profile (the
/// `qemu` one plus NVMe and ENA) has a slot of its own beside it, named with
/// `-cloud` (build/mod.rs), seeded by a copy of this one: a profile switch in
/// one shared tree made the twin's cells and the QEMU tests recompile most
/// of it in turn (docs/ci.md).
pub fn slot_dir(
    cache_dir: &Path,
    slug: &str,
    arch: Arch,
    hz: Hz,
    base_config_sha256: Option<&str>,
) -> PathBuf {
    let cfg = base_config_sha256
        .map(|s| format!("-cfg{}", &s[..s.len().min(8)]))
        .unwrap_or_default();
    kernel_dir(cache_dir)
        .join("work")
        .join(format!("{slug}-{arch}-hz{hz}{cfg}"))
}

/// Read a finished build directory; `None` if it is not a complete build
/// (no manifest, unreadable manifest, or an image whose size or sha256 is
/// not the one recorded when it was built: a truncated copy, a disk error
/// or an edit is rebuilt, never booted). Hashing an image takes tens of
/// milliseconds; a boot takes seconds.
pub fn load(dir: &Path) -> Option<(Manifest, PathBuf)> {
    let manifest_path = dir.join("manifest.json");
    let m: Manifest = serde_json::from_slice(&std::fs::read(&manifest_path).ok()?).ok()?;
    let image = dir.join(&m.image_file);
    let len = match std::fs::metadata(&image) {
        Ok(meta) => meta.len(),
        Err(e) => {
            tracing::warn!(
                "{}: the cached kernel image cannot be read ({e}): it is built again",
                image.display()
            );
            return None;
        }
    };
    if len != m.image_bytes {
        tracing::warn!(
            "{}: {len} bytes, manifest.json says {} (truncated or replaced since it was built): it is built again",
            image.display(),
            m.image_bytes
        );
        return None;
    }
    let bytes = std::fs::read(&image).ok()?;
    if lazyinit_core::paths::sha256_hex(&bytes) != m.image_sha256 {
        tracing::warn!(
            "{}: not the image that was built (its sha256 differs from manifest.json): it is built again",
            image.display()
        );
        return None;
    }
    Some((m, manifest_path))
}

/// Every complete build in the cache, oldest first.
pub fn list(cache_dir: &Path) -> Vec<Manifest> {
    let Ok(rd) = std::fs::read_dir(builds_dir(cache_dir)) else {
        return Vec::new();
    };
    let mut out: Vec<Manifest> = rd
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| load(&e.path()).map(|(m, _)| m))
        .collect();
    out.sort_by_key(|m| m.built_at);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::variant::PATCHES;

    fn material(src: &str, hz: u32, variant: Variant, config: &str, cc: &str) -> String {
        key_material(
            src,
            Arch::X86_64,
            Profile::Qemu,
            Hz::new(hz).unwrap(),
            variant,
            Method::Reverted,
            &PATCHES[..1],
            config,
            cc,
            None,
        )
    }

    #[test]
    fn key_changes_with_every_input() {
        let base = cache_key(&material(
            "sha256:aa",
            100,
            Variant::NoFix,
            "CONFIG_A=y\n",
            "gcc 12",
        ));
        assert_eq!(
            base,
            cache_key(&material(
                "sha256:aa",
                100,
                Variant::NoFix,
                "CONFIG_A=y\n",
                "gcc 12"
            ))
        );
        for other in [
            material("sha256:ab", 100, Variant::NoFix, "CONFIG_A=y\n", "gcc 12"),
            material("sha256:aa", 250, Variant::NoFix, "CONFIG_A=y\n", "gcc 12"),
            material("sha256:aa", 100, Variant::Fix, "CONFIG_A=y\n", "gcc 12"),
            material("sha256:aa", 100, Variant::NoFix, "CONFIG_B=y\n", "gcc 12"),
            material("sha256:aa", 100, Variant::NoFix, "CONFIG_A=y\n", "gcc 13"),
        ] {
            assert_ne!(base, cache_key(&other), "{other}");
        }
        let other_patch = key_material(
            "sha256:aa",
            Arch::X86_64,
            Profile::Qemu,
            Hz::new(100).unwrap(),
            Variant::NoFix,
            Method::Reverted,
            &PATCHES[1..2],
            "CONFIG_A=y\n",
            "gcc 12",
            None,
        );
        assert_ne!(base, cache_key(&other_patch));
        let with_config = |sha: &str| {
            cache_key(&key_material(
                "sha256:aa",
                Arch::X86_64,
                Profile::Qemu,
                Hz::new(100).unwrap(),
                Variant::NoFix,
                Method::Reverted,
                &PATCHES[..1],
                "CONFIG_A=y\n",
                "gcc 12",
                Some(sha),
            ))
        };
        assert_ne!(base, with_config("11"));
        assert_ne!(with_config("11"), with_config("12"));
    }

    #[test]
    fn names_are_readable_and_path_sources_are_slugged() {
        let key = "0123456789abcdef0123";
        let n = build_dir_name(
            "debian-6.1",
            Arch::Arm64,
            Hz::new(100).unwrap(),
            Variant::Fix,
            Profile::Qemu,
            key,
        );
        assert_eq!(n, "debian-6.1-arm64-hz100-fix-qemu-0123456789abcdef");
        let s = source_slug(&KernelSource::Path("/src/linux 5.10".into()));
        assert!(s.starts_with("path-linux_5.10-"), "{s}");
        assert_eq!(s.len(), "path-linux_5.10-".len() + 8);
        assert_ne!(
            s,
            source_slug(&KernelSource::Path("/other/linux 5.10".into()))
        );
        assert_eq!(source_slug(&KernelSource::Debian510), "debian-5.10");
        let slot = slot_dir(
            Path::new("/c"),
            "debian-5.10",
            Arch::X86_64,
            Hz::new(250).unwrap(),
            None,
        );
        assert!(slot.ends_with("kernel/work/debian-5.10-x86_64-hz250"));
        let slot = slot_dir(
            Path::new("/c"),
            "s",
            Arch::X86_64,
            Hz::new(250).unwrap(),
            Some("0123456789abcdef"),
        );
        assert!(slot.ends_with("s-x86_64-hz250-cfg01234567"));
    }

    /// A build whose image changed after it was recorded (same size, other
    /// bytes) is not a build: it is neither loaded nor listed.
    #[test]
    fn an_image_is_trusted_by_its_hash_not_its_size() {
        let d = tempfile::tempdir().unwrap();
        let dir = builds_dir(d.path()).join("b");
        std::fs::create_dir_all(&dir).unwrap();
        let image = b"kernel image bytes".to_vec();
        std::fs::write(dir.join("bzImage"), &image).unwrap();
        let m = serde_json::json!({
            "arch": "x86_64", "hz": 250, "variant": "fix", "profile": "qemu",
            "source": "debian-6.1", "source_identity": "sha256:aa",
            "source_version": "6.1.1", "kernel_release": "6.1.1-x",
            "localversion": "-x", "variant_method": "as-released", "patch": null,
            "patch_sha256": null, "released_variant": null, "config_sha256": "c",
            "fragment_sha256": "f", "image_file": "bzImage",
            "image_sha256": lazyinit_core::paths::sha256_hex(&image),
            "image_bytes": image.len(), "compiler": "gcc", "build_seconds": 1.0,
            "built_at": "2026-12-01T00:00:00Z", "cache_key": "k", "recipe_version": 1
        });
        std::fs::write(dir.join("manifest.json"), m.to_string()).unwrap();
        assert!(load(&dir).is_some(), "the intact build loads");
        assert_eq!(list(d.path()).len(), 1);
        let mut other = image.clone();
        other[0] ^= 1;
        std::fs::write(dir.join("bzImage"), &other).unwrap();
        assert!(
            load(&dir).is_none(),
            "a changed image of the same size loaded"
        );
        assert!(list(d.path()).is_empty());
    }

    #[test]
    fn incomplete_builds_are_not_listed() {
        let d = tempfile::tempdir().unwrap();
        let b = builds_dir(d.path());
        std::fs::create_dir_all(b.join("half")).unwrap();
        std::fs::write(b.join("half").join("bzImage"), b"x").unwrap();
        std::fs::create_dir_all(b.join(".tmp-x")).unwrap();
        assert!(list(d.path()).is_empty());
        assert!(load(&b.join("half")).is_none());
    }
}
