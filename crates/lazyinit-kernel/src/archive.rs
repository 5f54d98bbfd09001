//! Debian's archive of kernel source packages: every `linux-source-X.Y`
//! the suites from bullseye to sid and experimental serve, by series,
//! upstream version or exact package version (`debian:7.2`,
//! `debian:7.2.6`, `debian:7.2.13-1`).
//!
//! The archive is read through a private apt configuration of its own
//! (`<cache>/kernel/debian/archive/`: its sources list, lists, no host
//! sources, pins or package state; see [`crate::debian::apt_options`]), so
//! nothing of the host's apt state is read for the choice or changed by
//! it. apt checks each suite's signature with Debian's archive keyring and
//! each package's sha256 from the signed index. The lists are refreshed
//! when they are older than [`MAX_AGE`] (or asked), under a lock: two
//! commands never update them at once.
//!
//! A run pins `debian:7.2` and `debian:7.2.6` to the exact package version
//! before anything is planned ([`Archive::pin`]), so its cells, rows and
//! history name the exact package that ran; the tarball is kept as
//! `<cache>/kernel/debian/<package>/<version>/<package>.tar.xz`.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use lazyinit_core::{Arch, DebianRef, KernelSource};

use crate::debian::{self, KEYRING};
use crate::error::KernelError;
use crate::source::SourceFacts;

/// The suites the harness reads, and which archive serves each.
pub const SUITES: &[(&str, Repo)] = &[
    ("bullseye", Repo::Main),
    ("bullseye-security", Repo::Security),
    ("bookworm", Repo::Main),
    ("bookworm-updates", Repo::Main),
    ("bookworm-security", Repo::Security),
    ("bookworm-backports", Repo::Main),
    ("trixie", Repo::Main),
    ("trixie-security", Repo::Security),
    ("trixie-backports", Repo::Main),
    ("sid", Repo::Main),
    ("experimental", Repo::Main),
];

/// Lists older than this are refreshed before a version is chosen.
pub const MAX_AGE: Duration = Duration::from_secs(6 * 3600);

/// Debian's main archive; `LAZYINIT_DEBIAN_MIRROR` (or `--mirror`) names
/// another.
pub const MAIN_ARCHIVE: &str = "http://deb.debian.org/debian";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repo {
    Main,
    Security,
}

/// One package version the archive offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// `linux-source-7.2`
    pub package: String,
    /// `X.Y`
    pub series: String,
    /// The exact package version, `7.2.13-1`.
    pub version: String,
    /// Every suite that has it (`trixie`, `trixie-security`).
    pub suites: Vec<String>,
    /// The package's size in bytes (the index's `Size`).
    pub size: u64,
}

impl Offer {
    /// The upstream part of the version (`7.2.13`, `7.3~rc7`).
    pub fn upstream(&self) -> &str {
        self.version.split('-').next().unwrap_or(&self.version)
    }
}

/// The archive as this cache reads it.
#[derive(Debug, Clone)]
pub struct Archive {
    cache_dir: PathBuf,
    main: String,
    security: String,
}

impl Archive {
    /// The archive of `cache_dir`, through the mirrors the environment
    /// names (`LAZYINIT_DEBIAN_MIRROR`, `LAZYINIT_DEBIAN_SECURITY_MIRROR`)
    /// or Debian's own.
    pub fn new(cache_dir: &Path) -> Archive {
        let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
        Archive {
            cache_dir: cache_dir.to_path_buf(),
            main: env("LAZYINIT_DEBIAN_MIRROR", MAIN_ARCHIVE),
            security: env("LAZYINIT_DEBIAN_SECURITY_MIRROR", debian::SECURITY_ARCHIVE),
        }
    }

    /// Reads the main suites from `mirror` instead.
    pub fn with_mirror(mut self, mirror: Option<&str>) -> Archive {
        if let Some(m) = mirror {
            self.main = m.trim_end_matches('/').to_string();
        }
        self
    }

    fn root(&self) -> PathBuf {
        debian::debian_dir(&self.cache_dir).join("archive")
    }

