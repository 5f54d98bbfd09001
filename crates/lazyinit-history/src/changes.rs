//! Change points over the history's series, and the alerts they raise.

use lazyinit_core::identity::Metric;
use serde::Serialize;

use crate::backend::Row;
use crate::edivisive::{self, Split};
use crate::series::{Point, Series, SeriesId};
use crate::HistoryError;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChangeOptions {
    pub edivisive: edivisive::Options,
    /// `history check`: the level at which one new run off the level of
    /// the runs since the latest change fails (a t prediction interval;
    /// looser than a change point's, as a single value carries less).
    pub run_p: f64,
    /// `history check`: the smallest step of one run off its level that
    /// fails on time, as a fraction of the level (a smaller one is left to
    /// the change points, 3 runs on; an L change fails at any time).
    pub run_min_magnitude: f64,
    /// `history check`: the smallest step of one run off its level that
    /// fails on time, in units of the level's robust noise (1.4826 x MAD).
    pub run_min_effect: f64,
}

impl Default for ChangeOptions {
    fn default() -> Self {
        ChangeOptions {
            edivisive: edivisive::Options::default(),
            run_p: 0.01,
            run_min_magnitude: 0.015,
            run_min_effect: 3.0,
        }
    }
}

/// What raised an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    /// A change point E-Divisive found in the series.
    Change,
    /// `history check`: the newest run is off its level, before a change
    /// point can show it.
    NewRun,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Change => "change",
            ChangeKind::NewRun => "new-run",
        }
    }
}

impl std::str::FromStr for ChangeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "change" => Ok(ChangeKind::Change),
            "new-run" => Ok(ChangeKind::NewRun),
            _ => Err(format!("unknown alert kind `{s}` (change or new-run)")),
        }
    }
}

/// An alert's triage state, kept in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AlertState {
    /// Nobody looked yet: fails the gate.
    New,
    /// A real change somebody accepted (an expected kernel change): no
    /// longer fails the gate.
    Acknowledged,
    /// Not a real change (a broken host, a bad run): no longer fails.
    Invalid,
    /// Closed by `history changes`: no change point supports it any
    /// longer (its note says why). No longer fails.
    Closed,
}

impl AlertState {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::New => "new",
            AlertState::Acknowledged => "acknowledged",
            AlertState::Invalid => "invalid",
            AlertState::Closed => "closed",
        }
    }
    /// Whether the gate still fails on it.
    pub fn is_open(self) -> bool {
        self == AlertState::New
    }
}

impl std::str::FromStr for AlertState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "new" => Ok(AlertState::New),
            "acknowledged" | "ack" => Ok(AlertState::Acknowledged),
            "invalid" => Ok(AlertState::Invalid),
            "closed" => Ok(AlertState::Closed),
            _ => Err(format!(
                "alert state `{s}`: use new, acknowledged, invalid or closed"
            )),
        }
    }
}

/// An alert as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    pub alert_id: AlertId,
    pub series: SeriesId,
    pub metric: Metric,
    /// The first run after the change (or the new run).
    pub run_key: String,
    pub kind: ChangeKind,
    pub state: AlertState,
    pub note: Option<String>,
    /// The [`Change`] as JSON when it was raised.
    pub detail: String,
    pub created_at: String,
    pub updated_at: String,
}

impl Alert {
    pub(crate) fn from_row(r: &Row) -> Result<Alert, HistoryError> {
        let corrupt = |message| HistoryError::Corrupt {
            what: format!("alert {}", r.str(0)),
            message,
        };
        let state = r.str(5).parse().map_err(corrupt)?;
        let metric = r.str(2).parse().map_err(corrupt)?;
        let kind = r.str(4).parse().map_err(corrupt)?;
        Ok(Alert {
            alert_id: AlertId::from(r.str(0)),
            series: SeriesId::from(r.str(1)),
            metric,
            run_key: r.str(3),
            kind,
            state,
            note: r.text(6),
            detail: r.str(7),
            created_at: r.str(8),
            updated_at: r.str(9),
        })
    }
}

/// A run named in a change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRef {
    pub run_key: String,
    pub date: String,
    pub folder: String,
    pub kernel: String,
    /// The kernel tree's identity, when known (a git tree's hash of tree
    /// and diff: the commit range is between two of these).
    pub kernel_identity: Option<String>,
}

impl RunRef {
    fn of(p: &Point) -> RunRef {
        RunRef {
            run_key: p.run_key.clone(),
            date: p.date.clone(),
            folder: p.folder.clone(),
            kernel: p.kernel.clone(),
            kernel_identity: p.kernel_identity.clone(),
        }
    }
}

