//! Reading result CSVs (and the per-run raw files beside them).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use lazyinit_core::results::{read_rows, ResultRow, ResultsError};
use lazyinit_core::{CellFolder, RunFolder};

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Read(#[from] ResultsError),
    #[error(
        "no result rows in {0}: pass the results.csv of a run that has finished at least one cell"
    )]
    NoRows(String),
    #[error("{path}:{line}: row {run_id}/{cell_id} already read from {first}: pass each results file once")]
    Duplicate {
        path: PathBuf,
        line: usize,
        run_id: String,
        cell_id: String,
        first: String,
    },
}

/// A row and the folder of the CSV it came from (raw files live there).
#[derive(Debug, Clone)]
pub struct LoadedRow {
    pub row: ResultRow,
    pub results_dir: PathBuf,
}

impl LoadedRow {
    /// The folder of the row's cell, beside its CSV: its raw files (a
    /// rerun cell's folder holds its latest run).
    pub fn cell_folder(&self) -> CellFolder {
        RunFolder::new(&self.results_dir).cell(&self.row.cell_id)
    }

    /// Trace timestamps per group (or `groups.csv.gz` beside it; see
    /// [`LoadedRow::groups`]).
    pub fn groups_csv(&self) -> lazyinit_core::RunFile {
        self.cell_folder().groups_csv()
    }

    /// The run's per-group trace ([`cell_groups`]). `Ok(None)` when it
    /// kept none.
    pub fn groups(&self) -> Result<Option<Groups>, String> {
        cell_groups(&self.cell_folder())
    }
}

/// A cell's per-group trace ([`read_groups`], [`parse_groups`]); `Ok(None)`
/// when it kept none. An error names the file that was read.
pub fn cell_groups(cell: &CellFolder) -> Result<Option<Groups>, String> {
    let text = read_groups(cell);
    let read = match cell.groups_csv().exists() {
        true => cell.groups_csv(),
        false => cell.groups_csv_gz(),
    };
    match text {
        None => Ok(None),
        Some(text) => text
            .map_err(|e| e.to_string())
            .and_then(|t| parse_groups(&t))
            .map(Some)
            .map_err(|e| format!("{}: {e}", read.display())),
    }
}

impl LoadedRow {
    /// Rows written before the `crossed_ticks` column: count it, at the
    /// row's L, from the cell's per-group data when that is beside the CSV (an unreadable
    /// file leaves it unknown; the cycle plot names the file).
    fn fill_crossed_ticks(&mut self) {
        let m = &self.row.measured;
        if m.crossed_ticks.is_some() || m.estimated {
            return;
        }
        let Some(l) = m.sleep_ticks else { return };
        if let Ok(Some(g)) = self.groups() {
            let spans = lazyinit_core::ticks::spans(&g.t_s, &g.zero_s);
            if let Some(c) = lazyinit_core::ticks::count(&spans, self.row.axes.hz.get()) {
                // As the guest counts it, at the row's L.
                self.row.measured.crossed_ticks = Some(c.crossed_at(l));
            }
        }
    }
}

/// Reads every file; a row seen twice (same run, cell and start time) is
/// refused, since counting it twice would shrink the intervals.
/// The rows of a run's folder, as [`load`] reads them.
pub fn load_run(run: &RunFolder) -> Result<Vec<LoadedRow>, InputError> {
    load(&[run.results_csv().shown()])
}

pub fn load(paths: &[PathBuf]) -> Result<Vec<LoadedRow>, InputError> {
    let mut out = Vec::new();
    let mut seen: HashMap<(String, String, String), String> = HashMap::new();
    for path in paths {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        for (i, row) in read_rows(path)?.into_iter().enumerate() {
            let id = (
                row.run_id.clone(),
                row.cell_id.clone(),
                row.started_at.clone(),
            );
            if let Some(first) = seen.get(&id) {
                return Err(InputError::Duplicate {
                    path: path.clone(),
                    // Header is line 1; rows hold no embedded newlines in practice.
                    line: i + 2,
                    run_id: row.run_id,
                    cell_id: row.cell_id,
                    first: first.clone(),
                });
            }
            seen.insert(id, path.display().to_string());
            let mut loaded = LoadedRow {
                row,
                results_dir: dir.clone(),
            };
            loaded.fill_crossed_ticks();
            out.push(loaded);
        }
    }
    if out.is_empty() {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(InputError::NoRows(names.join(", ")));
    }
    Ok(out)
}

/// One run's `groups.csv`: each group's trace event, in trace order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Groups {
    /// Event times, trace clock, seconds.
    pub t_s: Vec<f64>,
    /// Zeroing times, seconds (`group,t_s,zero_ms`; none in older files).
    pub zero_s: Vec<Option<f64>>,
}

