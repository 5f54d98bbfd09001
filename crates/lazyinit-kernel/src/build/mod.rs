//! One build, start to finish: resolve the source, compute the key, and on
//! a miss lock the slot, prepare the tree, switch the variant, configure,
//! verify, make, and publish the result atomically.
//!
//! Here the plan and the build's order; beside it, by concern: `make`
//! (running the build's commands, make and its recovery), `lock` (the
//! slot lock), `tree` (unpacking and seeding the slot's tree), `gitsync`
//! (a git tree's incremental sync), `patches` (the variant), `configure`,
//! and `publish` (into the cache).

mod ccache;
mod configure;
mod gitsync;
mod lock;
mod make;
mod patches;
mod publish;
mod tree;

use ccache::Ccache;
use configure::*;
use gitsync::*;
pub(crate) use lock::lock_file;
use lock::*;
use make::*;
use patches::*;
use publish::*;
use tree::*;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::cache::{self, Manifest};
use crate::decide;
use crate::error::KernelError;
use crate::fragments;
use crate::source::{self, ResolvedSource};
use crate::tools;
use crate::userconfig;
use crate::variant::{self, Method, Patch};
use crate::{BuildEvent, BuildOptions, KernelArtifact, KernelSpec};

const SOURCE_MARKER: &str = ".lazyinit-source";
const PATCH_MARKER: &str = ".lazyinit-patch";
/// In a copy of a git tree: the names that differed from its commit when
/// copied (NUL-separated), which the next incremental sync recopies.
const GIT_DIRTY_MARKER: &str = ".lazyinit-git-dirty";

/// Everything decided before touching a build tree.
pub(crate) struct Plan {
    pub resolved: ResolvedSource,
    pub method: Method,
    pub patches: Vec<Patch>,
    pub merged: String,
    /// A user's config as the base (`--config`), read and checked.
    pub base: Option<userconfig::BaseConfig>,
    pub compiler: String,
    pub key: String,
    pub slug: String,
    pub final_dir: PathBuf,
}

pub(crate) fn plan(spec: &KernelSpec, cache_dir: &Path) -> Result<Plan, KernelError> {
    let resolved = source::resolve(&spec.id.source, cache_dir)?;
    let (method, patches) = variant_plan(spec, &resolved)?;
    let base = spec
        .config
        .as_deref()
        .map(userconfig::BaseConfig::read)
        .transpose()?;
    let merged = merged_fragment(spec, &resolved, base.as_ref())?;
    let compiler = tools::compiler_version(spec.id.arch)?;
    let material = cache::key_material(
        &resolved.facts.identity,
        spec.id.arch,
        spec.id.profile,
        spec.id.hz,
        spec.id.variant,
        method,
        &patches,
        &merged,
        &compiler,
        base.as_ref().map(|b| b.sha256.as_str()),
    );
    let key = cache::cache_key(&material);
    let slug = cache::source_slug(&spec.id.source);
    let final_dir = cache::builds_dir(cache_dir).join(cache::build_dir_name(
        &slug,
        spec.id.arch,
        spec.id.hz,
        spec.id.variant,
        spec.id.profile,
        &key,
    ));
    Ok(Plan {
        resolved,
        method,
        patches,
        merged,
        base,
        compiler,
        key,
        slug,
        final_dir,
    })
}

/// How the tree reaches the asked variant, and the patches to try.
fn variant_plan(
    spec: &KernelSpec,
    resolved: &ResolvedSource,
) -> Result<(Method, Vec<Patch>), KernelError> {
    let planned = if spec.as_committed {
        Ok(variant::plan_as_committed(
            resolved.facts.released,
            spec.id.variant,
        ))
    } else {
        variant::plan(
            resolved.facts.released,
            spec.id.variant,
            &resolved.facts.version,
        )
    };
    planned.map_err(|detail| KernelError::Patch {
        source_name: spec.id.source.to_string(),
        version: resolved.facts.version.clone(),
        variant: spec.id.variant.to_string(),
        detail,
    })
}

/// The configuration fragment the build applies: the harness's merged
/// fragments, or with a user's config only the harness's needs (the
/// user's file refused first when it alone shows it cannot be measured).
fn merged_fragment(
    spec: &KernelSpec,
    resolved: &ResolvedSource,
    base: Option<&userconfig::BaseConfig>,
) -> Result<String, KernelError> {
    Ok(match base {
        None => fragments::merged_config(
            spec.id.arch,
            spec.id.hz,
            spec.id.variant,
            spec.id.profile,
            &resolved.facts.version,
        ),
        Some(b) => {
            // What the user's file alone shows is refused before any work.
            let refusals = userconfig::refuse_before(&fragments::parse(&b.text), spec.id.arch);
            if !refusals.is_empty() {
                return Err(KernelError::Unmeasurable {
                    config: b.path.display().to_string(),
                    refusals: refusals.iter().map(|r| r.to_string()).collect(),
                });
            }
            fragments::render(&userconfig::needs(
                spec.id.arch,
                spec.id.hz,
                spec.id.variant,
                spec.id.profile,
            ))
        }
    })
}

