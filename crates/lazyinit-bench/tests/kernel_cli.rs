//! `kernel list` and `kernel build --config` at the command line, on a
//! kernel cache written as builds leave it and on a config that must be
//! refused; nothing here compiles a kernel.

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lazyinit-bench"))
}

/// One finished build as `kernel build` leaves it; `extra` adds manifest
/// fields (a manifest from before they existed has none).
fn cached_build(cache: &Path, name: &str, extra: serde_json::Value) {
    let dir = cache.join("kernel/builds").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let image = vec![0u8; 2048];
    std::fs::write(dir.join("bzImage"), &image).unwrap();
    let mut m = serde_json::json!({
        "arch": "x86_64", "hz": 250, "variant": "nofix", "profile": "qemu",
        "source": "debian-6.1",
        "source_identity": format!("sha256:{}", "5".repeat(64)),
        "source_version": "6.1.192",
        "kernel_release": "6.1.192-lazyinit-hz250-nofix",
        "localversion": "-lazyinit-hz250-nofix",
        "variant_method": "reverted",
        "patch": "debian-6.1-revert-fix.patch",
        "patch_sha256": "3".repeat(64),
        "released_variant": "fix",
        "config_sha256": "1".repeat(64),
        "fragment_sha256": "2".repeat(64),
        "image_file": "bzImage",
        "image_sha256": lazyinit_core::paths::sha256_hex(&image),
        "image_bytes": image.len(),
        "compiler": "gcc 12",
        "build_seconds": 407.2,
        "built_at": "2026-11-29T23:00:00Z",
        "cache_key": "c".repeat(64),
        "recipe_version": 1
    });
    for (k, v) in extra.as_object().unwrap() {
        m[k] = v.clone();
    }
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec_pretty(&m).unwrap(),
    )
    .unwrap();
}

#[test]
fn list_shows_source_version_config_origin_and_variant_method() {
    let cache = tempfile::tempdir().unwrap();
    // Built before debian_package and config_origin existed.
    cached_build(cache.path(), "old", serde_json::json!({}));
    cached_build(
        cache.path(),
        "d510",
        serde_json::json!({
            "source": "debian-5.10", "source_version": "5.10.262",
            "debian_package": "linux-source-5.10 5.10.262-1",
            "kernel_release": "5.10.262-lazyinit-hz250-nofix",
            "patch": "debian-5.10-revert-fix.patch",
            "built_at": "2026-11-30T10:00:00Z"
        }),
    );
    cached_build(
        cache.path(),
        "user",
        serde_json::json!({
            "source": "/src/linux", "source_identity": "git:0123456789abcdef0123456789abcdef01234567+feedfacefeedface",
            "variant": "fix", "variant_method": "as-released", "patch": null,
            "kernel_release": "6.1.192-lazyinit-hz250-fix",
            "config_origin": "file:/boot/config-6.1.0-57-amd64 sha256:0011223344556677",
            "config_set": ["CONFIG_EXT4_FS: m -> y", "CONFIG_IKCONFIG: not set -> y"],
            "config_followed": 12,
            "built_at": "2026-11-30T11:00:00Z"
        }),
    );
    let out = Command::new(bin())
        .args(["kernel", "list", "--cache-dir"])
        .arg(cache.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    for col in ["source", "method", "config"] {
        assert!(lines[0].contains(col), "{}", lines[0]);
    }
    assert!(lines[1].contains("debian-6.1 6.1.192") && lines[1].contains("reverted"));
    assert!(lines[1].contains("fragments"), "{}", lines[1]);
    assert!(
        lines[2].contains("debian-5.10 5.10.262 (linux-source-5.10 5.10.262-1)"),
        "{}",
        lines[2]
    );
    assert!(lines[3].contains("/src/linux 6.1.192 (git:0123456789abcdef"));
    assert!(lines[3].contains("as-released"));
    assert!(
        lines[3].contains("config-6.1.0-57-amd64 (+2)"),
        "{}",
        lines[3]
    );

    let json = Command::new(bin())
        .args(["kernel", "list", "--json", "--cache-dir"])
        .arg(cache.path())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v[0]["config_origin"], "fragments");
    assert_eq!(v[2]["config_followed"], 12);
}

#[test]
fn build_refuses_an_unmeasurable_config_with_exit_2() {
    let cache = tempfile::tempdir().unwrap();
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tree.path().join("fs/ext4")).unwrap();
    std::fs::write(
        tree.path().join("Makefile"),
        "VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 0\n",
    )
    .unwrap();
    std::fs::write(
        tree.path().join("fs/ext4/super.c"),
        include_str!("../../lazyinit-kernel/fixtures/run_li_request-debian-6.1.c"),
    )
    .unwrap();
    let config = tree.path().join("config");
    std::fs::write(&config, "# CONFIG_EXT4_FS is not set\nCONFIG_HZ=100\n").unwrap();
    let out = Command::new(bin())
        .args(["kernel", "build", "--arch", "x86_64", "--hz", "250"])
        .args(["--variant", "nofix", "--source"])
        .arg(tree.path())
        .arg("--config")
        .arg(&config)
        .arg("--cache-dir")
        .arg(cache.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot be measured"), "{err}");
    assert!(err.contains("CONFIG_EXT4_FS: not set"), "{err}");
    assert!(!cache.path().join("kernel/work").exists());
}
