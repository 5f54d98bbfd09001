//! The results folder of a run: every file name in one place.
//!
//! ```text
//! <run>/                  RunFolder
//!   results.csv           one row per cell run (results::ResultsWriter)
//!   spec.toml             the spec as run
//!   command.txt           every command that wrote rows here
//!   events.jsonl          every progress event
//!   run.log               the log
//!   .lock                 held while a run writes here
//!   results.csv.torn      a row torn by a killed run, cut off on resume
//!   report.md             the report of results.csv, written at the end
//!                         of each run (as `report` prints it)
//!   report.svg            its bars, and report-cycles.svg the per-group
//!                         cycle times (as `report --svg report.svg`)
//!   shard.toml            a shard's: which one, its cells, spec hash,
//!                         harness version, the hosts that ran it (runner)
//!   merge.toml            a merged run's: its shards, cells missing (merge)
//!   shards/shard-K-of-N/  a merged run's: each shard's shard.toml,
//!                         command.txt, events.jsonl, run.log (merge)
//!   bisect.args           a bisect folder's: the arguments it bisects (bisect)
//!   bisect.log, steps.md, summary.txt, bisect-step.log, bisect-steps.jsonl
//!                         a bisect folder's steps and answer (bisect)
//!   runs/<sample>/        a bisect folder's: one run folder per sample
//!   skips/<commit>        a bisect folder's: why a commit was skipped
//!   <cell id>/            CellFolder
//!     .running            while a run has the cell (its pid): found on
//!                         resume, the cell's row was lost
//!     error.txt           a failed cell's error and console tail (runner)
//!     row.csv             its row, when results.csv could not take it (runner)
//!     facts.txt           what the guest said it is (guest protocol's Evidence)
//!     trace.txt           the raw ftrace buffer (guest protocol)
//!     groups.csv          per traced group (guest protocol; .csv.gz once
//!                         published)
//!     calibration.csv     calibration samples (guest protocol)
//!     estimate.txt        each lock check of an early stop (guest protocol)
//!     storage.txt         the volume's hold and how it was set
//!     console.log         the guest's console (every provider)
//!     ...                 what a provider keeps (qemu.cmdline, ec2.json, ...)
//! ```
//!
//! The runner, the providers, the guest protocol and `report` all reach
//! these files through the types here. This module names them and hands
//! them out for reading only: a name is a [`FileName`] and a file a
//! [`RunFile`], neither of which is a path, so no code can open one for
//! writing. Writing takes a [`crate::writer::RunWriter`], which only the
//! run's lock (or a folder being built whole) gives.

use std::path::{Path, PathBuf};

/// The name of a file or folder of a results folder. Not a path (no
/// `AsRef<Path>`): only the writer joins it onto a folder to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileName(&'static str);

impl FileName {
    pub(crate) const fn as_str(self) -> &'static str {
        self.0
    }
}

impl PartialEq<str> for FileName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<String> for FileName {
    fn eq(&self, other: &String) -> bool {
        self.0 == other
    }
}

impl std::fmt::Display for FileName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// A file of a results folder, for reading: not a path, so nothing but the
/// writer opens it for writing (`File::create(run.results_csv())` does not
/// compile).
#[derive(Clone, PartialEq, Eq)]
pub struct RunFile(PathBuf);

