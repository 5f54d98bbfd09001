//! The fuzzing of the parsers that read user input (docs/bad-input.md), as
//! a test: `scripts/fuzz.sh` builds the six cargo-fuzz targets (an
//! unoptimised instrumented build, `FUZZ_PROFILE=dev`) and runs each for
//! `FUZZ_SECONDS` (15 s here) from a corpus of the repository's own specs,
//! results, traces and sites. A crash fails the test and leaves its input under
//! `fuzz/artifacts/<target>/`; a missing cargo-fuzz is installed by the
//! script, and a failed install fails the test.
//!
//! It is a test, not a step of `scripts/test.sh`, so that nextest runs it
//! beside the guest tests, whose cores are mostly idle (a guest sleeping,
//! a timer waiting), instead of beside the kernel trees, which keep both
//! cores busy (docs/ci.md).

use std::path::Path;
use std::process::Command;

#[test]
fn every_parser_target_survives_its_fuzzing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let secs = std::env::var("FUZZ_SECONDS").unwrap_or_else(|_| "15".into());
    let profile = std::env::var("FUZZ_PROFILE").unwrap_or_else(|_| "dev".into());
    let out = Command::new("bash")
        .arg(root.join("scripts/fuzz.sh"))
        .current_dir(&root)
        .env("FUZZ_SECONDS", &secs)
        .env("FUZZ_PROFILE", &profile)
        .output()
        .expect("bash runs scripts/fuzz.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert!(
        out.status.success(),
        "scripts/fuzz.sh failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // Every target ran and said so: a script that ran nothing fails here.
    for target in [
        "spec",
        "results_csv",
        "groups",
        "trace",
        "sitedata",
        "shard_env",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("fuzz {target}: Done ")))
            .unwrap_or_else(|| panic!("no run of fuzz target {target}:\n{stdout}\n{stderr}"));
        let runs: u64 = line
            .split_whitespace()
            .nth(3)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no run count in {line:?}"));
        assert!(runs > 0, "fuzz target {target} ran no input: {line}");
    }
}
