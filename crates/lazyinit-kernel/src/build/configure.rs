//! Configuring the tree: the harness's fragment on allnoconfig, or a
//! user's config with the harness's needs on top.

use super::*;

/// A configured tree: its resolved `.config`, and with a user's config,
/// what differs from that file.
pub(super) struct Configured {
    pub(super) text: String,
    pub(super) report: Option<userconfig::ConfigReport>,
}

/// `make allnoconfig` with the merged fragment, then check every requested
/// option in the resolved `.config`.
pub(super) async fn configure(
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
pub(super) async fn configure_on(
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
