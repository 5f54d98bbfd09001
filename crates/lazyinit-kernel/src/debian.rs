//! Debian's kernel source packages (`linux-source-X.Y`).
//!
//! 6.1 and 6.12 are bookworm packages that `scripts/setup-host.sh` installs:
//! their tarball is under `/usr/src`. 5.10, the report's own series, is
//! Debian 11's package from `bullseye-security`, which a bookworm host's apt
//! does not carry. The harness downloads it with `apt-get download` through a
//! private apt configuration: its own sources list, lists and archive cache
//! under `<cache>/kernel/debian/apt/`, no host preferences or status, so
//! nothing of the host's apt setup is read for the choice or changed by it
//! (the host's `apt.conf.d`, proxies for example, still applies). apt checks
//! the suite's signature with Debian's archive keyring and the package's
//! sha256 from the signed index. The tarball is taken out of the package
//! with `dpkg-deb` and kept as
//! `<cache>/kernel/debian/<package>/<version>/linux-source-X.Y.tar.xz`;
//! `<package>/current` names the version builds use. A host that has the
//! package installed (a bullseye machine) uses `/usr/src` instead.

use std::path::{Path, PathBuf};
use std::process::Command;

use lazyinit_core::{Arch, KernelSource};

use crate::error::KernelError;
use crate::source::{self, SourceFacts};
use crate::{BuildEvent, ProgressFn};

/// One Debian source package the harness knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebianPackage {
    /// `linux-source-5.10`
    pub name: &'static str,
    /// `X.Y` the tarball must contain.
    pub series: &'static str,
    /// Suite the harness downloads it from, when the host's apt does not
    /// install it (None: installed by `scripts/setup-host.sh`).
    pub download_from: Option<(&'static str, &'static str)>,
}

impl DebianPackage {
    /// `linux-source-5.10.tar.xz`, the file in the package and under /usr/src.
    pub fn tarball_name(&self) -> String {
        format!("{}.tar.xz", self.name)
    }

    /// Where an installed package keeps its tarball.
    pub fn installed_tarball(&self) -> PathBuf {
        Path::new("/usr/src").join(self.tarball_name())
    }
}

/// The archive that serves Debian's security suites; override with
/// `LAZYINIT_DEBIAN_SECURITY_MIRROR` (a local mirror or proxy).
pub const SECURITY_ARCHIVE: &str = "http://deb.debian.org/debian-security";

/// Debian's keyring, which holds the bullseye-security signing keys too.
pub const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

pub fn package_for(source: &KernelSource) -> Option<DebianPackage> {
    Some(match source {
        KernelSource::Debian61 => DebianPackage {
            name: "linux-source-6.1",
            series: "6.1",
            download_from: None,
        },
        KernelSource::Debian612 => DebianPackage {
            name: "linux-source-6.12",
            series: "6.12",
            download_from: None,
        },
        KernelSource::Debian510 => DebianPackage {
            name: "linux-source-5.10",
            series: "5.10",
            download_from: Some((SECURITY_ARCHIVE, "bullseye-security")),
        },
        _ => return None,
    })
}

fn archive_url(default: &str) -> String {
    std::env::var("LAZYINIT_DEBIAN_SECURITY_MIRROR").unwrap_or_else(|_| default.to_string())
}

pub fn debian_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("kernel").join("debian")
}

/// The downloaded tarball builds use, and its package version.
pub fn downloaded_tarball(cache_dir: &Path, pkg: &DebianPackage) -> Option<(PathBuf, String)> {
    let dir = debian_dir(cache_dir).join(pkg.name);
    let version = std::fs::read_to_string(dir.join("current")).ok()?;
    let version = version.trim().to_string();
    let path = dir.join(&version).join(pkg.tarball_name());
    path.is_file().then_some((path, version))
}

/// The installed package's version (`dpkg-query`), if dpkg knows it.
pub fn installed_version(pkg: &DebianPackage) -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", pkg.name])
        .output()
        .ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

