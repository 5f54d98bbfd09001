//! `lazyinit-bench kernel build|list|sources`: a thin shell over `lazyinit-kernel`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use lazyinit_core::exit;
use lazyinit_core::{Arch, Hz, KernelSource, Variant};
use lazyinit_kernel::{
    BuildEvent, BuildOptions, KernelArtifact, KernelId, KernelSpec, Manifest, Profile,
};

#[derive(clap::Subcommand)]
pub enum KernelCmd {
    /// Build a kernel (or find it in the cache) and print where it is.
    Build(BuildArgs),
    /// List the kernels in the cache.
    List(ListArgs),
    /// List the kernel source packages Debian's archive offers (every
    /// `linux-source-X.Y` of the suites bullseye to sid and experimental):
    /// series, version, suites, size, and whether the cache has it.
    Sources(SourcesArgs),
}

#[derive(clap::Args)]
pub struct SourcesArgs {
    /// Only this series (7.2) or these versions (7.2.6, 7.2.13-1).
    #[arg(long, value_name = "X.Y")]
    series: Option<lazyinit_core::DebianRef>,
    /// Debian's main archive (default: $LAZYINIT_DEBIAN_MIRROR or
    /// deb.debian.org; the security suites: $LAZYINIT_DEBIAN_SECURITY_MIRROR).
    #[arg(long)]
    mirror: Option<String>,
    /// Read the archive's lists again now, not only when older than 6 hours.
    #[arg(long)]
    refresh: bool,
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Print the offers as a JSON array.
    #[arg(long)]
    json: bool,
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
    /// debian-6.1 (default), debian-6.12, debian-5.10 (Debian 11's, from
    /// bullseye-security, downloaded into the cache), a package of
    /// Debian's archive (debian:7.2, debian:7.2.6, debian:7.2.13-1: `kernel
    /// sources` lists them), an upstream version
    /// (5.10.79, downloaded and verified), or a path to a kernel tree (a git
    /// work tree is keyed by commit plus changes) or tarball.
    #[arg(long, default_value = "debian-6.1")]
    source: KernelSource,
    /// Your own kernel config as the base (e.g. /boot/config-6.1.0-28-amd64)
    /// instead of the minimal one: the harness sets only what its guest
    /// needs on top, reports every option it changed, and refuses a config
    /// it cannot measure. Only the kernel image is built (no modules).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Mirror for `--source X.Y.Z` (laid out like cdn.kernel.org/pub/linux/kernel).
    #[arg(long, env = "LAZYINIT_KERNEL_MIRROR")]
    mirror: Option<String>,
    /// qemu (local guests, default) or cloud (also EC2: NVMe, ENA).
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
        KernelCmd::Sources(a) => sources(a),
    }
}

