//! Kernel builds: fragments, variant patches, verification and the
//! content-keyed cache.
//!
//! ```no_run
//! # async fn f() -> Result<(), lazyinit_kernel::KernelError> {
//! use lazyinit_kernel::{build, BuildOptions, KernelSpec};
//! let spec = KernelSpec::new("x86_64".parse().unwrap(), "250".parse().unwrap(), "nofix".parse().unwrap());
//! let k = build(&spec, &BuildOptions::default()).await?;
//! println!("{} boots as {}", k.image.display(), k.manifest.kernel_release);
//! # Ok(()) }
//! ```
//!
//! A build is keyed by everything that determines it (see
//! [`cache::key_material`]); a second request is a cache hit. Both variants
//! of one source/arch/HZ/profile share one build tree, so a switch
//! recompiles fs/ext4 and relinks. The variant is proven from the text of
//! `ext4_run_li_request` after patching, and the resolved `.config` is checked
//! against the fragments, before anything is compiled.

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use lazyinit_core::identity::KernelId;
pub use lazyinit_core::{Arch, Hz, KernelSource, Variant};

pub mod archive;
pub mod budget;
mod build;
pub mod cache;
pub mod debian;
mod decide;
pub mod emulator;
pub mod error;
pub mod fetch;
pub mod fragments;
pub mod seed;
pub mod source;
pub mod tools;
pub mod userconfig;
pub mod variant;

pub use cache::Manifest;
pub use error::KernelError;
pub use fragments::Profile;
pub use variant::{Detected, Method};

/// One kernel to build: the kernel's identity (the plan's, the row's and
/// the manifest's type) and how to configure and patch it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelSpec {
    /// Arch, source, HZ, variant and profile.
    pub id: KernelId,
    /// A user's own config as the base (`--config FILE`, see
    /// [`userconfig`]); None: `allnoconfig` plus kernels/fragments.
    pub config: Option<PathBuf>,
    /// Build the tree's text as it is (a bisect's commit): no variant
    /// patch, whatever `ext4_run_li_request` says; `variant` is then only
    /// the kernel's label, and the text's reading (fix, nofix, unknown) is
    /// recorded in the manifest's `committed_text`.
    pub as_committed: bool,
}

impl KernelSpec {
    /// Debian's 6.1 source, QEMU profile, the minimal config.
    pub fn new(arch: Arch, hz: Hz, variant: Variant) -> Self {
        KernelSpec::of(KernelId {
            arch,
            source: KernelSource::default(),
            hz,
            variant,
            profile: Profile::default(),
        })
    }

    /// The kernel `id`, from the minimal config, patched to its variant.
    pub fn of(id: KernelId) -> Self {
        KernelSpec {
            id,
            config: None,
            as_committed: false,
        }
    }
}

/// Progress of a build, for a UI or a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildEvent {
    /// A step started (unpack, apply <patch>, configure, make, publish).
    Step(String),
    /// One line of a build command's output (also kept in `build.log`).
    Line(String),
    /// Download progress of a source tarball.
    Bytes { done: u64, total: Option<u64> },
}

pub type ProgressFn = Arc<dyn Fn(BuildEvent) + Send + Sync>;

#[derive(Clone)]
pub struct BuildOptions {
    /// Root of the cache (kernels go under `<cache_dir>/kernel/`).
    pub cache_dir: PathBuf,
    /// `make -j`.
    pub jobs: usize,
    /// `nice -n` for the compiler (the builders are shared).
    pub nice: i32,
    pub progress: Option<ProgressFn>,
    /// Where `--source X.Y.Z` tarballs come from (see [`fetch`]).
    pub mirror: String,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            cache_dir: lazyinit_core::paths::cache_dir(),
            jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
            nice: 10,
            progress: None,
            mirror: fetch::FetchOptions::default().mirror,
        }
    }
}

impl std::fmt::Debug for BuildOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildOptions")
            .field("cache_dir", &self.cache_dir)
            .field("jobs", &self.jobs)
            .field("nice", &self.nice)
            .field("mirror", &self.mirror)
            .finish_non_exhaustive()
    }
}

/// A finished kernel in the cache.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelArtifact {
    /// `bzImage` (x86_64) or `Image` (arm64), ready for QEMU's `-kernel`.
    pub image: PathBuf,
    pub manifest_path: PathBuf,
    pub manifest: Manifest,
}

impl KernelArtifact {
    /// The directory holding the image, manifest, `config` and `build.log`.
    pub fn dir(&self) -> &Path {
        self.manifest_path.parent().unwrap_or(Path::new("."))
    }
}

/// Build `spec` (or return it from the cache).
pub async fn build(spec: &KernelSpec, opts: &BuildOptions) -> Result<KernelArtifact, KernelError> {
    build::build(spec, opts).await
}

/// The cached build of `spec`, if there is one (no build, no lock; fast).
pub fn cached(spec: &KernelSpec, cache_dir: &Path) -> Option<KernelArtifact> {
    let plan = build::plan(spec, cache_dir).ok()?;
    build::artifact_at(&plan.final_dir)
}

/// Every complete build in the cache, oldest first.
pub fn list(cache_dir: &Path) -> Vec<Manifest> {
    cache::list(cache_dir)
}
