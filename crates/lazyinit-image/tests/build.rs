//! Builds the real images from Debian packages (apt lists must be present;
//! the .debs are downloaded once into the cache) and checks what is inside
//! with the host's cpio.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use lazyinit_core::Arch;
use lazyinit_image::{build_blocking, initramfs_for_launch, keys_cpio, ImageOptions};

/// `zcat file | cpio -itv`, as lines.
fn listing(gz: &Path) -> Vec<String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("zcat '{}' | cpio -itv --quiet", gz.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

fn has(list: &[String], path: &str) -> bool {
    list.iter().any(|l| l.split_whitespace().any(|w| w == path))
}

#[test]
fn images_hold_the_tools_and_no_secret_and_are_cached() {
    for arch in Arch::ALL {
        let opts = ImageOptions::default();
        let image = build_blocking(arch, &opts).unwrap();
        let m = &image.manifest;
        assert_eq!(m.arch, arch);
        assert!(m
            .packages
            .iter()
            .all(|p| p.arch == arch.debian_arch() || p.arch == "all"));
        for name in [
            "busybox-static",
            "dropbear-bin",
            "e2fsprogs",
            "kexec-tools",
            "libc6",
        ] {
            assert!(m.packages.iter().any(|p| p.name == name), "{name} missing");
        }
        let list = listing(&image.path);
        let loader = match arch {
            Arch::X86_64 => "lib64/ld-linux-x86-64.so.2",
            Arch::Arm64 => "lib/ld-linux-aarch64.so.1",
        };
        for path in [
            "init",
            "bin/busybox",
            "bin/sh",
            "usr/sbin/dropbear",
            "sbin/mkfs.ext4",
            "sbin/mke2fs",
            "sbin/dumpe2fs",
            "sbin/kexec",
            "etc/mke2fs.conf",
            "dev/console",
            loader,
        ] {
            assert!(has(&list, path), "{arch}: {path} not in the image");
        }
        // Everything is root's, and nothing under the key locations.
        assert!(
            list.iter().all(|l| l.contains(" root ")),
            "{arch}: non-root owner"
        );
        assert!(!list
            .iter()
            .any(|l| l.contains("etc/dropbear/") || l.contains("authorized_keys")));

        let again = build_blocking(arch, &opts).unwrap();
        assert!(again.cached, "{arch}: second build was not a cache hit");
        assert_eq!(again.path, image.path);
        assert_eq!(again.manifest.sha256, m.sha256);
    }
}

#[test]
fn launch_initramfs_appends_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    let keys = lazyinit_ssh::Keys::load_or_create(&dir.path().join("state")).unwrap();
    let image = build_blocking(Arch::X86_64, &ImageOptions::default()).unwrap();

    let kc = keys_cpio(&keys, &dir.path().join("k")).unwrap();
    let list = listing(&kc);
    for (path, mode) in [
        ("etc/dropbear/dropbear_ed25519_host_key", "-rw-------"),
        ("root/.ssh/authorized_keys", "-rw-------"),
        ("root/.ssh", "drwx------"),
    ] {
        let line = list
            .iter()
            .find(|l| l.ends_with(path))
            .unwrap_or_else(|| panic!("{path}"));
        assert!(line.starts_with(mode), "{line}");
    }

    let launch = initramfs_for_launch(&image, &keys, &dir.path().join("launch")).unwrap();
    let meta = std::fs::metadata(&launch).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let bytes = std::fs::read(&launch).unwrap();
    let base = std::fs::read(&image.path).unwrap();
    assert!(bytes.starts_with(&base));
    // The appended part is a gzip member holding exactly the keys archive.
    let tail = dir.path().join("tail.gz");
    std::fs::write(&tail, &bytes[base.len()..]).unwrap();
    assert_eq!(listing(&tail), list);
    // And the cached image itself was not touched.
    assert_eq!(
        lazyinit_core::paths::sha256_hex(&base),
        image.manifest.sha256
    );
}
