//! CSV: one row per cell, for spreadsheets and scripts. Ratios and failures
//! are in the JSON and markdown outputs.

use crate::cells::CellKey;
use crate::report::Report;
use lazyinit_core::identity::KeyField;

/// After the cell key's columns (with `volume`, the size in words, after
/// `volume_bytes`).
const STATS: &[&str] = &[
    "metric",
    "n",
    "failed",
    "mean",
    "median",
    "stddev",
    "min",
    "max",
    "cv",
    "ci95_lo",
    "ci95_hi",
    "sleep_ticks",
    "model",
    "model_basis",
    "reported",
    "reported_diff_pct",
    "estimated",
    "estimate_groups",
    "pi95_lo",
    "pi95_hi",
    "model_ticks_only",
    "crossed_ticks",
];

/// Every column of a report of `fields` (`CellKey::shown_fields`), in order.
pub fn header(fields: &[&KeyField]) -> Vec<&'static str> {
    let names: Vec<&'static str> = fields.iter().map(|f| f.column).collect();
    let mut h = with_volume(&names, names.clone(), "volume");
    h.extend_from_slice(STATS);
    h
}

/// `volume` right after `volume_bytes`.
fn with_volume<T>(names: &[&str], mut key: Vec<T>, volume: T) -> Vec<T> {
    let at = names
        .iter()
        .position(|c| *c == "volume_bytes")
        .expect("the key has volume_bytes")
        + 1;
    key.insert(at, volume);
    key
}

fn opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.6}")).unwrap_or_default()
}

pub fn render(report: &Report) -> String {
    let fields = CellKey::shown_fields(report.cells.iter().map(|c| &c.key));
    let names: Vec<&str> = fields.iter().map(|f| f.column).collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(header(&fields)).expect("writing to memory");
    for c in &report.cells {
        let k = &c.key;
        let s = c.summary.as_ref();
        let ticks: Vec<String> = c.sleep_ticks.iter().map(u64::to_string).collect();
        let mut rec = with_volume(&names, k.values_of(&fields), k.volume().to_string());
        rec.extend([
            report.metric.name().to_string(),
            s.map_or(0, |s| s.n).to_string(),
            c.failed.to_string(),
            opt(s.map(|s| s.mean)),
            opt(s.map(|s| s.median)),
            opt(s.and_then(|s| s.stddev)),
            opt(s.map(|s| s.min)),
            opt(s.map(|s| s.max)),
            opt(s.and_then(|s| s.cv)),
            opt(s.and_then(|s| s.ci95).map(|i| i.lo)),
            opt(s.and_then(|s| s.ci95).map(|i| i.hi)),
            ticks.join(";"),
            opt(Some(c.model.value)),
            c.model.basis.clone(),
            opt(c.reported.as_ref().map(|r| r.value)),
            opt(c.reported.as_ref().map(|r| r.diff_pct)),
            k.estimated.to_string(),
            c.estimate_groups
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(";"),
            opt(c.prediction.map(|p| p.lo)),
            opt(c.prediction.map(|p| p.hi)),
            opt(Some(c.model.ticks_only)),
            opt(c.model.crossed_ticks),
        ]);
        w.write_record(&rec).expect("writing to memory");
    }
    String::from_utf8(w.into_inner().expect("flushing memory")).expect("CSV of UTF-8 fields")
}
