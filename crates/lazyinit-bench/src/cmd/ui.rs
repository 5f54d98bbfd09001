//! Renders orchestrator events: one indicatif line per running cell (hidden
//! off a terminal) and every event as a JSON line in the run's folder.

use std::collections::HashMap;
use std::io::Write;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use lazyinit_core::events::{Event, Phase};
use lazyinit_core::RunFolder;
use lazyinit_orchestrator::Plan;
use tokio::sync::mpsc::UnboundedReceiver;

pub fn spawn(
    mut rx: UnboundedReceiver<Event>,
    plan: &Plan,
    folder: &RunFolder,
    bars: bool,
) -> tokio::task::JoinHandle<()> {
    let (log, run_log) = (folder.events_jsonl(), folder.run_log());
    let ids: Vec<String> = plan.cells.iter().map(|c| c.id.clone()).collect();
    let width = ids.iter().map(|s| s.len()).max().unwrap_or(10);
    tokio::spawn(async move {
        // Opened at the first event: the runner creates the folder only
        // after its checks pass, so bad input leaves nothing behind.
        let mut file: Option<std::fs::File> = None;
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
        while let Some(e) = rx.recv().await {
            if file.is_none() {
                file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .ok();
                super::log_to_file(&run_log);
            }
            if let Some(f) = file.as_mut() {
                let mut v = serde_json::to_value(&e).unwrap_or_default();
                v["at"] = serde_json::Value::String(chrono_now());
                let _ = writeln!(f, "{v}");
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
    })
}

fn chrono_now() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| format!("{:.3}", d.as_secs_f64()))
        .unwrap_or_default()
}