impl Groups {
    /// The traced zeroing times, milliseconds, in group order (groups
    /// without one left out).
    pub fn zeroings_ms(&self) -> Vec<f64> {
        self.zero_s.iter().flatten().map(|z| z * 1000.0).collect()
    }

    /// Milliseconds between consecutive groups' events.
    pub fn cycles_ms(&self) -> Vec<f64> {
        self.t_s
            .windows(2)
            .map(|w| (w[1] - w[0]) * 1000.0)
            .collect()
    }
}

/// Per-group cycle times of one run, from its `groups.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cycles {
    /// The run's cell, and for an estimate how many groups it traced.
    pub cell_id: String,
    /// The cell's configuration: the plot's panels and colours.
    pub key: crate::cells::CellKey,
    /// The sleep L the run measured (its reference lines), if known.
    pub sleep_ticks: Option<u64>,
    /// Milliseconds between consecutive groups' trace events.
    pub ms: Vec<f64>,
}

/// Parses `group,t_s` or `group,t_s,zero_ms` (an empty zero_ms is
/// unknown). Errors name the line.
pub fn parse_groups(text: &str) -> Result<Groups, String> {
    let mut rdr = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let headers = rdr.headers().map_err(|e| e.to_string())?.clone();
    let h: Vec<&str> = headers.iter().collect();
    if h != ["group", "t_s"] && h != ["group", "t_s", "zero_ms"] {
        return Err("line 1: header must be `group,t_s` or `group,t_s,zero_ms`".into());
    }
    let mut g = Groups::default();
    for rec in rdr.records() {
        let rec = rec.map_err(|e| e.to_string())?;
        let line = rec.position().map(|p| p.line()).unwrap_or(0);
        let t: f64 = rec
            .get(1)
            .and_then(|s| s.trim().parse().ok())
            .filter(|t: &f64| t.is_finite())
            .ok_or_else(|| format!("line {line}: t_s is not a finite number"))?;
        let z = match rec.get(2).map(str::trim) {
            None | Some("") => None,
            Some(z) => Some(
                z.parse::<f64>()
                    .ok()
                    .filter(|z| z.is_finite() && *z >= 0.0)
                    .ok_or_else(|| format!("line {line}: zero_ms is not a number >= 0"))?
                    / 1000.0,
            ),
        };
        g.t_s.push(t);
        g.zero_s.push(z);
    }
    Ok(g)
}

/// The text of a cell's `groups.csv`, or of `groups.csv.gz` where a
/// published run keeps it compressed; None when neither exists.
pub fn read_groups(cell: &CellFolder) -> Option<std::io::Result<String>> {
    let csv = cell.groups_csv();
    use lazyinit_core::input::{read_limited, MAX_GROUPS_BYTES};
    if csv.exists() {
        return Some(csv.read_text_bounded(MAX_GROUPS_BYTES, &CellFolder::GROUPS_CSV.to_string()));
    }
    let gz = cell.groups_csv_gz();
    if !gz.exists() {
        return None;
    }
    // Bounded twice (issue 41): the compressed file, and what it unpacks to.
    Some(
        gz.open_bounded(MAX_GROUPS_BYTES, &CellFolder::GROUPS_CSV_GZ.to_string())
            .and_then(|f| {
                read_limited(
                    flate2::read::GzDecoder::new(f),
                    MAX_GROUPS_BYTES,
                    &format!("{} unpacked", CellFolder::GROUPS_CSV_GZ),
                )
            })
            .and_then(|b| {
                String::from_utf8(b).map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "stream did not contain valid UTF-8",
                    )
                })
            }),
    )
}

