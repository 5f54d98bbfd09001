//! Guest images for a run: the cached, key-free image of each arch plus the
//! project's keys appended at launch.

use std::path::{Path, PathBuf};

use lazyinit_core::Arch;

/// The initramfs the provider boots for `arch`.
/// The keyed copy goes to the private state folder, never to the results.
pub async fn initramfs_for(
    arch: Arch,
    keys: &lazyinit_ssh::Keys,
    cache_dir: &Path,
    state_dir: &Path,
) -> anyhow::Result<PathBuf> {
    let opts = lazyinit_image::ImageOptions {
        cache_dir: cache_dir.to_path_buf(),
        ..Default::default()
    };
    let image = lazyinit_image::build(arch, &opts).await?;
    let path = lazyinit_image::initramfs_for_launch(&image, keys, &state_dir.join("launch"))?;
    Ok(path)
}
