//! Result rows: the stable CSV interface nightly jobs parse.
//!
//! One row per cell run, appended and flushed (fsync) as soon as the run
//! ends. Columns are documented in the README ("Result CSV"); add new ones
//! only at the end, never rename or reorder.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cell::{Arch, Hz, Variant};
use crate::identity::{
    Accel, Axes, Knobs, MachineName, ProviderName, RowAxes, RowKernel, SourceId, StorageId, Testbed,
};
use crate::provider::KernelProfile;
use crate::size::ByteSize;

mod check;
pub use check::MAX_TIME_S;

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

/// Whether an `accel` is a local twin's of a cloud machine (the EC2
/// provider's code path with a QEMU guest playing the instance): never to
/// be taken, or pooled, for a real instance's row ([`Accel::Twin`]).
pub fn is_twin(accel: &Accel) -> bool {
    accel.is_twin()
}

/// One cell run: what ran, how it ended, and what it measured. Times are
/// seconds unless the name says otherwise. Optional fields are empty in the
/// CSV when unknown (for example on a failed run).
///
/// On disk the row is flat, one column per field in [`COLUMNS`] order (the
/// measured columns sit between the others); see [`Flat`].
#[derive(Debug, Clone, PartialEq)]
pub struct ResultRow {
    pub run_id: String,
    pub cell_id: String,
    /// What ran the guest: the provider (`qemu`, `ec2`), the machine
    /// (`qemu-x86_64` / `qemu-aarch64`, or an instance type), the accel
    /// (`kvm`, `tcg`, `nitro`, or a twin's: see [`is_twin`]) and the
    /// storage profile applied to the volume (`none` if none).
    pub testbed: Testbed,
    /// The cell's axes: arch, source (`debian-6.1`, a version, a path, or
    /// `git:<commit>`), HZ and variant of the kernel under test (the guest
    /// protocol checks HZ), volume and wait multiplier.
    pub axes: RowAxes,
    /// The kernel's configuration (`qemu`/`cloud`); `None` in rows written
    /// before the `kernel_profile` column.
    pub kernel_profile: Option<KernelProfile>,
    /// The git tree the kernel was built from, by its identity
    /// (`tree-<12 hex>`: see [`crate::paths::tree_name`]); empty for a
    /// kernel of no git tree, and in rows written before the column.
    pub kernel_tree: String,
    /// `uname -r` of the kernel under test (the guest protocol checks
    /// that the guest reports exactly this).
    pub kernel_release: String,
    pub repetition: u32,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub harness_version: String,
    /// The harness's git commit (`<40 hex>`, `-dirty` when a tracked
    /// file differed from it, `unknown` outside git: see
    /// [`crate::harness_commit`]); empty in rows written before the column.
    pub harness_commit: String,
    pub status: Status,
    /// One line; empty when status is ok.
    pub error: String,
    /// Seconds from launch until SSH answered.
    pub boot_s: Option<f64>,
    /// How many cells ran at the same time as this one (1 = alone).
    pub concurrency: u32,
    /// The `estimate-after` the run asked for (on every row the protocol
    /// ended, also those whose cycle never locked, which are measured).
    pub estimate_after: Option<u64>,
    /// The shard of the run that measured this row, `K/N` (`run --shard`;
    /// empty for a run that was not split; docs/shards.md).
    pub shard: String,
    /// The host the harness ran on when it measured this row (its
    /// hostname), so a merged run says where each row came from.
    pub host: String,
    /// What the guest protocol measured; empty unless it ran to the end.
    pub measured: Measurement,
}

