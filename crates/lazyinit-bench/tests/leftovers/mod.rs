//! What a run may leave behind, looked for so that the looking can fail:
//! a folder that cannot be read is an error, not "nothing left", and a
//! cell's sockets are found where they are, in its folder or, for a folder
//! whose path is too long for a socket, in the temporary directory.

#![allow(dead_code)]

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use lazyinit_core::RunFolder;

/// Every file under `dir` (links listed, not followed); panics if any
/// folder cannot be listed.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let rd =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for e in rd {
        let e = e.unwrap_or_else(|err| panic!("cannot list {}: {err}", dir.display()));
        let t = e
            .file_type()
            .unwrap_or_else(|err| panic!("{}: {err}", e.path().display()));
        if t.is_dir() {
            v.extend(files_under(&e.path()));
        } else {
            v.push(e.path());
        }
    }
    v
}

/// The sockets of the run in `out`: every socket (by file type, whatever
/// its name) under it, and each cell's QMP and NBD sockets wherever its
/// folder puts them ([`lazyinit_core::CellFolder::qmp_sock`] falls back to
/// the temporary directory).
pub fn sockets(out: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = files_under(out)
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()))
        .collect();
    let run = RunFolder::new(out);
    let rd =
        std::fs::read_dir(out).unwrap_or_else(|e| panic!("cannot list {}: {e}", out.display()));
    for e in rd {
        let e = e.unwrap();
        if !e.file_type().unwrap().is_dir() {
            continue;
        }
        let cell = run.cell(&e.file_name().to_string_lossy());
        for p in [
            cell.qmp_sock().shown(),
            cell.volume_nbd_sock().shown(),
            cell.warmup_nbd_sock().shown(),
            cell.kvm_probe_qmp().shown(),
        ] {
            if std::fs::symlink_metadata(&p).is_ok() && !v.contains(&p) {
                v.push(p);
            }
        }
    }
    v
}
