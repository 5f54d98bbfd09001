//! One kernel cache, many builders (issue 39, docs/shards.md "One cache,
//! many builders"): two `kernel build` processes of the same kernel on a
//! cache where it is not built yet make it once, the other waits and takes
//! it; a builder killed while make runs leaves nothing that a later one
//! trusts. Real builds of Debian's 6.1 (x86_64, HZ=250): the test's cache
//! starts with no kernel built, and its build slot is a copy of the one
//! scripts/test.sh compiled (a cold tree is about 800 CPU-seconds; the race
//! and the kill are the same on it, only longer), so a build here is a
//! variant switch. The copy is also a cache moved to another path: the
//! first build there rewrites the path objtool's command files recorded
//! (else make relinks objtool and recompiles every object, about 1,200
//! files), which this test sees in the number of files make compiles;
//! and the make after a killed one compiles what the switch needs, not the
//! tree (what kconfig wrote whole is kept).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lazyinit-bench"))
}

fn build(cache: Option<&Path>, variant: &str) -> Command {
    let mut c = Command::new(bin());
    c.args([
        "kernel",
        "build",
        "--arch",
        "x86_64",
        "--hz",
        "250",
        "--variant",
        variant,
    ]);
    if let Some(cache) = cache {
        c.env("LAZYINIT_CACHE_DIR", cache);
    }
    c
}

use lazyinit_core::testing::output_text as text;

/// The `image` line of `kernel build`'s summary.
fn image_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find(|l| l.starts_with("image "))
        .unwrap_or_else(|| panic!("no image line: {}", text(o)))
        .to_string()
}

/// The cache the other tests use (scripts/test.sh built its kernels):
/// where the binary looks, `XDG_CACHE_HOME` included.
fn shared_cache() -> PathBuf {
    lazyinit_core::paths::cache_dir()
}

/// The variant the text of a build tree is at (and so, for a slot whose
/// make finished, the one it was last built with).
fn tree_variant(tree: &Path) -> &'static str {
    let text = std::fs::read_to_string(tree.join("fs/ext4/super.c")).unwrap();
    match lazyinit_kernel::variant::detect_file(&text) {
        lazyinit_kernel::Detected::Fix => "fix",
        lazyinit_kernel::Detected::NoFix => "nofix",
        lazyinit_kernel::Detected::Unknown => {
            panic!("{}: neither variant's text", tree.display())
        }
    }
}

fn other(variant: &str) -> &'static str {
    if variant == "fix" {
        "nofix"
    } else {
        "fix"
    }
}

/// Copies the shared cache's x86_64 HZ=250 build slot into `cache` (a
/// cache of no kernel), under the slot's own lock so that no build (the
/// twin's cloud kernel) changes it meanwhile. The shared slot is a cache
/// hit of the suite's own kernels first.
fn copy_shared_slot(cache: &Path) -> PathBuf {
    let o = build(None, "fix").output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let work = shared_cache().join("kernel/work/debian-6.1-x86_64-hz250");
    assert!(work.join("linux").is_dir(), "{}", work.display());
    let slot = cache.join("kernel/work/debian-6.1-x86_64-hz250");
    std::fs::create_dir_all(slot.parent().unwrap()).unwrap();
    {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(work.join("slot.lock"))
            .unwrap();
        let _held = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).unwrap();
        let st = Command::new("cp")
            .arg("-a")
            .arg(&work)
            .arg(&slot)
            .status()
            .unwrap();
        assert!(st.success());
    }
    assert!(
        !slot.join("make.unfinished").exists(),
        "the shared slot holds a cut make"
    );
    assert!(!cache.join("kernel/builds").exists(), "no kernel built yet");
    slot
}

