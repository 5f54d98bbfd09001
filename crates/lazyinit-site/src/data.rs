//! What the site is made from: plain serde structs, so a site can be
//! published from the history database or from a JSON file alike.

use serde::{Deserialize, Serialize};

/// Everything one publication shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteData {
    pub title: String,
    /// When the data was read (RFC 3339).
    pub generated_at: String,
    /// The metric every series holds, e.g. `lazyinit_s`, and its unit.
    pub metric: String,
    pub unit: String,
    pub series: Vec<SeriesData>,
    pub alerts: Vec<AlertData>,
    /// The latest full run's table, when the history has one.
    pub latest: Option<LatestTable>,
}

/// The largest value (either way) a site plots: the results' longest time
/// in milliseconds (`lazyinit_core::results::MAX_TIME_S`). Beyond it the plot's
/// range overflows and drawing its axis never ends.
pub const MAX_VALUE: f64 = lazyinit_core::results::MAX_TIME_S * 1e3;

impl SiteData {
    /// Every number the pages draw or print is finite and within
    /// [`MAX_VALUE`]: the first that is not, as one line naming where.
    pub fn check(&self) -> Result<(), String> {
        let bad = |what: String, x: f64| -> Result<(), String> {
            match x.is_finite() && x.abs() <= MAX_VALUE {
                true => Ok(()),
                false => Err(format!(
                    "{what}: {x:e} is not a value a site can show (finite, at most {MAX_VALUE:e} either way)"
                )),
            }
        };
        for s in &self.series {
            for p in &s.points {
                let at = || format!("series {:?}, run {:?}", s.id, p.run_id);
                bad(format!("{}: value", at()), p.value)?;
                if let Some((lo, hi)) = p.ci {
                    bad(format!("{}: ci", at()), lo)?;
                    bad(format!("{}: ci", at()), hi)?;
                }
            }
            for c in &s.changes {
                let at = format!("series {:?}, change at {}", s.id, c.index);
                bad(format!("{at}: mean before"), c.before.mean)?;
                bad(format!("{at}: mean after"), c.after.mean)?;
                bad(format!("{at}: change_pct"), c.change_pct)?;
                bad(format!("{at}: p"), c.p)?;
            }
        }
        for c in self.latest.iter().flat_map(|t| &t.cells) {
            let at = format!("latest cell {:?} {:?} {:?}", c.volume, c.variant, c.column);
            bad(format!("{at}: mean"), c.mean)?;
            bad(format!("{at}: model"), c.model)?;
            if let Some((lo, hi)) = c.ci {
                bad(format!("{at}: ci"), lo)?;
                bad(format!("{at}: ci"), hi)?;
            }
            if let Some(r) = c.reported {
                bad(format!("{at}: reported"), r)?;
            }
        }
        Ok(())
    }
}

/// One cell on one testbed over time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesData {
    /// Stable and unique, `/`-separated: the page's name is made from it.
    pub id: String,
    /// One line naming every key field.
    pub label: String,
    pub estimated: bool,
    /// Oldest first.
    pub points: Vec<PointData>,
    pub changes: Vec<ChangeData>,
}

/// One run's value of a series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointData {
    pub run_id: String,
    /// RFC 3339; the plot shows its date.
    pub date: String,
    pub kernel: String,
    pub value: f64,
    /// The 95% interval: of the mean (n > 1) or an estimate's PI.
    pub ci: Option<(f64, f64)>,
    pub n: usize,
    /// Distinct sleeps L (ticks) the run measured.
    pub sleep_ticks: Vec<u64>,
    pub estimated: bool,
    /// Where the run's folder or report is, relative to the site or
    /// absolute (`None`: not linked).
    pub link: Option<String>,
    /// The harness's git commit that measured the run (`-dirty` when its
    /// tree had changes; empty when its rows did not record it).
    #[serde(default)]
    pub harness: String,
}

/// A change point in a series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeData {
    /// The first point after the change.
    pub index: usize,
    pub before: SideData,
    pub after: SideData,
    pub change_pct: f64,
    pub p: f64,
    /// The alert it raised and its state, if any.
    pub alert: Option<String>,
    pub state: Option<String>,
    /// The commits it lies in, when both kernels came from a git tree.
    #[serde(default)]
    pub commits: Option<CommitsData>,
}

/// The commits between the runs on either side of a change, and the
/// commands that read and bisect them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitsData {
    pub good: String,
    pub bad: String,
    pub log: String,
    pub bisect: String,
}

/// One side of a change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideData {
    pub mean: f64,
    pub runs: usize,
    pub sleep_ticks: Vec<u64>,
    pub kernels: Vec<String>,
    /// The run next to the change on this side, with its kernel identity
    /// (a git tree's hash: the commit range lies between the two).
    pub run: String,
    pub kernel: String,
    pub kernel_identity: Option<String>,
}

/// An alert as the history keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertData {
    pub id: String,
    pub series: String,
    pub run: String,
    pub kind: String,
    /// new, acknowledged or invalid: only `new` is open.
    pub state: String,
    pub note: Option<String>,
    pub created_at: String,
}

impl AlertData {
    pub fn is_open(&self) -> bool {
        self.state == "new"
    }
}

/// The latest full run in the reported table's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatestTable {
    pub run: String,
    pub date: String,
    pub link: Option<String>,
    pub cells: Vec<LatestCell>,
}

/// One cell of the latest table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatestCell {
    /// The table's row (`2TiB`, `without fix`) and column (`arm64, HZ 100`).
    pub volume: String,
    pub variant: String,
    pub column: String,
    pub mean: f64,
    pub ci: Option<(f64, f64)>,
    pub n: usize,
    pub model: f64,
    pub reported: Option<f64>,
    pub sleep_ticks: Vec<u64>,
    /// The series of this cell, to link to its page.
    pub series: Option<String>,
}
