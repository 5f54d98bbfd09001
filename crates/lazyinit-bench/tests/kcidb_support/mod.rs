//! KCIDB exports as a nightly job makes them, checked by KernelCI's own
//! validator: `kcidb_io.schema.LATEST.validate` from the `kcidb-io` package,
//! installed by scripts/kcidb-validator.sh (scripts/test.sh runs it). A
//! missing validator fails the test; it never skips.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub fn python() -> PathBuf {
    lazyinit_core::paths::cache_dir().join("venv-kcidb/bin/python")
}

const VALIDATE: &str = r#"
import json, sys
from kcidb_io.schema import LATEST
data = json.load(sys.stdin)
LATEST.validate(data)
print(f"v{LATEST.major}.{LATEST.minor}")
"#;

/// Runs kcidb-io's validator on a report: Ok("v5.3") or its refusal.
pub fn validate(json: &[u8]) -> Result<String, String> {
    let py = python();
    assert!(
        py.exists(),
        "the KCIDB validator is not installed ({} is missing): run scripts/kcidb-validator.sh",
        py.display()
    );
    let mut child = Command::new(&py)
        .args(["-c", VALIDATE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(json).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    }
}

/// `lazyinit-bench report --format kcidb <csv> [args]`, the report on stdout.
pub fn export(bin: &Path, csv: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(["report", "--format", "kcidb"])
        .arg(csv)
        .args(args)
        .output()
        .unwrap()
}

/// Exports `csv`, asserts success and the validator's approval, and
/// returns the report.
pub fn export_valid(bin: &Path, csv: &Path, args: &[&str]) -> serde_json::Value {
    let out = export(bin, csv, args);
    assert!(
        out.status.success(),
        "export of {} failed: {}",
        csv.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Err(e) = validate(&out.stdout) {
        panic!("kcidb-io refused the export of {}:\n{e}", csv.display());
    }
    serde_json::from_slice(&out.stdout).unwrap()
}
