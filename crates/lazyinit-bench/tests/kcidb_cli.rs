//! `report --format kcidb` on real results: the committed full-scale runs,
//! runs with failed and interrupted rows, and a kernel cache with manifests;
//! every export must pass kcidb-io's validator. (The fresh smoke run's
//! export is checked at the end of run_e2e's smoke test.)

mod kcidb_support;

use std::path::{Path, PathBuf};

use kcidb_support::{export, export_valid, validate};
use serde_json::Value;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lazyinit-bench"))
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn tests(v: &Value) -> &Vec<Value> {
    v["tests"].as_array().unwrap()
}

/// An empty kernel cache, so that this machine's builds stay out.
fn no_cache() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn committed_full_scale_runs_export_valid_reports() {
    let cache = no_cache();
    let c = cache.path().to_str().unwrap();
    for run in [
        "archive/reported-ebs",
        "archive/reported-ebs-fix",
        "archive/reported-full",
    ] {
        let csv = repo(&format!("results/{run}/results.csv"));
        let v = export_valid(&bin(), &csv, &["--cache-dir", c]);
        let rows = lazyinit_core::results::read_rows(&csv).unwrap();
        assert!(!rows.is_empty(), "{run}");
        assert_eq!(tests(&v).len(), rows.len() * 3, "{run}");
        assert!(tests(&v).iter().all(|t| t["status"] == "DONE"), "{run}");
    }
    // The README's table: arm64 HZ=100 without the fix, 2 TiB, 1804.8 s
    // against 1842 s in 2021.
    let v = export_valid(
        &bin(),
        &repo("results/archive/reported-ebs/results.csv"),
        &["--cache-dir", c],
    );
    assert_eq!(v["builds"].as_array().unwrap().len(), 4);
    assert_eq!(v["checkouts"].as_array().unwrap().len(), 2);
    let t = tests(&v)
        .iter()
        .find(|t| {
            t["path"] == "ext4.lazyinit.2TiB.lazyinit_s"
                && t["misc"]["cell_id"] == "qemu-arm64-debian-6.1-hz100-nofix-2TiB-r1"
        })
        .unwrap();
    assert!((t["number"]["value"].as_f64().unwrap() - 1804.763664).abs() < 1e-6);
    assert_eq!(t["number"]["unit"], "s");
    assert_eq!(t["misc"]["reported_2021"]["value"], 1842.0);
    assert_eq!(t["environment"]["misc"]["storage_profile"], "ebs");
    assert_eq!(
        t["build_id"],
        "lazyinit_bench:debian-6.1@6.1.192+nofix/arm64/hz100/qemu"
    );
}

#[test]
fn runs_with_failed_and_interrupted_rows_export_valid_reports() {
    let cache = no_cache();
    let c = cache.path().to_str().unwrap();
    let fixtures = repo("crates/lazyinit-report/tests/fixtures");
    let v = export_valid(
        &bin(),
        &fixtures.join("qemu-64g/results.csv"),
        &["--cache-dir", c],
    );
    let errors: Vec<&Value> = tests(&v)
        .iter()
        .filter(|t| t["status"] == "ERROR")
        .collect();
    assert_eq!(errors.len(), 3, "one failed row, three metrics");
    assert!(errors.iter().all(|t| t.get("number").is_none()));
    assert!(errors[0]["log_excerpt"]
        .as_str()
        .unwrap()
        .contains("did not answer SSH"));
    // groups.csv beside two of its cells: listed as the tests' files.
    let with_files = tests(&v)
        .iter()
        .filter(|t| t["output_files"][0]["name"] == "groups.csv")
        .count();
    assert_eq!(with_files, 2 * 3);

    let v = export_valid(
        &bin(),
        &fixtures.join("kcidb/results.csv"),
        &["--cache-dir", c, "--origin", "aws_ec2_lab"],
    );
    let count = |s: &str| tests(&v).iter().filter(|t| t["status"] == s).count();
    assert_eq!((count("DONE"), count("ERROR"), count("MISS")), (10, 5, 3));
    assert!(tests(&v)
        .iter()
        .all(|t| t["id"].as_str().unwrap().starts_with("aws_ec2_lab:")));
}

