//! What the image is made of, and how it is assembled from the unpacked
//! packages: a fixed skeleton, the guest files of this crate, chosen
//! binaries from the packages, and the shared libraries they need.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use lazyinit_core::Arch;

use crate::cpio::{Archive, Entry};
use crate::elf::{self, ElfInfo};
use crate::error::ImageError;

/// Debian packages the image is made from. Their library dependencies are
/// resolved from apt's lists; only the files below and their ELF closure
/// end up in the image.
pub const PACKAGES: &[&str] = &[
    "busybox-static",
    "dropbear-bin",
    "e2fsprogs",
    // kexec: the EC2 path boots the kernel under test from the stock one.
    "kexec-tools",
    "libc6",
];

/// Files taken from the unpacked packages (symlinks are followed and kept).
pub const FROM_PACKAGES: &[&str] = &[
    "bin/busybox",
    "usr/sbin/dropbear",
    "sbin/mke2fs",
    "sbin/mkfs.ext2",
    "sbin/mkfs.ext3",
    "sbin/mkfs.ext4",
    "sbin/dumpe2fs",
    "sbin/e2fsck",
    "sbin/fsck.ext4",
    "sbin/tune2fs",
    "sbin/kexec",
    // Debian's mke2fs defaults (256-byte inodes, inode_ratio 16384) live here.
    "etc/mke2fs.conf",
];

/// `/init`: a busybox sh script, reviewed as a file.
pub const INIT: &str = include_str!("../guest/init");
/// udhcpc's event script, for `lazyinit.net=dhcp`.
pub const UDHCPC_SCRIPT: &str = include_str!("../guest/udhcpc.script");

/// Small files of the guest, with their modes.
pub const GUEST_FILES: &[(&str, &str, u32)] = &[
    ("init", INIT, 0o755),
    ("etc/lazyinit/udhcpc.script", UDHCPC_SCRIPT, 0o755),
    // Root logs in with a key only; "x" (not empty) because dropbear
    // rejects accounts with a blank password field.
    ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0o644),
    ("etc/group", "root:x:0:\ntty:x:5:\n", 0o644),
    ("etc/shells", "/bin/sh\n", 0o644),
];

/// Directories with modes other than 0755 or that nothing else creates.
const DIRS: &[(&str, u32)] = &[
    ("dev", 0o755),
    ("dev/pts", 0o755),
    ("etc/dropbear", 0o700),
    ("mnt", 0o755),
    ("proc", 0o755),
    ("root", 0o700),
    ("root/.ssh", 0o700),
    ("run", 0o755),
    ("sys", 0o755),
    ("tmp", 0o1777),
    ("usr/bin", 0o755),
    ("usr/sbin", 0o755),
    ("var/log", 0o755),
];

/// Where the dynamic loader looks, in its order, relative to the root.
fn library_dirs(arch: Arch) -> Vec<String> {
    let t = arch.gnu_triplet();
    vec![
        format!("lib/{t}"),
        format!("usr/lib/{t}"),
        "lib".into(),
        "usr/lib".into(),
    ]
}

/// Lexically resolves `target` of a symlink at `link` (both relative to the
/// root); `None` if it climbs out of the root.
fn resolve_link(link: &str, target: &str) -> Option<String> {
    let base = if target.starts_with('/') {
        PathBuf::new()
    } else {
        Path::new(link)
            .parent()
            .unwrap_or(Path::new(""))
            .to_path_buf()
    };
    let mut parts: Vec<String> = base
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for c in Path::new(target).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            _ => {}
        }
    }
    Some(parts.join("/"))
}

