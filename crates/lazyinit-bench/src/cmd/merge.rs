//! `lazyinit-bench merge`: one run folder of a run's shard folders.

use std::path::PathBuf;
use std::time::Instant;

use lazyinit_core::exit;

use super::providers::Configs;

#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// The shards' results folders (`run SPEC --shard K/N --out ...`).
    #[arg(required = true, value_name = "SHARD_FOLDER")]
    pub shards: Vec<PathBuf>,
    /// The merged run folder (made at once when complete; an earlier merge
    /// there is replaced, anything else is refused).
    #[arg(long)]
    pub out: PathBuf,
    /// Merge although some of the plan's cells have no ok row in any shard;
    /// they are listed in the merged folder's merge.toml.
    #[arg(long)]
    pub allow_missing: bool,
}

pub async fn run(a: MergeArgs) -> anyhow::Result<u8> {
    let started = Instant::now();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let m = lazyinit_orchestrator::merge::merge::<Configs>(
        &a.shards,
        &a.out,
        a.allow_missing,
        &command,
    )?;
    let r = &m.record;
    let missing = match r.missing.len() {
        0 => String::new(),
        n => format!(
            "; {n} cells missing, listed in {}",
            lazyinit_core::RunFolder::new(&m.out).merge_toml().display()
        ),
    };
    let replaced = if m.replaced {
        " (replacing the earlier merge)"
    } else {
        ""
    };
    eprintln!(
        "merged {} of {} shards of {} into {}{replaced}: {} rows, {} cells ok{missing}; {:.2} s",
        r.shards.len(),
        r.shard_count,
        r.run_id,
        m.out.display(),
        m.rows,
        m.cells_ok,
        started.elapsed().as_secs_f64()
    );
    Ok(exit::OK)
}
