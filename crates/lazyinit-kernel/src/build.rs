//! One build, start to finish: resolve the source, compute the key, and on
//! a miss lock the slot, prepare the tree, switch the variant, configure,
//! verify, make, and publish the result atomically.

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
    let resolved = source::resolve(&spec.source, cache_dir)?;
    let (method, patches) = variant::plan(
        resolved.facts.released,
        spec.variant,
        &resolved.facts.version,
    )
    .map_err(|detail| KernelError::Patch {
        source_name: spec.source.to_string(),
        version: resolved.facts.version.clone(),
        variant: spec.variant.to_string(),
        detail,
    })?;
    let base = spec
        .config
        .as_deref()
        .map(userconfig::BaseConfig::read)
        .transpose()?;
    let merged = match &base {
        None => fragments::merged_config(
            spec.arch,
            spec.hz,
            spec.variant,
            spec.profile,
            &resolved.facts.version,
        ),
        Some(b) => {
            // What the user's file alone shows is refused before any work.
            let refusals = userconfig::refuse_before(&fragments::parse(&b.text), spec.arch);
            if !refusals.is_empty() {
                return Err(KernelError::Unmeasurable {
                    config: b.path.display().to_string(),
                    refusals: refusals.iter().map(|r| r.to_string()).collect(),
                });
            }
            fragments::render(&userconfig::needs(
                spec.arch,
                spec.hz,
                spec.variant,
                spec.profile,
            ))
        }
    };
    let compiler = tools::compiler_version(spec.arch)?;
    let material = cache::key_material(
        &resolved.facts.identity,
        spec.arch,
        spec.profile,
        spec.hz,
        spec.variant,
        method,
        &patches,
        &merged,
        &compiler,
        base.as_ref().map(|b| b.sha256.as_str()),
    );
    let key = cache::cache_key(&material);
    let slug = cache::source_slug(&spec.source);
    let final_dir = cache::builds_dir(cache_dir).join(cache::build_dir_name(
        &slug,
        spec.arch,
        spec.hz,
        spec.variant,
        spec.profile,
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

pub(crate) fn artifact_at(dir: &Path) -> Option<KernelArtifact> {
    let (manifest, manifest_path) = cache::load(dir)?;
    Some(KernelArtifact {
        image: dir.join(&manifest.image_file),
        manifest_path,
        manifest,
    })
}

struct Ctx<'a> {
    spec: &'a KernelSpec,
    opts: &'a BuildOptions,
    log: PathBuf,
}

impl Ctx<'_> {
    fn step(&self, s: impl Into<String>) {
        if let Some(p) = &self.opts.progress {
            p(BuildEvent::Step(s.into()));
        }
    }

    /// Run a command in `dir`, appending its output to the slot's log and
    /// passing lines to the progress callback; on failure the error carries
    /// the log's tail.
    async fn run(&self, step: &str, dir: &Path, argv: &[String]) -> Result<(), KernelError> {
        tracing::info!(step, cmd = argv.join(" "), "kernel build step");
        let mut log = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .await
            .map_err(|e| KernelError::io(&self.log, e))?;
        let _ = log
            .write_all(format!("$ {}\n", argv.join(" ")).as_bytes())
            .await;
        let mut child = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Same process group as the caller: a Ctrl-C on the terminal
            // reaches make and the compilers too; dropping the build future
            // kills make.
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| KernelError::Step(format!("{step}: cannot start {}: {e}", argv[0])))?;
        let out = BufReader::new(child.stdout.take().unwrap()).lines();
        let err = BufReader::new(child.stderr.take().unwrap()).lines();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        pump(out, tx.clone());
        pump(err, tx.clone());
        drop(tx);
        let mut tail: std::collections::VecDeque<String> = Default::default();
        while let Some(line) = rx.recv().await {
            let _ = log.write_all(line.as_bytes()).await;
            let _ = log.write_all(b"\n").await;
            if let Some(p) = &self.opts.progress {
                p(BuildEvent::Line(line.clone()));
            }
            tail.push_back(line);
            if tail.len() > 20 {
                tail.pop_front();
            }
        }
        let status = child
            .wait()
            .await
            .map_err(|e| KernelError::Step(format!("{step}: {e}")))?;
        let _ = log.flush().await;
        if status.success() {
            Ok(())
        } else {
            Err(KernelError::Build {
                step: step.to_string(),
                code: status.code().unwrap_or(-1),
                log: self.log.clone(),
                tail: tail.into_iter().collect::<Vec<_>>().join("\n"),
            })
        }
    }

    fn make_argv(&self, target: &str, extra: &[String]) -> Vec<String> {
        let mut v = vec![
            "nice".to_string(),
            "-n".into(),
            self.opts.nice.to_string(),
            "make".into(),
            format!("ARCH={}", self.spec.arch.kernel_arch()),
            format!("CROSS_COMPILE={}", tools::cross_prefix(self.spec.arch)),
            format!("-j{}", self.opts.jobs.max(1)),
            // Same build identity every time, so a rebuild of unchanged
            // inputs does not recompile init/version.o for a new user/host.
            "KBUILD_BUILD_USER=lazyinit".into(),
            "KBUILD_BUILD_HOST=lazyinit-bench".into(),
        ];
        v.extend_from_slice(extra);
        v.push(target.to_string());
        v
    }
}