// Long: the archive's parts in the order they are laid out, one block each.
/// Builds the archive from the packages unpacked under `root`. `readelf` is
/// injected so the closure logic can be tested on a made-up tree.
pub fn assemble(
    arch: Arch,
    root: &Path,
    readelf: impl Fn(&Path) -> Result<ElfInfo, ImageError>,
) -> Result<Archive, ImageError> {
    let mut a = Archive::new();
    for (dir, mode) in DIRS {
        a.insert(dir, Entry::Dir { mode: *mode });
    }
    a.insert(
        "dev/console",
        Entry::CharDev {
            mode: 0o600,
            major: 5,
            minor: 1,
        },
    );
    a.insert(
        "dev/null",
        Entry::CharDev {
            mode: 0o666,
            major: 1,
            minor: 3,
        },
    );
    for (path, text, mode) in GUEST_FILES {
        a.insert(
            path,
            Entry::File {
                mode: *mode,
                data: text.as_bytes().to_vec(),
            },
        );
    }
    // The kernel runs /init with /bin/sh; the other applets are linked at boot.
    a.insert(
        "bin/sh",
        Entry::Symlink {
            target: "busybox".into(),
        },
    );

    let mut elves: Vec<String> = Vec::new();
    for path in FROM_PACKAGES {
        add_from_root(arch, root, path, &mut a, &mut elves)?;
    }
    let mut seen = BTreeSet::new();
    while let Some(path) = elves.pop() {
        if !seen.insert(path.clone()) {
            continue;
        }
        let info = readelf(&root.join(&path))?;
        if info.machine != elf::machine_name(arch) {
            return Err(ImageError::WrongMachine {
                arch,
                path,
                seen: info.machine,
            });
        }
        if let Some(interp) = &info.interpreter {
            add_from_root(
                arch,
                root,
                interp.trim_start_matches('/'),
                &mut a,
                &mut elves,
            )?;
        }
        for soname in &info.needed {
            let found = library_dirs(arch)
                .into_iter()
                .map(|d| format!("{d}/{soname}"))
                .find(|p| root.join(p).exists());
            let Some(lib) = found else {
                return Err(ImageError::MissingLibrary {
                    arch,
                    binary: path.clone(),
                    soname: soname.clone(),
                });
            };
            add_from_root(arch, root, &lib, &mut a, &mut elves)?;
        }
    }
    Ok(a)
}

