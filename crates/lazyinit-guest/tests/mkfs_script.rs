//! The guest's mkfs script, run on the host on sparse files with the real
//! mkfs.ext4 and dumpe2fs: its count of groups whose inode table is already
//! zeroed, read from the group descriptors alone, is what a whole dumpe2fs
//! says, for every descriptor layout mkfs makes, with the host's od/dd/awk
//! and with busybox's (the guest's).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/mkfs.sh")
}

/// A PATH whose od, dd and awk are busybox's, as in the guest.
fn busybox_path(dir: &Path) -> String {
    let bb = Path::new("/bin/busybox");
    assert!(
        bb.exists(),
        "busybox is missing: scripts/setup-host.sh installs busybox-static"
    );
    let bin = dir.join("bb");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["od", "dd", "awk"] {
        let link = bin.join(tool);
        if !link.exists() {
            std::os::unix::fs::symlink(bb, link).unwrap();
        }
    }
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

fn run(dir: &Path, size: u64, args: &[&str], path: Option<&str>) -> HashMap<String, String> {
    let img = dir.join("vol.img");
    let f = std::fs::File::create(&img).unwrap();
    f.set_len(size).unwrap();
    drop(f);
    let mut cmd = Command::new("sh");
    cmd.arg(script()).arg(&img).args(args).env("TMPDIR", dir);
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let out = cmd.output().expect("sh runs");
    assert!(
        out.status.success(),
        "mkfs.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What a whole dumpe2fs counts on the image the script just made.
fn dumpe2fs_zeroed(dir: &Path) -> u64 {
    let out = Command::new("dumpe2fs")
        .arg(dir.join("vol.img"))
        .output()
        .expect("dumpe2fs is installed (e2fsprogs)");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("ITABLE_ZEROED"))
        .count() as u64
}

fn num(kv: &HashMap<String, String>, k: &str) -> u64 {
    kv.get(k)
        .unwrap_or_else(|| panic!("no {k} in {kv:?}"))
        .parse()
        .unwrap()
}

const GIB: u64 = 1 << 30;

#[test]
fn zeroed_groups_read_from_the_descriptors_match_dumpe2fs() {
    let dir = tempfile::tempdir().unwrap();
    let bb = busybox_path(dir.path());
    // (size, mkfs options, groups zeroed: all or none)
    let cases: &[(u64, &[&str], bool)] = &[
        // 64-bit descriptors (64 B), the default for ext4.
        // (nodiscard: mkfs would punch the file's holes, and a discard that
        // zeroes marks every table zeroed, docs/design.md §3's trap.)
        (16 * GIB, &["-E", "nodiscard"], false),
        (2 * GIB, &["-E", "lazy_itable_init=0"], true),
        // 32 B descriptors.
        (2 * GIB, &["-O", "^64bit", "-E", "lazy_itable_init=0"], true),
        (2 * GIB, &["-O", "^64bit", "-E", "nodiscard"], false),
        // 1 KiB blocks: the superblock is block 1, the descriptors block 2.
        (GIB / 2, &["-b", "1024", "-E", "lazy_itable_init=0"], true),
        (GIB / 2, &["-b", "1024", "-E", "nodiscard"], false),
        // meta_bg: descriptors spread over the volume (dumpe2fs finds them).
        (
            2 * GIB,
            &["-O", "meta_bg,^resize_inode", "-E", "lazy_itable_init=0"],
            true,
        ),
    ];
    for (size, args, all) in cases {
        for path in [None, Some(bb.as_str())] {
            let kv = run(dir.path(), *size, args, path);
            let groups = num(&kv, "blocks").div_ceil(num(&kv, "blocks_per_group"));
            let zeroed = num(&kv, "zeroed");
            let want = dumpe2fs_zeroed(dir.path());
            let how = if path.is_some() { "busybox" } else { "host" };
            assert_eq!(zeroed, want, "{args:?} ({how} tools): {kv:?}");
            if *all {
                assert_eq!(zeroed, groups, "{args:?} ({how} tools)");
            } else {
                assert!(
                    zeroed * 2 < groups,
                    "{args:?} ({how} tools): {zeroed} of {groups}"
                );
            }
        }
    }
}