impl std::fmt::Debug for RunFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl RunFile {
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
    pub fn display(&self) -> std::path::Display<'_> {
        self.0.display()
    }
    /// A copy of its path, to show in a message or keep in an error
    /// (never to open: `tests/one_writer.rs` finds it given to a write).
    pub fn shown(&self) -> PathBuf {
        self.0.clone()
    }
    /// Whether it is `path` (tests, and messages comparing with a path
    /// the user gave).
    pub fn is_at(&self, path: impl AsRef<Path>) -> bool {
        self.0 == path.as_ref()
    }
    pub fn exists(&self) -> bool {
        self.0.exists()
    }
    pub fn is_file(&self) -> bool {
        self.0.is_file()
    }
    /// Opened read-only.
    pub fn open(&self) -> std::io::Result<std::fs::File> {
        std::fs::File::open(&self.0)
    }
    pub fn read_to_string(&self) -> std::io::Result<String> {
        std::fs::read_to_string(&self.0)
    }
    /// Its text, refused past `limit` bytes or when not a regular file
    /// ([`crate::input::read_text_bounded`]).
    pub fn read_text_bounded(&self, limit: u64, what: &str) -> std::io::Result<String> {
        crate::input::read_text_bounded(&self.0, limit, what)
    }
    /// Opened read-only once it is found a regular file of at most
    /// `limit` bytes ([`crate::input::check_regular`]).
    pub fn open_bounded(&self, limit: u64, what: &str) -> std::io::Result<std::fs::File> {
        crate::input::check_regular(&self.0, limit, what)?;
        self.open()
    }
    /// The text, or None when it is not there or cannot be read.
    pub fn text(&self) -> Option<String> {
        self.read_to_string().ok()
    }
    /// Its rows, when it is a results CSV ([`crate::results::read_rows`]).
    pub fn rows(&self) -> Result<Vec<crate::results::ResultRow>, crate::results::ResultsError> {
        crate::results::read_rows(&self.0)
    }
    /// Its rows, a torn last line left out ([`crate::results::read_untorn_rows`]).
    pub fn untorn_rows(
        &self,
    ) -> Result<Vec<crate::results::ResultRow>, crate::results::ResultsError> {
        crate::results::read_untorn_rows(&self.0)
    }
    /// Its rows, refusing a torn one ([`crate::results::read_whole_rows`]).
    pub fn whole_rows(
        &self,
    ) -> Result<Vec<crate::results::ResultRow>, crate::results::ResultsError> {
        crate::results::read_whole_rows(&self.0)
    }
}

// The type is the rule: a name or a file of a results folder is not a
// path, whatever is added to them later.
static_assertions::assert_not_impl_any!(
    FileName: AsRef<Path>,
    AsRef<std::ffi::OsStr>,
    AsRef<str>,
    Into<PathBuf>,
    std::ops::Deref
);
static_assertions::assert_not_impl_any!(
    RunFile: AsRef<Path>,
    AsRef<std::ffi::OsStr>,
    Into<PathBuf>,
    std::ops::Deref,
    std::borrow::Borrow<Path>
);

/// A run's results folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFolder {
    root: PathBuf,
}

impl RunFolder {
    pub const RESULTS_CSV: FileName = FileName("results.csv");
    pub const SPEC_TOML: FileName = FileName("spec.toml");
    pub const COMMAND_TXT: FileName = FileName("command.txt");
    pub const EVENTS_JSONL: FileName = FileName("events.jsonl");
    pub const RUN_LOG: FileName = FileName("run.log");
    pub const LOCK: FileName = FileName(".lock");
    pub const RESULTS_TORN: FileName = FileName("results.csv.torn");
    pub const SHARD_TOML: FileName = FileName("shard.toml");
    pub const MERGE_TOML: FileName = FileName("merge.toml");
    pub const SHARDS_DIR: FileName = FileName("shards");
    pub const REPORT_MD: FileName = FileName("report.md");
    pub const REPORT_SVG: FileName = FileName("report.svg");
    pub const REPORT_CYCLES_SVG: FileName = FileName("report-cycles.svg");
    /// A bisect folder's (`lazyinit-bench bisect`): the arguments it
    /// bisects, its `git bisect` log, step table and answer, each step of
    /// a `git bisect run` and the steps so far, one run folder per sample,
    /// and why a commit was skipped.
    pub const BISECT_ARGS: FileName = FileName("bisect.args");
    pub const BISECT_LOG: FileName = FileName("bisect.log");
    pub const STEPS_MD: FileName = FileName("steps.md");
    pub const SUMMARY_TXT: FileName = FileName("summary.txt");
    pub const BISECT_STEP_LOG: FileName = FileName("bisect-step.log");
    pub const BISECT_STEPS_JSONL: FileName = FileName("bisect-steps.jsonl");
    pub const RUNS_DIR: FileName = FileName("runs");
    pub const SKIPS_DIR: FileName = FileName("skips");

