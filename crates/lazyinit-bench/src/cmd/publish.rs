//! `history publish`: the history as a static site (docs/dashboard.md).
//! Reads the database, builds the site's input ([`lazyinit_site::SiteData`])
//! and hands it to lazyinit-site; `--data` publishes from that input saved
//! as JSON instead (`--save-data` writes it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::Args;
use lazyinit_core::exit::{self, bad_input};
use lazyinit_core::output::{self, Reads};
use lazyinit_core::{ByteSize, Variant};
use lazyinit_history::names::series_id;
use lazyinit_history::series::StoredRow;
use lazyinit_history::{Alert, Change, ChangeOptions, History, Series};
use lazyinit_report::cells::Metric;
use lazyinit_report::render::Labeller;
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
    let rows = h.stored_rows()?;
    let series = lazyinit_history::names::build(&rows, a.metric, None);
    let mut changes = lazyinit_history::changes::find(&series, &ChangeOptions::default());
    // Each change's alert is raised (as `changes` does), so the id a page
    // shows is one `history ack` finds, and its state is the database's.
    h.raise(&changes)?;
    let alerts = h.alerts()?;
    for c in &mut changes {
        c.attach(&alerts);
    }
    let out_dir = absolute(a.out.parent().unwrap_or(Path::new(".")))?
        .join(a.out.file_name().unwrap_or_default());
    Ok(site_data(&Inputs {
        title: &a.title,
        metric: a.metric,
        rows: &rows,
        series: &series,
        changes: &changes,
        alerts: &alerts,
        links: &Links { site: out_dir },
    }))
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    let p = if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    };
    std::path::absolute(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
}

/// Links from pages of the site (the index and series pages sit one
/// folder apart: each link is made for the page it is on).
pub struct Links {
    pub site: PathBuf,
}

impl Links {
    /// A run folder as imported (relative to where import ran, which is
    /// taken to be here), linked to its report.md when it has one.
    fn run(&self, folder: &str, depth: usize) -> Option<String> {
        if folder.is_empty() {
            return None;
        }
        let abs = std::path::absolute(folder).ok()?;
        let report = lazyinit_core::RunFolder::new(&abs).file(lazyinit_core::RunFolder::REPORT_MD);
        let target = match report.is_file() {
            true => report.shown(),
            false => abs,
        };
        let mut from = self.site.clone();
        for _ in 0..depth {
            from = from.join("series");
        }
        pathdiff::diff_paths(&target, &from).map(|p| p.to_string_lossy().into_owned())
    }
}

pub struct Inputs<'a> {
    pub title: &'a str,
    pub metric: Metric,
    pub rows: &'a [StoredRow],
    pub series: &'a [Series],
    pub changes: &'a [Change],
    pub alerts: &'a [Alert],
    pub links: &'a Links,
}

/// The site's input from the history (pure but for the file checks of
/// links).
pub fn site_data(i: &Inputs) -> site::SiteData {
    let mut by_series: BTreeMap<&str, Vec<&Change>> = BTreeMap::new();
    for c in i.changes {
        by_series.entry(c.series.as_str()).or_default().push(c);
    }
    let series = i
        .series
        .iter()
        .map(|s| {
            series_data(
                s,
                by_series.get(s.id.as_str()).map_or(&[][..], Vec::as_slice),
                i.links,
            )
        })
        .collect();
    site::SiteData {
        title: i.title.to_string(),
        generated_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        metric: i.metric.name().into(),
        unit: i.metric.unit().into(),
        series,
        alerts: i.alerts.iter().map(alert_data).collect(),
        latest: latest(i.rows, i.metric, i.links),
    }
}

fn series_data(s: &Series, changes: &[&Change], links: &Links) -> site::SeriesData {
    let points = s
        .points
        .iter()
        .map(|p| site::PointData {
            run_id: p.run_id.clone(),
            date: p.date.clone(),
            kernel: p.kernel.clone(),
            value: p.value,
            ci: p.ci_lo.zip(p.ci_hi),
            n: p.n,
            sleep_ticks: p.sleep_ticks.clone(),
            estimated: p.estimated,
            link: links.run(&p.folder, 1),
            harness: p.harness.clone(),
        })
        .collect();
    site::SeriesData {
        id: s.id.to_string(),
        label: s.label.clone(),
        estimated: s.key.estimated,
        points,
        changes: changes.iter().map(|c| change_data(c)).collect(),
    }
}

