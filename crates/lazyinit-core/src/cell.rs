//! One cell of the experiment matrix and the axes it is made of.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::identity::{CellAxes, ProviderName};
#[cfg(test)]
use crate::size::ByteSize;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AxisError {
    #[error("unknown arch `{0}`: use x86_64 or arm64")]
    Arch(String),
    #[error("unsupported HZ `{0}`: use 100, 250, 300 or 1000")]
    Hz(String),
    #[error("unknown variant `{0}`: use fix or nofix")]
    Variant(String),
    #[error("unknown kernel source `{0}`: use debian:X.Y (the newest of a Debian series, e.g. debian:7.2), debian:X.Y.Z or an exact package version (debian:7.2.13-1; `lazyinit-bench kernel sources` lists them), debian-6.1, debian-6.12, debian-5.10, a version like 5.10.79, or a path to a tree or tarball")]
    Source(String),
}

macro_rules! string_serde {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

/// Guest architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arch {
    X86_64,
    Arm64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Arm64];

    /// `ARCH=` for the kernel's make.
    pub fn kernel_arch(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86",
            Arch::Arm64 => "arm64",
        }
    }
    /// Debian's name for the architecture (dpkg, apt).
    pub fn debian_arch(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }
    /// GNU triplet, used for the cross-compiler prefix and library paths.
    pub fn gnu_triplet(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu",
            Arch::Arm64 => "aarch64-linux-gnu",
        }
    }
    /// `uname -m` inside the guest.
    pub fn uname_machine(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }
    pub fn qemu_binary(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-system-x86_64",
            Arch::Arm64 => "qemu-system-aarch64",
        }
    }
    /// Path of the bootable image inside a kernel build tree.
    pub fn image_path(self) -> &'static str {
        match self {
            Arch::X86_64 => "arch/x86/boot/bzImage",
            Arch::Arm64 => "arch/arm64/boot/Image",
        }
    }
    /// The architecture this program runs on, if it is one we know.
    pub fn host() -> Option<Arch> {
        match std::env::consts::ARCH {
            "x86_64" => Some(Arch::X86_64),
            "aarch64" => Some(Arch::Arm64),
            _ => None,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "arm64",
        })
    }
}

impl FromStr for Arch {
    type Err = AxisError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "x86_64" | "x86-64" | "amd64" | "x64" => Ok(Arch::X86_64),
            "arm64" | "aarch64" => Ok(Arch::Arm64),
            _ => Err(AxisError::Arch(s.to_string())),
        }
    }
}
string_serde!(Arch);

/// The kernel's timer frequency, `CONFIG_HZ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hz(u32);

impl Hz {
    pub const SUPPORTED: [u32; 4] = [100, 250, 300, 1000];

    pub fn new(hz: u32) -> Result<Hz, AxisError> {
        if Self::SUPPORTED.contains(&hz) {
            Ok(Hz(hz))
        } else {
            Err(AxisError::Hz(hz.to_string()))
        }
    }
    pub fn get(self) -> u32 {
        self.0
    }
    /// One tick in seconds.
    pub fn tick_s(self) -> f64 {
        1.0 / self.0 as f64
    }
}

impl fmt::Display for Hz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for Hz {
    type Err = AxisError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let n: u32 = s.trim().parse().map_err(|_| AxisError::Hz(s.to_string()))?;
        Hz::new(n)
    }
}

impl Serialize for Hz {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.0)
    }
}
impl<'de> Deserialize<'de> for Hz {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u32),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Hz::new(n).map_err(serde::de::Error::custom),
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Whether the kernel carries the ext4 lazy-init scheduling fix (39fec6889d15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Variant {
    Fix,
    NoFix,
}

impl Variant {
    pub const ALL: [Variant; 2] = [Variant::NoFix, Variant::Fix];
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Variant::Fix => "fix",
            Variant::NoFix => "nofix",
        })
    }
}

impl FromStr for Variant {
    type Err = AxisError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fix" | "fixed" | "with-fix" => Ok(Variant::Fix),
            "nofix" | "no-fix" | "unfixed" | "without-fix" => Ok(Variant::NoFix),
            _ => Err(AxisError::Variant(s.to_string())),
        }
    }
}
string_serde!(Variant);

