//! Reading result CSVs (and the per-run raw files beside them).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use lazyinit_core::results::{read_rows, ResultRow, ResultsError};

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
    /// `<results dir>/<cell_id>/groups.csv`: trace timestamps per group.
    pub fn groups_csv(&self) -> PathBuf {
        self.results_dir.join(&self.row.cell_id).join("groups.csv")
    }
}

/// Reads every file; a row seen twice (same run, cell and start time) is
/// refused, since counting it twice would shrink the intervals.
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
            out.push(LoadedRow {
                row,
                results_dir: dir.clone(),
            });
        }
    }
    if out.is_empty() {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(InputError::NoRows(names.join(", ")));
    }
    Ok(out)
}

/// Per-group cycle times of one run, from its `groups.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cycles {
    pub cell_id: String,
    /// Milliseconds between consecutive groups' trace events.
    pub ms: Vec<f64>,
}

/// Parses `group,t_s` (and `group,t_s,zero_ms`, which runs write since
/// zeroings are timed) and returns the gaps between consecutive events in
/// trace order. Errors name the line.
pub fn parse_groups(text: &str) -> Result<Vec<f64>, String> {
    let mut rdr = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let headers = rdr.headers().map_err(|e| e.to_string())?.clone();
    let h: Vec<&str> = headers.iter().collect();
    if h != ["group", "t_s"] && h != ["group", "t_s", "zero_ms"] {
        return Err("line 1: header must be `group,t_s` or `group,t_s,zero_ms`".into());
    }
    let mut times = Vec::new();
    for rec in rdr.records() {
        let rec = rec.map_err(|e| e.to_string())?;
        let line = rec.position().map(|p| p.line()).unwrap_or(0);
        let t: f64 = rec
            .get(1)
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("line {line}: t_s is not a number"))?;
        times.push(t);
    }
    Ok(times.windows(2).map(|w| (w[1] - w[0]) * 1000.0).collect())
}

/// The text of a run's `groups.csv`, or of `groups.csv.gz` where a
/// published run keeps it compressed; None when neither exists.
pub fn read_groups(csv: &Path) -> Option<std::io::Result<String>> {
    if csv.exists() {
        return Some(std::fs::read_to_string(csv));
    }
    let gz = csv.with_extension("csv.gz");
    if !gz.exists() {
        return None;
    }
    Some(std::fs::File::open(&gz).and_then(|f| {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(f), &mut text)?;
        Ok(text)
    }))
}

/// Cycle series of every row that has a `groups.csv` (or `.csv.gz`);
/// absent files are skipped silently, unreadable ones are returned as
/// warnings.
pub fn load_cycles(rows: &[LoadedRow]) -> (Vec<Cycles>, Vec<String>) {
    let (mut series, mut warnings) = (Vec::new(), Vec::new());
    for r in rows {
        let path = r.groups_csv();
        let text = match read_groups(&path) {
            None => continue,
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                warnings.push(format!(
                    "{}: {e}; left out of the cycle plot",
                    path.display()
                ));
                continue;
            }
        };
        match parse_groups(&text) {
            Ok(ms) => series.push(Cycles {
                cell_id: r.row.cell_id.clone(),
                ms,
            }),
            Err(e) => warnings.push(format!(
                "{}: {e}; left out of the cycle plot",
                path.display()
            )),
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
        let plain = dir.path().join("groups.csv");
        assert!(read_groups(&plain).is_none());
        let text = "group,t_s,zero_ms\n0,1.0,3.4\n1,1.04,3.3\n";
        let mut gz = flate2::write::GzEncoder::new(
            std::fs::File::create(dir.path().join("groups.csv.gz")).unwrap(),
            flate2::Compression::default(),
        );
        gz.write_all(text.as_bytes()).unwrap();
        gz.finish().unwrap();
        assert_eq!(read_groups(&plain).unwrap().unwrap(), text);
        std::fs::write(&plain, "group,t_s\n").unwrap();
        assert_eq!(read_groups(&plain).unwrap().unwrap(), "group,t_s\n");
    }

    #[test]
    fn cycles_are_gaps_in_ms() {
        let ms = parse_groups("group,t_s\n0,10.0\n1,10.11\n2,10.22\n").unwrap();
        assert_eq!(ms.len(), 2);
        assert!((ms[0] - 110.0).abs() < 1e-9 && (ms[1] - 110.0).abs() < 1e-9);
        assert!(parse_groups("g,t\n").is_err());
        let timed = parse_groups("group,t_s,zero_ms\n0,10.0,3.412\n1,10.04,\n").unwrap();
        assert_eq!(timed.len(), 1);
        assert!((timed[0] - 40.0).abs() < 1e-9);
        let e = parse_groups("group,t_s\n0,1.0\n1,x\n").unwrap_err();
        assert!(e.starts_with("line 3:"), "{e}");
    }
}
