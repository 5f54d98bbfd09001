//! The one writer of a results folder.
//!
//! Every file the harness keeps in a run's folder or a cell's is created,
//! replaced, appended to or removed by a [`RunWriter`] or the
//! [`CellWriter`]s it gives, and by nothing else: the layout hands out
//! names ([`FileName`]) and files ([`RunFile`]) that are not paths, and a
//! writer is had only by taking the folder's `.lock`
//! ([`RunWriter::claim`]: one writer at a time, across processes) or for
//! a folder being built whole that nobody else can see yet
//! ([`RunWriter::building`], a merge). A cell's writer holds its run's
//! lock, so a provider's machine that keeps one keeps the run's folder.
//! Rows go through [`crate::results::ResultsWriter`], which only a writer
//! opens. A write that fails is a [`WriteError`] naming the file, never
//! dropped.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::evidence::{Attempt, CalibrationNote, Evidence, StorageNote};
use crate::layout::{CellFolder, FileName, RunFolder};
use crate::results::{ResultRow, ResultsError, ResultsWriter};

/// A file of a results folder that could not be written, and why.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}", .path.display())]
pub struct WriteError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl WriteError {
    pub fn new(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self {
            path: path.into(),
            source,
        }
    }
    /// Whether the write failed for want of room ([`disk_full`]).
    pub fn is_disk_full(&self) -> bool {
        disk_full(&self.source)
    }
}

/// Whether `e` says the disk (or the user's quota) is full: ENOSPC or
/// EDQUOT. Such a write is the host's fault, not the cell's: a run stops
/// on it (exit 3) instead of recording cells `failed`.
pub fn disk_full(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{QuotaExceeded, StorageFull};
    matches!(e.kind(), StorageFull | QuotaExceeded)
}

/// The bytes free to this user on the filesystem of `path` (or of its
/// nearest existing parent); `None` when it cannot be asked.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let at = path.ancestors().find(|p| p.exists())?;
    let st = nix::sys::statvfs::statvfs(at).ok()?;
    Some(st.blocks_available() as u64 * st.fragment_size() as u64)
}

/// [`free_bytes`] as a person reads it ("12.0 KiB free", "0 bytes
/// free", "free space unknown").
pub fn free_text(path: &Path) -> String {
    match free_bytes(path) {
        Some(b) => match [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")]
            .into_iter()
            .find(|(m, _)| b >= *m)
        {
            Some((n, unit)) => format!("{:.1} {unit} free", b as f64 / n as f64),
            None => format!("{b} bytes free"),
        },
        None => "free space unknown".into(),
    }
}

/// Why a results folder could not be taken for writing.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Another process holds its `.lock` (its pid, as it wrote it).
    #[error("{} is in use by another run (pid {pid}): wait for it to end, or give another folder", .folder.display())]
    Busy { folder: PathBuf, pid: String },
}

fn at(path: &Path) -> impl FnOnce(std::io::Error) -> WriteError + '_ {
    move |e| WriteError::new(path, e)
}

/// Replaces `path` with `bytes` whole or not at all (written beside it,
/// synced, then renamed: a reader, or a disk that fills, never leaves
/// half a file or an empty one).
fn put(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    crate::output::write_atomic(path, bytes).map_err(at(path))
}

/// Opens `path` for appending, creating it.
fn open_append(path: &Path) -> Result<File, WriteError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(at(path))
}

/// Appends `bytes` to `path` in one write, creating it.
fn append(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    open_append(path)?.write_all(bytes).map_err(at(path))
}

/// Removes `path`; one already gone is fine.
fn remove(path: &Path) -> Result<(), WriteError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(WriteError::new(path, e)),
        _ => Ok(()),
    }
}

fn create_dir(path: &Path) -> Result<(), WriteError> {
    std::fs::create_dir_all(path).map_err(at(path))
}

