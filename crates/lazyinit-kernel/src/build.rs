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
    let resolved = source::resolve(&spec.id.source, cache_dir)?;
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
    let (method, patches) = planned.map_err(|detail| KernelError::Patch {
        source_name: spec.id.source.to_string(),
        version: resolved.facts.version.clone(),
        variant: spec.id.variant.to_string(),
        detail,
    })?;
    let base = spec
        .config
        .as_deref()
        .map(userconfig::BaseConfig::read)
        .transpose()?;
    let merged = match &base {
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
    };
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
    /// The slot's lock, which every command of the build inherits, so
    /// that a make that outlives a killed harness (it is not killed with
    /// it) and its compilers still hold the slot: the next builder waits
    /// for them instead of making beside them.
    lock_fd: Option<std::os::fd::RawFd>,
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
        let mut cmd = tokio::process::Command::new(&argv[0]);
        if let Some(fd) = self.lock_fd {
            inherit_fd(&mut cmd, fd);
        }
        let mut child = cmd
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
            format!("ARCH={}", self.spec.id.arch.kernel_arch()),
            format!("CROSS_COMPILE={}", tools::cross_prefix(self.spec.id.arch)),
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

/// `fd` stays open across `cmd`'s exec (Rust opens files close-on-exec),
/// in the child only.
#[allow(unsafe_code)] // pre_exec: the one way to keep one fd across exec
fn inherit_fd(cmd: &mut tokio::process::Command, fd: std::os::fd::RawFd) {
    // SAFETY: only fcntl, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The slot's mark of a make under way: made just before make, removed
/// when make ends. Found by the next holder of the slot's lock, it
/// means a make was cut short there (the harness and make killed): every
/// file of the tree written after it may be half written with a new time,
/// which make would trust, so those files are removed and made again.
const MAKE_UNFINISHED: &str = "make.unfinished";

/// Whether a file the cut make wrote (`rel`, inside the tree) is whole
/// by construction, so kept: what kconfig writes, each through a
/// temporary file renamed into place (`.config`, `include/config/auto.conf`
/// and `.cmd`, `include/generated/autoconf.h` and `rustc_cfg`;
/// scripts/kconfig/confdata.c), and the per-symbol files under
/// `include/config/`, which it only creates empty. Removing those costs a
/// whole tree: with no `auto.conf` to compare with, kconfig takes every
/// symbol as changed and touches all their files, and every object is
/// compiled again (a kill during a variant switch cost about 1,200 files
/// that way, against a handful).
fn whole_by_construction(rel: &Path) -> bool {
    rel.starts_with("include/config")
        || [
            ".config",
            ".config.old",
            "include/generated/autoconf.h",
            "include/generated/rustc_cfg",
        ]
        .iter()
        .any(|k| rel == Path::new(k))
}

/// Removes what a make cut short left (see [`MAKE_UNFINISHED`]) but what
/// is whole by construction ([`whole_by_construction`]); the files
/// removed (relative to the tree), None when no make was cut short.
fn clear_unfinished_make(slot: &Path) -> Result<Option<Vec<PathBuf>>, KernelError> {
    let mark = slot.join(MAKE_UNFINISHED);
    let since = match std::fs::metadata(&mark).and_then(|m| m.modified()) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(KernelError::io(&mark, e)),
    };
    let mut removed = Vec::new();
    let tree = slot.join("linux");
    let mut todo = vec![tree.clone()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file()
                && e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|m| m > since)
                && !e
                    .path()
                    .strip_prefix(&tree)
                    .is_ok_and(whole_by_construction)
            {
                let p = e.path();
                std::fs::remove_file(&p).map_err(|err| KernelError::io(&p, err))?;
                removed.push(p.strip_prefix(&tree).unwrap_or(&p).to_path_buf());
            }
        }
    }
    std::fs::remove_file(&mark).map_err(|e| KernelError::io(&mark, e))?;
    Ok(Some(removed))
}

