//! Debian packages of the target arch: which ones (from apt's package lists,
//! offline), and their .deb files (downloaded once into the cache, checked
//! against the SHA256 the lists give).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use lazyinit_core::Arch;
use serde::{Deserialize, Serialize};

use crate::error::ImageError;

/// One resolved package, as apt's lists describe its candidate version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    pub name: String,
    pub version: String,
    pub arch: String,
    pub sha256: String,
    /// Names of the packages it depends on (first alternative, no versions).
    #[serde(skip)]
    pub depends: Vec<String>,
}

/// Splits `apt-cache show` output into packages.
pub fn parse_show(text: &str) -> Vec<Package> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let mut fields: BTreeMap<&str, String> = BTreeMap::new();
        let mut last: Option<&str> = None;
        for line in stanza.lines() {
            if line.starts_with(' ') || line.starts_with('\t') {
                // Continuation of a multi-line field (Description, ...).
                if let Some(k) = last {
                    if let Some(v) = fields.get_mut(k) {
                        v.push(' ');
                        v.push_str(line.trim());
                    }
                }
            } else if let Some((k, v)) = line.split_once(':') {
                fields.insert(k, v.trim().to_string());
                last = Some(k);
            }
        }
        let get = |k: &str| fields.get(k).cloned().unwrap_or_default();
        if get("Package").is_empty() {
            continue;
        }
        let mut depends = dependency_names(&get("Pre-Depends"));
        depends.extend(dependency_names(&get("Depends")));
        out.push(Package {
            name: get("Package"),
            version: get("Version"),
            arch: get("Architecture"),
            sha256: get("SHA256"),
            depends,
        });
    }
    out
}

