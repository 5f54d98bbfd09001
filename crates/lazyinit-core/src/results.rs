//! Result rows: the stable CSV interface nightly jobs parse.
//!
//! One row per cell run, appended and flushed (fsync) as soon as the run
//! ends. Columns are documented in the README ("Result CSV"); add new ones
//! only at the end, never rename or reorder.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cell::{Arch, Hz, Variant};

/// How a cell run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Ok,
    Failed,
    Interrupted,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Interrupted => "interrupted",
        })
    }
}

/// How the `accel` column marks a row measured on a local twin of a cloud
/// machine (the EC2 provider's code path with a QEMU guest playing the
/// instance): never to be taken, or pooled, for a real instance's row.
pub const TWIN_ACCEL_PREFIX: &str = "twin-";

/// Whether an `accel` value is a twin's.
pub fn is_twin(accel: &str) -> bool {
    accel.starts_with(TWIN_ACCEL_PREFIX)
}

/// One measurement. Times are seconds unless the name says otherwise.
/// Optional fields are empty in the CSV when unknown (for example on a
/// failed run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub run_id: String,
    pub cell_id: String,
    /// `qemu` or `ec2`.
    pub provider: String,
    /// What ran the guest: `qemu-x86_64` / `qemu-aarch64`, or an instance type.
    pub machine: String,
    /// `kvm` or `tcg` (QEMU), `nitro` (an EC2 instance), or `twin-tcg`
    /// (provider `ec2` played by a local QEMU guest: see [`is_twin`]).
    pub accel: String,
    pub arch: Arch,
    /// `uname -r` inside the guest.
    pub kernel_release: String,
    /// `debian-6.1`, `debian-6.12`, a version, or a path.
    pub kernel_source: String,
    /// HZ read back from the booted guest (not the asked one).
    pub hz: Hz,
    pub variant: Variant,
    pub wait_mult: u32,
    pub volume_bytes: u64,
    /// Block groups of the filesystem (from dumpe2fs).
    pub groups: Option<u64>,
    pub mkfs_s: Option<f64>,
    pub mount_s: Option<f64>,
    /// Guest clock, from the mount to the thread's exit.
    pub lazyinit_s: Option<f64>,
    /// Host clock, from the mount to the poll that saw the thread gone.
    pub lazyinit_poll_s: Option<f64>,
    /// Trace timestamps, first to last group, divided by groups - 1.
    pub ms_per_group: Option<f64>,
    pub traced_groups: Option<u64>,
    pub repetition: u32,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub harness_version: String,
    pub status: Status,
    /// One line; empty when status is ok.
    pub error: String,
    /// `current_clocksource` of the guest.
    pub clocksource: String,
    /// Sleep between groups in ticks, inferred from ms_per_group.
    pub sleep_ticks: Option<u64>,
    /// Seconds from launch until SSH answered.
    pub boot_s: Option<f64>,
    /// Guest clock, mount to the first traced group (start delay + prefetch).
    pub first_group_s: Option<f64>,
    /// Storage latency profile applied to the volume (`none` if none).
    pub storage_profile: String,
    /// How many cells ran at the same time as this one (1 = alone).
    pub concurrency: u32,
    /// The mkfs.ext4 command line run in the guest.
    pub mkfs_cmd: String,
    /// The measured first zeroing (z1), ms, from the trace: the lazy-init
    /// thread's journal start to its first group event. With the fix it
    /// sets the sleep (L = floor(W z1 HZ)).
    #[serde(default)]
    pub z1_ms: Option<f64>,
    /// The z1 the storage hold was calibrated for (`ebs`), ms.
    #[serde(default)]
    pub z1_target_ms: Option<f64>,
    /// The guest's own part of a first zeroing, as the calibration
    /// measured it on this guest, ms.
    #[serde(default)]
    pub guest_part_ms: Option<f64>,
    /// The hold of each zero request on the measured volume, ms.
    #[serde(default)]
    pub zero_hold_ms: Option<f64>,
    /// Median zeroing time over all groups, ms.
    #[serde(default)]
    pub zero_median_ms: Option<f64>,
    /// Measured mounts it took to get a first zeroing inside the z1
    /// target's L interval (1: the first; `ebs` only).
    #[serde(default)]
    pub z1_attempts: Option<u32>,
    /// `true` when `lazyinit_s` (and `ms_per_group`, `sleep_ticks`) is an
    /// early-stop estimate from the first `estimate_groups` groups, not a
    /// measurement to the thread's exit (README, "Estimates").
    #[serde(default)]
    pub estimated: bool,
    /// The `estimate-after` the run asked for (also on rows whose cycle
    /// never locked, which ran to the end and are measured).
    #[serde(default)]
    pub estimate_after: Option<u64>,
    /// Groups traced when the estimate was made.
    #[serde(default)]
    pub estimate_groups: Option<u64>,
    /// The locked cycle the rest was predicted at, ms.
    #[serde(default)]
    pub estimate_cycle_ms: Option<f64>,
    /// 95% prediction interval of an estimated `lazyinit_s`.
    #[serde(default)]
    pub lazyinit_lo_s: Option<f64>,
    #[serde(default)]
    pub lazyinit_hi_s: Option<f64>,
}

