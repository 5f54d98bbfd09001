//! What a kernel build decides, as pure functions of what it found: which
//! tree is reused or unpacked again, which patch goes in or out, and which
//! built kernel is refused. `build/` does what these say.

use std::path::Path;

use lazyinit_core::Variant;

use crate::error::KernelError;
use crate::variant::{Detected, Method, Patch};

/// The build tree is kept only when its marker names exactly this source
/// (by identity: a version and its tarball hash, a git commit, ...).
pub(crate) fn reuse_tree(marker: Option<&str>, identity: &str) -> bool {
    marker.map(str::trim) == Some(identity)
}

/// Whether a tree's make goes through ccache, from the command kbuild
/// recorded for one of its objects (`None`: never built): a new tree does,
/// a tree built with ccache does, a tree built with the bare compiler does
/// not (switching it would recompile every object once).
pub(crate) fn use_ccache(recorded: Option<&str>) -> bool {
    let Some(text) = recorded else {
        return true;
    };
    let Some(first) = text.lines().next() else {
        return true;
    };
    // `savedcmd_init/main.o := ccache gcc ...` (6.x), `cmd_... :=` (5.10).
    match first.split_once(":=") {
        Some((_, cmd)) => cmd
            .split_whitespace()
            .next()
            .is_some_and(|w| w == "ccache" || w.ends_with("/ccache")),
        None => true,
    }
}

/// Hits and misses in `ccache --print-stats`: (direct + preprocessed
/// hits, misses). `None` when the text has no such counters.
pub(crate) fn ccache_counts(stats: &str) -> Option<(u64, u64)> {
    let get = |name: &str| {
        stats.lines().find_map(|l| {
            let (k, v) = l.split_once('\t')?;
            (k.trim() == name)
                .then(|| v.trim().parse::<u64>().ok())
                .flatten()
        })
    };
    let hits = get("direct_cache_hit")? + get("preprocessed_cache_hit")?;
    Some((hits, get("cache_miss")?))
}

/// A kept tree whose ext4 text is neither variant (an interrupted patch, a
/// hand edit) cannot be switched by patches: it is unpacked again. A
/// source whose released text is itself unknown is not second-guessed.
pub(crate) fn unpack_again(released: Detected, in_tree: Detected) -> bool {
    released != Detected::Unknown && in_tree == Detected::Unknown
}

/// The patch steps that bring a tree to `wanted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Switch {
    /// The other variant's patch the tree carries, taken back out first.
    pub unapply: Option<Patch>,
    /// Apply the plan's first patch that applies cleanly.
    pub apply: bool,
}

/// What to do to a tree whose text is `now`, carrying `applied`, for
/// `wanted` with the plan's `method`: nothing when it already is `wanted`;
/// else take out what it carries, and put in a patch unless the variant
/// is the source as released.
pub(crate) fn switch(
    now: Detected,
    wanted: Variant,
    applied: Option<Patch>,
    method: Method,
) -> Switch {
    if method == Method::AsCommitted {
        // The commit's own text: whatever it carries goes back out.
        return Switch {
            unapply: applied,
            apply: false,
        };
    }
    if now.variant() == Some(wanted) {
        return Switch {
            unapply: None,
            apply: false,
        };
    }
    Switch {
        unapply: applied,
        apply: method != Method::AsReleased,
    }
}

/// The tree's text after switching must be the variant asked for.
pub(crate) fn check_switched(
    after: Detected,
    wanted: Variant,
    tree: &Path,
) -> Result<(), KernelError> {
    if after.variant() == Some(wanted) {
        return Ok(());
    }
    Err(KernelError::VariantCheck {
        wanted: wanted.to_string(),
        found: match after {
            Detected::Unknown => "neither form".into(),
            d => format!("{d:?}").to_lowercase(),
        },
        tree: tree.to_path_buf(),
    })
}

/// A built kernel must call itself by the harness's local version (the
/// guest protocol checks `uname -r` against it).
pub(crate) fn check_release(release: &str, localversion: &str) -> Result<(), KernelError> {
    if release.ends_with(localversion) {
        return Ok(());
    }
    Err(KernelError::Step(format!(
        "the built kernel calls itself `{release}`, not ...`{localversion}`: was LOCALVERSION overridden?"
    )))
}