/// What the guest protocol measures on one cell run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measurement {
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
    /// `current_clocksource` of the guest.
    pub clocksource: String,
    /// Sleep between groups in ticks, inferred from the median cycle.
    pub sleep_ticks: Option<u64>,
    /// Guest clock, mount to the first traced group (start delay + prefetch).
    pub first_group_s: Option<f64>,
    /// The mkfs.ext4 command line run in the guest.
    pub mkfs_cmd: String,
    /// The measured first zeroing (z1), ms, from the trace: the lazy-init
    /// thread's journal start to its first group event. With the fix it
    /// sets the sleep (L = floor(W z1 HZ)).
    pub z1_ms: Option<f64>,
    /// The z1 the storage hold was calibrated for (`ebs`), ms.
    pub z1_target_ms: Option<f64>,
    /// The guest's own part of a first zeroing, as the calibration
    /// measured it on this guest, ms.
    pub guest_part_ms: Option<f64>,
    /// The hold of each zero request on the measured volume, ms.
    pub zero_hold_ms: Option<f64>,
    /// Median zeroing time over all groups, ms.
    pub zero_median_ms: Option<f64>,
    /// Measured mounts it took to get a first zeroing inside the z1
    /// target's L interval (1: the first; `ebs` only).
    pub z1_attempts: Option<u32>,
    /// `true` when `lazyinit_s` (and `ms_per_group`, `sleep_ticks`) is an
    /// early-stop estimate from the first `estimate_groups` groups, not a
    /// measurement to the thread's exit (docs/estimates.md).
    pub estimated: bool,
    /// Groups traced when the estimate was made.
    pub estimate_groups: Option<u64>,
    /// The locked cycle the rest was predicted at, ms.
    pub estimate_cycle_ms: Option<f64>,
    /// 95% prediction interval of an estimated `lazyinit_s`.
    pub lazyinit_lo_s: Option<f64>,
    pub lazyinit_hi_s: Option<f64>,
    /// Mean ticks a zeroing crossed per cycle, counted on the guest's tick
    /// grid (`ticks::count`): a cycle is `sleep_ticks + 1 + crossed` ticks.
    /// The host's part of the cycle (wake-up latency plus zeroing time past
    /// the tick), where `sleep_ticks + 1` is the kernel's.
    pub crossed_ticks: Option<f64>,
    /// Why an estimate's interval is wider than independent cycles would
    /// make it, or why it stopped at the cap still uncertain
    /// (`estimate::Estimate::caveat`); empty for measurements.
    pub estimate_caveat: Option<String>,
    /// Whether the kept first zeroing `z1_ms` is inside the storage
    /// profile's window `[z1_lo_ms, z1_hi_ms)` (the z1 interval that sleeps
    /// the target's L with the fix) after the last attempt; `None` without
    /// a z1 target (or without a traced z1), and in rows written before
    /// the column. `false` makes the row's L the host's, not the kernel's:
    /// readers mark it and never judge the kernel by it.
    pub profile_held: Option<bool>,
    /// The storage profile's z1 window, ms (`z1_target_ms`'s L interval).
    pub z1_lo_ms: Option<f64>,
    pub z1_hi_ms: Option<f64>,
}

impl Measurement {
    /// Why the row's storage profile was not held, in one line
    /// (`profile not held: first zeroing 2.28 ms, want 3.20-3.60`); `None`
    /// when it was, or when the row does not say.
    pub fn profile_miss(&self) -> Option<String> {
        if self.profile_held != Some(false) {
            return None;
        }
        let z1 = self
            .z1_ms
            .map_or_else(|| "not traced".to_string(), |z| format!("{z:.2} ms"));
        let want = match (self.z1_lo_ms, self.z1_hi_ms) {
            (Some(lo), Some(hi)) => format!(", want {lo:.2}-{hi:.2}"),
            _ => String::new(),
        };
        Some(format!("profile not held: first zeroing {z1}{want}"))
    }
}

/// The row as the CSV holds it: every column, in order. Only the
/// (de)serialization of [`ResultRow`] uses it.
#[derive(Serialize, Deserialize)]
struct Flat {
    run_id: String,
    cell_id: String,
    provider: ProviderName,
    machine: MachineName,
    accel: Accel,
    arch: Arch,
    kernel_release: String,
    kernel_source: SourceId,
    hz: Hz,
    variant: Variant,
    wait_mult: u32,
    volume_bytes: u64,
    groups: Option<u64>,
    mkfs_s: Option<f64>,
    mount_s: Option<f64>,
    lazyinit_s: Option<f64>,
    lazyinit_poll_s: Option<f64>,
    ms_per_group: Option<f64>,
    traced_groups: Option<u64>,
    repetition: u32,
    started_at: String,
    harness_version: String,
    status: Status,
    error: String,
    clocksource: String,
    sleep_ticks: Option<u64>,
    boot_s: Option<f64>,
    first_group_s: Option<f64>,
    storage_profile: StorageId,
    concurrency: u32,
    mkfs_cmd: String,
    // Appended later: files written before them still read.
    #[serde(default)]
    z1_ms: Option<f64>,
    #[serde(default)]
    z1_target_ms: Option<f64>,
    #[serde(default)]
    guest_part_ms: Option<f64>,
    #[serde(default)]
    zero_hold_ms: Option<f64>,
    #[serde(default)]
    zero_median_ms: Option<f64>,
    #[serde(default)]
    z1_attempts: Option<u32>,
    #[serde(default, deserialize_with = "check::blank_is_false")]
    estimated: bool,
    #[serde(default)]
    estimate_after: Option<u64>,
    #[serde(default)]
    estimate_groups: Option<u64>,
    #[serde(default)]
    estimate_cycle_ms: Option<f64>,
    #[serde(default)]
    lazyinit_lo_s: Option<f64>,
    #[serde(default)]
    lazyinit_hi_s: Option<f64>,
    #[serde(default)]
    crossed_ticks: Option<f64>,
    #[serde(default)]
    estimate_caveat: Option<String>,
    #[serde(default)]
    shard: String,
    #[serde(default)]
    host: String,
    #[serde(default)]
    kernel_profile: Option<KernelProfile>,
    #[serde(default)]
    kernel_tree: String,
    #[serde(default)]
    profile_held: Option<bool>,
    #[serde(default)]
    z1_lo_ms: Option<f64>,
    #[serde(default)]
    z1_hi_ms: Option<f64>,
    #[serde(default)]
    harness_commit: String,
    /// Each knob's column, after every other (`identity/knobs.rs`): none
    /// while there is no knob. A CSV reader fills them by name in a pass
    /// of its own ([`read_rows_from`]); JSON (the history's) nests them.
    #[serde(default, skip_serializing_if = "Knobs::none_defined")]
    knobs: Knobs,
}