/// The commits a change lies in: after `good` (the last run before it
/// built this commit), up to and including `bad` (the first run after).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommitRange {
    pub good: String,
    pub bad: String,
    /// `git log` of the range, to read it.
    pub log: String,
    /// The `lazyinit-bench bisect` that names the first bad commit.
    pub bisect: String,
}

impl CommitRange {
    /// The range between two kernels' identities, when both are commits
    /// of a git tree (`git:<commit>[+<diff hash>]`) and differ. A tree
    /// with uncommitted changes on either side still gives its commits: the
    /// bisect measures commits, so a change made only by the diff shows
    /// there as ends that do not differ.
    pub fn of(series: &Series, metric: Metric, before: &RunRef, after: &RunRef) -> Option<Self> {
        let commit = |r: &RunRef| -> Option<String> {
            let git: lazyinit_core::GitIdentity = r.kernel_identity.as_deref()?.parse().ok()?;
            Some(git.commit().to_string())
        };
        let (good, bad) = (commit(before)?, commit(after)?);
        if good == bad {
            return None;
        }
        let k = &series.key;
        let tree = shell_word(&k.axes.source.to_string());
        let log = format!("git -C {tree} log --oneline {good}..{bad}");
        let mut bisect = format!(
            "lazyinit-bench bisect --source {tree} --good {good} --bad {bad} --cell {}:{}:{} --metric {metric}",
            k.axes.arch,
            k.axes.hz,
            k.volume()
        );
        let storage = k.testbed.storage.to_string();
        if !storage.is_empty() {
            bisect.push_str(&format!(" --storage-profile {}", shell_word(&storage)));
        }
        // On the clock the series was measured on: a virtual-clock series
        // is bisected by exact samples, a real-clock one by repeats.
        match k.testbed.accel {
            lazyinit_core::Accel::Icount(0) => bisect.push_str(" --clock virtual"),
            lazyinit_core::Accel::Icount(n) => bisect.push_str(&format!(" --clock virtual:{n}")),
            _ => bisect.push_str(" --clock real"),
        }
        Some(CommitRange {
            good,
            bad,
            log,
            bisect,
        })
    }
}

/// `s` as one shell word: as is when it is plain, else single-quoted.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%=,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// One side of a change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    pub mean: f64,
    pub sd: f64,
    /// Runs on this side (up to the neighbouring change point).
    pub runs: usize,
    /// Distinct sleeps L measured on this side.
    pub sleep_ticks: Vec<u64>,
    /// Distinct kernels on this side.
    pub kernels: Vec<String>,
}

/// A change in one series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// 8 hex: series, metric and first run after (stable across calls).
    pub alert_id: AlertId,
    pub kind: ChangeKind,
    pub series: SeriesId,
    pub label: String,
    pub metric: Metric,
    pub unit: String,
    /// Position of the first run after the change in the series (0-based).
    pub index: usize,
    pub last_run_before: RunRef,
    pub first_run: RunRef,
    pub before: Segment,
    pub after: Segment,
    /// `after / before - 1`, in percent.
    pub change_pct: f64,
    pub p: f64,
    /// The sleep L on either side when it moved: the kernel chose another
    /// L (`docs/history.md`, "An L change"), not a slower cycle.
    pub sleep_moved: Option<(Vec<u64>, Vec<u64>)>,
    /// The commits between the two runs, when both kernels were built
    /// from commits of a git tree (`run --source TREE`), with the bisect
    /// that names the one that moved the series.
    pub commits: Option<CommitRange>,
    /// The alert's state and note when the history has one (its
    /// timestamps are left out: the same history gives the same output).
    pub alert_state: Option<AlertState>,
    pub alert_note: Option<String>,
    /// The alert itself.
    #[serde(skip)]
    pub alert: Option<Alert>,
}

impl Change {
    /// Takes this change's alert from `alerts`, if there.
    pub fn attach(&mut self, alerts: &[Alert]) {
        self.alert = alerts.iter().find(|a| a.alert_id == self.alert_id).cloned();
        self.alert_state = self.alert.as_ref().map(|a| a.state);
        self.alert_note = self.alert.as_ref().and_then(|a| a.note.clone());
    }
}

/// An alert's id: 8 hex digits of the series, the metric's name and the
/// run, hashed ([`alert_id`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct AlertId(pub String);

lazyinit_core::open_name!(AlertId);

/// An alert's id: the series, the metric's name and the run, hashed.
pub fn alert_id(series: &SeriesId, metric: Metric, run_key: &str) -> AlertId {
    AlertId(
        lazyinit_core::paths::sha256_hex(format!("{series}|{metric}|{run_key}"))[..8].to_string(),
    )
}

fn distinct<T: Ord + Clone>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    v.sort();
    v.dedup();
    v
}

