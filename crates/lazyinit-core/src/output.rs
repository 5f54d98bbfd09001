//! The one way a command writes a file it was asked for (`--out`, `--svg`,
//! ...), so every command gives the same guarantees (docs/bad-input.md):
//!
//! - the output never resolves (through any symlinks) to one of the inputs,
//!   so no input is truncated before it is read;
//! - a regular file (or what a symlink points at) is written through an
//!   unpredictable temporary file in the destination's own folder and
//!   renamed onto the resolved target only once the whole text is there:
//!   an error leaves neither a partial nor an empty file, and a symlink
//!   stays a symlink;
//! - a character device or FIFO (`/dev/stdout`, `/dev/null`, a pipe) is
//!   written directly, never replaced by a regular file;
//! - a directory, a block device, a dangling symlink, a symlink loop or a
//!   missing folder is refused before any work, with the reason.
//!
//! [`check_folder`] is the same first check for an output that is a folder
//! (`run --out`).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("--{flag} {dest} is the input {input}: it would be overwritten; write the output to another file")]
    IsInput {
        flag: &'static str,
        dest: String,
        input: String,
    },
    #[error("--{flag} {dest}: {why}")]
    Refused {
        flag: &'static str,
        dest: String,
        why: String,
    },
    #[error("cannot write {dest}: {source}")]
    Write {
        dest: String,
        source: std::io::Error,
    },
}

impl OutputError {
    fn refused(flag: &'static str, dest: &Path, why: impl Into<String>) -> Self {
        OutputError::Refused {
            flag,
            dest: dest.display().to_string(),
            why: why.into(),
        }
    }
}

/// An output opened by [`open`]; [`OutputFile::finish`] puts the text in
/// place. Dropped unfinished, it leaves nothing (the temporary file goes).
#[derive(Debug)]
pub struct OutputFile {
    shown: PathBuf,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// A temporary file beside `target` (the resolved destination).
    Replace {
        tmp: tempfile::NamedTempFile,
        target: PathBuf,
    },
    /// A device or FIFO, written where it is.
    Through(File),
}

/// Opens `dest` for a command whose inputs are `inputs`; `flag` names the
/// option in messages (`out`, `svg`). Nothing is created but the
/// temporary file, which goes again unless [`OutputFile::finish`] succeeds.
pub fn open(flag: &'static str, dest: &Path, inputs: &[&Path]) -> Result<OutputFile, OutputError> {
    let refused = |why: String| OutputError::refused(flag, dest, why);
    if let Some(input) = inputs.iter().find(|i| same_file(i, dest)) {
        return Err(OutputError::IsInput {
            flag,
            dest: dest.display().to_string(),
            input: input.display().to_string(),
        });
    }
    // A device or FIFO at the end of the links, or any path the kernel
    // provides (`/dev/stdout` is a link into /proc that only opening
    // follows; on a pipe it resolves to no path, on a redirected file to
    // the shell's file, which must not be renamed over): the node itself,
    // opened as given, appended to like the shell's own `>>`.
    let meta = std::fs::metadata(dest);
    let special = meta
        .as_ref()
        .is_ok_and(|m| m.file_type().is_char_device() || m.file_type().is_fifo())
        || (meta.as_ref().is_ok_and(|m| m.is_file())
            && (dest.starts_with("/dev") || dest.starts_with("/proc")));
    if special {
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(dest)
            .map_err(|e| refused(format!("cannot open it for writing: {e}")))?;
        return Ok(OutputFile {
            shown: dest.into(),
            kind: Kind::Through(f),
        });
    }
    let target = resolve(dest).map_err(refused)?;
    match std::fs::metadata(&target) {
        Ok(m) if m.is_dir() => Err(refused(
            "is a folder; name a file in it (e.g. report.md)".into(),
        )),
        Ok(m) if m.file_type().is_block_device() => Err(refused(
            "is a block device; write the output to a file".into(),
        )),
        Ok(m) if !m.is_file() => Err(refused(
            "is neither a file nor a device; write the output to a file".into(),
        )),
        existing => {
            let dir = target.parent().unwrap_or(Path::new("/"));
            let name = target
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let tmp = tempfile::Builder::new()
                .prefix(&format!(".{name}."))
                .suffix(".tmp")
                .tempfile_in(dir)
                .map_err(|e| refused(format!("cannot write in {}: {e}", dir.display())))?;
            // A replaced file keeps its mode; a new one is readable by all
            // like any file the user makes (tempfile's are 0600).
            let mode = existing.map_or(0o644, |m| m.mode() & 0o7777);
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| refused(format!("cannot set its mode: {e}")))?;
            Ok(OutputFile {
                shown: dest.into(),
                kind: Kind::Replace { tmp, target },
            })
        }
    }
}

impl OutputFile {
    /// The path as the user gave it.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Writes the whole of `bytes` and puts it in place.
    pub fn finish(self, bytes: &[u8]) -> Result<(), OutputError> {
        let err = |source| OutputError::Write {
            dest: self.shown.display().to_string(),
            source,
        };
        match self.kind {
            Kind::Through(mut f) => f.write_all(bytes).and_then(|()| f.flush()).map_err(err),
            Kind::Replace { mut tmp, target } => {
                tmp.write_all(bytes)
                    .and_then(|()| tmp.as_file().sync_all())
                    .map_err(err)?;
                tmp.persist(&target).map_err(|e| err(e.error))?;
                Ok(())
            }
        }
    }
}

