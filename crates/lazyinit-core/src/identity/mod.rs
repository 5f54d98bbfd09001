//! The identity of a cell, in one place: the axes a cell is measured at
//! ([`Axes`]), the kernel it boots ([`KernelId`]) and what it runs on
//! ([`Testbed`]). The plan's cells and kernels, the result row, the
//! report's and the history's cell key and KCIDB's build key are made of
//! these types, so a new axis is one line of [`knobs`] (and the history's
//! migration for its column).
//!
//! Text only at the edges: every type here reads and writes the text the
//! CSV and JSON files have always held (a value that does not parse as a
//! known one is kept as its text, so every committed file reads and writes
//! back unchanged). Where a value's set is closed it is an enum; where it
//! is open (a provider is a seam anyone implements, an instance type is the
//! cloud's) it is a newtype.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::cell::{Arch, Hz, KernelSource, Variant};
use crate::git::GitIdentity;
use crate::provider::KernelProfile;
use crate::size::ByteSize;
use crate::storage::StorageProfile;

pub mod key;
pub mod knobs;
pub use key::{label_order, CellKey, Env, KeyField, KeyValue, FIELDS};
pub use knobs::{KnobValues, Knobs, SpecKnobs};

/// Serde, `From<&str>`/`From<String>` and comparison with text, for a type
/// that parses from any text (`From<&str>`) and writes it back unchanged
/// (`Display`).
#[macro_export]
macro_rules! text_value {
    ($t:ty) => {
        impl $crate::__serde::Serialize for $t {
            fn serialize<S: $crate::__serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> $crate::__serde::Deserialize<'de> for $t {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Ok(<$t>::from(
                    <String as $crate::__serde::Deserialize>::deserialize(d)?.as_str(),
                ))
            }
        }
        impl From<String> for $t {
            fn from(s: String) -> Self {
                <$t>::from(s.as_str())
            }
        }
        impl PartialEq<str> for $t {
            // Compared as the text it writes (an enum has no text to borrow).
            #[allow(clippy::cmp_owned)]
            fn eq(&self, other: &str) -> bool {
                self.to_string() == other
            }
        }
        impl PartialEq<String> for $t {
            // Compared as the text it writes (an enum has no text to borrow).
            #[allow(clippy::cmp_owned)]
            fn eq(&self, other: &String) -> bool {
                self.to_string() == *other
            }
        }
        impl PartialEq<&str> for $t {
            // Compared as the text it writes (an enum has no text to borrow).
            #[allow(clippy::cmp_owned)]
            fn eq(&self, other: &&str) -> bool {
                self.to_string() == *other
            }
        }
    };
}