impl ResultRow {
    /// The column names, in order, as written in the header.
    pub fn columns() -> Vec<&'static str> {
        COLUMNS.to_vec()
    }
}

/// Keep in the same order as the struct fields (a unit test checks).
pub const COLUMNS: &[&str] = &[
    "run_id",
    "cell_id",
    "provider",
    "machine",
    "accel",
    "arch",
    "kernel_release",
    "kernel_source",
    "hz",
    "variant",
    "wait_mult",
    "volume_bytes",
    "groups",
    "mkfs_s",
    "mount_s",
    "lazyinit_s",
    "lazyinit_poll_s",
    "ms_per_group",
    "traced_groups",
    "repetition",
    "started_at",
    "harness_version",
    "status",
    "error",
    "clocksource",
    "sleep_ticks",
    "boot_s",
    "first_group_s",
    "storage_profile",
    "concurrency",
    "mkfs_cmd",
    "z1_ms",
    "z1_target_ms",
    "guest_part_ms",
    "zero_hold_ms",
    "zero_median_ms",
    "z1_attempts",
    "estimated",
    "estimate_after",
    "estimate_groups",
    "estimate_cycle_ms",
    "lazyinit_lo_s",
    "lazyinit_hi_s",
];

#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("cannot open results file {path}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write results file {path}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: header does not match this harness's columns (expected `{expected}`); write to a new results folder")]
    Header { path: PathBuf, expected: String },
    #[error("{path}:{line}: {message}")]
    Parse {
        path: PathBuf,
        line: u64,
        message: String,
    },
}

/// Appends rows to a CSV file, writing the header when the file is new and
/// flushing every row to disk before returning.
pub struct ResultsWriter {
    path: PathBuf,
    file: File,
}

