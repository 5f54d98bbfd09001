//! The slot's source tree: unpacked, or seeded from another slot's built
//! tree (objects and times kept, tool commands rebased to the copy's path).

use super::*;

/// Make sure `slot/linux` is an unpacked copy of exactly this source.
pub(super) async fn prepare_tree(
    ctx: &Ctx<'_>,
    plan: &Plan,
    slot: &Path,
) -> Result<PathBuf, KernelError> {
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
pub(super) async fn copy_seed(
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
pub(super) async fn rebase_tree(
    ctx: &Ctx<'_>,
    tree: &Path,
    slot: &Path,
) -> Result<(), KernelError> {
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
pub(super) fn replace_root(bytes: &[u8], old: &[u8], new: &[u8]) -> Option<Vec<u8>> {
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
pub(super) async fn seed_profile_slot(
    ctx: &Ctx<'_>,
    from: &Path,
    slot: &Path,
) -> Result<(), KernelError> {
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
pub(super) async fn seed_git_tree(
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
pub(super) fn remove_dirs(dirs: &[&Path]) -> Result<(), KernelError> {
    for d in dirs {
        if d.exists() {
            std::fs::remove_dir_all(d).map_err(|e| KernelError::io(d, e))?;
        }
    }
    Ok(())
}

pub(super) fn write_git_dirty(tree: &Path, names: &[String]) -> Result<(), KernelError> {
    let p = tree.join(GIT_DIRTY_MARKER);
    std::fs::write(&p, names.join("\0")).map_err(|e| KernelError::io(&p, e))
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
}
