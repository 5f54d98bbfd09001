//! Kernel sources: where a [`KernelSource`] lives on this machine, what it
//! is (identity, version, whether it carries the fix as released), and how a
//! build slot gets its own copy.
//!
//! Identifying a 140 MB tarball means hashing it and reading two members out
//! of it, seconds of work; the answer is remembered per (path, size, mtime)
//! in `<cache>/kernel/sources.json` so a cache hit stays well under a second.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::UNIX_EPOCH;

use lazyinit_core::KernelSource;
use serde::{Deserialize, Serialize};

use crate::debian;
use crate::error::KernelError;
use crate::variant::{self, Detected};

/// Where the source text is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// A `.tar.xz`/`.tar.gz`/`.tar` with one top-level directory.
    Tarball(PathBuf),
    /// An unpacked kernel tree (copied into the build slot, never modified).
    Tree(PathBuf),
    /// A git work tree: identified by commit plus differences, and copied
    /// as git lists its files (see [`lazyinit_core::git::tree`]).
    GitTree(PathBuf),
}

/// What a source is, as far as a build needs to know before unpacking it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFacts {
    /// `sha256:<hex>` of a tarball, `tree:<hex>` of a tree's fingerprint.
    pub identity: String,
    /// `make kernelversion` of the tree, e.g. `6.1.192`.
    pub version: String,
    /// Whether `ext4_run_li_request` carries the fix as released.
    pub released: Detected,
}

#[derive(Debug, Clone)]
pub struct ResolvedSource {
    pub source: KernelSource,
    pub kind: SourceKind,
    pub facts: SourceFacts,
    /// `<package> <version>` of a Debian source (`linux-source-5.10
    /// 5.10.262-1`), when known.
    pub debian_package: Option<String>,
}

/// Find the source on disk (without reading it).
pub fn locate(source: &KernelSource, cache_dir: &Path) -> Result<SourceKind, KernelError> {
    if let Some(pkg) = debian::package_for(source) {
        let installed = pkg.installed_tarball();
        if installed.is_file() {
            return Ok(SourceKind::Tarball(installed));
        }
        if pkg.download_from.is_some() {
            return debian::downloaded_tarball(cache_dir, &pkg)
                .map(|(p, _)| SourceKind::Tarball(p))
                .ok_or_else(|| KernelError::NotFetched(source.to_string()));
        }
        return Err(KernelError::MissingTool {
            tool: format!("Debian's kernel source ({})", installed.display()),
            install: format!("apt-get install {}", pkg.name),
        });
    }
    match source {
        KernelSource::Path(p) => {
            let meta = std::fs::metadata(p).map_err(|e| {
                KernelError::BadInput(format!("cannot read kernel source {}: {e}", p.display()))
            })?;
            if meta.is_dir() {
                if !p.join("fs/ext4/super.c").is_file() || !p.join("Makefile").is_file() {
                    return Err(KernelError::BadInput(format!(
                        "{} is not a kernel tree (no Makefile or fs/ext4/super.c)",
                        p.display()
                    )));
                }
                if lazyinit_core::git::tree::is_work_tree(p) {
                    Ok(SourceKind::GitTree(p.clone()))
                } else {
                    Ok(SourceKind::Tree(p.clone()))
                }
            } else {
                Ok(SourceKind::Tarball(p.clone()))
            }
        }
        KernelSource::Version(v) => {
            let path = crate::fetch::cached_tarball(cache_dir, v)
                .ok_or_else(|| KernelError::NotFetched(v.clone()))?;
            Ok(SourceKind::Tarball(path))
        }
        KernelSource::Debian(r) if r.exact().is_none() => Err(KernelError::Step(format!(
            "{source} is not pinned to a package version (archive::pin_source first)"
        ))),
        KernelSource::Debian(r) => crate::archive::cached_tarball(cache_dir, r)
            .map(SourceKind::Tarball)
            .ok_or_else(|| KernelError::NotFetched(source.to_string())),
        KernelSource::Debian61 | KernelSource::Debian612 | KernelSource::Debian510 => {
            unreachable!("the debian-X.Y sources are handled above")
        }
    }
}