/// Where writing `dest` lands: the end of its symlinks, or (for a path
/// that does not exist yet) the resolved folder joined with its name.
fn resolve(dest: &Path) -> Result<PathBuf, String> {
    match std::fs::canonicalize(dest) {
        Ok(p) => return Ok(p),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(reason(&e)),
        Err(_) => {}
    }
    if std::fs::symlink_metadata(dest).is_ok() {
        return Err("is a symlink to a file that does not exist; name the file itself".into());
    }
    let name = dest
        .file_name()
        .ok_or_else(|| "names no file; name a file (e.g. report.md)".to_string())?;
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir = std::fs::canonicalize(dir).map_err(|e| {
        format!(
            "folder {} {}; create it first",
            dir.display(),
            reason(&e).trim_start_matches("is ")
        )
    })?;
    if !dir.is_dir() {
        return Err(format!("{} is not a folder", dir.display()));
    }
    Ok(dir.join(name))
}

/// An I/O error as the end of a sentence about a path.
fn reason(e: &std::io::Error) -> String {
    // ELOOP on Linux (std has no stable kind for it).
    const ELOOP: i32 = 40;
    match e.raw_os_error() {
        Some(ELOOP) => "is a symlink loop".into(),
        _ if e.kind() == std::io::ErrorKind::NotFound => "does not exist".into(),
        _ => format!("cannot be reached: {e}"),
    }
}

/// Whether two paths name one file (the same inode once every symlink is
/// followed; a path that does not exist names no input).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Checks an output folder before anything is made in it: it is a folder
/// or does not exist yet, and its nearest existing ancestor is a folder
/// this process can create in (tried with a temporary folder, removed at
/// once). `/dev/null`, a file, `/proc/x` or a read-only place are refused.
pub fn check_folder(flag: &'static str, dest: &Path) -> Result<(), OutputError> {
    let refused = |why: String| OutputError::refused(flag, dest, why);
    let mut probe = dest.to_path_buf();
    loop {
        match std::fs::metadata(&probe) {
            Ok(m) if m.is_dir() => break,
            Ok(_) if probe == dest => {
                return Err(refused(
                    "is not a folder; name a results folder (it is created)".into(),
                ))
            }
            Ok(_) => return Err(refused(format!("{} is not a folder", probe.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                probe = match probe.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                    _ => PathBuf::from("."),
                };
            }
            Err(e) => return Err(refused(reason(&e))),
        }
    }
    let pseudo = ["/proc", "/sys", "/dev"];
    let real = std::fs::canonicalize(&probe).unwrap_or(probe.clone());
    if pseudo.iter().any(|p| real.starts_with(p)) {
        return Err(refused(format!(
            "{} is a kernel pseudo filesystem; write results to a real folder",
            real.display()
        )));
    }
    tempfile::Builder::new()
        .prefix(".lazyinit-write-check.")
        .tempdir_in(&probe)
        .map(drop)
        .map_err(|e| refused(format!("cannot create in {}: {e}", probe.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    #[test]
    fn an_input_is_refused_also_through_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("results.csv");
        std::fs::write(&input, "data").unwrap();
        let link = d.path().join("link.csv");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        for dest in [&input, &link] {
            let e = open("out", dest, &[&input]).unwrap_err();
            assert!(matches!(e, OutputError::IsInput { .. }), "{e}");
        }
        assert_eq!(text(&input), "data");
    }

    #[test]
    fn a_symlink_is_written_through_and_stays_a_link() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("real.md");
        std::fs::write(&target, "old").unwrap();
        let link = d.path().join("link.md");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        open("out", &link, &[]).unwrap().finish(b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(text(&target), "new");
    }

    #[test]
    fn dropped_unfinished_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("r.md");
        drop(open("out", &dest, &[]).unwrap());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_device_is_written_through() {
        let dev = Path::new("/dev/null");
        open("out", dev, &[]).unwrap().finish(b"x").unwrap();
        assert!(std::fs::metadata(dev).unwrap().file_type().is_char_device());
    }

    #[test]
    fn folders_loops_and_missing_parents_are_refused_with_the_reason() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let b = d.path().join("b");
        std::os::unix::fs::symlink(&a, &b).unwrap();
        std::os::unix::fs::symlink(&b, &a).unwrap();
        for (dest, needle) in [
            (d.path().to_path_buf(), "is a folder"),
            (a.clone(), "symlink loop"),
            (d.path().join("no/r.md"), "does not exist; create it first"),
        ] {
            let e = open("out", &dest, &[]).unwrap_err().to_string();
            assert!(e.contains(needle), "{}: {e}", dest.display());
        }
    }

    #[test]
    fn output_folders_are_checked_and_nothing_is_made() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("f");
        std::fs::write(&file, "").unwrap();
        check_folder("out", &d.path().join("new/deeper")).unwrap();
        for dest in [
            file.as_path(),
            Path::new("/dev/null"),
            Path::new("/proc/x"),
            Path::new("/sys/x"),
        ] {
            assert!(check_folder("out", dest).is_err(), "{}", dest.display());
        }
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }
}