/// Where the kernel source comes from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum KernelSource {
    /// Debian's `linux-source-6.1` package.
    #[default]
    Debian61,
    /// Debian's `linux-source-6.12` package.
    Debian612,
    /// Debian 11's `linux-source-5.10` package (bullseye-security): the
    /// report's own series.
    Debian510,
    /// A `linux-source-X.Y` package of Debian's archive (`debian:7.2`,
    /// `debian:7.2.6`, `debian:7.2.13-1`): see [`DebianRef`].
    Debian(DebianRef),
    /// An upstream release by version, e.g. `5.10.79`, fetched from a mirror.
    Version(String),
    /// A user-given kernel tree or tarball.
    Path(PathBuf),
}

impl fmt::Display for KernelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelSource::Debian61 => f.write_str("debian-6.1"),
            KernelSource::Debian612 => f.write_str("debian-6.12"),
            KernelSource::Debian510 => f.write_str("debian-5.10"),
            KernelSource::Debian(d) => write!(f, "debian:{d}"),
            KernelSource::Version(v) => f.write_str(v),
            KernelSource::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A kernel of Debian's archive, as a spec names it after `debian:`: a
/// series (`7.2`: the newest version of `linux-source-7.2` in the suites
/// the harness knows), an upstream version (`7.2.6`: the newest Debian
/// revision of it), or an exact package version (`7.2.13-1`,
/// `7.2.12-1~bpo13+1`, `7.3~rc7-1~exp1`). A run pins the first two to the
/// third before anything is planned, so its cells, rows and history name
/// the exact package that ran.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DebianRef(String);

impl DebianRef {
    /// `X.Y`: the package is `linux-source-X.Y`.
    pub fn series(&self) -> &str {
        let v = self.upstream();
        let end = v
            .char_indices()
            .filter(|&(_, c)| c == '.' || c == '~')
            .nth(1)
            .map_or(v.len(), |(i, _)| i);
        let two = &v[..end];
        two.split('~').next().unwrap_or(two)
    }
    /// `linux-source-X.Y`.
    pub fn package(&self) -> String {
        format!("linux-source-{}", self.series())
    }
    /// The upstream part (`7.2.13`, `7.3~rc7`, or the series itself).
    pub fn upstream(&self) -> &str {
        self.0.split('-').next().unwrap_or(&self.0)
    }
    /// An exact package version (it has a Debian revision).
    pub fn exact(&self) -> Option<&str> {
        self.0.contains('-').then_some(self.0.as_str())
    }
    /// Whether it names a whole series (`7.2`).
    pub fn is_series(&self) -> bool {
        self.exact().is_none() && self.0 == self.series()
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DebianRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for DebianRef {
    type Err = String;
    /// `X.Y`, `X.Y.Z`, `X.Y~rcN`, each optionally `-REVISION` (Debian's
    /// characters: letters, digits, `.`, `+`, `~`).
    fn from_str(s: &str) -> Result<Self, String> {
        let (up, rev) = match s.split_once('-') {
            Some((u, r)) => (u, Some(r)),
            None => (s, None),
        };
        let (nums, rc) = match up.split_once('~') {
            Some((n, rc)) => (n, Some(rc)),
            None => (up, None),
        };
        let parts: Vec<&str> = nums.split('.').collect();
        let numeric = (2..=3).contains(&parts.len())
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit()));
        let rc_ok = rc.is_none_or(|r| {
            r.strip_prefix("rc")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
        let rev_ok = rev.is_none_or(|r| {
            !r.is_empty()
                && r.len() <= 40
                && r.bytes().next().is_some_and(|b| b.is_ascii_digit())
                && r.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'~'))
        });
        match numeric && rc_ok && rev_ok {
            true => Ok(DebianRef(s.to_string())),
            false => Err(format!("`{s}` is not a Debian kernel version")),
        }
    }
}

fn is_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

impl FromStr for KernelSource {
    type Err = AxisError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        match t {
            "debian-6.1" | "debian" => Ok(KernelSource::Debian61),
            "debian-6.12" => Ok(KernelSource::Debian612),
            "debian-5.10" => Ok(KernelSource::Debian510),
            _ if t.starts_with("debian:") => t["debian:".len()..]
                .parse()
                .map(KernelSource::Debian)
                .map_err(|_| AxisError::Source(s.to_string())),
            _ if is_version(t) => Ok(KernelSource::Version(t.to_string())),
            _ if t.contains('/') || t.ends_with(".tar.xz") || t.ends_with(".tar.gz") => {
                Ok(KernelSource::Path(PathBuf::from(t)))
            }
            _ => Err(AxisError::Source(s.to_string())),
        }
    }
}
string_serde!(KernelSource);

/// Default `s_li_wait_mult` (mount option `init_itable=n`).
pub const DEFAULT_WAIT_MULT: u32 = 10;

