//! Renders orchestrator events: one indicatif line per running cell (hidden
//! off a terminal) and every event as a JSON line in the run's folder.

use std::collections::HashMap;
use std::io::Write;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use lazyinit_core::events::{Event, Phase};
use lazyinit_core::{RunFolder, RunWriter, WriteError};
use lazyinit_orchestrator::Plan;
use tokio::sync::mpsc::UnboundedReceiver;

/// Renders events until the channel closes. The task ends with the first
/// failure to keep the events (`events.jsonl`) or the log (`run.log`),
/// said on stderr when it happens; later events still reach the terminal.
pub fn spawn(
    mut rx: UnboundedReceiver<Event>,
    plan: &Plan,
    claimed: Claimed,
    bars: bool,
) -> tokio::task::JoinHandle<Option<WriteError>> {
    let mut log = EventLog {
        claimed,
        file: None,
        opened: false,
        failed: None,
    };
    let mut ui = Bars::new(plan, bars);
    tokio::spawn(async move {
        super::bars_on_stderr(bars);
        while let Some(e) = rx.recv().await {
            log.keep(&e);
            ui.show(e);
        }
        ui.total.finish();
        super::bars_on_stderr(false);
        log.failed.or_else(super::log_failure)
    })
}

/// The run's writer, given by the runner once it holds the folder.
pub type Claimed = std::sync::Arc<std::sync::Mutex<Option<RunWriter>>>;

/// `events.jsonl` (and `run.log`), opened at the first event after the
/// runner holds the folder: it creates the folder only after its checks
/// pass, so bad input leaves nothing behind.
struct EventLog {
    claimed: Claimed,
    /// `events.jsonl` and its path, once opened.
    file: Option<(std::fs::File, std::path::PathBuf)>,
    opened: bool,
    failed: Option<WriteError>,
}

impl EventLog {
    fn keep(&mut self, e: &Event) {
        let writer = match self.opened {
            false => self.claimed.lock().unwrap().clone(),
            true => None,
        };
        if let Some(w) = writer {
            self.opened = true;
            let logs = super::log_to_file(&w);
            self.file = match w.open_append(RunFolder::EVENTS_JSONL) {
                Ok(f) => Some((f, w.folder().events_jsonl().shown())),
                Err(e) => {
                    note_failure(&mut self.failed, e);
                    None
                }
            };
            if let Err(e) = logs {
                note_failure(&mut self.failed, e);
            }
        }
        if let Some((f, path)) = self.file.as_mut() {
            let mut v = serde_json::to_value(e).unwrap_or_default();
            v["at"] = serde_json::Value::String(chrono_now());
            if let Err(err) = writeln!(f, "{v}") {
                note_failure(&mut self.failed, WriteError::new(path.clone(), err));
                self.file = None;
            }
        }
    }
}

/// One bar per running cell and a total (hidden off a terminal, where
/// each event is a line on stderr instead).
struct Bars {
    mp: MultiProgress,
    style: ProgressStyle,
    total: ProgressBar,
    bar_of: HashMap<String, ProgressBar>,
    bars: bool,
}

impl Bars {
    fn new(plan: &Plan, bars: bool) -> Self {
        let width = plan.cells.iter().map(|c| c.id.len()).max().unwrap_or(10);
        let mp = MultiProgress::with_draw_target(if bars {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        });
        let style = ProgressStyle::with_template(&format!(
            "{{prefix:{width}}} {{msg:10}} [{{bar:30}}] {{pos}}/{{len}} {{elapsed_precise}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        let total = mp.add(ProgressBar::new(plan.cells.len() as u64));
        total.set_style(
            ProgressStyle::with_template(
                "{prefix} {pos}/{len} cells done, {elapsed_precise} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        total.set_prefix("total");
        Bars {
            mp,
            style,
            total,
            bar_of: HashMap::new(),
            bars,
        }
    }

    fn show(&mut self, e: Event) {
        let (mp, style, total, bars) = (&self.mp, &self.style, &self.total, self.bars);
        let cell = match &e {
            Event::Phase { cell, .. }
            | Event::Groups { cell, .. }
            | Event::Note { cell, .. }
            | Event::Finished { cell, .. } => cell.clone(),
        };
        let pb = self
            .bar_of
            .entry(cell.clone())
            .or_insert_with(|| {
                let pb = mp.insert_before(total, ProgressBar::new(1));
                pb.set_style(style.clone());
                pb.set_prefix(cell.clone());
                pb
            })
            .clone();
        match e {
            Event::Phase { phase, .. } => {
                pb.set_message(phase.to_string());
                if !bars && !matches!(phase, Phase::Queued) {
                    eprintln!("{cell}: {phase}");
                }
            }
            Event::Groups {
                done,
                total: t,
                eta_s,
                ..
            } => {
                pb.set_length(t);
                pb.set_position(done);
                if let Some(eta) = eta_s {
                    pb.set_message(format!("lazyinit ~{}s", eta.round()));
                }
            }
            Event::Note { message, .. } => {
                if bars && !message.starts_with("warning:") {
                    pb.set_message(message.chars().take(40).collect::<String>());
                } else {
                    // A warning stays on the screen, above the bars.
                    mp.suspend(|| eprintln!("{cell}: {message}"));
                }
            }
            Event::Finished {
                status,
                lazyinit_s,
                error,
                ..
            } => {
                total.inc(1);
                let what = match (lazyinit_s, &error) {
                    (Some(s), _) => format!("{status} lazyinit {s:.1}s"),
                    (None, Some(err)) => format!("{status}: {err}"),
                    (None, None) => status.clone(),
                };
                pb.finish_with_message(status.clone());
                mp.suspend(|| eprintln!("{cell}: {what}"));
            }
        }
    }
}

fn chrono_now() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| format!("{:.3}", d.as_secs_f64()))
        .unwrap_or_default()
}

/// Says a failure to keep the events or the log on stderr, at once (the
/// run goes on: its rows are what it is for), and keeps the first one for
/// the end of the run.
fn note_failure(first: &mut Option<WriteError>, e: WriteError) {
    eprintln!(
        "error: {}: the run goes on without it",
        lazyinit_core::exit::chain_text(&e)
    );
    first.get_or_insert(e);
}
