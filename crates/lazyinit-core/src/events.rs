//! Typed progress events. The orchestrator emits them (the guest protocol
//! through the sink it is given); the terminal UI and the log consume
//! them. Nothing below the CLI prints.

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
}

impl EventSink {
    pub fn new(tx: tokio::sync::mpsc::UnboundedSender<Event>) -> Self {
        Self { tx: Some(tx) }
    }
    /// A sink that drops everything (tests, library use).
    pub fn discard() -> Self {
        Self { tx: None }
    }
    pub fn emit(&self, e: Event) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(e);
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