/// Waits for a line of `child`'s stderr containing `what`; the lines so
/// far. The rest of its stderr is drained by a thread.
fn wait_for_line(child: &mut Child, what: &str, deadline: Duration) -> String {
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let t0 = Instant::now();
    let mut seen = String::new();
    while t0.elapsed() < deadline {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
                if line.contains(what) {
                    return seen;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    panic!("no `{what}` within {deadline:?}:\n{seen}");
}

#[test]
fn two_builders_build_once_and_a_killed_one_leaves_nothing_trusted() {
    // The slot as the suite's cache has it (scripts/ci-kernels.sh leaves
    // it at the fix; a first command before it, at no fix).
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let slot = copy_shared_slot(&cache);
    race_and_kill(&cache, &slot);
}

/// The README's two commands in order (issue 54): the first command
/// (`run quick`) builds each tree with the fix, then without, so the
/// slot's last make is the no-fix kernel's; the cache test then still
/// sees a variant switch compile, whichever variant it finds. The slot is
/// brought there in a cache of its own (both builds, in the first
/// command's order), then moved to a fresh cache, as a cache moved to
/// another path.
#[test]
fn after_the_first_commands_order_the_cache_test_still_switches() {
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first");
    copy_shared_slot(&first);
    for v in ["fix", "nofix"] {
        let o = build(Some(&first), v).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    let cache = tmp.path().join("cache");
    let slot = cache.join("kernel/work/debian-6.1-x86_64-hz250");
    std::fs::create_dir_all(slot.parent().unwrap()).unwrap();
    std::fs::rename(first.join("kernel/work/debian-6.1-x86_64-hz250"), &slot).unwrap();
    assert_eq!(
        tree_variant(&slot.join("linux")),
        "nofix",
        "as the first command leaves it"
    );
    race_and_kill(&cache, &slot);
}

/// Two builders of the variant the slot is not at, at once (one makes it,
/// the other waits and takes it), then a builder of the variant it was at,
/// killed while make runs, and the one after it.
fn race_and_kill(cache: &Path, slot: &Path) {
    let back = tree_variant(&slot.join("linux"));
    let switch_to = other(back);
    // Two builders of one kernel at once: one makes it, the other waits
    // on the slot and takes it.
    let a = build(Some(cache), switch_to)
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let b = build(Some(cache), switch_to)
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(
        a.status.success() && b.status.success(),
        "{}\n{}",
        text(&a),
        text(&b)
    );
    let made = [&a, &b]
        .iter()
        .filter(|o| String::from_utf8_lossy(&o.stderr).contains("make bzImage"))
        .count();
    assert_eq!(made, 1, "made once:\n{}\n{}", text(&a), text(&b));
    // The moved tree, rebased before its make: a variant switch compiles
    // a handful of files (fs/ext4/super.o, version.o, ...), not the tree.
    let both = format!("{}\n{}", text(&a), text(&b));
    assert!(
        both.contains("tool command files named another path: now its own"),
        "{both}"
    );
    let log = std::fs::read_to_string(slot.join("build.log")).unwrap();
    let compiled = log.lines().filter(|l| l.starts_with("  CC ")).count();
    assert!(
        (1..100).contains(&compiled),
        "{compiled} files compiled for a variant switch:\n{log}"
    );
    assert_eq!(image_of(&a), image_of(&b));
    let builds: Vec<_> = std::fs::read_dir(cache.join("kernel/builds"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(builds.len(), 1, "{builds:?}");

    // A builder killed while make runs (SIGKILL: nothing of it can clean
    // up): nothing is published, and the next builder waits for the make
    // it left (which holds the slot's lock), removes what that make wrote
    // and makes it again.
    let mut c = build(Some(cache), back)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_line(&mut c, "make bzImage", Duration::from_secs(600));
    std::thread::sleep(Duration::from_secs(2));
    c.kill().unwrap();
    c.wait().unwrap();
    let published = |v: &str| {
        std::fs::read_dir(cache.join("kernel/builds"))
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.contains(&format!("-{v}-")) && !n.starts_with('.')
            })
    };
    assert!(!published(back), "a killed build published");
    assert!(
        slot.join("make.unfinished").exists(),
        "the mark of the cut make"
    );
    let d = build(Some(cache), back).output().unwrap();
    let said = text(&d);
    assert!(d.status.success(), "{said}");
    assert!(
        said.contains("a make was cut short in this slot: ") && said.contains("make bzImage"),
        "{said}"
    );
    assert!(published(back) && !slot.join("make.unfinished").exists());
    // What kconfig wrote whole was kept: the recovery compiled what the
    // variant switch needs, not the tree (without include/config/auto.conf
    // kconfig takes every symbol as changed: about 1,200 files).
    let log = std::fs::read_to_string(slot.join("build.log")).unwrap();
    let compiled = log.lines().filter(|l| l.starts_with("  CC ")).count();
    assert!(
        (1..100).contains(&compiled),
        "{compiled} files compiled after a cut make:\n{said}\n{log}"
    );
    // Now a cache hit, checked against its manifest: no make.
    let e = build(Some(cache), back).output().unwrap();
    assert!(e.status.success(), "{}", text(&e));
    assert!(!text(&e).contains("make bzImage"), "{}", text(&e));
    assert_eq!(image_of(&d), image_of(&e));
}
