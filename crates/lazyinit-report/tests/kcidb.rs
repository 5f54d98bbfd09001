//! The KCIDB export of a small fixture with every kind of row (measured,
//! failed then rerun, interrupted, ok without a per-group time, another
//! provider and source), with and without kernel cache facts. Validation
//! with kcidb-io's own validator is in lazyinit-bench's tests/kcidb_cli.rs.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use lazyinit_core::results::ResultRow;
use lazyinit_core::{Arch, Variant};
use lazyinit_report::input::load;
use lazyinit_report::kcidb::types::ManifestMisc;
use lazyinit_report::kcidb::{
    build_keys, export, render, row_key, Inputs, KernelFacts, ManifestFacts, PatchFacts, Resource,
};

fn rows() -> Vec<ResultRow> {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kcidb/results.csv");
    load(&[p]).unwrap().into_iter().map(|l| l.row).collect()
}

fn res(name: &str, dir: &str) -> Resource {
    Resource {
        name: name.into(),
        url: format!("file:///cache/kernel/builds/{dir}/{name}"),
    }
}

fn manifest(dir: &str, image: &str, patch: Option<PatchFacts>) -> ManifestFacts {
    ManifestFacts {
        source_version: "6.1.192".into(),
        source_identity: format!("sha256:{}", "5".repeat(64)),
        variant_method: if patch.is_some() {
            "reverted"
        } else {
            "as-released"
        }
        .into(),
        patch,
        compiler: "gcc (Debian 12.2.0-14+deb12u1) 12.2.0".into(),
        build_seconds: 407.25,
        config: Some(res("config", dir)),
        files: vec![res(image, dir), res("build.log", dir)],
        misc: ManifestMisc {
            cache_key: "c".repeat(64),
            config_sha256: "1".repeat(64),
            fragment_sha256: "2".repeat(64),
            image_sha256: "3".repeat(64),
            image_bytes: 1_960_000,
            built_at: "2026-11-29T23:50:00Z".into(),
            recipe_version: 1,
        },
    }
}

/// Two of the kernels in the cache: x86_64 without the fix (reverted by a
/// patch) and arm64 with it (as released); the others are not.
fn kernels(rows: &[ResultRow]) -> BTreeMap<lazyinit_report::kcidb::BuildKey, KernelFacts> {
    build_keys(rows)
        .into_keys()
        .map(|k| {
            let profile = Some(if k.provider == "ec2" { "cloud" } else { "qemu" }.to_string());
            let debian = (k.kernel.source == "debian-6.1").then(|| "linux-source-6.1".to_string());
            let m = match (k.kernel.arch, k.kernel.variant, k.kernel.source.to_string().as_str(), k.kernel.hz.get()) {
                (Arch::X86_64, Variant::NoFix, "debian-6.1", 250) => Some(manifest(
                    "debian-6.1-x86_64-hz250-nofix-qemu-cccc",
                    "bzImage",
                    Some(PatchFacts {
                        name: "debian-6.1-revert-fix.patch".into(),
                        sha256: "4".repeat(64),
                        url: Some("file:///src/lazyinit-bench/kernels/patches/debian-6.1-revert-fix.patch".into()),
                    }),
                )),
                (Arch::Arm64, Variant::Fix, "debian-6.1", 100) => {
                    Some(manifest("debian-6.1-arm64-hz100-fix-qemu-cccc", "Image", None))
                }
                _ => None,
            };
            (
                k,
                KernelFacts {
                    profile,
                    debian_package: debian,
                    manifest: m,
                },
            )
        })
        .collect()
}

fn report_json(with_facts: bool) -> String {
    let rows = rows();
    let k = if with_facts {
        kernels(&rows)
    } else {
        BTreeMap::new()
    };
    let mut files = HashMap::new();
    files.insert(
        row_key(&rows[0]),
        vec![
            Resource {
                name: "console.log".into(),
                url: "file:///results/nightly-1/qemu-x86_64-debian-6.1-hz250-nofix-2TiB-r1/console.log".into(),
            },
            Resource {
                name: "groups.csv".into(),
                url: "file:///results/nightly-1/qemu-x86_64-debian-6.1-hz250-nofix-2TiB-r1/groups.csv".into(),
            },
        ],
    );
    let inputs = Inputs {
        rows: &rows,
        kernels: &k,
        files: &files,
    };
    render(&export(&inputs, "lazyinit_bench").unwrap())
}

#[test]
fn kcidb_fixture_with_kernel_facts() {
    insta::assert_snapshot!("kcidb_with_kernel_facts", report_json(true));
}

#[test]
fn kcidb_fixture_from_the_csv_alone() {
    insta::assert_snapshot!("kcidb_csv_alone", report_json(false));
}

#[test]
fn ids_are_unique_and_stable_and_facts_do_not_change_them() {
    let ids = |json: &str| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        ["checkouts", "builds", "tests"]
            .iter()
            .flat_map(|k| v[k].as_array().unwrap().clone())
            .map(|o| o["id"].as_str().unwrap().to_string())
            .collect()
    };
    let a = ids(&report_json(true));
    let mut unique = a.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), a.len(), "duplicate ids");
    assert_eq!(a, ids(&report_json(true)));
    assert_eq!(a, ids(&report_json(false)));
    assert!(a.iter().all(|i| i.starts_with("lazyinit_bench:")));
}

#[test]
fn only_measured_rows_have_numbers() {
    let v: serde_json::Value = serde_json::from_str(&report_json(true)).unwrap();
    let tests = v["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 6 * 3);
    for t in tests {
        let st = t["status"].as_str().unwrap();
        let row = t["misc"]["row_status"].as_str().unwrap();
        assert_eq!(t.get("number").is_some(), st == "DONE", "{t}");
        match row {
            "failed" => assert_eq!(st, "ERROR"),
            "interrupted" => assert_eq!(st, "MISS"),
            _ => assert!(st == "DONE" || st == "ERROR"),
        }
    }
    // The failed run and its rerun are two tests of one build.
    let ids: Vec<&str> = tests
        .iter()
        .filter(|t| t["misc"]["cell_id"] == "qemu-x86_64-debian-6.1-hz250-fix-2TiB-r1")
        .map(|t| t["build_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 6);
    assert!(ids
        .iter()
        .all(|b| *b == "lazyinit_bench:debian-6.1@6.1.192+fix/x86_64/hz250/qemu"));
}