/// Orders and hashes a type by its text: the order cell keys had when
/// their fields were strings (reports list cells in it).
macro_rules! text_order {
    ($t:ty) => {
        impl PartialOrd for $t {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for $t {
            fn cmp(&self, other: &Self) -> Ordering {
                self.to_string().cmp(&other.to_string())
            }
        }
        impl Hash for $t {
            fn hash<H: Hasher>(&self, h: &mut H) {
                self.to_string().hash(h)
            }
        }
    };
}

/// An open set of names (a newtype over its text): `as_str`, `Display`,
/// `From<&str>` and the text edges of [`text_value!`]. Exported: every
/// crate's text newtype (the history's series and alert ids) is made so.
#[macro_export]
macro_rules! open_name {
    ($t:ident) => {
        impl $t {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
        impl ::std::fmt::Display for $t {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl From<&str> for $t {
            fn from(s: &str) -> Self {
                $t(s.to_string())
            }
        }
        $crate::text_value!($t);
    };
}

/// Which provider ran a cell (`qemu`, `ec2`, ...): open, every
/// implementation of [`crate::provider::Provider`] names itself.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ProviderName(pub String);

open_name!(ProviderName);

/// What ran the guest: `qemu-x86_64`, `qemu-aarch64`, or an instance type
/// (`c6g.2xlarge`): open, the cloud's names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MachineName(pub String);

open_name!(MachineName);

/// How the guest's CPU ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accel {
    /// QEMU with KVM.
    Kvm,
    /// QEMU's emulator.
    Tcg,
    /// QEMU's emulator on its virtual clock (`-icount shift=N,sleep=off`,
    /// the project's QEMU; docs/virtual-clock.md), written
    /// `tcg-icount<N>`: never pooled with the real clock's rows.
    Icount(u8),
    /// An EC2 instance on Nitro.
    Nitro,
    /// A local twin of a cloud machine (the cloud provider's code path
    /// with a QEMU guest playing the instance), written `twin-<accel>`:
    /// never taken, or pooled, for a real instance's row.
    Twin(Box<Accel>),
    /// Any other text (a platform a cloud reports, `none` of a fake).
    Other(String),
}

impl Accel {
    /// How the text marks a twin's accel.
    pub const TWIN_PREFIX: &'static str = "twin-";

    pub fn is_twin(&self) -> bool {
        matches!(self, Accel::Twin(_))
    }

    /// How the text marks the virtual clock: `tcg-icount<shift>`.
    pub const ICOUNT_PREFIX: &'static str = "tcg-icount";

    /// Whether the guest ran on QEMU's virtual clock (a twin's too).
    pub fn is_virtual_clock(&self) -> bool {
        match self {
            Accel::Icount(_) => true,
            Accel::Twin(a) => a.is_virtual_clock(),
            _ => false,
        }
    }

    /// `real` or `virtual` (the clock the row's figures are in).
    pub fn clock(&self) -> &'static str {
        if self.is_virtual_clock() {
            "virtual"
        } else {
            "real"
        }
    }
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Accel::Kvm => f.write_str("kvm"),
            Accel::Tcg => f.write_str("tcg"),
            Accel::Icount(shift) => write!(f, "{}{shift}", Accel::ICOUNT_PREFIX),
            Accel::Nitro => f.write_str("nitro"),
            Accel::Twin(a) => write!(f, "{}{a}", Accel::TWIN_PREFIX),
            Accel::Other(s) => f.write_str(s),
        }
    }
}

impl From<&str> for Accel {
    fn from(s: &str) -> Self {
        match s {
            "kvm" => Accel::Kvm,
            "tcg" => Accel::Tcg,
            "nitro" => Accel::Nitro,
            _ => match s.strip_prefix(Accel::TWIN_PREFIX) {
                Some(inner) => Accel::Twin(Box::new(Accel::from(inner))),
                None => match s
                    .strip_prefix(Accel::ICOUNT_PREFIX)
                    .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|n| n.parse::<u8>().ok())
                    .filter(|n| n.to_string().len() == s.len() - Accel::ICOUNT_PREFIX.len())
                {
                    Some(shift) => Accel::Icount(shift),
                    None => Accel::Other(s.to_string()),
                },
            },
        }
    }
}
text_value!(Accel);
text_order!(Accel);

/// The kernel source a row names: a [`KernelSource`] the harness builds,
/// a git tree's state ([`GitIdentity`]: `git:<commit>`, a bisect's step,
/// or `git:<commit>+<diff>`), or any other text (kept as it is, `git:main`
/// included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceId {
    Source(KernelSource),
    Git(GitIdentity),
    Other(String),
}

impl SourceId {
    /// The source to build, when the text names one.
    pub fn kernel_source(&self) -> Option<&KernelSource> {
        match self {
            SourceId::Source(s) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceId::Source(s) => s.fmt(f),
            SourceId::Git(g) => g.fmt(f),
            SourceId::Other(s) => f.write_str(s),
        }
    }
}

impl From<&str> for SourceId {
    fn from(s: &str) -> Self {
        if s.starts_with(GitIdentity::PREFIX) {
            return match s.parse() {
                Ok(g) => SourceId::Git(g),
                Err(_) => SourceId::Other(s.to_string()),
            };
        }
        // Only the canonical text is a source: `debian` (an alias of
        // debian-6.1) stays the text it was.
        match KernelSource::from_str(s) {
            Ok(k) if k.to_string() == s => SourceId::Source(k),
            _ => SourceId::Other(s.to_string()),
        }
    }
}