/// `VERSION.PATCHLEVEL.SUBLEVEL` (plus `EXTRAVERSION`) from a top Makefile.
pub fn makefile_version(makefile: &str) -> Option<String> {
    let get = |key: &str| {
        makefile.lines().take(20).find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let (v, p) = (get("VERSION")?, get("PATCHLEVEL")?);
    let s = get("SUBLEVEL").unwrap_or_default();
    let e = get("EXTRAVERSION").unwrap_or_default();
    let mut out = format!("{v}.{p}");
    if !s.is_empty() && s != "0" {
        out.push('.');
        out.push_str(&s);
    }
    out.push_str(&e);
    Some(out)
}

fn memo_path(cache_dir: &Path) -> PathBuf {
    cache_dir.join("kernel").join("sources.json")
}

fn memo_key(path: &Path) -> Option<String> {
    let m = std::fs::metadata(path).ok()?;
    let mtime = m
        .modified()
        .ok()?
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some(format!(
        "{}|{}|{}",
        path.canonicalize().ok()?.display(),
        m.len(),
        mtime
    ))
}

fn read_memo(cache_dir: &Path) -> BTreeMap<String, SourceFacts> {
    std::fs::read(memo_path(cache_dir))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn write_memo(cache_dir: &Path, key: String, facts: &SourceFacts) -> Result<(), KernelError> {
    let mut memo = read_memo(cache_dir);
    memo.insert(key, facts.clone());
    let path = memo_path(cache_dir);
    let dir = path.parent().unwrap();
    std::fs::create_dir_all(dir).map_err(|e| KernelError::io(&path, e))?;
    lazyinit_core::output::write_atomic(&path, &serde_json::to_vec_pretty(&memo).unwrap())
        .map_err(|e| KernelError::io(&path, e))
}

fn run(cmd: &mut Command, what: &str) -> Result<Vec<u8>, KernelError> {
    crate::error::run(cmd, what)
}

/// Read a tarball's identity, version and released variant (slow: hashes
/// and decompresses it once); fails if it is not a kernel source tarball.
pub fn identify_tarball(path: &Path) -> Result<SourceFacts, KernelError> {
    tarball_facts(path)
}

/// Remember what [`identify_tarball`] found for a tarball now at `path`, so
/// the first build from it does not read it again.
pub fn remember_tarball(
    cache_dir: &Path,
    path: &Path,
    facts: &SourceFacts,
) -> Result<(), KernelError> {
    match memo_key(path) {
        Some(key) => write_memo(cache_dir, key, facts),
        None => Ok(()),
    }
}

fn tarball_facts(path: &Path) -> Result<SourceFacts, KernelError> {
    let hex = lazyinit_core::paths::sha256_file(path).map_err(|e| KernelError::io(path, e))?;
    let tmp = tempfile::Builder::new()
        .prefix("lazyinit-kernel-")
        .tempdir()
        .map_err(|e| KernelError::io(&std::env::temp_dir(), e))?;
    let tmp = tmp.path();
    // Only the top-level Makefile and ext4's super.c, whatever the top
    // directory is called.
    let r = run(
        Command::new("tar")
            .arg("-xf")
            .arg(path)
            .arg("-C")
            .arg(tmp)
            .args(["--wildcards", "--no-wildcards-match-slash"])
            .args(["*/Makefile", "*/fs/ext4/super.c"]),
        &format!("reading {}", path.display()),
    );
    // tar fails when the members are not there: not a kernel tarball.
    let r = r.map_err(|e| {
        let detail = e.to_string();
        let first = detail.lines().next().unwrap_or_default().to_string();
        KernelError::BadInput(format!(
            "{} is not a kernel source tarball (no top-level Makefile and fs/ext4/super.c): {first}",
            path.display()
        ))
    });
    let facts = r.and_then(|_| {
        let top = std::fs::read_dir(tmp)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.path())
            .ok_or_else(|| not_a_tree(path))?;
        tree_text_facts(&top, format!("sha256:{hex}"), path)
    });
    facts
}

fn not_a_tree(path: &Path) -> KernelError {
    KernelError::BadInput(format!(
        "{} is not a kernel source tarball (no top-level Makefile and fs/ext4/super.c)",
        path.display()
    ))
}

fn tree_text_facts(
    top: &Path,
    identity: String,
    origin: &Path,
) -> Result<SourceFacts, KernelError> {
    let makefile = std::fs::read_to_string(top.join("Makefile")).map_err(|_| not_a_tree(origin))?;
    let super_c =
        std::fs::read_to_string(top.join("fs/ext4/super.c")).map_err(|_| not_a_tree(origin))?;
    let version = makefile_version(&makefile).ok_or_else(|| not_a_tree(origin))?;
    Ok(SourceFacts {
        identity,
        version,
        released: variant::detect_file(&super_c),
    })
}

/// A tree's fingerprint: its path, and the size and mtime of every file
/// (without `.git` and build outputs), so an edit anywhere changes the key.
fn tree_fingerprint(root: &Path) -> Result<String, KernelError> {
    let mut acc = format!("{}\n", root.display());
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| KernelError::io(&dir, e))?
            .filter_map(|e| e.ok())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name == ".git" || name.ends_with(".o") || name.ends_with(".cmd") {
                continue;
            }
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if let Ok(m) = e.metadata() {
                let mtime = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok());
                acc.push_str(&format!(
                    "{} {} {}\n",
                    e.path().display(),
                    m.len(),
                    mtime.map(|d| d.as_nanos()).unwrap_or(0)
                ));
            }
        }
    }
    Ok(lazyinit_core::paths::sha256_hex(acc))
}

