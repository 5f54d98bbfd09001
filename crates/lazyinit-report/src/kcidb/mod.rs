//! Result rows as one KCIDB report (schema v5.3), the format kernel CI
//! systems submit to KernelCI's database with `kcidb-submit`.
//!
//! - a **checkout** per kernel source, version and variant: the variant is
//!   the patch set (the revert or forward port of 39fec6889d15, or none);
//! - a **build** per kernel: arch, HZ and profile, compiler and files when
//!   the kernel cache's manifest is at hand;
//! - a **test** per cell run and metric (`lazyinit_s`, `ms_per_group`,
//!   `sleep_ticks`) at `ext4.lazyinit.<size>.<metric>`: `DONE` with its
//!   number when measured, `ERROR` for a failed run, `MISS` for an
//!   interrupted one, never a number for those.
//!
//! Ids come from CSV fields only, so exporting the same rows again gives
//! the same ids whether or not a manifest was found. What neither the CSV
//! nor a manifest says is left out, never guessed.

use std::collections::{BTreeMap, HashMap};

use lazyinit_core::results::ResultRow;
use lazyinit_core::{ProviderName, RowKernel, Variant};

pub mod ids;
pub mod measure;
pub mod types;

use types::{Build, BuildMisc, Checkout, CheckoutMisc, ManifestMisc, Version};
pub use types::{Report, Resource};

/// The origin used when none is given.
pub const DEFAULT_ORIGIN: &str = "lazyinit_bench";

#[derive(Debug, thiserror::Error)]
pub enum KcidbError {
    #[error("{0}")]
    Origin(String),
}

/// What identifies a kernel from the CSV: the kernel a row ran (arch,
/// source, HZ, variant and profile: the identity's `KernelId`), its
/// release, and the provider (the build's id names it; it stands for the
/// profile in rows written before the `kernel_profile` column).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BuildKey {
    pub kernel: RowKernel,
    pub kernel_release: String,
    pub provider: ProviderName,
}

/// What is known about a kernel beyond the CSV (see [`BuildKey`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelFacts {
    /// The fragment set, `qemu` or `cloud`.
    pub profile: Option<String>,
    /// The Debian package a Debian source comes from.
    pub debian_package: Option<String>,
    pub manifest: Option<ManifestFacts>,
}

/// A kernel cache manifest, as far as KCIDB has a place for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestFacts {
    pub source_version: String,
    pub source_identity: String,
    pub variant_method: String,
    /// The variant patch applied, if any: name, sha256, and where it is.
    pub patch: Option<PatchFacts>,
    pub compiler: String,
    pub build_seconds: f64,
    /// The resolved `.config`, when the file is there.
    pub config: Option<Resource>,
    /// The image, `build.log` and `fragment.config` that are there.
    pub files: Vec<Resource>,
    pub misc: ManifestMisc,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PatchFacts {
    pub name: String,
    pub sha256: String,
    pub url: Option<String>,
}

/// A row's identity in a results file (as [`crate::input::load`] sees it).
pub type RowKey = (String, String, String);

pub fn row_key(row: &ResultRow) -> RowKey {
    (
        row.run_id.clone(),
        row.cell_id.clone(),
        row.started_at.clone(),
    )
}

/// Everything the export reads; facts missing from the maps are unknown.
pub struct Inputs<'a> {
    pub rows: &'a [ResultRow],
    pub kernels: &'a BTreeMap<BuildKey, KernelFacts>,
    /// Raw files of a cell run (console.log, trace.txt, ...), by row.
    pub files: &'a HashMap<RowKey, Vec<Resource>>,
}

/// The kernel a row ran, as far as one run is concerned.
type RunKernel<'a> = (&'a str, RowKernel, &'a ProviderName);

fn run_kernel(r: &ResultRow) -> RunKernel<'_> {
    (&r.run_id, r.kernel(|_| None), &r.testbed.provider)
}