/// The private apt configuration: every place apt would read the host's
/// sources, pins or package state, or write lists and archives, points
/// under `root` (or at nothing).
pub fn apt_options(root: &Path, arch: &str, as_root: bool) -> Vec<String> {
    let p = |s: &str| root.join(s).display().to_string();
    let mut v = vec![
        format!("Dir::Etc::SourceList={}", p("sources.list")),
        "Dir::Etc::SourceParts=/dev/null".to_string(),
        "Dir::Etc::Preferences=/dev/null".to_string(),
        "Dir::Etc::PreferencesParts=/dev/null".to_string(),
        "Dir::State::status=/dev/null".to_string(),
        format!("Dir::State::Lists={}", p("lists")),
        format!("Dir::Cache={}", p("cache")),
        "APT::Default-Release=".to_string(),
        format!("APT::Architecture={arch}"),
        format!("APT::Architectures={arch}"),
        "Acquire::Languages=none".to_string(),
    ];
    // As root apt drops to `_apt` for downloads, which cannot enter a
    // cache under /root; the files land in our own directory either way.
    if as_root {
        v.push("APT::Sandbox::User=root".to_string());
    }
    v.into_iter().flat_map(|o| ["-o".to_string(), o]).collect()
}

/// The one-line sources entry for a suite, signed by Debian's keyring.
pub fn sources_line(archive: &str, suite: &str) -> String {
    format!("deb [signed-by={KEYRING}] {archive} {suite} main\n")
}

/// The version in a package file name `<name>_<version>_<arch>.deb`.
pub fn deb_version(file_name: &str, package: &str) -> Option<String> {
    let rest = file_name
        .strip_prefix(package)?
        .strip_prefix('_')?
        .strip_suffix(".deb")?;
    let (version, _arch) = rest.rsplit_once('_')?;
    // apt writes an epoch's colon as %3a in file names.
    Some(version.replace("%3a", ":"))
}

pub(crate) fn run(cmd: &mut Command, what: &str) -> Result<(), KernelError> {
    match lazyinit_core::command::run(cmd) {
        Ok(_) => Ok(()),
        Err(e) if e.not_found() => Err(KernelError::MissingTool {
            tool: what.split_whitespace().next().unwrap_or(what).to_string(),
            install: "apt-get install apt dpkg (a Debian host)".into(),
        }),
        Err(e @ lazyinit_core::command::CommandError::Spawn { .. }) => {
            Err(KernelError::Step(format!("{what}: {}", e.detail())))
        }
        Err(e) => Err(KernelError::Step(format!("{what} failed: {}", e.tail(6)))),
    }
}

/// `/proc/self` belongs to the process's effective user.
pub(crate) fn effective_uid_is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Download the newest `pkg` from its suite into the cache, check that it
/// is the series it should be, and make it the one builds use. Returns the
/// tarball, its package version and what it is.
pub fn fetch(
    cache_dir: &Path,
    pkg: &DebianPackage,
    progress: Option<&ProgressFn>,
) -> Result<(PathBuf, String, SourceFacts), KernelError> {
    let Some((archive, suite)) = pkg.download_from else {
        return Err(KernelError::MissingTool {
            tool: format!(
                "Debian's kernel source ({})",
                pkg.installed_tarball().display()
            ),
            install: format!("apt-get install {}", pkg.name),
        });
    };
    let step = |s: String| {
        if let Some(p) = progress {
            p(BuildEvent::Step(s));
        }
    };
    let apt_root = debian_dir(cache_dir).join("apt");
    for d in ["lists/partial", "cache/archives/partial"] {
        let d = apt_root.join(d);
        std::fs::create_dir_all(&d).map_err(|e| KernelError::io(&d, e))?;
    }
    let list = apt_root.join("sources.list");
    std::fs::write(&list, sources_line(&archive_url(archive), suite))
        .map_err(|e| KernelError::io(&list, e))?;
    let arch = Arch::host().map_or("amd64", |a| a.debian_arch());
    let opts = apt_options(&apt_root, arch, effective_uid_is_root());

    step(format!("apt-get update ({suite}, private lists)"));
    run(
        Command::new("apt-get").args(&opts).args(["-q", "update"]),
        "apt-get update",
    )?;
    let base = debian_dir(cache_dir);
    std::fs::create_dir_all(&base).map_err(|e| KernelError::io(&base, e))?;
    let dl = tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(&base)
        .map_err(|e| KernelError::io(&base, e))?;
    let result = fetch_into(cache_dir, pkg, &opts, dl.path(), &step);
    drop(dl);
    result
}

