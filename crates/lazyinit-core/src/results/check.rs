//! What a row must hold to be read at all: measurements are validated
//! where they enter, so no consumer (report, compare, replay, KCIDB)
//! counts a negative, non-finite or missing measurement as data.

use super::{ResultRow, Status, COLUMNS};

/// The columns every results file has: all up to the first one appended
/// later (files written before an appended column still read).
pub(super) fn required_columns() -> impl Iterator<Item = &'static str> {
    COLUMNS.iter().copied().take_while(|c| *c != FIRST_APPENDED)
}

/// The first column added after the format was published.
const FIRST_APPENDED: &str = "z1_ms";

/// The longest time a results file may hold, in seconds (1e9 s, about 31
/// years; the `_ms` columns: 1e12 ms).
pub const MAX_TIME_S: f64 = 1e9;
/// The most ticks `crossed_ticks` may say, either way.
pub const MAX_TICKS: f64 = 1e12;

/// Why `row` is not a measurement, if it is not: a time, rate or count
/// that is negative or not finite, or an `ok` row without `lazyinit_s`.
pub(super) fn check(row: &ResultRow) -> Result<(), String> {
    // The id names the cell's folder: a row never makes a path outside
    // its run's folder (`../../etc` listed host files as a test's output).
    if let Err(may) = crate::cell::check_cell_id(&row.cell_id) {
        let shown: String = row.cell_id.chars().take(80).collect();
        return Err(format!(
            "column `cell_id`: {shown:?} is not a cell id ({may}); fix or remove the row"
        ));
    }
    let m = &row.measured;
    let values = [
        ("boot_s", row.boot_s),
        ("mkfs_s", m.mkfs_s),
        ("mount_s", m.mount_s),
        ("lazyinit_s", m.lazyinit_s),
        ("lazyinit_poll_s", m.lazyinit_poll_s),
        ("ms_per_group", m.ms_per_group),
        ("first_group_s", m.first_group_s),
        ("z1_ms", m.z1_ms),
        ("z1_target_ms", m.z1_target_ms),
        ("guest_part_ms", m.guest_part_ms),
        ("zero_hold_ms", m.zero_hold_ms),
        ("zero_median_ms", m.zero_median_ms),
        ("estimate_cycle_ms", m.estimate_cycle_ms),
        ("lazyinit_lo_s", m.lazyinit_lo_s),
        ("lazyinit_hi_s", m.lazyinit_hi_s),
        ("z1_lo_ms", m.z1_lo_ms),
        ("z1_hi_ms", m.z1_hi_ms),
    ];
    for (name, v) in values {
        if let Some(v) = v {
            if !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "column `{name}`: {v} is not a measurement (a time or count is finite and >= 0); \
                     fix or remove the row"
                ));
            }
            // Finite but absurd (1.7e308 s): no plot range or sum of such
            // values is finite, so it is refused here (issue 41).
            let (max, unit) = match name.ends_with("_ms") || name == "ms_per_group" {
                true => (MAX_TIME_S * 1000.0, "ms"),
                false => (MAX_TIME_S, "s"),
            };
            if v > max {
                return Err(format!(
                    "column `{name}`: {v:e} is not a measurement (at most {max:e} {unit}, about 31 years); \
                     fix or remove the row"
                ));
            }
        }
    }
    // A mean of cycle lengths less L + 1 ticks on the guest's tick grid:
    // slightly below zero where cycles read a little short of the grid.
    if let Some(v) = m
        .crossed_ticks
        .filter(|v| !v.is_finite() || v.abs() > MAX_TICKS)
    {
        return Err(format!(
            "column `crossed_ticks`: {v} is not a measurement (it is finite, at most {MAX_TICKS:e} ticks); fix or remove the row"
        ));
    }
    // A row torn inside its last column still has every field: a commit
    // cut short is refused here, not read as another commit.
    let commit = &row.harness_commit;
    if !commit.is_empty() && !crate::is_harness_commit(commit) {
        return Err(format!(
            "column `harness_commit`: `{commit}` is not a harness commit (40 hex digits, \
             then `-dirty` or nothing, or `unknown`); fix or remove the row"
        ));
    }
    if row.status == Status::Ok && m.lazyinit_s.is_none() {
        return Err(
            "column `lazyinit_s` is empty on an `ok` row: an ok row carries its measurement; \
             fix the value or mark the row failed"
                .into(),
        );
    }
    Ok(())
}