/// Makes `dir` 0700 if it is not there, and checks that it is a folder of
/// this user's that no one else can enter: a shared temporary directory's
/// `lazyinit-<uid>` may have been made by someone else first.
fn private_dir(dir: &Path) -> Result<(), WriteError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(WriteError::new(dir, e))
        }
        _ => {}
    }
    let m = std::fs::symlink_metadata(dir).map_err(at(dir))?;
    let uid = nix::unistd::geteuid().as_raw();
    if !m.file_type().is_dir() || m.uid() != uid || m.mode() & 0o077 != 0 {
        return Err(WriteError::new(
            dir,
            std::io::Error::other(format!(
                "not a private folder of uid {uid} (a link, another user's, or open to others): remove it, or give a shorter --out"
            )),
        ));
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), WriteError> {
    create_dir(to)?;
    for e in std::fs::read_dir(from).map_err(at(from))? {
        let e = e.map_err(at(from))?;
        let t = e.file_type().map_err(at(&e.path()))?;
        let dest = to.join(e.file_name());
        if t.is_dir() {
            copy_tree(&e.path(), &dest)?;
        } else if t.is_file() {
            std::fs::copy(e.path(), &dest).map_err(at(&dest))?;
        }
    }
    Ok(())
}

/// An exclusive lock on the file `path` (made, with its folder, if
/// missing; never truncated), waited for and held for the life of the
/// value: one process at a time past it, whoever else waits (a
/// bisection's private clone of a repository). Unlike a folder's `.lock`
/// ([`RunWriter::claim`]) it says nothing of its holder.
pub fn lock_waiting(path: &Path) -> std::io::Result<nix::fcntl::Flock<File>> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| std::io::Error::other(format!("cannot lock {}: {e}", path.display())))
}

/// The held `.lock` of a folder (released when the last writer of it is
/// dropped, or the process ends whatever way it ends).
struct Held(#[allow(dead_code)] nix::fcntl::Flock<File>);

/// The one writer of a run's (or merge's, or bisect's) folder.
#[derive(Clone)]
pub struct RunWriter {
    folder: RunFolder,
    _held: Option<Arc<Held>>,
}

impl std::fmt::Debug for RunWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RunWriter").field(&self.folder).finish()
    }
}

