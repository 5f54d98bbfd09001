//! What the cells boot, and how the runner reaches them once booted.
//!
//! [`Built`] is the real thing: kernels and guest images from the
//! content-keyed cache (built when missing), the project's SSH keys in the
//! image and in every connection. The `fake` feature has an in-process one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use lazyinit_core::exit::ExitError;
use lazyinit_core::{exit, Arch, KernelProfile};
use lazyinit_guest::{Connect, SshConnect};
use tokio::sync::OnceCell;

use crate::plan::KernelNeed;

/// An error with its chain, from whatever made the artifact.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
    ) -> Result<Kernel, BoxError>;
    /// The guest initramfs for `arch`, holding the keys [`Artifacts::connect`] uses.
    async fn initramfs(&self, arch: Arch) -> Result<PathBuf, BoxError>;
    /// How to reach guests that booted these images.
    async fn connect(&self) -> Result<Arc<dyn Connect>, BoxError>;
}

/// Kernels and images from the cache, SSH with the project's keys.
pub struct Built {
    cache_dir: PathBuf,
    state_dir: PathBuf,
    /// Build parallelism for kernels.
    jobs: usize,
    /// The user's own kernel config as the base of every kernel (`--config`).
    kernel_config: Option<PathBuf>,
    keys: OnceCell<lazyinit_ssh::Keys>,
}

impl Built {
    pub fn new(cache_dir: PathBuf, state_dir: PathBuf, jobs: usize) -> Self {
        Self {
            cache_dir,
            state_dir,
            jobs,
            kernel_config: None,
            keys: OnceCell::new(),
        }
    }

    /// Builds every kernel on the user's own config (see
    /// `lazyinit_kernel::userconfig`) instead of the minimal fragments.
    pub fn with_kernel_config(mut self, config: Option<PathBuf>) -> Self {
        self.kernel_config = config;
        self
    }

    /// The project's SSH keys, made on first use (`ssh-keygen`, `dropbearkey`).
    async fn keys(&self) -> Result<&lazyinit_ssh::Keys, BoxError> {
        self.keys
            .get_or_try_init(|| async {
                let dir = self.state_dir.clone();
                let keys =
                    tokio::task::spawn_blocking(move || lazyinit_ssh::Keys::load_or_create(&dir))
                        .await??;
                Ok::<_, BoxError>(keys)
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
    ) -> Result<Kernel, BoxError> {
        let spec = lazyinit_kernel::KernelSpec {
            arch: need.arch,
            hz: need.hz,
            variant: need.variant,
            source: need.source.clone(),
            profile,
            config: self.kernel_config.clone(),
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
        match lazyinit_kernel::build(&spec, &opts).await {
            Ok(art) => Ok(Kernel {
                image: art.image,
                release: art.manifest.kernel_release,
            }),
            // Bad input and missing tools keep their exit codes.
            Err(e) => Err(match e.exit_code() {
                exit::INFRASTRUCTURE => e.into(),
                code => ExitError {
                    code,
                    message: e.to_string(),
                }
                .into(),
            }),
        }
    }

    async fn initramfs(&self, arch: Arch) -> Result<PathBuf, BoxError> {
        let keys = self.keys().await?;
        Ok(initramfs_for(arch, keys, &self.cache_dir, &self.state_dir).await?)
    }

    async fn connect(&self) -> Result<Arc<dyn Connect>, BoxError> {
        Ok(Arc::new(SshConnect::new(self.keys().await?.clone())))
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
) -> anyhow::Result<PathBuf> {
    let opts = lazyinit_image::ImageOptions {
        cache_dir: cache_dir.to_path_buf(),
        ..Default::default()
    };
    let image = lazyinit_image::build(arch, &opts).await?;
    let path = lazyinit_image::initramfs_for_launch(&image, keys, &state_dir.join("launch"))?;
    Ok(path)
}