impl From<KernelSource> for SourceId {
    fn from(s: KernelSource) -> Self {
        SourceId::from(s.to_string().as_str())
    }
}
text_value!(SourceId);
text_order!(SourceId);

/// The storage profile a row names: a [`StorageProfile`], or any other
/// text (kept as it is; empty in rows that had none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageId {
    Profile(StorageProfile),
    Other(String),
}

impl StorageId {
    /// `none`, or no profile at all (empty).
    pub fn is_none(&self) -> bool {
        matches!(self, StorageId::Profile(StorageProfile::None))
            || matches!(self, StorageId::Other(s) if s.is_empty())
    }
}

impl fmt::Display for StorageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageId::Profile(p) => p.fmt(f),
            StorageId::Other(s) => f.write_str(s),
        }
    }
}

impl From<&str> for StorageId {
    fn from(s: &str) -> Self {
        match StorageProfile::from_str(s) {
            Ok(p) if p.to_string() == s => StorageId::Profile(p),
            _ => StorageId::Other(s.to_string()),
        }
    }
}

impl From<StorageProfile> for StorageId {
    fn from(p: StorageProfile) -> Self {
        StorageId::Profile(p)
    }
}
text_value!(StorageId);
text_order!(StorageId);

/// The axes a cell is measured at: what its kernel is and what the guest
/// protocol does. `S` is how the kernel source is known: a
/// [`KernelSource`] in a plan, a [`SourceId`] in a row.
///
/// Field order is the plan's JSON order (a cell's fields, flattened).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Axes<S = KernelSource> {
    pub arch: Arch,
    pub source: S,
    pub hz: Hz,
    pub variant: Variant,
    pub volume: ByteSize,
    pub wait_mult: u32,
    /// The axes added since, each a line of `knobs.rs`.
    #[serde(flatten)]
    pub knobs: Knobs,
}

/// A planned cell's axes.
pub type CellAxes = Axes<KernelSource>;
/// A row's axes: the source as the CSV names it.
pub type RowAxes = Axes<SourceId>;

impl<S> Axes<S> {
    /// Axes at `volume` with every axis that has a default at it (the
    /// wait multiplier): what a test or a fixed matrix builds. A new axis
    /// with a default gets it here, so none of those callers changes;
    /// the plan and the CSV row, which must carry it, list every field.
    pub fn new(arch: Arch, source: S, hz: Hz, variant: Variant, volume: ByteSize) -> Self {
        Axes {
            arch,
            source,
            hz,
            variant,
            volume,
            wait_mult: crate::cell::DEFAULT_WAIT_MULT,
            knobs: Knobs::default(),
        }
    }

    /// The same axes at wait multiplier `w`.
    pub fn with_wait_mult(self, w: u32) -> Self {
        Axes {
            wait_mult: w,
            ..self
        }
    }
}

impl<S: Clone> Axes<S> {
    /// The kernel these axes boot, built with `profile`.
    pub fn kernel<P>(&self, profile: P) -> KernelId<S, P> {
        KernelId {
            arch: self.arch,
            source: self.source.clone(),
            hz: self.hz,
            variant: self.variant,
            profile,
        }
    }
}

impl From<CellAxes> for RowAxes {
    fn from(a: CellAxes) -> RowAxes {
        Axes {
            arch: a.arch,
            source: a.source.into(),
            hz: a.hz,
            variant: a.variant,
            volume: a.volume,
            wait_mult: a.wait_mult,
            knobs: a.knobs,
        }
    }
}

/// One kernel build: the arch, source, HZ and variant of the cells that
/// boot it, and the configuration (`profile`) its provider's machines
/// need. `P` is `Option<KernelProfile>` where it may be unknown (rows
/// written before the `kernel_profile` column).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KernelId<S = KernelSource, P = KernelProfile> {
    pub arch: Arch,
    pub source: S,
    pub hz: Hz,
    pub variant: Variant,
    pub profile: P,
}

