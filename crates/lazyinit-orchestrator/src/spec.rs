//! Experiment specs (TOML): the axes of the matrix and per-provider settings.
//!
//! A spec is generic over its `[provider-config]` table, `C`: the
//! orchestrator never reads it, and the CLI, which knows the providers,
//! types it (so the spec's hash, which names its results folder, covers
//! each provider's settings with their defaults filled in).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use lazyinit_core::identity::SpecKnobs;
use lazyinit_core::{Arch, ByteSize, Hz, KernelSource, Variant};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// HZ values: one list for every arch, or a list per arch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum HzAxis {
    All(Vec<Hz>),
    PerArch(BTreeMap<Arch, Vec<Hz>>),
}

// By hand, so a bad value is named (an untagged enum only says "no variant matched").
impl<'de> Deserialize<'de> for HzAxis {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            All(Vec<u32>),
            PerArch(BTreeMap<String, Vec<u32>>),
        }
        let hz = |v: Vec<u32>| {
            v.into_iter()
                .map(|n| Hz::new(n).map_err(D::Error::custom))
                .collect::<Result<Vec<_>, _>>()
        };
        match Raw::deserialize(d).map_err(|_| D::Error::custom("hz: write a list like [100, 250] or a table like { x86_64 = [250], arm64 = [100] }"))? {
            Raw::All(v) => Ok(HzAxis::All(hz(v)?)),
            Raw::PerArch(m) => {
                let mut out = BTreeMap::new();
                for (k, v) in m {
                    out.insert(k.parse::<Arch>().map_err(D::Error::custom)?, hz(v)?);
                }
                Ok(HzAxis::PerArch(out))
            }
        }
    }
}

impl HzAxis {
    pub fn for_arch(&self, arch: Arch) -> Vec<Hz> {
        match self {
            HzAxis::All(v) => v.clone(),
            HzAxis::PerArch(m) => m.get(&arch).cloned().unwrap_or_default(),
        }
    }
}

/// How many cells may run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Concurrency {
    Fixed(u32),
    Named(ConcurrencyName),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConcurrencyName {
    Auto,
}

impl Default for Concurrency {
    fn default() -> Self {
        Concurrency::Named(ConcurrencyName::Auto)
    }
}

/// The `[provider-config]` table of a spec, as whoever knows the
/// providers types it: one optional table per provider, and the provider
/// of a spec that names none.
pub trait ProviderConfigs:
    Serialize + DeserializeOwned + Default + Clone + std::fmt::Debug + PartialEq + Send + Sync
{
    fn default_provider() -> String;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
#[serde(bound = "C: ProviderConfigs")]
pub struct Spec<C> {
    /// Names the results folder: `results/<name>-<hash of the spec>`.
    pub name: String,
    #[serde(default = "C::default_provider")]
    pub provider: String,
    pub arches: Vec<Arch>,
    #[serde(default = "default_sources")]
    pub sources: Vec<KernelSource>,
    /// A kernel config file as the base of every kernel (a distro's
    /// `/boot/config-*`): the harness sets only what its guest needs on top
    /// (kernels/README.md, "A user's own config"). Default: the minimal
    /// config from kernels/fragments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_config: Option<std::path::PathBuf>,
    pub hz: HzAxis,
    #[serde(default = "default_variants")]
    pub variants: Vec<Variant>,
    pub sizes: Vec<ByteSize>,
    #[serde(default = "one")]
    pub repetitions: u32,
    #[serde(default = "default_wait_mult")]
    pub wait_mult: u32,
    /// `[knobs]`: the axes added since the first table, each at its
    /// default unless set here (`identity/knobs.rs`), range-checked when
    /// the spec is read. Left out of the spec's text when it sets none.
    #[serde(
        default,
        skip_serializing_if = "SpecKnobs::is_empty",
        deserialize_with = "knobs_table"
    )]
    pub knobs: SpecKnobs,
    /// The volume's zeroing latency: `ebs` (default: what EBS gave in the
    /// 2021 report, calibrated on each guest; on EC2 the real thing),
    /// `ebs:D` (a z1 target), or for qemu `latency:D`, `none`, `unsafe`,
    /// `iops:N` (docs/storage-profiles.md). Parsed when the spec is read.
    #[serde(default = "default_profile")]
    pub storage_profile: lazyinit_core::StorageProfile,
    #[serde(default)]
    pub concurrency: Concurrency,
    /// Host polling of the ext4lazyinit thread (the duration itself comes
    /// from the guest's trace clock).
    #[serde(default = "default_poll", with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Extra mkfs.ext4 arguments; none by default, as in the report.
    #[serde(default)]
    pub mkfs_args: Vec<String>,
    /// Early stop: trace the first N groups, and once the cycle has locked
    /// record a predicted `lazyinit_s` with its 95% interval instead of
    /// waiting for the thread's exit (docs/estimates.md). Absent: every
    /// cell runs to the end. Left out of the spec's text when absent, so
    /// the hash (and results folder) of every spec without it is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_after: Option<u64>,
    /// A history database every row is imported into as it is written
    /// (`sqlite:PATH` or `postgres://...`; docs/history.md). Where rows go,
    /// not what runs: left out of the spec's text and so of its hash.
    #[serde(default, skip_serializing)]
    pub history: Option<String>,
    /// Per-provider settings, `[provider-config.<provider>]`, each read by
    /// its provider (the CLI's `providers` module).
    #[serde(default)]
    pub provider_config: C,
}