/// A row's kernel release; a row that has none (a run that failed before
/// reading it) takes the one its run's other rows of the same kernel name,
/// when they agree: one run builds each kernel once.
fn releases(rows: &[ResultRow]) -> Vec<String> {
    let mut seen: HashMap<RunKernel, Option<&str>> = HashMap::new();
    for r in rows.iter().filter(|r| !r.kernel_release.is_empty()) {
        seen.entry(run_kernel(r))
            .and_modify(|v| {
                if *v != Some(r.kernel_release.as_str()) {
                    *v = None
                }
            })
            .or_insert(Some(&r.kernel_release));
    }
    rows.iter()
        .map(|r| {
            if r.kernel_release.is_empty() {
                seen.get(&run_kernel(r))
                    .copied()
                    .flatten()
                    .unwrap_or("")
                    .to_string()
            } else {
                r.kernel_release.clone()
            }
        })
        .collect()
}

/// The kernels the rows ran, for the caller to look up, each with the
/// earliest start of a run on it (a cached build made later is another).
pub fn build_keys(rows: &[ResultRow]) -> BTreeMap<BuildKey, String> {
    let mut keys: BTreeMap<BuildKey, String> = BTreeMap::new();
    for (r, rel) in rows.iter().zip(releases(rows)) {
        keys.entry(build_key(r, rel))
            .and_modify(|first| {
                if r.started_at < *first {
                    first.clone_from(&r.started_at)
                }
            })
            .or_insert_with(|| r.started_at.clone());
    }
    keys
}

fn build_key(r: &ResultRow, kernel_release: String) -> BuildKey {
    BuildKey {
        kernel: r.kernel(|_| None),
        kernel_release,
        provider: r.testbed.provider.clone(),
    }
}

fn variant_text(v: Variant) -> &'static str {
    match v {
        Variant::Fix => "with the ext4 lazy-init fix 39fec6889d15",
        Variant::NoFix => "without the ext4 lazy-init fix 39fec6889d15",
    }
}

fn checkout(origin: &str, r: &ResultRow, release: &str, facts: &KernelFacts) -> Checkout {
    let version = ids::source_version(r, release);
    let m = facts.manifest.as_ref();
    // The patch set is known only from a manifest: "" when none applied.
    let patch = m.map(|m| m.patch.as_ref());
    let source = r.axes.source.to_string();
    let name = facts.debian_package.as_deref().unwrap_or(&source);
    let named = match &version {
        Some(v) if v != name => format!("{name} {v}"),
        Some(_) => name.to_string(),
        None => format!("{name} (version unknown)"),
    };
    Checkout {
        id: ids::checkout_id(origin, r, release),
        origin: origin.to_string(),
        tree_name: r.axes.source.to_string(),
        comment: format!("{named}, {}", variant_text(r.axes.variant)),
        // A patch whose file was not found keeps its hash but lists no file.
        patchset_files: patch.and_then(|p| match p {
            Some(p) => p.url.clone().map(|url| {
                vec![Resource {
                    name: p.name.clone(),
                    url,
                }]
            }),
            None => Some(Vec::new()),
        }),
        patchset_hash: patch.map(|p| match p {
            Some(p) => ids::patchset_hash(&[&p.sha256]),
            None => String::new(),
        }),
        valid: true,
        misc: CheckoutMisc {
            kernel_source: r.axes.source.to_string(),
            variant: r.axes.variant.to_string(),
            source_version: m.map(|m| m.source_version.clone()).or(version),
            debian_package: facts.debian_package.clone(),
            source_identity: m.map(|m| m.source_identity.clone()),
            variant_method: m.map(|m| m.variant_method.clone()),
        },
    }
}

fn build(origin: &str, r: &ResultRow, release: &str, facts: &KernelFacts) -> Build {
    let m = facts.manifest.as_ref();
    let profile = facts.profile.clone();
    let mut output_files: Vec<Resource> = m
        .map(|m| m.config.iter().chain(&m.files).cloned().collect())
        .unwrap_or_default();
    output_files.sort();
    Build {
        id: ids::build_id(origin, r, release),
        origin: origin.to_string(),
        checkout_id: ids::checkout_id(origin, r, release),
        architecture: r.axes.arch.to_string(),
        compiler: m.map(|m| m.compiler.clone()),
        config_name: match &profile {
            Some(p) => format!("lazyinit-{p}-hz{}", r.axes.hz),
            None => format!("lazyinit-hz{}", r.axes.hz),
        },
        config_url: m.and_then(|m| m.config.as_ref()).map(|c| c.url.clone()),
        log_url: output_files
            .iter()
            .find(|f| f.name == "build.log")
            .map(|f| f.url.clone()),
        output_files,
        duration: m.map(|m| m.build_seconds),
        status: "PASS",
        comment: format!(
            "{} HZ={} {} kernel {}",
            r.axes.arch,
            r.axes.hz,
            profile.as_deref().unwrap_or(r.testbed.provider.as_str()),
            if release.is_empty() {
                "(release unknown)"
            } else {
                release
            }
        ),
        misc: BuildMisc {
            kernel_release: release.to_string(),
            hz: r.axes.hz.get(),
            profile,
            manifest: m.map(|m| m.misc.clone()),
        },
    }
}