/// The kernel a row ran.
pub type RowKernel = KernelId<SourceId, Option<KernelProfile>>;

impl KernelId {
    /// This kernel as a row records it.
    pub fn as_row(&self) -> RowKernel {
        KernelId {
            arch: self.arch,
            source: self.source.clone().into(),
            hz: self.hz,
            variant: self.variant,
            profile: Some(self.profile),
        }
    }
}

/// What a cell ran on: the provider, its machine and accel, and what a
/// zeroing costs on the volume.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Testbed {
    pub provider: ProviderName,
    pub machine: MachineName,
    pub accel: Accel,
    pub storage: StorageId,
}

impl Default for Accel {
    fn default() -> Self {
        Accel::Other(String::new())
    }
}

impl Default for StorageId {
    fn default() -> Self {
        StorageId::Profile(StorageProfile::None)
    }
}

/// What a cell, a series or a bisection aggregates: one number of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Guest clock, mount to thread exit (seconds).
    #[default]
    LazyinitS,
    /// Trace, first to last group (milliseconds per group).
    MsPerGroup,
    /// `lazyinit_s - first_group_s` (seconds): the first group to the
    /// thread's exit, the part the random start delay does not move.
    FromFirstGroupS,
}

impl Metric {
    pub fn of(self, row: &crate::results::ResultRow) -> Option<f64> {
        match self {
            Metric::LazyinitS => row.measured.lazyinit_s,
            Metric::MsPerGroup => row.measured.ms_per_group,
            Metric::FromFirstGroupS => Some(row.measured.lazyinit_s? - row.measured.first_group_s?),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Metric::LazyinitS => "lazyinit_s",
            Metric::MsPerGroup => "ms_per_group",
            Metric::FromFirstGroupS => "from_first_group_s",
        }
    }
    pub fn unit(self) -> &'static str {
        match self {
            Metric::LazyinitS | Metric::FromFirstGroupS => "s",
            Metric::MsPerGroup => "ms",
        }
    }
    /// What one tick more of sleep L adds to the metric on a volume of
    /// `groups` groups at `hz` (a cycle is L + 1 ticks, docs/design.md §2):
    /// a tick's milliseconds a group, or a tick's seconds for each group.
    pub fn per_tick(self, hz: crate::Hz, groups: u64) -> f64 {
        match self {
            Metric::MsPerGroup => 1000.0 * hz.tick_s(),
            Metric::LazyinitS | Metric::FromFirstGroupS => groups as f64 * hz.tick_s(),
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lazyinit_s" => Ok(Metric::LazyinitS),
            "ms_per_group" => Ok(Metric::MsPerGroup),
            "from_first_group_s" => Ok(Metric::FromFirstGroupS),
            _ => Err(format!(
                "unknown metric `{s}`: use lazyinit_s, ms_per_group or from_first_group_s"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The virtual clock's accel reads back as itself and is never the
    /// real clock's; near misses stay other text.
    #[test]
    fn the_virtual_clock_is_its_own_accel() {
        for (text, want) in [
            ("tcg-icount0", Some(Accel::Icount(0))),
            ("tcg-icount10", Some(Accel::Icount(10))),
            (
                "twin-tcg-icount3",
                Some(Accel::Twin(Box::new(Accel::Icount(3)))),
            ),
            ("tcg-icount", None),
            ("tcg-icount01", None),
            ("tcg-icount+1", None),
            ("tcg-icount300", None),
        ] {
            let a = Accel::from(text);
            match want {
                Some(w) => {
                    assert_eq!(a, w, "{text}");
                    assert_eq!(a.to_string(), text);
                    assert!(a.is_virtual_clock() && a.clock() == "virtual");
                }
                None => assert_eq!(a, Accel::Other(text.into()), "{text}"),
            }
        }
        assert_eq!(Accel::Tcg.clock(), "real");
        assert_ne!(Accel::from("tcg-icount0"), Accel::Tcg);
    }

    /// Every text reads and writes back unchanged; known ones are typed.
    #[test]
    fn text_round_trips_and_known_values_are_typed() {
        for s in [
            "kvm", "tcg", "nitro", "twin-tcg", "twin-kvm", "none", "", "xen",
        ] {
            assert_eq!(Accel::from(s).to_string(), s);
        }
        assert_eq!(Accel::from("twin-tcg"), Accel::Twin(Box::new(Accel::Tcg)));
        assert!(Accel::from("twin-tcg").is_twin());
        assert!(!Accel::from("tcg").is_twin());
        assert_eq!(Accel::from("xen"), Accel::Other("xen".into()));
        for s in [
            "debian-6.1",
            "debian-5.10",
            "5.10.79",
            "/work/distro/linux-source-6.1",
            "git:116c914995f624ae685e0b59d43b1b39fb456e70",
            "debian",
            " debian-6.1",
            "",
        ] {
            assert_eq!(SourceId::from(s).to_string(), s);
        }
        assert_eq!(
            SourceId::from("debian-6.1"),
            SourceId::Source(KernelSource::Debian61)
        );
        // A git tree's state is typed (its one reader: GitIdentity's), with
        // or without its changes; `git:` text that is not one is kept.
        let full = "116c914995f624ae685e0b59d43b1b39fb456e70";
        for text in [
            format!("git:{full}"),
            format!("git:{full}+0123456789abcdef"),
        ] {
            assert_eq!(
                SourceId::from(text.as_str()),
                SourceId::Git(text.parse().unwrap())
            );
            assert_eq!(SourceId::from(text.as_str()).to_string(), text);
        }
        for text in ["git:abc", "git:main", "git:a/b", "git:"] {
            assert_eq!(SourceId::from(text), SourceId::Other(text.into()));
            assert_eq!(SourceId::from(text).to_string(), text);
        }
        assert_eq!(SourceId::from("debian"), SourceId::Other("debian".into()));
        for s in [
            "ebs",
            "ebs:3.8ms",
            "none",
            "latency:2.2ms",
            "",
            "latency:2.20ms",
        ] {
            assert_eq!(StorageId::from(s).to_string(), s);
        }
        assert_eq!(
            StorageId::from("ebs"),
            StorageId::Profile(StorageProfile::EBS)
        );
        assert!(StorageId::from("").is_none() && StorageId::from("none").is_none());
        assert!(!StorageId::from("ebs").is_none());
    }

    /// Keys sort as their text did (reports list cells in that order).
    #[test]
    fn typed_values_sort_by_their_text() {
        let mut a: Vec<SourceId> = ["debian-6.1", "/src/linux", "5.10.79", "debian-5.10"]
            .map(SourceId::from)
            .to_vec();
        a.sort();
        let text: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        assert_eq!(text, ["/src/linux", "5.10.79", "debian-5.10", "debian-6.1"]);
        let (nitro, tcg, twin) = (Accel::Nitro, Accel::Tcg, Accel::from("twin-tcg"));
        assert!(nitro < tcg && tcg < twin);
        let (ebs, ebs38) = (StorageId::from("ebs"), StorageId::from("ebs:3.8ms"));
        assert!(ebs < ebs38);
    }

    #[test]
    fn a_cells_axes_name_its_kernel() {
        let axes = CellAxes::new(
            Arch::Arm64,
            KernelSource::Debian510,
            Hz::new(100).unwrap(),
            Variant::Fix,
            ByteSize(1 << 40),
        );
        let k = axes.kernel(KernelProfile::Cloud);
        assert_eq!(
            (k.arch, k.hz, k.variant),
            (Arch::Arm64, axes.hz, Variant::Fix)
        );
        assert_eq!(k.profile, KernelProfile::Cloud);
        let row: RowAxes = axes.into();
        assert_eq!(row.source, SourceId::Source(KernelSource::Debian510));
    }
}
