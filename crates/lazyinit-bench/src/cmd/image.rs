//! `lazyinit-bench image ...`: build or list the guest initramfs images.

use lazyinit_core::Arch;
use lazyinit_image::{ImageArtifact, ImageOptions};

#[derive(clap::Subcommand)]
pub enum ImageCmd {
    /// Build the guest initramfs for one arch (a cache hit if nothing changed).
    Build(BuildArgs),
    /// List the images in the cache.
    List(ListArgs),
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// x86_64 or arm64.
    #[arg(long)]
    arch: String,
    /// Rebuild even if the cache has this image.
    #[arg(long)]
    force: bool,
    /// Print the path and manifest as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct ListArgs {
    #[arg(long)]
    json: bool,
}

pub async fn run(cmd: ImageCmd) -> anyhow::Result<u8> {
    match cmd {
        ImageCmd::Build(a) => build(a).await,
        ImageCmd::List(a) => list(a),
    }
}

fn to_json(a: &ImageArtifact) -> serde_json::Value {
    serde_json::json!({
        "path": a.path,
        "cached": a.cached,
        "manifest": a.manifest,
    })
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

async fn build(args: BuildArgs) -> anyhow::Result<u8> {
    let arch: Arch = args.arch.parse()?;
    let opts = ImageOptions {
        cache_dir: lazyinit_core::cache_root::resolve(None)?,
        force: args.force,
        ..ImageOptions::default()
    };
    lazyinit_core::cache_root::mark(&opts.cache_dir)?;
    let image = lazyinit_image::build(arch, &opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&image))?);
    } else {
        let m = &image.manifest;
        println!("{}", image.path.display());
        println!(
            "  {arch}, {}, {} entries, key {}, {}",
            mib(m.size_bytes),
            m.entries,
            &m.key[..16],
            if image.cached {
                "from the cache".to_string()
            } else {
                format!("built in {:.1} s", m.build_seconds)
            }
        );
        for p in &m.packages {
            println!("  {} {} ({})", p.name, p.version, p.arch);
        }
    }
    Ok(lazyinit_core::exit::OK)
}

fn list(args: ListArgs) -> anyhow::Result<u8> {
    let images = lazyinit_image::list(&lazyinit_core::cache_root::resolve(None)?)?;
    if args.json {
        let all: Vec<_> = images.iter().map(to_json).collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(lazyinit_core::exit::OK);
    }
    if images.is_empty() {
        println!("no images cached; build one with `lazyinit-bench image build --arch x86_64`");
    }
    for i in &images {
        let m = &i.manifest;
        println!(
            "{:<7} {:>9}  {}  {}  {}",
            m.arch.to_string(),
            mib(m.size_bytes),
            &m.key[..16],
            m.created,
            i.path.display()
        );
    }
    Ok(lazyinit_core::exit::OK)
}