impl RunWriter {
    /// Makes `folder` (and its parents) and takes its `.lock` for this
    /// process, its pid written into it; or says which process has it.
    pub fn claim(folder: &RunFolder) -> Result<Self, ClaimError> {
        use std::io::{Read, Seek};
        create_dir(folder.root())?;
        let path = folder.path_of(RunFolder::LOCK);
        // Never through a link (its target would be truncated and given
        // our pid), and only a plain file: a folder or FIFO there is not
        // a lock this harness made.
        let not_a_lock = |what: &str| {
            WriteError::new(
                &path,
                std::io::Error::other(format!(
                    "the lock is {what}, not a file this harness made: remove it (nothing holds a folder through it), then run again"
                )),
            )
        };
        let file = {
            use std::os::unix::fs::OpenOptionsExt;
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                .open(&path)
        };
        let file = match file {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
                return Err(not_a_lock("a symbolic link").into())
            }
            Err(e) if e.raw_os_error() == Some(nix::libc::EISDIR) => {
                return Err(not_a_lock("a folder").into())
            }
            Err(e) => return Err(at(&path)(e).into()),
        };
        if !file.metadata().map_err(at(&path))?.is_file() {
            return Err(not_a_lock("not a regular file (a FIFO, socket or device)").into());
        }
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                // The pid is how a second run says who holds the folder.
                lock.set_len(0)
                    .and_then(|()| lock.rewind())
                    .and_then(|()| write!(lock, "{}", std::process::id()))
                    .map_err(at(&path))?;
                Ok(Self {
                    folder: folder.clone(),
                    _held: Some(Arc::new(Held(lock))),
                })
            }
            Err((mut file, _)) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                // A run that took the lock a moment ago may not have
                // written its pid yet.
                let pid = match pid.trim() {
                    "" => "not written yet: it is just starting".to_string(),
                    p => p.to_string(),
                };
                Err(ClaimError::Busy {
                    folder: folder.root().to_path_buf(),
                    pid,
                })
            }
        }
    }

    /// The writer of a folder being built whole beside its destination
    /// (nobody else knows its name until it is placed).
    pub fn building(new: &crate::output::NewFolder) -> Self {
        Self {
            folder: RunFolder::new(new.path()),
            _held: None,
        }
    }

    /// The folder, for reading.
    pub fn folder(&self) -> &RunFolder {
        &self.folder
    }
    /// Makes the folder (one being built, whose writer took no lock).
    pub fn create(&self) -> Result<(), WriteError> {
        create_dir(self.folder.root())
    }
    /// Replaces the run's file `name` with `bytes`, whole: written beside
    /// it, then renamed (a reader never sees half of it).
    pub fn put(&self, name: FileName, bytes: impl AsRef<[u8]>) -> Result<(), WriteError> {
        put(&self.folder.path_of(name), bytes.as_ref())
    }
    /// Appends `bytes` to the run's file `name` in one write.
    pub fn append(&self, name: FileName, bytes: impl AsRef<[u8]>) -> Result<(), WriteError> {
        append(&self.folder.path_of(name), bytes.as_ref())
    }
    /// The run's file `name` kept open for appending (`events.jsonl`,
    /// `run.log`): its later writes' errors are the caller's to report,
    /// with [`WriteError::new`] and the file.
    pub fn open_append(&self, name: FileName) -> Result<File, WriteError> {
        open_append(&self.folder.path_of(name))
    }
    /// `results.csv`, ready for rows (its header checked or written).
    pub fn results(&self) -> Result<ResultsWriter, ResultsError> {
        ResultsWriter::open(self.folder.path_of(RunFolder::RESULTS_CSV))
    }
    /// Cuts a torn last row off `results.csv` and returns it
    /// ([`crate::results::repair_torn_tail`]).
    pub fn repair_torn_tail(&self) -> Result<Option<String>, ResultsError> {
        crate::results::repair_torn_tail(self.folder.path_of(RunFolder::RESULTS_CSV))
    }
    /// Replaces the results file `name` whole with `rows` (a bisect's
    /// gathered rows).
    pub fn put_rows(&self, name: FileName, rows: &[ResultRow]) -> Result<(), ResultsError> {
        let path = self.folder.path_of(name);
        let werr = |source| ResultsError::Write {
            path: path.clone(),
            source,
        };
        let tmp = crate::output::temp_beside(&path).map_err(werr)?;
        let mut w = ResultsWriter::open(tmp.path())?;
        for r in rows {
            w.append(r)?;
        }
        tmp.persist(&path).map_err(|e| werr(e.error))?;
        Ok(())
    }
    /// The writer of one cell's folder (it holds this run's lock).
    pub fn cell(&self, cell_id: &str) -> CellWriter {
        CellWriter {
            folder: self.folder.cell(cell_id),
            _held: self._held.clone(),
        }
    }
    /// The writer of the folder a merged run keeps one shard's files in,
    /// made.
    pub fn shard_files(&self, slug: &str) -> Result<RunWriter, WriteError> {
        let folder = self.folder.shard_files(slug);
        create_dir(folder.root())?;
        Ok(Self {
            folder,
            _held: self._held.clone(),
        })
    }
    /// Copies each regular file at the top of `from` (another run's
    /// folder) but `skip` into this folder (a merge keeping a shard's own
    /// files).
    pub fn copy_files_from(&self, from: &RunFolder, skip: &[FileName]) -> Result<(), WriteError> {
        let entries = std::fs::read_dir(from.root()).map_err(at(from.root()))?;
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name();
            let skipped = skip.iter().any(|n| name.to_str() == Some(n.as_str()));
            if e.file_type().is_ok_and(|t| t.is_file()) && !skipped {
                let to = self.folder.root().join(&name);
                std::fs::copy(e.path(), &to).map_err(at(&to))?;
            }
        }
        Ok(())
    }
    /// Keeps why a bisect skipped `commit`.
    pub fn put_skip_note(&self, commit: &str, text: &str) -> Result<(), WriteError> {
        let dir = self.folder.path_of(RunFolder::SKIPS_DIR);
        create_dir(&dir)?;
        put(&dir.join(commit), text.as_bytes())
    }
}

