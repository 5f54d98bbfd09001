//! Renders orchestrator events: one indicatif line per running cell (hidden
//! off a terminal) and every event as a JSON line in the run's folder.

use std::collections::HashMap;
use std::io::Write;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use lazyinit_core::events::{Event, Phase};
use lazyinit_core::{RunFolder, WriteError};
use lazyinit_orchestrator::Plan;
use tokio::sync::mpsc::UnboundedReceiver;

/// Renders events until the channel closes. The task ends with the first
/// failure to keep the events (`events.jsonl`) or the log (`run.log`),
/// said on stderr when it happens; later events still reach the terminal.
pub fn spawn(
    mut rx: UnboundedReceiver<Event>,
    plan: &Plan,
    folder: &RunFolder,
    bars: bool,
) -> tokio::task::JoinHandle<Option<WriteError>> {
    let folder = folder.clone();
    let ids: Vec<String> = plan.cells.iter().map(|c| c.id.clone()).collect();
    let width = ids.iter().map(|s| s.len()).max().unwrap_or(10);
    tokio::spawn(async move {
        // Opened at the first event: the runner creates the folder only
        // after its checks pass, so bad input leaves nothing behind.
        let mut file: Option<std::fs::File> = None;
        let mut failed: Option<WriteError> = None;
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
        let total = mp.add(ProgressBar::new(ids.len() as u64));
        total.set_style(
            ProgressStyle::with_template(
                "{prefix} {pos}/{len} cells done, {elapsed_precise} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        total.set_prefix("total");
        let mut bar_of: HashMap<String, ProgressBar> = HashMap::new();
        super::bars_on_stderr(bars);
        let mut opened = false;
        while let Some(e) = rx.recv().await {
            if !opened {
                opened = true;
                let logs = super::log_to_file(&folder);
                file = folder
                    .open_append(RunFolder::EVENTS_JSONL)
                    .map_err(|e| note_failure(&mut failed, e))
                    .ok();
                if let Err(e) = logs {
                    note_failure(&mut failed, e);
                }
            }
            if let Some(f) = file.as_mut() {
                let mut v = serde_json::to_value(&e).unwrap_or_default();
                v["at"] = serde_json::Value::String(chrono_now());
                if let Err(err) = writeln!(f, "{v}") {
                    note_failure(&mut failed, WriteError::new(folder.events_jsonl(), err));
                    file = None;
                }
            }
            let cell = match &e {
                Event::Phase { cell, .. }
                | Event::Groups { cell, .. }
                | Event::Note { cell, .. }
                | Event::Finished { cell, .. } => cell.clone(),
            };
            let pb = bar_of
                .entry(cell.clone())
                .or_insert_with(|| {
                    let pb = mp.insert_before(&total, ProgressBar::new(1));
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
                    if bars {
                        pb.set_message(message.chars().take(40).collect::<String>());
                    } else {
                        eprintln!("{cell}: {message}");
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
        total.finish();
        super::bars_on_stderr(false);
        failed.or_else(super::log_failure)
    })
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
