//! Sparse raw volume files and the host-disk check made before any launch.

use std::path::{Path, PathBuf};

use lazyinit_core::ByteSize;

/// Host bytes a volume of this size may take after mkfs and a full
/// lazy-init: metadata only, since zeroing becomes holes. As a raw file,
/// docs/design.md §4 measured 1.1 GB for 2 TiB (0.05%, mostly the journal); we ask
/// for twice that plus a floor. Served by the harness's NBD server (a
/// latency profile), zero requests over never-written ranges (the journal,
/// every inode table) make no host call: measured 44 MB for 3 TiB after
/// mkfs; we ask for four times that plus a floor.
pub fn expected_host_bytes(volume: ByteSize, served_over_nbd: bool) -> u64 {
    if served_over_nbd {
        volume.0 / 20_000 + (64 << 20)
    } else {
        volume.0 / 1000 + (256 << 20)
    }
}

/// Bytes free for an unprivileged writer on the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    Ok(st.blocks_available() as u64 * st.fragment_size() as u64)
}

/// Bytes a file really occupies on disk (its allocated blocks).
pub fn allocated_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(path)?.blocks() * 512)
}

/// A sparse file removed when dropped, unless kept.
#[derive(Debug)]
pub struct SparseVolume {
    path: PathBuf,
    keep: bool,
}

impl SparseVolume {
    /// Creates a new sparse file of exactly `size` bytes; refuses to reuse a file.
    pub fn create(path: PathBuf, size: ByteSize) -> std::io::Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        let vol = SparseVolume { path, keep: false };
        f.set_len(size.0)?;
        Ok(vol)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn remove(&mut self) -> std::io::Result<()> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for SparseVolume {
    fn drop(&mut self) {
        if !self.keep {
            let _ = self.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_file_is_sparse_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.raw");
        {
            let v = SparseVolume::create(p.clone(), "2TiB".parse().unwrap()).unwrap();
            assert_eq!(std::fs::metadata(v.path()).unwrap().len(), 2 << 40);
            assert!(allocated_bytes(v.path()).unwrap() < 1 << 20);
            assert!(
                SparseVolume::create(p.clone(), ByteSize(1)).is_err(),
                "no reuse"
            );
        }
        assert!(!p.exists());
    }

    #[test]
    fn expected_cost_scales() {
        assert!(expected_host_bytes("2TiB".parse().unwrap(), false) > 2 << 30);
        assert!(expected_host_bytes("64GiB".parse().unwrap(), false) < 1 << 30);
        let nbd = expected_host_bytes("3TiB".parse().unwrap(), true);
        assert!(nbd > 4 * 44_000_000 && nbd < 300 << 20, "{nbd}");
    }
}