/// `libc6 (>= 2.34), debconf | debconf-2.0, libfoo:any` -> names, taking the
/// first alternative of each.
pub fn dependency_names(field: &str) -> Vec<String> {
    field
        .split(',')
        .filter_map(|dep| {
            let first = dep.split('|').next()?.trim();
            let name = first.split([' ', '(', '[', '<']).next()?.trim();
            let name = name.split(':').next()?;
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}

/// Dependencies we follow: shared libraries. Everything else a package
/// depends on (debconf, logsave, ...) is for a full system, not for the
/// few binaries the image takes; the ELF closure check catches any gap.
pub fn is_library_package(name: &str) -> bool {
    name.starts_with("lib") || name == "zlib1g"
}

/// Runs a host tool of the image build: its stdout, or an error naming it
/// with what it said.
pub(crate) fn run(cmd: &mut Command, what: &str) -> Result<String, ImageError> {
    use lazyinit_core::command::{self, CommandError};
    command::run_text(cmd).map_err(|e| match e {
        CommandError::Spawn { source, .. } => ImageError::Spawn {
            what: what.to_string(),
            source,
        },
        e @ CommandError::Failed { .. } => ImageError::Tool {
            what: what.to_string(),
            stderr: e.detail(),
        },
    })
}

fn lists_error(arch: Arch, detail: String) -> ImageError {
    let darch = arch.debian_arch();
    ImageError::PackageLists {
        arch,
        hint: lazyinit_core::exit::missing_tool(
            &format!("the {darch} package list"),
            &format!("dpkg --add-architecture {darch} && apt-get update"),
        ),
        detail,
    }
}

/// Resolves `roots` and their library dependencies for `arch` from apt's
/// lists (no network). Sorted by name.
pub fn resolve(arch: Arch, roots: &[&str]) -> Result<Vec<Package>, ImageError> {
    let darch = arch.debian_arch();
    let mut found: BTreeMap<String, Package> = BTreeMap::new();
    let mut queue: BTreeSet<String> = roots.iter().map(|s| s.to_string()).collect();
    while !queue.is_empty() {
        let names: Vec<String> = std::mem::take(&mut queue).into_iter().collect();
        let mut cmd = Command::new("apt-cache");
        cmd.args(["show", "--no-all-versions"]);
        cmd.args(names.iter().map(|n| format!("{n}:{darch}")));
        let text = run(&mut cmd, "apt-cache show").map_err(|e| match e {
            ImageError::Tool { stderr, .. } => lists_error(arch, stderr),
            e => e,
        })?;
        for pkg in parse_show(&text) {
            for dep in &pkg.depends {
                if is_library_package(dep) && !found.contains_key(dep) && !names.contains(dep) {
                    queue.insert(dep.clone());
                }
            }
            found.insert(pkg.name.clone(), pkg);
        }
        if let Some(missing) = names.iter().find(|n| !found.contains_key(*n)) {
            return Err(lists_error(
                arch,
                format!("apt-cache knows no package `{missing}:{darch}`"),
            ));
        }
    }
    Ok(found.into_values().collect())
}

/// Identifies the state of apt's package lists and pin preferences (file
/// names, sizes and mtimes): while it is unchanged, so is every candidate
/// version, and a resolution can be reused without asking apt-cache, which
/// takes seconds per call on a busy machine.
pub fn lists_fingerprint() -> String {
    let mut text = String::new();
    for dir in [
        "/var/lib/apt/lists",
        "/etc/apt/preferences.d",
        "/etc/apt/sources.list.d",
    ] {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.extend(
            [
                "/etc/apt/preferences",
                "/etc/apt/sources.list",
                "/var/lib/dpkg/arch",
            ]
            .map(PathBuf::from),
        );
        files.sort();
        for f in files {
            if let Ok(m) = std::fs::metadata(&f) {
                let mtime = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                text.push_str(&format!("{} {} {mtime}\n", f.display(), m.len()));
            }
        }
    }
    lazyinit_core::paths::sha256_hex(text)
}

/// [`resolve`], remembered in `cache_dir` for as long as apt's lists stay
/// the same.
pub fn resolve_cached(
    arch: Arch,
    roots: &[&str],
    cache_dir: &Path,
) -> Result<Vec<Package>, ImageError> {
    #[derive(Serialize, Deserialize)]
    struct Saved {
        packages: Vec<Package>,
    }
    let key = lazyinit_core::paths::sha256_hex(format!("{arch} {roots:?} {}", lists_fingerprint()));
    let path = cache_dir
        .join("resolved")
        .join(format!("{arch}-{}.json", &key[..16]));
    if let Some(saved) = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str::<Saved>(&t).ok())
    {
        return Ok(saved.packages);
    }
    let packages = resolve(arch, roots)?;
    let text = serde_json::to_string_pretty(&Saved {
        packages: packages.clone(),
    })
    .expect("serializes");
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // Losing this file only costs the next build a few seconds: said, not fatal.
    if let Err(e) = lazyinit_core::output::write_atomic(&path, text.as_bytes()) {
        tracing::warn!("cannot save the package list {}: {e}", path.display());
    }
    Ok(packages)
}

/// Where a package's .deb lives in the cache: named by content.
pub fn deb_path(debs_dir: &Path, pkg: &Package) -> PathBuf {
    debs_dir.join(format!("{}_{}_{}.deb", pkg.name, pkg.arch, pkg.sha256))
}

/// Makes sure every package's .deb is in `debs_dir`, downloading the
/// missing ones with `apt-get download` and checking their SHA256.
pub fn fetch(arch: Arch, pkgs: &[Package], debs_dir: &Path) -> Result<Vec<PathBuf>, ImageError> {
    let missing: Vec<&Package> = pkgs
        .iter()
        .filter(|p| !deb_path(debs_dir, p).exists())
        .collect();
    if !missing.is_empty() {
        std::fs::create_dir_all(debs_dir).map_err(|e| ImageError::io("create", debs_dir, e))?;
        let tmp_dir = tempfile::Builder::new()
            .prefix(".download-")
            .tempdir_in(debs_dir)
            .map_err(|e| ImageError::io("create", debs_dir, e))?;
        let tmp = tmp_dir.path().to_path_buf();
        let mut cmd = Command::new("apt-get");
        cmd.current_dir(&tmp).arg("download");
        cmd.args(
            missing
                .iter()
                .map(|p| format!("{}:{}={}", p.name, arch.debian_arch(), p.version)),
        );
        let result = run(&mut cmd, "apt-get download")
            .map_err(|e| match e {
                ImageError::Tool { what, stderr } => ImageError::Tool {
                    what,
                    stderr: format!("{stderr}\n(if the mirror no longer has these versions, run `apt-get update` and build again)"),
                },
                e => e,
            })
            .and_then(|_| {
            for entry in std::fs::read_dir(&tmp).map_err(|e| ImageError::io("read", &tmp, e))? {
                let path = entry.map_err(|e| ImageError::io("read", &tmp, e))?.path();
                let bytes = std::fs::read(&path).map_err(|e| ImageError::io("read", &path, e))?;
                let sum = lazyinit_core::paths::sha256_hex(&bytes);
                let Some(pkg) = missing.iter().find(|p| p.sha256 == sum) else {
                    return Err(ImageError::Checksum {
                        file: path,
                        seen: sum,
                    });
                };
                let dest = deb_path(debs_dir, pkg);
                std::fs::rename(&path, &dest).map_err(|e| ImageError::io("move", &dest, e))?;
            }
            Ok(())
        });
        drop(tmp_dir);
        result?;
    }
    pkgs.iter()
        .map(|p| {
            let path = deb_path(debs_dir, p);
            if path.exists() {
                Ok(path)
            } else {
                Err(ImageError::Tool {
                    what: "apt-get download".into(),
                    stderr: format!("{} {} was not downloaded", p.name, p.version),
                })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOW: &str = "\
Package: kexec-tools
Version: 1:2.0.25-3+deb12u3
Architecture: arm64
Depends: libc6 (>= 2.34), libxenmisc4.17, zlib1g (>= 1:1.1.4), debconf (>= 0.5) | debconf-2.0
Description-en: tools to support fast kexec reboots
 This package provides tools to load a kernel into memory and then
 reboot directly into it.
SHA256: c0410be4aa23fc0403016feab5312d6f284dd0330ccf0c8be7b64cb5a66d8c4f

Package: e2fsprogs
Version: 1.47.0-2+b2
Architecture: arm64
Pre-Depends: libblkid1 (>= 2.36), libc6 (>= 2.34), libcom-err2 (>= 1.43.9)
Depends: logsave
SHA256: 9842c31d32c897e3414168c4fab34cddd1633adacbc7858896e7a797d1be1b24
";

    #[test]
    fn parses_stanzas_and_dependencies() {
        let pkgs = parse_show(SHOW);
        assert_eq!(pkgs.len(), 2);
        assert_eq!(pkgs[0].name, "kexec-tools");
        assert_eq!(pkgs[0].version, "1:2.0.25-3+deb12u3");
        assert_eq!(pkgs[0].arch, "arm64");
        assert!(pkgs[0].sha256.starts_with("c0410be4"));
        assert_eq!(
            pkgs[0].depends,
            ["libc6", "libxenmisc4.17", "zlib1g", "debconf"]
        );
        assert_eq!(
            pkgs[1].depends,
            ["libblkid1", "libc6", "libcom-err2", "logsave"]
        );
    }

    #[test]
    fn dependency_names_strip_versions_arch_and_alternatives() {
        assert_eq!(
            dependency_names("libfoo:any (>= 1), bar [amd64] | baz, "),
            ["libfoo", "bar"]
        );
        assert!(dependency_names("").is_empty());
    }

    #[test]
    fn follows_only_libraries() {
        assert!(is_library_package("libxenmisc4.17"));
        assert!(is_library_package("zlib1g"));
        assert!(!is_library_package("debconf"));
        assert!(!is_library_package("logsave"));
    }
}
