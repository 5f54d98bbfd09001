//! Bringing a copy of a git tree to a newer state by recopying only what
//! changed (moved as it was from build.rs; the git helpers themselves are
//! in `lazyinit_core::git`).

use super::*;

/// The files a variant patch touches (its `+++ b/` names).
pub(super) fn patched_files(p: &Patch) -> Vec<String> {
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
pub(super) async fn sync_git_tree(
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