    /// The sources list: one line a suite, each signed by Debian's keyring.
    pub fn sources_list(&self) -> String {
        SUITES
            .iter()
            .map(|(suite, repo)| {
                let url = match repo {
                    Repo::Main => &self.main,
                    Repo::Security => &self.security,
                };
                format!("deb [signed-by={KEYRING}] {url} {suite} main\n")
            })
            .collect()
    }

    fn options(&self) -> Vec<String> {
        let arch = Arch::host().map_or("amd64", |a| a.debian_arch());
        let mut o = debian::apt_options(&self.root(), arch, debian::effective_uid_is_root());
        // The lists stay compressed, and apt keeps its binary cache of
        // them but not the source one: some 230 MB instead of 450 MB, and
        // a query in a fraction of a second instead of three.
        for extra in [
            "Acquire::GzipIndexes=true",
            "Acquire::CompressionTypes::Order::=gz",
            "Dir::Cache::pkgcache=pkgcache.bin",
            "Dir::Cache::srcpkgcache=",
            "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false",
        ] {
            o.push("-o".into());
            o.push(extra.into());
        }
        o
    }

    /// Refreshes the lists when they are missing, older than `max_age`, or
    /// of other mirrors; `step` hears what is done. Holds the archive's
    /// lock while it works.
    pub fn refresh(&self, max_age: Duration, step: &dyn Fn(String)) -> Result<(), KernelError> {
        let root = self.root();
        for d in ["lists/partial", "cache/archives/partial"] {
            let d = root.join(d);
            std::fs::create_dir_all(&d).map_err(|e| KernelError::io(&d, e))?;
        }
        let _lock = crate::build::lock_file(&root.join("archive.lock"))?;
        let list = root.join("sources.list");
        let want = self.sources_list();
        let stamp = root.join("updated");
        let fresh = std::fs::read_to_string(&list).is_ok_and(|l| l == want)
            && std::fs::metadata(&stamp)
                .and_then(|m| m.modified())
                .is_ok_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() < max_age);
        if fresh {
            return Ok(());
        }
        lazyinit_core::output::write_atomic(&list, want.as_bytes())
            .map_err(|e| KernelError::io(&list, e))?;
        step(format!(
            "apt-get update ({} suites of {} and {}, private lists)",
            SUITES.len(),
            self.main,
            self.security
        ));
        debian::run(
            Command::new("apt-get").args(self.options()).args(["-q", "update"]),
            "apt-get update",
        )
        .map_err(|e| match e {
            KernelError::Step(s) => KernelError::Step(format!(
                "{s} (Debian's archive {} unreachable? name another with LAZYINIT_DEBIAN_MIRROR or --mirror)",
                self.main
            )),
            e => e,
        })?;
        lazyinit_core::output::write_atomic(&stamp, b"").map_err(|e| KernelError::io(&stamp, e))?;
        Ok(())
    }

    /// Every `linux-source-X.Y` version the lists hold, by series, then
    /// newest first.
    pub fn offers(&self) -> Result<Vec<Offer>, KernelError> {
        let names = self.query(&["pkgnames", "linux-source-"])?;
        let mut packages: Vec<String> = names
            .lines()
            .map(str::trim)
            .filter(|n| {
                n.strip_prefix("linux-source-")
                    .and_then(|s| s.parse::<DebianRef>().ok())
                    .is_some_and(|r| r.is_series())
            })
            .map(String::from)
            .collect();
        packages.sort();
        if packages.is_empty() {
            return Ok(Vec::new());
        }
        let mut args = vec!["madison"];
        args.extend(packages.iter().map(String::as_str));
        let madison = self.query(&args)?;
        let mut args = vec!["show"];
        args.extend(packages.iter().map(String::as_str));
        let show = self.query(&args)?;
        Ok(offers_of(&madison, &show))
    }

    fn query(&self, args: &[&str]) -> Result<String, KernelError> {
        let mut cmd = Command::new("apt-cache");
        cmd.args(self.options()).args(args);
        let out = lazyinit_core::command::run(&mut cmd).map_err(|e| match e.not_found() {
            true => KernelError::MissingTool {
                tool: "apt-cache".into(),
                install: "apt-get install apt (a Debian host)".into(),
            },
            false => KernelError::Step(format!("apt-cache {}: {}", args[0], e.tail(6))),
        })?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// The exact package version `r` means now: itself when exact (if the
    /// archive or the cache has it), else the newest of its series or of
    /// its upstream version. A version no suite has is bad input naming the
    /// nearest there are.
    pub fn pin(&self, r: &DebianRef, step: &dyn Fn(String)) -> Result<DebianRef, KernelError> {
        if let Some(v) = r.exact() {
            if debian::kept_tarball(&self.cache_dir, &r.package(), v).is_file() {
                return Ok(r.clone());
            }
        }
        self.refresh(MAX_AGE, step)?;
        let offers = self.offers()?;
        choose(&offers, r)
            .map(|o| {
                o.version
                    .parse()
                    .expect("an index's version is a Debian version")
            })
            .map_err(KernelError::BadInput)
    }

    /// Downloads exact `r` (apt checks the signature and sha256) and keeps
    /// its tarball; returns it, its version and what it is.
    pub fn download(
        &self,
        r: &DebianRef,
        step: &dyn Fn(String),
    ) -> Result<(PathBuf, String, SourceFacts), KernelError> {
        let version = r.exact().ok_or_else(|| {
            KernelError::Step(format!("debian:{r} is not pinned to a package version"))
        })?;
        self.refresh(MAX_AGE, step)?;
        let base = debian::debian_dir(&self.cache_dir);
        std::fs::create_dir_all(&base).map_err(|e| KernelError::io(&base, e))?;
        let dl = tempfile::Builder::new()
            .prefix(".download-")
            .tempdir_in(&base)
            .map_err(|e| KernelError::io(&base, e))?;
        let package = r.package();
        let what = format!("{package}={version}");
        let deb = debian::download_deb(&self.options(), &what, &package, dl.path(), step)?;
        debian::install_package(&self.cache_dir, &package, r.series(), &deb, false)
    }
}

