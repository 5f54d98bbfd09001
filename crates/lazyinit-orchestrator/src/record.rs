//! What a shard's results folder says of itself (`shard.toml`), written by
//! the runner and read by `merge`: which shard of which spec, by which
//! harness, its cells, and the hosts that ran it.

use std::path::Path;

use lazyinit_core::{exit, RunFile, RunFolder, RunWriter};
use serde::{Deserialize, Serialize};

use crate::error::RunError;
use crate::plan::Plan;
use crate::shard::Shard;

/// The host the harness runs on, as a merged run keeps it per shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct HostFacts {
    pub hostname: String,
    /// `uname -r` of the host.
    pub kernel: String,
    pub cpus: usize,
    pub memory_mib: u64,
    /// Whether `/dev/kvm` is there (guests under KVM, else TCG).
    pub kvm: bool,
}

impl HostFacts {
    pub fn here() -> HostFacts {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let memory_mib = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb / 1024);
        HostFacts {
            hostname: hostname(),
            kernel: read("/proc/sys/kernel/osrelease"),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_mib,
            kvm: Path::new("/dev/kvm").exists(),
        }
    }
}

/// This host's name, as every row's `host` column says it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `shard.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ShardRecord {
    pub shard: Shard,
    pub run_id: String,
    pub spec_hash: String,
    pub harness_version: String,
    /// The harness's git commit ([`lazyinit_core::harness_commit`]) of
    /// the last run into the folder; empty in a record written before it.
    #[serde(default)]
    pub harness_commit: String,
    /// How the last run into the folder chose the shard (`--shard K/N`,
    /// or the engine's variables for `--shard auto`).
    pub chosen_by: String,
    /// The cells of this shard, as the split gave them.
    pub cells: Vec<String>,
    /// Every host that ran into this folder (a shard resumed elsewhere
    /// has two).
    #[serde(default)]
    pub hosts: Vec<HostFacts>,
}

impl ShardRecord {
    pub fn read(path: &RunFile) -> Result<Option<ShardRecord>, String> {
        let text = match path.read_to_string() {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        toml::from_str(&text).map(Some).map_err(|e| {
            format!(
                "{} does not read as a shard record ({})",
                path.display(),
                exit::one_line_text(e.message())
            )
        })
    }
}

/// A resume continues the shard the folder holds, and only it: a folder
/// of shard 1/2 does not take shard 2/2's rows, nor an unsharded run's
/// (bad input, before anything is written).
pub(crate) fn check_same_shard(folder: &RunFolder, plan: &Plan) -> Result<(), RunError> {
    let other = |m: String| RunError::OtherSpec(folder.root().to_path_buf(), exit::bad_input(m));
    let there = ShardRecord::read(&folder.shard_toml()).map_err(&other)?;
    // Rows, not the file: a shard killed between creating `results.csv`
    // and writing `shard.toml` left a header only.
    let has_rows = folder
        .results_csv()
        .whole_rows()
        .is_ok_and(|rows| !rows.is_empty());
    match (there.map(|r| r.shard), plan.shard) {
        (Some(a), Some(b)) if a != b => Err(other(format!(
            "it holds shard {a} and this run is shard {b}: rerun with --shard {a} to resume it, or give this shard its own --out"
        ))),
        (Some(a), None) => Err(other(format!(
            "it holds shard {a}: rerun with --shard {a} to resume it, or give the whole run another --out"
        ))),
        (None, Some(b)) if has_rows => Err(other(format!(
            "it holds a run that was not split: give shard {b} its own --out"
        ))),
        _ => Ok(()),
    }
}

/// Writes `shard.toml` for a sharded plan (nothing for a whole one),
/// adding this host to those that ran into the folder.
pub(crate) fn write_shard_record(
    run: &RunWriter,
    plan: &Plan,
    spec_hash: &str,
    chosen_by: &str,
) -> Result<(), RunError> {
    let Some(shard) = plan.shard else {
        return Ok(());
    };
    let path = run.folder().shard_toml();
    let mut hosts = ShardRecord::read(&path)
        .ok()
        .flatten()
        .map(|r| r.hosts)
        .unwrap_or_default();
    let here = HostFacts::here();
    hosts.retain(|h| h.hostname != here.hostname);
    hosts.push(here);
    let record = ShardRecord {
        shard,
        run_id: plan.run_id.clone(),
        spec_hash: spec_hash.to_string(),
        harness_version: lazyinit_core::HARNESS_VERSION.to_string(),
        harness_commit: lazyinit_core::harness_commit().to_string(),
        chosen_by: chosen_by.to_string(),
        cells: plan.cells.iter().map(|c| c.id.clone()).collect(),
        hosts,
    };
    let text = toml::to_string_pretty(&record).unwrap_or_default();
    run.put(RunFolder::SHARD_TOML, text)
        .map_err(|e| RunError::Write(e.path, e.source))
}