pub(crate) fn artifact_at(dir: &Path) -> Option<KernelArtifact> {
    let (manifest, manifest_path) = cache::load(dir)?;
    Some(KernelArtifact {
        image: dir.join(&manifest.image_file),
        manifest_path,
        manifest,
    })
}

fn read(path: &Path) -> Result<String, KernelError> {
    std::fs::read_to_string(path).map_err(|e| KernelError::io(path, e))
}

pub(crate) async fn build(
    spec: &KernelSpec,
    opts: &BuildOptions,
) -> Result<KernelArtifact, KernelError> {
    tools::check(spec.id.arch)?;
    let budget = crate::budget::budget().map_err(KernelError::BadInput)?;
    fetch_source(spec, opts).await?;
    let cache_dir = opts.cache_dir.clone();
    let spec_c = spec.clone();
    let plan = tokio::task::spawn_blocking(move || plan(&spec_c, &cache_dir))
        .await
        .map_err(|e| KernelError::Step(format!("planning the build: {e}")))??;
    if let Some(a) = artifact_at(&plan.final_dir) {
        return Ok(a);
    }

    let (qemu_slot, slot) = slots(spec, opts, &plan);
    let slot_c = slot.clone();
    // Another process may be building in this slot: wait for it, then
    // look again, it may have built exactly this.
    let _lock = tokio::task::spawn_blocking(move || lock_slot(&slot_c))
        .await
        .map_err(|e| KernelError::Step(format!("locking the build slot: {e}")))??;
    if let Some(a) = artifact_at(&plan.final_dir) {
        return Ok(a);
    }
    let ctx = Ctx {
        spec,
        opts,
        log: slot.join("build.log"),
        lock_fd: Some(std::os::fd::AsRawFd::as_raw_fd(&*_lock)),
        ccache: None,
    };
    if slot != qemu_slot && !slot.join("linux").exists() {
        seed_profile_slot(&ctx, &qemu_slot, &slot).await?;
    }
    if let Some(gone) = clear_unfinished_make(&slot)? {
        say_cleared(&ctx, gone);
    }
    if slot.join("linux").is_dir() {
        rebase_tree(&ctx, &slot.join("linux"), &slot).await?;
    }
    let _ = std::fs::remove_file(&ctx.log);
    let built = make(&ctx, &plan, &slot).await?;
    let changes = match (&built.configured.report, &plan.base) {
        (Some(r), Some(b)) => Some(r.render(&b.origin())),
        _ => None,
    };
    ctx.step("publish");
    let manifest = manifest(spec, &plan, &built);
    publish(
        &plan.final_dir,
        &manifest,
        &built.image,
        &built.configured.text,
        &plan.merged,
        changes.as_deref(),
        &ctx.log,
    )?;
    // The tree just built stays; the least recently built ones go while
    // the trees pass the budget (built kernels always stay).
    crate::budget::record(&slot);
    for (gone, bytes) in crate::budget::trim(&opts.cache_dir, &slot, budget) {
        ctx.step(format!(
            "work trees over the {budget} budget ({}): removed the least recently built, {} ({:.1} GiB)",
            crate::budget::BUDGET_ENV,
            gone.display(),
            bytes as f64 / (1u64 << 30) as f64
        ));
    }
    artifact_at(&plan.final_dir).ok_or_else(|| {
        KernelError::Step(format!(
            "{} vanished right after publishing",
            plan.final_dir.display()
        ))
    })
}

/// The QEMU profile's slot for this source, arch and HZ, and the build's
/// own (the same for the QEMU profile).
fn slots(spec: &KernelSpec, opts: &BuildOptions, plan: &Plan) -> (PathBuf, PathBuf) {
    let qemu_slot = cache::slot_dir(
        &opts.cache_dir,
        &plan.slug,
        spec.id.arch,
        spec.id.hz,
        plan.base.as_ref().map(|b| b.sha256.as_str()),
    );
    // A slot per profile: the cloud profile's configuration differs (NVMe,
    // ENA, ACPI, EFI), and one tree switched between the two recompiled
    // most of itself at each switch (the twin's cells and the QEMU tests,
    // in turn, in CI). Its first build is seeded from the QEMU slot.
    let slot = profile_slot(&qemu_slot, spec.id.profile);
    (qemu_slot, slot)
}

/// The slot of `profile` beside the QEMU profile's `qemu_slot`
/// (`<qemu slot>-cloud`; the QEMU profile's is that slot itself).
pub(crate) fn profile_slot(qemu_slot: &Path, profile: fragments::Profile) -> PathBuf {
    match profile {
        fragments::Profile::Qemu => qemu_slot.to_path_buf(),
        p => {
            let mut name = qemu_slot.file_name().unwrap_or_default().to_os_string();
            name.push(format!("-{p}"));
            qemu_slot.with_file_name(name)
        }
    }
}