/// Cycle series of every row that has per-group data; absent files are
/// skipped silently, unreadable ones are returned as warnings. An
/// estimate's series is its first groups only, and its name says so.
pub fn load_cycles(rows: &[LoadedRow]) -> (Vec<Cycles>, Vec<String>) {
    let (mut series, mut warnings) = (Vec::new(), Vec::new());
    for r in rows {
        match r.groups() {
            Ok(None) => {}
            Ok(Some(g)) => series.push(Cycles {
                cell_id: if r.row.measured.estimated {
                    format!(
                        "{} (estimate: first {} groups traced)",
                        r.row.cell_id,
                        g.t_s.len()
                    )
                } else {
                    r.row.cell_id.clone()
                },
                key: crate::cells::CellKey::of(&r.row),
                sleep_ticks: r.row.measured.sleep_ticks,
                ms: g.cycles_ms(),
            }),
            Err(e) => warnings.push(format!("{e}; left out of the cycle plot")),
        }
    }
    (series, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_groups_read_like_plain_ones() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let cell = CellFolder::at(dir.path());
        let plain = cell.groups_csv().shown();
        assert!(read_groups(&cell).is_none());
        let text = "group,t_s,zero_ms\n0,1.0,3.4\n1,1.04,3.3\n";
        let mut gz = flate2::write::GzEncoder::new(
            std::fs::File::create(cell.groups_csv_gz().shown()).unwrap(),
            flate2::Compression::default(),
        );
        gz.write_all(text.as_bytes()).unwrap();
        gz.finish().unwrap();
        assert_eq!(read_groups(&cell).unwrap().unwrap(), text);
        std::fs::write(&plain, "group,t_s\n").unwrap();
        assert_eq!(read_groups(&cell).unwrap().unwrap(), "group,t_s\n");
    }

    #[test]
    fn cycles_are_gaps_in_ms() {
        let ms = parse_groups("group,t_s\n0,10.0\n1,10.11\n2,10.22\n")
            .unwrap()
            .cycles_ms();
        assert_eq!(ms.len(), 2);
        assert!((ms[0] - 110.0).abs() < 1e-9 && (ms[1] - 110.0).abs() < 1e-9);
        assert!(parse_groups("g,t\n").is_err());
        let e = parse_groups("group,t_s\n0,1.0\n1,x\n").unwrap_err();
        assert!(e.starts_with("line 3:"), "{e}");
    }

    #[test]
    fn zeroing_times_are_read_when_there() {
        let g = parse_groups("group,t_s,zero_ms\n1,13.000000,3.500\n2,13.110000,\n").unwrap();
        assert_eq!(g.t_s, [13.0, 13.11]);
        assert_eq!(g.zero_s, [Some(0.0035), None]);
        assert!(parse_groups("group,t_s,zero_ms\n1,1.0,x\n").is_err());
    }

    #[test]
    fn older_rows_get_their_crossed_ticks_from_groups_csv() {
        let dir = tempfile::tempdir().unwrap();
        let mut row = crate::cells::tests_support::row("debian-6.1", 60.0);
        row.cell_id = "c".into();
        row.measured.crossed_ticks = None;
        // HZ=100, L=10: zeroings of 3 ms start 0.5 ms after a tick; every
        // fourth wakes 7.5 ms late and crosses one, so cycles are 11 or 12
        // ticks, a quarter of a tick crossed on average.
        let (tick, mut j) = (0.01, 100i64);
        let mut text = String::from("group,t_s,zero_ms\n");
        for g in 0..200 {
            let start = j as f64 * tick + 0.0005 + if g % 4 == 0 { 0.0075 } else { 0.0 };
            let end = start + 0.003;
            text.push_str(&format!("{g},{end:.6},3.000\n"));
            j = (end / tick).floor() as i64 + 1 + 10;
        }
        std::fs::create_dir(dir.path().join("c")).unwrap();
        std::fs::write(dir.path().join("c/groups.csv"), &text).unwrap();
        let mut l = LoadedRow {
            row,
            results_dir: dir.path().to_path_buf(),
        };
        l.fill_crossed_ticks();
        let c = l.row.measured.crossed_ticks.unwrap();
        assert!((c - 0.25).abs() < 0.02, "{c}");
        // A row that has the column keeps it; one without L gets none.
        l.row.measured.crossed_ticks = Some(9.0);
        l.fill_crossed_ticks();
        assert_eq!(l.row.measured.crossed_ticks, Some(9.0));
        l.row.measured.crossed_ticks = None;
        l.row.measured.sleep_ticks = None;
        l.fill_crossed_ticks();
        assert_eq!(l.row.measured.crossed_ticks, None);
    }

    #[test]
    fn groups_csv_gz_is_read_like_groups_csv() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let mut row = crate::cells::tests_support::row("debian-6.1", 60.0);
        row.cell_id = "c".into();
        let l = LoadedRow {
            row,
            results_dir: dir.path().to_path_buf(),
        };
        assert_eq!(l.groups(), Ok(None));
        std::fs::create_dir(dir.path().join("c")).unwrap();
        let text = "group,t_s,zero_ms\n1,10.0,3.4\n2,10.11,3.4\n";
        let f = std::fs::File::create(dir.path().join("c/groups.csv.gz")).unwrap();
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::best());
        gz.write_all(text.as_bytes()).unwrap();
        gz.finish().unwrap();
        assert_eq!(l.groups().unwrap().unwrap(), parse_groups(text).unwrap());
        std::fs::write(dir.path().join("c/groups.csv.gz"), "not gzip").unwrap();
        assert!(l.groups().unwrap_err().contains("groups.csv.gz"));
    }
}