impl From<ResultRow> for Flat {
    fn from(r: ResultRow) -> Flat {
        let (m, t, a) = (r.measured, r.testbed, r.axes);
        Flat {
            run_id: r.run_id,
            cell_id: r.cell_id,
            provider: t.provider,
            machine: t.machine,
            accel: t.accel,
            arch: a.arch,
            kernel_release: r.kernel_release,
            kernel_source: a.source,
            hz: a.hz,
            variant: a.variant,
            wait_mult: a.wait_mult,
            volume_bytes: a.volume.0,
            groups: m.groups,
            mkfs_s: m.mkfs_s,
            mount_s: m.mount_s,
            lazyinit_s: m.lazyinit_s,
            lazyinit_poll_s: m.lazyinit_poll_s,
            ms_per_group: m.ms_per_group,
            traced_groups: m.traced_groups,
            repetition: r.repetition,
            started_at: r.started_at,
            harness_version: r.harness_version,
            status: r.status,
            error: r.error,
            clocksource: m.clocksource,
            sleep_ticks: m.sleep_ticks,
            boot_s: r.boot_s,
            first_group_s: m.first_group_s,
            storage_profile: t.storage,
            concurrency: r.concurrency,
            mkfs_cmd: m.mkfs_cmd,
            z1_ms: m.z1_ms,
            z1_target_ms: m.z1_target_ms,
            guest_part_ms: m.guest_part_ms,
            zero_hold_ms: m.zero_hold_ms,
            zero_median_ms: m.zero_median_ms,
            z1_attempts: m.z1_attempts,
            estimated: m.estimated,
            estimate_after: r.estimate_after,
            estimate_groups: m.estimate_groups,
            estimate_cycle_ms: m.estimate_cycle_ms,
            lazyinit_lo_s: m.lazyinit_lo_s,
            lazyinit_hi_s: m.lazyinit_hi_s,
            crossed_ticks: m.crossed_ticks,
            estimate_caveat: m.estimate_caveat,
            shard: r.shard,
            host: r.host,
            kernel_profile: r.kernel_profile,
            kernel_tree: r.kernel_tree,
            profile_held: m.profile_held,
            z1_lo_ms: m.z1_lo_ms,
            z1_hi_ms: m.z1_hi_ms,
            harness_commit: r.harness_commit,
            knobs: a.knobs,
        }
    }
}

impl From<Flat> for ResultRow {
    fn from(f: Flat) -> ResultRow {
        ResultRow {
            run_id: f.run_id,
            cell_id: f.cell_id,
            testbed: Testbed {
                provider: f.provider,
                machine: f.machine,
                accel: f.accel,
                storage: f.storage_profile,
            },
            axes: Axes {
                arch: f.arch,
                source: f.kernel_source,
                hz: f.hz,
                variant: f.variant,
                volume: ByteSize(f.volume_bytes),
                wait_mult: f.wait_mult,
                knobs: f.knobs,
            },
            kernel_profile: f.kernel_profile,
            kernel_tree: f.kernel_tree,
            kernel_release: f.kernel_release,
            repetition: f.repetition,
            started_at: f.started_at,
            harness_version: f.harness_version,
            harness_commit: f.harness_commit,
            status: f.status,
            error: f.error,
            boot_s: f.boot_s,
            concurrency: f.concurrency,
            estimate_after: f.estimate_after,
            shard: f.shard,
            host: f.host,
            measured: Measurement {
                groups: f.groups,
                mkfs_s: f.mkfs_s,
                mount_s: f.mount_s,
                lazyinit_s: f.lazyinit_s,
                lazyinit_poll_s: f.lazyinit_poll_s,
                ms_per_group: f.ms_per_group,
                traced_groups: f.traced_groups,
                clocksource: f.clocksource,
                sleep_ticks: f.sleep_ticks,
                first_group_s: f.first_group_s,
                mkfs_cmd: f.mkfs_cmd,
                z1_ms: f.z1_ms,
                z1_target_ms: f.z1_target_ms,
                guest_part_ms: f.guest_part_ms,
                zero_hold_ms: f.zero_hold_ms,
                zero_median_ms: f.zero_median_ms,
                z1_attempts: f.z1_attempts,
                estimated: f.estimated,
                estimate_groups: f.estimate_groups,
                estimate_cycle_ms: f.estimate_cycle_ms,
                lazyinit_lo_s: f.lazyinit_lo_s,
                lazyinit_hi_s: f.lazyinit_hi_s,
                crossed_ticks: f.crossed_ticks,
                estimate_caveat: f.estimate_caveat,
                profile_held: f.profile_held,
                z1_lo_ms: f.z1_lo_ms,
                z1_hi_ms: f.z1_hi_ms,
            },
        }
    }
}

impl Serialize for ResultRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Flat::from(self.clone()).serialize(s)
    }
}

impl<'de> Deserialize<'de> for ResultRow {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Flat::deserialize(d).map(ResultRow::from)
    }
}

