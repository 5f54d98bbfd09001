//! `plan` as a user runs it, against what the harness printed before the
//! provider seam (files under tests/golden, made by that binary): the run
//! ids that name results folders (a rerun of the same spec must find its
//! folder to resume) and the plans themselves.

use std::path::PathBuf;
use std::process::Command;

fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `plan ARGS` on one core (`taskset -c 0`): a virtual-clock plan's time
/// is CPU's, shared by the host's cores, so the golden files fix them; and
/// on a kernel cache of the file's own with no kernel in it, so that the
/// line of what the kernels will cost is the same on every host (one for
/// the file: the source tarball's hash, which the cost's cache lookup
/// needs, is then taken once, not once a plan).
fn plan(args: &[&str]) -> String {
    static CACHE: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(|| tempfile::tempdir().unwrap());
    let out = Command::new("taskset")
        .env("LAZYINIT_CACHE_DIR", cache.path())
        .args(["-c", "0"])
        .arg(env!("CARGO_BIN_EXE_lazyinit-bench"))
        .arg("plan")
        .args(args)
        .current_dir(here())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "plan {args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

fn golden(name: &str) -> String {
    std::fs::read_to_string(here().join("tests/golden").join(name)).unwrap()
}

#[test]
fn run_ids_are_those_of_earlier_runs() {
    for (args, run_id) in [
        // quick and nightly: new ids since their clocks (auto, virtual).
        ("quick", "quick-4f6fd2a5"),
        ("reported", "reported-78d5f757"),
        ("smoke", "smoke-c7561cb2"),
        ("calibrate-z1", "calibrate-z1-0b4ea860"),
        ("nightly", "nightly-e244a3f2"),
        ("reported --estimate-after 50", "reported-9bec3024"),
        ("quick --accel tcg", "quick-86c9bb3e"),
        // `none` is the real clock's (quick's auto clock runs arm64 on the
        // virtual one here, which refuses it, as `run` does).
        (
            "reported --storage-profile none --repetitions 2",
            "reported-082b8158",
        ),
        (
            "--arch arm64 --hz 100 --variant nofix --size 2TiB",
            "cell-e7390a8b",
        ),
        ("tests/golden/qemu-config.toml", "golden-qemu-0a11685d"),
        ("tests/golden/ec2.toml", "golden-ec2-9fb660dc"),
    ] {
        let mut a: Vec<&str> = args.split(' ').collect();
        a.push("--json");
        let json: serde_json::Value = serde_json::from_str(&plan(&a)).unwrap();
        assert_eq!(json["run_id"], run_id, "{args}");
    }
}

#[test]
fn plans_print_as_before() {
    // TCG: clock auto is then the virtual clock for both arches, on any
    // host (under `auto`, an x86_64 guest where /dev/kvm opens is planned
    // on the real clock, as KVM may run it).
    assert_eq!(
        plan(&["quick", "--concurrency", "4", "--accel", "tcg"]),
        golden("plan-quick.txt")
    );
    assert_eq!(
        plan(&["reported", "--concurrency", "8"]),
        golden("plan-reported.txt")
    );
    assert_eq!(
        plan(&["nightly", "--concurrency", "8"]),
        golden("plan-nightly.txt")
    );
    assert_eq!(
        plan(&["tests/golden/qemu-config.toml", "--concurrency", "1"]),
        golden("plan-qemu-config.txt")
    );
    // EC2 now also says how many API calls the run makes at least.
    let ec2 = golden("plan-ec2.txt");
    let want = format!("{}; at least 48 API calls\n", ec2.trim_end());
    assert_eq!(plan(&["tests/golden/ec2.toml", "--concurrency", "4"]), want);
}

#[test]
fn json_plan_has_the_provider_and_its_price() {
    let json: serde_json::Value =
        serde_json::from_str(&plan(&["quick", "--concurrency", "4", "--json"])).unwrap();
    assert_eq!(json["provider"], "qemu");
    assert_eq!(json["kernel_profile"], "qemu");
    assert_eq!(json["memory_mib"], 3248);
    let json: serde_json::Value =
        serde_json::from_str(&plan(&["tests/golden/ec2.toml", "--json"])).unwrap();
    assert_eq!(json["kernel_profile"], "cloud");
    assert_eq!(json["api_calls"], 48);
    // Machines elsewhere take no memory here: every cell at once.
    assert_eq!(json["concurrency"], 4);
}
