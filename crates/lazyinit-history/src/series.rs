//! Series: one cell on one testbed over time. A series is keyed by every
//! field of [`CellKey`] (provider, machine, accel, arch, kernel source,
//! HZ, variant, wait-mult, volume, storage profile, estimated or
//! measured): rows that differ in any of them are never pooled.

use std::collections::{BTreeMap, HashMap};

use lazyinit_core::results::{ResultRow, Status};
use lazyinit_core::stats::summarize;
use lazyinit_report::cells::{CellKey, Metric};
use serde::Serialize;

/// A row as the history holds it: the CSV's columns and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRow {
    pub row: ResultRow,
    pub kernel_build: Option<String>,
    pub kernel_source_identity: Option<String>,
    pub run_key: String,
    pub folder: String,
    /// `started_at` of the run's first row: the run's date.
    pub run_started_at: String,
}

/// One run's value in a series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// The run's identity in the history (`run_id@started_at`).
    pub run_key: String,
    pub run_id: String,
    /// When the run's first row started (RFC 3339, UTC).
    pub date: String,
    /// The run folder as imported (relative to where import ran).
    pub folder: String,
    /// `uname -r` of the kernel (each distinct one, when rows differ).
    pub kernel: String,
    /// The kernel cache build the image came from, when the folder says.
    pub kernel_build: Option<String>,
    /// `sha256:<tarball>` or `tree:<tree and diff hash>`, when the cache's
    /// manifest was there at import.
    pub kernel_identity: Option<String>,
    /// Mean of the run's rows (repetitions) of this cell.
    pub value: f64,
    /// 95% interval: of the mean when n > 1, or an estimate's prediction
    /// interval (`lazyinit_s` of an early stop).
    pub ci_lo: Option<f64>,
    pub ci_hi: Option<f64>,
    pub n: usize,
    /// Distinct sleeps L (ticks) the run's rows measured.
    pub sleep_ticks: Vec<u64>,
    pub estimated: bool,
    /// The conditions the run ran in, as its rows say (`history check`
    /// judges a run against runs of its own conditions, and a loaded
    /// host's run is not a regression): the median of its rows' boot
    /// time (launch to SSH, s; a loaded host boots slowly), the most
    /// cells its rows ran beside (`concurrency`), and the host names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_s: Option<f64>,
    pub concurrency: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// Set when a row of the run did not hold its storage profile (its
    /// first zeroing outside the window after the last attempt: its L is
    /// the host's): the row's line. `history check` does not judge such a
    /// run, and no level is made of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_not_held: Option<String>,
    /// The harness's git commit its rows were measured by (each distinct
    /// one; empty for rows recorded before the `harness_commit` column).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub harness: String,
}

/// A series' id: `qemu/qemu-x86_64/tcg/x86_64/debian-6.1/hz250/fix/64GiB/w10/ebs/measured`,
/// made from its key ([`series_id`]) and stored with its alerts: text a
/// run key or an alert id cannot stand in for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SeriesId(pub String);

lazyinit_core::open_name!(SeriesId);

/// A series and its points, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// Stable, readable, `/`-separated: what `--cell` patterns match.
    pub id: SeriesId,
    /// One line naming every key field.
    pub label: String,
    pub key: CellKey,
    pub metric: Metric,
    pub unit: &'static str,
    pub points: Vec<Point>,
}

/// The id of a key's series, e.g.
/// `qemu/qemu-x86_64/tcg/x86_64/debian-6.1/hz250/fix/64GiB/w10/ebs/measured`.
pub fn series_id(k: &CellKey) -> SeriesId {
    SeriesId(k.series_id())
}

/// `--cell PATTERN`: a glob over series ids (`*x86_64*fix*`), or a plain
/// substring.
#[derive(Debug, Clone)]
pub struct SeriesFilter {
    pattern: glob::Pattern,
}

impl std::str::FromStr for SeriesFilter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let glob = if s.contains(['*', '?', '[']) {
            s.to_string()
        } else {
            format!("*{}*", glob::Pattern::escape(s))
        };
        glob::Pattern::new(&glob)
            .map(|pattern| SeriesFilter { pattern })
            .map_err(|e| format!("--cell `{s}`: {e}; use a glob such as '*x86_64*hz250/fix*'"))
    }
}

impl SeriesFilter {
    pub fn matches(&self, id: &str) -> bool {
        self.pattern.matches(id)
    }
}

/// Every series of `rows` (ok rows with a value of `metric`), in key
/// order, each with one point per run in the order of the runs.
pub fn build(rows: &[StoredRow], metric: Metric, filter: Option<&SeriesFilter>) -> Vec<Series> {
    let mut b = Builder::new(metric);
    for s in rows {
        b.push(s);
    }
    b.finish(filter)
}

/// The series built a row at a time ([`build`] over rows that need not
/// all be in memory at once: `History::series` reads them a page at a
/// time). A run's point keeps what it needs of its rows (the values,
/// kernels, sleeps and its first row's identity), not the rows.
pub struct Builder {
    metric: Metric,
    /// Per key: its runs' points so far in first-seen (= date) order, and
    /// run key -> index (a map, not a search of the runs so far).
    by_key: BTreeMap<CellKey, (Vec<Acc>, HashMap<String, usize>)>,
}

