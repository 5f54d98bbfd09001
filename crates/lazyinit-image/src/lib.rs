//! Guest images: a per-arch initramfs from Debian packages of that arch.
//!
//! [`build`] resolves the packages from apt's lists, downloads the .deb files
//! once into the cache, unpacks them with `dpkg-deb -x` (nothing of the
//! target arch ever runs on the host), takes a few binaries and their
//! shared-library closure (read with `readelf`), adds `/init` and writes a
//! gzip'd newc cpio, cached by content. The image holds no secret: the guest's
//! host key and the authorized client key go into a second small archive
//! that [`initramfs_for_launch`] appends at launch (the kernel unpacks
//! concatenated archives in order).

mod apt;
mod cache;
pub mod cpio;
mod elf;
mod error;
mod keys;
pub mod layout;

use std::path::{Path, PathBuf};
use std::time::Instant;

use lazyinit_core::Arch;

pub use apt::Package;
pub use cache::{list, ImageManifest};
pub use error::ImageError;
pub use keys::{initramfs_for_launch, keys_archive, keys_cpio};

/// Bumped whenever the builder changes what it puts in an image.
pub const BUILDER_VERSION: &str = "image-1";

#[derive(Debug, Clone)]
pub struct ImageOptions {
    /// Root of the content-keyed cache (`lazyinit_core::paths::cache_dir()`).
    pub cache_dir: PathBuf,
    /// Build again even if the cache has this image.
    pub force: bool,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions {
            cache_dir: lazyinit_core::paths::cache_dir(),
            force: false,
        }
    }
}

/// A built (or cached) image.
#[derive(Debug, Clone)]
pub struct ImageArtifact {
    /// The gzip'd cpio, without keys.
    pub path: PathBuf,
    pub manifest: ImageManifest,
    /// True when this call found it in the cache.
    pub cached: bool,
}

/// Builds the image for `arch`, or returns the cached one with the same key.
pub async fn build(arch: Arch, opts: &ImageOptions) -> Result<ImageArtifact, ImageError> {
    let opts = opts.clone();
    tokio::task::spawn_blocking(move || build_blocking(arch, &opts))
        .await
        .map_err(|e| ImageError::Task(e.to_string()))?
}

/// The blocking body of [`build`], for callers without a runtime.
pub fn build_blocking(arch: Arch, opts: &ImageOptions) -> Result<ImageArtifact, ImageError> {
    let started = Instant::now();
    check_tools()?;
    let pkgs = apt::resolve_cached(arch, layout::PACKAGES, &opts.cache_dir)?;
    let key = cache::key(arch, &pkgs);
    let dir = cache::image_dir(&opts.cache_dir, arch, &key);
    if !opts.force {
        if let Some(found) = cache::load(&dir)? {
            tracing::info!(%arch, path = %found.path.display(), "guest image cache hit");
            return Ok(found);
        }
    }
    tracing::info!(%arch, key = %&key[..16], "building guest image");
    let debs_dir = opts.cache_dir.join("debs");
    std::fs::create_dir_all(&debs_dir).map_err(|e| ImageError::io("create", &debs_dir, e))?;
    let debs = apt::fetch(arch, &pkgs, &debs_dir)?;
    tracing::debug!(elapsed = ?started.elapsed(), "packages resolved and fetched");

    let work = tempfile::Builder::new()
        .prefix(".image-build-")
        .tempdir_in(&opts.cache_dir)
        .map_err(|e| ImageError::io("create a work directory in", &opts.cache_dir, e))?;
    let root = work.path().join("root");
    for deb in &debs {
        unpack(deb, &root)?;
    }
    tracing::debug!(elapsed = ?started.elapsed(), "packages unpacked");
    let archive = layout::assemble(arch, &root, elf::readelf)?;
    tracing::debug!(elapsed = ?started.elapsed(), "image assembled");
    let gz = cpio::gzip(&archive.to_bytes()).map_err(|source| ImageError::Spawn {
        what: "gzip".into(),
        source,
    })?;
    tracing::debug!(elapsed = ?started.elapsed(), "image compressed");
    let manifest = ImageManifest {
        arch,
        key,
        builder_version: BUILDER_VERSION.to_string(),
        packages: pkgs,
        entries: archive.len(),
        size_bytes: gz.len() as u64,
        sha256: lazyinit_core::paths::sha256_hex(&gz),
        build_seconds: started.elapsed().as_secs_f64(),
        created: chrono::Utc::now().to_rfc3339(),
    };
    let path = cache::store(&dir, &gz, &manifest, opts.force)?;
    Ok(ImageArtifact {
        path,
        manifest,
        cached: false,
    })
}

fn unpack(deb: &Path, root: &Path) -> Result<(), ImageError> {
    apt::run(
        std::process::Command::new("dpkg-deb")
            .arg("-x")
            .arg(deb)
            .arg(root),
        &format!("dpkg-deb -x {}", deb.display()),
    )
    .map(drop)
}

/// Host tools the build runs, with the package that provides each.
const TOOLS: &[(&str, &str)] = &[
    ("apt-get", "apt"),
    ("apt-cache", "apt"),
    ("dpkg-deb", "dpkg"),
    ("readelf", "binutils"),
    ("gzip", "gzip"),
];

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

fn check_tools() -> Result<(), ImageError> {
    for (tool, pkg) in TOOLS {
        if !on_path(tool) {
            return Err(ImageError::MissingTool(lazyinit_core::exit::missing_tool(
                tool,
                &format!("apt-get install {pkg}"),
            )));
        }
    }
    Ok(())
}
