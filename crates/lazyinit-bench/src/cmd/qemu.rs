//! `lazyinit-bench qemu build`: the QEMU of the virtual clock
//! (`lazyinit_kernel::emulator`), built into the cache or found there.

use std::path::PathBuf;

use lazyinit_core::{exit, Arch};

#[derive(clap::Subcommand)]
pub enum QemuCmd {
    /// Build the QEMU of `--clock virtual` (Debian's QEMU 10.0.2 and the
    /// project's patches; ~6 min on 2 cores, once) or find it in the cache.
    Build(BuildArgs),
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// Cache root (default: $LAZYINIT_CACHE_DIR or ~/.cache/lazyinit-bench).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

pub async fn run(cmd: QemuCmd) -> anyhow::Result<u8> {
    match cmd {
        QemuCmd::Build(a) => build(a).await,
    }
}

async fn build(a: BuildArgs) -> anyhow::Result<u8> {
    let cache = lazyinit_core::cache_root::resolve(a.cache_dir)?;
    lazyinit_core::cache_root::mark(&cache)?;
    let hit = lazyinit_kernel::emulator::cached(&cache)?.is_some();
    let progress: lazyinit_kernel::ProgressFn = std::sync::Arc::new(|ev| {
        if let lazyinit_kernel::BuildEvent::Step(s) = ev {
            eprintln!("qemu: {s}");
        }
    });
    let q = lazyinit_kernel::emulator::ensure(&cache, Some(progress)).await?;
    println!(
        "qemu     {} ({}, {})",
        lazyinit_kernel::emulator::QEMU_VERSION,
        q.key,
        if hit { "cache hit" } else { "built" }
    );
    for arch in Arch::ALL {
        println!("{:<8} {}", arch.to_string(), q.binary(arch).display());
    }
    Ok(exit::OK)
}