fn fetch_into(
    cache_dir: &Path,
    pkg: &DebianPackage,
    opts: &[String],
    dl: &Path,
    step: &dyn Fn(String),
) -> Result<(PathBuf, String, SourceFacts), KernelError> {
    let deb = download_deb(opts, pkg.name, pkg.name, dl, step)?;
    install_deb(cache_dir, pkg, &deb)
}

/// `apt-get download <what>` (a package, or `package=version`) through
/// the private configuration `opts` into `dl`; the package file left.
pub(crate) fn download_deb(
    opts: &[String],
    what: &str,
    package: &str,
    dl: &Path,
    step: &dyn Fn(String),
) -> Result<PathBuf, KernelError> {
    step(format!("apt-get download {what}"));
    run(
        Command::new("apt-get")
            .args(opts)
            .args(["-q", "download", what])
            .current_dir(dl),
        &format!("apt-get download {what}"),
    )?;
    let deb = std::fs::read_dir(dl)
        .map_err(|e| KernelError::io(dl, e))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| KernelError::Step(format!("apt-get download left no {package} package")))?;
    step(format!("unpack {}", deb.display()));
    Ok(deb)
}

/// Take the tarball out of a downloaded package (`<name>_<version>_all.deb`),
/// check that it is a tree of the package's series, keep it in the cache and
/// make it the version builds use. The package file itself is not kept.
pub fn install_deb(
    cache_dir: &Path,
    pkg: &DebianPackage,
    deb: &Path,
) -> Result<(PathBuf, String, SourceFacts), KernelError> {
    install_package(cache_dir, pkg.name, pkg.series, deb, true)
}

/// [`install_deb`] for any `linux-source-X.Y` (`name`, `series`); with
/// `current`, the version becomes the one `<name>/current` names (the
/// `debian-X.Y` sources'); an archive source names its exact version.
pub(crate) fn install_package(
    cache_dir: &Path,
    name: &str,
    series: &str,
    deb: &Path,
    current: bool,
) -> Result<(PathBuf, String, SourceFacts), KernelError> {
    let file_name = deb.file_name().unwrap_or_default().to_string_lossy();
    let version = deb_version(&file_name, name).ok_or_else(|| {
        KernelError::Step(format!("cannot read the version of {}", deb.display()))
    })?;
    let pkg_dir = debian_dir(cache_dir).join(name);
    std::fs::create_dir_all(&pkg_dir).map_err(|e| KernelError::io(&pkg_dir, e))?;
    let tmp = tempfile::Builder::new()
        .prefix(".unpack-")
        .tempdir_in(&pkg_dir)
        .map_err(|e| KernelError::io(&pkg_dir, e))?;
    let r = install_from(cache_dir, (name, series), deb, &version, tmp.path());
    drop(tmp);
    let (path, facts) = r?;
    if current {
        let current = pkg_dir.join("current");
        lazyinit_core::output::write_atomic(&current, format!("{version}\n").as_bytes())
            .map_err(|e| KernelError::io(&current, e))?;
    }
    Ok((path, version, facts))
}

/// Where a package version's tarball is kept in the cache.
pub fn kept_tarball(cache_dir: &Path, name: &str, version: &str) -> PathBuf {
    debian_dir(cache_dir)
        .join(name)
        .join(version)
        .join(format!("{name}.tar.xz"))
}

