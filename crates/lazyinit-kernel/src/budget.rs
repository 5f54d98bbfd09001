//! What kernel builds cost, said before they start, and the disk the
//! cache's work trees may take.
//!
//! A build tree (`kernel/work/<slot>/linux`: the unpacked source and its
//! objects) is about 2 GB; a built kernel (`kernel/builds/`) a few MB. A
//! sweep over every packaged kernel makes a tree per source, arch and HZ,
//! so the trees are bounded: after each build, while their total passes the
//! budget, the least recently built trees go (never one in use: a tree
//! whose slot another builder holds is skipped). Built kernels always stay;
//! a later build of a tree that went starts cold (ccache still has its
//! objects: `build/ccache.rs`).

use std::path::{Path, PathBuf};

use lazyinit_core::ByteSize;

use crate::{cache, KernelSpec};

/// CPU-seconds of a cold tree (allnoconfig plus the fragments, nothing in
/// ccache), by series: measured on 2 cores, x86_64 and arm64 averaged
/// (docs/kernel-series.md, "Building them"): 5.10 1,033; 6.12 1,327 and
/// 1,513; 7.2 1,714 to 1,737 (arm64); 7.3 1,714 (x86_64) and 2,072 (arm64,
/// beside a run). The kernel grows, so a series between two
/// measured ones costs the later one's; one past the last, the last's.
const COLD_TREE_CPU_S: [((u32, u32), f64); 4] = [
    ((5, 10), 1040.0),
    ((6, 12), 1420.0),
    ((7, 2), 1730.0),
    ((7, 3), 1890.0),
];

/// The cold cost of a tree of `version` (`X.Y...`; a version that does not
/// parse, a user's tree, costs the newest series').
pub fn cold_tree_cpu_s(version: &str) -> f64 {
    let series = crate::fragments::series_number(version).unwrap_or((u32::MAX, 0));
    COLD_TREE_CPU_S
        .iter()
        .find(|(s, _)| series <= *s)
        .or(COLD_TREE_CPU_S.last())
        .map_or(0.0, |(_, c)| *c)
}
/// CPU-seconds of a variant switch in a built tree (fs/ext4/super.c and
/// the kernel's link).
pub const VARIANT_CPU_S: f64 = 60.0;
/// Disk of one work tree, bytes (1.6-2.1 GB measured, 5.10 to 7.2).
pub const TREE_BYTES: u64 = 2 << 30;
/// The work trees' budget unless `LAZYINIT_KERNEL_WORK_BUDGET` says
/// otherwise.
pub const DEFAULT_BUDGET: ByteSize = ByteSize(24 << 30);
pub const BUDGET_ENV: &str = "LAZYINIT_KERNEL_WORK_BUDGET";

/// The budget: `LAZYINIT_KERNEL_WORK_BUDGET` (`24GiB`, `500GB`), or the
/// default. An unreadable value is the caller's error to report.
pub fn budget() -> Result<ByteSize, String> {
    match std::env::var(BUDGET_ENV) {
        Err(_) => Ok(DEFAULT_BUDGET),
        Ok(v) => v
            .parse::<ByteSize>()
            .map_err(|e| format!("{BUDGET_ENV}={v}: {e}; give a size such as 24GiB")),
    }
}

/// What a set of kernels will take to build.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct BuildCost {
    pub kernels: usize,
    /// Already in the cache: nothing to do.
    pub cached: usize,
    /// New trees: their first build is cold.
    pub cold_trees: usize,
    /// Builds in a tree that exists or is made by a cold build before
    /// them: a variant switch.
    pub incremental: usize,
    pub cpu_s: f64,
    /// Disk the new trees add.
    pub new_tree_bytes: u64,
    /// What the work trees take now, and their budget.
    pub work_bytes: u64,
    pub budget_bytes: u64,
}

impl BuildCost {
    /// One line for `plan`: "kernels: 20, 4 cached; 7 trees to build cold
    /// and 9 variants, about 7,890 CPU-s (66 min on 2 cores); work trees
    /// 9.9 GiB now, +14 GiB, budget 24 GiB".
    pub fn render(&self, cores: usize) -> String {
        if self.cached == self.kernels {
            return format!("kernels: {}, all cached: nothing to build", self.kernels);
        }
        let gib = |b: u64| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64);
        let over = if self.work_bytes + self.new_tree_bytes > self.budget_bytes {
            " (least recently built trees go first; built kernels stay)"
        } else {
            ""
        };
        let n =
            |k: usize, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
        format!(
            "kernels: {}, {} cached; {} to build cold and {} in a built tree, about {:.0} CPU-s ({:.0} min on {}); work trees {} now, +{}, budget {}{over}",
            self.kernels,
            self.cached,
            n(self.cold_trees, "tree", "trees"),
            n(self.incremental, "build", "builds"),
            self.cpu_s,
            self.cpu_s / cores.max(1) as f64 / 60.0,
            n(cores.max(1), "core", "cores"),
            gib(self.work_bytes),
            gib(self.new_tree_bytes),
            gib(self.budget_bytes),
        )
    }
}

