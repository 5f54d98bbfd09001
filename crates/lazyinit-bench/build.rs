//! Provenance: the harness's git commit, taken when the binary is built
//! (`LAZYINIT_HARNESS_COMMIT`: `<40 hex>`, with `-dirty` when a tracked
//! file differed from it, or `unknown` when built outside a git checkout,
//! e.g. from a tarball, or without git). `main` hands it to the library,
//! which writes it in every row and `shard.toml` (docs/result-csv.md).
//!
//! Rerun when HEAD moves (a checkout, a commit: HEAD and the branch's
//! ref), when the index changes (a staged file) and when a file of the
//! workspace's crates changes (an edit makes the tree dirty). Only this
//! binary is rebuilt then, as it is on any change of a crate anyway.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.join("../..");
    for p in ["Cargo.toml", "Cargo.lock", "crates"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    let commit = match git(&root, &["rev-parse", "--verify", "HEAD"]) {
        Some(head) if head.len() == 40 => {
            // The files that say where HEAD is, wherever the git directory
            // lies (a worktree's is not `.git/`).
            for name in ["HEAD", "index"] {
                if let Some(p) = git(&root, &["rev-parse", "--git-path", name]) {
                    println!("cargo:rerun-if-changed={}", root.join(p).display());
                }
            }
            if let Some(r) = git(&root, &["symbolic-ref", "-q", "HEAD"]) {
                for p in [r.as_str(), "packed-refs"] {
                    if let Some(p) = git(&root, &["rev-parse", "--git-path", p]) {
                        println!("cargo:rerun-if-changed={}", root.join(p).display());
                    }
                }
            }
            // Tracked files only: a results folder lying in the tree does
            // not make the harness another.
            match git(
                &root,
                &[
                    "--no-optional-locks",
                    "status",
                    "--porcelain",
                    "--untracked-files=no",
                ],
            ) {
                Some(s) if s.is_empty() => head,
                Some(_) => format!("{head}-dirty"),
                None => "unknown".to_string(),
            }
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=LAZYINIT_HARNESS_COMMIT={commit}");
}