/// The kept tarball of an exact `r`, if this cache has it.
pub fn cached_tarball(cache_dir: &Path, r: &DebianRef) -> Option<PathBuf> {
    let p = debian::kept_tarball(cache_dir, &r.package(), r.exact()?);
    p.is_file().then_some(p)
}

/// Pins a `debian:` source to its exact package version (others as they
/// are): what a spec's sources become before a run is planned.
pub fn pin_source(
    source: &KernelSource,
    cache_dir: &Path,
    step: &dyn Fn(String),
) -> Result<KernelSource, KernelError> {
    match source {
        KernelSource::Debian(r) => Ok(KernelSource::Debian(Archive::new(cache_dir).pin(r, step)?)),
        other => Ok(other.clone()),
    }
}

/// Orders two Debian versions as dpkg does (`7.3~rc7-1` before `7.3.4-1`).
pub fn cmp_versions(a: &str, b: &str) -> Ordering {
    match (
        a.parse::<debversion::Version>(),
        b.parse::<debversion::Version>(),
    ) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

/// The offers of `apt-cache madison` (package, version, suite) and `show`
/// (the sizes), newest first within each series.
pub fn offers_of(madison: &str, show: &str) -> Vec<Offer> {
    let mut sizes: BTreeMap<(String, String), u64> = BTreeMap::new();
    for record in show.split("\n\n") {
        let field = |name: &str| {
            record
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(": ").map(str::trim))
        };
        if let (Some(p), Some(v), Some(s)) = (field("Package"), field("Version"), field("Size")) {
            sizes.insert((p.into(), v.into()), s.parse().unwrap_or(0));
        }
    }
    let mut by: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for line in madison.lines() {
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        let [package, version, from] = cols[..] else {
            continue;
        };
        // `http://deb.debian.org/debian sid/main all Packages`
        let Some(suite) = from
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.split('/').next())
        else {
            continue;
        };
        let suites = by.entry((package.into(), version.into())).or_default();
        if !suites.iter().any(|s| s == suite) {
            suites.push(suite.into());
        }
    }
    let mut offers: Vec<Offer> = by
        .into_iter()
        .map(|((package, version), mut suites)| {
            suites.sort_by_key(|s| {
                SUITES
                    .iter()
                    .position(|(n, _)| n == s)
                    .unwrap_or(usize::MAX)
            });
            Offer {
                series: package.trim_start_matches("linux-source-").to_string(),
                size: sizes
                    .get(&(package.clone(), version.clone()))
                    .copied()
                    .unwrap_or(0),
                package,
                version,
                suites,
            }
        })
        .collect();
    offers.sort_by(|a, b| {
        cmp_versions(&a.series, &b.series).then_with(|| cmp_versions(&b.version, &a.version))
    });
    offers
}