impl ResultRow {
    /// The column names, in order, as written in the header.
    pub fn columns() -> Vec<&'static str> {
        COLUMNS.to_vec()
    }

    /// The kernel the row ran; its profile is `fallback`'s for the row's
    /// provider when the row does not say (rows written before the
    /// `kernel_profile` column).
    pub fn kernel(
        &self,
        fallback: impl FnOnce(&ProviderName) -> Option<KernelProfile>,
    ) -> RowKernel {
        let profile = self
            .kernel_profile
            .or_else(|| fallback(&self.testbed.provider));
        self.axes.kernel(profile)
    }
}

/// How a column's values are typed: what the history stores them as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    Int,
    Real,
    Text,
    Bool,
    /// A boolean a later column added: empty (unknown) on older rows.
    MaybeBool,
}

/// The columns of the CSV's first table (every one but the knobs') with
/// their kinds, in [`Flat`]'s field order (a unit test checks). A new
/// measured column is a field of `Flat` and a line here (and a migration
/// for the history); a new axis is a knob (`identity/knobs.rs`).
const FIRST_KINDS: [(&str, ColumnKind); 53] = {
    use ColumnKind::*;
    [
        ("run_id", Text),
        ("cell_id", Text),
        ("provider", Text),
        ("machine", Text),
        ("accel", Text),
        ("arch", Text),
        ("kernel_release", Text),
        ("kernel_source", Text),
        ("hz", Int),
        ("variant", Text),
        ("wait_mult", Int),
        ("volume_bytes", Int),
        ("groups", Int),
        ("mkfs_s", Real),
        ("mount_s", Real),
        ("lazyinit_s", Real),
        ("lazyinit_poll_s", Real),
        ("ms_per_group", Real),
        ("traced_groups", Int),
        ("repetition", Int),
        ("started_at", Text),
        ("harness_version", Text),
        ("status", Text),
        ("error", Text),
        ("clocksource", Text),
        ("sleep_ticks", Int),
        ("boot_s", Real),
        ("first_group_s", Real),
        ("storage_profile", Text),
        ("concurrency", Int),
        ("mkfs_cmd", Text),
        ("z1_ms", Real),
        ("z1_target_ms", Real),
        ("guest_part_ms", Real),
        ("zero_hold_ms", Real),
        ("zero_median_ms", Real),
        ("z1_attempts", Int),
        ("estimated", Bool),
        ("estimate_after", Int),
        ("estimate_groups", Int),
        ("estimate_cycle_ms", Real),
        ("lazyinit_lo_s", Real),
        ("lazyinit_hi_s", Real),
        ("crossed_ticks", Real),
        ("estimate_caveat", Text),
        ("shard", Text),
        ("host", Text),
        ("kernel_profile", Text),
        ("kernel_tree", Text),
        ("profile_held", MaybeBool),
        ("z1_lo_ms", Real),
        ("z1_hi_ms", Real),
        ("harness_commit", Text),
    ]
};

/// Every column of the CSV with its kind: the first table's, then each
/// knob's ([`Knobs::COLUMNS`]).
pub const COLUMN_KINDS: [(&str, ColumnKind); FIRST_KINDS.len() + Knobs::COLUMNS.len()] =
    crate::concat(FIRST_KINDS, Knobs::COLUMNS);

/// The columns' names, in [`COLUMN_KINDS`] order.
pub const COLUMNS: [&str; COLUMN_KINDS.len()] = {
    let mut c = [""; COLUMN_KINDS.len()];
    let mut i = 0;
    while i < COLUMN_KINDS.len() {
        c[i] = COLUMN_KINDS[i].0;
        i += 1;
    }
    c
};

#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// The line says why in words (`no such file`, `a folder; pass the
    /// results.csv in it`), so the io error is kept but not chained below it.
    #[error("cannot open results file {path}: {}", open_reason(.io))]
    Open { path: PathBuf, io: std::io::Error },
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
    /// The last line has no newline: a run killed while writing it. Its
    /// own variant, so that a reader (merge, import) says what to do
    /// without reading the words.
    #[error("{path}:{line}: the last line is torn (no newline: a run killed while writing it); resume the run (rerun its command: the resume cuts the line off and runs its cell again), then use the folder")]
    TornTail { path: PathBuf, line: u64 },
}

/// Appends rows to a CSV file, writing the header when the file is new and
/// flushing every row to disk before returning.
pub struct ResultsWriter {
    path: PathBuf,
    /// The (cell, start) of every row in the file: a row is known by its
    /// run, cell and start time, so two rows of one cell must never share
    /// a start (every reader would refuse the file as read twice).
    starts: HashSet<(String, String)>,
}

