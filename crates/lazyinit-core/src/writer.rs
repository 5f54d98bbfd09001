//! The one writer of a results folder.
//!
//! Every file the harness keeps in a run's folder or a cell's is created,
//! replaced, appended to or removed by the methods here (rows go through
//! [`crate::results::ResultsWriter`], the CSV half of this owner).
//! Providers and the guest protocol hand their data over ([`Evidence`] for
//! the protocol's files); the cell and the runner write it. A write that
//! fails is a [`WriteError`] naming the file, never dropped:
//! `tests/one_writer.rs` checks that no other source file opens a file for
//! writing unless it is on its list of writers outside results folders.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

pub use crate::evidence::{Attempt, CalibrationNote, Evidence, StorageNote};
use crate::layout::{CellFolder, RunFolder};

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
}

fn at(path: &Path) -> impl FnOnce(std::io::Error) -> WriteError + '_ {
    move |e| WriteError::new(path, e)
}

/// Replaces `path` with `bytes` (written through a symlink or device, as
/// `std::fs::write` does).
fn put(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    std::fs::write(path, bytes).map_err(at(path))
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

impl RunFolder {
    /// Makes the folder and its parents.
    pub fn create(&self) -> Result<(), WriteError> {
        std::fs::create_dir_all(self.root()).map_err(at(self.root()))
    }
    /// Replaces the run's file `name` with `bytes`.
    pub fn put(&self, name: &str, bytes: impl AsRef<[u8]>) -> Result<(), WriteError> {
        put(&self.root().join(name), bytes.as_ref())
    }
    /// Appends `bytes` to the run's file `name` in one write.
    pub fn append(&self, name: &str, bytes: impl AsRef<[u8]>) -> Result<(), WriteError> {
        append(&self.root().join(name), bytes.as_ref())
    }
    /// The run's file `name` kept open for appending (`events.jsonl`,
    /// `run.log`): its later writes' errors are the caller's to report,
    /// with [`WriteError::new`] and this path.
    pub fn open_append(&self, name: &str) -> Result<File, WriteError> {
        open_append(&self.root().join(name))
    }
    /// `.lock`, opened read-write without truncating it (its pid is
    /// rewritten once the lock is held, [`RunFolder::write_lock_pid`]).
    pub fn open_lock(&self) -> Result<File, WriteError> {
        let path = self.lock();
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(at(&path))
    }
    /// Writes this process's pid into the held `.lock`.
    pub fn write_lock_pid(&self, lock: &mut File) -> Result<(), WriteError> {
        use std::io::Seek;
        lock.set_len(0)
            .and_then(|()| lock.rewind())
            .and_then(|()| write!(lock, "{}", std::process::id()))
            .map_err(at(&self.lock()))
    }
}

impl CellFolder {
    /// Makes the folder and its parents.
    pub fn create(&self) -> Result<(), WriteError> {
        std::fs::create_dir_all(self.path()).map_err(at(self.path()))
    }
    /// Replaces the cell's file `name` with `bytes`.
    pub fn put(&self, name: &str, bytes: impl AsRef<[u8]>) -> Result<(), WriteError> {
        put(&self.file(name), bytes.as_ref())
    }
    /// Appends `bytes` to the cell's file `name` in one write.
    pub fn append(&self, name: &str, bytes: impl AsRef<[u8]>) -> Result<(), WriteError> {
        append(&self.file(name), bytes.as_ref())
    }
    /// A new empty file at `path` (the cell's, or a socket's trace beside
    /// it) for a process or a stream to write: QEMU's stderr, an NBD
    /// server's request trace.
    pub fn create_file(&self, path: &Path) -> Result<File, WriteError> {
        File::create(path).map_err(at(path))
    }
    /// Removes the cell's file or socket at `path` (one already gone is
    /// fine): a stale socket before a launch, the KVM probe's files.
    pub fn remove(&self, path: &Path) -> Result<(), WriteError> {
        remove(path)
    }
    /// Marks the cell as this run's (its pid in `.running`) until its row
    /// is recorded: a later run that finds it knows the row was lost.
    pub fn mark_running(&self) -> Result<(), WriteError> {
        self.put(Self::RUNNING, format!("{}\n", std::process::id()))
    }
    /// The cell's row is recorded (or accounted for): `.running` goes.
    pub fn clear_running(&self) -> Result<(), WriteError> {
        remove(&self.running())
    }
    /// Writes what the guest protocol returned, each file it holds.
    pub fn write_evidence(&self, ev: &Evidence) -> Result<(), WriteError> {
        for (name, bytes) in ev.files() {
            self.put(name, bytes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell folder whose `name` is a link to /dev/full: every write to it
    /// fails with ENOSPC, as on a full disk (root included).
    fn full(name: &str) -> (tempfile::TempDir, CellFolder) {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/full", dir.path().join(name)).unwrap();
        let cell = CellFolder::at(dir.path());
        (dir, cell)
    }

    #[test]
    fn a_failing_write_names_its_file_and_cause() {
        let (_d, cell) = full(CellFolder::TRACE_TXT);
        let e = cell.put(CellFolder::TRACE_TXT, "x").unwrap_err();
        assert_eq!(e.path, cell.trace_txt());
        assert_eq!(e.source.raw_os_error(), Some(28), "ENOSPC");
        assert_eq!(
            crate::exit::chain_text(&e),
            format!(
                "cannot write {}: No space left on device (os error 28)",
                cell.trace_txt().display()
            )
        );
        let e = cell.append(CellFolder::TRACE_TXT, "x").unwrap_err();
        assert_eq!(e.path, cell.trace_txt());
    }

    #[test]
    fn a_cell_folder_that_cannot_be_made_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("run"), "a file, not a folder").unwrap();
        let cell = RunFolder::new(dir.path().join("run")).cell("c");
        let e = cell.create().unwrap_err();
        assert_eq!(e.path, cell.path());
        assert!(cell.mark_running().is_err());
    }

    #[test]
    fn running_marks_and_clears() {
        let dir = tempfile::tempdir().unwrap();
        let cell = CellFolder::at(dir.path());
        cell.mark_running().unwrap();
        let pid = std::fs::read_to_string(cell.running()).unwrap();
        assert_eq!(pid.trim(), std::process::id().to_string());
        cell.clear_running().unwrap();
        assert!(!cell.running().exists());
        cell.clear_running().unwrap();
    }

    #[test]
    fn evidence_is_written_file_by_file_and_stops_at_the_first_failure() {
        let (_d, cell) = full(CellFolder::GROUPS_CSV);
        let ev = Evidence {
            facts: Some("release=x\n".into()),
            trace: Some("trace\n".into()),
            groups_csv: Some("group,t_s\n".into()),
            ..Default::default()
        };
        let e = cell.write_evidence(&ev).unwrap_err();
        assert_eq!(e.path, cell.groups_csv());
        assert_eq!(
            std::fs::read_to_string(cell.facts_txt()).unwrap(),
            "release=x\n"
        );
        assert_eq!(
            std::fs::read_to_string(cell.trace_txt()).unwrap(),
            "trace\n"
        );
    }

    #[test]
    fn the_lock_takes_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunFolder::new(dir.path());
        std::fs::write(run.lock(), "1234567").unwrap();
        let mut f = run.open_lock().unwrap();
        run.write_lock_pid(&mut f).unwrap();
        let pid = std::fs::read_to_string(run.lock()).unwrap();
        assert_eq!(pid, std::process::id().to_string());
    }
}
