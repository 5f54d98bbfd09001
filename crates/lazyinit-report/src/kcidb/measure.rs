//! One cell run's tests: one per metric, with its status, number,
//! environment and the figures it compares with (the 2021 report, the model).

use std::collections::BTreeMap;

use lazyinit_core::identity::KeyValue;
use lazyinit_core::model;
use lazyinit_core::results::{ResultRow, Status};
use lazyinit_core::ByteSize;

use super::ids;
use super::types::{
    Environment, EnvironmentMisc, EstimateMisc, ModelFigure, Number, Reported2021, Resource, Test,
    TestMisc,
};
use crate::cells::{model_for, CellKey, Metric};

/// What each cell run reports, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestMetric {
    /// Mount to the thread's exit, guest clock (s).
    LazyinitS,
    /// One group's cycle, from the trace (ms).
    MsPerGroup,
    /// The sleep L between groups (ticks).
    SleepTicks,
}

pub const METRICS: [TestMetric; 3] = [
    TestMetric::LazyinitS,
    TestMetric::MsPerGroup,
    TestMetric::SleepTicks,
];

impl TestMetric {
    pub fn name(self) -> &'static str {
        match self {
            TestMetric::LazyinitS => "lazyinit_s",
            TestMetric::MsPerGroup => "ms_per_group",
            TestMetric::SleepTicks => "sleep_ticks",
        }
    }
    fn unit(self) -> &'static str {
        match self {
            TestMetric::LazyinitS => "s",
            TestMetric::MsPerGroup => "ms",
            TestMetric::SleepTicks => "ticks",
        }
    }
    fn what(self) -> &'static str {
        match self {
            TestMetric::LazyinitS => "ext4lazyinit run time after mount",
            TestMetric::MsPerGroup => "ext4lazyinit time per block group",
            TestMetric::SleepTicks => "ext4lazyinit sleep between groups",
        }
    }
    fn of(self, row: &ResultRow) -> Option<f64> {
        match self {
            TestMetric::LazyinitS => row.measured.lazyinit_s,
            TestMetric::MsPerGroup => row.measured.ms_per_group,
            TestMetric::SleepTicks => row.measured.sleep_ticks.map(|l| l as f64),
        }
        .filter(|v| v.is_finite())
    }
}

/// The report's figure in this metric's unit. For the sleep, the L its
/// per-group time implies (cycle = L + 1 ticks).
fn reported(row: &ResultRow, m: TestMetric, measured: Option<f64>) -> Option<Reported2021> {
    let r = lazyinit_core::reported::lookup(
        row.axes.arch,
        row.axes.hz,
        row.axes.variant,
        row.axes.volume.0,
    )?;
    let groups = model::groups(ByteSize(row.axes.volume.0)).max(1);
    let ms = r.seconds * 1000.0 / groups as f64;
    let (value, basis) = match m {
        TestMetric::LazyinitS => (r.seconds, None),
        TestMetric::MsPerGroup => (ms, Some(format!("{} s over {groups} groups", r.seconds))),
        TestMetric::SleepTicks => {
            let l = model::infer_sleep_ticks(row.axes.hz, ms)?;
            (
                l as f64,
                Some(format!(
                    "implied by {ms:.1} ms per group at HZ={}",
                    row.axes.hz
                )),
            )
        }
    };
    Some(Reported2021 {
        source: "linux-ext4 2021-09-20",
        instance: r.instance,
        kernel: "5.10",
        value,
        unit: m.unit(),
        basis,
        diff_pct: measured.map(|v| (v / value - 1.0) * 100.0),
    })
}

