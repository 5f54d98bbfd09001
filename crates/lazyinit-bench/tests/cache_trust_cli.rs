//! A cache the harness cannot trust is refused before anything is read
//! from it, run from it or written into it: one that another user owns or
//! that others can write (a fleet's shared cache, or a planted one), a
//! link, a file, a folder that is no cache (`/etc`, a home), a folder
//! inside a results folder. Each is exit 2 with one line naming where the
//! root came from (`--cache-dir`, `LAZYINIT_CACHE_DIR`) and what to do,
//! and the folder is left as it was. A cache shared on purpose
//! (`LAZYINIT_CACHE_GROUP`) is taken when its group is the one named.
//! Needs root (folders of another user), as CI runs it.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lazyinit-bench"))
}

fn root_only() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test makes folders of another user: run it as root (CI does)"
    );
}

/// Every path under `dir` with its kind, mode, owner and content.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let what = if m.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                todo.push(e.unwrap().path());
            }
            "dir".to_string()
        } else {
            format!("{:?}", std::fs::read(&p).ok())
        };
        out.insert(p, format!("{what} {:o} {}", m.mode(), m.uid()));
    }
    out
}

fn bench(env: &[(&str, &Path)], args: &[&str]) -> Output {
    let mut c = Command::new(bin());
    c.args(args).stdin(Stdio::null());
    c.env_remove("LAZYINIT_CACHE_GROUP");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Exit 2, one `error:` line holding every one of `says`.
fn refused(o: &Output, says: &[&str], what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{what}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: one line, got {err}");
    for s in says {
        assert!(lines[0].contains(s), "{what}: {s:?} not in {err}");
    }
}

/// A cache of `nobody`, mode 0777, with a script planted where the
/// virtual clock's QEMU lives: no command takes it, nothing in it changes
/// and the script never runs.
#[test]
fn a_cache_others_can_write_is_refused_by_every_command_that_uses_it() {
    root_only();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("shared-cache");
    let planted = cache.join("qemu/10.0.2-planted");
    std::fs::create_dir_all(&planted).unwrap();
    let ran = tmp.path().join("the-plant-ran");
    for b in ["qemu-system-x86_64", "qemu-system-aarch64"] {
        let f = planted.join(b);
        std::fs::write(&f, format!("#!/bin/sh\nid > {}\n", ran.display())).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    for p in [&cache, &cache.join("qemu"), &planted] {
        std::os::unix::fs::chown(p, Some(nobody.uid.as_raw()), Some(nobody.gid.as_raw())).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let before = snapshot(&cache);
    let out = tmp.path().join("run");
    let env = [("LAZYINIT_CACHE_DIR", cache.as_path())];
    let says = ["LAZYINIT_CACHE_DIR=", "writable by every user (mode 777)"];
    refused(&bench(&env, &["kernel", "list"]), &says, "kernel list");
    refused(&bench(&env, &["image", "list"]), &says, "image list");
    refused(&bench(&env, &["qemu", "build"]), &says, "qemu build");
    refused(
        &bench(&env, &["run", "quick", "--out", out.to_str().unwrap()]),
        &says,
        "run quick",
    );
    // The same folder named by the flag says the flag.
    refused(
        &bench(
            &[],
            &["kernel", "list", "--cache-dir", cache.to_str().unwrap()],
        ),
        &["--cache-dir ", "writable by every user"],
        "kernel list --cache-dir",
    );
    // Not writable by others but nobody's: still another user's.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).unwrap();
    refused(
        &bench(&env, &["kernel", "list"]),
        &["belongs to nobody", "LAZYINIT_CACHE_GROUP"],
        "nobody's cache",
    );
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(snapshot(&cache), before, "the cache changed");
    assert!(!ran.exists(), "the planted QEMU ran");
    assert!(!out.exists(), "run made its folder");
}

/// A link (to a system folder), a file, a folder that is no cache and a
/// folder inside a results folder: each refused, nothing written.
#[test]
fn a_cache_root_that_is_no_cache_is_refused_before_anything_is_written() {
    root_only();
    let tmp = tempfile::tempdir().unwrap();
    let etc = tmp.path().join("etc");
    std::fs::create_dir_all(etc.join("ssh")).unwrap();
    std::fs::write(etc.join("passwd"), "root:x:0:0\n").unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&etc, &link).unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, "not a folder\n").unwrap();
    let run = tmp.path().join("a-run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("results.csv"), "run_id\n").unwrap();
    std::fs::write(run.join("spec.toml"), "name = \"x\"\n").unwrap();
    let before = snapshot(tmp.path());
    for (root, says) in [
        (&link, "is a link"),
        (&file, "is not a folder"),
        (&etc, "is neither empty nor a cache of this harness"),
        (&run, "a-run"),
        (&run.join("cache"), "is inside the results folder"),
    ] {
        refused(
            &bench(&[("LAZYINIT_CACHE_DIR", root)], &["kernel", "list"]),
            &["LAZYINIT_CACHE_DIR=", says],
            &root.display().to_string(),
        );
        refused(
            &bench(
                &[],
                &["qemu", "build", "--cache-dir", root.to_str().unwrap()],
            ),
            &["--cache-dir ", says],
            &root.display().to_string(),
        );
    }
    assert_eq!(snapshot(tmp.path()), before, "something was written");
}

/// A cache shared on purpose: another user's folder of the named group,
/// group-writable, is taken; once others can write it, it is refused
/// again; a group that does not exist is named.
#[test]
fn a_cache_shared_by_a_named_group_is_taken() {
    root_only();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("fleet");
    std::fs::create_dir_all(cache.join("kernel")).unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let group = nix::unistd::Group::from_gid(nix::unistd::getegid())
        .unwrap()
        .unwrap();
    for p in [&cache, &cache.join("kernel")] {
        std::os::unix::fs::chown(p, Some(nobody.uid.as_raw()), Some(group.gid.as_raw())).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o2775)).unwrap();
    }
    let env = [("LAZYINIT_CACHE_DIR", cache.as_path())];
    refused(
        &bench(&env, &["kernel", "list"]),
        &["belongs to nobody"],
        "unshared",
    );
    let shared = |name: &str| {
        Command::new(bin())
            .args(["kernel", "list"])
            .env("LAZYINIT_CACHE_DIR", &cache)
            .env("LAZYINIT_CACHE_GROUP", name)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = shared(&group.name);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("no kernels cached"));
    std::fs::set_permissions(
        cache.join("kernel"),
        std::fs::Permissions::from_mode(0o2777),
    )
    .unwrap();
    refused(
        &shared(&group.name),
        &["kernel is writable by every user"],
        "o+w",
    );
    refused(
        &shared("no-such-group-here"),
        &["names no group"],
        "no group",
    );
}
