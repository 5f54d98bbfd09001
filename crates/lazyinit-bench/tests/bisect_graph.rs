//! The `bisect` binary before its first build or sample: a bisection's
//! folder held by another bisection is bad input naming its holder (exit
//! 2, as `run` says of a busy folder; issue 52: exit 3 without the pid),
//! and --boot-timeout is bounded as `run`'s (a huge one overflowed at the
//! first boot). The bisection itself (the clone, the search, the test,
//! the confirmation, the outputs, the user's `.git` untouched) runs over a
//! bench that builds and boots nothing in
//! crates/lazyinit-orchestrator/tests/bisect_lab.rs, and on real kernels
//! and guests in bisect_e2e.rs.

use std::path::Path;
use std::process::{Command, Output};

use lazyinit_core::testing::git_ok as ok;

/// Commit a file of its own.
fn commit(dir: &Path, name: &str) -> String {
    std::fs::write(dir.join(format!("note-{name}")), name).unwrap();
    ok(dir, &["add", "-A"]);
    ok(dir, &["commit", "-q", "-m", name]);
    ok(dir, &["rev-parse", "HEAD"])
}

fn bisect(home: &Path, repo: &Path, good: &str, bad: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"))
        .args(["bisect", "--source"])
        .arg(repo)
        .args(["--good", good, "--bad", bad, "--cell", "arm64:100:8GiB"])
        .args(["--clock", "real", "--out"])
        .arg(home.join("out"))
        .args(extra)
        .env("LAZYINIT_CACHE_DIR", home.join("cache"))
        .env("LAZYINIT_STATE_DIR", home.join("state"))
        .env("HOME", home)
        .output()
        .unwrap()
}

#[test]
fn a_busy_folder_names_its_holder_and_the_boot_timeout_is_bounded() {
    let d = tempfile::tempdir().unwrap();
    let (home, repo) = (d.path(), d.path().join("repo"));
    std::fs::create_dir(&repo).unwrap();
    ok(&repo, &["init", "-q", "-b", "main"]);
    let (a, b) = (commit(&repo, "c0"), commit(&repo, "c1"));
    // A bisection's folder of the same arguments (as a first run leaves
    // it), held by another process.
    let out = home.join("out");
    std::fs::create_dir(&out).unwrap();
    let top = ok(&repo, &["rev-parse", "--show-toplevel"]);
    let args = format!(
        "good {a}\nbad {b}\ncell arm64:100:8GiB\nmetric ms_per_group\nstorage-profile default\nrepo {top}\n"
    );
    std::fs::write(out.join("bisect.args"), args).unwrap();
    std::fs::write(out.join(".lock"), "4242").unwrap();
    // --no-fork: flock(1) becomes the sleep, so killing it frees the lock.
    let mut holder = Command::new("flock")
        .args(["-x", "--no-fork"])
        .arg(out.join(".lock"))
        .args(["sleep", "60"])
        .spawn()
        .unwrap();
    // flock(1) has the lock once its sleep runs.
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if std::fs::read_to_string("/proc/locks")
            .unwrap_or_default()
            .contains(" FLOCK ")
        {
            break;
        }
    }
    let o = bisect(home, &repo, &a, &b, &[]);
    let _ = holder.kill();
    let _ = holder.wait();
    let text = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(text.contains("held by another bisect (pid 4242)"), "{text}");
    // Refused before anything was made: no clone, nothing built.
    assert!(!home.join("cache").exists(), "{text}");
    for t in ["0", "86401", "18446744073709551615"] {
        let o = bisect(home, &repo, &a, &b, &["--boot-timeout", t]);
        let text = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(2), "{t}: {text}");
        assert!(text.contains("--boot-timeout"), "{t}: {text}");
    }
}
