//! The image cache: `<cache>/images/<arch>-<key>/{initramfs.cpio.gz,manifest.json}`,
//! keyed by everything that goes into an image.

use std::path::{Path, PathBuf};

use lazyinit_core::aside::{is_aside, Aside};
use lazyinit_core::paths::sha256_hex;
use lazyinit_core::Arch;
use serde::{Deserialize, Serialize};

use crate::apt::Package;
use crate::error::ImageError;
use crate::{layout, ImageArtifact, BUILDER_VERSION};

const IMAGE: &str = "initramfs.cpio.gz";
const MANIFEST: &str = "manifest.json";

/// What is in an image and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageManifest {
    pub arch: Arch,
    /// Content key (hex SHA-256).
    pub key: String,
    pub builder_version: String,
    /// The .deb files it was made from, with their SHA-256.
    pub packages: Vec<Package>,
    /// Number of entries in the cpio.
    pub entries: usize,
    /// Size of the compressed image.
    pub size_bytes: u64,
    /// SHA-256 of the compressed image.
    pub sha256: String,
    /// Time the build took, download included.
    pub build_seconds: f64,
    /// RFC 3339.
    pub created: String,
}

/// The content key: builder version, arch, each package's SHA-256, the
/// file selection and the guest files.
pub fn key(arch: Arch, pkgs: &[Package]) -> String {
    let mut text = format!("builder {BUILDER_VERSION}\narch {arch}\n");
    for p in pkgs {
        text.push_str(&format!("deb {} {} {}\n", p.name, p.version, p.sha256));
    }
    for f in layout::FROM_PACKAGES {
        text.push_str(&format!("take {f}\n"));
    }
    for (path, content, mode) in layout::GUEST_FILES {
        text.push_str(&format!("file {path} {mode:o} {}\n", sha256_hex(content)));
    }
    sha256_hex(text)
}

pub fn image_dir(cache_dir: &Path, arch: Arch, key: &str) -> PathBuf {
    cache_dir
        .join("images")
        .join(format!("{arch}-{}", &key[..16]))
}

/// The cached image in `dir`, if complete and intact.
pub fn load(dir: &Path) -> Result<Option<ImageArtifact>, ImageError> {
    let (path, mpath) = (dir.join(IMAGE), dir.join(MANIFEST));
    let Ok(text) = std::fs::read_to_string(&mpath) else {
        return Ok(None);
    };
    let manifest: ImageManifest =
        serde_json::from_str(&text).map_err(|source| ImageError::Manifest {
            path: mpath.clone(),
            source,
        })?;
    match std::fs::read(&path) {
        Ok(bytes) if sha256_hex(&bytes) == manifest.sha256 => Ok(Some(ImageArtifact {
            path,
            manifest,
            cached: true,
        })),
        _ => {
            tracing::warn!(dir = %dir.display(), "cached guest image is damaged; rebuilding it");
            Ok(None)
        }
    }
}

/// Writes the image and manifest next to each other beside `dir`, then
/// moves them into place in one rename (core's `aside`), so readers never
/// see half an image nor a moment with none. An intact image already there
/// stays (a concurrent builder's identical result is as good as ours)
/// unless `force`; a damaged one is replaced.
pub fn store(
    dir: &Path,
    gz: &[u8],
    manifest: &ImageManifest,
    force: bool,
) -> Result<PathBuf, ImageError> {
    let name = dir.file_name().expect("image dirs have a name");
    let aside = Aside::new(dir, &format!("tmp-{}-", name.to_string_lossy()))
        .map_err(|e| ImageError::io("create a folder beside", dir, e))?;
    let out = aside.path();
    std::fs::write(out.join(IMAGE), gz)
        .map_err(|e| ImageError::io("write", &out.join(IMAGE), e))?;
    let json = serde_json::to_string_pretty(manifest).expect("a manifest always serializes");
    std::fs::write(out.join(MANIFEST), json)
        .map_err(|e| ImageError::io("write", &out.join(MANIFEST), e))?;
    aside
        .publish(|d| !force && matches!(load(d), Ok(Some(_))))
        .map_err(|e| ImageError::io("move the image into", dir, e))?;
    Ok(dir.join(IMAGE))
}

/// Every image in the cache, newest first.
pub fn list(cache_dir: &Path) -> Result<Vec<ImageArtifact>, ImageError> {
    let root = cache_dir.join("images");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        if is_aside(&entry.file_name()) {
            continue;
        }
        if let Some(found) = load(&entry.path())? {
            out.push(found);
        }
    }
    out.sort_by(|a, b| b.manifest.created.cmp(&a.manifest.created));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg(sha: &str) -> Package {
        Package {
            name: "libc6".into(),
            version: "2.36".into(),
            arch: "arm64".into(),
            sha256: sha.into(),
            depends: vec![],
        }
    }

    #[test]
    fn key_depends_on_arch_and_every_deb() {
        let a = key(Arch::Arm64, &[pkg("aa")]);
        assert_eq!(a, key(Arch::Arm64, &[pkg("aa")]));
        assert_ne!(a, key(Arch::X86_64, &[pkg("aa")]));
        assert_ne!(a, key(Arch::Arm64, &[pkg("ab")]));
    }

    #[test]
    fn store_then_load_and_list() {
        let cache = tempfile::tempdir().unwrap();
        let gz = b"not really gzip".to_vec();
        let k = key(Arch::X86_64, &[]);
        let m = ImageManifest {
            arch: Arch::X86_64,
            key: k.clone(),
            builder_version: BUILDER_VERSION.into(),
            packages: vec![pkg("aa")],
            entries: 3,
            size_bytes: gz.len() as u64,
            sha256: sha256_hex(&gz),
            build_seconds: 1.0,
            created: "2026-01-01T00:00:00Z".into(),
        };
        let dir = image_dir(cache.path(), Arch::X86_64, &k);
        let path = store(&dir, &gz, &m, false).unwrap();
        let found = load(&dir).unwrap().unwrap();
        assert!(found.cached);
        assert_eq!(found.path, path);
        assert_eq!(found.manifest, m);
        assert_eq!(list(cache.path()).unwrap().len(), 1);
        // A second builder's image: the intact first one stays, unless forced.
        let other = ImageManifest {
            created: "2026-01-02T00:00:00Z".into(),
            ..m.clone()
        };
        store(&dir, &gz, &other, false).unwrap();
        assert_eq!(load(&dir).unwrap().unwrap().manifest, m);
        store(&dir, &gz, &other, true).unwrap();
        assert_eq!(load(&dir).unwrap().unwrap().manifest, other);
        // A damaged image is a miss, not a silent hit, and is replaced.
        std::fs::write(&path, b"garbage").unwrap();
        assert!(load(&dir).unwrap().is_none());
        store(&dir, &gz, &m, false).unwrap();
        assert_eq!(load(&dir).unwrap().unwrap().manifest, m);
        // Nothing left beside the entry.
        let names: Vec<_> = std::fs::read_dir(dir.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }
}