fn sources(a: SourcesArgs) -> anyhow::Result<u8> {
    use lazyinit_kernel::archive::{self, Archive};
    let dir = lazyinit_core::cache_root::resolve(a.cache_dir)?;
    lazyinit_core::cache_root::mark(&dir)?;
    let arch = Archive::new(&dir).with_mirror(a.mirror.as_deref());
    let max_age = match a.refresh {
        true => std::time::Duration::ZERO,
        false => archive::MAX_AGE,
    };
    arch.refresh(max_age, &|s| eprintln!("{s}"))?;
    let mut offers = arch.offers()?;
    if let Some(r) = &a.series {
        offers.retain(|o| {
            o.series == r.series()
                && (r.is_series() || o.upstream() == r.upstream() || r.exact() == Some(&o.version))
        });
    }
    let cached = |o: &archive::Offer| {
        let r: lazyinit_core::DebianRef = o.version.parse().expect("an index's version");
        archive::cached_tarball(&dir, &r).is_some()
    };
    if a.json {
        let rows: Vec<_> = offers
            .iter()
            .map(|o| {
                serde_json::json!({
                    "source": format!("debian:{}", o.version),
                    "package": o.package, "series": o.series, "version": o.version,
                    "suites": o.suites, "size": o.size, "cached": cached(o),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(exit::OK);
    }
    let rows: Vec<[String; 5]> = offers
        .iter()
        .map(|o| {
            [
                o.series.clone(),
                format!("debian:{}", o.version),
                o.suites.join(", "),
                format!("{} MiB", o.size >> 20),
                if cached(o) { "yes" } else { "" }.to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        render_table(&["series", "source", "suites", "size", "cached"], &rows)
    );
    eprintln!(
        "{} versions; `debian:X.Y` in a spec is the newest release of a series, `debian:X.Y.Z` the newest package of that version",
        offers.len()
    );
    Ok(exit::OK)
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

/// Left-aligned columns as wide as their widest cell.
fn render_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut width = header.map(|h| h.len());
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let s: Vec<String> = cells
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("{}\n", s.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

#[derive(serde::Serialize)]
struct ArtifactJson<'a> {
    image: &'a std::path::Path,
    manifest_path: &'a std::path::Path,
    manifest: &'a Manifest,
}

async fn build(a: BuildArgs) -> anyhow::Result<u8> {
    // Before any source is fetched or unpacked.
    if let Some(c) = &a.config {
        if !c.is_file() {
            return Err(lazyinit_core::exit::bad_input(format!(
                "--config {}: not a file; pass a kernel config such as /boot/config-$(uname -r)",
                c.display()
            ))
            .into());
        }
    }
    let cache_dir = lazyinit_core::cache_root::resolve(a.cache_dir)?;
    lazyinit_core::cache_root::mark(&cache_dir)?;
    let source = lazyinit_kernel::archive::pin_source(&a.source, &cache_dir, &|s| {
        eprintln!("kernel sources: {s}")
    })?;
    if source != a.source {
        eprintln!("{} is {source}", a.source);
    }
    let spec = KernelSpec {
        config: a.config,
        ..KernelSpec::of(KernelId {
            arch: a.arch,
            source,
            hz: a.hz,
            variant: a.variant,
            profile: a.profile,
        })
    };
    let mut opts = BuildOptions {
        cache_dir,
        ..BuildOptions::default()
    };
    if let Some(m) = a.mirror {
        opts.mirror = m;
    }
    if let Some(j) = a.jobs {
        opts.jobs = j;
    }
    opts.progress = Some(progress());
    let k: KernelArtifact = lazyinit_kernel::build(&spec, &opts).await?;
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
            "kernel   {} ({}, {}: {})",
            m.kernel_release, m.id.arch, m.id.variant, m.variant_method
        );
        println!("source   {}", source_line(m));
        println!("config   {}", m.config_origin);
        if !m.config_set.is_empty() || m.config_followed > 0 {
            println!("         set by the harness: {}", m.config_set.join(", "));
            println!(
                "         changed by Kconfig as a consequence: {} (see {})",
                m.config_followed,
                k.dir().join("config-changes.txt").display()
            );
        }
        println!("image    {} ({} bytes)", k.image.display(), m.image_bytes);
        println!("manifest {}", k.manifest_path.display());
    }
    Ok(exit::OK)
}

/// The source as asked, with what it was: `debian-5.10 (linux-source-5.10
/// 5.10.262-1)`, `/src/linux (git:<commit>+<changes>)`.
fn source_line(m: &Manifest) -> String {
    match (&m.debian_package, &m.id.source) {
        (Some(p), _) => format!("{} {} ({p})", m.id.source, m.source_version),
        (None, KernelSource::Path(_)) => {
            format!(
                "{} {} ({})",
                m.id.source, m.source_version, m.source_identity
            )
        }
        (None, _) => format!("{} {}", m.id.source, m.source_version),
    }
}

/// `kernel list`'s config column: `fragments`, or the file's name and how
/// many options the harness set on it.
fn config_cell(m: &Manifest) -> String {
    match m.config_origin.strip_prefix("file:") {
        None => m.config_origin.clone(),
        Some(rest) => {
            let path = rest.split(" sha256:").next().unwrap_or(rest);
            let name = std::path::Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.to_string());
            format!("{name} (+{})", m.config_set.len())
        }
    }
}

fn list(a: ListArgs) -> anyhow::Result<u8> {
    let dir = lazyinit_core::cache_root::resolve(a.cache_dir)?;
    let all = lazyinit_kernel::list(&dir);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(exit::OK);
    }
    if all.is_empty() {
        println!("no kernels cached under {}", dir.join("kernel").display());
        return Ok(exit::OK);
    }
    let rows: Vec<[String; 10]> = all
        .iter()
        .map(|m| {
            [
                m.id.arch.to_string(),
                m.id.hz.get().to_string(),
                m.id.variant.to_string(),
                m.variant_method.to_string(),
                m.id.profile.to_string(),
                source_line(m),
                config_cell(m),
                format!("{}K", m.image_bytes / 1024),
                format!("{:.0}s", m.build_seconds),
                m.built_at.format("%Y-%m-%d %H:%M").to_string(),
            ]
        })
        .collect();
    let header = [
        "arch", "hz", "var", "method", "prof", "source", "config", "image", "build", "built",
    ];
    print!("{}", render_table(&header, &rows));
    Ok(exit::OK)
}