/// The KCIDB report of `inputs.rows`: checkouts and builds sorted by id,
/// tests in row order.
pub fn export(inputs: &Inputs, origin: &str) -> Result<Report, KcidbError> {
    ids::check_origin(origin).map_err(KcidbError::Origin)?;
    let none = KernelFacts::default();
    let mut checkouts = BTreeMap::new();
    let mut builds = BTreeMap::new();
    let mut tests = Vec::with_capacity(inputs.rows.len() * measure::METRICS.len());
    for (r, release) in inputs.rows.iter().zip(releases(inputs.rows)) {
        let key = build_key(r, release);
        let facts = inputs.kernels.get(&key).unwrap_or(&none);
        let release = &key.kernel_release;
        let build_id = ids::build_id(origin, r, release);
        if !builds.contains_key(&build_id) {
            let c = checkout(origin, r, release, facts);
            // Another arch's build of the same checkout may know more.
            let known = checkouts
                .get(&c.id)
                .is_some_and(|k: &Checkout| k.patchset_hash.is_some());
            if !known {
                checkouts.insert(c.id.clone(), c);
            }
            builds.insert(build_id.clone(), build(origin, r, release, facts));
        }
        let files = inputs
            .files
            .get(&row_key(r))
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        tests.extend(measure::tests_of(origin, &build_id, r, files));
    }
    Ok(Report {
        version: Version {
            major: types::MAJOR,
            minor: types::MINOR,
        },
        checkouts: checkouts.into_values().collect(),
        builds: builds.into_values().collect(),
        tests,
    })
}

/// The report as pretty JSON, floats rounded to 6 decimals.
pub fn render(report: &Report) -> String {
    crate::render::json::render(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::tests_support::row;

    #[test]
    fn a_failed_row_without_release_joins_its_runs_kernel() {
        let mut ok = row("debian-6.1", 60.0);
        ok.kernel_release = "6.1.192-lazyinit-hz100-nofix".into();
        let mut failed = ok.clone();
        failed.kernel_release.clear();
        failed.status = lazyinit_core::results::Status::Failed;
        failed.started_at = "2026-11-29T20:00:00Z".into();
        let rows = [ok, failed];
        assert_eq!(build_keys(&rows).len(), 1);
        let (k, f) = (BTreeMap::new(), HashMap::new());
        let rep = export(
            &Inputs {
                rows: &rows,
                kernels: &k,
                files: &f,
            },
            "o",
        )
        .unwrap();
        assert_eq!(
            (rep.checkouts.len(), rep.builds.len(), rep.tests.len()),
            (1, 1, 6)
        );
        assert_eq!(rep.tests[3].build_id, rep.builds[0].id);
    }

    #[test]
    fn a_bad_origin_is_refused() {
        let (k, f) = (BTreeMap::new(), HashMap::new());
        let rows = [row("debian-6.1", 60.0)];
        let e = export(
            &Inputs {
                rows: &rows,
                kernels: &k,
                files: &f,
            },
            "Lazy-Init",
        )
        .unwrap_err();
        assert!(e.to_string().contains("lowercase"), "{e}");
    }

    #[test]
    fn without_a_manifest_the_patch_set_is_left_out() {
        let (k, f) = (BTreeMap::new(), HashMap::new());
        let rows = [row("debian-6.1", 60.0)];
        let rep = export(
            &Inputs {
                rows: &rows,
                kernels: &k,
                files: &f,
            },
            "o",
        )
        .unwrap();
        let v = serde_json::to_value(&rep).unwrap();
        let c = &v["checkouts"][0];
        assert!(c.get("patchset_hash").is_none() && c.get("patchset_files").is_none());
        assert!(v["builds"][0].get("compiler").is_none());
        assert_eq!(v["builds"][0]["config_name"], "lazyinit-hz100");
    }
}