fn change_data(c: &Change) -> site::ChangeData {
    let side =
        |seg: &lazyinit_history::Segment, run: &lazyinit_history::changes::RunRef| site::SideData {
            mean: seg.mean,
            runs: seg.runs,
            sleep_ticks: seg.sleep_ticks.clone(),
            kernels: seg.kernels.clone(),
            run: run.run_key.clone(),
            kernel: run.kernel.clone(),
            kernel_identity: run.kernel_identity.clone(),
        };
    site::ChangeData {
        index: c.index,
        before: side(&c.before, &c.last_run_before),
        after: side(&c.after, &c.first_run),
        change_pct: c.change_pct,
        p: c.p,
        alert: Some(c.alert_id.to_string()),
        state: c.alert.as_ref().map(|a| a.state.as_str().to_string()),
        commits: c.commits.as_ref().map(|r| site::CommitsData {
            good: r.good.clone(),
            bad: r.bad.clone(),
            log: r.log.clone(),
            bisect: r.bisect.clone(),
        }),
    }
}

fn alert_data(a: &Alert) -> site::AlertData {
    site::AlertData {
        id: a.alert_id.to_string(),
        series: a.series.to_string(),
        run: a.run_key.clone(),
        kind: a.kind.as_str().into(),
        state: a.state.as_str().into(),
        note: a.note.clone(),
        created_at: a.created_at.clone(),
    }
}

/// The latest run that measured the most of the reported table's
/// configurations (arch x variant x size), in the table's shape.
fn latest(rows: &[StoredRow], metric: Metric, links: &Links) -> Option<site::LatestTable> {
    let mut runs: BTreeMap<&str, (String, BTreeSet<String>)> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| !r.row.measured.estimated && metric.of(&r.row).is_some())
    {
        let e = runs
            .entry(r.run_key.as_str())
            .or_insert_with(|| (r.run_started_at.clone(), BTreeSet::new()));
        e.1.insert(format!(
            "{} {} {}",
            r.row.axes.arch, r.row.axes.variant, r.row.axes.volume.0
        ));
    }
    let (key, (date, _)) = runs
        .into_iter()
        .max_by(|a, b| (a.1 .1.len(), &a.1 .0).cmp(&(b.1 .1.len(), &b.1 .0)))?;
    let picked: Vec<&StoredRow> = rows.iter().filter(|r| r.run_key == key).collect();
    let plain: Vec<_> = picked.iter().map(|r| r.row.clone()).collect();
    let report = lazyinit_report::build(&plain, metric);
    let lab = Labeller::new(report.cells.iter().map(|c| &c.key));
    // The reported table's row order: by volume, no fix first.
    let mut sorted: Vec<_> = report.cells.iter().collect();
    sorted.sort_by_key(|c| (c.key.axes.volume.0, c.key.axes.variant == Variant::Fix));
    let cells = sorted
        .into_iter()
        .filter_map(|c| {
            let s = c.summary.as_ref()?;
            Some(site::LatestCell {
                volume: ByteSize(c.key.axes.volume.0).to_string(),
                variant: if c.key.axes.variant == Variant::Fix {
                    "with fix"
                } else {
                    "without fix"
                }
                .into(),
                column: lab.column(&c.key),
                mean: s.mean,
                ci: s.ci95.map(|i| (i.lo, i.hi)),
                n: s.n,
                model: c.model.value,
                reported: c.reported.as_ref().map(|r| r.value),
                sleep_ticks: c.sleep_ticks.clone(),
                series: Some(
                    series_id(
                        &c.key,
                        lazyinit_history::names::tree_of(picked.iter().map(|r| &r.row), &c.key),
                    )
                    .to_string(),
                ),
            })
        })
        .collect();
    Some(site::LatestTable {
        run: picked[0].row.run_id.clone(),
        date,
        link: links.run(&picked[0].folder, 0),
        cells,
    })
}
