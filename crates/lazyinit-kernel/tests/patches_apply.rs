//! The variant patches against real source text: each Debian series' revert
//! applies to its own `fs/ext4/super.c` (read from the installed
//! linux-source tarball) with GNU patch and no fuzz, yields the unfixed
//! text, and reverses cleanly; the other series' patch does not apply (its
//! first hunk's context differs). The forward patches apply to the unfixed
//! forms of their series.

use std::path::Path;
use std::process::Command;

use lazyinit_kernel::variant::{detect_file, Detected, PATCHES};

fn patch(dir: &Path, name: &str, text: &str, extra: &[&str]) -> bool {
    let p = dir.join(format!("{name}.patch"));
    std::fs::write(&p, text).unwrap();
    Command::new("patch")
        .args([
            "-p1",
            "-F0",
            "-s",
            "--no-backup-if-mismatch",
            "-r",
            "-",
            "-i",
        ])
        .arg(&p)
        .args(extra)
        .current_dir(dir)
        .status()
        .unwrap()
        .success()
}

fn text_of(name: &str) -> &'static str {
    PATCHES.iter().find(|p| p.name == name).unwrap().text
}

fn super_c_from(tarball: &str, dir: &Path) {
    let st = Command::new("tar")
        .args([
            "-xf",
            tarball,
            "--strip-components=1",
            "--wildcards",
            "--no-wildcards-match-slash",
            "*/fs/ext4/super.c",
        ])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(st.success(), "cannot read {tarball}");
}

fn read(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("fs/ext4/super.c")).unwrap()
}

#[test]
fn debian_reverts_apply_to_their_own_series_only() {
    for (series, own, other) in [
        (
            "6.1",
            "debian-6.1-revert-fix.patch",
            "debian-6.12-revert-fix.patch",
        ),
        (
            "6.12",
            "debian-6.12-revert-fix.patch",
            "debian-6.1-revert-fix.patch",
        ),
    ] {
        let d = tempfile::tempdir().unwrap();
        super_c_from(&format!("/usr/src/linux-source-{series}.tar.xz"), d.path());
        assert_eq!(
            detect_file(&read(d.path())),
            Detected::Fix,
            "{series} as released"
        );
        assert!(
            !patch(d.path(), other, text_of(other), &["--dry-run"]),
            "{other} applied to {series}"
        );
        assert!(
            patch(d.path(), own, text_of(own), &[]),
            "{own} does not apply to {series}"
        );
        assert_eq!(
            detect_file(&read(d.path())),
            Detected::NoFix,
            "{series} reverted"
        );
        assert!(
            patch(d.path(), own, text_of(own), &["-R"]),
            "{own} does not reverse"
        );
        assert_eq!(
            detect_file(&read(d.path())),
            Detected::Fix,
            "{series} restored"
        );
        // The unfixed 6.1 text has the 5.10 context: the forward fix applies to it.
        if series == "6.1" {
            assert!(patch(d.path(), own, text_of(own), &[]));
            let fwd = "5.10-apply-fix.patch";
            assert!(patch(d.path(), fwd, text_of(fwd), &[]), "{fwd}");
            assert_eq!(detect_file(&read(d.path())), Detected::Fix);
        }
    }
}

#[test]
fn forward_fix_applies_to_the_5_4_form() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("fs/ext4")).unwrap();
    // Put the function where 5.4.160 has it, so the hunks apply at their lines.
    let body = format!(
        "{}/* Find next suitable group and run ext4_init_inode_table */\n{}",
        "\n".repeat(3022),
        include_str!("../fixtures/run_li_request-5.4-before-fix.c")
    );
    std::fs::write(d.path().join("fs/ext4/super.c"), body).unwrap();
    assert_eq!(detect_file(&read(d.path())), Detected::NoFix);
    let name = "5.4-apply-fix.patch";
    assert!(!patch(
        d.path(),
        "x",
        text_of("5.10-apply-fix.patch"),
        &["--dry-run"]
    ));
    assert!(patch(d.path(), name, text_of(name), &[]));
    assert_eq!(detect_file(&read(d.path())), Detected::Fix);
}

#[test]
fn debian_5_10_revert_applies_at_its_own_lines() {
    // Debian's 5.10.262 has ext4_run_li_request at line 3437 of super.c;
    // the fixture is its text, placed there.
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("fs/ext4")).unwrap();
    let body = format!(
        "{}{}static void ext4_clear_request_list(void)\n{{\n}}\n",
        "\n".repeat(3436),
        include_str!("../fixtures/run_li_request-debian-5.10.c")
    );
    std::fs::write(d.path().join("fs/ext4/super.c"), body).unwrap();
    assert_eq!(detect_file(&read(d.path())), Detected::Fix);
    let name = "debian-5.10-revert-fix.patch";
    let p = d.path().join(name);
    std::fs::write(&p, text_of(name)).unwrap();
    let out = Command::new("patch")
        .args(["-p1", "-F0", "--no-backup-if-mismatch", "-r", "-", "-i"])
        .arg(&p)
        .current_dir(d.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("offset"), "hunks moved: {said}");
    assert_eq!(detect_file(&read(d.path())), Detected::NoFix);
    // And back: the fix variant of the same tree is the released text.
    assert!(patch(d.path(), name, text_of(name), &["-R"]));
    assert_eq!(detect_file(&read(d.path())), Detected::Fix);
}
