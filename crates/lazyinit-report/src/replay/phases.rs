//! What the other guests of a matrix were doing while one cell ran, from
//! the run's `events.jsonl` (every phase each cell entered, with its host
//! time): the [`Load`] a live early stop would have seen at each check.

use std::collections::BTreeMap;

use lazyinit_estimate::Load;
use serde::Deserialize;

/// Each cell's phase changes, host time order.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Phases {
    cells: BTreeMap<String, Vec<(f64, String)>>,
}

#[derive(Deserialize)]
struct Line {
    at: String,
    cell: String,
    event: String,
    #[serde(default)]
    phase: Option<String>,
}

/// Phases in which a guest's load on the host is still to change:
/// before lazy-init (a new mkfs after a missed z1 counts too).
fn changing(phase: &str) -> bool {
    matches!(
        phase,
        "queued" | "build" | "launch" | "boot" | "verify" | "mkfs" | "mount"
    )
}

impl Phases {
    /// Reads `events.jsonl` text; lines that are not phase events, or not
    /// JSON, are skipped (a run cut short may end in half a line).
    pub fn parse(text: &str) -> Phases {
        let mut cells: BTreeMap<String, Vec<(f64, String)>> = BTreeMap::new();
        for l in text.lines() {
            let Ok(l) = serde_json::from_str::<Line>(l) else {
                continue;
            };
            let (Some(phase), Ok(at)) = (l.phase, l.at.parse::<f64>()) else {
                continue;
            };
            if l.event == "phase" {
                cells.entry(l.cell).or_default().push((at, phase));
            }
        }
        for v in cells.values_mut() {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Phases { cells }
    }

    /// When `cell` last entered lazy-init (its measured mount), host time.
    pub fn lazyinit_at(&self, cell: &str) -> Option<f64> {
        self.cells
            .get(cell)?
            .iter()
            .rev()
            .find(|(_, p)| p == "lazyinit")
            .map(|(t, _)| *t)
    }

    /// The other cells still to change phase at host time `at`, and
    /// those in lazy-init then (as `EventSink::load_beside` counts them).
    pub fn load_at(&self, cell: &str, at: f64) -> Load {
        let now: Vec<&str> = self
            .cells
            .iter()
            .filter(|(c, _)| c.as_str() != cell)
            .filter_map(|(_, v)| v.iter().rev().find(|(t, _)| *t <= at))
            .map(|(_, p)| p.as_str())
            .collect();
        let count = |f: fn(&str) -> bool| {
            u32::try_from(now.iter().filter(|p| f(p)).count()).unwrap_or(u32::MAX)
        };
        Load {
            changing: count(changing),
            running: count(|p| matches!(p, "lazyinit" | "collect")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENTS: &str = r#"{"at":"100.0","cell":"a","event":"phase","phase":"queued"}
{"at":"100.0","cell":"b","event":"phase","phase":"queued"}
{"at":"100.0","cell":"c","event":"phase","phase":"queued"}
{"at":"110.0","cell":"a","event":"phase","phase":"mkfs"}
{"at":"120.0","cell":"a","event":"phase","phase":"lazyinit"}
{"at":"121.0","cell":"a","event":"note","message":"hi"}
{"at":"125.0","cell":"b","event":"phase","phase":"lazyinit"}
{"at":"130.0","cell":"a","event":"phase","phase":"mkfs"}
{"at":"140.0","cell":"a","event":"phase","phase":"lazyinit"}
{"at":"500.0","cell":"c","event":"phase","phase":"mkfs"}
{"at":"600.0","cell":"c","event":"phase","phase":"lazyinit"}
{"at":"60"#;

    #[test]
    fn the_other_cells_before_lazyinit_count_as_changing() {
        let p = Phases::parse(EVENTS);
        // The measured mount is the last lazy-init (after a new mkfs).
        assert_eq!(p.lazyinit_at("a"), Some(140.0));
        assert_eq!(p.lazyinit_at("nope"), None);
        // At 141 s: b in lazy-init, c queued.
        let load = |changing, running| Load { changing, running };
        assert_eq!(p.load_at("a", 141.0), load(1, 1));
        // At 123 s: b still queued, c queued.
        assert_eq!(p.load_at("a", 123.0), load(2, 0));
        // At 700 s every other cell is in lazy-init.
        assert_eq!(p.load_at("a", 700.0), load(0, 2));
        // b at 126 s: a in lazy-init, c queued.
        assert_eq!(p.load_at("b", 126.0), load(1, 1));
    }
}