/// A run's point in the making.
struct Acc {
    head: Point,
    values: Vec<f64>,
    kernels: Vec<String>,
    /// A single estimated row's prediction interval of `lazyinit_s`.
    prediction: Option<(f64, f64)>,
    boots: Vec<f64>,
    hosts: Vec<String>,
    harnesses: Vec<String>,
}

impl Builder {
    pub fn new(metric: Metric) -> Self {
        Builder {
            metric,
            by_key: BTreeMap::new(),
        }
    }

    /// Adds one row (ignored unless ok with a value of the metric).
    pub fn push(&mut self, s: &StoredRow) {
        let metric = self.metric;
        if s.row.status != Status::Ok {
            return;
        }
        let Some(value) = metric.of(&s.row) else {
            return;
        };
        let (runs, at) = self.by_key.entry(CellKey::of(&s.row)).or_default();
        let i = match at.get(&s.run_key) {
            Some(&i) => i,
            None => {
                at.insert(s.run_key.clone(), runs.len());
                runs.push(Acc::first(s, metric));
                runs.len() - 1
            }
        };
        let acc = &mut runs[i];
        if acc.values.len() == 1 {
            // A second row: an interval of the mean, not one row's prediction.
            acc.prediction = None;
        }
        acc.values.push(value);
        if let Some(b) = s.row.boot_s {
            acc.boots.push(b);
        }
        acc.head.concurrency = acc.head.concurrency.max(s.row.concurrency);
        if !s.row.host.is_empty() && !acc.hosts.contains(&s.row.host) {
            acc.hosts.push(s.row.host.clone());
        }
        let commit = &s.row.harness_commit;
        if !commit.is_empty() && !acc.harnesses.contains(commit) {
            acc.harnesses.push(commit.clone());
        }
        if !acc.kernels.contains(&s.row.kernel_release) {
            acc.kernels.push(s.row.kernel_release.clone());
        }
        if acc.head.profile_not_held.is_none() {
            acc.head.profile_not_held = lazyinit_report::cells::profile_line(&s.row);
        }
        if let Some(l) = s.row.measured.sleep_ticks {
            if !acc.head.sleep_ticks.contains(&l) {
                acc.head.sleep_ticks.push(l);
            }
        }
    }

    /// The series, in key order, those `filter` matches.
    pub fn finish(self, filter: Option<&SeriesFilter>) -> Vec<Series> {
        let metric = self.metric;
        self.by_key
            .into_iter()
            .map(|(key, (runs, _))| Series {
                id: series_id(&key),
                label: key.label(),
                metric,
                unit: metric.unit(),
                points: runs.into_iter().map(Acc::point).collect(),
                key,
            })
            .filter(|s| filter.is_none_or(|f| f.matches(s.id.as_str())))
            .collect()
    }
}

impl Acc {
    fn first(first: &StoredRow, metric: Metric) -> Acc {
        let prediction = match metric {
            Metric::LazyinitS if first.row.measured.estimated => first
                .row
                .measured
                .lazyinit_lo_s
                .zip(first.row.measured.lazyinit_hi_s),
            _ => None,
        };
        Acc {
            head: Point {
                run_key: first.run_key.clone(),
                run_id: first.row.run_id.clone(),
                date: first.run_started_at.clone(),
                folder: first.folder.clone(),
                kernel: String::new(),
                kernel_build: first.kernel_build.clone(),
                kernel_identity: first.kernel_source_identity.clone(),
                value: 0.0,
                ci_lo: None,
                ci_hi: None,
                n: 0,
                sleep_ticks: Vec::new(),
                estimated: first.row.measured.estimated,
                boot_s: None,
                concurrency: 0,
                host: String::new(),
                profile_not_held: None,
                harness: String::new(),
            },
            values: Vec::new(),
            kernels: Vec::new(),
            prediction,
            boots: Vec::new(),
            hosts: Vec::new(),
            harnesses: Vec::new(),
        }
    }

    fn point(self) -> Point {
        let mut p = self.head;
        let summary = summarize(&self.values).expect("rows with the metric");
        let ci = summary.ci95.map(|i| (i.lo, i.hi)).or(self.prediction);
        p.kernel = distinct(self.kernels.into_iter()).join(" ");
        p.host = distinct(self.hosts.into_iter()).join(" ");
        p.harness = distinct(self.harnesses.into_iter()).join(" ");
        let mut boots = self.boots;
        p.boot_s = (!boots.is_empty()).then(|| {
            boots.sort_by(f64::total_cmp);
            let n = boots.len();
            if n % 2 == 1 {
                boots[n / 2]
            } else {
                (boots[n / 2 - 1] + boots[n / 2]) / 2.0
            }
        });
        p.sleep_ticks.sort_unstable();
        p.value = summary.mean;
        p.ci_lo = ci.map(|c| c.0);
        p.ci_hi = ci.map(|c| c.1);
        p.n = summary.n;
        p
    }
}

fn distinct<T: Ord + Clone>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    v.sort();
    v.dedup();
    v
}
