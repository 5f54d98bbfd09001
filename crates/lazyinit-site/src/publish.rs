//! Writing the site: built whole in a fresh folder beside `--out`, then
//! put in place with one atomic rename (an exchange over a site published
//! before, `lazyinit_core::output::NewFolder`), so a reader sees the old
//! site or the new one, never half and never none. A folder that is not a
//! site this wrote (no [`MARKER`] in it) is never replaced. The marker
//! lists the files the harness wrote; a republish carries every other file
//! (a `.git`, a `CNAME`, `notes/`) over into the new site.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use lazyinit_core::output::{self, NewFolder, OutputError, PlaceError, Reads};
use lazyinit_report::plot::PlotError;

use crate::{render, SiteData};

/// The file that marks a folder as a published site, and lists its files.
pub const MARKER: &str = ".lazyinit-site";

/// The marker's first line; the files written follow, one a line.
const MARKER_HEAD: &str = "published by lazyinit-bench history publish";

#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error("--out {0}: exists and is not a folder; give a new folder or a site published before")]
    NotAFolder(PathBuf),
    #[error("--out {0}: its parent folder does not exist")]
    NoParent(PathBuf),
    #[error("the site's input: {0}; fix it in the --data file or the history")]
    BadData(String),
    /// Not a site published before, or it would replace what is read.
    #[error(transparent)]
    Refused(OutputError),
    #[error("--out {out}: {path} is in the site but not written by it, and the new site writes it too; move it away and publish again")]
    Clash { out: PathBuf, path: String },
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
            SiteError::NotAFolder(_)
                | SiteError::NoParent(_)
                | SiteError::BadData(_)
                | SiteError::Refused(_)
                | SiteError::Clash { .. }
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
/// [`publish`] checks again; a command checks first, before any work.
pub fn check_out(out: &Path, reads: &Reads) -> Result<bool, SiteError> {
    // A run's evidence first: what it is matters more than that it is a file.
    output::check_not_evidence("out", out).map_err(SiteError::Refused)?;
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(SiteError::NoParent(out.to_path_buf()));
    }
    if out.exists() && !out.is_dir() {
        return Err(SiteError::NotAFolder(out.to_path_buf()));
    }
    let kind = format!("a site published before (no {MARKER})");
    output::guard_folder("out", out, reads, &kind, |d| d.join(MARKER).is_file())
        .map_err(SiteError::Refused)?;
    Ok(out.exists())
}

/// The files a site published before says the harness wrote (relative
/// paths). A marker of an older harness lists none: its pages were the
/// index, the style sheet and the series pages.
fn written_before(out: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(out.join(MARKER)).unwrap_or_default();
    let mut listed: BTreeSet<String> = text
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if listed.is_empty() {
        listed.extend(["index.html".to_string(), "style.css".to_string()]);
        if let Ok(d) = std::fs::read_dir(out.join("series")) {
            for e in d.filter_map(Result::ok) {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.ends_with(".html") {
                    listed.insert(format!("series/{name}"));
                }
            }
        }
    }
    listed.insert(MARKER.into());
    listed
}

/// Renders the site and puts it at `out` (created, or replacing a site
/// published there before, whose files the harness did not write are
/// kept). `reads` are the command's inputs: the site is never over them.
pub fn publish(data: &SiteData, out: &Path, reads: &Reads) -> Result<Published, SiteError> {
    data.check().map_err(SiteError::BadData)?;
    let exists = check_out(out, reads)?;
    let pages = render(data)?;
    let written = match exists {
        true => written_before(out),
        false => BTreeSet::new(),
    };
    let mut new = NewFolder::beside(out).map_err(io(out))?;
    write_all(new.path(), &pages)?;
    // The user's files go over last (lazyinit_core::output's one folder
    // replace), and come back if the site cannot be placed; one where the
    // new site writes a page is refused, nothing changed.
    let written = |p: &Path| written.contains(p.to_string_lossy().as_ref());
    new.place(&written).map_err(|e| match e {
        PlaceError::Clash(p) => SiteError::Clash {
            out: out.to_path_buf(),
            path: p.display().to_string(),
        },
        PlaceError::Io(e) => io(out)(e),
    })?;
    Ok(Published {
        files: pages.len(),
        bytes: pages.iter().map(|p| p.text.len() as u64).sum(),
    })
}

fn write_all(dir: &Path, pages: &[crate::Page]) -> Result<(), SiteError> {
    std::fs::create_dir_all(dir.join("series")).map_err(io(dir))?;
    let mut listed = format!("{MARKER_HEAD}\n");
    for p in pages {
        let path = dir.join(&p.path);
        std::fs::write(&path, &p.text).map_err(io(&path))?;
        listed.push_str(&p.path);
        listed.push('\n');
    }
    let marker = dir.join(MARKER);
    std::fs::write(&marker, listed).map_err(io(&marker))
}
