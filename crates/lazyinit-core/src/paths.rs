//! Where the harness keeps things outside the clone.
//!
//! Caches (kernel builds, guest images, sources) are content-keyed and may
//! be shared between clones, CI runs and users of the machine; state (keys)
//! is private to the user.

use std::path::PathBuf;

/// Root of the content-keyed cache: `$LAZYINIT_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/lazyinit-bench` (`~/.cache/lazyinit-bench`).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LAZYINIT_CACHE_DIR") {
        return PathBuf::from(d);
    }
    dirs::cache_dir()
        .unwrap_or_else(|| std::env::temp_dir().join("lazyinit-cache"))
        .join("lazyinit-bench")
}

/// Private state (SSH keys, known_hosts): `$LAZYINIT_STATE_DIR`, else
/// `$XDG_STATE_HOME/lazyinit-bench` (`~/.local/state/lazyinit-bench`).
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LAZYINIT_STATE_DIR") {
        return PathBuf::from(d);
    }
    dirs::state_dir()
        .or_else(dirs::data_local_dir)
        .unwrap_or_else(|| std::env::temp_dir().join("lazyinit-state"))
        .join("lazyinit-bench")
}

/// Lowercase hex SHA-256 of some bytes: the content keys of every cache.
/// A git tree's name in rows and series ids: `tree-` and the first 12 hex
/// digits of the sha256 of its identity (a normalized remote URL, or
/// `root:<commit>`), which names no path and no credentials.
pub fn tree_name(identity: &str) -> String {
    format!("tree-{}", &sha256_hex(identity)[..12])
}

pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes.as_ref()))
}

/// The SHA-256 of the file at `path` ([`sha256_hex_of`] its contents).
pub fn sha256_file(path: &std::path::Path) -> std::io::Result<String> {
    std::fs::File::open(path).and_then(sha256_hex_of)
}

/// The SHA-256 of everything `r` reads, as lowercase hex: a file of any
/// size in 1 MiB reads (the kernel tarballs' check).
pub fn sha256_hex_of(mut r: impl std::io::Read) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(hex::encode(h.finalize())),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod sha_tests {
    use super::*;

    #[test]
    fn a_readers_hash_is_its_bytes_hash() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(sha256_hex_of(&data[..]).unwrap(), sha256_hex(&data));
        assert_eq!(
            sha256_hex_of(&b""[..]).unwrap(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