/// The model at the run's own L (and its own ticks crossed) for times (as
/// `report` does for a cell whose runs agree), and at the default zeroing time for L itself.
fn modelled(row: &ResultRow, m: TestMetric, measured: Option<f64>) -> ModelFigure {
    let key = CellKey::of(row);
    let measured_l: Vec<u64> = row.measured.sleep_ticks.into_iter().collect();
    let (value, mv) = match m {
        TestMetric::LazyinitS => {
            let mv = model_for(
                &key,
                &measured_l,
                row.measured.crossed_ticks,
                Metric::LazyinitS,
            );
            (mv.value, mv)
        }
        TestMetric::MsPerGroup => {
            let mv = model_for(
                &key,
                &measured_l,
                row.measured.crossed_ticks,
                Metric::MsPerGroup,
            );
            (mv.value, mv)
        }
        TestMetric::SleepTicks => {
            let mv = model_for(&key, &[], None, Metric::MsPerGroup);
            (mv.sleep_ticks as f64, mv)
        }
    };
    ModelFigure {
        value,
        unit: m.unit(),
        sleep_ticks: mv.sleep_ticks,
        basis: mv.basis,
        diff_pct: measured
            .filter(|_| value != 0.0)
            .map(|v| (v / value - 1.0) * 100.0),
    }
}

fn environment(row: &ResultRow) -> Environment {
    Environment {
        comment: format!(
            "{} {} ({}), storage {}, {} guest(s) at once",
            row.testbed.provider,
            row.testbed.machine,
            row.testbed.accel,
            row.testbed.storage,
            row.concurrency
        ),
        misc: EnvironmentMisc {
            provider: row.testbed.provider.to_string(),
            machine: row.testbed.machine.to_string(),
            accel: row.testbed.accel.to_string(),
            storage_profile: row.testbed.storage.to_string(),
            concurrency: row.concurrency,
            clocksource: row.measured.clocksource.clone(),
        },
    }
}

/// `started_at` when it is RFC 3339 (what KCIDB's `date-time` accepts).
fn start_time(row: &ResultRow) -> Option<String> {
    chrono::DateTime::parse_from_rfc3339(&row.started_at)
        .ok()
        .map(|_| row.started_at.clone())
}

/// The first `max` bytes of `s`, cut at a character boundary.
fn clip(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn estimate(row: &ResultRow, m: TestMetric) -> Option<EstimateMisc> {
    if !row.measured.estimated {
        return None;
    }
    let lazyinit = m == TestMetric::LazyinitS;
    Some(EstimateMisc {
        groups_traced: row.measured.estimate_groups.unwrap_or(0),
        cycle_ms: row.measured.estimate_cycle_ms,
        lo: row.measured.lazyinit_lo_s.filter(|_| lazyinit),
        hi: row.measured.lazyinit_hi_s.filter(|_| lazyinit),
    })
}

/// The tests of one row. `files` are the cell's raw files (console.log
/// first when present), attached to every metric of the run.
pub fn tests_of(origin: &str, build_id: &str, row: &ResultRow, files: &[Resource]) -> Vec<Test> {
    METRICS
        .iter()
        .map(|&m| {
            let value = match row.status {
                Status::Ok => m.of(row),
                _ => None,
            };
            let (status, note) = match (row.status, value) {
                (Status::Ok, Some(_)) if row.measured.estimated => (
                    "DONE",
                    format!(
                        "estimated from the first {} groups, not measured to the thread's exit",
                        row.measured.estimate_groups.unwrap_or(0)
                    ),
                ),
                (Status::Ok, Some(_)) => ("DONE", "measured".to_string()),
                (Status::Ok, None) => (
                    "ERROR",
                    format!("the run ended ok without a {} value", m.name()),
                ),
                (Status::Failed, _) => ("ERROR", "the cell run failed".to_string()),
                (Status::Interrupted, _) => ("MISS", "the run was interrupted".to_string()),
            };
            let size = ByteSize(row.axes.volume.0);
            Test {
                id: ids::test_id(origin, row, m.name()),
                origin: origin.to_string(),
                build_id: build_id.to_string(),
                path: ids::test_path(row, m.name()),
                status,
                number: value.map(|value| Number {
                    value,
                    unit: m.unit(),
                }),
                start_time: start_time(row),
                environment: environment(row),
                comment: format!(
                    "{}, {} HZ={} {} {}{} r{}: {note}",
                    m.what(),
                    row.axes.arch,
                    row.axes.hz,
                    row.axes.variant,
                    size,
                    knob_words(row),
                    row.repetition
                ),
                log_url: files
                    .iter()
                    .find(|f| lazyinit_core::CellFolder::CONSOLE_LOG == f.name)
                    .map(|f| f.url.clone()),
                log_excerpt: (!row.error.is_empty()).then(|| clip(&row.error, 16384).to_string()),
                output_files: files.to_vec(),
                misc: TestMisc {
                    run_id: row.run_id.clone(),
                    cell_id: row.cell_id.clone(),
                    repetition: row.repetition,
                    row_status: row.status.to_string(),
                    arch: row.axes.arch.to_string(),
                    hz: row.axes.hz.get(),
                    variant: row.axes.variant.to_string(),
                    wait_mult: row.axes.wait_mult,
                    volume_bytes: row.axes.volume.0,
                    knobs: knobs_off_default(row),
                    groups: row.measured.groups,
                    traced_groups: row.measured.traced_groups,
                    mkfs_cmd: row.measured.mkfs_cmd.clone(),
                    harness_version: row.harness_version.clone(),
                    reported_2021: reported(row, m, value),
                    model: Some(modelled(row, m, value)),
                    estimate: estimate(row, m),
                },
            }
        })
        .collect()
}

/// The row's knobs off their defaults, from the key's table, by column.
fn knobs_off_default(row: &ResultRow) -> BTreeMap<&'static str, KeyValue> {
    let key = CellKey::of(row);
    key.off_default()
        .into_iter()
        .map(|f| (f.column, (f.value)(&key)))
        .collect()
}

