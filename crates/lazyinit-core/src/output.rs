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
//! (`run --out`); [`guard_folder`] adds to it what a command reads and
//! whether the folder is a previous output of the same kind, and
//! [`NewFolder`] puts a folder built whole in place with one rename.
//!
//! What a command reads is a [`Reads`]: files, and trees read whole (a
//! shard, a source repository, a run's cell folders), named or implied (a
//! results.csv implies its spec.toml and its cells' groups data, a SQLite
//! history its -wal and -shm). Both sides are compared once canonical
//! (through symlinks and `..`), files also by inode (hard links).

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
    /// A folder output that would replace or hold what the command reads,
    /// or a file output inside a tree the command reads.
    #[error("--{flag} {dest} {how} {input}, which this command reads: write the output elsewhere")]
    Overlaps {
        flag: &'static str,
        dest: String,
        how: &'static str,
        input: String,
    },
    /// An output that is a run's evidence (docs/results-folder.md): only
    /// the run, merge or bisect that made it writes it.
    #[error("--{flag} {dest} {what}: a run's evidence is written by its run only; write the output elsewhere")]
    Evidence {
        flag: &'static str,
        dest: String,
        what: String,
    },
    /// Two outputs of one command that are one file.
    #[error("{a} {a_dest} and {b} {b_dest} are the same file: one output would replace the other; give each its own path")]
    Same {
        a: String,
        a_dest: String,
        b: String,
        b_dest: String,
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

/// Opens `dest` for a command that reads `reads`; `flag` names the
/// option in messages (`out`, `svg`). Nothing is created but the
/// temporary file, which goes again unless [`OutputFile::finish`] succeeds.
pub fn open(flag: &'static str, dest: &Path, reads: &Reads) -> Result<OutputFile, OutputError> {
    let refused = |why: String| OutputError::refused(flag, dest, why);
    reads.check_file(flag, dest)?;
    check_not_evidence(flag, dest)?;
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
            let tmp = tempfile::Builder::new()
                .prefix(&hidden_prefix(&target))
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

/// Refuses an output (a file, a folder, a database) that is evidence of
/// a results folder or lies inside its evidence
/// ([`crate::RunFolder::evidence_at`]), once its links and `..` are
/// resolved (`/proc/self/cwd/...` too), or that is a file with other hard
/// links (one may be a run's evidence, which no path check sees). Every
/// output goes through it before anything is opened or written: [`open`]
/// and [`guard_folder`] call it, and a command with another kind of
/// output (`--db`) calls it first.
pub fn check_not_evidence(flag: &'static str, dest: &Path) -> Result<(), OutputError> {
    let target = canonical(dest);
    if let Some(what) = crate::RunFolder::evidence_at(&target) {
        return Err(OutputError::Evidence {
            flag,
            dest: dest.display().to_string(),
            what,
        });
    }
    match std::fs::metadata(dest) {
        Ok(m) if m.is_file() && m.nlink() > 1 => Err(OutputError::refused(
            flag,
            dest,
            format!(
                "is a file with {} hard links, and another may be a run's evidence; remove this link or name another file",
                m.nlink()
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses two outputs of one command that are one file (`report --out
/// X --svg X`): each is named as the user would (`--out`, `--svg`'s
/// cycle plot) with its path. Outputs that do not exist yet compare by
/// their resolved paths.
pub fn distinct(outputs: &[(&str, &Path)]) -> Result<(), OutputError> {
    for (i, (a, pa)) in outputs.iter().enumerate() {
        for (b, pb) in &outputs[i + 1..] {
            if canonical(pa) == canonical(pb) || same_file(pa, pb) {
                return Err(OutputError::Same {
                    a: a.to_string(),
                    a_dest: pa.display().to_string(),
                    b: b.to_string(),
                    b_dest: pb.display().to_string(),
                });
            }
        }
    }
    Ok(())
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

/// What a command reads, so that no output lands on it: files, and trees
/// read whole. Paths that do not exist (yet) are kept too: a history file
/// the command is about to create is no place for a report either.
#[derive(Debug, Clone, Default)]
pub struct Reads {
    files: Vec<PathBuf>,
    trees: Vec<PathBuf>,
}

/// The `kernel-config` a run's spec.toml names, if it names one: read
/// lightly (a bounded file, any other key ignored), since a guard runs
/// before the spec is checked.
fn spec_kernel_config(spec: &Path) -> Option<PathBuf> {
    let text = crate::input::read_text_bounded(spec, crate::input::MAX_SPEC_BYTES, "spec").ok()?;
    let v: toml::Table = toml::from_str(&text).ok()?;
    v.get("kernel-config")?.as_str().map(PathBuf::from)
}

impl Reads {
    pub fn new() -> Self {
        Self::default()
    }

    /// Plain files, as given.
    pub fn files<P: AsRef<Path>>(paths: &[P]) -> Self {
        let mut r = Self::new();
        for p in paths {
            r = r.file(p.as_ref());
        }
        r
    }

    pub fn file(mut self, p: impl Into<PathBuf>) -> Self {
        self.files.push(p.into());
        self
    }

    /// A folder read whole: nothing is written into it, over it, or over
    /// a folder holding it.
    pub fn tree(mut self, p: impl Into<PathBuf>) -> Self {
        self.trees.push(p.into());
        self
    }

    /// A run's results.csv and what reading it implies: the run folder's
    /// spec.toml, the kernel config that spec names (its content is in the
    /// run's key: `history check` and `import` read it), and its cell
    /// folders (groups.csv, groups.csv.gz, the files a KCIDB report
    /// lists). A report beside them is no input.
    pub fn results_csv(self, csv: impl Into<PathBuf>) -> Self {
        let csv = csv.into();
        let run = crate::RunFolder::of_results_csv(&csv);
        let spec = run.spec_toml();
        let mut r = self.file(spec.path());
        if let Some(c) = spec_kernel_config(spec.path()) {
            r = r.file(c);
        }
        let root = match run.root().as_os_str().is_empty() {
            true => Path::new("."),
            false => run.root(),
        };
        if let Ok(entries) = std::fs::read_dir(root) {
            for e in entries.filter_map(Result::ok) {
                if crate::CellFolder::is_cell_folder(&e.path()) {
                    r = r.tree(e.path());
                }
            }
        }
        r.file(csv)
    }

    /// A run folder (`history check`): its results.csv and what that
    /// implies.
    pub fn run_folder(self, dir: &Path) -> Self {
        self.results_csv(crate::RunFolder::new(dir).results_csv().path())
    }

    /// A SQLite database and the files SQLite keeps beside it.
    pub fn sqlite(mut self, db: &Path) -> Self {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            self.files.push(PathBuf::from(name));
        }
        self
    }

    fn all(&self) -> impl Iterator<Item = (&PathBuf, bool)> {
        let files = self.files.iter().map(|f| (f, false));
        files.chain(self.trees.iter().map(|t| (t, true)))
    }

    /// Refuses a file output that is an input or lies in a tree read.
    pub fn check_file(&self, flag: &'static str, dest: &Path) -> Result<(), OutputError> {
        let target = canonical(dest);
        for (input, tree) in self.all() {
            let read = canonical(input);
            if read == target || (!tree && same_file(input, dest)) {
                return Err(OutputError::IsInput {
                    flag,
                    dest: dest.display().to_string(),
                    input: input.display().to_string(),
                });
            }
            if tree && target.starts_with(&read) {
                return Err(overlaps(flag, dest, "is inside", input));
            }
        }
        Ok(())
    }

    /// Refuses a folder output that is, holds, or lies in what is read.
    pub fn check_folder(&self, flag: &'static str, dest: &Path) -> Result<(), OutputError> {
        let target = canonical(dest);
        for (input, tree) in self.all() {
            let read = canonical(input);
            if read.starts_with(&target) || same_file(input, dest) {
                return Err(overlaps(flag, dest, "would replace", input));
            }
            if tree && target.starts_with(&read) {
                return Err(overlaps(flag, dest, "is inside", input));
            }
        }
        Ok(())
    }
}

fn overlaps(flag: &'static str, dest: &Path, how: &'static str, input: &Path) -> OutputError {
    OutputError::Overlaps {
        flag,
        dest: dest.display().to_string(),
        how,
        input: input.display().to_string(),
    }
}

/// `p` made absolute, its symlinks followed and `..` taken, as far as it
/// exists; the rest (which has no symlinks, since it does not exist) is
/// joined lexically.
pub fn canonical(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut rest = Vec::new();
    let mut head = abs.as_path();
    loop {
        if let Ok(c) = std::fs::canonicalize(head) {
            let mut out = c;
            for part in rest.iter().rev() {
                match part {
                    std::path::Component::ParentDir => {
                        out.pop();
                    }
                    std::path::Component::CurDir => {}
                    c => out.push(c),
                }
            }
            return out;
        }
        match (head.parent(), head.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                head = parent;
            }
            _ => return abs,
        }
    }
}

/// The whole first check of a folder output: [`check_folder`], then what
/// the command reads, then ownership: an existing folder that is not empty
/// must be a previous output of the same kind (`owned`), which `kind`
/// names in the message.
pub fn guard_folder(
    flag: &'static str,
    dest: &Path,
    reads: &Reads,
    kind: &str,
    owned: impl Fn(&Path) -> bool,
) -> Result<(), OutputError> {
    reads.check_folder(flag, dest)?;
    check_not_evidence(flag, dest)?;
    check_folder(flag, dest)?;
    let entries = match std::fs::read_dir(dest) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(OutputError::refused(flag, dest, reason(&e))),
    };
    let empty = entries.count() == 0;
    if !empty && !owned(dest) {
        return Err(OutputError::refused(
            flag,
            dest,
            format!("is a folder that is not empty and not {kind}; give a new or empty folder"),
        ));
    }
    Ok(())
}

/// Writes `bytes` to `path` whole or not at all: an unpredictable
/// temporary file (created exclusively) in the same folder, synced, then
/// renamed onto it; removed on any failure. For a command's own files
/// inside a folder it owns (the checks of [`open`] are for user paths).
/// The project's one atomic write (0644; [`write_atomic_private`] for a
/// secret).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_mode(path, bytes, 0o644)
}

/// [`write_atomic`] for a secret: the file is 0600 from its creation (the
/// temporary file is created 0600 and never widened).
pub fn write_atomic_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_mode(path, bytes, 0o600)
}

fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut tmp = temp_beside_mode(path, mode)?;
    // The file's own write: NamedTempFile's would name the temporary file
    // in the error, which is not the user's.
    tmp.as_file_mut().write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// `.NAME.`: the start of the name of what is written beside `path` before
/// it is put in place (hidden, and named after what it will be).
fn hidden_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".{name}.")
}

/// An empty temporary file beside `path`, named `.NAME.XXXXXX.tmp`,
/// readable by all (as a file the user makes); gone when dropped.
pub fn temp_beside(path: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    temp_beside_mode(path, 0o644)
}

/// [`temp_beside`] with `mode` (tempfile creates it 0600; set after).
fn temp_beside_mode(path: &Path, mode: u32) -> std::io::Result<tempfile::NamedTempFile> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(&hidden_prefix(path))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    if mode != 0o600 {
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    Ok(tmp)
}

/// Why a folder could not be put in place.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// A file or folder of the earlier output that the harness did not
    /// write (relative to it) where the new folder has one too: neither
    /// can be kept, so nothing is replaced.
    #[error("{} is not written by the harness, and the new folder writes it too", .0.display())]
    Clash(PathBuf),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What of the folder `dir` the harness did not write, as paths relative
/// to it: `written` says whether the harness wrote a file (or link) at a
/// relative path; a folder holding nothing it wrote is one entry, whole.
pub fn foreign(dir: &Path, written: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut found = Vec::new();
    foreign_in(dir, Path::new(""), written, &mut found);
    found
}

/// [`foreign`] under `rel`; whether anything under it was written.
fn foreign_in(
    dir: &Path,
    rel: &Path,
    written: &dyn Fn(&Path) -> bool,
    found: &mut Vec<PathBuf>,
) -> bool {
    let Ok(entries) = std::fs::read_dir(dir.join(rel)) else {
        return false;
    };
    let mut names: Vec<_> = entries.filter_map(Result::ok).collect();
    names.sort_by_key(|e| e.file_name());
    let mut any = false;
    for e in names {
        let path = rel.join(e.file_name());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            let mut inner = Vec::new();
            if foreign_in(dir, &path, written, &mut inner) {
                any = true;
                found.extend(inner);
            } else {
                found.push(path);
            }
        } else if written(&path) {
            any = true;
        } else {
            found.push(path);
        }
    }
    any
}

/// Moves each of `paths` (relative) from `from` to `to`.
fn move_all(from: &Path, to: &Path, paths: &[PathBuf]) -> std::io::Result<()> {
    for p in paths {
        let dest = to.join(p);
        if let Some(d) = dest.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::rename(from.join(p), dest)?;
    }
    Ok(())
}

/// A folder built whole beside its destination, then put in place with one
/// rename: `rename` when nothing is there, an atomic exchange when a
/// previous output is (which then goes), so a reader sees the old folder
/// or the new one, never none and never half. What of the previous output
/// the harness did not write (a user's notes, a report) is moved into the
/// new folder first, or the replace is refused when the new folder has a
/// file there too ([`NewFolder::place`]). The folder is made with an
/// unpredictable name (`mkdir`, which fails on anything there); dropped
/// unplaced, it is removed.
#[derive(Debug)]
pub struct NewFolder {
    /// None once placed by a plain rename (nothing left to remove).
    tmp: Option<tempfile::TempDir>,
    path: PathBuf,
    dest: PathBuf,
}

impl NewFolder {
    /// A new empty folder beside `dest` (whose parent folders are made).
    pub fn beside(dest: &Path) -> std::io::Result<Self> {
        let dest = canonical(dest);
        let parent = dest.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(parent)?;
        let tmp = tempfile::Builder::new()
            .prefix(&hidden_prefix(&dest))
            .suffix(".new")
            .tempdir_in(parent)?;
        // A folder the user makes is 0755; tempfile's are 0700.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))?;
        Ok(NewFolder {
            path: tmp.path().to_path_buf(),
            tmp: Some(tmp),
            dest,
        })
    }

    /// Where to build it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The resolved destination.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Puts the folder at its destination. Over a previous output, what of
    /// it `written` does not claim for the harness (a relative path) is
    /// kept: moved into the new folder before the exchange (and back if it
    /// fails), or, when the new folder has something at that path, nothing
    /// is done and [`PlaceError::Clash`] names it. On success the previous
    /// output (now in the temporary place) is removed on drop; on failure
    /// the built folder is still at [`NewFolder::path`] until dropped.
    /// Returns what was kept.
    pub fn place(&mut self, written: &dyn Fn(&Path) -> bool) -> Result<Vec<PathBuf>, PlaceError> {
        if std::fs::symlink_metadata(&self.dest)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            self.place_whole()?;
            return Ok(Vec::new());
        }
        let kept = match std::fs::metadata(&self.dest) {
            Ok(m) if m.is_dir() => foreign(&self.dest, written),
            _ => Vec::new(),
        };
        for k in &kept {
            let taken = k
                .ancestors()
                .filter(|a| !a.as_os_str().is_empty())
                .any(|a| match std::fs::symlink_metadata(self.path.join(a)) {
                    Ok(m) => a == k.as_path() || !m.is_dir(),
                    Err(_) => false,
                });
            if taken {
                return Err(PlaceError::Clash(k.clone()));
            }
        }
        if let Err(e) = move_all(&self.dest, &self.path, &kept).and_then(|()| self.place_whole()) {
            // Each that moved goes back (the others fail to, harmlessly).
            for k in &kept {
                let _ = move_all(&self.path, &self.dest, std::slice::from_ref(k));
            }
            return Err(e.into());
        }
        Ok(kept)
    }

    /// The rename (or exchange) itself.
    fn place_whole(&mut self) -> std::io::Result<()> {
        match std::fs::symlink_metadata(&self.dest) {
            Ok(_) => {
                let flags = nix::fcntl::RenameFlags::RENAME_EXCHANGE;
                nix::fcntl::renameat2(None, &self.path, None, &self.dest, flags)
                    .map_err(std::io::Error::from)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::rename(&self.path, &self.dest)?;
                // Nothing is left at the temporary name for the drop.
                if let Some(t) = self.tmp.take() {
                    let _ = t.keep();
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
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
            let e = open("out", dest, &Reads::files(&[&input])).unwrap_err();
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
        open("out", &link, &Reads::new())
            .unwrap()
            .finish(b"new")
            .unwrap();
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
        drop(open("out", &dest, &Reads::new()).unwrap());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_device_is_written_through() {
        let dev = Path::new("/dev/null");
        open("out", dev, &Reads::new())
            .unwrap()
            .finish(b"x")
            .unwrap();
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
            let e = open("out", &dest, &Reads::new()).unwrap_err().to_string();
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

    #[test]
    fn implied_inputs_are_refused_through_dotdot_and_folders_over_them_too() {
        let d = tempfile::tempdir().unwrap();
        let run = d.path().join("run");
        let cell = run.join("qemu-x-r1");
        std::fs::create_dir_all(&cell).unwrap();
        std::fs::write(run.join("results.csv"), "rows").unwrap();
        std::fs::write(run.join("spec.toml"), "spec").unwrap();
        std::fs::write(cell.join("groups.csv.gz"), "gz").unwrap();
        let reads = Reads::new().results_csv(run.join("results.csv"));
        for dest in [
            run.join("qemu-x-r1/../spec.toml"),
            cell.join("groups.csv.gz"),
            cell.join("new.svg"),
        ] {
            assert!(open("out", &dest, &reads).is_err(), "{}", dest.display());
        }
        // Beside the run, a report is fine.
        open("out", &run.join("report.md"), &reads).unwrap();
        for dest in [run.clone(), d.path().to_path_buf(), cell.join("sub")] {
            let e = guard_folder("out", &dest, &reads, "x", |_| true).unwrap_err();
            assert!(matches!(e, OutputError::Overlaps { .. }), "{e}");
        }
        // A non-empty folder not owned is refused; an owned one is taken.
        let other = d.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("f"), "").unwrap();
        let e = guard_folder("out", &other, &Reads::new(), "a merged run", |_| false);
        assert!(e.unwrap_err().to_string().contains("not a merged run"));
        guard_folder("out", &other, &Reads::new(), "a merged run", |_| true).unwrap();
    }

    #[test]
    fn a_new_folder_is_placed_whole_and_leaves_nothing_beside_it() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        for body in ["one", "two"] {
            let mut new = NewFolder::beside(&out).unwrap();
            std::fs::write(new.path().join("f"), body).unwrap();
            new.place(&|_| true).unwrap();
            drop(new);
            assert_eq!(text(&out.join("f")), body);
            let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
            assert_eq!(names.len(), 1, "only the output is left");
        }
        // Dropped unplaced: the earlier output stays, nothing else.
        let new = NewFolder::beside(&out).unwrap();
        std::fs::write(new.path().join("f"), "three").unwrap();
        drop(new);
        assert_eq!(text(&out.join("f")), "two");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn write_atomic_uses_no_fixed_name_and_leaves_no_temporary_file() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("chk.xml");
        // A link planted where the old fixed temporary name was.
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("chk.tmp-history")).unwrap();
        write_atomic(&dest, b"report").unwrap();
        assert_eq!(text(&dest), "report");
        assert_eq!(text(&victim), "keep");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 3);
    }
}