    /// Every file name a run's folder holds (the one-writer test looks
    /// for them written out by hand anywhere else; its folders' names,
    /// plain words like `runs`, are not looked for).
    pub const NAMES: &'static [FileName] = &[
        Self::RESULTS_CSV,
        Self::SPEC_TOML,
        Self::COMMAND_TXT,
        Self::EVENTS_JSONL,
        Self::RUN_LOG,
        Self::LOCK,
        Self::RESULTS_TORN,
        Self::SHARD_TOML,
        Self::MERGE_TOML,
        Self::REPORT_MD,
        Self::REPORT_SVG,
        Self::REPORT_CYCLES_SVG,
        Self::BISECT_ARGS,
        Self::BISECT_LOG,
        Self::STEPS_MD,
        Self::SUMMARY_TXT,
        Self::BISECT_STEP_LOG,
        Self::BISECT_STEPS_JSONL,
    ];

    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// What `report` writes again from results.csv (and `run` at its
    /// end): a user's outputs beside the run, not its evidence.
    pub const REPORTS: &'static [FileName] =
        &[Self::REPORT_MD, Self::REPORT_SVG, Self::REPORT_CYCLES_SVG];

    /// What the harness makes first in a folder it claims (a run, a
    /// shard, a merge, a bisection): a folder holding one is a results
    /// folder.
    pub const MARKS: &'static [FileName] = &[
        Self::RESULTS_CSV,
        Self::SPEC_TOML,
        Self::COMMAND_TXT,
        Self::LOCK,
        Self::SHARD_TOML,
        Self::MERGE_TOML,
        Self::BISECT_ARGS,
    ];

    /// Whether `dir` is a run's results folder (a run's, a shard's or a
    /// merge's: `run --out` resumes it): it holds one of
    /// [`RunFolder::MARKS`] but a bisection's `bisect.args` (a link among
    /// them counts where it leads: a dangling one is not there).
    pub fn is_run_folder(dir: &Path) -> bool {
        let f = Self::new(dir);
        Self::MARKS
            .iter()
            .filter(|m| **m != Self::BISECT_ARGS)
            .any(|m| f.path_of(*m).exists())
    }

    /// A results folder's folders that hold evidence only (a merge's
    /// shards' files, a bisection's sample runs and skip notes).
    pub const EVIDENCE_DIRS: &'static [FileName] =
        &[Self::SHARDS_DIR, Self::RUNS_DIR, Self::SKIPS_DIR];

    /// Whether `name` is evidence: a file of [`RunFolder::NAMES`] that only
    /// the harness's run, merge or bisect writes (every name but
    /// [`RunFolder::REPORTS`]). No command's output may be one.
    pub fn is_evidence(name: FileName) -> bool {
        Self::NAMES.contains(&name) && !Self::REPORTS.contains(&name)
    }

    /// Whether `dir` is a results folder (it holds one of [`RunFolder::MARKS`]).
    pub fn is_results_folder(dir: &Path) -> bool {
        let f = Self::new(dir);
        Self::MARKS
            .iter()
            .any(|m| std::fs::symlink_metadata(f.path_of(*m)).is_ok())
    }

    /// Whether the harness wrote `rel` (a path relative to this folder) of
    /// a results folder: one of its evidence files, or anything in one of
    /// its cell folders or evidence folders. What else a results folder
    /// holds (a report, plots, notes) is the user's, and a folder replace
    /// keeps it (`output::NewFolder::place`).
    pub fn is_harness_path(&self, rel: &Path) -> bool {
        let mut parts = rel.components();
        let Some(first) = parts.next() else {
            return false;
        };
        let first = first.as_os_str().to_string_lossy().into_owned();
        if parts.next().is_none() {
            return Self::NAMES
                .iter()
                .any(|n| *n == first && Self::is_evidence(*n));
        }
        Self::EVIDENCE_DIRS.iter().any(|n| *n == first)
            || CellFolder::is_cell_folder(&self.root.join(&first))
    }

    /// What evidence of a results folder `path` (absolute, its links and
    /// `..` already resolved) is, if it is any: one of the evidence files
    /// of a results folder among its ancestors, one of its cell folders or
    /// evidence folders, or anything inside one. Said as the end of a
    /// sentence about the path (`is results.csv of the run folder R`).
    pub fn evidence_at(path: &Path) -> Option<String> {
        for run in path.ancestors().skip(1) {
            if !Self::is_results_folder(run) {
                continue;
            }
            let Ok(rel) = path.strip_prefix(run) else {
                continue;
            };
            let mut parts = rel.components();
            let Some(first) = parts.next() else { continue };
            let first = first.as_os_str().to_string_lossy().into_owned();
            let inside = parts.next().is_some();
            let shown = run.display();
            if !inside
                && Self::NAMES
                    .iter()
                    .any(|n| *n == first && Self::is_evidence(*n))
            {
                return Some(format!("is {first} of the results folder {shown}"));
            }
            let dir = run.join(&first);
            let what = if Self::EVIDENCE_DIRS.iter().any(|n| *n == first) {
                "the evidence folder"
            } else if CellFolder::is_cell_folder(&dir) {
                "the cell folder"
            } else {
                continue;
            };
            let how = if inside { "is inside" } else { "is" };
            return Some(format!(
                "{how} {what} {} of the results folder {shown}",
                dir.display()
            ));
        }
        None
    }

    /// The folder a `results.csv` sits in (where its cells' folders are).
    pub fn of_results_csv(csv: &Path) -> Self {
        Self::new(csv.parent().map(Path::to_path_buf).unwrap_or_default())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    /// The run's file `name`, for reading.
    pub fn file(&self, name: FileName) -> RunFile {
        RunFile(self.path_of(name))
    }
    pub(crate) fn path_of(&self, name: FileName) -> PathBuf {
        self.root.join(name.as_str())
    }
    pub fn results_csv(&self) -> RunFile {
        self.file(Self::RESULTS_CSV)
    }
    pub fn spec_toml(&self) -> RunFile {
        self.file(Self::SPEC_TOML)
    }
    pub fn command_txt(&self) -> RunFile {
        self.file(Self::COMMAND_TXT)
    }
    pub fn events_jsonl(&self) -> RunFile {
        self.file(Self::EVENTS_JSONL)
    }
    pub fn run_log(&self) -> RunFile {
        self.file(Self::RUN_LOG)
    }
    pub fn lock(&self) -> RunFile {
        self.file(Self::LOCK)
    }
    /// Where a resume keeps the torn last line it cut off `results.csv`.
    pub fn results_torn(&self) -> RunFile {
        self.file(Self::RESULTS_TORN)
    }
    /// What a shard's run says of itself (docs/shards.md).
    pub fn shard_toml(&self) -> RunFile {
        self.file(Self::SHARD_TOML)
    }
    /// What a merged run says of its shards (docs/shards.md).
    pub fn merge_toml(&self) -> RunFile {
        self.file(Self::MERGE_TOML)
    }
    /// Where a merged run keeps each shard's own files.
    pub fn shard_files(&self, slug: &str) -> RunFolder {
        Self::new(self.path_of(Self::SHARDS_DIR).join(slug))
    }
    /// A bisect folder's run folder of one sample.
    pub fn sample_run(&self, name: &str) -> RunFolder {
        Self::new(self.path_of(Self::RUNS_DIR).join(name))
    }
    /// A bisect folder's note of why `commit` was skipped.
    pub fn skip_note(&self, commit: &str) -> RunFile {
        RunFile(self.path_of(Self::SKIPS_DIR).join(commit))
    }
    /// The folder of one cell (named by its id).
    pub fn cell(&self, cell_id: &str) -> CellFolder {
        CellFolder::at(self.root.join(cell_id))
    }
}