/// ` inode128` for each knob off its default (its label word): nothing
/// at the defaults.
fn knob_words(row: &ResultRow) -> String {
    let key = CellKey::of(row);
    key.off_default()
        .into_iter()
        .map(|f| format!(" {}", (f.word)(&key)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::tests_support::row;
    use lazyinit_core::{Arch, Hz, Variant};

    fn reported_cell() -> ResultRow {
        let mut r = row("debian-6.1", 726.8);
        r.axes.hz = Hz::new(250).unwrap();
        r.axes.volume.0 = 2 << 40;
        r.measured.ms_per_group = Some(44.04);
        r
    }

    #[test]
    fn a_measured_row_is_done_with_numbers_and_comparisons() {
        let t = tests_of("o", "o:b", &reported_cell(), &[]);
        assert_eq!(t.len(), 3);
        assert!(t.iter().all(|t| t.status == "DONE"));
        assert_eq!(t[0].number.as_ref().unwrap().value, 726.8);
        let rep = t[0].misc.reported_2021.as_ref().unwrap();
        assert_eq!((rep.instance, rep.value), ("c5.2xlarge", 743.0));
        assert!((rep.diff_pct.unwrap() - (726.8 / 743.0 - 1.0) * 100.0).abs() < 1e-9);
        // 743 s over 16384 groups is 45.3 ms: L = 10 at HZ=250.
        let l = t[2].misc.reported_2021.as_ref().unwrap();
        assert_eq!(l.value, 10.0);
        assert_eq!(t[2].misc.model.as_ref().unwrap().value, 10.0);
        assert_eq!(t[2].path, "ext4.lazyinit.2TiB.sleep_ticks");
    }

    /// A knob off its default is in each test's misc (by its column) and
    /// comment; at the default the misc has no knob at all, as before.
    #[test]
    fn a_knob_off_its_default_is_in_the_tests_misc_and_comment() {
        let plain = tests_of("o", "o:b", &reported_cell(), &[]);
        let json = serde_json::to_value(&plain[0].misc).unwrap();
        assert!(json.get("inode_size").is_none(), "{json}");
        let mut r = reported_cell();
        r.axes.knobs.inode_size = lazyinit_core::identity::knobs::InodeSize(128);
        let t = tests_of("o", "o:b", &r, &[]);
        let json = serde_json::to_value(&t[0].misc).unwrap();
        assert_eq!(json["inode_size"], 128, "{json}");
        assert!(
            t[0].comment.contains(" 2TiB inode128 r1:"),
            "{}",
            t[0].comment
        );
        assert_ne!(t[0].path, plain[0].path);
    }

    #[test]
    fn an_estimated_row_says_so() {
        let mut r = reported_cell();
        r.measured.estimated = true;
        r.estimate_after = Some(50);
        r.measured.estimate_groups = Some(50);
        r.measured.estimate_cycle_ms = Some(44.0);
        r.measured.lazyinit_lo_s = Some(725.0);
        r.measured.lazyinit_hi_s = Some(730.0);
        let t = tests_of("o", "o:b", &r, &[]);
        assert!(
            t[0].comment
                .ends_with("estimated from the first 50 groups, not measured to the thread's exit"),
            "{}",
            t[0].comment
        );
        assert_eq!(t[0].path, "ext4.lazyinit.2TiB-estimate.lazyinit_s");
        let e = t[0].misc.estimate.as_ref().unwrap();
        assert_eq!(
            (e.groups_traced, e.lo, e.hi),
            (50, Some(725.0), Some(730.0))
        );
        assert_eq!(t[1].misc.estimate.as_ref().unwrap().lo, None);
        assert!(tests_of("o", "o:b", &reported_cell(), &[])[0]
            .misc
            .estimate
            .is_none());
    }

    #[test]
    fn failed_and_interrupted_rows_carry_no_number() {
        let mut r = reported_cell();
        r.status = Status::Failed;
        r.error = "guest did not answer SSH".into();
        let t = tests_of("o", "o:b", &r, &[]);
        assert!(t.iter().all(|t| t.status == "ERROR" && t.number.is_none()));
        assert_eq!(
            t[0].log_excerpt.as_deref(),
            Some("guest did not answer SSH")
        );
        assert!(t[0].misc.reported_2021.as_ref().unwrap().diff_pct.is_none());
        r.status = Status::Interrupted;
        let t = tests_of("o", "o:b", &r, &[]);
        assert!(t.iter().all(|t| t.status == "MISS" && t.number.is_none()));
    }

    #[test]
    fn an_ok_row_without_a_metric_is_an_error_not_a_zero() {
        let mut r = row("debian-6.1", 60.0);
        r.axes.arch = Arch::Arm64;
        r.axes.variant = Variant::Fix;
        r.measured.ms_per_group = None;
        r.measured.lazyinit_s = Some(f64::INFINITY);
        let t = tests_of("o", "o:b", &r, &[]);
        assert_eq!(t[0].status, "ERROR", "a non-finite value is no measurement");
        assert_eq!(t[1].status, "ERROR");
        assert!(t[1].number.is_none());
        // Not a reported cell (64 GiB): no 2021 figure.
        assert!(t[0].misc.reported_2021.is_none());
    }

    #[test]
    fn console_log_is_the_log_url() {
        let files = vec![
            Resource {
                name: "console.log".into(),
                url: "file:///r/c/console.log".into(),
            },
            Resource {
                name: "trace.txt".into(),
                url: "file:///r/c/trace.txt".into(),
            },
        ];
        let t = tests_of("o", "o:b", &reported_cell(), &files);
        assert_eq!(t[0].log_url.as_deref(), Some("file:///r/c/console.log"));
        assert_eq!(t[0].output_files.len(), 2);
    }

    #[test]
    fn clip_respects_characters() {
        assert_eq!(clip("héllo", 2), "h");
        assert_eq!(clip("abc", 10), "abc");
    }
}