/// Locate and identify a source, using and filling the memo.
pub fn resolve(source: &KernelSource, cache_dir: &Path) -> Result<ResolvedSource, KernelError> {
    let kind = locate(source, cache_dir)?;
    let facts = match &kind {
        SourceKind::Tarball(p) => {
            let key = memo_key(p).ok_or_else(|| {
                KernelError::BadInput(format!("cannot read kernel source {}", p.display()))
            })?;
            match read_memo(cache_dir).remove(&key) {
                Some(f) => f,
                None => {
                    let f = tarball_facts(p)?;
                    write_memo(cache_dir, key, &f)?;
                    f
                }
            }
        }
        SourceKind::Tree(p) => {
            let id = format!("tree:{}", tree_fingerprint(p)?);
            tree_text_facts(p, id, p)?
        }
        SourceKind::GitTree(p) => {
            let id = lazyinit_core::git::tree::state(p)?.to_string();
            tree_text_facts(p, id, p)?
        }
    };
    let archived = match source {
        KernelSource::Debian(r) => r.exact().map(|v| format!("{} {v}", r.package())),
        _ => None,
    };
    let debian_package = archived.or_else(|| {
        let pkg = debian::package_for(source)?;
        let version = match &kind {
            SourceKind::Tarball(p) if *p == pkg.installed_tarball() => {
                debian::installed_version(&pkg)
            }
            _ => debian::downloaded_tarball(cache_dir, &pkg).map(|(_, v)| v),
        }?;
        Some(format!("{} {version}", pkg.name))
    });
    Ok(ResolvedSource {
        source: source.clone(),
        kind,
        facts,
        debian_package,
    })
}

/// Put a copy of the source into `dest` (which must not exist): unpack a
/// tarball, copy a tree without `.git`, or copy a git work tree's files.
pub fn unpack(kind: &SourceKind, dest: &Path) -> Result<(), KernelError> {
    std::fs::create_dir_all(dest).map_err(|e| KernelError::io(dest, e))?;
    match kind {
        SourceKind::Tarball(t) => run(
            Command::new("tar")
                .arg("-xf")
                .arg(t)
                .arg("-C")
                .arg(dest)
                .arg("--strip-components=1"),
            &format!("unpacking {}", t.display()),
        )
        .map(|_| ()),
        SourceKind::Tree(src) => run(
            Command::new("sh")
                .arg("-c")
                .arg("tar -C \"$1\" --exclude=.git -cf - . | tar -C \"$2\" -xf -")
                .args(["sh"])
                .arg(src)
                .arg(dest),
            &format!("copying {}", src.display()),
        )
        .map(|_| ()),
        SourceKind::GitTree(src) => {
            let list = lazyinit_core::git::tree::file_list(src)?;
            let list_file = dest.with_extension("files");
            std::fs::write(&list_file, list).map_err(|e| KernelError::io(&list_file, e))?;
            let r = run(
                Command::new("sh")
                    .arg("-c")
                    .arg(
                        "tar -C \"$1\" --null --no-recursion -T \"$3\" -cf - | tar -C \"$2\" -xf -",
                    )
                    .args(["sh"])
                    .arg(src)
                    .arg(dest)
                    .arg(&list_file),
                &format!("copying the files of {}", src.display()),
            );
            let _ = std::fs::remove_file(&list_file);
            r.map(|_| ())
        }
    }
}

/// Whether a copied tree carries the outputs of an in-place build (its
/// own `.config` or generated headers), which must not reach our build.
pub fn was_built_in_place(tree: &Path) -> bool {
    tree.join(".config").exists() || tree.join("include/config").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_from_makefile() {
        let mk = "# SPDX\nVERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 192\nEXTRAVERSION =\nNAME = Curry Ramen\n";
        assert_eq!(makefile_version(mk).as_deref(), Some("6.1.192"));
        let rc = "VERSION = 5\nPATCHLEVEL = 16\nSUBLEVEL = 0\nEXTRAVERSION = -rc1\n";
        assert_eq!(makefile_version(rc).as_deref(), Some("5.16-rc1"));
        assert_eq!(makefile_version("all:\n\ttrue\n"), None);
    }

    #[test]
    fn missing_path_is_bad_input() {
        let e = locate(
            &KernelSource::Path("/nonexistent/linux".into()),
            Path::new("/tmp"),
        )
        .unwrap_err();
        assert!(matches!(e, KernelError::BadInput(_)), "{e}");
    }

    #[test]
    fn a_directory_that_is_not_a_kernel_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let e = locate(&KernelSource::Path(d.path().into()), d.path()).unwrap_err();
        assert!(e.to_string().contains("not a kernel tree"), "{e}");
    }

    #[test]
    fn tree_facts_read_version_and_variant() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("fs/ext4")).unwrap();
        std::fs::write(
            d.path().join("Makefile"),
            "VERSION = 5\nPATCHLEVEL = 4\nSUBLEVEL = 160\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("fs/ext4/super.c"),
            include_str!("../fixtures/run_li_request-5.4-before-fix.c"),
        )
        .unwrap();
        let r = resolve(&KernelSource::Path(d.path().into()), d.path()).unwrap();
        assert_eq!(r.facts.version, "5.4.160");
        assert_eq!(r.facts.released, Detected::NoFix);
        assert!(r.facts.identity.starts_with("tree:"));
        // An edit anywhere in the tree changes its identity.
        std::fs::write(d.path().join("README"), "x").unwrap();
        let r2 = resolve(&KernelSource::Path(d.path().into()), d.path()).unwrap();
        assert_ne!(r.facts.identity, r2.facts.identity);
    }
}