/// The cost of building `specs` (each needed once) into `cache_dir`.
pub fn estimate(specs: &[KernelSpec], cache_dir: &Path, budget: ByteSize) -> BuildCost {
    let mut cost = BuildCost {
        kernels: specs.len(),
        work_bytes: trees(cache_dir).iter().map(|t| t.bytes).sum(),
        budget_bytes: budget.0,
        ..Default::default()
    };
    let mut new_slots = std::collections::BTreeSet::new();
    for s in specs {
        if crate::cached(s, cache_dir).is_some() {
            cost.cached += 1;
            continue;
        }
        let slot = slot_of(s, cache_dir);
        if slot.join("linux").is_dir() || !new_slots.insert(slot) {
            cost.incremental += 1;
            cost.cpu_s += VARIANT_CPU_S;
        } else {
            cost.cold_trees += 1;
            cost.cpu_s += cold_tree_cpu_s(&version_of(&s.id.source));
            cost.new_tree_bytes += TREE_BYTES;
        }
    }
    cost
}

/// The version a source names, as far as its name says (a path: none).
fn version_of(source: &lazyinit_core::KernelSource) -> String {
    use lazyinit_core::KernelSource as S;
    match source {
        S::Debian61 => "6.1".into(),
        S::Debian612 => "6.12".into(),
        S::Debian510 => "5.10".into(),
        S::Debian(d) => d.series().to_string(),
        S::Version(v) => v.clone(),
        _ => String::new(),
    }
}

fn slot_of(s: &KernelSpec, cache_dir: &Path) -> PathBuf {
    let qemu_slot = cache::slot_dir(
        cache_dir,
        &cache::source_slug(&s.id.source),
        s.id.arch,
        s.id.hz,
        None,
    );
    crate::build::profile_slot(&qemu_slot, s.id.profile)
}

/// A work tree in the cache.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    pub slot: PathBuf,
    pub bytes: u64,
    /// When it was last built in (its build log's time).
    pub used: std::time::SystemTime,
}

/// Every slot with a tree, least recently used first.
pub fn trees(cache_dir: &Path) -> Vec<Tree> {
    let work = cache::kernel_dir(cache_dir).join("work");
    let Ok(entries) = std::fs::read_dir(&work) else {
        return Vec::new();
    };
    let mut out: Vec<Tree> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|slot| slot.join("linux").is_dir())
        .map(|slot| {
            let used = ["build.log", "slot.lock", "linux"]
                .iter()
                .filter_map(|f| std::fs::metadata(slot.join(f)).ok()?.modified().ok())
                .max()
                .unwrap_or(std::time::UNIX_EPOCH);
            Tree {
                bytes: recorded_bytes(&slot).unwrap_or_else(|| disk_bytes(&slot.join("linux"))),
                slot,
                used,
            }
        })
        .collect();
    out.sort_by_key(|t| t.used);
    out
}

/// Where a build records its tree's disk (`record`): the walk of a tree's
/// 70,000 files costs about 0.25 s of system time, and `plan` reads every
/// tree of the cache.
const RECORD: &str = "linux.bytes";

/// Records the disk the slot's tree takes now, for `trees` to read
/// instead of walking it; called at the end of each build, the only
/// writer of a tree. A record that does not parse is walked again.
pub fn record(slot: &Path) {
    let bytes = disk_bytes(&slot.join("linux"));
    let _ = std::fs::write(slot.join(RECORD), format!("{bytes}\n"));
}