/// Hold an exclusive lock on a slot for the life of the value.
fn lock_slot(slot: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, KernelError> {
    std::fs::create_dir_all(slot).map_err(|e| KernelError::io(slot, e))?;
    lock_file(&slot.join("slot.lock"))
}

/// An exclusive lock on `path` (made if missing, never truncated) for the
/// life of the value: a slot's, or the QEMU build's (`emulator`).
pub(crate) fn lock_file(path: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, KernelError> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| KernelError::io(path, e))?;
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
    tools::check(spec.id.arch)?;
    fetch_source(spec, opts).await?;
    let cache_dir = opts.cache_dir.clone();
    let spec_c = spec.clone();
    let plan = tokio::task::spawn_blocking(move || plan(&spec_c, &cache_dir))
        .await
        .map_err(|e| KernelError::Step(format!("planning the build: {e}")))??;
    if let Some(a) = artifact_at(&plan.final_dir) {
        return Ok(a);
    }

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
    let slot = match spec.id.profile {
        fragments::Profile::Qemu => qemu_slot.clone(),
        p => {
            let mut name = qemu_slot.file_name().unwrap_or_default().to_os_string();
            name.push(format!("-{p}"));
            qemu_slot.with_file_name(name)
        }
    };
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
    };
    if slot != qemu_slot && !slot.join("linux").exists() {
        seed_profile_slot(&ctx, &qemu_slot, &slot).await?;
    }
    if let Some(mut gone) = clear_unfinished_make(&slot)? {
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
    /// The compiled `ext4_run_li_request`'s reading.
    text: variant::Detected,
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
    let mark = slot.join(MAKE_UNFINISHED);
    std::fs::write(&mark, b"").map_err(|e| KernelError::io(&mark, e))?;
    let made = ctx
        .run("make", &tree, &ctx.make_argv(image_target(spec), &[]))
        .await;
    // Make ended (a failed make removes the targets it was making itself);
    // only a make killed with the harness, or a harness killed while make
    // ran, leaves the mark.
    std::fs::remove_file(&mark).map_err(|e| KernelError::io(&mark, e))?;
    made?;
    let build_seconds = started.elapsed().as_secs_f64();

    let release = read(&tree.join("include/config/kernel.release"))?
        .trim()
        .to_string();
    let localversion = fragments::localversion(spec.id.hz, spec.id.variant);
    decide::check_release(&release, &localversion)?;
    // The tree may have changed under us only through this slot, which is
    // locked; still, confirm the variant the compiled text had (as
    // committed: record it).
    let now = variant::detect_file(&read(&tree.join("fs/ext4/super.c"))?);
    if plan.method != Method::AsCommitted {
        decide::check_compiled(now, spec.id.variant, &tree)?;
    }

    let image_src = tree.join(spec.id.arch.image_path());
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
        text: now,
    })
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
        built_at: chrono::Utc::now(),
        cache_key: plan.key.clone(),
        recipe_version: cache::RECIPE_VERSION,
    }
}