/// Forward a child's output lines to one channel (stdout and stderr merged
/// in arrival order).
fn pump<R>(mut lines: tokio::io::Lines<R>, tx: tokio::sync::mpsc::UnboundedSender<String>)
where
    R: tokio::io::AsyncBufRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
}

/// Hold an exclusive lock on a slot for the life of the value.
fn lock_slot(slot: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, KernelError> {
    std::fs::create_dir_all(slot).map_err(|e| KernelError::io(slot, e))?;
    let path = slot.join("slot.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| KernelError::io(&path, e))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| KernelError::Step(format!("locking {}: {e}", path.display())))
}

fn read(path: &Path) -> Result<String, KernelError> {
    std::fs::read_to_string(path).map_err(|e| KernelError::io(path, e))
}

pub(crate) async fn build(
    spec: &KernelSpec,
    opts: &BuildOptions,
) -> Result<KernelArtifact, KernelError> {
    tools::check(spec.arch)?;
    fetch_source(spec, opts).await?;
    let cache_dir = opts.cache_dir.clone();
    let spec_c = spec.clone();
    let plan = tokio::task::spawn_blocking(move || plan(&spec_c, &cache_dir))
        .await
        .map_err(|e| KernelError::Step(format!("planning the build: {e}")))??;
    if let Some(a) = artifact_at(&plan.final_dir) {
        return Ok(a);
    }

    let slot = cache::slot_dir(
        &opts.cache_dir,
        &plan.slug,
        spec.arch,
        spec.hz,
        plan.base.as_ref().map(|b| b.sha256.as_str()),
    );
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
    };
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
    artifact_at(&plan.final_dir).ok_or_else(|| {
        KernelError::Step(format!(
            "{} vanished right after publishing",
            plan.final_dir.display()
        ))
    })
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
}

/// Prepares the slot's tree, switches its variant, configures and makes
/// it, and refuses a kernel of another name or variant.
async fn make(ctx: &Ctx<'_>, plan: &Plan, slot: &Path) -> Result<Built, KernelError> {
    let spec = ctx.spec;
    let started = Instant::now();
    let mut tree = prepare_tree(ctx, plan, slot).await?;
    let in_tree = variant::detect_file(&read(&tree.join("fs/ext4/super.c"))?);
    if decide::unpack_again(plan.resolved.facts.released, in_tree) {
        ctx.step("ext4_run_li_request in the build tree is neither variant: unpacking again");
        let _ = std::fs::remove_file(tree.join(SOURCE_MARKER));
        tree = prepare_tree(ctx, plan, slot).await?;
    }
    let patch = switch_variant(ctx, plan, &tree).await?;
    let configured = match &plan.base {
        None => configure(ctx, plan, slot, &tree).await?,
        Some(base) => configure_on(ctx, plan, base, slot, &tree).await?,
    };

    ctx.step(format!("make {}", image_target(spec)));
    ctx.run("make", &tree, &ctx.make_argv(image_target(spec), &[]))
        .await?;
    let build_seconds = started.elapsed().as_secs_f64();

    let release = read(&tree.join("include/config/kernel.release"))?
        .trim()
        .to_string();
    let localversion = fragments::localversion(spec.hz, spec.variant);
    decide::check_release(&release, &localversion)?;
    // The tree may have changed under us only through this slot, which is
    // locked; still, confirm the variant the compiled text had.
    let now = variant::detect_file(&read(&tree.join("fs/ext4/super.c"))?);
    decide::check_compiled(now, spec.variant, &tree)?;

    let image_src = tree.join(spec.arch.image_path());
    let image_file = image_src
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "Image".into());
    let image = std::fs::read(&image_src).map_err(|e| KernelError::io(&image_src, e))?;
    Ok(Built {
        configured,
        patch,
        release,
        localversion,
        image_file,
        image,
        build_seconds,
    })
}

