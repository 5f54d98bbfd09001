//! What the cells boot, and how the runner reaches them once booted.
//!
//! [`Built`] is the real thing: kernels and guest images from the
//! content-keyed cache (built when missing), the project's SSH keys in the
//! image and in every connection. The `fake` feature has an in-process one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use lazyinit_core::{Arch, KernelProfile};
use lazyinit_guest::{Connect, SshConnect};
use lazyinit_image::ImageError;
use lazyinit_kernel::KernelError;
use lazyinit_ssh::SshError;
use tokio::sync::OnceCell;

use crate::plan::KernelNeed;

/// Called with each step of a kernel build (for progress notes).
pub type Progress = Arc<dyn Fn(String) + Send + Sync>;

/// A kernel the cells of one [`KernelNeed`] boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub image: PathBuf,
    /// What `uname -r` prints on it.
    pub release: String,
}

#[async_trait]
pub trait Artifacts: Send + Sync {
    /// The kernel `need` names, configured for `profile`.
    async fn kernel(
        &self,
        need: &KernelNeed,
        profile: KernelProfile,
        progress: Progress,
    ) -> Result<Kernel, KernelError>;
    /// The guest initramfs for `arch`, holding the keys [`Artifacts::connect`] uses.
    async fn initramfs(&self, arch: Arch) -> Result<PathBuf, ImageError>;
    /// How to reach guests that booted these images.
    async fn connect(&self) -> Result<Arc<dyn Connect>, SshError>;
    /// Refuses, before anything is built or written, kernels no build can
    /// make here: a source folder that does not exist (bad input), host
    /// tools a build needs (missing tool). The error says its exit code.
    async fn check(&self, needs: &[KernelNeed]) -> Result<(), KernelError> {
        needs.iter().try_for_each(check_source)
    }
}

/// A kernel source given as a path must be there.
pub fn check_source(need: &KernelNeed) -> Result<(), KernelError> {
    match &need.source {
        lazyinit_core::KernelSource::Path(p) if !p.is_dir() => {
            Err(KernelError::NoSourceFolder(p.clone()))
        }
        _ => Ok(()),
    }
}

/// Kernels and images from the cache, SSH with the project's keys.
pub struct Built {
    cache_dir: PathBuf,
    state_dir: PathBuf,
    /// Build parallelism for kernels.
    jobs: usize,
    /// The user's own kernel config as the base of every kernel (`--config`).
    kernel_config: Option<PathBuf>,
    /// Every kernel built as its tree's text is (a bisect's commits).
    as_committed: bool,
    keys: OnceCell<lazyinit_ssh::Keys>,
}

impl Built {
    pub fn new(cache_dir: PathBuf, state_dir: PathBuf, jobs: usize) -> Self {
        Self {
            cache_dir,
            state_dir,
            jobs,
            kernel_config: None,
            as_committed: false,
            keys: OnceCell::new(),
        }
    }

    /// Builds every kernel on the user's own config (see
    /// `lazyinit_kernel::userconfig`) instead of the minimal fragments.
    pub fn with_kernel_config(mut self, config: Option<PathBuf>) -> Self {
        self.kernel_config = config;
        self
    }

    /// Builds every kernel as its tree's text is, no variant patch (see
    /// `lazyinit_kernel::KernelSpec::as_committed`): a bisect's commits.
    pub fn as_committed(mut self) -> Self {
        self.as_committed = true;
        self
    }

    /// The project's SSH keys, made on first use (`ssh-keygen`, `dropbearkey`).
    /// A panic in the key task goes on as a panic here.
    async fn keys(&self) -> Result<&lazyinit_ssh::Keys, SshError> {
        self.keys
            .get_or_try_init(|| async {
                let dir = self.state_dir.clone();
                tokio::task::spawn_blocking(move || lazyinit_ssh::Keys::load_or_create(&dir))
                    .await
                    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
            })
            .await
    }
}

#[async_trait]
impl Artifacts for Built {
    async fn kernel(
        &self,
        need: &KernelNeed,
        profile: KernelProfile,
        progress: Progress,
    ) -> Result<Kernel, KernelError> {
        let spec = lazyinit_kernel::KernelSpec {
            id: KernelNeed {
                profile,
                ..need.clone()
            },
            config: self.kernel_config.clone(),
            as_committed: self.as_committed,
        };
        let opts = lazyinit_kernel::BuildOptions {
            cache_dir: self.cache_dir.clone(),
            jobs: self.jobs,
            progress: Some(Arc::new(move |e| {
                if let lazyinit_kernel::BuildEvent::Step(s) = e {
                    progress(s.to_string());
                }
            })),
            ..Default::default()
        };
        let art = lazyinit_kernel::build(&spec, &opts).await?;
        Ok(Kernel {
            image: art.image,
            release: art.manifest.kernel_release,
        })
    }

    async fn initramfs(&self, arch: Arch) -> Result<PathBuf, ImageError> {
        let keys = self.keys().await?;
        initramfs_for(arch, keys, &self.cache_dir, &self.state_dir).await
    }

    async fn connect(&self) -> Result<Arc<dyn Connect>, SshError> {
        Ok(Arc::new(SshConnect::new(self.keys().await?.clone())))
    }

    /// Every build, a cached one too, first checks the host's build tools
    /// (`lazyinit_kernel::tools::check`): found missing here, before the
    /// results folder exists, they are a missing tool (exit 4).
    async fn check(&self, needs: &[KernelNeed]) -> Result<(), KernelError> {
        for need in needs {
            check_source(need)?;
            lazyinit_kernel::tools::check(need.arch)?;
        }
        Ok(())
    }
}

/// The initramfs the provider boots for `arch`: the cached, key-free image
/// plus the project's keys, in the private state folder (never in the
/// results).
pub async fn initramfs_for(
    arch: Arch,
    keys: &lazyinit_ssh::Keys,
    cache_dir: &Path,
    state_dir: &Path,
) -> Result<PathBuf, ImageError> {
    let opts = lazyinit_image::ImageOptions {
        cache_dir: cache_dir.to_path_buf(),
        ..Default::default()
    };
    let image = lazyinit_image::build(arch, &opts).await?;
    let path = lazyinit_image::initramfs_for_launch(&image, keys, &state_dir.join("launch"))?;
    Ok(path)
}