/// The writer of one cell's folder, from its run's [`RunWriter`].
#[derive(Clone)]
pub struct CellWriter {
    folder: CellFolder,
    _held: Option<Arc<Held>>,
}

impl std::fmt::Debug for CellWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CellWriter").field(&self.folder).finish()
    }
}

impl CellWriter {
    /// The folder, for reading.
    pub fn folder(&self) -> &CellFolder {
        &self.folder
    }
    /// The folder's path (for messages).
    pub fn path(&self) -> &Path {
        self.folder.path()
    }
    /// Makes the folder and its parents.
    pub fn create(&self) -> Result<(), WriteError> {
        create_dir(self.folder.path())
    }
    /// Replaces the cell's file `name` with `bytes`.
    pub fn put(&self, name: FileName, bytes: impl AsRef<[u8]>) -> Result<(), WriteError> {
        put(&self.folder.path_of(name), bytes.as_ref())
    }
    /// Appends `bytes` to the cell's file `name` in one write.
    pub fn append(&self, name: FileName, bytes: impl AsRef<[u8]>) -> Result<(), WriteError> {
        append(&self.folder.path_of(name), bytes.as_ref())
    }
    /// A new empty file `name` of the cell for a process or a stream to
    /// write (QEMU's stderr), and its path for messages.
    pub fn create_file(&self, name: FileName) -> Result<(File, PathBuf), WriteError> {
        let path = self.folder.path_of(name);
        let f = File::create(&path).map_err(at(&path))?;
        Ok((f, path))
    }
    /// The path of the cell's file `name` for a process this cell starts
    /// to write itself (QEMU's console log): handed over, never opened
    /// here.
    pub fn hand_over(&self, name: FileName) -> PathBuf {
        self.folder.path_of(name)
    }
    /// The cell's unix sockets, for the processes that listen on them:
    /// QMP, the volume's and the warm-up disk's NBD, the KVM probe's QMP.
    /// In the folder, or, when its path is too long for a socket, in this
    /// user's folder of the temporary directory, made private (0700) here
    /// and refused when it is a link, another user's or open to others.
    pub fn qmp_sock(&self) -> Result<PathBuf, WriteError> {
        self.ready(self.folder.qmp_sock_path())
    }
    pub fn volume_nbd_sock(&self) -> Result<PathBuf, WriteError> {
        self.ready(self.folder.volume_nbd_sock_path())
    }
    pub fn warmup_nbd_sock(&self) -> Result<PathBuf, WriteError> {
        self.ready(self.folder.warmup_nbd_sock_path())
    }
    pub fn kvm_probe_qmp(&self) -> Result<PathBuf, WriteError> {
        self.ready(self.folder.kvm_probe_qmp_path())
    }
    /// Where every socket of the cell would be (to remove a killed run's:
    /// nothing is made).
    pub fn sockets(&self) -> [PathBuf; 4] {
        [
            self.folder.qmp_sock_path(),
            self.folder.volume_nbd_sock_path(),
            self.folder.warmup_nbd_sock_path(),
            self.folder.kvm_probe_qmp_path(),
        ]
    }
    fn ready(&self, socket: PathBuf) -> Result<PathBuf, WriteError> {
        match socket.parent() {
            Some(dir) if dir != self.folder.path() => private_dir(dir)?,
            _ => {}
        }
        Ok(socket)
    }
    /// A new empty request trace beside the NBD socket `socket` (one of
    /// this cell's), and its path.
    pub fn create_nbd_trace(&self, socket: &Path) -> Result<(File, PathBuf), WriteError> {
        let path = CellFolder::nbd_trace_csv(socket);
        let f = File::create(&path).map_err(at(&path))?;
        Ok((f, path))
    }
    /// Removes one of this cell's sockets (one already gone is fine): a
    /// stale one before a launch.
    pub fn remove_socket(&self, socket: &Path) -> Result<(), WriteError> {
        remove(socket)
    }
    /// Removes the cell's file `name` (one already gone is fine).
    pub fn remove(&self, name: FileName) -> Result<(), WriteError> {
        remove(&self.folder.path_of(name))
    }
    /// Marks the cell as this run's until its row is recorded: `.running`
    /// holds the pid and the row's start (`started_at`), so that a later
    /// run that finds it knows the row was lost, and by which attempt.
    pub fn mark_running(&self, started_at: &str) -> Result<(), WriteError> {
        self.put(
            CellFolder::RUNNING,
            format!("{} {started_at}\n", std::process::id()),
        )
    }
    /// The cell's row is recorded (or accounted for): `.running` goes.
    pub fn clear_running(&self) -> Result<(), WriteError> {
        self.remove(CellFolder::RUNNING)
    }
    /// Writes what the guest protocol returned, each file it holds.
    pub fn write_evidence(&self, ev: &Evidence) -> Result<(), WriteError> {
        for (name, bytes) in ev.files() {
            self.put(name, bytes)?;
        }
        Ok(())
    }
    /// Copies the regular files and folders of `from` (another run's
    /// folder of this cell) into this one; sockets and links a run left
    /// are not results.
    pub fn copy_from(&self, from: &CellFolder) -> Result<(), WriteError> {
        copy_tree(from.path(), self.folder.path())
    }
    /// The cell's row kept on its own (`row.csv`), when `results.csv`
    /// could not take it.
    pub fn keep_row(&self, row: &ResultRow) -> Result<(), ResultsError> {
        ResultsWriter::open(self.folder.path_of(CellFolder::ROW_CSV))?.append(row)
    }
}