fn segment(points: &[Point], mean: f64, sd: f64) -> Segment {
    Segment {
        mean,
        sd,
        runs: points.len(),
        sleep_ticks: distinct(points.iter().flat_map(|p| p.sleep_ticks.iter().copied())),
        kernels: distinct(points.iter().map(|p| p.kernel.clone())),
    }
}

/// A [`Change`] of `series` from a split of its points `[lo, hi)` at `split.index`.
pub fn change_of(series: &Series, split: &Split, lo: usize, hi: usize, kind: ChangeKind) -> Change {
    let i = split.index;
    let t = &split.stats;
    let before = segment(&series.points[lo..i], t.mean_before, t.sd_before);
    let after = segment(&series.points[i..hi], t.mean_after, t.sd_after);
    let sleep_moved = (before.sleep_ticks != after.sleep_ticks)
        .then(|| (before.sleep_ticks.clone(), after.sleep_ticks.clone()));
    let first = &series.points[i];
    let last_run_before = RunRef::of(&series.points[i - 1]);
    let first_run = RunRef::of(first);
    let commits = CommitRange::of(series, series.metric, &last_run_before, &first_run);
    Change {
        alert_id: alert_id(&series.id, series.metric, &first.run_key),
        kind,
        series: series.id.clone(),
        label: series.label.clone(),
        metric: series.metric,
        unit: series.unit.to_string(),
        index: i,
        last_run_before,
        first_run,
        before,
        after,
        change_pct: t.rel_change() * 100.0,
        p: t.p,
        sleep_moved,
        commits,
        alert_state: None,
        alert_note: None,
        alert: None,
    }
}

/// The change points of one series, oldest first.
pub fn of_series(series: &Series, opts: &ChangeOptions) -> Vec<Change> {
    let values: Vec<f64> = series.points.iter().map(|p| p.value).collect();
    let splits = edivisive::change_points(&values, &opts.edivisive);
    let bounds: Vec<usize> = std::iter::once(0)
        .chain(splits.iter().map(|s| s.index))
        .chain(std::iter::once(values.len()))
        .collect();
    splits
        .iter()
        .enumerate()
        .map(|(k, s)| change_of(series, s, bounds[k], bounds[k + 2], ChangeKind::Change))
        .collect()
}

/// The change points of every series, series by series.
pub fn find(series: &[Series], opts: &ChangeOptions) -> Vec<Change> {
    series.iter().flat_map(|s| of_series(s, opts)).collect()
}

/// An open alert no change point supports any longer, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Closing {
    pub alert_id: AlertId,
    pub series: SeriesId,
    pub run_key: String,
    pub reason: String,
}

/// The open (`new`) alerts of `series` that the change points `found`
/// (of the same series, over the whole history) no longer support:
///
/// - a `change` alert is supported while a change point has its id (the
///   same series, metric and first run after);
/// - a `new-run` alert is supported by a change point at its run or at
///   most `min_size - 1` runs before it (the runs after a change that
///   the gate failed before the change point could show): otherwise,
///   once `min_size` runs follow it (enough for a change point there to
///   be found), it was a run off its level alone, as a loaded night is.
///
/// Alerts a person triaged, and alerts of other series or metrics, are
/// left alone; a `new-run` alert with too few runs after it stays open.
pub fn unsupported(
    series: &[Series],
    found: &[Change],
    alerts: &[Alert],
    opts: &ChangeOptions,
) -> Vec<Closing> {
    let min_size = opts.edivisive.min_size.max(1);
    let mut out = Vec::new();
    for a in alerts.iter().filter(|a| a.state.is_open()) {
        let Some(s) = series
            .iter()
            .find(|s| s.id == a.series && s.metric == a.metric)
        else {
            continue;
        };
        if found.iter().any(|c| c.alert_id == a.alert_id) {
            continue;
        }
        let here: Vec<&Change> = found.iter().filter(|c| c.series == s.id).collect();
        let Some(at) = s.points.iter().position(|p| p.run_key == a.run_key) else {
            continue;
        };
        let nearest = here
            .iter()
            .min_by_key(|c| c.index.abs_diff(at))
            .map(|c| {
                format!(
                    "; the nearest change point is [{}] at {} ({:+.2}%)",
                    c.alert_id, c.first_run.run_key, c.change_pct
                )
            })
            .unwrap_or_else(|| "; the series has no change point".to_string());
        let reason = if a.kind == ChangeKind::NewRun {
            if here
                .iter()
                .any(|c| c.index <= at && at < c.index + min_size)
            {
                continue;
            }
            let after = s.points.len() - at - 1;
            if after < min_size {
                continue;
            }
            format!(
                "a run off its level alone: {after} run(s) since, and no change point at it \
                 or up to {} run(s) before it{nearest}",
                min_size - 1
            )
        } else {
            format!(
                "its change point is no longer found over the {} runs of the series{nearest}",
                s.points.len()
            )
        };
        out.push(Closing {
            alert_id: a.alert_id.clone(),
            series: a.series.clone(),
            run_key: a.run_key.clone(),
            reason,
        });
    }
    out
}

