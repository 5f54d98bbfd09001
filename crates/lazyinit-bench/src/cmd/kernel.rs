//! `lazyinit-bench kernel build|list`: a thin shell over `lazyinit-kernel`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use lazyinit_core::exit::{self, ExitError};
use lazyinit_core::{Arch, Hz, KernelSource, Variant};
use lazyinit_kernel::{
    BuildEvent, BuildOptions, KernelArtifact, KernelError, KernelSpec, Manifest, Profile,
};

#[derive(clap::Subcommand)]
pub enum KernelCmd {
    /// Build a kernel (or find it in the cache) and print where it is.
    Build(BuildArgs),
    /// List the kernels in the cache.
    List(ListArgs),
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// x86_64 or arm64 (arm64 is cross-compiled on an x86_64 host).
    #[arg(long)]
    arch: Arch,
    /// CONFIG_HZ: 100, 250, 300 or 1000.
    #[arg(long)]
    hz: Hz,
    /// fix or nofix (the ext4 lazy-init fix, upstream 39fec6889d15).
    #[arg(long)]
    variant: Variant,
    /// debian-6.1 (default), debian-6.12, an upstream version (5.10.79,
    /// downloaded and verified), or a path to a kernel tree or tarball.
    #[arg(long, default_value = "debian-6.1")]
    source: KernelSource,
    /// Mirror for `--source X.Y.Z` (laid out like cdn.kernel.org/pub/linux/kernel).
    #[arg(long, env = "LAZYINIT_KERNEL_MIRROR")]
    mirror: Option<String>,
    /// qemu (local guests, default) or cloud (also EC2: NVMe, ENA, ACPI).
    #[arg(long, default_value = "qemu")]
    profile: Profile,
    /// Parallel make jobs (default: the number of CPUs).
    #[arg(long)]
    jobs: Option<usize>,
    /// Cache root (default: $LAZYINIT_CACHE_DIR or ~/.cache/lazyinit-bench).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Print the artifact as JSON (image, manifest path, manifest).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct ListArgs {
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Print the manifests as a JSON array.
    #[arg(long)]
    json: bool,
}

pub async fn run(cmd: KernelCmd) -> anyhow::Result<u8> {
    match cmd {
        KernelCmd::Build(a) => build(a).await,
        KernelCmd::List(a) => list(a),
    }
}

/// Keep the library's exit code (bad input 2, missing tool 4) on the way out.
fn coded(e: KernelError) -> anyhow::Error {
    match e.exit_code() {
        exit::INFRASTRUCTURE => e.into(),
        code => ExitError {
            code,
            message: e.to_string(),
        }
        .into(),
    }
}

fn progress() -> lazyinit_kernel::ProgressFn {
    if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        let step = Arc::new(std::sync::Mutex::new(String::new()));
        Arc::new(move |ev| match ev {
            BuildEvent::Step(s) => {
                bar.set_message(s.clone());
                *step.lock().unwrap() = s;
            }
            BuildEvent::Line(l) => {
                let s = step.lock().unwrap();
                bar.set_message(format!("{s}: {}", l.trim()));
            }
            BuildEvent::Bytes { done, total } => {
                let s = step.lock().unwrap();
                let t = total
                    .map(|t| format!(" of {} MiB", t >> 20))
                    .unwrap_or_default();
                bar.set_message(format!("{s}: {} MiB{t}", done >> 20));
            }
        })
    } else {
        Arc::new(|ev| {
            if let BuildEvent::Step(s) = ev {
                eprintln!("kernel: {s}");
            }
        })
    }
}

#[derive(serde::Serialize)]
struct ArtifactJson<'a> {
    image: &'a std::path::Path,
    manifest_path: &'a std::path::Path,
    manifest: &'a Manifest,
}

async fn build(a: BuildArgs) -> anyhow::Result<u8> {
    let spec = KernelSpec {
        arch: a.arch,
        hz: a.hz,
        variant: a.variant,
        source: a.source,
        profile: a.profile,
    };
    let mut opts = BuildOptions::default();
    if let Some(d) = a.cache_dir {
        opts.cache_dir = d;
    }
    if let Some(m) = a.mirror {
        opts.mirror = m;
    }
    if let Some(j) = a.jobs {
        opts.jobs = j;
    }
    opts.progress = Some(progress());
    let k: KernelArtifact = lazyinit_kernel::build(&spec, &opts).await.map_err(coded)?;
    if a.json {
        let j = ArtifactJson {
            image: &k.image,
            manifest_path: &k.manifest_path,
            manifest: &k.manifest,
        };
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        let m = &k.manifest;
        println!(
            "kernel   {} ({}, {} as {})",
            m.kernel_release, m.arch, m.variant, m.variant_method
        );
        println!("image    {}", k.image.display());
        println!("manifest {}", k.manifest_path.display());
    }
    Ok(exit::OK)
}

fn list(a: ListArgs) -> anyhow::Result<u8> {
    let dir = a.cache_dir.unwrap_or_else(lazyinit_core::paths::cache_dir);
    let all = lazyinit_kernel::list(&dir);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(exit::OK);
    }
    if all.is_empty() {
        println!("no kernels cached under {}", dir.join("kernel").display());
        return Ok(exit::OK);
    }
    println!(
        "{:<7} {:>4} {:<6} {:<6} {:<12} {:<36} {:>9} {:>7}  built",
        "arch", "hz", "var", "prof", "source", "release", "image", "build"
    );
    for m in all {
        println!(
            "{:<7} {:>4} {:<6} {:<6} {:<12} {:<36} {:>8}K {:>6.0}s  {}",
            m.arch.to_string(),
            m.hz.get(),
            m.variant.to_string(),
            m.profile.to_string(),
            m.source.to_string(),
            m.kernel_release,
            m.image_bytes / 1024,
            m.build_seconds,
            m.built_at.format("%Y-%m-%d %H:%M")
        );
    }
    Ok(exit::OK)
}