fn default_sources() -> Vec<KernelSource> {
    vec![KernelSource::Debian61]
}
fn default_variants() -> Vec<Variant> {
    Variant::ALL.to_vec()
}
fn one() -> u32 {
    1
}
/// `[knobs]` is read as a table first: serde reads a list into a struct
/// field by field, so `knobs = [512]` was taken (and dropped) by a struct
/// of no knobs (issue 52).
fn knobs_table<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SpecKnobs, D::Error> {
    use serde::de::Error;
    let table = toml::Table::deserialize(d).map_err(|_| D::Error::custom(knobs_not_a_table()))?;
    toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| {
            D::Error::custom(lazyinit_core::exit::one_line_text(e.message()))
        })
}

/// What to write instead of a `knobs` that is not a table.
fn knobs_not_a_table() -> String {
    let names: Vec<String> = lazyinit_core::identity::Knobs::COLUMNS
        .iter()
        .map(|(n, _)| format!("`{}`", n.replace('_', "-")))
        .collect();
    let known = match names.is_empty() {
        true => "this harness has none yet".to_string(),
        false => names.join(", "),
    };
    format!(
        "knobs: is a table, not a list or a value: write `[knobs]` on a line of its own and under it one \
         `NAME = VALUE` line per knob, e.g. `[knobs]` then `NAME = 512` (the knobs: {known}; docs/identity.md)"
    )
}

