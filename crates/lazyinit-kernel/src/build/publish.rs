//! Publishing a build into the cache (core's `aside`: built beside the
//! entry, renamed in, first one wins).

use super::*;

/// Write the build's files under a temporary name, then rename it into
/// place: a build directory either is complete or does not exist.
pub(super) fn publish(
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
