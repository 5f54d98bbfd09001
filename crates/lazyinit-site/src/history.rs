//! The site's input from the history database ([`from_history`]): each
//! series with its points and changes, the alerts, and the front page's
//! table of the latest full run (`latest`: the run that measured the most
//! of the reported table's configurations, the latest of those).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use lazyinit_core::{ByteSize, Variant};
use lazyinit_history::names::series_id;
use lazyinit_history::series::StoredRow;
use lazyinit_history::{Alert, Change, ChangeOptions, History, Series};
use lazyinit_report::cells::Metric;
use lazyinit_report::render::Labeller;

use crate as site;

/// The site's input from the history `h`, for a site published to `out`
/// (its links to run folders are made relative to it). Each change's
/// alert is raised (as `history changes` does), so the id a page shows is
/// one `history ack` finds, and its state is the database's.
pub fn from_history(
    h: &mut History,
    title: &str,
    metric: Metric,
    out: &Path,
) -> anyhow::Result<site::SiteData> {
    let rows = h.stored_rows()?;
    let series = lazyinit_history::names::build(&rows, metric, None);
    let mut changes = lazyinit_history::changes::find(&series, &ChangeOptions::default());
    h.raise(&changes)?;
    let alerts = h.alerts()?;
    for c in &mut changes {
        c.attach(&alerts);
    }
    let out_dir =
        absolute(out.parent().unwrap_or(Path::new(".")))?.join(out.file_name().unwrap_or_default());
    Ok(site_data(&Inputs {
        title,
        metric,
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

#[cfg(test)]
mod tests {
    use super::*;
    use lazyinit_history::generate;
    use lazyinit_history::RunImport;

    /// The rows of generated runs as the history hands them back, each
    /// run in the folder `runs/<run id>`.
    fn stored(runs: &[RunImport]) -> Vec<StoredRow> {
        runs.iter()
            .flat_map(|r| {
                let key = lazyinit_history::import::run_key(&r.rows).unwrap();
                r.rows.iter().map(move |row| StoredRow {
                    row: row.clone(),
                    kernel_build: None,
                    kernel_source_identity: None,
                    run_key: key.clone(),
                    folder: format!("runs/{}", row.run_id),
                    run_started_at: r.rows[0].started_at.clone(),
                })
            })
            .collect()
    }

    fn links() -> Links {
        Links {
            site: PathBuf::from("/nowhere/site"),
        }
    }

    #[test]
    fn the_front_page_shows_the_latest_run_of_the_most_configurations() {
        let runs = generate::history(4, 7);
        let mut rows = stored(&runs);
        // The newest run measured only two of the eight configurations,
        // and the one before it lost one to an estimate: the front page
        // shows the run before those, which measured all eight.
        let newest = runs[3].rows[0].run_id.clone();
        let mut kept = 0;
        rows.retain(|r| {
            if r.row.run_id != newest {
                return true;
            }
            kept += 1;
            kept <= 2
        });
        let third = runs[2].rows[0].run_id.clone();
        rows.iter_mut()
            .find(|r| r.row.run_id == third)
            .unwrap()
            .row
            .measured
            .estimated = true;
        let t = latest(&rows, Metric::LazyinitS, &links()).expect("a table");
        assert_eq!(t.run, runs[1].rows[0].run_id);
        assert_eq!(t.date, runs[1].rows[0].started_at);
        assert_eq!(t.cells.len(), 8);
        // The reported table's order: by volume, without the fix first.
        let order: Vec<(String, String)> = t
            .cells
            .iter()
            .map(|c| (c.volume.clone(), c.variant.clone()))
            .collect();
        assert_eq!(order[0], ("2TiB".into(), "without fix".into()));
        assert_eq!(order[7], ("3TiB".into(), "with fix".into()));
        // Of two runs that measured as much, the later.
        let all = stored(&runs[..3]);
        let t = latest(&all, Metric::LazyinitS, &links()).unwrap();
        assert_eq!(t.run, runs[2].rows[0].run_id);
        assert!(latest(&[], Metric::LazyinitS, &links()).is_none());
    }

    #[test]
    fn a_run_is_linked_to_its_report_from_the_page_it_is_on() {
        let d = tempfile::tempdir().unwrap();
        let run = d.path().join("results/night-1");
        std::fs::create_dir_all(&run).unwrap();
        let links = Links {
            site: d.path().join("site"),
        };
        let folder = run.display().to_string();
        // No report.md: the folder itself.
        assert_eq!(links.run(&folder, 0).as_deref(), Some("../results/night-1"));
        std::fs::write(run.join("report.md"), "# r\n").unwrap();
        assert_eq!(
            links.run(&folder, 0).as_deref(),
            Some("../results/night-1/report.md")
        );
        // A series page sits one folder down.
        assert_eq!(
            links.run(&folder, 1).as_deref(),
            Some("../../results/night-1/report.md")
        );
        assert_eq!(links.run("", 0), None);
    }

    #[test]
    fn every_series_point_change_and_alert_is_carried_to_the_site() {
        let runs = generate::history(40, 3);
        let rows = stored(&runs);
        let series = lazyinit_history::names::build(&rows, Metric::LazyinitS, None);
        let changes = lazyinit_history::changes::find(&series, &ChangeOptions::default());
        assert!(!changes.is_empty(), "the generated history plants changes");
        let d = site_data(&Inputs {
            title: "t",
            metric: Metric::LazyinitS,
            rows: &rows,
            series: &series,
            changes: &changes,
            alerts: &[],
            links: &links(),
        });
        assert_eq!((d.title.as_str(), d.metric.as_str()), ("t", "lazyinit_s"));
        assert_eq!(d.series.len(), series.len());
        for (s, h) in d.series.iter().zip(&series) {
            assert_eq!(s.id, h.id.to_string());
            assert_eq!(s.points.len(), h.points.len());
            let theirs = changes.iter().filter(|c| c.series == h.id).count();
            assert_eq!(s.changes.len(), theirs, "{}", s.id);
        }
        let c = d.series.iter().flat_map(|s| &s.changes).next().unwrap();
        assert!(c.alert.as_deref().is_some_and(|a| a.len() == 8), "{c:?}");
        assert_eq!(d.latest.unwrap().run, runs[39].rows[0].run_id);
    }
}
