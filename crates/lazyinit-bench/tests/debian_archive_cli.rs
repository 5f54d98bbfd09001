//! Debian's archive at the command line, for real: `kernel sources` reads
//! every suite from bullseye to sid and experimental through the harness's
//! private apt configuration (signatures and sha256 checked by apt), and
//! `plan` pins `debian:` sources to the exact package before anything is
//! planned. One cache for the file's tests, so the lists are read once
//! (some 40 MB, about 10 s). Nothing here downloads a kernel.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lazyinit-bench"))
}

/// The file's cache, its lists read by the first test that asks.
fn cache() -> &'static Path {
    static CACHE: OnceLock<tempfile::TempDir> = OnceLock::new();
    CACHE.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

fn bench(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("LAZYINIT_CACHE_DIR", cache())
        .env_remove("LAZYINIT_DEBIAN_MIRROR")
        .output()
        .unwrap()
}

fn offers() -> Vec<serde_json::Value> {
    static OFFERS: OnceLock<Vec<serde_json::Value>> = OnceLock::new();
    OFFERS
        .get_or_init(|| {
            let o = bench(&["kernel", "sources", "--json"]);
            assert!(
                o.status.success(),
                "{}",
                lazyinit_core::testing::output_text(&o)
            );
            serde_json::from_slice(&o.stdout).unwrap()
        })
        .clone()
}

/// Every series the harness measures is there, each version once with
/// the suites that have it, the newest first, sized, none cached yet.
#[test]
fn sources_lists_every_series_from_5_10_to_7_3() {
    let all = offers();
    let series =
        |s: &str| -> Vec<&serde_json::Value> { all.iter().filter(|o| o["series"] == s).collect() };
    for s in ["5.10", "6.1", "6.12", "7.2", "7.3"] {
        let of = series(s);
        assert!(!of.is_empty(), "no {s} in {all:?}");
        for o in &of {
            assert_eq!(o["package"], format!("linux-source-{s}"));
            assert!(o["size"].as_u64().unwrap() > 50 << 20, "{o}");
            assert!(!o["suites"].as_array().unwrap().is_empty(), "{o}");
            assert_eq!(o["cached"], false);
            assert_eq!(
                o["source"],
                format!("debian:{}", o["version"].as_str().unwrap())
            );
        }
    }
    assert!(all.len() > 30, "{} versions", all.len());
    let suites: std::collections::BTreeSet<&str> = all
        .iter()
        .flat_map(|o| {
            o["suites"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap())
        })
        .collect();
    for s in [
        "bullseye-security",
        "bookworm",
        "trixie-backports",
        "sid",
        "experimental",
    ] {
        assert!(suites.contains(s), "{suites:?}");
    }
}

/// `debian:7.2` is the newest 7.2 the archive lists, pinned in the plan
/// (its cells and run id name the exact package), and said on stderr.
#[test]
fn plan_pins_a_series_to_its_newest_package() {
    let newest = offers().into_iter().find(|o| o["series"] == "7.2").unwrap();
    let exact = format!("debian:{}", newest["version"].as_str().unwrap());
    let o = bench(&[
        "plan",
        "--arch",
        "x86_64",
        "--hz",
        "250",
        "--variant",
        "fix",
        "--size",
        "64GiB",
        "--source",
        "debian:7.2",
        "--json",
    ]);
    let text = lazyinit_core::testing::output_text(&o);
    assert!(o.status.success(), "{text}");
    assert!(text.contains(&format!("debian:7.2 is {exact}")), "{text}");
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cells = plan["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 1);
    assert_eq!(cells[0]["cell"]["source"], exact, "{}", cells[0]);
}

/// A version no suite has is exit 2, one line naming the nearest there
/// are; a series Debian never packaged names the series there are.
#[test]
fn a_version_no_suite_has_is_refused_naming_the_nearest() {
    offers();
    let o = bench(&[
        "plan",
        "--arch",
        "x86_64",
        "--hz",
        "250",
        "--variant",
        "fix",
        "--size",
        "64GiB",
        "--source",
        "debian:7.2.7",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("error: debian:7.2.7: no suite the harness reads has that version of linux-source-7.2; the nearest: debian:7.2."),
        "{err}"
    );
    let o = bench(&[
        "plan",
        "--arch",
        "x86_64",
        "--hz",
        "250",
        "--variant",
        "fix",
        "--size",
        "64GiB",
        "--source",
        "debian:4.19",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("has no linux-source-4.19") && err.contains("5.10, 6.1, 6.12, 7.2, 7.3"),
        "{err}"
    );
}