fn default_wait_mult() -> u32 {
    lazyinit_core::cell::DEFAULT_WAIT_MULT
}
fn default_profile() -> lazyinit_core::StorageProfile {
    lazyinit_core::StorageProfile::EBS
}
fn default_poll() -> Duration {
    Duration::from_secs(5)
}

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read spec {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl<C: ProviderConfigs> Spec<C> {
    pub fn parse(text: &str, origin: &str) -> Result<Self, SpecError> {
        let spec: Self = toml::from_str(text).map_err(|e| SpecError::Invalid {
            path: origin.into(),
            // One line: where, and toml's message (it names the key).
            message: match e.span() {
                Some(span) => format!(
                    "line {}: {}",
                    text[..span.start.min(text.len())].matches('\n').count() + 1,
                    lazyinit_core::exit::one_line_text(e.message())
                ),
                None => lazyinit_core::exit::one_line_text(e.message()),
            },
        })?;
        spec.validate().map_err(|message| SpecError::Invalid {
            path: origin.into(),
            message,
        })?;
        Ok(spec)
    }

    pub fn load(path: &Path) -> Result<Self, SpecError> {
        // A regular file of at most 1 MiB (issue 41): not a FIFO, not /dev/zero.
        let text = lazyinit_core::input::read_text_bounded(
            path,
            lazyinit_core::input::MAX_SPEC_BYTES,
            "spec",
        )
        .map_err(|source| SpecError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Every rule a spec obeys; also run after command-line overrides.
    pub fn validate(&self) -> Result<(), String> {
        if !self
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            || self.name.is_empty()
        {
            return Err(format!(
                "name `{}`: use letters, digits, - and _",
                self.name
            ));
        }
        for (what, empty) in [
            ("arches", self.arches.is_empty()),
            ("sources", self.sources.is_empty()),
            ("variants", self.variants.is_empty()),
            ("sizes", self.sizes.is_empty()),
        ] {
            if empty {
                return Err(format!("{what}: list at least one"));
            }
        }
        for a in &self.arches {
            if self.hz.for_arch(*a).is_empty() {
                return Err(format!("hz: no value for arch {a}"));
            }
        }
        self.check_unique()?;
        for s in &self.sizes {
            if s.0 < lazyinit_core::model::GROUP_BYTES * 8 {
                return Err(format!(
                    "sizes: {s} is too small; use at least 1GiB (8 block groups)"
                ));
            }
        }
        for s in &self.sizes {
            if s.0 > MAX_SIZE.0 {
                return Err(format!("sizes: {s} is too large; use at most {MAX_SIZE}"));
            }
        }
        if self.repetitions == 0 || self.repetitions > 100 {
            return Err("repetitions: use 1 to 100".into());
        }
        if self.wait_mult == 0 || self.wait_mult > 1000 {
            return Err("wait-mult: use 1 to 1000 (the kernel's init_itable=n)".into());
        }
        self.knobs.resolve()?;
        check_mkfs_args(&self.mkfs_args)?;
        if let Concurrency::Fixed(c) = self.concurrency {
            if c == 0 || c > MAX_CONCURRENCY {
                return Err(format!(
                    "concurrency: use auto or a number from 1 to {MAX_CONCURRENCY}"
                ));
            }
        }
        if self.poll_interval < Duration::from_millis(200)
            || self.poll_interval > Duration::from_secs(600)
        {
            return Err("poll-interval: use 200ms to 10min".into());
        }
        let cells = self.cell_count();
        if cells > MAX_CELLS {
            return Err(format!(
                "the matrix has {cells} cells; use at most {MAX_CELLS} (fewer axis values or repetitions)"
            ));
        }
        if let Some(n) = self.estimate_after {
            check_estimate_after(n)?;
        }
        if let Some(c) = &self.kernel_config {
            if !c.is_file() {
                return Err(format!("kernel-config: {} is not a file", c.display()));
            }
        }
        Ok(())
    }

    /// Every axis lists each value once: two equal cells would share one
    /// cell id, so one folder, volume and QMP socket.
    fn check_unique(&self) -> Result<(), String> {
        fn dup<T: PartialEq + std::fmt::Display>(what: &str, v: &[T]) -> Result<(), String> {
            match v.iter().enumerate().find(|(i, x)| v[..*i].contains(x)) {
                Some((_, x)) => Err(format!(
                    "{what}: `{x}` is listed twice; list each value once (use repetitions for more runs)"
                )),
                None => Ok(()),
            }
        }
        dup("arches", &self.arches)?;
        dup("sources", &self.sources)?;
        dup("variants", &self.variants)?;
        dup("sizes", &self.sizes)?;
        for a in &self.arches {
            dup(&format!("hz ({a})"), &self.hz.for_arch(*a))?;
        }
        Ok(())
    }

    /// Cells of the matrix, counted without making them (saturating: the
    /// count is only compared with [`MAX_CELLS`]).
    pub fn cell_count(&self) -> u64 {
        let hz: u64 = self
            .arches
            .iter()
            .map(|a| self.hz.for_arch(*a).len() as u64)
            .fold(0, u64::saturating_add);
        [
            self.sources.len() as u64,
            self.variants.len() as u64,
            self.sizes.len() as u64,
            self.knobs.count(),
            u64::from(self.repetitions),
        ]
        .into_iter()
        .fold(hz, u64::saturating_mul)
    }

    /// Short content hash: a spec names its results folder, so rerunning the
    /// same spec resumes it, and a changed spec gets a new folder.
    pub fn hash(&self) -> String {
        let mut text = toml::to_string(self).unwrap_or_default();
        // The config's content, not just its path: an edited config is
        // another kernel, so another results folder.
        if let Some(c) = &self.kernel_config {
            let content = std::fs::read(c).unwrap_or_default();
            text.push_str(&lazyinit_core::paths::sha256_hex(content));
        }
        lazyinit_core::paths::sha256_hex(text)[..8].to_string()
    }

    pub fn run_id(&self) -> String {
        format!("{}-{}", self.name, self.hash())
    }
}

/// The largest volume a spec may ask for (16 times EBS's largest, 64 TiB).
pub const MAX_SIZE: lazyinit_core::ByteSize = lazyinit_core::ByteSize(1 << 50);
/// The most cells one spec may plan (the reported matrix has 8).
pub const MAX_CELLS: u64 = 10_000;
/// The most cells that may run at once.
pub const MAX_CONCURRENCY: u32 = 1024;
/// The largest `estimate-after`: the block groups of a [`MAX_SIZE`] volume.
pub const MAX_ESTIMATE_AFTER: u64 = MAX_SIZE.0 / lazyinit_core::model::GROUP_BYTES;

/// `estimate-after` (or `--estimate-after`) must leave the lock check
/// enough cycles.
pub fn check_estimate_after(n: u64) -> Result<(), String> {
    let min = lazyinit_estimate::MIN_GROUPS;
    if n < min {
        return Err(format!(
            "estimate-after: use at least {min} groups (the lock check needs {} recent cycles in the last half of the trace)",
            lazyinit_estimate::MIN_WINDOW
        ));
    }
    if n > MAX_ESTIMATE_AFTER {
        return Err(format!(
            "estimate-after: use at most {MAX_ESTIMATE_AFTER} groups (those of a {MAX_SIZE} volume)"
        ));
    }
    Ok(())
}

/// Built-in presets, also shipped as files under `specs/`.
/// One cell as spec text: the project's one builder of it (`run --arch
/// .. --hz ..` and each bisect step), made as a TOML table so that any
/// source path is quoted as TOML quotes it. `storage_profile` None keeps
/// the spec's default.
pub struct OneCell<'a> {
    pub name: &'a str,
    pub arch: lazyinit_core::Arch,
    pub hz: lazyinit_core::Hz,
    pub variant: lazyinit_core::Variant,
    pub size: lazyinit_core::ByteSize,
    pub source: &'a str,
    pub storage_profile: Option<&'a str>,
    /// QEMU's clock (`[provider-config.qemu] clock`), None for the
    /// provider's default.
    pub clock: Option<&'a str>,
}

impl OneCell<'_> {
    pub fn toml(&self) -> String {
        use toml::Value;
        let one = |v: String| Value::Array(vec![Value::String(v)]);
        let mut t = toml::Table::new();
        t.insert("name".into(), Value::String(self.name.into()));
        t.insert("arches".into(), one(self.arch.to_string()));
        t.insert(
            "hz".into(),
            Value::Array(vec![Value::Integer(self.hz.get().into())]),
        );
        t.insert("variants".into(), one(self.variant.to_string()));
        t.insert("sizes".into(), one(self.size.to_string()));
        t.insert("sources".into(), one(self.source.to_string()));
        t.insert("repetitions".into(), Value::Integer(1));
        if let Some(p) = self.storage_profile {
            t.insert("storage-profile".into(), Value::String(p.into()));
        }
        if let Some(c) = self.clock {
            let mut qemu = toml::Table::new();
            qemu.insert("clock".into(), Value::String(c.into()));
            let mut configs = toml::Table::new();
            configs.insert("qemu".into(), Value::Table(qemu));
            t.insert("provider-config".into(), Value::Table(configs));
        }
        toml::to_string(&t).unwrap_or_default()
    }
}

pub fn preset(name: &str) -> Option<&'static str> {
    match name {
        "quick" => Some(include_str!("../../../specs/quick.toml")),
        "reported" => Some(include_str!("../../../specs/reported.toml")),
        "smoke" => Some(include_str!("../../../specs/smoke.toml")),
        "calibrate-z1" => Some(include_str!("../../../specs/calibrate-z1.toml")),
        "nightly" => Some(include_str!("../../../specs/nightly.toml")),
        "noisy" => Some(include_str!("../../../specs/noisy.toml")),
        "series" => Some(include_str!("../../../specs/series.toml")),
        _ => None,
    }
}