#[test]
fn reexporting_the_same_rows_gives_the_same_report() {
    let cache = no_cache();
    let c = cache.path().to_str().unwrap();
    let csv = repo("crates/lazyinit-report/tests/fixtures/kcidb/results.csv");
    let a = export(&bin(), &csv, &["--cache-dir", c]);
    let b = export(&bin(), &csv, &["--cache-dir", c]);
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn the_validator_refuses_a_broken_report() {
    // So that the checks above cannot pass by accepting anything.
    let bad = br#"{"version": {"major": 5, "minor": 3},
        "tests": [{"id": "lazyinit_bench:t", "origin": "lazyinit_bench",
                   "build_id": "lazyinit_bench:b", "status": "DONE",
                   "number": {"value": null}}]}"#;
    assert!(validate(bad).is_err());
    let bad_origin = br#"{"version": {"major": 5, "minor": 3},
        "checkouts": [{"id": "Lazy:c", "origin": "Lazy"}]}"#;
    assert!(validate(bad_origin).is_err());
}

#[test]
fn a_bad_origin_is_bad_input() {
    let out = export(
        &bin(),
        &repo("results/archive/reported-ebs/results.csv"),
        &["--origin", "Lazy-Init"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a KCIDB origin name"));
    assert!(out.stdout.is_empty());
}

/// A kernel cache with the x86_64 no-fix kernel of the fixture, as
/// `kernel build` leaves it (manifest.json, image, config, build.log).
fn cache_with_manifest(cache: &Path) {
    let dir = cache.join("kernel/builds/debian-6.1-x86_64-hz250-nofix-qemu-0123456789abcdef");
    std::fs::create_dir_all(&dir).unwrap();
    let image = vec![0u8; 4096];
    std::fs::write(dir.join("bzImage"), &image).unwrap();
    std::fs::write(dir.join("config"), "CONFIG_HZ_250=y\nCONFIG_HZ=250\n").unwrap();
    std::fs::write(dir.join("build.log"), "$ make bzImage\n").unwrap();
    let patch = lazyinit_kernel::variant::PATCHES[0];
    assert_eq!(patch.name, "debian-6.1-revert-fix.patch");
    let manifest = serde_json::json!({
        "arch": "x86_64", "hz": 250, "variant": "nofix", "profile": "qemu",
        "source": "debian-6.1",
        "source_identity": format!("sha256:{}", "5".repeat(64)),
        "source_version": "6.1.192",
        "kernel_release": "6.1.192-lazyinit-hz250-nofix",
        "localversion": "-lazyinit-hz250-nofix",
        "variant_method": "reverted",
        "patch": patch.name,
        "patch_sha256": lazyinit_core::paths::sha256_hex(patch.text),
        "released_variant": "fix",
        "config_sha256": "1".repeat(64),
        "fragment_sha256": "2".repeat(64),
        "image_file": "bzImage",
        "image_sha256": lazyinit_core::paths::sha256_hex(&image),
        "image_bytes": image.len(),
        "compiler": "gcc (Debian 12.2.0-14+deb12u1) 12.2.0",
        "build_seconds": 407.2,
        "built_at": "2026-11-29T23:00:00Z",
        "cache_key": "c".repeat(64),
        "recipe_version": 1
    });
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();
}

#[test]
fn cached_manifests_fill_compiler_files_and_patch_set() {
    let cache = no_cache();
    cache_with_manifest(cache.path());
    let csv = repo("crates/lazyinit-report/tests/fixtures/kcidb/results.csv");
    let v = export_valid(
        &bin(),
        &csv,
        &["--cache-dir", cache.path().to_str().unwrap()],
    );
    let builds = v["builds"].as_array().unwrap();
    let b = builds
        .iter()
        .find(|b| b["id"] == "lazyinit_bench:debian-6.1@6.1.192+nofix/x86_64/hz250/qemu")
        .unwrap();
    assert_eq!(b["compiler"], "gcc (Debian 12.2.0-14+deb12u1) 12.2.0");
    assert_eq!(b["config_name"], "lazyinit-qemu-hz250");
    assert!(b["config_url"].as_str().unwrap().ends_with("/config"));
    let names: Vec<&str> = b["output_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["build.log", "bzImage", "config"]);
    // Other kernels have no manifest here: no compiler, no guessed files.
    assert!(
        builds
            .iter()
            .filter(|b| b.get("compiler").is_some())
            .count()
            == 1
    );
    let c = v["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "lazyinit_bench:debian-6.1@6.1.192+nofix")
        .unwrap();
    assert_eq!(c["misc"]["variant_method"], "reverted");
    assert_eq!(
        c["patchset_files"][0]["name"],
        "debian-6.1-revert-fix.patch"
    );
    let url = c["patchset_files"][0]["url"].as_str().unwrap();
    assert!(
        url.starts_with("file:///") && url.ends_with("kernels/patches/debian-6.1-revert-fix.patch")
    );
    // sha256sum debian-6.1-revert-fix.patch | cut -c-64 | sha256sum
    let sum = lazyinit_core::paths::sha256_hex(lazyinit_kernel::variant::PATCHES[0].text);
    assert_eq!(
        c["patchset_hash"],
        lazyinit_core::paths::sha256_hex(format!("{sum}\n"))
    );
    // A build made after the runs is another build: not attributed.
    let late = no_cache();
    cache_with_manifest(late.path());
    let m = late
        .path()
        .join("kernel/builds/debian-6.1-x86_64-hz250-nofix-qemu-0123456789abcdef/manifest.json");
    let text = std::fs::read_to_string(&m)
        .unwrap()
        .replace("2026-11-29T23:00:00Z", "2026-12-01T00:00:00Z");
    std::fs::write(&m, text).unwrap();
    let v = export_valid(
        &bin(),
        &csv,
        &["--cache-dir", late.path().to_str().unwrap()],
    );
    let builds = v["builds"].as_array().unwrap();
    assert_eq!(builds.len(), 5, "{builds:?}");
    assert!(builds.iter().all(|b| b.get("compiler").is_none()));
}

/// Issue 52: a cell id names a folder beside the results.csv, so a row
/// whose id leaves it is refused by the one reader of results files, on
/// every read: `report --format kcidb` listed the host's `/etc` as the
/// test's output files for a cell id `../../../../etc`. Now exit 2, one
/// line naming the file, the row and what a cell id may hold; nothing on
/// stdout.
#[test]
fn a_cell_id_that_leaves_its_run_folder_is_refused_on_read() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("r");
    std::fs::create_dir_all(&run).unwrap();
    let from = repo("results/quick-shards/unsharded");
    for f in ["results.csv", "spec.toml"] {
        std::fs::copy(from.join(f), run.join(f)).unwrap();
    }
    let csv = run.join("results.csv");
    let good = std::fs::read_to_string(&csv).unwrap();
    let id = lazyinit_core::results::read_rows(&csv).unwrap()[0]
        .cell_id
        .clone();
    for bad in ["../../../../etc", "..", "a/b", ".hidden"] {
        std::fs::write(&csv, good.replacen(&id, bad, 1)).unwrap();
        let o = std::process::Command::new(bin())
            .args(["report", "--format", "kcidb", "--cache-dir"])
            .arg(tmp.path().join("cache"))
            .arg(&csv)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{bad}: {err}");
        let want = format!("{}:2: column `cell_id`: {bad:?} is not a cell id (a cell id is 1 to 200 ASCII letters, digits", csv.display());
        assert!(err.contains(&want), "{bad}: {err}");
        assert!(
            o.stdout.is_empty(),
            "{bad}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}