/// The text that was compiled must still be the variant asked for.
pub(crate) fn check_compiled(
    now: Detected,
    wanted: Variant,
    tree: &Path,
) -> Result<(), KernelError> {
    if now.variant() == Some(wanted) {
        return Ok(());
    }
    Err(KernelError::VariantCheck {
        wanted: wanted.to_string(),
        found: format!("{now:?}"),
        tree: tree.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_keeps_the_compiler_command_it_was_built_with() {
        assert!(use_ccache(None), "a new tree");
        assert!(use_ccache(Some("")));
        assert!(use_ccache(Some(
            "savedcmd_init/main.o := /usr/bin/ccache aarch64-linux-gnu-gcc -Wp,-MMD\n"
        )));
        assert!(use_ccache(Some(
            "cmd_init/main.o := ccache gcc -nostdinc\n"
        )));
        assert!(!use_ccache(Some(
            "savedcmd_init/main.o := aarch64-linux-gnu-gcc -Wp,-MMD\n"
        )));
        assert!(!use_ccache(Some("cmd_init/main.o := gcc -nostdinc\n")));
    }

    #[test]
    fn ccache_counters_are_read_from_print_stats() {
        let s =
            "cache_miss\t7\ndirect_cache_hit\t10\nfiles_in_cache\t3\npreprocessed_cache_hit\t2\n";
        assert_eq!(ccache_counts(s), Some((12, 7)));
        assert_eq!(ccache_counts("cache_miss\t1\n"), None);
    }
    use crate::variant::PATCHES;

    #[test]
    fn a_tree_is_reused_only_for_its_own_source() {
        assert!(reuse_tree(Some("6.1.158 sha256:ab\n"), "6.1.158 sha256:ab"));
        assert!(!reuse_tree(Some("6.1.158 sha256:cd"), "6.1.158 sha256:ab"));
        assert!(
            !reuse_tree(None, "6.1.158 sha256:ab"),
            "no marker: unpacked"
        );
    }

    #[test]
    fn a_tree_of_neither_variant_is_unpacked_again() {
        assert!(unpack_again(Detected::NoFix, Detected::Unknown));
        assert!(unpack_again(Detected::Fix, Detected::Unknown));
        assert!(!unpack_again(Detected::NoFix, Detected::Fix));
        assert!(!unpack_again(Detected::Unknown, Detected::Unknown));
    }

    #[test]
    fn switching_takes_out_the_other_patch_and_puts_one_in() {
        let p = PATCHES[0];
        let done = Switch {
            unapply: None,
            apply: false,
        };
        // Already the variant: nothing, whatever it carries.
        assert_eq!(
            switch(Detected::Fix, Variant::Fix, Some(p), Method::AppliedForward),
            done
        );
        // The other variant with its patch: out, then a patch in.
        assert_eq!(
            switch(Detected::Fix, Variant::NoFix, Some(p), Method::Reverted),
            Switch {
                unapply: Some(p),
                apply: true
            }
        );
        // Back to the variant as released: out, and nothing in.
        assert_eq!(
            switch(Detected::NoFix, Variant::Fix, Some(p), Method::AsReleased),
            Switch {
                unapply: Some(p),
                apply: false
            }
        );
        assert_eq!(
            switch(Detected::NoFix, Variant::Fix, None, Method::AppliedForward),
            Switch {
                unapply: None,
                apply: true
            }
        );
    }

    #[test]
    fn as_committed_takes_out_what_it_carries_and_puts_nothing_in() {
        let p = PATCHES[0];
        for now in [Detected::Fix, Detected::NoFix, Detected::Unknown] {
            for (applied, out) in [(Some(p), Some(p)), (None, None)] {
                assert_eq!(
                    switch(now, Variant::NoFix, applied, Method::AsCommitted),
                    Switch {
                        unapply: out,
                        apply: false
                    },
                    "{now:?}"
                );
            }
        }
        // Its method: as released when the text is the label's (the same
        // kernel, the same key), else as committed; never a patch.
        use crate::variant::plan_as_committed;
        assert_eq!(
            plan_as_committed(Detected::Fix, Variant::Fix),
            (Method::AsReleased, vec![])
        );
        for d in [Detected::Unknown, Detected::Fix] {
            assert_eq!(
                plan_as_committed(d, Variant::NoFix),
                (Method::AsCommitted, vec![])
            );
        }
    }

    #[test]
    fn a_kernel_of_another_name_or_variant_is_refused() {
        let tree = Path::new("/cache/slot/linux");
        check_release("6.1.158-lazyinit-hz250-fix", "-lazyinit-hz250-fix").unwrap();
        let e = check_release("6.1.158-custom", "-lazyinit-hz250-fix").unwrap_err();
        assert!(
            e.to_string().contains("was LOCALVERSION overridden?"),
            "{e}"
        );
        check_compiled(Detected::Fix, Variant::Fix, tree).unwrap();
        for d in [Detected::NoFix, Detected::Unknown] {
            assert!(matches!(
                check_compiled(d, Variant::Fix, tree),
                Err(KernelError::VariantCheck { .. })
            ));
        }
        let e = check_switched(Detected::Unknown, Variant::NoFix, tree).unwrap_err();
        assert!(
            matches!(&e, KernelError::VariantCheck { found, .. } if found == "neither form"),
            "{e}"
        );
        check_switched(Detected::NoFix, Variant::NoFix, tree).unwrap();
    }
}