/// One cell's folder inside a run's: its raw files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellFolder {
    dir: PathBuf,
}

impl CellFolder {
    /// Held by the runner while the cell runs (the run's pid): one found
    /// by a later run means the cell's row was lost with its run.
    pub const RUNNING: FileName = FileName(".running");
    /// Written by the runner for a cell that did not end ok.
    pub const ERROR_TXT: FileName = FileName("error.txt");
    /// Written by the runner when the cell's row could not be appended to
    /// `results.csv`: the header and the row, to append by hand.
    pub const ROW_CSV: FileName = FileName("row.csv");
    /// What the guest protocol returns (`writer::Evidence`), written by
    /// the cell.
    pub const FACTS_TXT: FileName = FileName("facts.txt");
    pub const TRACE_TXT: FileName = FileName("trace.txt");
    pub const GROUPS_CSV: FileName = FileName("groups.csv");
    /// `groups.csv` as a published run keeps it (scripts/publish-run.sh).
    pub const GROUPS_CSV_GZ: FileName = FileName("groups.csv.gz");
    pub const CALIBRATION_CSV: FileName = FileName("calibration.csv");
    /// Each lock check of an early stop (`estimate-after`).
    pub const ESTIMATE_TXT: FileName = FileName("estimate.txt");
    /// The volume's hold: the one the provider started with, then what
    /// the calibration found and set (`writer::StorageNote`).
    pub const STORAGE_TXT: FileName = FileName("storage.txt");
    /// The guest's console; every provider keeps one (the KCIDB export
    /// makes it the test's log).
    pub const CONSOLE_LOG: FileName = FileName("console.log");
    /// The QEMU provider's: its command line, its stderr, its QMP socket,
    /// the NBD sockets of the volume and the warm-up disk (each with a
    /// `.trace.csv` beside it when `LAZYINIT_NBD_TRACE=1`), and the KVM
    /// probe's files when this cell's launch probed.
    pub const QEMU_CMDLINE: FileName = FileName("qemu.cmdline");
    pub const QEMU_STDERR: FileName = FileName("qemu.stderr");
    pub const QMP_SOCK: FileName = FileName("qmp.sock");
    pub const VOLUME_NBD_SOCK: FileName = FileName("volume.nbd.sock");
    pub const WARMUP_NBD_SOCK: FileName = FileName("warmup.nbd.sock");
    pub(crate) const NBD_TRACE_SUFFIX: &'static str = "trace.csv";
    pub const KVM_PROBE_CONSOLE: FileName = FileName("kvm-probe.console");
    pub const KVM_PROBE_QMP: FileName = FileName("kvm-probe.qmp");
    pub const KVM_PROBE_STDERR: FileName = FileName("kvm-probe.stderr");
    /// The EC2 provider's record of the instance and volume.
    pub const EC2_JSON: FileName = FileName("ec2.json");

