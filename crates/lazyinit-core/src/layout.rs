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
//! these files through the two types here; this module names them and
//! does no I/O ([`crate::writer`] writes them).

use std::path::{Path, PathBuf};

/// A run's results folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFolder {
    root: PathBuf,
}

impl RunFolder {
    pub const RESULTS_CSV: &'static str = "results.csv";
    pub const SPEC_TOML: &'static str = "spec.toml";
    pub const COMMAND_TXT: &'static str = "command.txt";
    pub const EVENTS_JSONL: &'static str = "events.jsonl";
    pub const RUN_LOG: &'static str = "run.log";
    pub const LOCK: &'static str = ".lock";
    pub const RESULTS_TORN: &'static str = "results.csv.torn";
    pub const SHARD_TOML: &'static str = "shard.toml";
    pub const MERGE_TOML: &'static str = "merge.toml";
    pub const SHARDS_DIR: &'static str = "shards";
    pub const REPORT_MD: &'static str = "report.md";
    pub const REPORT_SVG: &'static str = "report.svg";
    pub const REPORT_CYCLES_SVG: &'static str = "report-cycles.svg";

    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The folder a `results.csv` sits in (where its cells' folders are).
    pub fn of_results_csv(csv: &Path) -> Self {
        Self::new(csv.parent().map(Path::to_path_buf).unwrap_or_default())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn results_csv(&self) -> PathBuf {
        self.root.join(Self::RESULTS_CSV)
    }
    pub fn spec_toml(&self) -> PathBuf {
        self.root.join(Self::SPEC_TOML)
    }
    pub fn command_txt(&self) -> PathBuf {
        self.root.join(Self::COMMAND_TXT)
    }
    pub fn events_jsonl(&self) -> PathBuf {
        self.root.join(Self::EVENTS_JSONL)
    }
    pub fn run_log(&self) -> PathBuf {
        self.root.join(Self::RUN_LOG)
    }
    pub fn lock(&self) -> PathBuf {
        self.root.join(Self::LOCK)
    }
    /// Where a resume keeps the torn last line it cut off `results.csv`.
    pub fn results_torn(&self) -> PathBuf {
        self.root.join(Self::RESULTS_TORN)
    }
    /// What a shard's run says of itself (docs/shards.md).
    pub fn shard_toml(&self) -> PathBuf {
        self.root.join(Self::SHARD_TOML)
    }
    /// What a merged run says of its shards (docs/shards.md).
    pub fn merge_toml(&self) -> PathBuf {
        self.root.join(Self::MERGE_TOML)
    }
    /// Where a merged run keeps each shard's own files.
    pub fn shard_files(&self, slug: &str) -> PathBuf {
        self.root.join(Self::SHARDS_DIR).join(slug)
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
    pub const RUNNING: &'static str = ".running";
    /// Written by the runner for a cell that did not end ok.
    pub const ERROR_TXT: &'static str = "error.txt";
    /// Written by the runner when the cell's row could not be appended to
    /// `results.csv`: the header and the row, to append by hand.
    pub const ROW_CSV: &'static str = "row.csv";
    /// What the guest protocol returns (`writer::Evidence`), written by
    /// the cell.
    pub const FACTS_TXT: &'static str = "facts.txt";
    pub const TRACE_TXT: &'static str = "trace.txt";
    pub const GROUPS_CSV: &'static str = "groups.csv";
    /// `groups.csv` as a published run keeps it (scripts/publish-run.sh).
    pub const GROUPS_CSV_GZ: &'static str = "groups.csv.gz";
    pub const CALIBRATION_CSV: &'static str = "calibration.csv";
    /// Each lock check of an early stop (`estimate-after`).
    pub const ESTIMATE_TXT: &'static str = "estimate.txt";
    /// The volume's hold: the one the provider started with, then what
    /// the calibration found and set (`writer::StorageNote`).
    pub const STORAGE_TXT: &'static str = "storage.txt";
    /// The guest's console; every provider keeps one (the KCIDB export
    /// makes it the test's log).
    pub const CONSOLE_LOG: &'static str = "console.log";
    /// The QEMU provider's: its command line, its stderr, its QMP socket,
    /// the NBD sockets of the volume and the warm-up disk (each with a
    /// `.trace.csv` beside it when `LAZYINIT_NBD_TRACE=1`), and the KVM
    /// probe's files when this cell's launch probed.
    pub const QEMU_CMDLINE: &'static str = "qemu.cmdline";
    pub const QEMU_STDERR: &'static str = "qemu.stderr";
    pub const QMP_SOCK: &'static str = "qmp.sock";
    pub const VOLUME_NBD_SOCK: &'static str = "volume.nbd.sock";
    pub const WARMUP_NBD_SOCK: &'static str = "warmup.nbd.sock";
    pub const NBD_TRACE_SUFFIX: &'static str = "trace.csv";
    pub const KVM_PROBE_CONSOLE: &'static str = "kvm-probe.console";
    pub const KVM_PROBE_QMP: &'static str = "kvm-probe.qmp";
    pub const KVM_PROBE_STDERR: &'static str = "kvm-probe.stderr";
    /// The EC2 provider's record of the instance and volume.
    pub const EC2_JSON: &'static str = "ec2.json";

    /// A cell folder at `dir` (tests, and tools run outside a results folder).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    pub fn running(&self) -> PathBuf {
        self.file(Self::RUNNING)
    }
    pub fn error_txt(&self) -> PathBuf {
        self.file(Self::ERROR_TXT)
    }
    pub fn row_csv(&self) -> PathBuf {
        self.file(Self::ROW_CSV)
    }
    pub fn facts_txt(&self) -> PathBuf {
        self.file(Self::FACTS_TXT)
    }
    pub fn trace_txt(&self) -> PathBuf {
        self.file(Self::TRACE_TXT)
    }
    pub fn groups_csv(&self) -> PathBuf {
        self.file(Self::GROUPS_CSV)
    }
    pub fn groups_csv_gz(&self) -> PathBuf {
        self.file(Self::GROUPS_CSV_GZ)
    }
    pub fn calibration_csv(&self) -> PathBuf {
        self.file(Self::CALIBRATION_CSV)
    }
    pub fn estimate_txt(&self) -> PathBuf {
        self.file(Self::ESTIMATE_TXT)
    }
    pub fn storage_txt(&self) -> PathBuf {
        self.file(Self::STORAGE_TXT)
    }
    pub fn console_log(&self) -> PathBuf {
        self.file(Self::CONSOLE_LOG)
    }
    pub fn qemu_cmdline(&self) -> PathBuf {
        self.file(Self::QEMU_CMDLINE)
    }
    pub fn qemu_stderr(&self) -> PathBuf {
        self.file(Self::QEMU_STDERR)
    }
    pub fn qmp_sock(&self) -> PathBuf {
        self.socket(Self::QMP_SOCK)
    }
    pub fn volume_nbd_sock(&self) -> PathBuf {
        self.socket(Self::VOLUME_NBD_SOCK)
    }
    pub fn warmup_nbd_sock(&self) -> PathBuf {
        self.socket(Self::WARMUP_NBD_SOCK)
    }
    /// A unix socket of this cell: in the folder when its path fits
    /// `sun_path` (108 bytes with the NUL), else in the temporary directory
    /// under a name unique to this folder, so any `--out` works.
    fn socket(&self, name: &str) -> PathBuf {
        self.socket_under(&std::env::temp_dir(), name)
    }
    /// [`CellFolder::socket`] with `tmp` as the temporary directory; one
    /// whose own path is too long (a deep `$TMPDIR`) gives way to /tmp.
    fn socket_under(&self, tmp: &Path, name: &str) -> PathBuf {
        let p = self.file(name);
        if p.as_os_str().len() <= 107 {
            return p;
        }
        let hash = crate::paths::sha256_hex(self.path().as_os_str().as_encoded_bytes());
        let short = format!("lazyinit-{}-{name}", &hash[..16]);
        let p = tmp.join(&short);
        match p.as_os_str().len() <= 107 {
            true => p,
            false => Path::new("/tmp").join(short),
        }
    }
    /// The request trace kept beside an NBD socket.
    pub fn nbd_trace_csv(socket: &Path) -> PathBuf {
        socket.with_extension(Self::NBD_TRACE_SUFFIX)
    }
    pub fn kvm_probe_console(&self) -> PathBuf {
        self.file(Self::KVM_PROBE_CONSOLE)
    }
    pub fn kvm_probe_qmp(&self) -> PathBuf {
        self.socket(Self::KVM_PROBE_QMP)
    }
    pub fn kvm_probe_stderr(&self) -> PathBuf {
        self.file(Self::KVM_PROBE_STDERR)
    }
    pub fn ec2_json(&self) -> PathBuf {
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
        assert_eq!(short.qmp_sock(), short.path().join("qmp.sock"));
        let deep = RunFolder::new("/work/scratch/results/usertree-nofix")
            .cell("qemu-x86_64-linux-6.1-git-2311b4df-hz250-nofix-64GiB-r1");
        let p = deep.volume_nbd_sock();
        assert!(p.as_os_str().len() <= 107, "{}", p.display());
        assert!(p.starts_with(std::env::temp_dir()));
        assert!(p.to_string_lossy().ends_with("-volume.nbd.sock"));
        // Unique per folder and per name.
        let other = RunFolder::new("/work/scratch/results/usertree-nofix")
            .cell("qemu-x86_64-linux-6.1-git-2311b4df-hz250-nofix-64GiB-r2");
        assert_ne!(other.volume_nbd_sock(), p);
        assert_ne!(deep.warmup_nbd_sock(), p);
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
    fn names_are_the_documented_ones() {
        let run = RunFolder::new("/r/quick-1234");
        assert_eq!(run.results_csv(), Path::new("/r/quick-1234/results.csv"));
        assert_eq!(
            RunFolder::of_results_csv(&run.results_csv()),
            run,
            "the folder of a results.csv is its run's"
        );
        let cell = run.cell("qemu-x86_64-c");
        assert_eq!(cell.path(), Path::new("/r/quick-1234/qemu-x86_64-c"));
        assert_eq!(
            cell.groups_csv(),
            Path::new("/r/quick-1234/qemu-x86_64-c/groups.csv")
        );
        assert_eq!(
            CellFolder::nbd_trace_csv(&cell.volume_nbd_sock()),
            Path::new("/r/quick-1234/qemu-x86_64-c/volume.nbd.trace.csv")
        );
    }
}
