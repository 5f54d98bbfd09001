//! `twin-run CONFIG.json`: the harness on the twin as a process of its own
//! (`lazyinit_twin::harness`), so a test can kill it with SIGKILL mid-run,
//! or read its exit code. Prints every progress event as a JSON line on
//! stdout; exits as `lazyinit-bench run` does (`RunSummary::exit_code`),
//! with what was left behind on stderr.

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: twin-run CONFIG.json");
        return std::process::ExitCode::from(lazyinit_core::exit::BAD_INPUT);
    };
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let code = rt.block_on(async move {
        let cfg: lazyinit_twin::harness::HarnessConfig = match std::fs::read_to_string(&path)
            .map_err(anyhow::Error::from)
            .and_then(|t| serde_json::from_str(&t).map_err(anyhow::Error::from))
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {path}: {e}");
                return lazyinit_core::exit::BAD_INPUT;
            }
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let printer = tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{}", serde_json::to_string(&e).unwrap_or_default());
                let _ = out.flush();
            }
        });
        let cancel = Arc::new(AtomicBool::new(false));
        let events = lazyinit_core::events::EventSink::new(tx);
        let result = lazyinit_twin::harness::run(&cfg, events, cancel.clone()).await;
        let _ = printer.await;
        match result {
            Ok(o) => {
                for l in &o.summary.leaks {
                    eprintln!("error: {l}");
                }
                eprintln!("API calls (SDK): {}", o.sdk_calls);
                o.summary.exit_code(false)
            }
            // A run's own error says its code; the twin's setup is its
            // infrastructure.
            Err(e) => {
                eprintln!("error: {}", lazyinit_core::exit::chain_text(e.as_ref()));
                e.downcast_ref::<lazyinit_orchestrator::RunError>()
                    .map_or(lazyinit_core::exit::INFRASTRUCTURE, |e| {
                        lazyinit_core::exit::ExitCode::exit_code(e)
                    })
            }
        }
    });
    std::process::ExitCode::from(code)
}