    /// Every name a cell's folder holds (see [`RunFolder::NAMES`]).
    pub const NAMES: &'static [FileName] = &[
        Self::RUNNING,
        Self::ERROR_TXT,
        Self::ROW_CSV,
        Self::FACTS_TXT,
        Self::TRACE_TXT,
        Self::GROUPS_CSV,
        Self::GROUPS_CSV_GZ,
        Self::CALIBRATION_CSV,
        Self::ESTIMATE_TXT,
        Self::STORAGE_TXT,
        Self::CONSOLE_LOG,
        Self::QEMU_CMDLINE,
        Self::QEMU_STDERR,
        Self::QMP_SOCK,
        Self::VOLUME_NBD_SOCK,
        Self::WARMUP_NBD_SOCK,
        Self::KVM_PROBE_CONSOLE,
        Self::KVM_PROBE_QMP,
        Self::KVM_PROBE_STDERR,
        Self::EC2_JSON,
    ];

    /// Whether `dir` is a cell's folder: a folder holding one of
    /// [`CellFolder::NAMES`].
    pub fn is_cell_folder(dir: &Path) -> bool {
        let c = Self::at(dir);
        dir.is_dir()
            && Self::NAMES
                .iter()
                .any(|n| std::fs::symlink_metadata(c.path_of(*n)).is_ok())
    }

    /// A cell folder at `dir` (tests, and tools run outside a results folder).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
    /// The cell's file `name`, for reading.
    pub fn file(&self, name: FileName) -> RunFile {
        RunFile(self.path_of(name))
    }
    pub(crate) fn path_of(&self, name: FileName) -> PathBuf {
        self.dir.join(name.as_str())
    }
    pub fn running(&self) -> RunFile {
        self.file(Self::RUNNING)
    }
    pub fn error_txt(&self) -> RunFile {
        self.file(Self::ERROR_TXT)
    }
    pub fn row_csv(&self) -> RunFile {
        self.file(Self::ROW_CSV)
    }
    pub fn facts_txt(&self) -> RunFile {
        self.file(Self::FACTS_TXT)
    }
    pub fn trace_txt(&self) -> RunFile {
        self.file(Self::TRACE_TXT)
    }
    pub fn groups_csv(&self) -> RunFile {
        self.file(Self::GROUPS_CSV)
    }
    pub fn groups_csv_gz(&self) -> RunFile {
        self.file(Self::GROUPS_CSV_GZ)
    }
    pub fn calibration_csv(&self) -> RunFile {
        self.file(Self::CALIBRATION_CSV)
    }
    pub fn estimate_txt(&self) -> RunFile {
        self.file(Self::ESTIMATE_TXT)
    }
    pub fn storage_txt(&self) -> RunFile {
        self.file(Self::STORAGE_TXT)
    }
    pub fn console_log(&self) -> RunFile {
        self.file(Self::CONSOLE_LOG)
    }
    pub fn qemu_cmdline(&self) -> RunFile {
        self.file(Self::QEMU_CMDLINE)
    }
    pub fn qemu_stderr(&self) -> RunFile {
        self.file(Self::QEMU_STDERR)
    }
    pub fn qmp_sock(&self) -> RunFile {
        RunFile(self.qmp_sock_path())
    }
    pub(crate) fn qmp_sock_path(&self) -> PathBuf {
        self.socket(Self::QMP_SOCK)
    }
    pub fn volume_nbd_sock(&self) -> RunFile {
        RunFile(self.volume_nbd_sock_path())
    }
    pub(crate) fn volume_nbd_sock_path(&self) -> PathBuf {
        self.socket(Self::VOLUME_NBD_SOCK)
    }
    pub fn warmup_nbd_sock(&self) -> RunFile {
        RunFile(self.warmup_nbd_sock_path())
    }
    pub(crate) fn warmup_nbd_sock_path(&self) -> PathBuf {
        self.socket(Self::WARMUP_NBD_SOCK)
    }
    /// A unix socket of this cell: in the folder when its path fits
    /// `sun_path` (108 bytes with the NUL), else in this user's private
    /// folder of the temporary directory (`lazyinit-<uid>`, which the
    /// writer makes 0700 and checks before handing a socket out) under a
    /// name unique to this folder, so any `--out` works.
    fn socket(&self, name: FileName) -> PathBuf {
        self.socket_under(&std::env::temp_dir(), name)
    }
    /// [`CellFolder::socket`] with `tmp` as the temporary directory; one
    /// whose own path is too long (a deep `$TMPDIR`) gives way to /tmp.
    fn socket_under(&self, tmp: &Path, name: FileName) -> PathBuf {
        let p = self.path_of(name);
        if p.as_os_str().len() <= 107 {
            return p;
        }
        let hash = crate::paths::sha256_hex(self.path().as_os_str().as_encoded_bytes());
        let short = format!("{}-{name}", &hash[..16]);
        let p = Self::socket_dir_in(tmp).join(&short);
        match p.as_os_str().len() <= 107 {
            true => p,
            false => Self::socket_dir_in(Path::new("/tmp")).join(short),
        }
    }
    /// This user's folder of sockets under `tmp`.
    fn socket_dir_in(tmp: &Path) -> PathBuf {
        tmp.join(format!("lazyinit-{}", nix::unistd::geteuid()))
    }
    /// The request trace kept beside an NBD socket.
    pub fn nbd_trace_csv(socket: &Path) -> PathBuf {
        socket.with_extension(Self::NBD_TRACE_SUFFIX)
    }
    pub fn kvm_probe_console(&self) -> RunFile {
        self.file(Self::KVM_PROBE_CONSOLE)
    }
    pub fn kvm_probe_qmp(&self) -> RunFile {
        RunFile(self.kvm_probe_qmp_path())
    }
    pub(crate) fn kvm_probe_qmp_path(&self) -> PathBuf {
        self.socket(Self::KVM_PROBE_QMP)
    }
    pub fn kvm_probe_stderr(&self) -> RunFile {
        self.file(Self::KVM_PROBE_STDERR)
    }
    pub fn ec2_json(&self) -> RunFile {
        self.file(Self::EC2_JSON)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_stay_in_the_cell_folder_unless_its_path_is_too_long() {
        let short = RunFolder::new("/work/results/quick-1")
            .cell("qemu-x86_64-debian-6.1-hz250-fix-64GiB-r1");
        assert_eq!(short.qmp_sock_path(), short.path().join("qmp.sock"));
        let deep = RunFolder::new("/work/scratch/results/usertree-nofix")
            .cell("qemu-x86_64-linux-6.1-git-2311b4df-hz250-nofix-64GiB-r1");
        let p = deep.volume_nbd_sock_path();
        assert!(p.as_os_str().len() <= 107, "{}", p.display());
        let mine = std::env::temp_dir().join(format!("lazyinit-{}", nix::unistd::geteuid()));
        assert_eq!(p.parent(), Some(mine.as_path()), "{}", p.display());
        assert!(p.to_string_lossy().ends_with("-volume.nbd.sock"));
        // Unique per folder and per name.
        let other = RunFolder::new("/work/scratch/results/usertree-nofix")
            .cell("qemu-x86_64-linux-6.1-git-2311b4df-hz250-nofix-64GiB-r2");
        assert_ne!(other.volume_nbd_sock_path(), p);
        assert_ne!(deep.warmup_nbd_sock_path(), p);
    }

    #[test]
    fn a_deep_temporary_directory_gives_way_to_tmp() {
        let deep = RunFolder::new("/work/scratch/results/usertree-nofix")
            .cell("qemu-x86_64-linux-6.1-git-2311b4df-hz250-nofix-64GiB-r1");
        let tmp = Path::new(
            "/home/ci/builds/a-very-long-runner-name/workspace/job-12345/tmp/more/and/more",
        );
        let p = deep.socket_under(tmp, CellFolder::VOLUME_NBD_SOCK);
        assert!(
            p.to_string_lossy().starts_with("/tmp/lazyinit-"),
            "{}",
            p.display()
        );
        assert!(p.as_os_str().len() <= 107);
        let ok = deep.socket_under(Path::new("/tmp/x"), CellFolder::VOLUME_NBD_SOCK);
        assert!(ok.starts_with("/tmp/x/"), "{}", ok.display());
    }

    #[test]
    fn a_run_folder_is_one_of_the_marks_but_a_bisections() {
        let d = tempfile::tempdir().unwrap();
        for m in RunFolder::MARKS {
            let dir = d.path().join(m.as_str());
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join(m.as_str()), "").unwrap();
            let run = *m != RunFolder::BISECT_ARGS;
            assert_eq!(RunFolder::is_run_folder(&dir), run, "{m}");
            assert!(RunFolder::is_results_folder(&dir), "{m}");
        }
        // A report, a cell folder or a dangling link makes no run.
        let dir = d.path().join("other");
        std::fs::create_dir_all(dir.join("qemu-x86_64-debian-6.1-hz100-fix-8GiB-r1")).unwrap();
        std::fs::write(dir.join("report.md"), "").unwrap();
        std::os::unix::fs::symlink("/nonexistent", dir.join("results.csv")).unwrap();
        assert!(!RunFolder::is_run_folder(&dir));
        assert!(!RunFolder::is_run_folder(&d.path().join("missing")));
    }

    #[test]
    fn names_are_the_documented_ones() {
        let run = RunFolder::new("/r/quick-1234");
        assert!(run.results_csv().is_at("/r/quick-1234/results.csv"));
        assert_eq!(
            RunFolder::of_results_csv(run.results_csv().path()),
            run,
            "the folder of a results.csv is its run's"
        );
        let cell = run.cell("qemu-x86_64-c");
        assert_eq!(cell.path(), Path::new("/r/quick-1234/qemu-x86_64-c"));
        assert!(cell
            .groups_csv()
            .is_at("/r/quick-1234/qemu-x86_64-c/groups.csv"));
        assert_eq!(
            CellFolder::nbd_trace_csv(&cell.volume_nbd_sock_path()),
            Path::new("/r/quick-1234/qemu-x86_64-c/volume.nbd.trace.csv")
        );
    }
}