/// Says which files a cut make's recovery removed (the first 8).
fn say_cleared(ctx: &Ctx<'_>, mut gone: Vec<PathBuf>) {
    gone.sort();
    let shown: Vec<String> = gone
        .iter()
        .take(8)
        .map(|p| p.display().to_string())
        .collect();
    let more = if gone.len() > shown.len() {
        ", ..."
    } else {
        ""
    };
    ctx.step(format!(
        "a make was cut short in this slot: {} files it wrote after it started removed, to be made again ({}{more})",
        gone.len(),
        shown.join(", ")
    ));
}

/// A kernel made in its slot, checked, not yet published.
struct Built {
    configured: Configured,
    patch: Option<Patch>,
    release: String,
    localversion: String,
    image_file: String,
    image: Vec<u8>,
    build_seconds: f64,
    cpu_seconds: f64,
    ccache: Option<cache::CcacheCounts>,
    /// The compiled `ext4_run_li_request`'s reading.
    text: variant::Detected,
}

/// What the cache records of a build.
fn manifest(spec: &KernelSpec, plan: &Plan, b: &Built) -> Manifest {
    let report = b.configured.report.as_ref();
    Manifest {
        id: spec.id.clone(),
        source_identity: plan.resolved.facts.identity.clone(),
        source_version: plan.resolved.facts.version.clone(),
        debian_package: plan.resolved.debian_package.clone(),
        kernel_release: b.release.clone(),
        localversion: b.localversion.clone(),
        variant_method: plan.method,
        patch: b.patch.map(|p| p.name.to_string()),
        patch_sha256: b.patch.map(|p| lazyinit_core::paths::sha256_hex(p.text)),
        released_variant: plan.resolved.facts.released.variant(),
        committed_text: spec.as_committed.then_some(b.text),
        config_sha256: lazyinit_core::paths::sha256_hex(&b.configured.text),
        config_origin: plan
            .base
            .as_ref()
            .map_or_else(|| cache::FRAGMENTS_ORIGIN.to_string(), |b| b.origin()),
        config_set: report
            .map(|r| r.set.iter().map(|c| c.to_string()).collect())
            .unwrap_or_default(),
        config_followed: report.map_or(0, |r| r.followed.len()),
        fragment_sha256: lazyinit_core::paths::sha256_hex(&plan.merged),
        image_file: b.image_file.clone(),
        image_sha256: lazyinit_core::paths::sha256_hex(&b.image),
        image_bytes: b.image.len() as u64,
        compiler: plan.compiler.clone(),
        build_seconds: b.build_seconds,
        build_cpu_seconds: Some(b.cpu_seconds),
        ccache: b.ccache,
        built_at: chrono::Utc::now(),
        cache_key: plan.key.clone(),
        recipe_version: cache::RECIPE_VERSION,
    }
}

/// Download what a source needs first: an upstream tarball by version, a
/// package of Debian's archive (`debian:7.2.13-1`), or a Debian package
/// the host's apt does not carry (debian-5.10).
async fn fetch_source(spec: &KernelSpec, opts: &BuildOptions) -> Result<(), KernelError> {
    if let lazyinit_core::KernelSource::Version(v) = &spec.id.source {
        let fo = crate::fetch::FetchOptions {
            mirror: opts.mirror.clone(),
            progress: opts.progress.clone(),
            ..Default::default()
        };
        crate::fetch::fetch_version(v, &opts.cache_dir, &fo).await?;
    }
    if let lazyinit_core::KernelSource::Debian(r) = &spec.id.source {
        if matches!(
            source::locate(&spec.id.source, &opts.cache_dir),
            Err(KernelError::NotFetched(_))
        ) {
            let archive = crate::archive::Archive::new(&opts.cache_dir);
            let (r, progress) = (r.clone(), opts.progress.clone());
            tokio::task::spawn_blocking(move || {
                let step = |s: String| {
                    if let Some(p) = &progress {
                        p(crate::BuildEvent::Step(s));
                    }
                };
                archive.download(&r, &step)
            })
            .await
            .map_err(|e| KernelError::Step(format!("fetching {}: {e}", spec.id.source)))??;
        }
    }
    if let Some(pkg) = crate::debian::package_for(&spec.id.source) {
        if matches!(
            source::locate(&spec.id.source, &opts.cache_dir),
            Err(KernelError::NotFetched(_))
        ) {
            let cache_dir = opts.cache_dir.clone();
            let progress = opts.progress.clone();
            tokio::task::spawn_blocking(move || {
                crate::debian::fetch(&cache_dir, &pkg, progress.as_ref())
            })
            .await
            .map_err(|e| KernelError::Step(format!("fetching {}: {e}", pkg.name)))??;
        }
    }
    Ok(())
}

fn image_target(spec: &KernelSpec) -> &'static str {
    match spec.id.arch {
        lazyinit_core::Arch::X86_64 => "bzImage",
        lazyinit_core::Arch::Arm64 => "Image",
    }
}

/// The build future must be Send so callers can spawn it.
#[allow(dead_code)]
fn assert_send(spec: &KernelSpec, opts: &BuildOptions) {
    fn is_send<T: Send>(_: T) {}
    is_send(build(spec, opts));
}
