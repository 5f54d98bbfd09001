//! Splitting a plan over N machines: shard K of N runs only its cells, and
//! `merge` (crate::merge) makes one run of the shards' folders.
//!
//! The split is a pure function of the plan (its cells and their predicted
//! wall times) and N, like nextest's `--partition count:K/N`: every machine
//! computes the same shards with no coordinator. It is longest processing
//! time first, so the shards' predicted walls come out within one cell of
//! each other (docs/shards.md). Repetitions are cells of their own and may
//! land on different shards; a shard builds only the kernels its cells boot.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use lazyinit_core::{KernelId, KernelSource};
use serde::{Deserialize, Serialize};

use crate::plan::{makespan, KernelNeed, Plan, PlannedCell};

/// The most shards a plan splits into (`plan --shards N`, `run --shard
/// K/N`, an engine's count): more is refused before anything is allocated
/// (issue 41; a matrix has at most 10000 cells, and a shard is a machine).
pub const MAX_SHARDS: u32 = 1024;

/// Shard `index` of `count`, both from 1 (as `run --shard K/N` says it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shard {
    index: u32,
    count: u32,
}

/// A `--shard` or an engine's environment that names no shard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("`{0}` is not a shard: give K/N with 1 <= K <= N, e.g. --shard 1/4")]
    Syntax(String),
    #[error("shard {index}/{count} does not exist: K must be between 1 and N")]
    OutOfRange { index: u64, count: u64 },
    #[error("{count} shards: at most {MAX_SHARDS} (and at least 1)")]
    TooMany { count: u64 },
    #[error("{var} is `{value}`, not a whole number")]
    NotANumber { var: &'static str, value: String },
    #[error("{index_var} is set but {count_var} is not: {hint}")]
    NoCount {
        index_var: &'static str,
        count_var: &'static str,
        hint: &'static str,
    },
    #[error("{0}")]
    Engine(String),
    #[error("--shard auto found no shard in the environment: set LAZYINIT_SHARD=K/N, or run under a Kubernetes Indexed Job (JOB_COMPLETION_INDEX with LAZYINIT_SHARD_COUNT), GitLab `parallel:` (CI_NODE_INDEX, CI_NODE_TOTAL) or a Slurm array (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT)")]
    NoEngine,
}

impl Shard {
    pub fn new(index: u32, count: u32) -> Result<Shard, ShardError> {
        check_count(count.into())?;
        if index == 0 || index > count {
            return Err(ShardError::OutOfRange {
                index: index.into(),
                count: count.into(),
            });
        }
        Ok(Shard { index, count })
    }
    /// From 1.
    pub fn index(self) -> u32 {
        self.index
    }
    pub fn count(self) -> u32 {
        self.count
    }
    /// `shard-K-of-N`: a file-name-safe name.
    pub fn slug(self) -> String {
        format!("shard-{}-of-{}", self.index, self.count)
    }
}

/// `count` shards are allowed: 1 to MAX_SHARDS.
pub fn check_count(count: u64) -> Result<(), ShardError> {
    if count == 0 || count > u64::from(MAX_SHARDS) {
        return Err(ShardError::TooMany { count });
    }
    Ok(())
}

