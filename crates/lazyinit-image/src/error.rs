use std::path::{Path, PathBuf};

use lazyinit_core::exit::{self, ExitCode, ExitError};
use lazyinit_core::Arch;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("cannot build the guest image")]
    MissingTool(#[source] ExitError),
    #[error("apt has no usable {arch} package lists: {detail}")]
    PackageLists {
        arch: Arch,
        #[source]
        hint: ExitError,
        detail: String,
    },
    #[error("cannot run {what}")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} failed: {stderr}")]
    Tool { what: String, stderr: String },
    #[error("downloaded {} has SHA256 {seen}, which matches no package apt's lists name; run `apt-get update` and retry", file.display())]
    Checksum { file: PathBuf, seen: String },
    #[error("the {arch} packages do not contain /{path}, which the image needs")]
    MissingFile { arch: Arch, path: String },
    #[error(
        "/{binary} needs {soname}, which none of the unpacked {arch} packages provides: \
         add the package that ships it to PACKAGES in lazyinit-image"
    )]
    MissingLibrary {
        arch: Arch,
        binary: String,
        soname: String,
    },
    #[error("/{path} is built for `{seen}`, not {arch}: the {arch} packages were not what apt downloaded")]
    WrongMachine {
        arch: Arch,
        path: String,
        seen: String,
    },
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a valid image manifest", path.display())]
    Manifest {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("the image build task failed: {0}")]
    Task(String),
    /// The project's SSH keys the image holds could not be made.
    #[error(transparent)]
    Keys(#[from] lazyinit_ssh::SshError),
}

/// A missing host tool (apt's lists, a key tool) is 4; every other
/// failure is the infrastructure's.
impl ExitCode for ImageError {
    fn exit_code(&self) -> u8 {
        match self {
            ImageError::MissingTool(e) | ImageError::PackageLists { hint: e, .. } => e.exit_code(),
            ImageError::Keys(e) => e.exit_code(),
            _ => exit::INFRASTRUCTURE,
        }
    }
}

impl ImageError {
    pub(crate) fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        ImageError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}
