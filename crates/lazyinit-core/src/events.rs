//! Typed progress events. The orchestrator emits them (the guest protocol
//! through the sink it is given); the terminal UI and the log consume
//! them. Nothing below the CLI prints.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// The phases a cell goes through, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    Queued,
    Build,
    Launch,
    Boot,
    Verify,
    Mkfs,
    Mount,
    Lazyinit,
    Collect,
    Teardown,
    Done,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = serde_json::to_value(self).ok();
        f.write_str(s.as_ref().and_then(|v| v.as_str()).unwrap_or("?"))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// A cell entered a phase.
    Phase { cell: String, phase: Phase },
    /// Lazy-init progress from the tracepoint stream.
    Groups {
        cell: String,
        done: u64,
        total: u64,
        eta_s: Option<f64>,
    },
    /// A line worth showing (kept short); full logs go to the run folder.
    Note { cell: String, message: String },
    /// A cell ended; `status` is the CSV status (ok, failed, interrupted, skipped).
    Finished {
        cell: String,
        status: String,
        lazyinit_s: Option<f64>,
        error: Option<String>,
    },
}

/// Where events go. Cloneable and cheap; a dropped receiver is not an error.
#[derive(Clone)]
pub struct EventSink {
    tx: Option<tokio::sync::mpsc::UnboundedSender<Event>>,
    /// Each cell's latest phase, shared by every clone: what an early
    /// stop asks about the rest of the matrix ([`EventSink::load_beside`]).
    phases: Arc<Mutex<BTreeMap<String, Phase>>>,
}

impl EventSink {
    pub fn new(tx: tokio::sync::mpsc::UnboundedSender<Event>) -> Self {
        Self {
            tx: Some(tx),
            phases: Arc::default(),
        }
    }
    /// A sink that drops everything (tests, library use).
    pub fn discard() -> Self {
        Self {
            tx: None,
            phases: Arc::default(),
        }
    }
    pub fn emit(&self, e: Event) {
        if let Event::Phase { cell, phase } = &e {
            if let Ok(mut p) = self.phases.lock() {
                p.insert(cell.clone(), *phase);
            }
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(e);
        }
    }
    /// The other cells of this harness whose phase will still change:
    /// queued or not yet in lazy-init (guests of another harness process
    /// on the same host are not seen).
    pub fn load_beside(&self, cell: &str) -> Load {
        let (changing, running) = self.phases.lock().map_or((0, 0), |p| {
            let others = || p.iter().filter(|(c, _)| c.as_str() != cell);
            (
                others().filter(|(_, ph)| **ph < Phase::Lazyinit).count(),
                others()
                    .filter(|(_, ph)| matches!(ph, Phase::Lazyinit | Phase::Collect))
                    .count(),
            )
        });
        Load {
            changing: u32::try_from(changing).unwrap_or(u32::MAX),
            running: u32::try_from(running).unwrap_or(u32::MAX),
        }
    }
    pub fn phase(&self, cell: &str, phase: Phase) {
        self.emit(Event::Phase {
            cell: cell.to_string(),
            phase,
        });
    }
    pub fn note(&self, cell: &str, message: impl Into<String>) {
        self.emit(Event::Note {
            cell: cell.to_string(),
            message: message.into(),
        });
    }
}

/// What the rest of a matrix does to this cell's host while it runs (the
/// early-stop estimator, `lazyinit-estimate`, widens its interval for it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Load {
    /// Other guests on the host whose phase will change before this one
    /// ends: queued, building, booting, making a filesystem, calibrating
    /// or mounting when it stops.
    pub changing: u32,
    /// Other guests in lazy-init (zeroing, or collecting) when it stops:
    /// each may end before this one does and leave the host quieter.
    pub running: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_beside_a_cell_counts_the_others_not_yet_in_lazyinit() {
        let sink = EventSink::discard();
        let clone = sink.clone();
        for (c, p) in [
            ("a", Phase::Lazyinit),
            ("b", Phase::Mkfs),
            ("c", Phase::Queued),
            ("d", Phase::Done),
        ] {
            clone.phase(c, p);
        }
        assert_eq!(sink.load_beside("a").changing, 2);
        assert_eq!(sink.load_beside("b").changing, 1);
        assert_eq!(sink.load_beside("a").running, 0);
        assert_eq!(sink.load_beside("b").running, 1);
        clone.phase("b", Phase::Lazyinit);
        assert_eq!(sink.load_beside("a").changing, 1);
        assert_eq!(sink.load_beside("a").running, 1);
    }
}