/// K/N from 1 in u64 (as an environment or a flag said it), checked.
fn checked(k: u64, n: u64) -> Result<Shard, ShardError> {
    check_count(n)?;
    match (u32::try_from(k), u32::try_from(n)) {
        (Ok(k), Ok(n)) => Shard::new(k, n),
        _ => Err(ShardError::OutOfRange { index: k, count: n }),
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = ShardError;
    fn from_str(s: &str) -> Result<Shard, ShardError> {
        let syntax = || ShardError::Syntax(s.escape_debug().to_string());
        let (k, n) = s.trim().split_once('/').ok_or_else(syntax)?;
        let k: u64 = k.trim().parse().map_err(|_| syntax())?;
        let n: u64 = n.trim().parse().map_err(|_| syntax())?;
        checked(k, n)
    }
}

impl Serialize for Shard {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Shard {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What `run --shard` was given: a shard, or `auto` (the environment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardArg {
    Fixed(Shard),
    Auto,
}

impl FromStr for ShardArg {
    type Err = ShardError;
    fn from_str(s: &str) -> Result<ShardArg, ShardError> {
        match s.trim() {
            "auto" => Ok(ShardArg::Auto),
            other => other.parse().map(ShardArg::Fixed),
        }
    }
}

/// The variable that carries the shard count for a Kubernetes Indexed Job
/// (the Job's `completions` is not in the pod's environment).
pub const COUNT_VAR: &str = "LAZYINIT_SHARD_COUNT";
/// `K/N` for any engine (GitHub Actions' matrix sets it, or passes
/// `--shard K/N`).
pub const SHARD_VAR: &str = "LAZYINIT_SHARD";

/// The shard the engine running this process gave it, and a sentence
/// saying which variables said so. Pure: `get` reads the environment.
/// The first engine found wins, in this order: `LAZYINIT_SHARD`, a
/// Kubernetes Indexed Job (0-based), GitLab `parallel:` (1-based), a Slurm
/// array (`SLURM_ARRAY_TASK_ID` counted from `SLURM_ARRAY_TASK_MIN` in
/// steps of `SLURM_ARRAY_TASK_STEP`).
pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<(Shard, String), ShardError> {
    let get: &dyn Fn(&str) -> Option<String> = &get;
    if let Some(v) = get(SHARD_VAR) {
        let s: Shard = v
            .parse()
            .map_err(|e| ShardError::Engine(format!("{SHARD_VAR}: {e}")))?;
        return Ok((s, format!("{SHARD_VAR}={s}")));
    }
    if let Some(i) = num(get, "JOB_COMPLETION_INDEX")? {
        return kubernetes(get, i);
    }
    if let Some(i) = num(get, "CI_NODE_INDEX")? {
        return gitlab(get, i);
    }
    if let Some(id) = num(get, "SLURM_ARRAY_TASK_ID")? {
        return slurm(get, id);
    }
    Err(ShardError::NoEngine)
}

/// A variable's number, if set.
fn num(get: &dyn Fn(&str) -> Option<String>, var: &'static str) -> Result<Option<u64>, ShardError> {
    match get(var) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| ShardError::NotANumber {
                var,
                // Quoted: a newline or escape in it stays on the line.
                value: v.escape_debug().to_string(),
            }),
    }
}

/// A count out of range, said with the variable that gave it.
fn count(var: &str, n: u64) -> Result<u64, ShardError> {
    check_count(n).map_err(|e| ShardError::Engine(format!("{var}={n}: {e}")))?;
    Ok(n)
}

/// A Kubernetes Indexed Job's shard, `JOB_COMPLETION_INDEX` being `i`.
fn kubernetes(get: &dyn Fn(&str) -> Option<String>, i: u64) -> Result<(Shard, String), ShardError> {
    let n = num(get, COUNT_VAR)?.ok_or(ShardError::NoCount {
        index_var: "JOB_COMPLETION_INDEX",
        count_var: COUNT_VAR,
        hint: "set it to the Indexed Job's `completions` in the pod's env",
    })?;
    let n = count(COUNT_VAR, n)?;
    // From 0: 0 to n - 1 (compared, never added to: u64::MAX is in range
    // of the comparison).
    if i >= n {
        return Err(past_count(
            "JOB_COMPLETION_INDEX",
            i,
            COUNT_VAR,
            n,
            0,
            " (LAZYINIT_SHARD_COUNT is the Indexed Job's `completions`)",
        ));
    }
    let s = checked(i + 1, n)?;
    Ok((
        s,
        format!("JOB_COMPLETION_INDEX={i} (from 0) and {COUNT_VAR}={n}: a Kubernetes Indexed Job"),
    ))
}

/// GitLab `parallel:`'s shard, `CI_NODE_INDEX` being `i`.
fn gitlab(get: &dyn Fn(&str) -> Option<String>, i: u64) -> Result<(Shard, String), ShardError> {
    let n = num(get, "CI_NODE_TOTAL")?.ok_or(ShardError::NoCount {
        index_var: "CI_NODE_INDEX",
        count_var: "CI_NODE_TOTAL",
        hint: "GitLab sets both for a job with `parallel: N`",
    })?;
    let n = count("CI_NODE_TOTAL", n)?;
    if i == 0 || i > n {
        return Err(past_count("CI_NODE_INDEX", i, "CI_NODE_TOTAL", n, 1, ""));
    }
    let s = checked(i, n)?;
    Ok((
        s,
        format!("CI_NODE_INDEX={i} (from 1) and CI_NODE_TOTAL={n}: GitLab `parallel:`"),
    ))
}

/// A Slurm array's shard, `SLURM_ARRAY_TASK_ID` being `id`.
fn slurm(get: &dyn Fn(&str) -> Option<String>, id: u64) -> Result<(Shard, String), ShardError> {
    let n = num(get, "SLURM_ARRAY_TASK_COUNT")?.ok_or(ShardError::NoCount {
        index_var: "SLURM_ARRAY_TASK_ID",
        count_var: "SLURM_ARRAY_TASK_COUNT",
        hint: "submit with sbatch --array=0-(N-1)",
    })?;
    let n = count("SLURM_ARRAY_TASK_COUNT", n)?;
    let min = num(get, "SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
    let step = num(get, "SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
    let from_min = id.checked_sub(min).filter(|d| d % step == 0);
    let Some(d) = from_min.map(|d| d / step).filter(|d| *d < n) else {
        // The last task's id, saturating (a step of u64::MAX).
        let last = min.saturating_add((n - 1).saturating_mul(step));
        return Err(ShardError::Engine(format!(
            "SLURM_ARRAY_TASK_ID={id} is not one of the SLURM_ARRAY_TASK_COUNT={n} tasks from SLURM_ARRAY_TASK_MIN={min} in steps of {step} (ids {min} to {last}): submit a contiguous array, sbatch --array=0-{}",
            n - 1
        )));
    };
    let s = checked(d + 1, n)?;
    Ok((
        s,
        format!("SLURM_ARRAY_TASK_ID={id} from SLURM_ARRAY_TASK_MIN={min} and SLURM_ARRAY_TASK_COUNT={n}: a Slurm array"),
    ))
}

/// An engine's index outside its count, in the engine's own variables:
/// where the index counts from, and the values it may take.
fn past_count(
    index_var: &str,
    index: u64,
    count_var: &str,
    count: u64,
    from: u64,
    note: &str,
) -> ShardError {
    // count is 1..=MAX_SHARDS here (checked first).
    let last = count - 1 + from;
    ShardError::Engine(format!(
        "{index_var}={index} is not a shard of {count_var}={count}: {index_var} counts from {from}, so it must be {from} to {last}{note}"
    ))
}

/// The cells of each shard (indices into `cells`, in plan order), shard
/// 1 first. Longest predicted wall first, each onto the shard with the
/// least predicted work so far; ties go to a shard that already boots the
/// cell's kernel (one build fewer), then to the lowest shard. Times are
/// compared in whole milliseconds so that no host's float rounding can
/// move a cell.
pub fn split(cells: &[PlannedCell], count: u32) -> Vec<Vec<usize>> {
    let n = count.max(1) as usize;
    let ms = |c: &PlannedCell| (c.predicted_wall_s * 1000.0).round().max(0.0) as u64;
    let mut order: Vec<usize> = (0..cells.len()).collect();
    order.sort_by(|&a, &b| {
        ms(&cells[b])
            .cmp(&ms(&cells[a]))
            .then_with(|| cells[a].id.cmp(&cells[b].id))
    });
    let mut load = vec![0u64; n];
    // One plan, one profile: a kernel here is its cells' axes.
    let mut kernels: Vec<BTreeSet<KernelId<KernelSource, ()>>> = vec![BTreeSet::new(); n];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in order {
        let need = cells[i].cell.kernel(());
        let s = (0..n)
            .min_by_key(|&s| (load[s], !kernels[s].contains(&need), s))
            .unwrap_or(0);
        load[s] += ms(&cells[i]);
        kernels[s].insert(need);
        out[s].push(i);
    }
    for cells in &mut out {
        cells.sort_unstable();
    }
    out
}

impl Plan {
    /// The plan of one shard: its cells only, the kernels they boot, and
    /// its own predicted times (with as many cells at once as the whole
    /// plan's, or fewer when the shard has fewer cells).
    pub fn shard(&self, shard: Shard) -> Plan {
        self.shard_of(&split(&self.cells, shard.count()), shard)
    }

    /// The plan of `shard` from a split already made (`split` of this
    /// plan's cells into `shard.count()`).
    fn shard_of(&self, split: &[Vec<usize>], shard: Shard) -> Plan {
        let mine = &split[shard.index() as usize - 1];
        let cells: Vec<PlannedCell> = mine.iter().map(|&i| self.cells[i].clone()).collect();
        let kernels: BTreeSet<KernelNeed> = cells
            .iter()
            .map(|p| p.cell.kernel(self.kernel_profile))
            .collect();
        let arches: BTreeSet<_> = cells.iter().map(|p| p.cell.arch).collect();
        let concurrency = self.concurrency.min(cells.len()).max(1);
        let durations: Vec<f64> = cells.iter().map(|p| p.predicted_wall_s).collect();
        Plan {
            run_id: self.run_id.clone(),
            provider: self.provider.clone(),
            kernel_profile: self.kernel_profile,
            storage_profile: self.storage_profile,
            slowest_cell_s: durations.iter().cloned().fold(0.0, f64::max),
            serial_s: durations.iter().sum(),
            parallel_s: makespan(durations, concurrency),
            cost: None,
            estimate_after: self.estimate_after,
            kernels: kernels.into_iter().collect(),
            arches: arches.into_iter().collect(),
            concurrency,
            cells,
            shard: Some(shard),
            kernel_builds: None,
        }
    }
}

/// One shard as `plan --shards N` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ShardPlan {
    pub shard: Shard,
    pub cells: Vec<String>,
    pub kernels: usize,
    pub concurrency: usize,
    /// Predicted wall with `concurrency` cells at once (longest first).
    pub predicted_wall_s: f64,
    /// Its cells one after another.
    pub serial_s: f64,
}

/// Every shard of `plan` split `count` ways.
pub fn shard_plans(plan: &Plan, count: u32) -> Result<Vec<ShardPlan>, ShardError> {
    // Before anything is allocated: 4294967295 shards is one line, not 34 GB.
    check_count(count.into())?;
    // One split for every shard (not one per shard: N times the work).
    let split = split(&plan.cells, count);
    (1..=count)
        .map(|k| {
            let p = plan.shard_of(&split, Shard::new(k, count)?);
            Ok(ShardPlan {
                shard: Shard::new(k, count)?,
                cells: p.cells.iter().map(|c| c.id.clone()).collect(),
                kernels: p.kernels.len(),
                concurrency: p.concurrency,
                predicted_wall_s: if p.cells.is_empty() {
                    0.0
                } else {
                    p.parallel_s
                },
                serial_s: p.serial_s,
            })
        })
        .collect()
}

/// `plan --shards N` as text: one line per shard, then each shard's cells.
pub fn render(plan: &Plan, shards: &[ShardPlan]) -> String {
    let hms = crate::plan::hms;
    let mut s = format!(
        "run {} — {} cells in {} shards (longest first; docs/shards.md)\n\n| shard | cells | kernels | at once | predicted wall | cells one after another |\n|---|---:|---:|---:|---:|---:|\n",
        plan.run_id,
        plan.cells.len(),
        shards.len()
    );
    for p in shards {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            p.shard,
            p.cells.len(),
            p.kernels,
            p.concurrency,
            hms(p.predicted_wall_s),
            hms(p.serial_s)
        ));
    }
    let slowest = shards
        .iter()
        .map(|p| p.predicted_wall_s)
        .fold(0.0, f64::max);
    s.push_str(&format!(
        "\npredicted wall: {} with {} shards against {} unsharded ({} at once); kernel builds not counted (each shard builds its own unless its cache has them)\n",
        hms(slowest),
        shards.len(),
        hms(plan.parallel_s),
        plan.concurrency
    ));
    for p in shards {
        s.push_str(&format!("\nshard {}:\n", p.shard));
        for c in &p.cells {
            s.push_str(&format!("  {c}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::Lab;
    use crate::spec::{preset, RawSpec};

    fn plan_of(name: &str) -> Plan {
        let spec = RawSpec::parse(preset(name).unwrap(), name).unwrap();
        let lab = Lab::new(std::env::temp_dir().join("lazyinit-shard-tests-unused"));
        crate::plan(&spec, &lab.provider(), 20_000)
    }

    fn series() -> Plan {
        let text = include_str!("../../../specs/reported-series.toml");
        let spec = RawSpec::parse(text, "reported-series").unwrap();
        let lab = Lab::new(std::env::temp_dir().join("lazyinit-shard-tests-unused"));
        crate::plan(&spec, &lab.provider(), 200_000)
    }

    #[test]
    fn parses_k_of_n_and_refuses_the_rest() {
        assert_eq!("2/4".parse::<Shard>().unwrap(), Shard::new(2, 4).unwrap());
        assert_eq!(" 1 / 1 ".parse::<Shard>().unwrap().to_string(), "1/1");
        assert_eq!("auto".parse::<ShardArg>().unwrap(), ShardArg::Auto);
        for bad in [
            "0/2",
            "3/2",
            "1/0",
            "2",
            "a/b",
            "1/2/3",
            "-1/2",
            "99999999999/1",
        ] {
            let e = bad.parse::<ShardArg>().unwrap_err();
            assert!(
                matches!(
                    e,
                    ShardError::Syntax(_)
                        | ShardError::OutOfRange { .. }
                        | ShardError::TooMany { .. }
                ),
                "{bad}: {e}"
            );
        }
        assert_eq!(
            "3/2".parse::<Shard>().unwrap_err().to_string(),
            "shard 3/2 does not exist: K must be between 1 and N"
        );
    }

    #[test]
    fn every_cell_lands_in_exactly_one_shard() {
        for plan in [plan_of("quick"), plan_of("reported"), series()] {
            for n in 1..=9u32 {
                let parts = split(&plan.cells, n);
                assert_eq!(parts.len(), n as usize);
                let mut all: Vec<usize> = parts.concat();
                all.sort_unstable();
                assert_eq!(all, (0..plan.cells.len()).collect::<Vec<_>>(), "N={n}");
            }
        }
    }

    /// The same plan and N give the same split, whatever order the plan
    /// listed its cells in (another host, another spec key order).
    #[test]
    fn the_split_is_deterministic() {
        let plan = series();
        let ids = |p: &Plan, parts: Vec<Vec<usize>>| -> Vec<BTreeSet<String>> {
            parts
                .into_iter()
                .map(|s| s.into_iter().map(|i| p.cells[i].id.clone()).collect())
                .collect()
        };
        let once = ids(&plan, split(&plan.cells, 3));
        assert_eq!(once, ids(&plan, split(&plan.cells, 3)));
        let mut reversed = plan.clone();
        reversed.cells.reverse();
        assert_eq!(once, ids(&reversed, split(&reversed.cells, 3)));
    }

    /// Longest first: no shard has more work than the least loaded one
    /// plus one cell (the shortest one it took last, at most the longest).
    #[test]
    fn the_split_is_balanced_by_predicted_time() {
        let plan = series();
        let longest = plan.slowest_cell_s;
        for n in 2..=4 {
            let loads: Vec<f64> = split(&plan.cells, n)
                .iter()
                .map(|s| s.iter().map(|&i| plan.cells[i].predicted_wall_s).sum())
                .collect();
            let (lo, hi) = (
                loads.iter().cloned().fold(f64::MAX, f64::min),
                loads.iter().cloned().fold(0.0, f64::max),
            );
            assert!(hi - lo <= longest + 1e-6, "N={n}: {loads:?}");
            // And far better than a split by count would guarantee: the
            // ideal is the total over N, LPT is within 4/3 of it.
            assert!(
                hi <= plan.serial_s / n as f64 * 4.0 / 3.0 + longest,
                "{loads:?}"
            );
        }
        // Two cells of equal length never share a shard while another is empty.
        let q = plan_of("quick");
        assert!(split(&q.cells, 4).iter().all(|s| s.len() == 1));
    }

    /// One long cell and ten short ones: by time, not by count (a split by
    /// count would put 6 cells against 5, 14 s against 6).
    #[test]
    fn one_long_cell_is_worth_ten_short_ones() {
        let base = plan_of("quick").cells[0].clone();
        let cells: Vec<PlannedCell> = (0..11)
            .map(|i| PlannedCell {
                id: format!("c{i:02}"),
                predicted_wall_s: if i == 0 { 10.0 } else { 1.0 },
                ..base.clone()
            })
            .collect();
        let parts = split(&cells, 2);
        let load = |p: &[usize]| p.iter().map(|&i| cells[i].predicted_wall_s).sum::<f64>();
        assert_eq!(
            (load(&parts[0]), load(&parts[1])),
            (10.0, 10.0),
            "{parts:?}"
        );
        assert_eq!(parts[0], vec![0]);
    }

    #[test]
    fn a_shard_plans_only_its_cells_and_their_kernels() {
        let plan = plan_of("quick");
        let a = plan.shard(Shard::new(1, 2).unwrap());
        let b = plan.shard(Shard::new(2, 2).unwrap());
        assert_eq!((a.cells.len(), b.cells.len()), (2, 2));
        assert_eq!((a.kernels.len(), b.kernels.len()), (2, 2));
        for p in [&a, &b] {
            for c in &p.cells {
                assert!(p.kernels.contains(&c.cell.kernel(p.kernel_profile)));
            }
            assert!(p.parallel_s <= plan.parallel_s + 1e-9);
        }
        // More shards than cells: the last ones are empty, and say so.
        let empty = plan.shard(Shard::new(5, 5).unwrap());
        assert!(empty.cells.is_empty() && empty.kernels.is_empty());
        assert_eq!(empty.shard, Some(Shard::new(5, 5).unwrap()));
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn auto_reads_each_engine_and_says_which() {
        let s = |k, n| Shard::new(k, n).unwrap();
        let k8s = from_env(env(&[("JOB_COMPLETION_INDEX", "0"), (COUNT_VAR, "3")])).unwrap();
        assert_eq!(k8s.0, s(1, 3));
        assert!(k8s.1.contains("Kubernetes Indexed Job"), "{}", k8s.1);
        let gitlab = from_env(env(&[("CI_NODE_INDEX", "2"), ("CI_NODE_TOTAL", "2")])).unwrap();
        assert_eq!(gitlab.0, s(2, 2));
        assert!(gitlab.1.contains("GitLab"), "{}", gitlab.1);
        // Slurm: --array=1-4 starts at 1; --array=0-6:2 steps by 2.
        let slurm = |id, min, count, step: Option<&'static str>| {
            let mut v = vec![
                ("SLURM_ARRAY_TASK_ID", id),
                ("SLURM_ARRAY_TASK_MIN", min),
                ("SLURM_ARRAY_TASK_COUNT", count),
            ];
            v.extend(step.map(|s| ("SLURM_ARRAY_TASK_STEP", s)));
            from_env(env(&v))
        };
        assert_eq!(slurm("1", "1", "4", None).unwrap().0, s(1, 4));
        assert_eq!(slurm("4", "1", "4", None).unwrap().0, s(4, 4));
        assert_eq!(slurm("6", "0", "4", Some("2")).unwrap().0, s(4, 4));
        assert!(slurm("5", "1", "4", None).is_err(), "past the count");
        assert!(slurm("3", "0", "4", Some("2")).is_err(), "between steps");
        let own = from_env(env(&[(SHARD_VAR, "3/5"), ("CI_NODE_INDEX", "1")])).unwrap();
        assert_eq!(own, (s(3, 5), "LAZYINIT_SHARD=3/5".to_string()));
    }

    #[test]
    fn auto_without_an_engine_or_a_count_says_what_to_set() {
        assert_eq!(from_env(env(&[])).unwrap_err(), ShardError::NoEngine);
        let e = from_env(env(&[("JOB_COMPLETION_INDEX", "1")])).unwrap_err();
        assert!(e.to_string().contains(COUNT_VAR), "{e}");
        let e = from_env(env(&[("CI_NODE_INDEX", "x"), ("CI_NODE_TOTAL", "2")])).unwrap_err();
        assert!(matches!(
            e,
            ShardError::NotANumber {
                var: "CI_NODE_INDEX",
                ..
            }
        ));
    }

    /// Issue 52: an index past its count names the variables, where the
    /// index counts from and the values it may take (it said `shard 5/4
    /// does not exist`, in neither the engine's numbering nor its names).
    #[test]
    fn an_index_out_of_range_names_its_variables_and_where_it_counts_from() {
        let said = |vars: &[(&str, &str)]| from_env(env(vars)).unwrap_err().to_string();
        for (vars, want) in [
            (
                &[("JOB_COMPLETION_INDEX", "4"), (COUNT_VAR, "4")][..],
                "JOB_COMPLETION_INDEX=4 is not a shard of LAZYINIT_SHARD_COUNT=4: JOB_COMPLETION_INDEX counts from 0, so it must be 0 to 3",
            ),
            (
                &[("JOB_COMPLETION_INDEX", "18446744073709551615"), (COUNT_VAR, "4")][..],
                "JOB_COMPLETION_INDEX=18446744073709551615 is not a shard of LAZYINIT_SHARD_COUNT=4: JOB_COMPLETION_INDEX counts from 0, so it must be 0 to 3",
            ),
            (
                &[("CI_NODE_INDEX", "5"), ("CI_NODE_TOTAL", "4")][..],
                "CI_NODE_INDEX=5 is not a shard of CI_NODE_TOTAL=4: CI_NODE_INDEX counts from 1, so it must be 1 to 4",
            ),
            (
                &[("CI_NODE_INDEX", "0"), ("CI_NODE_TOTAL", "4")][..],
                "CI_NODE_INDEX=0 is not a shard of CI_NODE_TOTAL=4: CI_NODE_INDEX counts from 1, so it must be 1 to 4",
            ),
            (
                &[("SLURM_ARRAY_TASK_ID", "5"), ("SLURM_ARRAY_TASK_MIN", "1"), ("SLURM_ARRAY_TASK_COUNT", "4")][..],
                "SLURM_ARRAY_TASK_ID=5 is not one of the SLURM_ARRAY_TASK_COUNT=4 tasks from SLURM_ARRAY_TASK_MIN=1 in steps of 1 (ids 1 to 4)",
            ),
            (&[(SHARD_VAR, "5/4")][..], "LAZYINIT_SHARD: shard 5/4 does not exist"),
            (&[(COUNT_VAR, "0"), ("JOB_COMPLETION_INDEX", "0")][..], "LAZYINIT_SHARD_COUNT=0: 0 shards"),
            (&[("CI_NODE_INDEX", "1"), ("CI_NODE_TOTAL", "2000")][..], "CI_NODE_TOTAL=2000: 2000 shards: at most 1024"),
            (&[("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_COUNT", "0")][..], "SLURM_ARRAY_TASK_COUNT=0: 0 shards"),
        ] {
            let e = said(vars);
            assert!(e.starts_with(want), "{vars:?}: {e}");
        }
    }

    #[test]
    fn shard_plans_show_each_shard_against_the_whole() {
        let plan = plan_of("reported");
        let shards = shard_plans(&plan, 2).unwrap();
        let text = render(&plan, &shards);
        assert!(text.contains("| 1/2 | 4 |"), "{text}");
        assert!(text.contains("| 2/2 | 4 |"), "{text}");
        assert!(text.contains("\nshard 2/2:\n  qemu-"), "{text}");
        let cells: usize = shards.iter().map(|s| s.cells.len()).sum();
        assert_eq!(cells, 8);
    }

    /// Issue 41: every number from an environment is checked, never
    /// wrapped (JOB_COMPLETION_INDEX at u64::MAX panicked in debug), and a
    /// count past MAX_SHARDS is refused.
    #[test]
    fn extreme_environments_are_refused_not_panics() {
        let max = u64::MAX.to_string();
        let big = u64::from(MAX_SHARDS + 1).to_string();
        for vars in [
            vec![
                ("JOB_COMPLETION_INDEX", max.as_str()),
                (COUNT_VAR, max.as_str()),
            ],
            vec![("JOB_COMPLETION_INDEX", max.as_str()), (COUNT_VAR, "4")],
            vec![("JOB_COMPLETION_INDEX", "0"), (COUNT_VAR, big.as_str())],
            vec![
                ("CI_NODE_INDEX", max.as_str()),
                ("CI_NODE_TOTAL", max.as_str()),
            ],
            vec![("CI_NODE_INDEX", "1"), ("CI_NODE_TOTAL", big.as_str())],
            vec![("CI_NODE_INDEX", "0"), ("CI_NODE_TOTAL", "0")],
            vec![
                ("SLURM_ARRAY_TASK_ID", max.as_str()),
                ("SLURM_ARRAY_TASK_COUNT", max.as_str()),
            ],
            vec![
                ("SLURM_ARRAY_TASK_ID", max.as_str()),
                ("SLURM_ARRAY_TASK_COUNT", max.as_str()),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_STEP", max.as_str()),
            ],
            vec![(SHARD_VAR, "1/4294967295")],
            vec![(SHARD_VAR, "18446744073709551615/18446744073709551615")],
        ] {
            let e = from_env(env(&vars)).unwrap_err();
            assert!(!e.to_string().contains('\n'), "{vars:?}: {e}");
        }
        assert!(from_env(env(&[("CI_NODE_INDEX", "1024"), ("CI_NODE_TOTAL", "1024")])).is_ok());
    }

    /// What an environment said comes back as one line, whatever its
    /// values hold (a newline would print a second `error:` line).
    #[test]
    fn environment_values_are_quoted_onto_one_line() {
        for vars in [
            vec![("JOB_COMPLETION_INDEX", "3\nerror: fake"), (COUNT_VAR, "4")],
            vec![("CI_NODE_INDEX", "\u{1b}[2J1"), ("CI_NODE_TOTAL", "2")],
            vec![(SHARD_VAR, "1/\u{7}4\nerror: fake")],
        ] {
            let e = from_env(env(&vars)).unwrap_err().to_string();
            assert!(!e.chars().any(char::is_control), "{vars:?}: {e:?}");
        }
        // Space around a value (a CRLF file's `\r`) is trimmed, and what
        // the line says of it has no control character either.
        for vars in [
            vec![(SHARD_VAR, "\n2/4\n")],
            vec![("JOB_COMPLETION_INDEX", "1"), (COUNT_VAR, "4\r")],
        ] {
            let (s, said) = from_env(env(&vars)).unwrap();
            assert_eq!(s, Shard::new(2, 4).unwrap(), "{vars:?}");
            assert!(!said.chars().any(char::is_control), "{said:?}");
        }
    }

    #[test]
    fn more_than_max_shards_is_refused_before_the_split() {
        let p = plan_of("quick");
        for n in [0, MAX_SHARDS + 1, 100_000, u32::MAX] {
            let e = shard_plans(&p, n).unwrap_err();
            assert!(e.to_string().contains("at most 1024"), "{n}: {e}");
        }
        assert_eq!(shard_plans(&p, MAX_SHARDS).unwrap().len(), 1024);
    }
}