impl ResultsWriter {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ResultsError> {
        let path = path.as_ref().to_path_buf();
        let open_err = |source| ResultsError::Open {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(open_err)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&path)
            .map_err(open_err)?;
        let len = file.metadata().map_err(open_err)?.len();
        let header = COLUMNS.join(",");
        if len == 0 {
            writeln!(file, "{header}")
                .and_then(|_| file.sync_data())
                .map_err(|source| ResultsError::Write {
                    path: path.clone(),
                    source,
                })?;
        } else {
            let mut first = String::new();
            BufReader::new(File::open(&path).map_err(open_err)?)
                .read_line(&mut first)
                .map_err(open_err)?;
            if first.trim_end() != header {
                return Err(ResultsError::Header {
                    path,
                    expected: header,
                });
            }
        }
        Ok(Self { path, file })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn append(&mut self, row: &ResultRow) -> Result<(), ResultsError> {
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        w.serialize(row).map_err(|e| ResultsError::Write {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        let bytes = w.into_inner().map_err(|e| ResultsError::Write {
            path: self.path.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        // One write per row keeps rows whole even if two writers append.
        self.file
            .write_all(&bytes)
            .and_then(|_| self.file.sync_data())
            .map_err(|source| ResultsError::Write {
                path: self.path.clone(),
                source,
            })
    }
}

/// Reads every row of a results CSV, with line-numbered errors.
pub fn read_rows(path: impl AsRef<Path>) -> Result<Vec<ResultRow>, ResultsError> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|source| ResultsError::Open {
        path: path.into(),
        source,
    })?;
    read_rows_from(file, path)
}

pub fn read_rows_from(r: impl std::io::Read, path: &Path) -> Result<Vec<ResultRow>, ResultsError> {
    let mut rdr = csv::ReaderBuilder::new().flexible(false).from_reader(r);
    let mut rows = Vec::new();
    for rec in rdr.deserialize::<ResultRow>() {
        match rec {
            Ok(row) => rows.push(row),
            Err(e) => {
                let line = e.position().map(|p| p.line()).unwrap_or(0);
                let message = match e.kind() {
                    csv::ErrorKind::Deserialize { err, .. } => match err.field() {
                        Some(i) => format!(
                            "column `{}`: {}",
                            COLUMNS.get(i as usize).copied().unwrap_or("?"),
                            err.kind()
                        ),
                        None => err.kind().to_string(),
                    },
                    _ => e.to_string(),
                };
                return Err(ResultsError::Parse {
                    path: path.into(),
                    line,
                    message,
                });
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> ResultRow {
        ResultRow {
            run_id: "r1".into(),
            cell_id: "qemu-x86_64-debian-6.1-hz100-nofix-64GiB-r1".into(),
            provider: "qemu".into(),
            machine: "qemu-x86_64".into(),
            accel: "tcg".into(),
            arch: Arch::X86_64,
            kernel_release: "6.1.0-lazyinit-hz100-nofix".into(),
            kernel_source: "debian-6.1".into(),
            hz: Hz::new(100).unwrap(),
            variant: Variant::NoFix,
            wait_mult: 10,
            volume_bytes: 64 << 30,
            groups: Some(512),
            mkfs_s: Some(1.25),
            mount_s: Some(0.04),
            lazyinit_s: Some(60.6),
            lazyinit_poll_s: Some(61.0),
            ms_per_group: Some(109.5),
            traced_groups: Some(512),
            repetition: 1,
            started_at: "2026-11-29T20:00:00Z".into(),
            harness_version: "0.1.0".into(),
            status: Status::Ok,
            error: String::new(),
            clocksource: "tsc".into(),
            sleep_ticks: Some(10),
            boot_s: Some(1.1),
            first_group_s: Some(3.0),
            storage_profile: "none".into(),
            concurrency: 1,
            mkfs_cmd: "mkfs.ext4 -F /dev/vda".into(),
            z1_ms: Some(3.41),
            z1_target_ms: Some(3.4),
            guest_part_ms: Some(1.02),
            zero_hold_ms: Some(2.38),
            zero_median_ms: Some(3.2),
            z1_attempts: Some(1),
            estimated: false,
            estimate_after: None,
            estimate_groups: None,
            estimate_cycle_ms: None,
            lazyinit_lo_s: None,
            lazyinit_hi_s: None,
        }
    }

    #[test]
    fn columns_match_struct_order() {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(sample()).unwrap();
        let out = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(out.lines().next().unwrap(), COLUMNS.join(","));
    }

    #[test]
    fn append_round_trips_and_keeps_header_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/results.csv");
        ResultsWriter::open(&p).unwrap().append(&sample()).unwrap();
        let mut second = sample();
        second.status = Status::Failed;
        second.error = "guest, said \"no\"".into();
        second.lazyinit_s = None;
        ResultsWriter::open(&p).unwrap().append(&second).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.matches("run_id,").count(), 1);
        let rows = read_rows(&p).unwrap();
        assert_eq!(rows, vec![sample(), second]);
    }

    /// Results written before the calibration and the estimate columns
    /// existed still read, as measurements.
    #[test]
    fn older_files_without_the_last_columns_read() {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(sample()).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        for last in ["mkfs_cmd", "z1_attempts"] {
            let keep = COLUMNS.iter().position(|c| *c == last).unwrap() + 1;
            let cut = |l: &str| l.split(',').take(keep).collect::<Vec<_>>().join(",");
            let old: String = text.lines().map(|l| cut(l) + "\n").collect();
            assert!(old.lines().next().unwrap().ends_with(&format!(",{last}")));
            let rows = read_rows_from(old.as_bytes(), Path::new("old.csv")).unwrap();
            assert_eq!(rows[0].mkfs_cmd, sample().mkfs_cmd);
            assert!(!rows[0].estimated);
            assert_eq!(rows[0].estimate_groups, None);
        }
    }

    #[test]
    fn estimated_rows_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.csv");
        let mut e = sample();
        e.estimated = true;
        e.estimate_after = Some(50);
        e.estimate_groups = Some(75);
        e.estimate_cycle_ms = Some(44.0);
        e.lazyinit_lo_s = Some(726.0);
        e.lazyinit_hi_s = Some(729.5);
        ResultsWriter::open(&p).unwrap().append(&e).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .ends_with(",true,50,75,44.0,726.0,729.5"),
            "{text}"
        );
        assert_eq!(read_rows(&p).unwrap(), vec![e]);
    }

    #[test]
    fn foreign_header_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.csv");
        std::fs::write(&p, "a,b\n1,2\n").unwrap();
        assert!(matches!(
            ResultsWriter::open(&p),
            Err(ResultsError::Header { .. })
        ));
    }

    #[test]
    fn bad_value_reports_line_and_column() {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(sample()).unwrap();
        w.serialize(sample()).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        let broken = text.replacen(",tcg,x86_64,", ",tcg,sparc,", 2).replacen(
            ",tcg,sparc,",
            ",tcg,x86_64,",
            1,
        );
        let err = read_rows_from(broken.as_bytes(), Path::new("x.csv")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("x.csv:3: "), "{msg}");
        assert!(msg.contains("sparc"), "{msg}");
    }
}