pub const PRESETS: &[&str] = &[
    "quick",
    "reported",
    "smoke",
    "calibrate-z1",
    "nightly",
    "noisy",
    "series",
];

/// A spec with its provider tables untyped: the orchestrator's own tests.
#[cfg(test)]
pub(crate) type RawSpec = Spec<toml::Table>;

#[cfg(test)]
impl ProviderConfigs for toml::Table {
    fn default_provider() -> String {
        "qemu".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse() {
        for p in PRESETS {
            RawSpec::parse(preset(p).unwrap(), p).unwrap();
        }
    }

    #[test]
    fn per_arch_hz() {
        let s = RawSpec::parse(preset("quick").unwrap(), "quick").unwrap();
        assert_eq!(s.hz.for_arch(Arch::Arm64), vec![Hz::new(100).unwrap()]);
        assert_eq!(s.hz.for_arch(Arch::X86_64), vec![Hz::new(250).unwrap()]);
    }

    #[test]
    fn unknown_key_names_the_key() {
        let e = RawSpec::parse(
            "name='x'\narches=['x86_64']\nhz=[100]\nsizes=['8GiB']\nsizez=1\n",
            "t.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("sizez"), "{e}");
    }

    #[test]
    fn bad_values_are_refused() {
        let base = "name='x'\narches=['x86_64']\nsizes=['8GiB']\n";
        for (extra, needle) in [
            ("hz=[200]", "HZ"),
            ("hz=[100]\nvariants=['maybe']", "variant"),
            ("hz=[100]\nrepetitions=0", "repetitions"),
            ("hz={arm64=[100]}", "no value for arch x86_64"),
            ("hz=[100]\nconcurrency=0", "concurrency"),
        ] {
            let e = RawSpec::parse(&format!("{base}{extra}\n"), "t.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{extra}: {e}");
        }
        let e = RawSpec::parse(
            "name='x'\narches=['x86_64']\nhz=[100]\nsizes=['2TB']\n",
            "t",
        )
        .unwrap_err();
        assert!(e.to_string().contains("2TB"), "{e}");
    }

    /// Issue 52: `knobs` is a table; a list (`knobs = [512]`) or a value
    /// was taken and dropped (a struct of no knobs reads a list as
    /// nothing). Refused naming the key, on one line, with what to write;
    /// an empty table is still fine.
    #[test]
    fn knobs_that_are_not_a_table_are_refused_saying_what_to_write() {
        let base = "name='x'\narches=['x86_64']\nhz=[100]\nsizes=['8GiB']\n";
        for knobs in [
            "knobs = [512]",
            "knobs = []",
            "knobs = 512",
            "knobs = 'inode=512'",
        ] {
            let e = RawSpec::parse(&format!("{base}{knobs}\n"), "t.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("line 5: knobs: is a table, not a list or a value: write `[knobs]`"),
                "{knobs}: {e}"
            );
            assert!(!e.contains('\n'), "{knobs}: {e}");
        }
        RawSpec::parse(&format!("{base}[knobs]\n"), "t.toml").unwrap();
        RawSpec::parse(&format!("{base}knobs = {{}}\n"), "t.toml").unwrap();
        let e = RawSpec::parse(&format!("{base}[knobs]\nnosuch = 1\n"), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("nosuch"), "{e}");
    }

    /// A knob's list is an axis of the matrix: counted in its cells,
    /// swept by the plan (each value a cell of its own id), refused on
    /// one line at spec read when a value breaks the knob's rule; one
    /// value keeps the text (so the hash) it always had.
    #[test]
    fn a_knob_list_is_swept_as_an_axis() {
        let base =
            "name='x'\narches=['x86_64']\nhz=[250]\nvariants=['fix','nofix']\nsizes=['8GiB']\n";
        let s = RawSpec::parse(&format!("{base}[knobs]\ninode-size = [128, 256]\n"), "t").unwrap();
        assert_eq!(s.cell_count(), 4);
        let cells = crate::plan::cells(&s);
        let ids: Vec<String> = cells.iter().map(|c| c.id()).collect();
        assert_eq!(
            ids,
            [
                "qemu-x86_64-debian-6.1-hz250-fix-8GiB-inode128-r1",
                "qemu-x86_64-debian-6.1-hz250-fix-8GiB-r1",
                "qemu-x86_64-debian-6.1-hz250-nofix-8GiB-inode128-r1",
                "qemu-x86_64-debian-6.1-hz250-nofix-8GiB-r1",
            ]
        );
        let one = RawSpec::parse(&format!("{base}[knobs]\ninode-size = 512\n"), "t").unwrap();
        assert_eq!(one.cell_count(), 2);
        assert!(toml::to_string(&one)
            .unwrap()
            .contains("inode-size = 512\n"));
        let e = RawSpec::parse(&format!("{base}[knobs]\ninode-size = [128, 300]\n"), "t")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "t: knobs.inode-size: 300 is not a power of two; use a power of two from 128 to 1024 (default 256)"
        );
    }

    #[test]
    fn duplicates_and_bounds_are_refused_naming_them() {
        let base = "name='x'\nhz=[100]\n";
        for (extra, needle) in [
            (
                "arches=['x86_64','x86_64']\nsizes=['8GiB']",
                "arches: `x86_64` is listed twice",
            ),
            (
                "arches=['x86_64']\nsizes=['8GiB','8192MiB']",
                "sizes: `8GiB` is listed twice",
            ),
            (
                "arches=['x86_64']\nsizes=['8GiB']\nvariants=['fix','fix']",
                "variants: `fix` is listed twice",
            ),
            (
                "arches=['x86_64']\nsizes=['16777215TiB']",
                "use at most 1024TiB",
            ),
            ("arches=['x86_64']\nsizes=[-1]", "sizes: -1 is negative"),
            (
                "arches=['x86_64']\nsizes=['8GiB']\nconcurrency=5000",
                "from 1 to 1024",
            ),
            (
                "arches=['x86_64']\nsizes=['8GiB']\nestimate-after=9000000000",
                "at most 8388608",
            ),
            (
                "arches=['x86_64']\nsizes=['8GiB']\npoll-interval='1000h'",
                "200ms to 10min",
            ),
        ] {
            let e = RawSpec::parse(&format!("{base}{extra}\n"), "t.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{extra}: {e}");
        }
        let mut sizes: Vec<String> = (1..=200).map(|g| format!("'{g}GiB'")).collect();
        sizes[0] = "'201GiB'".into();
        let many = format!(
            "{base}arches=['x86_64','arm64']\nrepetitions=100\nsizes=[{}]\n",
            sizes.join(",")
        );
        let e = RawSpec::parse(&many, "t").unwrap_err().to_string();
        assert!(e.contains("80000 cells; use at most 10000"), "{e}");
    }

    #[test]
    fn estimate_after_is_checked_and_changes_the_hash_only_when_set() {
        let base = "name='x'\narches=['x86_64']\nhz=[100]\nsizes=['8GiB']\n";
        let plain = RawSpec::parse(base, "t").unwrap();
        assert_eq!(plain.estimate_after, None);
        // Specs written before the key existed keep their results folder.
        assert!(!toml::to_string(&plain).unwrap().contains("estimate"));
        let est = RawSpec::parse(&format!("{base}estimate-after = 50\n"), "t").unwrap();
        assert_eq!(est.estimate_after, Some(50));
        assert_ne!(plain.hash(), est.hash());
        let e = RawSpec::parse(&format!("{base}estimate-after = 10\n"), "t").unwrap_err();
        assert!(
            e.to_string().contains("estimate-after: use at least 25"),
            "{e}"
        );
    }

    #[test]
    fn nightly_is_the_reported_matrix_measured_on_the_virtual_clock() {
        let r = RawSpec::parse(preset("reported").unwrap(), "reported").unwrap();
        let n = RawSpec::parse(preset("nightly").unwrap(), "nightly").unwrap();
        // Measured to the thread's exit, not estimated.
        assert_eq!(n.estimate_after, None);
        let clock = |s: &RawSpec| {
            s.provider_config
                .get("qemu")
                .and_then(|q| q.get("clock"))
                .and_then(|c| c.as_str())
                .map(String::from)
        };
        assert_eq!(clock(&n).as_deref(), Some("virtual"));
        assert_eq!(clock(&r), None, "reported: the real clock");
        let same = RawSpec {
            name: r.name.clone(),
            provider_config: r.provider_config.clone(),
            ..n
        };
        assert_eq!(same, r);
        // The first command: the virtual clock where guests run under TCG.
        let q = RawSpec::parse(preset("quick").unwrap(), "quick").unwrap();
        assert_eq!(clock(&q).as_deref(), Some("auto"));
    }

    #[test]
    fn one_cell_quotes_its_source_as_toml_does() {
        use lazyinit_core::{Arch, Hz, Variant};
        // A path with a quote, a backslash and a non-ASCII letter, quoted
        // as TOML quotes (Rust's `{:?}` escaping is not TOML's).
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("tr\"ee\\é");
        std::fs::create_dir(&src).unwrap();
        let text = OneCell {
            name: "bisect",
            arch: Arch::Arm64,
            hz: Hz::new(100).unwrap(),
            variant: Variant::Fix,
            size: "8GiB".parse().unwrap(),
            source: &src.display().to_string(),
            storage_profile: Some("ebs"),
            clock: Some("virtual"),
        }
        .toml();
        let t: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(
            t["provider-config"]["qemu"]["clock"].as_str(),
            Some("virtual")
        );
        assert_eq!(
            t["sources"][0].as_str(),
            Some(src.to_str().unwrap()),
            "{text}"
        );
        assert_eq!(t["storage-profile"].as_str(), Some("ebs"));
        assert_eq!(t["repetitions"].as_integer(), Some(1));
        assert_eq!(t["hz"][0].as_integer(), Some(100));
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let a = RawSpec::parse(preset("quick").unwrap(), "q").unwrap();
        let mut b = a.clone();
        assert_eq!(a.hash(), b.hash());
        b.repetitions += 1;
        assert_ne!(a.hash(), b.hash());
    }

    #[test]
    fn kernel_config_must_exist_and_its_content_is_hashed() {
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("config-6.1");
        let text = |p: &std::path::Path| {
            format!(
                "name = \"c\"\narches = [\"x86_64\"]\nhz = [250]\nsizes = [\"64GiB\"]\nkernel-config = \"{}\"\n",
                p.display()
            )
        };
        let e = RawSpec::parse(&text(&cfg), "s").unwrap_err();
        assert!(e.to_string().contains("kernel-config"), "{e}");
        std::fs::write(&cfg, "CONFIG_EXT4_FS=m\n").unwrap();
        let s = RawSpec::parse(&text(&cfg), "s").unwrap();
        let before = s.hash();
        std::fs::write(&cfg, "CONFIG_EXT4_FS=y\n").unwrap();
        assert_ne!(s.hash(), before);
        // Without one, the hash is what it was before the key existed.
        let q = RawSpec::parse(preset("quick").unwrap(), "q").unwrap();
        assert!(!toml::to_string(&q).unwrap().contains("kernel-config"));
    }
}

/// mkfs-args that set what a knob owns are refused, naming the knob: the
/// row, its label and series would record the knob's default.
fn check_mkfs_args(args: &[String]) -> Result<(), String> {
    match args
        .iter()
        .find_map(|a| lazyinit_core::identity::Knobs::mkfs_owner(a).map(|k| (a, k)))
    {
        Some((arg, knob)) => Err(format!(
            "mkfs-args: `{arg}` sets what the knob {knob} owns, and the row would record the default: set it as [knobs] {knob} = N instead"
        )),
        None => Ok(()),
    }
}
