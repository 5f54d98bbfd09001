//! The compiler cache (ccache, packaged by Debian): the next point release
//! of a series compiles only what changed since the last one built here.
//!
//! Every Debian version has its own slot and tree, unpacked fresh: make
//! alone would compile all of it. Through ccache, an object whose
//! preprocessed source, flags and compiler are the ones of an object
//! already compiled (in any slot: the paths are relative to the slot,
//! `CCACHE_BASEDIR`) is copied from the cache instead. Between two point
//! releases that is nearly every object. The cache lives in the kernel
//! cache (`kernel/ccache`), bounded by ccache's own `max_size`.
//!
//! A tree keeps the compiler command it was first built with: kbuild
//! records every object's command, and a tree built with plain `gcc`
//! switched to `ccache gcc` would compile every object again once. So
//! ccache is used for a tree that has never been built, or one built
//! with it; never to switch an old tree.

use super::*;

/// ccache's own bound on its folder: about 2.5 kernel trees' objects.
pub(crate) const MAX_SIZE: &str = "5G";

/// How this slot's make calls ccache (`None`: it does not).
#[derive(Debug, Clone)]
pub(super) struct Ccache {
    program: PathBuf,
    dir: PathBuf,
    basedir: PathBuf,
}

impl Ccache {
    /// ccache for the tree `slot/linux`, when ccache is installed and the
    /// tree is new or was built with it.
    pub(super) fn for_slot(cache_dir: &Path, slot: &Path) -> Option<Ccache> {
        let program = tools::find_in_path("ccache")?;
        let recorded = std::fs::read_to_string(slot.join("linux").join(PROBE_CMD)).ok();
        if !decide::use_ccache(recorded.as_deref()) {
            return None;
        }
        Some(Ccache {
            program,
            dir: crate::cache::kernel_dir(cache_dir).join("ccache"),
            basedir: slot.to_path_buf(),
        })
    }

    /// make's `CC=` for this arch.
    pub(super) fn cc(&self, arch: lazyinit_core::cell::Arch) -> String {
        format!("CC={} {}", self.program.display(), tools::compiler(arch))
    }

    /// The environment of every command of the build.
    pub(super) fn envs(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        vec![
            ("CCACHE_DIR", self.dir.clone().into_os_string()),
            ("CCACHE_BASEDIR", self.basedir.clone().into_os_string()),
            // The kernel is built without debug info here; with it, the
            // folder would only name another slot in DW_AT_comp_dir.
            ("CCACHE_NOHASHDIR", "1".into()),
            ("CCACHE_MAXSIZE", MAX_SIZE.into()),
            // The cache is the harness's: nobody else reads or writes it.
            ("CCACHE_UMASK", "077".into()),
        ]
    }

    /// ccache's counters for the log and the step line: "hits N, misses M".
    pub(super) async fn stats(&self) -> Option<(u64, u64)> {
        let out = tokio::process::Command::new(&self.program)
            .args(["--print-stats"])
            .envs(self.envs())
            .stdin(Stdio::null())
            .output()
            .await
            .ok()?;
        decide::ccache_counts(&String::from_utf8_lossy(&out.stdout))
    }
}

/// The object whose recorded command says which compiler built the tree:
/// `init/main.c` is in every kernel and compiled early.
pub(super) const PROBE_CMD: &str = "init/.main.o.cmd";