/// Download what a source needs first: an upstream tarball by version, or
/// a Debian package the host's apt does not carry (debian-5.10).
async fn fetch_source(spec: &KernelSpec, opts: &BuildOptions) -> Result<(), KernelError> {
    if let lazyinit_core::KernelSource::Version(v) = &spec.id.source {
        let fo = crate::fetch::FetchOptions {
            mirror: opts.mirror.clone(),
            progress: opts.progress.clone(),
            ..Default::default()
        };
        crate::fetch::fetch_version(v, &opts.cache_dir, &fo).await?;
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
        write_git_dirty(&tmp, &lazyinit_core::git::tree::dirty_names(root)?)?;
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

/// Copies the tree of the slot `from` (objects and times kept) to `to`,
/// under `from`'s lock: its own builder may be at work, so the copy is
/// taken between its builds. False, nothing copied, when `from`'s last
/// make was cut short (its files would be trusted in the copy).
///
/// The copy will be renamed to `slot/linux`; the tools the kernel build
/// makes with tools/build (objtool on x86_64) record the absolute path of
/// the tree in their command files, so in a copy at another path make
/// sees every one of their commands changed, relinks objtool, and then
/// recompiles every object, which depends on objtool. Those paths are
/// rewritten to the copy's own (`rebase_tool_commands`), which makes the
/// copy as incremental as the tree it came from.
async fn copy_seed(
    ctx: &Ctx<'_>,
    from: &Path,
    to: &Path,
    slot: &Path,
) -> Result<bool, KernelError> {
    let from_c = from.to_path_buf();
    let _from_lock = tokio::task::spawn_blocking(move || lock_slot(&from_c))
        .await
        .map_err(|e| KernelError::Step(format!("locking the seed slot: {e}")))??;
    if from.join(MAKE_UNFINISHED).exists() {
        ctx.step("the seed's last make was cut short: building cold instead");
        return Ok(false);
    }
    ctx.run(
        "seed (copy the built tree)",
        slot,
        &[
            "cp".to_string(),
            "-a".into(),
            "--reflink=auto".into(),
            from.join("linux").display().to_string(),
            to.display().to_string(),
        ],
    )
    .await?;
    rebase_tree(ctx, to, slot).await?;
    Ok(true)
}

/// Brings the tool command files of `tree` (to be, or being, `slot/linux`)
/// to the slot's own path when they name another: a seed's copy, or a
/// slot whose cache was moved or restored elsewhere.
async fn rebase_tree(ctx: &Ctx<'_>, tree: &Path, slot: &Path) -> Result<(), KernelError> {
    let new_root = std::fs::canonicalize(slot)
        .map_err(|e| KernelError::io(slot, e))?
        .join("linux");
    let tree_c = tree.to_path_buf();
    let n = tokio::task::spawn_blocking(move || match recorded_root(&tree_c) {
        Some(old_root) if old_root != new_root => {
            rebase_tool_commands(&tree_c, &old_root, &new_root)
        }
        _ => Ok(0),
    })
    .await
    .map_err(|e| KernelError::Step(format!("rebasing the tree's tool commands: {e}")))??;
    if n > 0 {
        ctx.step(format!(
            "the tree's {n} tool command files named another path: now its own (objtool is not rebuilt)"
        ));
    }
    Ok(())
}

/// The absolute path the tree's tools were built at, read from their
/// command files (not assumed to be the seed slot's: a cache restored or
/// moved to another path carries the old one): the first `.X.cmd` under
/// `tools/` whose `cmd_` target is absolute and ends with the file's own
/// place in the tree, `tools/.../X`. None when the tools were not built.
pub(crate) fn recorded_root(tree: &Path) -> Option<PathBuf> {
    let mut stack = vec![tree.join("tools")];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in rd.flatten() {
            let path = entry.path();
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() {
                stack.push(path);
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(target) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".cmd")) else {
                continue;
            };
            let Ok(rel_dir) = dir.strip_prefix(tree) else {
                continue;
            };
            let rel = rel_dir.join(target);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let Some(recorded) = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("cmd_"))
                .and_then(|l| l.split(" := ").next())
            else {
                continue;
            };
            let recorded = Path::new(recorded);
            if !recorded.is_absolute() {
                continue;
            }
            let Ok(root) = recorded
                .to_str()
                .and_then(|r| r.strip_suffix(rel.to_str()?))
                .map(|r| r.trim_end_matches('/'))
                .ok_or(())
            else {
                continue;
            };
            if !root.is_empty() {
                return Some(PathBuf::from(root));
            }
        }
    }
    None
}