/// One cell of the matrix: everything that determines one measurement.
/// Its axes are [`crate::identity::Axes`] (read through `Deref`: `cell.arch`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cell {
    pub provider: ProviderName,
    #[serde(flatten)]
    pub axes: CellAxes,
    pub repetition: u32,
}

impl std::ops::Deref for Cell {
    type Target = CellAxes;
    fn deref(&self) -> &CellAxes {
        &self.axes
    }
}

/// The longest cell id a results file may name (a file name is at most
/// 255 bytes; the harness's ids are far shorter).
pub const MAX_CELL_ID: usize = 200;

/// Why `id` cannot be a cell id, if it cannot: a cell id names a folder
/// beside its results.csv, so it is what [`Cell::id`] makes (ASCII
/// letters, digits, `.`, `-` and `_`, at most [`MAX_CELL_ID`]) and does
/// not start with `.` (never `.`, `..` or a hidden name). Checked on
/// every read of a results file (`results::read_rows_from`), so no row
/// makes a path outside its run's folder.
pub fn check_cell_id(id: &str) -> Result<(), String> {
    const MAY: &str =
        "a cell id is 1 to 200 ASCII letters, digits, `.`, `-` and `_`, not starting with `.`";
    let ok = !id.is_empty()
        && id.len() <= MAX_CELL_ID
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    match ok {
        true => Ok(()),
        false => Err(MAY.into()),
    }
}

impl Cell {
    /// A short, file-name-safe identifier, unique within a run.
    pub fn id(&self) -> String {
        let safe = |s: &str| -> String {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        };
        // A path names its tree by its last component and a hash of the
        // whole: the id names the cell's folder, which holds UNIX sockets
        // (at most 107 bytes), so a deep path must not make it long.
        let src = match &self.source {
            KernelSource::Path(p) => {
                let base = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let base: String = safe(&base).chars().take(24).collect();
                let hash = crate::paths::sha256_hex(p.display().to_string());
                format!("{}-{}", base.trim_matches('_'), &hash[..8])
            }
            s => safe(&s.to_string()),
        };
        let src = src.trim_matches('_');
        let mut id = format!(
            "{}-{}-{}-hz{}-{}-{}",
            self.provider, self.arch, src, self.hz, self.variant, self.volume
        );
        if self.wait_mult != DEFAULT_WAIT_MULT {
            id.push_str(&format!("-w{}", self.wait_mult));
        }
        // The fields after the first table, from the key's table: each
        // off its default by its label word (`-inode128`), so two values
        // of a knob are two cells; none at the defaults, so every id of
        // a cell without knobs is what it was.
        let key = self.key();
        for f in key.off_default() {
            id.push('-');
            id.push_str(&safe(&(f.word)(&key)));
        }
        id.push_str(&format!("-r{}", self.repetition));
        id
    }

