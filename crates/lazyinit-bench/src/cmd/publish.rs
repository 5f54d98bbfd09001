//! `history publish`: the history as a static site (docs/dashboard.md).
//! Reads the database into the site's input ([`lazyinit_site::SiteData`],
//! by `lazyinit_site::history`) and hands it to lazyinit-site; `--data`
//! publishes from that input saved as JSON instead (`--save-data` writes
//! it).

use std::path::PathBuf;

use clap::Args;
use lazyinit_core::exit::{self, bad_input};
use lazyinit_core::output::{self, Reads};
use lazyinit_history::History;
use lazyinit_report::cells::Metric;
use lazyinit_site as site;

use super::history::DbArg;

#[derive(Args)]
pub struct PublishArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The site's folder: created, or replaced if a site was published
    /// there before; any other non-empty folder is refused.
    #[arg(long)]
    pub out: PathBuf,
    /// from_first_group_s (the default of every `history` command: the
    /// part the random start delay does not move), lazyinit_s (the one the
    /// 2021 report and the model give) or ms_per_group.
    #[arg(long, default_value = "from_first_group_s", value_parser = clap::value_parser!(Metric))]
    pub metric: Metric,
    #[arg(long, default_value = "ext4 lazy init: nightly history")]
    pub title: String,
    /// Publish from this SiteData JSON instead of the database.
    #[arg(long, conflicts_with = "db")]
    pub data: Option<PathBuf>,
    /// Also write the SiteData read from the database to this JSON file.
    #[arg(long)]
    pub save_data: Option<PathBuf>,
}

pub fn publish(a: PublishArgs) -> anyhow::Result<u8> {
    let t = std::time::Instant::now();
    // Both outputs are checked before the history is read (reading it
    // raises alerts): never the database, the --data file, each other.
    let reads = match &a.data {
        Some(p) => Reads::new().file(p),
        None => super::history::db_reads(&a.db.url()?, Reads::new()),
    };
    // The data file inside the site: the site is replaced whole, so the
    // file would go with the old site (issue 52: it was refused as "a
    // folder this command reads", which said neither).
    if let Some(p) = &a.save_data {
        let (file, site) = (output::canonical(p), output::canonical(&a.out));
        if file.starts_with(&site) {
            return Err(bad_input(format!(
                "--save-data {}: inside the site folder --out {}, which publish replaces whole: \
                 the data file would be removed with the old site; give a path outside --out",
                p.display(),
                a.out.display()
            ))
            .into());
        }
    }
    let save = match &a.save_data {
        Some(p) => Some(super::report::open_file(
            "save-data",
            p,
            &reads.clone().tree(&a.out),
        )?),
        None => None,
    };
    let site_reads = match &a.save_data {
        Some(p) => reads.clone().file(p),
        None => reads.clone(),
    };
    site::check_out(&a.out, &site_reads)?;
    let data = match &a.data {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| bad_input(format!("--data {}: {e}", p.display())))?;
            serde_json::from_str(&text).map_err(|e| {
                bad_input(format!(
                    "--data {}: not SiteData JSON ({e}); write one with --save-data",
                    p.display()
                ))
            })?
        }
        None => from_history(&a)?,
    };
    if let Some(f) = save {
        f.finish(serde_json::to_string_pretty(&data)?.as_bytes())?;
    }
    let done = site::publish(&data, &a.out, &site_reads)?;
    eprintln!(
        "published {} series, {} alerts to {}: {} files, {} bytes, {:.2} s",
        data.series.len(),
        data.alerts.len(),
        a.out.display(),
        done.files,
        done.bytes,
        t.elapsed().as_secs_f64()
    );
    Ok(exit::OK)
}

fn from_history(a: &PublishArgs) -> anyhow::Result<site::SiteData> {
    let url = a.db.url()?;
    let mut h = History::open_as(&url, lazyinit_history::Access::Read)?;
    site::history::from_history(&mut h, &a.title, a.metric, &a.out)
}