/// Rewrites `old_root` to `new_root` in the command and dependency files
/// (`.*.cmd`, `.*.d`) under `tree/tools`, keeping each file's time, and
/// returns how many changed. `old_root` is rewritten where it ends a path
/// component (followed by `/`, white space, `:`, `\\` or the end), so a
/// longer sibling such as `linux.tmp` is left alone.
pub(crate) fn rebase_tool_commands(
    tree: &Path,
    old_root: &Path,
    new_root: &Path,
) -> Result<usize, KernelError> {
    let old = old_root.as_os_str().as_encoded_bytes();
    let new = new_root.as_os_str().as_encoded_bytes();
    let mut changed = 0;
    let mut stack = vec![tree.join("tools")];
    while let Some(dir) = stack.pop() {
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(KernelError::io(&dir, e)),
        };
        for entry in rd {
            let entry = entry.map_err(|e| KernelError::io(&dir, e))?;
            let ft = entry.file_type().map_err(|e| KernelError::io(&dir, e))?;
            let path = entry.path();
            if ft.is_dir() {
                stack.push(path);
                continue;
            }
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !ft.is_file() || !(name.ends_with(".cmd") || name.ends_with(".d")) {
                continue;
            }
            let bytes = std::fs::read(&path).map_err(|e| KernelError::io(&path, e))?;
            let Some(rewritten) = replace_root(&bytes, old, new) else {
                continue;
            };
            let meta = entry.metadata().map_err(|e| KernelError::io(&path, e))?;
            let mtime = meta.modified().map_err(|e| KernelError::io(&path, e))?;
            std::fs::write(&path, rewritten).map_err(|e| KernelError::io(&path, e))?;
            let f = std::fs::File::options()
                .write(true)
                .open(&path)
                .map_err(|e| KernelError::io(&path, e))?;
            f.set_modified(mtime)
                .map_err(|e| KernelError::io(&path, e))?;
            changed += 1;
        }
    }
    Ok(changed)
}