/// Copies one path (following and keeping symlinks) from the unpacked
/// packages into the archive; ELF files are queued for the closure.
fn add_from_root(
    arch: Arch,
    root: &Path,
    path: &str,
    a: &mut Archive,
    elves: &mut Vec<String>,
) -> Result<(), ImageError> {
    let mut path = path.to_string();
    // A bounded walk along a chain of symlinks.
    for _ in 0..16 {
        if a.contains(&path) && !matches!(a.get(&path), Some(Entry::Dir { .. })) {
            return Ok(());
        }
        let full = root.join(&path);
        let meta = std::fs::symlink_metadata(&full).map_err(|_| ImageError::MissingFile {
            arch,
            path: path.clone(),
        })?;
        if meta.file_type().is_symlink() {
            let target =
                std::fs::read_link(&full).map_err(|e| ImageError::io("read link", &full, e))?;
            let target = target.to_string_lossy().into_owned();
            a.insert(
                &path,
                Entry::Symlink {
                    target: target.clone(),
                },
            );
            path = resolve_link(&path, &target).ok_or_else(|| ImageError::MissingFile {
                arch,
                path: target.clone(),
            })?;
            continue;
        }
        if meta.is_dir() {
            return Ok(());
        }
        let data = std::fs::read(&full).map_err(|e| ImageError::io("read", &full, e))?;
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o7777;
        if elf::is_elf(&data) {
            elves.push(path.clone());
        }
        a.insert(&path, Entry::File { mode, data });
        return Ok(());
    }
    Err(ImageError::MissingFile { arch, path })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn resolves_relative_and_absolute_links() {
        assert_eq!(
            resolve_link("sbin/mkfs.ext4", "mke2fs").unwrap(),
            "sbin/mke2fs"
        );
        assert_eq!(
            resolve_link(
                "lib64/ld-linux-x86-64.so.2",
                "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
            )
            .unwrap(),
            "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
        );
        assert_eq!(
            resolve_link(
                "lib/ld-linux-aarch64.so.1",
                "aarch64-linux-gnu/ld-linux-aarch64.so.1"
            )
            .unwrap(),
            "lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"
        );
        assert_eq!(resolve_link("a/b/l", "../../c").unwrap(), "c");
        assert!(resolve_link("a", "../../etc/passwd").is_none());
    }

    /// A made-up arm64 tree: every FROM_PACKAGES file exists, dropbear needs
    /// libz through a soname symlink, and readelf is a table.
    fn fake_tree(with_libz: bool) -> (tempfile::TempDir, HashMap<PathBuf, ElfInfo>) {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        let put = |p: &str, data: &[u8]| {
            std::fs::create_dir_all(r.join(p).parent().unwrap()).unwrap();
            std::fs::write(r.join(p), data).unwrap();
        };
        for p in FROM_PACKAGES {
            put(p, b"\x7fELF fake");
        }
        put("etc/mke2fs.conf", b"[defaults]\n");
        put("lib/aarch64-linux-gnu/ld-linux-aarch64.so.1", b"\x7fELF ld");
        put("lib/aarch64-linux-gnu/libc.so.6", b"\x7fELF libc");
        if with_libz {
            put("usr/lib/aarch64-linux-gnu/libz.so.1.2.13", b"\x7fELF libz");
            std::os::unix::fs::symlink(
                "libz.so.1.2.13",
                r.join("usr/lib/aarch64-linux-gnu/libz.so.1"),
            )
            .unwrap();
        }
        let machine = elf::machine_name(Arch::Arm64).to_string();
        let mut table = HashMap::new();
        for p in FROM_PACKAGES {
            let needed = if *p == "usr/sbin/dropbear" {
                vec!["libz.so.1".to_string(), "libc.so.6".into()]
            } else {
                vec![]
            };
            table.insert(
                r.join(p),
                ElfInfo {
                    machine: machine.clone(),
                    interpreter: Some("/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1".into()),
                    needed,
                },
            );
        }
        for p in [
            "lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
            "lib/aarch64-linux-gnu/libc.so.6",
            "usr/lib/aarch64-linux-gnu/libz.so.1.2.13",
        ] {
            table.insert(
                r.join(p),
                ElfInfo {
                    machine: machine.clone(),
                    interpreter: None,
                    needed: vec![],
                },
            );
        }
        (dir, table)
    }

    #[test]
    fn closure_follows_needed_through_soname_links() {
        let (dir, table) = fake_tree(true);
        let a = assemble(Arch::Arm64, dir.path(), |p| Ok(table[p].clone())).unwrap();
        assert_eq!(
            a.get("usr/lib/aarch64-linux-gnu/libz.so.1"),
            Some(&Entry::Symlink {
                target: "libz.so.1.2.13".into()
            })
        );
        assert!(a.contains("usr/lib/aarch64-linux-gnu/libz.so.1.2.13"));
        assert!(a.contains("lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"));
        assert!(a.contains("init") && a.contains("dev/console") && a.contains("bin/sh"));
        assert_eq!(a.get("root"), Some(&Entry::Dir { mode: 0o700 }));
        // The base image carries no key material.
        assert!(!a
            .paths()
            .any(|p| p.starts_with("etc/dropbear/") || p.starts_with("root/.ssh/")));
    }

    #[test]
    fn missing_library_fails_the_build() {
        let (dir, table) = fake_tree(false);
        let err = assemble(Arch::Arm64, dir.path(), |p| Ok(table[p].clone())).unwrap_err();
        match err {
            ImageError::MissingLibrary { binary, soname, .. } => {
                assert_eq!(binary, "usr/sbin/dropbear");
                assert_eq!(soname, "libz.so.1");
            }
            e => panic!("expected MissingLibrary, got {e:?}"),
        }
    }

    #[test]
    fn foreign_machine_fails_the_build() {
        let (dir, table) = fake_tree(true);
        let err = assemble(Arch::X86_64, dir.path(), |p| Ok(table[p].clone())).unwrap_err();
        assert!(matches!(err, ImageError::WrongMachine { .. }), "{err:?}");
    }
}
