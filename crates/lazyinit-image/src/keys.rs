//! The launch-time archive with the secrets, kept out of the cached image:
//! the guest's host private key and the client key root may log in with.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use lazyinit_ssh::Keys;

use crate::cpio::{self, Archive, Entry};
use crate::error::ImageError;
use crate::ImageArtifact;

/// Where the guest's /init and dropbear expect the host key.
pub const GUEST_HOST_KEY: &str = "etc/dropbear/dropbear_ed25519_host_key";
pub const GUEST_AUTHORIZED_KEYS: &str = "root/.ssh/authorized_keys";

/// The keys archive as a tree (modes match what dropbear insists on).
pub fn keys_archive(keys: &Keys) -> Result<Archive, ImageError> {
    let host_key = std::fs::read(&keys.host_private)
        .map_err(|e| ImageError::io("read", &keys.host_private, e))?;
    let mut a = Archive::new();
    a.insert("etc/dropbear", Entry::Dir { mode: 0o700 });
    a.insert("root", Entry::Dir { mode: 0o700 });
    a.insert("root/.ssh", Entry::Dir { mode: 0o700 });
    a.insert(
        GUEST_HOST_KEY,
        Entry::File {
            mode: 0o600,
            data: host_key,
        },
    );
    a.insert(
        GUEST_AUTHORIZED_KEYS,
        Entry::File {
            mode: 0o600,
            data: format!("{}\n", keys.client_public.trim()).into_bytes(),
        },
    );
    Ok(a)
}

fn gzip(a: &Archive) -> Result<Vec<u8>, ImageError> {
    cpio::gzip(&a.to_bytes()).map_err(|source| ImageError::Spawn {
        what: "gzip".into(),
        source,
    })
}

fn private_dir(dir: &Path) -> Result<(), ImageError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| ImageError::io("create", dir, e))
}

/// Writes `parts` to `path` as a 0600 file, atomically
/// (`lazyinit_core::output::write_atomic_private`).
fn write_private(path: &Path, parts: &[&[u8]]) -> Result<(), ImageError> {
    lazyinit_core::output::write_atomic_private(path, &parts.concat())
        .map_err(|e| ImageError::io("write", path, e))
}

/// Writes the gzip'd keys archive to `dir/guest-keys.cpio.gz` (0600).
pub fn keys_cpio(keys: &Keys, dir: &Path) -> Result<PathBuf, ImageError> {
    private_dir(dir)?;
    let path = dir.join("guest-keys.cpio.gz");
    write_private(&path, &[&gzip(&keys_archive(keys)?)?])?;
    Ok(path)
}

/// The file to pass to `-initrd` (or to kexec): the cached image followed by
/// the keys archive, as one 0600 file in `dir`. The kernel unpacks both, in
/// order, into the same root.
pub fn initramfs_for_launch(
    image: &ImageArtifact,
    keys: &Keys,
    dir: &Path,
) -> Result<PathBuf, ImageError> {
    private_dir(dir)?;
    let base = std::fs::read(&image.path).map_err(|e| ImageError::io("read", &image.path, e))?;
    let keys_gz = gzip(&keys_archive(keys)?)?;
    let m = &image.manifest;
    let path = dir.join(format!("initramfs-{}-{}.cpio.gz", m.arch, &m.key[..16]));
    write_private(&path, &[&base, &keys_gz])?;
    Ok(path)
}