/// `bytes` with each whole-path occurrence of `old` replaced by `new`;
/// None when there is none.
fn replace_root(bytes: &[u8], old: &[u8], new: &[u8]) -> Option<Vec<u8>> {
    if old.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let mut any = false;
    while i < bytes.len() {
        if bytes[i..].starts_with(old) {
            let next = bytes.get(i + old.len()).copied();
            if matches!(
                next,
                None | Some(b'/' | b' ' | b'\t' | b'\n' | b':' | b'\\')
            ) {
                out.extend_from_slice(new);
                i += old.len();
                any = true;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    any.then_some(out)
}

/// A profile's first build in its own slot, seeded from the QEMU slot of
/// the same source, arch and HZ when that one has a tree: the tree, objects
/// and times copied under the QEMU slot's lock, so make recompiles only
/// what the profile's configuration changes (and the source's checks in
/// prepare_tree still decide whether the copy is the right source).
/// Nothing to seed from: the slot starts cold.
async fn seed_profile_slot(ctx: &Ctx<'_>, from: &Path, slot: &Path) -> Result<(), KernelError> {
    if !from.join("linux").join(SOURCE_MARKER).is_file() {
        return Ok(());
    }
    let tmp = slot.join("linux.tmp");
    remove_dirs(&[&tmp])?;
    ctx.step(format!(
        "seed the {} build tree from {} (its objects kept)",
        ctx.spec.id.profile,
        from.display()
    ));
    if !copy_seed(ctx, from, &tmp, slot).await? {
        return Ok(());
    }
    let tree = slot.join("linux");
    std::fs::rename(&tmp, &tree).map_err(|e| KernelError::io(&tree, e))
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
    let Ok(git) = identity.parse::<lazyinit_core::GitIdentity>() else {
        return Ok(false);
    };
    let commit = git.commit().to_string();
    // The commit's own identity, before the work tree's changes.
    let clean = git.base().to_string();
    let Some(from) = crate::seed::find(slot, ctx.spec.id.arch, ctx.spec.id.hz, root) else {
        return Ok(false);
    };
    let tree = slot.join("linux");
    let tmp = slot.join("linux.tmp");
    remove_dirs(&[&tree, &tmp])?;
    ctx.step(format!(
        "seed the build tree from {} (its objects kept), then bring it to {commit} by content (incremental)",
        from.display()
    ));
    if !copy_seed(ctx, &from, &tmp, slot).await? {
        return Ok(false);
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
    let Ok(from) = old.trim().parse::<lazyinit_core::GitIdentity>() else {
        return Ok(false);
    };
    let from = from.commit();
    let old_dirty: Vec<String> = std::fs::read_to_string(tree.join(GIT_DIRTY_MARKER))
        .unwrap_or_default()
        .split('\0')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let Some(mut names) = lazyinit_core::git::tree::changed_since(root, from, &old_dirty)? else {
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
    write_git_dirty(tree, &lazyinit_core::git::tree::dirty_names(root)?)?;
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
    let wanted = ctx.spec.id.variant;
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
    if plan.method != Method::AsCommitted {
        decide::check_switched(after, wanted, tree)?;
    }
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
        variant: ctx.spec.id.variant.to_string(),
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
    let refusals = userconfig::refuse_after(&needs, &resolved, ctx.spec.id.arch);
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
    // Gone unless published.
    let name = final_dir.file_name().unwrap().to_string_lossy();
    let aside = lazyinit_core::aside::Aside::new(final_dir, &format!("tmp-{name}-"))
        .map_err(|e| KernelError::io(final_dir.parent().unwrap(), e))?;
    let tmp = aside.path();
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
    // Someone published the same key first: theirs is as good (a damaged
    // entry is replaced).
    aside
        .publish(|d| cache::load(d).is_some())
        .map(drop)
        .map_err(|e| KernelError::io(final_dir, e))
}

/// The build future must be Send so callers can spawn it.
#[allow(dead_code)]
fn assert_send(spec: &KernelSpec, opts: &BuildOptions) {
    fn is_send<T: Send>(_: T) {}
    is_send(build(spec, opts));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copied tree's tool command files name the copy's path: every
    /// whole occurrence of the old root is rewritten, a longer sibling
    /// name and the other files are left alone, and times are kept.
    #[test]
    fn a_copys_tool_commands_name_the_copy() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("copy");
        let objtool = tree.join("tools/objtool/arch/x86");
        std::fs::create_dir_all(&objtool).unwrap();
        let (old, new) = (Path::new("/c/slot/linux"), Path::new("/c/other/linux"));
        let cmd = tree.join("tools/objtool/.check.o.cmd");
        std::fs::write(
            &cmd,
            "cmd_/c/slot/linux/tools/objtool/check.o := gcc -I/c/slot/linux/tools/include -o /c/slot/linux/tools/objtool/check.o check.c\n\
             deps_x := /c/slot/linux.tmp/kept /c/slot/linux\n/c/slot/linux: x \\\n /c/slot/linuxy\n",
        )
        .unwrap();
        let dep = objtool.join(".decode.o.d");
        std::fs::write(
            &dep,
            "decode.o: /c/slot/linux/tools/arch/x86/include/asm/insn.h\n",
        )
        .unwrap();
        let source = tree.join("tools/objtool/check.c");
        std::fs::write(&source, "/* /c/slot/linux/ */\n").unwrap();
        let outside = tree.join("init/.main.o.cmd");
        std::fs::create_dir_all(outside.parent().unwrap()).unwrap();
        std::fs::write(&outside, "/c/slot/linux/init\n").unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        std::fs::File::options()
            .write(true)
            .open(&cmd)
            .unwrap()
            .set_modified(t)
            .unwrap();

        assert_eq!(rebase_tool_commands(&tree, old, new).unwrap(), 2);
        assert_eq!(
            std::fs::read_to_string(&cmd).unwrap(),
            "cmd_/c/other/linux/tools/objtool/check.o := gcc -I/c/other/linux/tools/include -o /c/other/linux/tools/objtool/check.o check.c\n\
             deps_x := /c/slot/linux.tmp/kept /c/other/linux\n/c/other/linux: x \\\n /c/slot/linuxy\n"
        );
        assert_eq!(std::fs::metadata(&cmd).unwrap().modified().unwrap(), t);
        assert_eq!(
            std::fs::read_to_string(&dep).unwrap(),
            "decode.o: /c/other/linux/tools/arch/x86/include/asm/insn.h\n"
        );
        assert_eq!(
            std::fs::read_to_string(&source).unwrap(),
            "/* /c/slot/linux/ */\n"
        );
        assert_eq!(
            std::fs::read_to_string(&outside).unwrap(),
            "/c/slot/linux/init\n"
        );
        // The root is read from the copy's own command files, wherever the
        // tree was built (a moved or restored cache names another path).
        assert_eq!(recorded_root(&tree), Some(new.to_path_buf()));
        assert_eq!(recorded_root(&d.path().join("none")), None);
        // Nothing left to rewrite: a second pass changes nothing.
        assert_eq!(rebase_tool_commands(&tree, old, new).unwrap(), 0);
        // A tree with no tools folder (arm64 builds none here) is no error.
        assert_eq!(
            rebase_tool_commands(&d.path().join("none"), old, new).unwrap(),
            0
        );
    }

    /// A make cut short: the files written after its mark are removed (a
    /// half-written object would look new to the next make), the older
    /// ones kept, and the mark goes; no mark, nothing removed.
    #[test]
    fn a_cut_make_leaves_its_files_to_be_made_again() {
        let d = tempfile::tempdir().unwrap();
        let slot = d.path();
        let tree = slot.join("linux");
        std::fs::create_dir_all(tree.join("fs/ext4")).unwrap();
        std::fs::write(tree.join("fs/ext4/super.c"), "source").unwrap();
        std::fs::write(tree.join("fs/ext4/old.o"), "built before").unwrap();
        assert_eq!(clear_unfinished_make(slot).unwrap(), None);
        // Times a second apart: the mark's, then what the cut make wrote.
        let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
        let at = |p: &Path, t: std::time::SystemTime| {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(t)
                .unwrap()
        };
        at(&tree.join("fs/ext4/super.c"), t0);
        at(&tree.join("fs/ext4/old.o"), t0);
        std::fs::write(slot.join(MAKE_UNFINISHED), b"").unwrap();
        at(
            &slot.join(MAKE_UNFINISHED),
            t0 + std::time::Duration::from_secs(1),
        );
        std::fs::write(tree.join("fs/ext4/half.o"), "half").unwrap();
        std::fs::write(tree.join("fs/ext4/.half.o.cmd"), "cmd").unwrap();
        // What kconfig wrote whole (renamed into place, or created empty)
        // is kept: without auto.conf the next make would compile the tree.
        let whole = [
            ".config",
            "include/config/auto.conf",
            "include/config/LOCALVERSION",
            "include/generated/autoconf.h",
        ];
        for w in whole {
            std::fs::create_dir_all(tree.join(w).parent().unwrap()).unwrap();
            std::fs::write(tree.join(w), "").unwrap();
        }
        std::fs::write(tree.join("include/generated/utsrelease.h"), "half").unwrap();
        let mut gone = clear_unfinished_make(slot).unwrap().unwrap();
        gone.sort();
        assert_eq!(
            gone,
            [
                "fs/ext4/.half.o.cmd",
                "fs/ext4/half.o",
                "include/generated/utsrelease.h"
            ]
            .map(PathBuf::from)
        );
        assert!(tree.join("fs/ext4/super.c").exists() && tree.join("fs/ext4/old.o").exists());
        assert!(!tree.join("fs/ext4/half.o").exists());
        assert!(!tree.join("include/generated/utsrelease.h").exists());
        for w in whole {
            assert!(tree.join(w).exists(), "{w}");
        }
        assert!(!slot.join(MAKE_UNFINISHED).exists());
    }

    /// A command of the build holds the slot's lock while it lives, even
    /// once the harness is gone: another builder cannot take the slot.
    #[tokio::test]
    async fn the_builds_commands_hold_the_slots_lock() {
        let d = tempfile::tempdir().unwrap();
        let lock = lock_slot(d.path()).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&*lock);
        let mut cmd = tokio::process::Command::new("sleep");
        cmd.arg("30").kill_on_drop(true);
        inherit_fd(&mut cmd, fd);
        let mut child = cmd.spawn().unwrap();
        // The harness's own hold ends as when it is killed: its fd closed
        // with no unlock (dropping the Flock would unlock, which a killed
        // process never does).
        std::mem::forget(lock);
        // SAFETY: the fd is ours, and the forgotten Flock never closes it.
        #[allow(unsafe_code)]
        unsafe {
            libc::close(fd);
        }
        let f = std::fs::File::open(d.path().join("slot.lock")).unwrap();
        let taken = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock);
        assert!(taken.is_err(), "the slot was free while the command ran");
        child.kill().await.unwrap();
        child.wait().await.unwrap();
        let f = std::fs::File::open(d.path().join("slot.lock")).unwrap();
        assert!(nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok());
    }
}
