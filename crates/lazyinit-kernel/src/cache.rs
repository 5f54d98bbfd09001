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

use lazyinit_core::{Arch, Hz, KernelSource, Variant};
use serde::{Deserialize, Serialize};

use crate::fragments::Profile;
use crate::variant::{Method, Patch};

/// Bumped when the build recipe changes in a way the inputs below miss.
pub const RECIPE_VERSION: u32 = 1;

/// What a finished build records (`manifest.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub arch: Arch,
    pub hz: Hz,
    pub variant: Variant,
    pub profile: Profile,
    /// As asked: `debian-6.1`, `5.10.79` or a path.
    pub source: KernelSource,
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
    /// sha256 of the resolved `.config` (kept beside as `config`).
    pub config_sha256: String,
    /// sha256 of the merged fragment that went into `allnoconfig`.
    pub fragment_sha256: String,
    /// Image file name inside the build directory (`bzImage` or `Image`).
    pub image_file: String,
    pub image_sha256: String,
    pub image_bytes: u64,
    /// First line of `<cc> --version`.
    pub compiler: String,
    pub build_seconds: f64,
    pub built_at: chrono::DateTime<chrono::Utc>,
    pub cache_key: String,
    pub recipe_version: u32,
}

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
) -> String {
    let patches: Vec<String> = patches
        .iter()
        .map(|p| format!("{}:{}", p.name, lazyinit_core::paths::sha256_hex(p.text)))
        .collect();
    format!(
        "lazyinit-kernel recipe {RECIPE_VERSION}\nsource {source_identity}\narch {arch}\nprofile {profile}\nhz {hz}\nvariant {variant}\nmethod {method}\npatches {}\ncompiler {compiler}\nconfig {}\n",
        patches.join(" "),
        lazyinit_core::paths::sha256_hex(merged_config)
    )
}

pub fn cache_key(material: &str) -> String {
    lazyinit_core::paths::sha256_hex(material)
}

/// A file-name-safe short name for a source.
pub fn source_slug(source: &KernelSource, identity: &str) -> String {
    match source {
        KernelSource::Debian61
        | KernelSource::Debian612
        | KernelSource::Debian510
        | KernelSource::Version(_) => {
            source.to_string()
        }
        KernelSource::Path(_) => {
            let hex = identity.rsplit(':').next().unwrap_or(identity);
            format!("path-{}", &hex[..hex.len().min(12)])
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

/// The build slot shared by both variants of one source/arch/HZ/profile.
pub fn slot_dir(cache_dir: &Path, slug: &str, arch: Arch, hz: Hz, profile: Profile) -> PathBuf {
    kernel_dir(cache_dir)
        .join("work")
        .join(format!("{slug}-{arch}-hz{hz}-{profile}"))
}

/// Read a finished build directory; `None` if it is not a complete build
/// (no manifest, unreadable manifest, or an image of the wrong size).
pub fn load(dir: &Path) -> Option<(Manifest, PathBuf)> {
    let manifest_path = dir.join("manifest.json");
    let m: Manifest = serde_json::from_slice(&std::fs::read(&manifest_path).ok()?).ok()?;
    let image = dir.join(&m.image_file);
    (std::fs::metadata(&image).ok()?.len() == m.image_bytes).then_some((m, manifest_path))
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
        );
        assert_ne!(base, cache_key(&other_patch));
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
        let s = source_slug(
            &KernelSource::Path("/src/linux 5.10".into()),
            "tree:deadbeefcafe0011",
        );
        assert_eq!(s, "path-deadbeefcafe");
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
