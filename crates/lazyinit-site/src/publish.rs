//! Writing the site: into a fresh folder beside `--out`, renamed over it
//! only when complete, so a reader never sees half a site. A folder that
//! is not a site this wrote (no [`MARKER`] in it) is never replaced.

use std::path::{Path, PathBuf};

use lazyinit_report::plot::PlotError;

use crate::{render, SiteData};

/// The file that marks a folder as a published site.
pub const MARKER: &str = ".lazyinit-site";

#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error("--out {0}: exists and is not a folder; give a new folder or a site published before")]
    NotAFolder(PathBuf),
    #[error("--out {0}: folder is not empty and not a site published before (no {MARKER}); give a new or empty folder")]
    NotASite(PathBuf),
    #[error("--out {0}: its parent folder does not exist")]
    NoParent(PathBuf),
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Plot(#[from] PlotError),
}

impl SiteError {
    /// The user gave a bad `--out` (exit 2), not a failure of the machine.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            SiteError::NotAFolder(_) | SiteError::NotASite(_) | SiteError::NoParent(_)
        )
    }
}

/// A bad `--out` is 2; a write or a plot that failed is 3.
impl lazyinit_core::exit::ExitCode for SiteError {
    fn exit_code(&self) -> u8 {
        match self.is_bad_input() {
            true => lazyinit_core::exit::BAD_INPUT,
            false => lazyinit_core::exit::INFRASTRUCTURE,
        }
    }
}

/// What was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    pub files: usize,
    pub bytes: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SiteError + '_ {
    move |source| SiteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Refuses an `--out` that must not be replaced; Ok(true) if it exists.
fn check_out(out: &Path) -> Result<bool, SiteError> {
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(SiteError::NoParent(out.to_path_buf()));
    }
    if !out.exists() {
        return Ok(false);
    }
    if !out.is_dir() {
        return Err(SiteError::NotAFolder(out.to_path_buf()));
    }
    let empty = std::fs::read_dir(out).map_err(io(out))?.next().is_none();
    if !empty && !out.join(MARKER).is_file() {
        return Err(SiteError::NotASite(out.to_path_buf()));
    }
    Ok(true)
}

/// A sibling of `out` named after it: `.NAME.SUFFIX-PID`.
fn sibling(out: &Path, suffix: &str) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "site".into());
    out.with_file_name(format!(".{name}.{suffix}-{}", std::process::id()))
}

/// Renders the site and puts it at `out` (created, or replacing a site
/// published there before).
pub fn publish(data: &SiteData, out: &Path) -> Result<Published, SiteError> {
    let exists = check_out(out)?;
    let pages = render(data)?;
    let tmp = sibling(out, "new");
    let written = write_all(&tmp, &pages);
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if exists {
        // Two renames: the old site stays whole until the new one is in place.
        let old = sibling(out, "old");
        std::fs::rename(out, &old).map_err(io(out))?;
        std::fs::rename(&tmp, out).map_err(io(out))?;
        std::fs::remove_dir_all(&old).map_err(io(&old))?;
    } else {
        std::fs::rename(&tmp, out).map_err(io(out))?;
    }
    Ok(Published {
        files: pages.len(),
        bytes: pages.iter().map(|p| p.text.len() as u64).sum(),
    })
}

fn write_all(dir: &Path, pages: &[crate::Page]) -> Result<(), SiteError> {
    std::fs::create_dir_all(dir.join("series")).map_err(io(dir))?;
    for p in pages {
        let path = dir.join(&p.path);
        std::fs::write(&path, &p.text).map_err(io(&path))?;
    }
    let marker = dir.join(MARKER);
    std::fs::write(&marker, "published by lazyinit-bench history publish\n").map_err(io(&marker))
}