/// The closings as `history changes` prints them, one line each.
pub fn closings_text(closed: &[Closing]) -> String {
    closed
        .iter()
        .map(|c| {
            format!(
                "closed [{}] {} at {}: {}\n",
                c.alert_id, c.series, c.run_key, c.reason
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::{build, StoredRow};
    use lazyinit_report::cells::Metric;

    fn alert(s: &Series, at: usize, kind: ChangeKind, state: AlertState) -> Alert {
        let run_key = s.points[at].run_key.clone();
        Alert {
            alert_id: alert_id(&s.id, s.metric, &run_key),
            series: s.id.clone(),
            metric: s.metric,
            run_key,
            kind,
            state,
            note: None,
            detail: String::new(),
            created_at: String::new(),
            updated_at: String::new(),
        }
    }

    /// A generated history's rows, as the store reads them back.
    fn generated_rows(runs: usize, seed: u64) -> Vec<StoredRow> {
        crate::generate::history(runs, seed)
            .into_iter()
            .flat_map(|r| {
                let key = crate::import::run_key(&r.rows).unwrap();
                r.rows.into_iter().map(move |row| StoredRow {
                    run_started_at: row.started_at.clone(),
                    row,
                    kernel_build: None,
                    kernel_source_identity: None,
                    run_key: key.clone(),
                    folder: String::new(),
                })
            })
            .collect()
    }

    /// Which open alerts `changes` closes, over a generated history of
    /// 100 runs (the L change planted at run 60 of x86_64 fix 2 TiB, the
    /// 2% at run 80 of arm64 no fix 3 TiB).
    #[test]
    fn unsupported_alerts_are_the_open_ones_no_change_point_backs() {
        let series = build(&generated_rows(100, 5), Metric::FromFirstGroupS, None);
        let opts = ChangeOptions::default();
        let found = find(&series, &opts);
        let l = series
            .iter()
            .find(|s| s.id.as_str().contains("x86_64/debian-6.1/hz250/fix/2TiB"))
            .unwrap();
        let at: Vec<(&str, usize)> = found.iter().map(|c| (c.series.as_str(), c.index)).collect();
        assert!(at.contains(&(l.id.as_str(), 60)), "{at:?}");
        assert_eq!(at.len(), 2, "the two planted changes: {at:?}");
        let quiet = series
            .iter()
            .find(|s| s.id.as_str().contains("arm64/debian-6.1/hz100/fix/2TiB"))
            .unwrap();
        let alerts = vec![
            // Kept: the change's own alert; the gate's at the change and
            // 2 runs after it; one triaged; one with 2 runs after it.
            alert(l, 60, ChangeKind::Change, AlertState::New),
            alert(l, 62, ChangeKind::NewRun, AlertState::New),
            alert(quiet, 30, ChangeKind::Change, AlertState::Acknowledged),
            alert(quiet, 97, ChangeKind::NewRun, AlertState::New),
            // Closed: a change point no longer found; a run off its level
            // alone; the gate 3 runs after the change (not its runs).
            alert(quiet, 40, ChangeKind::Change, AlertState::New),
            alert(quiet, 50, ChangeKind::NewRun, AlertState::New),
            alert(l, 63, ChangeKind::NewRun, AlertState::New),
        ];
        let closed = unsupported(&series, &found, &alerts, &opts);
        let ids: Vec<&AlertId> = closed.iter().map(|c| &c.alert_id).collect();
        assert_eq!(
            ids,
            vec![
                &alerts[4].alert_id,
                &alerts[5].alert_id,
                &alerts[6].alert_id
            ]
        );
        assert!(
            closed[0]
                .reason
                .starts_with("its change point is no longer found over the 100 runs"),
            "{}",
            closed[0].reason
        );
        assert!(
            closed[0].reason.ends_with("the series has no change point"),
            "{}",
            closed[0].reason
        );
        assert!(
            closed[1]
                .reason
                .starts_with("a run off its level alone: 49 run(s) since"),
            "{}",
            closed[1].reason
        );
        assert!(
            closed[2].reason.contains("the nearest change point is ["),
            "{}",
            closed[2].reason
        );
        let text = closings_text(&closed);
        assert_eq!(text.lines().count(), 3);
        assert!(
            text.starts_with(&format!("closed [{}] {} at ", alerts[4].alert_id, quiet.id)),
            "{text}"
        );
    }
}