    /// The cell as a key of the identity's field table: its provider and
    /// axes (what it ran on beyond its provider is the run's, not the
    /// cell's).
    pub fn key(&self) -> crate::identity::CellKey {
        crate::identity::CellKey {
            testbed: crate::identity::Testbed {
                provider: self.provider.clone(),
                ..Default::default()
            },
            axes: self.axes.clone().into(),
            estimated: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell's id names each knob off its default, from the key's table:
    /// two values of a knob are two cells (two folders, two volumes);
    /// at the defaults the id is the one every stored cell has.
    #[test]
    fn two_values_of_a_knob_are_two_cell_ids() {
        let axes = CellAxes::new(
            Arch::X86_64,
            KernelSource::Debian61,
            Hz::new(250).unwrap(),
            Variant::Fix,
            "8GiB".parse().unwrap(),
        );
        let plain = Cell {
            provider: "qemu".into(),
            axes,
            repetition: 1,
        };
        assert_eq!(plain.id(), "qemu-x86_64-debian-6.1-hz250-fix-8GiB-r1");
        let mut small = plain.clone();
        small.axes.knobs.inode_size = crate::identity::knobs::InodeSize(128);
        assert_eq!(
            small.id(),
            "qemu-x86_64-debian-6.1-hz250-fix-8GiB-inode128-r1"
        );
        let mut w3 = small.clone();
        w3.axes.wait_mult = 3;
        assert_eq!(
            w3.id(),
            "qemu-x86_64-debian-6.1-hz250-fix-8GiB-w3-inode128-r1"
        );
        check_cell_id(&w3.id()).unwrap();
    }

    #[test]
    fn axes_parse_and_print() {
        assert_eq!("aarch64".parse::<Arch>().unwrap(), Arch::Arm64);
        assert_eq!(Arch::X86_64.to_string(), "x86_64");
        assert!("riscv".parse::<Arch>().is_err());
        assert_eq!("250".parse::<Hz>().unwrap().get(), 250);
        assert!("200".parse::<Hz>().is_err());
        assert_eq!("no-fix".parse::<Variant>().unwrap(), Variant::NoFix);
        assert!("maybe".parse::<Variant>().is_err());
    }

    #[test]
    fn sources_parse() {
        assert_eq!(
            "debian-6.12".parse::<KernelSource>().unwrap(),
            KernelSource::Debian612
        );
        assert_eq!(
            "debian-5.10".parse::<KernelSource>().unwrap(),
            KernelSource::Debian510
        );
        assert_eq!(KernelSource::Debian510.to_string(), "debian-5.10");
        assert_eq!(
            "5.10.79".parse::<KernelSource>().unwrap(),
            KernelSource::Version("5.10.79".into())
        );
        assert_eq!(
            "/src/linux".parse::<KernelSource>().unwrap(),
            KernelSource::Path("/src/linux".into())
        );
        assert!("linus".parse::<KernelSource>().is_err());
    }

    /// `debian:` names a series, an upstream version or an exact package
    /// version, and says which package holds it; anything else is refused.
    #[test]
    fn debian_archive_sources_parse() {
        let d = |s: &str| match s.parse::<KernelSource>().unwrap() {
            KernelSource::Debian(d) => d,
            other => panic!("{other:?}"),
        };
        for (text, series, upstream, exact, is_series) in [
            ("debian:7.2", "7.2", "7.2", None, true),
            ("debian:7.2.6", "7.2", "7.2.6", None, false),
            ("debian:7.2.13-1", "7.2", "7.2.13", Some("7.2.13-1"), false),
            (
                "debian:7.2.12-1~bpo13+1",
                "7.2",
                "7.2.12",
                Some("7.2.12-1~bpo13+1"),
                false,
            ),
            (
                "debian:7.3~rc7-1~exp1",
                "7.3",
                "7.3~rc7",
                Some("7.3~rc7-1~exp1"),
                false,
            ),
            (
                "debian:6.12.118-1~deb12u1",
                "6.12",
                "6.12.118",
                Some("6.12.118-1~deb12u1"),
                false,
            ),
        ] {
            let r = d(text);
            assert_eq!(
                (r.series(), r.upstream(), r.exact(), r.is_series()),
                (series, upstream, exact, is_series),
                "{text}"
            );
            assert_eq!(r.package(), format!("linux-source-{series}"));
            assert_eq!(KernelSource::Debian(r).to_string(), text);
        }
        for bad in [
            "debian:",
            "debian:7",
            "debian:7.x",
            "debian:7.2.",
            "debian:7.2-",
            "debian:7.2-a",
            "debian:7.2;rm",
            "debian:../7.2",
            "debian:7.2.1.1",
            "debian:7.2~beta1",
        ] {
            assert!(bad.parse::<KernelSource>().is_err(), "{bad}");
        }
        // The old names keep their meaning.
        assert_eq!(
            "debian-6.1".parse::<KernelSource>().unwrap(),
            KernelSource::Debian61
        );
    }

    #[test]
    fn cell_id_is_file_name_safe() {
        let c = Cell {
            provider: "qemu".into(),
            axes: CellAxes::new(
                Arch::Arm64,
                KernelSource::Path("/tmp/linux 5.10".into()),
                Hz::new(100).unwrap(),
                Variant::Fix,
                "2TiB".parse::<ByteSize>().unwrap(),
            ),
            repetition: 1,
        };
        let id = c.id();
        let hash = &crate::paths::sha256_hex("/tmp/linux 5.10")[..8];
        assert_eq!(
            id,
            format!("qemu-arm64-linux_5.10-{hash}-hz100-fix-2TiB-r1")
        );
        assert!(!id.contains('/'));
        check_cell_id(&id).unwrap();
        // A deep path does not make a long id.
        let mut deep = c.clone();
        deep.axes.source =
            KernelSource::Path(format!("/{}/linux", "very-long-directory".repeat(8)).into());
        assert!(deep.id().len() < 60, "{}", deep.id());
        assert_ne!(deep.id(), c.id());
        let mut d = c;
        d.axes.source = KernelSource::Debian510;
        assert_eq!(d.id(), "qemu-arm64-debian-5.10-hz100-fix-2TiB-r1");
    }
}