impl ResultsWriter {
    /// Only a results folder's writer opens one (`RunWriter::results`).
    pub(crate) fn open(path: impl AsRef<Path>) -> Result<Self, ResultsError> {
        let path = path.as_ref().to_path_buf();
        let open_err = |io| ResultsError::Open {
            path: path.clone(),
            io,
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
        let starts = match len {
            0 => HashSet::new(),
            _ => read_whole_rows(&path)?
                .into_iter()
                .map(|r| (r.cell_id, r.started_at))
                .collect(),
        };
        Ok(Self { path, starts })
    }

    /// Whether a row of `cell_id` that started at `started_at` is in the
    /// file already (written by this writer or before it opened).
    pub fn has_start(&self, cell_id: &str, started_at: &str) -> bool {
        self.starts
            .contains(&(cell_id.to_string(), started_at.to_string()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one row and flushes it to disk. The file is opened for each
    /// row, never created: a row for a file that was removed or replaced
    /// since [`ResultsWriter::open`] fails here, instead of going to a file
    /// nobody will read.
    pub fn append(&mut self, row: &ResultRow) -> Result<(), ResultsError> {
        let write_err = |source| ResultsError::Write {
            path: self.path.clone(),
            source,
        };
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        w.serialize(row)
            .map_err(|e| write_err(std::io::Error::other(e)))?;
        let bytes = w
            .into_inner()
            .map_err(|e| write_err(std::io::Error::other(e.to_string())))?;
        let mut file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(write_err)?;
        // One write per row keeps rows whole even if two writers append.
        file.write_all(&bytes)
            .and_then(|_| file.sync_data())
            .map_err(write_err)?;
        self.starts
            .insert((row.cell_id.clone(), row.started_at.clone()));
        Ok(())
    }
}

/// A CSV writer of rows onto `out`, its header ([`COLUMNS`]) written:
/// rows serialized onto it are a results file (the knobs' columns, a
/// nested struct csv cannot name, come from the header written here).
pub fn csv_writer<W: Write>(mut out: W) -> std::io::Result<csv::Writer<W>> {
    writeln!(out, "{}", COLUMNS.join(","))?;
    Ok(csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(out))
}

/// Cuts a last line that has no newline off a results file: a row torn
/// by a run killed while writing it (each row is written whole, newline
/// last, so a row without one is incomplete). Returns the bytes cut, for
/// the caller to log and keep; `None` when the file ends whole or is absent.
pub(crate) fn repair_torn_tail(path: impl AsRef<Path>) -> Result<Option<String>, ResultsError> {
    let path = path.as_ref();
    let err = |source| ResultsError::Write {
        path: path.into(),
        source,
    };
    let bytes =
        match crate::input::read_bounded(path, crate::input::MAX_RESULTS_BYTES, "results file") {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(err(e)),
        };
    let whole = whole_lines(&bytes);
    if whole == bytes.len() {
        return Ok(None);
    }
    let file = OpenOptions::new().write(true).open(path).map_err(err)?;
    file.set_len(whole as u64)
        .and_then(|()| file.sync_data())
        .map_err(err)?;
    Ok(Some(String::from_utf8_lossy(&bytes[whole..]).into_owned()))
}

/// The length of `bytes` up to and with its last newline.
fn whole_lines(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)
}

/// [`read_rows`] without a torn last line (see [`repair_torn_tail`]):
/// what a resume may count before it has the folder's lock to repair it.
pub fn read_whole_rows(path: impl AsRef<Path>) -> Result<Vec<ResultRow>, ResultsError> {
    let path = path.as_ref();
    let bytes = read_results_file(path)?;
    read_rows_from(&bytes[..whole_lines(&bytes)], path)
}

/// [`read_rows`] of a finished file: a torn last line (no newline, see
/// [`repair_torn_tail`]) is refused, not read as a row, whether or not its
/// fields parse. A resume does not count that line and cuts it off; a
/// reader that records rows (the history) takes the file once the resume
/// has repaired it.
pub fn read_untorn_rows(path: impl AsRef<Path>) -> Result<Vec<ResultRow>, ResultsError> {
    let path = path.as_ref();
    let bytes = read_results_file(path)?;
    let whole = whole_lines(&bytes);
    if whole < bytes.len() {
        let line = bytes[..whole].iter().filter(|b| **b == b'\n').count() as u64 + 1;
        return Err(ResultsError::TornTail {
            path: path.into(),
            line,
        });
    }
    read_rows_from(&bytes[..], path)
}

/// Reads every row of a results CSV, with line-numbered errors.
pub fn read_rows(path: impl AsRef<Path>) -> Result<Vec<ResultRow>, ResultsError> {
    let path = path.as_ref();
    let bytes = read_results_file(path)?;
    read_rows_from(&bytes[..], path)
}

/// The bytes of a results file: a regular file of at most
/// `input::MAX_RESULTS_BYTES` (a FIFO, a device or a larger file is
/// refused before it is read).
fn read_results_file(path: &Path) -> Result<Vec<u8>, ResultsError> {
    crate::input::read_bounded(path, crate::input::MAX_RESULTS_BYTES, "results file").map_err(
        |io| ResultsError::Open {
            path: path.into(),
            io,
        },
    )
}

/// Reads rows with errors naming the file and line (the header is line
/// 1), refusing a header without a required column and any row that is
/// not a measurement (see `check`).
pub fn read_rows_from(r: impl std::io::Read, path: &Path) -> Result<Vec<ResultRow>, ResultsError> {
    let parse = |line: u64, message: String| ResultsError::Parse {
        path: path.into(),
        line,
        message,
    };
    let mut rdr = csv::ReaderBuilder::new().flexible(false).from_reader(r);
    let headers = rdr.headers().map_err(|e| parse(1, e.to_string()))?.clone();
    if headers.is_empty() {
        return Err(parse(
            1,
            "the file is empty: pass the results.csv of a run that has finished at least one cell"
                .into(),
        ));
    }
    if let Some(c) = check::required_columns().find(|c| !headers.iter().any(|h| h == *c)) {
        return Err(parse(
            1,
            format!("no `{c}` column: pass a results.csv written by lazyinit-bench"),
        ));
    }
    let mut rows = Vec::new();
    let mut rec = csv::StringRecord::new();
    loop {
        match rdr.read_record(&mut rec) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                return Err(parse(line, e.to_string()));
            }
        }
        let line = rec.position().map_or(0, |p| p.line());
        let mut row: ResultRow = rec.deserialize(Some(&headers)).map_err(|e| {
            let message = match e.kind() {
                csv::ErrorKind::Deserialize { err, .. } => match err.field() {
                    Some(i) => format!(
                        "column `{}`: {}",
                        headers.get(i as usize).unwrap_or("?"),
                        err.kind()
                    ),
                    None => err.kind().to_string(),
                },
                _ => e.to_string(),
            };
            parse(line, message)
        })?;
        if !Knobs::COLUMNS.is_empty() {
            // The knobs' columns, by name (a nested struct cannot read
            // them in the row's own pass); absent in older files: default.
            row.axes.knobs = rec
                .deserialize(Some(&headers))
                .map_err(|e| parse(line, e.to_string()))?;
        }
        check::check(&row).map_err(|m| parse(line, m))?;
        rows.push(row);
    }
    Ok(rows)
}

/// The reason a results file did not open, in words a user acts on.
fn open_reason(e: &std::io::Error) -> String {
    const ELOOP: i32 = 40;
    const EISDIR: i32 = 21;
    match e.raw_os_error() {
        Some(ELOOP) => "a symlink loop".into(),
        Some(EISDIR) => "a folder; pass the results.csv in it".into(),
        _ if e.kind() == std::io::ErrorKind::NotFound => "no such file".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> ResultRow {
        ResultRow {
            run_id: "r1".into(),
            cell_id: "qemu-x86_64-debian-6.1-hz100-nofix-64GiB-r1".into(),
            testbed: Testbed {
                provider: "qemu".into(),
                machine: "qemu-x86_64".into(),
                accel: "tcg".into(),
                storage: "none".into(),
            },
            axes: Axes::new(
                Arch::X86_64,
                "debian-6.1".into(),
                Hz::new(100).unwrap(),
                Variant::NoFix,
                ByteSize(64 << 30),
            ),
            kernel_profile: Some(KernelProfile::Qemu),
            kernel_tree: String::new(),
            kernel_release: "6.1.0-lazyinit-hz100-nofix".into(),
            repetition: 1,
            started_at: "2026-11-29T20:00:00Z".into(),
            harness_version: "0.1.0".into(),
            harness_commit: "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c-dirty".into(),
            status: Status::Ok,
            error: String::new(),
            boot_s: Some(1.1),
            concurrency: 1,
            estimate_after: None,
            shard: String::new(),
            host: String::new(),
            measured: Measurement {
                groups: Some(512),
                mkfs_s: Some(1.25),
                mount_s: Some(0.04),
                lazyinit_s: Some(60.6),
                lazyinit_poll_s: Some(61.0),
                ms_per_group: Some(109.5),
                traced_groups: Some(512),
                clocksource: "tsc".into(),
                sleep_ticks: Some(10),
                first_group_s: Some(3.0),
                mkfs_cmd: "mkfs.ext4 -F /dev/vda".into(),
                z1_ms: Some(3.41),
                z1_target_ms: Some(3.4),
                guest_part_ms: Some(1.02),
                zero_hold_ms: Some(2.38),
                zero_median_ms: Some(3.2),
                z1_attempts: Some(1),
                estimated: false,
                estimate_groups: None,
                estimate_cycle_ms: None,
                lazyinit_lo_s: None,
                lazyinit_hi_s: None,
                crossed_ticks: Some(0.125),
                estimate_caveat: None,
                profile_held: Some(true),
                z1_lo_ms: Some(3.2),
                z1_hi_ms: Some(3.6),
            },
        }
    }

    /// The columns `Flat` serializes, in order, are [`COLUMNS`]: the first
    /// table's as csv names them, then the knobs' (a nested struct, whose
    /// names JSON gives).
    #[test]
    fn columns_match_struct_order() {
        let json = serde_json::to_string(&sample()).unwrap();
        let mut names = Vec::new();
        let mut de = serde_json::Deserializer::from_str(&json);
        struct Keys<'a>(&'a mut Vec<String>);
        impl<'de> serde::de::Visitor<'de> for Keys<'_> {
            type Value = ();
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a row")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
                while let Some(k) = m.next_key::<String>()? {
                    if k == "knobs" {
                        m.next_value_seed(Keys(&mut *self.0))?;
                    } else {
                        m.next_value::<serde::de::IgnoredAny>()?;
                        self.0.push(k);
                    }
                }
                Ok(())
            }
        }
        impl<'de> serde::de::DeserializeSeed<'de> for Keys<'_> {
            type Value = ();
            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_map(self)
            }
        }
        serde::de::DeserializeSeed::deserialize(Keys(&mut names), &mut de).unwrap();
        assert_eq!(names, COLUMNS);
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        w.serialize(sample()).unwrap();
        let out = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(out.trim_end().split(',').count(), COLUMNS.len());
    }

    /// The bytes a results file had before the measurement was a struct of
    /// its own (captured from that harness): the CSV is a contract. Each
    /// line may go on only with the knobs' columns (their names in the
    /// header, their defaults in a row), which older readers ignore.
    #[test]
    fn csv_bytes_are_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.csv");
        let mut w = ResultsWriter::open(&p).unwrap();
        w.append(&sample()).unwrap();
        let mut failed = sample();
        failed.status = Status::Failed;
        failed.error = "guest, said \"no\"".into();
        failed.measured = Measurement::default();
        w.append(&failed).unwrap();
        let first = [
            "run_id,cell_id,provider,machine,accel,arch,kernel_release,kernel_source,hz,variant,wait_mult,volume_bytes,groups,mkfs_s,mount_s,lazyinit_s,lazyinit_poll_s,ms_per_group,traced_groups,repetition,started_at,harness_version,status,error,clocksource,sleep_ticks,boot_s,first_group_s,storage_profile,concurrency,mkfs_cmd,z1_ms,z1_target_ms,guest_part_ms,zero_hold_ms,zero_median_ms,z1_attempts,estimated,estimate_after,estimate_groups,estimate_cycle_ms,lazyinit_lo_s,lazyinit_hi_s,crossed_ticks,estimate_caveat,shard,host,kernel_profile,kernel_tree,profile_held,z1_lo_ms,z1_hi_ms,harness_commit",
            "r1,qemu-x86_64-debian-6.1-hz100-nofix-64GiB-r1,qemu,qemu-x86_64,tcg,x86_64,6.1.0-lazyinit-hz100-nofix,debian-6.1,100,nofix,10,68719476736,512,1.25,0.04,60.6,61.0,109.5,512,1,2026-11-29T20:00:00Z,0.1.0,ok,,tsc,10,1.1,3.0,none,1,mkfs.ext4 -F /dev/vda,3.41,3.4,1.02,2.38,3.2,1,false,,,,,,0.125,,,,qemu,,true,3.2,3.6,0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c-dirty",
            "r1,qemu-x86_64-debian-6.1-hz100-nofix-64GiB-r1,qemu,qemu-x86_64,tcg,x86_64,6.1.0-lazyinit-hz100-nofix,debian-6.1,100,nofix,10,68719476736,,,,,,,,1,2026-11-29T20:00:00Z,0.1.0,failed,\"guest, said \"\"no\"\"\",,,1.1,,none,1,,,,,,,,false,,,,,,,,,,qemu,,,,,0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c-dirty",
        ];
        // The knobs' columns and, at their defaults, their values.
        let key = crate::identity::CellKey::of(&sample());
        let knob_fields = || {
            crate::identity::FIELDS
                .iter()
                .skip(crate::identity::FIELDS.len() - Knobs::FIELDS.len())
        };
        let names: Vec<String> = knob_fields().map(|f| f.column.to_string()).collect();
        let values: Vec<String> = knob_fields().map(|f| (f.value)(&key).to_string()).collect();
        assert_eq!(names, Knobs::COLUMNS.map(|(c, _)| c.to_string()));
        let line = |first: &str, more: &[String]| -> String {
            std::iter::once(first.to_string())
                .chain(more.iter().cloned())
                .collect::<Vec<_>>()
                .join(",")
                + "\n"
        };
        let want = line(first[0], &names) + &line(first[1], &values) + &line(first[2], &values);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), want);
        assert_eq!(read_rows(&p).unwrap(), vec![sample(), failed]);
    }

    #[test]
    fn append_round_trips_and_keeps_header_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/results.csv");
        ResultsWriter::open(&p).unwrap().append(&sample()).unwrap();
        let mut second = sample();
        second.status = Status::Failed;
        second.error = "guest, said \"no\"".into();
        second.measured.lazyinit_s = None;
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
        let mut w = csv_writer(Vec::new()).unwrap();
        w.serialize(sample()).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        for last in ["mkfs_cmd", "z1_attempts", "kernel_tree"] {
            let keep = COLUMNS.iter().position(|c| *c == last).unwrap() + 1;
            let cut = |l: &str| l.split(',').take(keep).collect::<Vec<_>>().join(",");
            let old: String = text.lines().map(|l| cut(l) + "\n").collect();
            assert!(old.lines().next().unwrap().ends_with(&format!(",{last}")));
            let rows = read_rows_from(old.as_bytes(), Path::new("old.csv")).unwrap();
            assert_eq!(rows[0].measured.mkfs_cmd, sample().measured.mkfs_cmd);
            assert!(!rows[0].measured.estimated);
            assert_eq!(rows[0].measured.estimate_groups, None);
            if last != "kernel_tree" {
                assert_eq!(rows[0].kernel_profile, None, "empty: unknown");
            }
            assert_eq!(rows[0].measured.profile_held, None, "empty: unknown");
            assert_eq!(rows[0].measured.profile_miss(), None, "never marked");
        }
    }

    /// A row whose first zeroing left the profile's window says so in one
    /// line, with the window; a held or silent row says nothing.
    #[test]
    fn a_profile_not_held_says_so_in_one_line() {
        let mut m = sample().measured;
        assert_eq!(m.profile_miss(), None, "held");
        m.profile_held = Some(false);
        m.z1_ms = Some(2.28);
        assert_eq!(
            m.profile_miss().unwrap(),
            "profile not held: first zeroing 2.28 ms, want 3.20-3.60"
        );
        m.profile_held = None;
        assert_eq!(m.profile_miss(), None, "unknown");
    }

    #[test]
    fn estimated_rows_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.csv");
        let mut e = sample();
        e.estimate_after = Some(50);
        e.measured.estimated = true;
        e.measured.estimate_groups = Some(75);
        e.measured.estimate_cycle_ms = Some(44.0);
        e.measured.lazyinit_lo_s = Some(726.0);
        e.measured.lazyinit_hi_s = Some(729.5);
        e.measured.estimate_caveat =
            Some("extra ticks in runs of ~40 cycles; 2 other guest(s)".into());
        ResultsWriter::open(&p).unwrap().append(&e).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        // The line without the knobs' columns (numbers, after the rest).
        let line = text.lines().nth(1).unwrap();
        let line = line
            .rsplitn(Knobs::COLUMNS.len() + 1, ',')
            .last()
            .unwrap_or(line);
        assert!(
            line.ends_with(
                ",true,50,75,44.0,726.0,729.5,0.125,extra ticks in runs of ~40 cycles; 2 other guest(s),,,qemu,,true,3.2,3.6,0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c-dirty"
            ),
            "{text}"
        );
        assert_eq!(read_rows(&p).unwrap(), vec![e]);
    }

    /// A row is never written to a file nobody will read.
    #[test]
    fn a_row_for_a_removed_results_file_fails() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.csv");
        let mut w = ResultsWriter::open(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        let err = w.append(&sample()).unwrap_err();
        assert!(matches!(err, ResultsError::Write { .. }), "{err}");
        assert!(!p.exists(), "not created again without its header");
    }

    /// A run killed in the middle of a row: the torn line is cut off (and
    /// handed back to be kept), the rows before it stay, and rows append
    /// after it as if it had never been.
    #[test]
    fn a_torn_last_row_is_cut_off_and_returned() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.csv");
        let mut w = ResultsWriter::open(&p).unwrap();
        w.append(&sample()).unwrap();
        assert_eq!(repair_torn_tail(&p).unwrap(), None, "a whole file");
        let whole = std::fs::read(&p).unwrap();
        let header = whole.iter().position(|b| *b == b'\n').unwrap() + 1;
        let row = &whole[header..];
        let torn = &row[..row.len() - 20];
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(torn).unwrap();
        assert!(read_rows(&p).is_err(), "a torn row does not parse");
        assert_eq!(read_whole_rows(&p).unwrap(), vec![sample()]);
        let cut = repair_torn_tail(&p).unwrap().unwrap();
        assert_eq!(cut.as_bytes(), torn);
        assert_eq!(std::fs::read(&p).unwrap(), whole);
        ResultsWriter::open(&p).unwrap().append(&sample()).unwrap();
        assert_eq!(read_rows(&p).unwrap(), vec![sample(), sample()]);
        // A header torn before its newline: the file starts again.
        std::fs::write(&p, "run_id,cell_id,prov").unwrap();
        assert!(repair_torn_tail(&p).unwrap().is_some());
        ResultsWriter::open(&p).unwrap().append(&sample()).unwrap();
        assert_eq!(read_rows(&p).unwrap(), vec![sample()]);
        assert_eq!(repair_torn_tail(dir.path().join("none.csv")).unwrap(), None);
    }

    /// A row whose every field is there but whose newline is not is torn
    /// all the same: `read_rows` takes it, `read_untorn_rows` refuses it
    /// naming its line, as a resume does not count it.
    #[test]
    fn a_torn_last_line_is_refused_even_when_its_fields_parse() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.csv");
        let mut w = ResultsWriter::open(&p).unwrap();
        w.append(&sample()).unwrap();
        w.append(&sample()).unwrap();
        assert_eq!(read_untorn_rows(&p).unwrap().len(), 2, "a whole file reads");
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(read_rows(&p).unwrap().len(), 2, "its fields parse");
        assert_eq!(read_whole_rows(&p).unwrap().len(), 1, "a resume counts one");
        let e = read_untorn_rows(&p).unwrap_err().to_string();
        assert!(e.contains(":3: the last line is torn"), "{e}");
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
        let mut w = csv_writer(Vec::new()).unwrap();
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
