//! The KCIDB objects this export writes: the subset of schema v5.3 fields
//! it fills, named as the schema names them (`kcidb-io`'s
//! `kcidb_io.schema.v05_03`). Absent facts are left out, never null: KCIDB
//! refuses nulls and reads absence as "unknown".

use serde::Serialize;

/// The schema version written: v5.3, the latest of `kcidb-io` 141.
pub const MAJOR: u32 = 5;
pub const MINOR: u32 = 3;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub version: Version,
    pub checkouts: Vec<Checkout>,
    pub builds: Vec<Build>,
    pub tests: Vec<Test>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

/// A named file (`name` has no `/`) and where to fetch it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Resource {
    pub name: String,
    pub url: String,
}

/// One kernel source with one variant patch set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checkout {
    pub id: String,
    pub origin: String,
    pub tree_name: String,
    pub comment: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patchset_files: Option<Vec<Resource>>,
    /// sha256 over the patches' sha256 lines; "" when none was applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patchset_hash: Option<String>,
    /// Rows exist only for kernels that were built, so the patch applied.
    pub valid: bool,
    pub misc: CheckoutMisc,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckoutMisc {
    pub kernel_source: String,
    pub variant: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debian_package: Option<String>,
    /// `sha256:<hex>` of a tarball or `tree:<hex>` of a tree's fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_identity: Option<String>,
    /// `as-released`, `reverted` or `applied-forward`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant_method: Option<String>,
}

/// One kernel built: source, variant, arch, HZ and profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Build {
    pub id: String,
    pub origin: String,
    pub checkout_id: String,
    pub architecture: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compiler: Option<String>,
    pub config_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_url: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub output_files: Vec<Resource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    pub status: &'static str,
    pub comment: String,
    pub misc: BuildMisc,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BuildMisc {
    pub kernel_release: String,
    pub hz: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// From the kernel cache's manifest, when it was found.
    #[serde(flatten)]
    pub manifest: Option<ManifestMisc>,
}

/// What a kernel cache manifest records beyond the KCIDB build fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ManifestMisc {
    pub cache_key: String,
    pub config_sha256: String,
    pub fragment_sha256: String,
    pub image_sha256: String,
    pub image_bytes: u64,
    /// RFC 3339, when the build was published to the cache.
    pub built_at: String,
    pub recipe_version: u32,
}

/// One metric of one cell run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Test {
    pub id: String,
    pub origin: String,
    pub build_id: String,
    pub path: String,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub number: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    pub environment: Environment,
    pub comment: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_excerpt: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub output_files: Vec<Resource>,
    pub misc: TestMisc,
}

/// KCIDB's numeric test output (schema v5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Number {
    pub value: f64,
    pub unit: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Environment {
    pub comment: String,
    pub misc: EnvironmentMisc,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvironmentMisc {
    pub provider: String,
    pub machine: String,
    pub accel: String,
    pub storage_profile: String,
    pub concurrency: u32,
    pub clocksource: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestMisc {
    pub run_id: String,
    pub cell_id: String,
    pub repetition: u32,
    /// The row's own status: `ok`, `failed` or `interrupted`.
    pub row_status: String,
    pub arch: String,
    pub hz: u32,
    pub variant: String,
    pub wait_mult: u32,
    pub volume_bytes: u64,
    /// Each field of the key's table after the first (a knob) off its
    /// default, under its column: none at the defaults.
    #[serde(flatten)]
    pub knobs: std::collections::BTreeMap<&'static str, lazyinit_core::identity::KeyValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traced_groups: Option<u64>,
    pub mkfs_cmd: String,
    pub harness_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_2021: Option<Reported2021>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelFigure>,
    /// Present when the number is an early-stop estimate, not a measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<EstimateMisc>,
}

/// How an estimated row was predicted (docs/estimates.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EstimateMisc {
    /// Groups traced before the stop.
    pub groups_traced: u64,
    /// The locked cycle the rest was predicted at, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycle_ms: Option<f64>,
    /// 95% prediction interval of the number (lazyinit_s only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lo: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hi: Option<f64>,
}

/// The 2021 report's figure for the same arch, HZ, variant and volume.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reported2021 {
    pub source: &'static str,
    pub instance: &'static str,
    pub kernel: &'static str,
    pub value: f64,
    pub unit: &'static str,
    /// How the value follows from the report, when it is not the report's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub basis: Option<String>,
    /// Measured over reported, minus one, in percent (measured rows only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff_pct: Option<f64>,
}

/// The timing model's prediction (docs/design.md §2).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelFigure {
    pub value: f64,
    pub unit: &'static str,
    pub sleep_ticks: u64,
    pub basis: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff_pct: Option<f64>,
}