fn install_from(
    cache_dir: &Path,
    (name, series): (&str, &str),
    deb: &Path,
    version: &str,
    tmp: &Path,
) -> Result<(PathBuf, SourceFacts), KernelError> {
    run(
        Command::new("dpkg-deb").arg("-x").arg(deb).arg(tmp),
        &format!("dpkg-deb -x {}", deb.display()),
    )?;
    let tarball_name = format!("{name}.tar.xz");
    let tarball = tmp.join("usr/src").join(&tarball_name);
    if !tarball.is_file() {
        return Err(KernelError::Step(format!(
            "{} has no usr/src/{tarball_name}",
            deb.display(),
        )));
    }
    let facts = source::identify_tarball(&tarball)?;
    if crate::variant::series_of(&facts.version) != series {
        return Err(KernelError::Step(format!(
            "{name} {version} holds a {} tree, not {series}",
            facts.version
        )));
    }
    let dest = kept_tarball(cache_dir, name, version);
    if !dest.is_file() {
        let dest_dir = dest.parent().expect("a tarball's folder");
        std::fs::create_dir_all(dest_dir).map_err(|e| KernelError::io(dest_dir, e))?;
        std::fs::rename(&tarball, &dest).map_err(|e| KernelError::io(&dest, e))?;
    }
    source::remember_tarball(cache_dir, &dest, &facts)?;
    Ok((dest, facts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_5_10_is_downloaded() {
        let p = package_for(&KernelSource::Debian510).unwrap();
        assert_eq!(p.name, "linux-source-5.10");
        assert_eq!(p.download_from.unwrap().1, "bullseye-security");
        assert_eq!(
            p.installed_tarball(),
            Path::new("/usr/src/linux-source-5.10.tar.xz")
        );
        for s in [KernelSource::Debian61, KernelSource::Debian612] {
            assert!(package_for(&s).unwrap().download_from.is_none(), "{s}");
        }
        assert!(package_for(&KernelSource::Version("5.10.79".into())).is_none());
    }

    #[test]
    fn apt_reads_and_writes_only_its_own_tree() {
        let o = apt_options(Path::new("/c/apt"), "amd64", false);
        let values: Vec<&str> = o
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, v)| v.as_str())
            .collect();
        assert!(o.iter().step_by(2).all(|f| f == "-o"));
        for want in [
            "Dir::Etc::SourceList=/c/apt/sources.list",
            "Dir::Etc::SourceParts=/dev/null",
            "Dir::Etc::Preferences=/dev/null",
            "Dir::Etc::PreferencesParts=/dev/null",
            "Dir::State::status=/dev/null",
            "Dir::State::Lists=/c/apt/lists",
            "Dir::Cache=/c/apt/cache",
        ] {
            assert!(values.contains(&want), "{want} missing from {values:?}");
        }
        // Every Dir:: setting stays under the private root or /dev/null.
        for v in values.iter().filter(|v| v.starts_with("Dir::")) {
            let path = v.split_once('=').unwrap().1;
            assert!(path.starts_with("/c/apt/") || path == "/dev/null", "{v}");
        }
        assert!(!values.iter().any(|v| v.starts_with("APT::Sandbox")));
        assert!(apt_options(Path::new("/c"), "arm64", true)
            .contains(&"APT::Sandbox::User=root".to_string()));
    }

    #[test]
    fn sources_line_is_signed_by_debians_keyring() {
        assert_eq!(
            sources_line(SECURITY_ARCHIVE, "bullseye-security"),
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bullseye-security main\n"
        );
    }

    #[test]
    fn version_comes_from_the_package_file_name() {
        assert_eq!(
            deb_version("linux-source-5.10_5.10.262-1_all.deb", "linux-source-5.10").as_deref(),
            Some("5.10.262-1")
        );
        assert_eq!(
            deb_version("linux-source-5.10_1%3a5.10-1_all.deb", "linux-source-5.10").as_deref(),
            Some("1:5.10-1")
        );
        assert_eq!(
            deb_version("linux-source-6.1_6.1-1_all.deb", "linux-source-5.10"),
            None
        );
        assert_eq!(
            deb_version("linux-source-5.10.tar.xz", "linux-source-5.10"),
            None
        );
    }

    /// A package like Debian's: `usr/src/<name>.tar.xz` holding a tree
    /// with a Makefile of `version` and ext4's super.c.
    fn fake_deb(dir: &Path, name: &str, deb_version: &str, version: (u32, u32, u32)) -> PathBuf {
        let root = dir.join(format!("pkg-{deb_version}"));
        let tree = root.join("tree").join(name);
        std::fs::create_dir_all(tree.join("fs/ext4")).unwrap();
        std::fs::write(
            tree.join("Makefile"),
            format!(
                "VERSION = {}\nPATCHLEVEL = {}\nSUBLEVEL = {}\nEXTRAVERSION =\n",
                version.0, version.1, version.2
            ),
        )
        .unwrap();
        std::fs::write(
            tree.join("fs/ext4/super.c"),
            include_str!("../fixtures/run_li_request-debian-5.10.c"),
        )
        .unwrap();
        let deb_root = root.join("deb");
        std::fs::create_dir_all(deb_root.join("usr/src")).unwrap();
        std::fs::create_dir_all(deb_root.join("DEBIAN")).unwrap();
        std::fs::write(
            deb_root.join("DEBIAN/control"),
            format!("Package: {name}\nVersion: {deb_version}\nArchitecture: all\nMaintainer: t <t@t>\nDescription: test\n"),
        )
        .unwrap();
        let st = Command::new("tar")
            .arg("-cJf")
            .arg(deb_root.join(format!("usr/src/{name}.tar.xz")))
            .arg("-C")
            .arg(root.join("tree"))
            .arg(name)
            .status()
            .unwrap();
        assert!(st.success());
        let deb = dir.join(format!("{name}_{deb_version}_all.deb"));
        let out = Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group", "-Zxz"])
            .arg(&deb_root)
            .arg(&deb)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        deb
    }

    #[test]
    fn a_downloaded_package_becomes_the_current_source() {
        let d = tempfile::tempdir().unwrap();
        let cache = d.path().join("cache");
        let pkg = package_for(&KernelSource::Debian510).unwrap();
        let deb = fake_deb(d.path(), pkg.name, "5.10.262-1", (5, 10, 262));
        let (path, version, facts) = install_deb(&cache, &pkg, &deb).unwrap();
        assert_eq!(version, "5.10.262-1");
        assert_eq!(facts.version, "5.10.262");
        assert_eq!(facts.released, crate::Detected::Fix);
        assert_eq!(
            downloaded_tarball(&cache, &pkg),
            Some((path.clone(), version))
        );
        // The build finds it there (on a host without the package installed
        // under /usr/src, which would come first), with its package version.
        assert!(!pkg.installed_tarball().exists(), "a bullseye host");
        let r = source::resolve(&KernelSource::Debian510, &cache).unwrap();
        assert_eq!(r.kind, source::SourceKind::Tarball(path));
        assert_eq!(
            r.debian_package.as_deref(),
            Some("linux-source-5.10 5.10.262-1")
        );
        assert_eq!(r.facts.identity, facts.identity);
        // A newer package becomes current; another series is refused.
        let newer = fake_deb(d.path(), pkg.name, "5.10.263-1", (5, 10, 263));
        let (_, v, f) = install_deb(&cache, &pkg, &newer).unwrap();
        assert_eq!(v, "5.10.263-1");
        assert_ne!(f.identity, facts.identity);
        assert_eq!(downloaded_tarball(&cache, &pkg).unwrap().1, "5.10.263-1");
        let wrong = fake_deb(d.path(), pkg.name, "6.1.1-1", (6, 1, 1));
        let e = install_deb(&cache, &pkg, &wrong).unwrap_err();
        assert!(
            e.to_string().contains("holds a 6.1.1 tree, not 5.10"),
            "{e}"
        );
        assert_eq!(downloaded_tarball(&cache, &pkg).unwrap().1, "5.10.263-1");
    }

    #[test]
    fn the_current_download_is_found() {
        let d = tempfile::tempdir().unwrap();
        let p = package_for(&KernelSource::Debian510).unwrap();
        assert!(downloaded_tarball(d.path(), &p).is_none());
        let dir = debian_dir(d.path()).join(p.name);
        std::fs::create_dir_all(dir.join("5.10.262-1")).unwrap();
        std::fs::write(dir.join("current"), "5.10.262-1\n").unwrap();
        // Named but not there: not found.
        assert!(downloaded_tarball(d.path(), &p).is_none());
        std::fs::write(dir.join("5.10.262-1").join(p.tarball_name()), b"x").unwrap();
        let (path, v) = downloaded_tarball(d.path(), &p).unwrap();
        assert_eq!(v, "5.10.262-1");
        assert!(path.ends_with("linux-source-5.10/5.10.262-1/linux-source-5.10.tar.xz"));
    }
}