/// The offer `r` means: exact, the newest of an upstream version, or the
/// newest released version of a series (a release candidate only when
/// the series has no release). Otherwise why not, with the nearest
/// versions there are.
pub fn choose<'a>(offers: &'a [Offer], r: &DebianRef) -> Result<&'a Offer, String> {
    let series: Vec<&Offer> = offers.iter().filter(|o| o.series == r.series()).collect();
    let hit = if let Some(v) = r.exact() {
        series.iter().find(|o| o.version == v).copied()
    } else if r.is_series() {
        series
            .iter()
            .find(|o| !o.upstream().contains("~rc"))
            .or(series.first())
            .copied()
    } else {
        series
            .iter()
            .find(|o| o.upstream() == r.upstream())
            .copied()
    };
    if let Some(o) = hit {
        return Ok(o);
    }
    if series.is_empty() {
        let mut known: Vec<&str> = offers.iter().map(|o| o.series.as_str()).collect();
        known.dedup();
        return Err(format!(
            "debian:{r}: Debian's archive has no linux-source-{} in the suites the harness reads; the series it has: {} (`lazyinit-bench kernel sources` lists every version)",
            r.series(),
            known.join(", ")
        ));
    }
    // The nearest below and above, as dpkg orders them.
    let want = r.exact().unwrap_or(r.upstream());
    // Newest first: the first below is the nearest, as the last above.
    let below = series
        .iter()
        .find(|o| cmp_versions(&o.version, want) == Ordering::Less);
    let above = series
        .iter()
        .rev()
        .find(|o| cmp_versions(&o.version, want) == Ordering::Greater);
    let near: Vec<String> = [below, above]
        .into_iter()
        .flatten()
        .map(|o| format!("debian:{} ({})", o.version, o.suites.join(", ")))
        .collect();
    Err(format!(
        "debian:{r}: no suite the harness reads has that version of {}; the nearest: {} (`lazyinit-bench kernel sources` lists every version)",
        r.package(),
        near.join(" and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `apt-cache madison` and `show` as this machine's archive answered
    /// them (trimmed to three series).
    const MADISON: &str = "\
linux-source-6.12 | 6.12.118-1~deb12u1 | http://deb.debian.org/debian-security bookworm-security/main all Packages
linux-source-6.12 | 6.12.118-1 | http://deb.debian.org/debian-security trixie-security/main all Packages
linux-source-6.12 | 6.12.117-1 | http://deb.debian.org/debian trixie/main all Packages
linux-source-6.12 | 6.12.117-1 | http://deb.debian.org/debian-security trixie-security/main all Packages
linux-source-6.12 | 6.12.95-1~bpo12+1 | http://deb.debian.org/debian bookworm-backports/main all Packages
linux-source-7.2 | 7.2.13-1 | http://deb.debian.org/debian sid/main all Packages
linux-source-7.2 | 7.2.12-1~bpo13+1 | http://deb.debian.org/debian trixie-backports/main all Packages
linux-source-7.2 | 7.2.9-1~bpo13+1 | http://deb.debian.org/debian trixie-backports/main all Packages
linux-source-7.2 | 7.2.6-1~bpo13+1 | http://deb.debian.org/debian trixie-backports/main all Packages
linux-source-7.3 | 7.3.4-1~bpo13+1 | http://deb.debian.org/debian trixie-backports/main all Packages
linux-source-7.3 | 7.3~rc7-1~exp1 | http://deb.debian.org/debian experimental/main all Packages
";
    const SHOW: &str = "\
Package: linux-source-7.2
Version: 7.2.13-1
Size: 164108840

Package: linux-source-7.2
Version: 7.2.6-1~bpo13+1
Size: 164574380

Package: linux-source-7.3
Version: 7.3~rc7-1~exp1
Size: 166042412
";

    fn r(s: &str) -> DebianRef {
        s.parse().unwrap()
    }

    #[test]
    fn offers_list_each_version_once_with_its_suites_newest_first() {
        let o = offers_of(MADISON, SHOW);
        let rows: Vec<(&str, &str)> = o
            .iter()
            .map(|o| (o.series.as_str(), o.version.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("6.12", "6.12.118-1"),
                ("6.12", "6.12.118-1~deb12u1"),
                ("6.12", "6.12.117-1"),
                ("6.12", "6.12.95-1~bpo12+1"),
                ("7.2", "7.2.13-1"),
                ("7.2", "7.2.12-1~bpo13+1"),
                ("7.2", "7.2.9-1~bpo13+1"),
                ("7.2", "7.2.6-1~bpo13+1"),
                ("7.3", "7.3.4-1~bpo13+1"),
                ("7.3", "7.3~rc7-1~exp1"),
            ]
        );
        let both = o.iter().find(|o| o.version == "6.12.117-1").unwrap();
        assert_eq!(both.suites, ["trixie", "trixie-security"]);
        assert_eq!(
            o.iter().find(|o| o.version == "7.2.13-1").unwrap().size,
            164108840
        );
    }

    #[test]
    fn a_series_means_its_newest_release_and_a_version_its_newest_revision() {
        let o = offers_of(MADISON, SHOW);
        assert_eq!(choose(&o, &r("7.2")).unwrap().version, "7.2.13-1");
        assert_eq!(choose(&o, &r("7.3")).unwrap().version, "7.3.4-1~bpo13+1");
        assert_eq!(choose(&o, &r("7.2.6")).unwrap().version, "7.2.6-1~bpo13+1");
        assert_eq!(choose(&o, &r("6.12.118")).unwrap().version, "6.12.118-1");
        assert_eq!(
            choose(&o, &r("6.12.118-1~deb12u1")).unwrap().version,
            "6.12.118-1~deb12u1"
        );
        assert_eq!(
            choose(&o, &r("7.3~rc7-1~exp1")).unwrap().suites,
            ["experimental"]
        );
    }

    #[test]
    fn a_version_no_suite_has_names_the_nearest() {
        let o = offers_of(MADISON, SHOW);
        let e = choose(&o, &r("7.2.7")).unwrap_err();
        assert!(
            e.contains("the nearest: debian:7.2.6-1~bpo13+1 (trixie-backports) and debian:7.2.9-1~bpo13+1 (trixie-backports)"),
            "{e}"
        );
        let e = choose(&o, &r("7.2.99")).unwrap_err();
        assert!(e.contains("the nearest: debian:7.2.13-1 (sid) ("), "{e}");
        let e = choose(&o, &r("5.4")).unwrap_err();
        assert!(
            e.contains("no linux-source-5.4") && e.contains("6.12, 7.2, 7.3"),
            "{e}"
        );
    }

    #[test]
    fn the_sources_list_reads_every_suite_signed_by_debians_keyring() {
        let a = Archive::new(Path::new("/c")).with_mirror(Some("http://mirror.example/debian/"));
        let list = a.sources_list();
        assert_eq!(list.lines().count(), SUITES.len());
        assert!(list.contains(&format!(
            "deb [signed-by={KEYRING}] http://mirror.example/debian sid main\n"
        )));
        assert!(list.contains(" bullseye-security main\n"));
        assert!(list
            .lines()
            .all(|l| l.starts_with(&format!("deb [signed-by={KEYRING}] "))));
    }
}