/// A bool column appended later: an empty value reads as absent (`false`),
/// like a missing column, so a file another tool wrote with blanks reads.
/// A self-describing format (JSON: the history's rows) may give a bool.
pub(super) fn blank_is_false<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    use serde::de::Error;
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Raw {
        B(bool),
        S(String),
    }
    let s = match <Raw as serde::Deserialize>::deserialize(d)? {
        Raw::B(b) => return Ok(b),
        Raw::S(s) => s,
    };
    match s.trim() {
        "" | "false" => Ok(false),
        "true" => Ok(true),
        other => Err(D::Error::custom(format!(
            "`{other}` is not true, false or empty"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{read_rows_from, tests::sample, ResultRow, COLUMNS};
    use std::path::Path;

    fn csv_of(rows: &[ResultRow]) -> String {
        let mut w = super::super::csv_writer(Vec::new()).unwrap();
        for r in rows {
            w.serialize(r).unwrap();
        }
        String::from_utf8(w.into_inner().unwrap()).unwrap()
    }

    fn read(text: &str) -> Result<Vec<ResultRow>, String> {
        read_rows_from(text.as_bytes(), Path::new("r.csv")).map_err(|e| e.to_string())
    }

    /// The `lazyinit_s` field of the first data row replaced by `v`.
    fn with_lazyinit(v: &str) -> String {
        let text = csv_of(&[sample()]);
        let i = COLUMNS.iter().position(|c| *c == "lazyinit_s").unwrap();
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        let mut fields: Vec<&str> = lines[1].split(',').collect();
        fields[i] = v;
        lines[1] = fields.join(",");
        lines.join("\n") + "\n"
    }

    /// A cell id names a folder beside the results.csv: one that leaves
    /// it, is hidden or holds a separator is refused where it is read.
    #[test]
    fn cell_ids_that_are_no_folder_name_are_refused_on_every_read() {
        let good = sample();
        read(&csv_of(&[good.clone()])).unwrap();
        for id in [
            "../../../../etc",
            "..",
            ".",
            "",
            "a/b",
            "/etc",
            ".hidden",
            "x\ny",
            "é",
        ] {
            let mut r = good.clone();
            r.cell_id = id.into();
            let e = read(&csv_of(&[good.clone(), r])).unwrap_err();
            assert!(e.starts_with("r.csv:3: column `cell_id`: "), "{id:?}: {e}");
            assert!(
                e.contains("is not a cell id (a cell id is 1 to 200 ASCII letters"),
                "{id:?}: {e}"
            );
            assert_eq!(e.lines().count(), 1, "{id:?}: {e}");
        }
    }

    #[test]
    fn bad_measurements_of_the_first_row_are_refused_on_line_2() {
        for (v, needle) in [
            ("-1", "column `lazyinit_s`: -1 is not a measurement"),
            ("NaN", "column `lazyinit_s`: NaN is not a measurement"),
            ("inf", "column `lazyinit_s`: inf is not a measurement"),
            (
                "1.7e308",
                "column `lazyinit_s`: 1.7e308 is not a measurement (at most 1e9 s",
            ),
            (
                "1000000001",
                "column `lazyinit_s`: 1.000000001e9 is not a measurement (at most 1e9 s",
            ),
            ("", "column `lazyinit_s` is empty on an `ok` row"),
            ("abc", "column `lazyinit_s`: invalid float"),
        ] {
            let e = read(&with_lazyinit(v)).unwrap_err();
            assert!(e.starts_with("r.csv:2: "), "{v}: {e}");
            assert!(e.contains(needle), "{v}: {e}");
        }
        assert_eq!(read(&with_lazyinit("60.5")).unwrap().len(), 1);
    }

    /// A harness commit is 40 hex digits (and `-dirty`) or `unknown`; one
    /// cut short, as a row torn inside it, is refused, not read.
    #[test]
    fn a_harness_commit_cut_short_is_refused() {
        let text = csv_of(&[sample()]);
        assert!(read(&text).is_ok());
        let commit = sample().harness_commit;
        for (bad, ok) in [
            (&commit[..30], false),
            (commit.trim_end_matches("-dirty"), true),
            ("unknown", true),
            ("", true),
            ("0F1E2D3C4B5A69788796A5B4C3D2E1F00F1E2D3C", false),
        ] {
            let got = read(&text.replace(&commit, bad));
            assert_eq!(got.is_ok(), ok, "{bad}: {got:?}");
            if !ok {
                let e = got.unwrap_err();
                assert!(e.contains("column `harness_commit`"), "{e}");
            }
        }
    }

    #[test]
    fn estimated_reads_from_a_bool_too() {
        #[derive(serde::Deserialize)]
        struct E {
            #[serde(deserialize_with = "super::blank_is_false")]
            e: bool,
        }
        let j: E = serde_json::from_str(r#"{"e": true}"#).unwrap();
        assert!(j.e);
        let j: E = serde_json::from_str(r#"{"e": ""}"#).unwrap();
        assert!(!j.e);
    }

    #[test]
    fn ticks_crossed_may_be_a_little_below_zero_but_not_infinite() {
        let mut r = sample();
        r.measured.crossed_ticks = Some(-0.16);
        assert_eq!(read(&csv_of(&[r.clone()])).unwrap().len(), 1);
        r.measured.crossed_ticks = Some(f64::INFINITY);
        let e = read(&csv_of(&[r])).unwrap_err();
        assert!(e.contains("column `crossed_ticks`: inf"), "{e}");
    }

    #[test]
    fn a_failed_row_may_lack_a_measurement() {
        let mut r = sample();
        r.status = super::Status::Failed;
        r.measured.lazyinit_s = None;
        assert_eq!(read(&csv_of(&[r])).unwrap().len(), 1);
    }

    #[test]
    fn a_missing_required_column_is_named() {
        let text = csv_of(&[sample()]);
        let i = COLUMNS.iter().position(|c| *c == "lazyinit_s").unwrap();
        let cut: String = text
            .lines()
            .map(|l| {
                let mut f: Vec<&str> = l.split(',').collect();
                f.remove(i);
                f.join(",") + "\n"
            })
            .collect();
        let e = read(&cut).unwrap_err();
        assert!(e.starts_with("r.csv:1: no `lazyinit_s` column"), "{e}");
    }

    #[test]
    fn an_empty_appended_value_reads_as_absent() {
        let text = csv_of(&[sample()]);
        let i = COLUMNS.iter().position(|c| *c == "estimated").unwrap();
        let blank: String = text
            .lines()
            .enumerate()
            .map(|(n, l)| {
                let mut f: Vec<&str> = l.split(',').collect();
                if n > 0 {
                    f[i] = "";
                }
                f.join(",") + "\n"
            })
            .collect();
        let rows = read(&blank).unwrap();
        assert!(!rows[0].measured.estimated);
    }
}
