//! The variant patches: switching the tree to the asked variant.

use super::*;

/// Bring the tree to the asked variant and prove it by its text. Returns the
/// patch the tree now carries (None when as released).
pub(super) async fn switch_variant(
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

pub(super) async fn apply_first(
    ctx: &Ctx<'_>,
    plan: &Plan,
    tree: &Path,
) -> Result<Patch, KernelError> {
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

pub(super) fn patch_file(tree: &Path, p: &Patch) -> Result<PathBuf, KernelError> {
    let dir = tree.parent().unwrap_or(tree).join("patches");
    std::fs::create_dir_all(&dir).map_err(|e| KernelError::io(&dir, e))?;
    let f = dir.join(p.name);
    std::fs::write(&f, p.text).map_err(|e| KernelError::io(&f, e))?;
    Ok(f)
}

pub(super) fn patch_argv(file: &Path, reverse: bool, dry: bool) -> Vec<String> {
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

pub(super) async fn apply_patch_dry(tree: &Path, p: &Patch) -> Result<bool, KernelError> {
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

pub(super) async fn apply_patch(
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
