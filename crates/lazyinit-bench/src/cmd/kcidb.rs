//! `report --format kcidb`: what the export needs beyond the CSV, read from
//! this machine: the kernel cache's manifests and each cell's raw files.
//! The export itself is `lazyinit_report::kcidb`, a pure function.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use lazyinit_core::identity::RowKernel;
use lazyinit_core::{CellFolder, KernelProfile};
use lazyinit_kernel::cache::{self, Manifest};
use lazyinit_report::input::LoadedRow;
use lazyinit_report::kcidb::types::ManifestMisc;
use lazyinit_report::kcidb::{
    self, ids::file_url, row_key, BuildKey, KernelFacts, ManifestFacts, PatchFacts, Resource,
    RowKey,
};

/// Where the variant patches live in this clone (the binary was built
/// from it); a patch is listed only if the file there is the one applied.
fn patches_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kernels/patches")
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p)
        .or_else(|_| std::path::absolute(p))
        .unwrap_or_else(|_| p.to_path_buf())
}

/// `name` in `dir` as a KCIDB resource, if it is a file there.
fn resource(dir: &Path, name: &str) -> Option<Resource> {
    let p = dir.join(name);
    p.is_file().then(|| Resource {
        name: name.to_string(),
        url: file_url(&absolute(&p)),
    })
}

fn patch_facts(m: &Manifest) -> Option<PatchFacts> {
    let (name, sha256) = (m.patch.clone()?, m.patch_sha256.clone()?);
    let path = patches_dir().join(&name);
    let same = std::fs::read(&path)
        .map(|b| lazyinit_core::paths::sha256_hex(b) == sha256)
        .unwrap_or(false);
    Some(PatchFacts {
        url: same.then(|| file_url(&absolute(&path))),
        name,
        sha256,
    })
}

fn manifest_facts(m: &Manifest, dir: &Path) -> ManifestFacts {
    ManifestFacts {
        source_version: m.source_version.clone(),
        source_identity: m.source_identity.clone(),
        variant_method: m.variant_method.to_string(),
        patch: patch_facts(m),
        compiler: m.compiler.clone(),
        build_seconds: m.build_seconds,
        config: resource(dir, "config"),
        files: [m.image_file.as_str(), "build.log", "fragment.config"]
            .into_iter()
            .filter_map(|n| resource(dir, n))
            .collect(),
        misc: ManifestMisc {
            cache_key: m.cache_key.clone(),
            config_sha256: m.config_sha256.clone(),
            fragment_sha256: m.fragment_sha256.clone(),
            image_sha256: m.image_sha256.clone(),
            image_bytes: m.image_bytes,
            built_at: m
                .built_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            recipe_version: m.recipe_version,
        },
    }
}

/// Every complete build in the cache with its directory.
fn cached_builds(cache_dir: &Path) -> Vec<(Manifest, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(cache::builds_dir(cache_dir)) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| {
            let dir = e.path();
            cache::load(&dir).map(|(m, _)| (m, dir))
        })
        .collect()
}

/// The build a key names: same source, release, arch, HZ, variant and
/// profile (`profile`: the key's), the newest made before the first run on
/// it started.
fn find<'a>(
    builds: &'a [(Manifest, PathBuf)],
    key: &BuildKey,
    profile: Option<KernelProfile>,
    first_start: &str,
) -> Option<&'a (Manifest, PathBuf)> {
    // started_at is cut to whole seconds; a kernel built in that second counts.
    let before =
        chrono::DateTime::parse_from_rfc3339(first_start).ok()? + chrono::Duration::seconds(1);
    let k = &key.kernel;
    builds
        .iter()
        .filter(|(m, _)| {
            m.id.as_row()
                == RowKernel {
                    profile,
                    ..k.clone()
                }
                && m.kernel_release == key.kernel_release
                && m.built_at < before
        })
        .max_by_key(|(m, _)| m.built_at)
}

/// What the cache says about each kernel the rows ran. The profile is the
/// rows' (`kernel_profile`); rows written before that column take their
/// provider's, asked once per kernel.
pub fn kernel_facts(rows: &[LoadedRow], cache_dir: &Path) -> BTreeMap<BuildKey, KernelFacts> {
    let plain: Vec<_> = rows.iter().map(|l| l.row.clone()).collect();
    let builds = cached_builds(cache_dir);
    kcidb::build_keys(&plain)
        .into_iter()
        .map(|(key, first_start)| {
            let profile = key
                .kernel
                .profile
                .or_else(|| super::providers::kernel_profile(key.provider.as_str()));
            let facts = KernelFacts {
                profile: profile.map(|p| p.to_string()),
                debian_package: key
                    .kernel
                    .source
                    .kernel_source()
                    .and_then(lazyinit_kernel::debian::package_for)
                    .map(|pkg| pkg.name.to_string()),
                manifest: find(&builds, &key, profile, &first_start)
                    .map(|(m, d)| manifest_facts(m, d)),
            };
            (key, facts)
        })
        .collect()
}

/// Each cell's raw files (console.log, trace.txt, groups.csv, ...). A
/// rerun cell's folder holds its latest run, so only that row gets them.
pub fn run_files(rows: &[LoadedRow]) -> HashMap<RowKey, Vec<Resource>> {
    let mut latest: HashMap<PathBuf, &LoadedRow> = HashMap::new();
    for l in rows {
        let dir = l.cell_folder().path().to_path_buf();
        let newer = latest
            .get(&dir)
            .is_none_or(|prev| l.row.started_at >= prev.row.started_at);
        if newer {
            latest.insert(dir, l);
        }
    }
    latest
        .into_iter()
        .filter_map(|(dir, l)| {
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .ok()?
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            // console.log first: it is the test's log.
            names.sort_by_key(|n| (CellFolder::CONSOLE_LOG != *n, n.clone()));
            let files: Vec<Resource> = names.iter().filter_map(|n| resource(&dir, n)).collect();
            (!files.is_empty()).then(|| (row_key(&l.row), files))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patches_dir_holds_the_variant_patches() {
        for p in lazyinit_kernel::variant::PATCHES {
            let text = std::fs::read_to_string(patches_dir().join(p.name)).unwrap();
            assert_eq!(text, p.text, "{}", p.name);
        }
    }
}