fn recorded_bytes(slot: &Path) -> Option<u64> {
    std::fs::read_to_string(slot.join(RECORD))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Bytes a folder takes on disk (allocated blocks, links not followed).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

/// Removes the least recently used trees (never `keep`'s, never one whose
/// slot another builder holds) until the trees fit `budget`; returns the
/// slots whose trees went and the bytes each freed.
pub fn trim(cache_dir: &Path, keep: &Path, budget: ByteSize) -> Vec<(PathBuf, u64)> {
    let trees = trees(cache_dir);
    let mut total: u64 = trees.iter().map(|t| t.bytes).sum();
    let mut gone = Vec::new();
    for t in trees {
        if total <= budget.0 {
            break;
        }
        if t.slot == keep {
            continue;
        }
        let Ok(f) = std::fs::OpenOptions::new()
            .write(true)
            .open(t.slot.join("slot.lock"))
        else {
            continue;
        };
        // Held by another builder: in use, not a candidate.
        let Ok(_held) = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
        else {
            continue;
        };
        // Renamed first, so that a tree half removed is never taken for one.
        let doomed = t.slot.join("linux.gone");
        if std::fs::rename(t.slot.join("linux"), &doomed).is_err() {
            continue;
        }
        let _ = std::fs::remove_file(t.slot.join(RECORD));
        let _ = std::fs::remove_dir_all(&doomed);
        total = total.saturating_sub(t.bytes);
        gone.push((t.slot, t.bytes));
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(cache: &Path, name: &str, kib: usize, age_s: u64) -> PathBuf {
        let slot = cache::kernel_dir(cache).join("work").join(name);
        std::fs::create_dir_all(slot.join("linux")).unwrap();
        std::fs::write(slot.join("linux/obj"), vec![1u8; kib << 10]).unwrap();
        std::fs::write(slot.join("slot.lock"), b"").unwrap();
        let log = slot.join("build.log");
        std::fs::write(&log, b"").unwrap();
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(age_s);
        for f in ["build.log", "slot.lock", "linux"] {
            std::fs::File::options()
                .read(true)
                .open(slot.join(f))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        slot
    }

    /// Over budget, the oldest trees go first, the one just built and one
    /// another builder holds stay; under budget nothing goes.
    #[test]
    fn the_least_recently_built_trees_go_first() {
        let d = tempfile::tempdir().unwrap();
        let old = tree(d.path(), "old", 512, 3000);
        let held = tree(d.path(), "held", 512, 2000);
        let mid = tree(d.path(), "mid", 512, 1000);
        let new = tree(d.path(), "new", 512, 10);
        let just = tree(d.path(), "just", 512, 4000);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(held.join("slot.lock"))
            .unwrap();
        let _lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).unwrap();
        let total: u64 = trees(d.path()).iter().map(|t| t.bytes).sum();
        assert!(trim(d.path(), &just, ByteSize(total)).is_empty());
        // Room for three trees of five: two must go.
        let gone = trim(d.path(), &just, ByteSize(total * 3 / 5 + 1));
        let names: Vec<_> = gone.iter().map(|(s, _)| s.clone()).collect();
        assert_eq!(names, [old.clone(), mid.clone()]);
        assert!(!old.join("linux").exists() && !mid.join("linux").exists());
        assert!(held.join("linux").is_dir() && new.join("linux").is_dir());
        assert!(just.join("linux").is_dir());
        assert!(
            old.join("slot.lock").exists(),
            "the slot stays, its tree goes"
        );
    }

    #[test]
    fn a_cold_tree_costs_its_series_measured_figure() {
        assert_eq!(cold_tree_cpu_s("5.10.262-1"), 1040.0);
        assert_eq!(cold_tree_cpu_s("6.1"), 1420.0);
        assert_eq!(cold_tree_cpu_s("6.12"), 1420.0);
        assert_eq!(cold_tree_cpu_s("7.2.13-1"), 1730.0);
        assert_eq!(cold_tree_cpu_s("7.3.4-1~bpo13+1"), 1890.0);
        assert_eq!(cold_tree_cpu_s("4.19"), 1040.0);
        assert_eq!(cold_tree_cpu_s(""), 1890.0);
    }

    /// A tree's recorded size is read instead of walking it; a tree with
    /// no record (or a bad one) is walked; trimming a tree drops its record.
    #[test]
    fn a_recorded_tree_size_is_read_and_the_others_measured() {
        let d = tempfile::tempdir().unwrap();
        let a = tree(d.path(), "a", 64, 20);
        let b = tree(d.path(), "b", 64, 10);
        let walked = trees(d.path())[0].bytes;
        assert!(walked >= 64 << 10, "{walked}");
        record(&a);
        assert_eq!(recorded_bytes(&a), Some(walked));
        std::fs::write(a.join(RECORD), "12345\n").unwrap();
        std::fs::write(b.join(RECORD), "not a size\n").unwrap();
        let t = trees(d.path());
        assert_eq!((t[0].slot.clone(), t[0].bytes), (a.clone(), 12345));
        assert_eq!((t[1].slot.clone(), t[1].bytes), (b.clone(), walked));
        let gone = trim(d.path(), &b, ByteSize(walked));
        assert_eq!(gone, vec![(a.clone(), 12345)]);
        assert!(!a.join(RECORD).exists());
    }

    /// Two kernels in one new tree: one cold build, one variant; a cached
    /// set says so.
    #[test]
    fn the_cost_line_says_cold_trees_variants_cpu_and_disk() {
        let c = BuildCost {
            kernels: 4,
            cached: 2,
            cold_trees: 1,
            incremental: 1,
            cpu_s: cold_tree_cpu_s("7.2.13-1") + VARIANT_CPU_S,
            new_tree_bytes: TREE_BYTES,
            work_bytes: 23 << 30,
            budget_bytes: DEFAULT_BUDGET.0,
        };
        let line = c.render(2);
        assert!(line.starts_with("kernels: 4, 2 cached; 1 tree to build cold and 1 build in a built tree, about 1790 CPU-s (15 min on 2 cores)"), "{line}");
        assert!(
            line.contains(
                "work trees 23.0 GiB now, +2.0 GiB, budget 24.0 GiB (least recently built"
            ),
            "{line}"
        );
        let all = BuildCost { cached: 4, ..c };
        assert_eq!(all.render(2), "kernels: 4, all cached: nothing to build");
    }
}