/// What the cache records of a build.
fn manifest(spec: &KernelSpec, plan: &Plan, b: &Built) -> Manifest {
    let report = b.configured.report.as_ref();
    Manifest {
        arch: spec.arch,
        hz: spec.hz,
        variant: spec.variant,
        profile: spec.profile,
        source: spec.source.clone(),
        source_identity: plan.resolved.facts.identity.clone(),
        source_version: plan.resolved.facts.version.clone(),
        debian_package: plan.resolved.debian_package.clone(),
        kernel_release: b.release.clone(),
        localversion: b.localversion.clone(),
        variant_method: plan.method,
        patch: b.patch.map(|p| p.name.to_string()),
        patch_sha256: b.patch.map(|p| lazyinit_core::paths::sha256_hex(p.text)),
        released_variant: plan.resolved.facts.released.variant(),
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
        built_at: chrono::Utc::now(),
        cache_key: plan.key.clone(),
        recipe_version: cache::RECIPE_VERSION,
    }
}

/// Download what a source needs first: an upstream tarball by version, or
/// a Debian package the host's apt does not carry (debian-5.10).
async fn fetch_source(spec: &KernelSpec, opts: &BuildOptions) -> Result<(), KernelError> {
    if let lazyinit_core::KernelSource::Version(v) = &spec.source {
        let fo = crate::fetch::FetchOptions {
            mirror: opts.mirror.clone(),
            progress: opts.progress.clone(),
            ..Default::default()
        };
        crate::fetch::fetch_version(v, &opts.cache_dir, &fo).await?;
    }
    if let Some(pkg) = crate::debian::package_for(&spec.source) {
        if matches!(
            source::locate(&spec.source, &opts.cache_dir),
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
    match spec.arch {
        lazyinit_core::Arch::X86_64 => "bzImage",
        lazyinit_core::Arch::Arm64 => "Image",
    }
}

/// Make sure `slot/linux` is an unpacked copy of exactly this source.
async fn prepare_tree(ctx: &Ctx<'_>, plan: &Plan, slot: &Path) -> Result<PathBuf, KernelError> {
    let tree = slot.join("linux");
    let marker = tree.join(SOURCE_MARKER);
    let identity = &plan.resolved.facts.identity;
    if decide::reuse_tree(std::fs::read_to_string(&marker).ok().as_deref(), identity) {
        if matches!(plan.resolved.kind, source::SourceKind::GitTree(_)) {
            // Said so a bisect's log shows every step after the first
            // reusing the tree (here with nothing to copy).
            ctx.step(format!(
                "the build tree is already at {identity}: nothing to copy (incremental)"
            ));
        }
        return Ok(tree);
    }
    if let source::SourceKind::GitTree(root) = &plan.resolved.kind {
        if sync_git_tree(ctx, root, &tree, identity).await? {
            return Ok(tree);
        }
        if seed_git_tree(ctx, plan, slot, root).await? {
            return Ok(tree);
        }
    }
    ctx.step(format!("unpack {}", plan.resolved.source));
    let tmp = slot.join("linux.tmp");
    remove_dirs(&[&tree, &tmp])?;
    let kind = plan.resolved.kind.clone();
    let tmp_c = tmp.clone();
    tokio::task::spawn_blocking(move || source::unpack(&kind, &tmp_c))
        .await
        .map_err(|e| KernelError::Step(format!("unpacking: {e}")))??;
    // A plain tree built in place brought its .config and objects along:
    // clean the copy (never the user's tree) so none of them reach this
    // build. A git tree's copy never has them (git ignores build outputs).
    if source::was_built_in_place(&tmp) {
        ctx.step("the tree was built in place: make mrproper in the copy");
        ctx.run(
            "make mrproper (the copy)",
            &tmp,
            &ctx.make_argv("mrproper", &[]),
        )
        .await?;
    }
    if let source::SourceKind::GitTree(root) = &plan.resolved.kind {
        write_git_dirty(&tmp, &crate::gittree::dirty_names(root)?)?;
    }
    if let source::SourceKind::Tarball(_) = &plan.resolved.kind {
        // Before anything is built in it: what a git tree seeded from this
        // slot must not keep unless its commit has it.
        crate::seed::record_files(&tmp)?;
    }
    std::fs::write(tmp.join(SOURCE_MARKER), format!("{identity}\n"))
        .map_err(|e| KernelError::io(&tmp, e))?;
    std::fs::rename(&tmp, &tree).map_err(|e| KernelError::io(&tree, e))?;
    Ok(tree)
}

// Long: one seed in the order it must happen (find, copy under the seed's lock, the private index, the writes, the removals, the markers), each a few lines.
/// A git tree's first build in its slot, seeded from a built tarball slot
/// of the same arch and HZ (crate::seed): the tarball's tree and objects
/// copied, then every file brought to the commit's content by git, so make
/// rebuilds only what the commit changed. False when there is no seed.
async fn seed_git_tree(
    ctx: &Ctx<'_>,
    plan: &Plan,
    slot: &Path,
    root: &Path,
) -> Result<bool, KernelError> {
    let identity = plan.resolved.facts.identity.clone();
    let Some(commit) = crate::gittree::identity_commit(&identity).map(str::to_string) else {
        return Ok(false);
    };
    // The commit's own identity, before the work tree's changes.
    let clean = format!("git:{commit}");
    let Some(from) = crate::seed::find(slot, ctx.spec.arch, ctx.spec.hz, root) else {
        return Ok(false);
    };
    let tree = slot.join("linux");
    let tmp = slot.join("linux.tmp");
    remove_dirs(&[&tree, &tmp])?;
    ctx.step(format!(
        "seed the build tree from {} (its objects kept), then bring it to {commit} by content (incremental)",
        from.display()
    ));
    {
        // The seed's own builder may be at work: copy between its builds.
        let from_c = from.clone();
        let _seed_lock = tokio::task::spawn_blocking(move || lock_slot(&from_c))
            .await
            .map_err(|e| KernelError::Step(format!("locking the seed slot: {e}")))??;
        ctx.run(
            "seed (copy the built tree)",
            slot,
            &[
                "cp".to_string(),
                "-a".into(),
                "--reflink=auto".into(),
                from.join("linux").display().to_string(),
                tmp.display().to_string(),
            ],
        )
        .await?;
    }
    let (root_c, tmp_c, index) = (root.to_path_buf(), tmp.clone(), slot.join("seed.index"));
    let (written, removed) = tokio::task::spawn_blocking(move || {
        crate::seed::to_commit(&root_c, &tmp_c, &index, &commit)
    })
    .await
    .map_err(|e| KernelError::Step(format!("seeding: {e}")))??;
    ctx.step(format!(
        "seeded: {written} files written from the commit, {removed} of the tarball's removed"
    ));
    for m in [crate::seed::FILES_MARKER, PATCH_MARKER] {
        let _ = std::fs::remove_file(tmp.join(m));
    }
    write_git_dirty(&tmp, &[])?;
    std::fs::write(tmp.join(SOURCE_MARKER), format!("{clean}\n"))
        .map_err(|e| KernelError::io(&tmp, e))?;
    std::fs::rename(&tmp, &tree).map_err(|e| KernelError::io(&tree, e))?;
    if clean != identity {
        // The work tree's own changes on top, as any later step copies them.
        sync_git_tree(ctx, root, &tree, &identity).await?;
    }
    Ok(true)
}

/// Removes each folder that exists (a slot's tree and its half-made copy).
fn remove_dirs(dirs: &[&Path]) -> Result<(), KernelError> {
    for d in dirs {
        if d.exists() {
            std::fs::remove_dir_all(d).map_err(|e| KernelError::io(d, e))?;
        }
    }
    Ok(())
}

fn write_git_dirty(tree: &Path, names: &[String]) -> Result<(), KernelError> {
    let p = tree.join(GIT_DIRTY_MARKER);
    std::fs::write(&p, names.join("\0")).map_err(|e| KernelError::io(&p, e))
}

/// The files a variant patch touches (its `+++ b/` names).
fn patched_files(p: &Patch) -> Vec<String> {
    p.text
        .lines()
        .filter_map(|l| l.strip_prefix("+++ b/"))
        .map(|n| n.split('\t').next().unwrap_or(n).trim().to_string())
        .collect()
}

// Long: one sync in the order it must happen (is the copy ours, what changed, the marker, the copies, the touch), each step a few lines.
/// Bring a copy of a git tree at an older state up to `identity` by
/// recopying only what changed (and what a variant patch touched), so the
/// build tree's objects stay and make recompiles only those files: a
/// bisect step or a one-line commit costs a partial rebuild, not a cold
/// one. False when the copy is not of this repository (copy it all).
async fn sync_git_tree(
    ctx: &Ctx<'_>,
    root: &Path,
    tree: &Path,
    identity: &str,
) -> Result<bool, KernelError> {
    let marker = tree.join(SOURCE_MARKER);
    let Some(old) = std::fs::read_to_string(&marker).ok() else {
        return Ok(false);
    };
    let Some(from) = crate::gittree::identity_commit(old.trim()).map(str::to_string) else {
        return Ok(false);
    };
    let old_dirty: Vec<String> = std::fs::read_to_string(tree.join(GIT_DIRTY_MARKER))
        .unwrap_or_default()
        .split('\0')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let Some(mut names) = crate::gittree::changed_since(root, &from, &old_dirty)? else {
        return Ok(false);
    };
    let patch_marker = tree.join(PATCH_MARKER);
    if let Some(p) = std::fs::read_to_string(&patch_marker).ok().and_then(|n| {
        variant::PATCHES
            .iter()
            .copied()
            .find(|p| p.name == n.trim())
    }) {
        // The copy carries a variant patch: its files go back to the
        // source's text, and switch_variant decides afresh.
        names.extend(patched_files(&p));
        names.sort();
        names.dedup();
    }
    ctx.step(format!(
        "sync {} changed files from {} (incremental)",
        names.len(),
        old.trim()
    ));
    // The marker goes first: an interrupted sync leaves a copy that is
    // copied again whole rather than believed.
    std::fs::remove_file(&marker).map_err(|e| KernelError::io(&marker, e))?;
    let _ = std::fs::remove_file(&patch_marker);
    let mut present = Vec::new();
    for n in &names {
        if std::fs::symlink_metadata(root.join(n)).is_ok() {
            present.extend_from_slice(n.as_bytes());
            present.push(0);
        } else {
            let gone = tree.join(n);
            if std::fs::symlink_metadata(&gone).is_ok() {
                std::fs::remove_file(&gone).map_err(|e| KernelError::io(&gone, e))?;
            }
        }
    }
    let list = tree.with_extension("sync-files");
    std::fs::write(&list, &present).map_err(|e| KernelError::io(&list, e))?;
    // --touch: the copies are newer than every object, so make rebuilds
    // exactly what depends on them.
    let r = ctx
        .run(
            "sync (copy changed files)",
            tree,
            &[
                "sh".to_string(),
                "-c".into(),
                "tar -C \"$1\" --null --no-recursion -T \"$3\" -cf - | tar -C \"$2\" --touch -xf -"
                    .into(),
                "sh".into(),
                root.display().to_string(),
                tree.display().to_string(),
                list.display().to_string(),
            ],
        )
        .await;
    let _ = std::fs::remove_file(&list);
    r?;
    write_git_dirty(tree, &crate::gittree::dirty_names(root)?)?;
    std::fs::write(&marker, format!("{identity}\n")).map_err(|e| KernelError::io(&marker, e))?;
    Ok(true)
}

/// Bring the tree to the asked variant and prove it by its text. Returns the
/// patch the tree now carries (None when as released).
async fn switch_variant(
    ctx: &Ctx<'_>,
    plan: &Plan,
    tree: &Path,
) -> Result<Option<Patch>, KernelError> {
    let super_c = tree.join("fs/ext4/super.c");
    let marker = tree.join(PATCH_MARKER);
    let applied: Option<Patch> = std::fs::read_to_string(&marker).ok().and_then(|n| {
        variant::PATCHES
            .iter()
            .copied()
            .find(|p| p.name == n.trim())
    });
    let wanted = ctx.spec.variant;
    let now = variant::detect_file(&read(&super_c)?);
    let steps = decide::switch(now, wanted, applied, plan.method);
    let mut carried = applied;
    if let Some(p) = steps.unapply {
        // The tree carries the other variant's patch: take it back out.
        ctx.step(format!("unapply {}", p.name));
        apply_patch(ctx, tree, &p, true).await?;
        let _ = std::fs::remove_file(&marker);
        carried = None;
    }
    if steps.apply {
        let p = apply_first(ctx, plan, tree).await?;
        std::fs::write(&marker, p.name).map_err(|e| KernelError::io(&marker, e))?;
        carried = Some(p);
    }
    let after = variant::detect_file(&read(&super_c)?);
    decide::check_switched(after, wanted, tree)?;
    Ok(carried)
}

async fn apply_first(ctx: &Ctx<'_>, plan: &Plan, tree: &Path) -> Result<Patch, KernelError> {
    let mut tried = Vec::new();
    for p in &plan.patches {
        if apply_patch_dry(tree, p).await? {
            ctx.step(format!("apply {}", p.name));
            apply_patch(ctx, tree, p, false).await?;
            return Ok(*p);
        }
        tried.push(p.name);
    }
    Err(KernelError::Patch {
        source_name: plan.resolved.source.to_string(),
        version: plan.resolved.facts.version.clone(),
        variant: ctx.spec.variant.to_string(),
        detail: format!(
            "no variant patch applies cleanly (tried {}); add one for this series under kernels/patches/",
            tried.join(", ")
        ),
    })
}

fn patch_file(tree: &Path, p: &Patch) -> Result<PathBuf, KernelError> {
    let dir = tree.parent().unwrap_or(tree).join("patches");
    std::fs::create_dir_all(&dir).map_err(|e| KernelError::io(&dir, e))?;
    let f = dir.join(p.name);
    std::fs::write(&f, p.text).map_err(|e| KernelError::io(&f, e))?;
    Ok(f)
}

fn patch_argv(file: &Path, reverse: bool, dry: bool) -> Vec<String> {
    let mut v: Vec<String> = [
        "patch",
        "-p1",
        "-F0",
        "--forward",
        "--no-backup-if-mismatch",
        "-r",
        "-",
        "-i",
    ]
    .map(String::from)
    .to_vec();
    v.push(file.display().to_string());
    if reverse {
        v.retain(|a| a != "--forward");
        v.push("-R".into());
    }
    if dry {
        v.push("--dry-run".into());
    }
    v
}

async fn apply_patch_dry(tree: &Path, p: &Patch) -> Result<bool, KernelError> {
    let f = patch_file(tree, p)?;
    let argv = patch_argv(&f, false, true);
    let st = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(tree)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .map_err(|e| KernelError::Step(format!("patch: {e}")))?;
    Ok(st.success())
}

async fn apply_patch(
    ctx: &Ctx<'_>,
    tree: &Path,
    p: &Patch,
    reverse: bool,
) -> Result<(), KernelError> {
    let f = patch_file(tree, p)?;
    let step = if reverse { "unapplying " } else { "applying " };
    ctx.run(
        &format!("{step}{}", p.name),
        tree,
        &patch_argv(&f, reverse, false),
    )
    .await
}

/// A configured tree: its resolved `.config`, and with a user's config,
/// what differs from that file.
struct Configured {
    text: String,
    report: Option<userconfig::ConfigReport>,
}

/// `make allnoconfig` with the merged fragment, then check every requested
/// option in the resolved `.config`.
async fn configure(
    ctx: &Ctx<'_>,
    plan: &Plan,
    slot: &Path,
    tree: &Path,
) -> Result<Configured, KernelError> {
    let frag = slot.join("lazyinit.config");
    std::fs::write(&frag, &plan.merged).map_err(|e| KernelError::io(&frag, e))?;
    ctx.step("configure");
    ctx.run(
        "configure (make allnoconfig)",
        tree,
        &ctx.make_argv(
            "allnoconfig",
            &[format!("KCONFIG_ALLCONFIG={}", frag.display())],
        ),
    )
    .await?;
    let config_path = tree.join(".config");
    let config = read(&config_path)?;
    let wanted = fragments::parse(&plan.merged);
    let bad = fragments::check_resolved(&wanted, &config);
    if !bad.is_empty() {
        return Err(KernelError::ConfigCheck {
            missing: bad.iter().map(|m| m.to_string()).collect(),
            config: config_path,
        });
    }
    Ok(Configured {
        text: config,
        report: None,
    })
}

/// The user's config with the harness's needs on top, resolved with `make
/// olddefconfig`; refused (before the long build) when a need did not hold
/// or a tool the config needs is missing.
async fn configure_on(
    ctx: &Ctx<'_>,
    plan: &Plan,
    base: &userconfig::BaseConfig,
    slot: &Path,
    tree: &Path,
) -> Result<Configured, KernelError> {
    let user = fragments::parse(&base.text);
    let needs = fragments::parse(&plan.merged);
    let (merged, set) = userconfig::overlay(&user, &needs, |f| tree.join(f).is_file());
    let config_path = tree.join(".config");
    let text = fragments::render(&merged);
    std::fs::write(&config_path, &text).map_err(|e| KernelError::io(&config_path, e))?;
    std::fs::write(slot.join("lazyinit.config"), &plan.merged)
        .map_err(|e| KernelError::io(slot, e))?;
    ctx.step(format!(
        "configure (olddefconfig on {})",
        base.path.display()
    ));
    ctx.run(
        "configure (make olddefconfig)",
        tree,
        &ctx.make_argv("olddefconfig", &[]),
    )
    .await?;
    let config = read(&config_path)?;
    let resolved = fragments::parse(&config);
    let refusals = userconfig::refuse_after(&needs, &resolved, ctx.spec.arch);
    if !refusals.is_empty() {
        return Err(KernelError::Unmeasurable {
            config: base.path.display().to_string(),
            refusals: refusals.iter().map(|r| r.to_string()).collect(),
        });
    }
    tools::check_config(&resolved)?;
    let report = userconfig::ConfigReport::new(&user, &set, &resolved);
    for c in &report.set {
        ctx.step(format!("config: set {c}"));
    }
    Ok(Configured {
        text: config,
        report: Some(report),
    })
}

/// Write the build's files under a temporary name, then rename it into
/// place: a build directory either is complete or does not exist.
fn publish(
    final_dir: &Path,
    manifest: &Manifest,
    image: &[u8],
    config: &str,
    fragment: &str,
    config_changes: Option<&str>,
    log: &Path,
) -> Result<(), KernelError> {
    let parent = final_dir.parent().unwrap();
    std::fs::create_dir_all(parent).map_err(|e| KernelError::io(parent, e))?;
    // Gone with `tmp_dir` unless renamed into place.
    let tmp_dir = tempfile::Builder::new()
        .prefix(&format!(
            ".tmp-{}-",
            final_dir.file_name().unwrap().to_string_lossy()
        ))
        .tempdir_in(parent)
        .map_err(|e| KernelError::io(parent, e))?;
    let tmp = tmp_dir.path();
    let w = |name: &str, bytes: &[u8]| {
        let p = tmp.join(name);
        std::fs::write(&p, bytes).map_err(|e| KernelError::io(&p, e))
    };
    w(&manifest.image_file, image)?;
    w("config", config.as_bytes())?;
    w("fragment.config", fragment.as_bytes())?;
    if let Some(c) = config_changes {
        w("config-changes.txt", c.as_bytes())?;
    }
    if let Ok(l) = std::fs::read(log) {
        w("build.log", &l)?;
    }
    w(
        "manifest.json",
        &serde_json::to_vec_pretty(manifest).expect("manifest serialises"),
    )?;
    match std::fs::rename(tmp, final_dir) {
        Ok(()) => Ok(()),
        // Someone published the same key first: theirs is as good.
        Err(_) if cache::load(final_dir).is_some() => Ok(()),
        Err(e) => Err(KernelError::io(final_dir, e)),
    }
}

/// The build future must be Send so callers can spawn it.
#[allow(dead_code)]
fn assert_send(spec: &KernelSpec, opts: &BuildOptions) {
    fn is_send<T: Send>(_: T) {}
    is_send(build(spec, opts));
}
