//! Running the build's commands (the slot's log, the progress lines, the
//! slot's lock kept across exec), make itself, and its recovery: what a
//! make cut short left is removed before the next one.

use super::*;

pub(super) struct Ctx<'a> {
    pub(super) spec: &'a KernelSpec,
    pub(super) opts: &'a BuildOptions,
    pub(super) log: PathBuf,
    /// The slot's lock, which every command of the build inherits, so
    /// that a make that outlives a killed harness (it is not killed with
    /// it) and its compilers still hold the slot: the next builder waits
    /// for them instead of making beside them.
    pub(super) lock_fd: Option<std::os::fd::RawFd>,
    /// The compiler cache this slot's make goes through, decided once the
    /// tree is there (`Ccache::for_slot`).
    pub(super) ccache: Option<Ccache>,
}

impl Ctx<'_> {
    pub(super) fn step(&self, s: impl Into<String>) {
        if let Some(p) = &self.opts.progress {
            p(BuildEvent::Step(s.into()));
        }
    }

    /// Run a command in `dir`, appending its output to the slot's log and
    /// passing lines to the progress callback; on failure the error carries
    /// the log's tail.
    pub(super) async fn run(
        &self,
        step: &str,
        dir: &Path,
        argv: &[String],
    ) -> Result<(), KernelError> {
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
        if let Some(c) = &self.ccache {
            cmd.envs(c.envs());
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

    pub(super) fn make_argv(&self, target: &str, extra: &[String]) -> Vec<String> {
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
        if let Some(c) = &self.ccache {
            v.push(c.cc(self.spec.id.arch));
        }
        v.extend_from_slice(extra);
        v.push(target.to_string());
        v
    }
}

/// User + system CPU-seconds of this process's finished children so far.
fn children_cpu_seconds() -> f64 {
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // SAFETY: getrusage writes the struct it is given, nothing else.
    #[allow(unsafe_code)]
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut u);
        u
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Forward a child's output lines to one channel (stdout and stderr merged
/// in arrival order).
pub(super) fn pump<R>(
    mut lines: tokio::io::Lines<R>,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) where
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
pub(super) fn inherit_fd(cmd: &mut tokio::process::Command, fd: std::os::fd::RawFd) {
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
pub(super) const MAKE_UNFINISHED: &str = "make.unfinished";

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
pub(super) fn whole_by_construction(rel: &Path) -> bool {
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
pub(super) fn clear_unfinished_make(slot: &Path) -> Result<Option<Vec<PathBuf>>, KernelError> {
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

/// Makes the image target, with the mark that says a make is under way.
async fn make_image(ctx: &Ctx<'_>, slot: &Path, tree: &Path) -> Result<(), KernelError> {
    ctx.step(format!("make {}", image_target(ctx.spec)));
    let mark = slot.join(MAKE_UNFINISHED);
    std::fs::write(&mark, b"").map_err(|e| KernelError::io(&mark, e))?;
    let made = ctx
        .run("make", tree, &ctx.make_argv(image_target(ctx.spec), &[]))
        .await;
    // Make ended (a failed make removes the targets it was making itself);
    // only a make killed with the harness, or a harness killed while make
    // ran, leaves the mark.
    std::fs::remove_file(&mark).map_err(|e| KernelError::io(&mark, e))?;
    made
}

/// What ccache did for this build (its counters since `before`), said as
/// a step; `None` when the build did not go through ccache.
async fn ccache_since(ctx: &Ctx<'_>, before: Option<(u64, u64)>) -> Option<cache::CcacheCounts> {
    let (c, (h0, m0)) = (ctx.ccache.as_ref()?, before?);
    let (h, m) = c.stats().await?;
    let counts = cache::CcacheCounts {
        hits: h.saturating_sub(h0),
        misses: m.saturating_sub(m0),
    };
    ctx.step(format!(
        "ccache: {} objects from the cache, {} compiled",
        counts.hits, counts.misses
    ));
    Some(counts)
}

/// Prepares the slot's tree, switches its variant, configures and makes
/// it, and refuses a kernel of another name or variant.
pub(super) async fn make(ctx: &Ctx<'_>, plan: &Plan, slot: &Path) -> Result<Built, KernelError> {
    let spec = ctx.spec;
    let started = Instant::now();
    let cpu_before = children_cpu_seconds();
    let mut tree = prepare_tree(ctx, plan, slot).await?;
    let ctx = &Ctx {
        spec: ctx.spec,
        opts: ctx.opts,
        log: ctx.log.clone(),
        lock_fd: ctx.lock_fd,
        ccache: Ccache::for_slot(&ctx.opts.cache_dir, slot),
    };
    let counts_before = match &ctx.ccache {
        Some(c) => c.stats().await,
        None => None,
    };
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

    make_image(ctx, slot, &tree).await?;
    let build_seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = children_cpu_seconds() - cpu_before;
    let ccache = ccache_since(ctx, counts_before).await;

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
        cpu_seconds,
        ccache,
        text: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