// A writer is had only from a lock or a folder being built: no other way
// to make one, and none is a path.
static_assertions::assert_not_impl_any!(RunWriter: Default, AsRef<Path>);
static_assertions::assert_not_impl_any!(CellWriter: Default, AsRef<Path>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waited_lock_is_made_with_its_folder_and_held_until_dropped() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("cache/bisect/abc/clone.lock");
        // flock(1) -n: exit 0 when it could take the lock, 1 when held.
        let free = || {
            std::process::Command::new("flock")
                .arg("-n")
                .arg(&path)
                .arg("true")
                .status()
                .expect("flock (util-linux) runs")
                .success()
        };
        let held = lock_waiting(&path).unwrap();
        assert!(!free(), "held");
        drop(held);
        assert!(free(), "released");
        // Taken again, its content kept (never truncated).
        std::fs::write(&path, "kept").unwrap();
        let again = lock_waiting(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "kept");
        drop(again);
        // A folder where the file should be: the open's error, as it was.
        let dir = d.path().join("a-folder");
        std::fs::create_dir(&dir).unwrap();
        assert_eq!(
            lock_waiting(&dir).unwrap_err().kind(),
            std::io::ErrorKind::IsADirectory
        );
    }

    /// A `.lock` that is a link, a folder or a FIFO is refused with what
    /// to do, and a link's target is left as it was (issue 52).
    #[test]
    fn a_lock_that_is_not_a_file_is_refused_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("precious.txt");
        std::fs::write(&target, "keep me").unwrap();
        for (name, make) in [
            (
                "link",
                Box::new(|p: &Path| std::os::unix::fs::symlink(&target, p).unwrap())
                    as Box<dyn Fn(&Path)>,
            ),
            (
                "folder",
                Box::new(|p: &Path| std::fs::create_dir(p).unwrap()),
            ),
            (
                "fifo",
                Box::new(|p: &Path| nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).unwrap()),
            ),
        ] {
            let folder = RunFolder::new(tmp.path().join(name));
            std::fs::create_dir_all(folder.root()).unwrap();
            make(&folder.path_of(RunFolder::LOCK));
            let e = RunWriter::claim(&folder).err().unwrap();
            let text = crate::exit::chain_text(&e);
            assert!(
                text.contains("not a file this harness made: remove it"),
                "{name}: {text}"
            );
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    }

    /// A run claimed in a new folder on a small disk that is full, and its
    /// cell `c` (made before it filled).
    fn full() -> (crate::testing::SmallDisk, RunWriter, CellWriter) {
        let disk = crate::testing::SmallDisk::new(256);
        let run = RunWriter::claim(&RunFolder::new(disk.path())).unwrap();
        let cell = run.cell("c");
        cell.create().unwrap();
        disk.fill();
        (disk, run, cell)
    }

    /// A write to a full disk names its file and the cause, is known as a
    /// full disk, and leaves no file: neither the one it would have made
    /// (no empty or half `trace.txt`) nor its temporary one; one that was
    /// there is kept whole.
    #[test]
    fn a_write_to_a_full_disk_names_its_file_and_leaves_nothing_half_written() {
        let (disk, _run, cell) = full();
        let e = cell
            .put(CellFolder::TRACE_TXT, "x".repeat(64 << 10))
            .unwrap_err();
        assert!(cell.folder().trace_txt().is_at(&e.path));
        assert!(e.is_disk_full(), "{e:?}");
        assert_eq!(
            crate::exit::chain_text(&e),
            format!(
                "cannot write {}: No space left on device (os error 28)",
                cell.folder().trace_txt().display()
            )
        );
        let left: Vec<_> = std::fs::read_dir(cell.folder().path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
        disk.free();
        cell.put(CellFolder::TRACE_TXT, "kept\n").unwrap();
        disk.fill();
        assert!(cell
            .put(CellFolder::TRACE_TXT, "y".repeat(64 << 10))
            .is_err());
        assert_eq!(
            cell.folder().trace_txt().read_to_string().unwrap(),
            "kept\n"
        );
        let e = cell
            .append(CellFolder::TRACE_TXT, "z".repeat(64 << 10))
            .unwrap_err();
        assert!(cell.folder().trace_txt().is_at(&e.path));
        assert!(e.is_disk_full());
        assert!(
            free_text(disk.path()).ends_with(" free"),
            "{}",
            free_text(disk.path())
        );
        assert!(free_bytes(disk.path()).unwrap() < 8192);
    }

    #[test]
    fn a_folder_that_cannot_be_made_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("run"), "a file, not a folder").unwrap();
        let e = RunWriter::claim(&RunFolder::new(dir.path().join("run"))).unwrap_err();
        let ClaimError::Write(e) = e else {
            panic!("{e}")
        };
        assert_eq!(e.path, dir.path().join("run"));
    }

    #[test]
    fn running_marks_and_clears() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunWriter::claim(&RunFolder::new(dir.path())).unwrap();
        let cell = run.cell("c");
        cell.create().unwrap();
        cell.mark_running("2026-01-01T00:00:00Z").unwrap();
        let marker = cell.folder().running().read_to_string().unwrap();
        assert_eq!(
            marker,
            format!("{} 2026-01-01T00:00:00Z\n", std::process::id())
        );
        cell.clear_running().unwrap();
        assert!(!cell.folder().running().exists());
        cell.clear_running().unwrap();
    }

    #[test]
    fn evidence_is_written_file_by_file_and_stops_at_the_first_failure() {
        let (disk, _run, cell) = full();
        disk.free();
        // Room for the first two files, not the third.
        std::fs::write(disk.path().join(".filler"), vec![0u8; 240 << 10]).unwrap();
        let ev = Evidence {
            facts: Some("release=x\n".into()),
            trace: Some("trace\n".into()),
            groups_csv: Some("g".repeat(64 << 10)),
            ..Default::default()
        };
        let e = cell.write_evidence(&ev).unwrap_err();
        assert!(cell.folder().groups_csv().is_at(&e.path), "{e:?}");
        assert_eq!(
            cell.folder().facts_txt().read_to_string().unwrap(),
            "release=x\n"
        );
        assert_eq!(
            cell.folder().trace_txt().read_to_string().unwrap(),
            "trace\n"
        );
        assert!(!cell.folder().groups_csv().exists());
    }

    #[test]
    fn one_writer_at_a_time_and_its_cells_hold_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let folder = RunFolder::new(dir.path());
        std::fs::write(dir.path().join(".lock"), "1234567").unwrap();
        let run = RunWriter::claim(&folder).unwrap();
        let pid = folder.lock().read_to_string().unwrap();
        assert_eq!(
            pid,
            std::process::id().to_string(),
            "the lock takes the pid"
        );
        let e = RunWriter::claim(&folder).unwrap_err();
        assert!(
            matches!(&e, ClaimError::Busy { pid, .. } if *pid == std::process::id().to_string()),
            "{e}"
        );
        // A cell's writer keeps the run's lock after the run's writer goes.
        let cell = run.cell("c");
        drop(run);
        assert!(matches!(
            RunWriter::claim(&folder),
            Err(ClaimError::Busy { .. })
        ));
        drop(cell);
        RunWriter::claim(&folder).unwrap();
    }

    #[test]
    fn rows_go_whole_and_a_merge_copies_what_is_a_result() {
        let dir = tempfile::tempdir().unwrap();
        let from = RunWriter::claim(&RunFolder::new(dir.path().join("a"))).unwrap();
        from.put(RunFolder::COMMAND_TXT, "cmd\n").unwrap();
        from.put(RunFolder::SPEC_TOML, "spec").unwrap();
        let c = from.cell("c");
        c.create().unwrap();
        c.put(CellFolder::TRACE_TXT, "t").unwrap();
        std::os::unix::net::UnixListener::bind(c.qmp_sock().unwrap()).unwrap();
        let to = RunWriter::claim(&RunFolder::new(dir.path().join("b"))).unwrap();
        to.cell("c").copy_from(&from.folder().cell("c")).unwrap();
        let own = to.shard_files("shard-1-of-2").unwrap();
        own.copy_files_from(from.folder(), &[RunFolder::SPEC_TOML, RunFolder::LOCK])
            .unwrap();
        let b = to.folder();
        assert_eq!(b.cell("c").trace_txt().read_to_string().unwrap(), "t");
        assert!(
            !b.cell("c").path().join("qmp.sock").exists(),
            "a socket is no result"
        );
        let kept = b.shard_files("shard-1-of-2");
        assert_eq!(kept.command_txt().read_to_string().unwrap(), "cmd\n");
        assert!(!kept.spec_toml().exists() && !kept.lock().exists());
        to.put_rows(RunFolder::RESULTS_CSV, &[]).unwrap();
        assert_eq!(
            b.results_csv().read_to_string().unwrap(),
            crate::results::COLUMNS.join(",") + "\n"
        );
    }

    #[test]
    fn a_socket_outside_the_folder_goes_in_a_private_folder_or_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let run = RunWriter::claim(&RunFolder::new(base.path().join("r"))).unwrap();
        let cell = run.cell("c");
        cell.create().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // In the folder: nothing is made or checked.
        let sock = cell
            .ready(cell.folder().path_of(CellFolder::QMP_SOCK))
            .unwrap();
        assert_eq!(sock.parent(), Some(cell.path()));
        // Elsewhere: the folder is made 0700.
        let dir = base.path().join("lazyinit-x");
        let sock = cell.ready(dir.join("h-qmp.sock")).unwrap();
        assert_eq!(sock.parent(), Some(dir.as_path()));
        assert_eq!(mode(&dir), 0o700);
        // Open to others, or a link to one: refused, saying which.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = cell.ready(dir.join("h-qmp.sock")).unwrap_err();
        assert_eq!(e.path, dir);
        assert!(e.source.to_string().contains("not a private folder"), "{e}");
        let link = base.path().join("lazyinit-link");
        std::os::unix::fs::symlink(cell.path(), &link).unwrap();
        assert!(
            cell.ready(link.join("h-qmp.sock")).is_err(),
            "a link is refused"
        );
    }
}
