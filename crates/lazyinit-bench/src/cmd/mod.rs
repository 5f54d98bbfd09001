//! One module per subcommand family. Each exposes clap argument types and
//! async functions returning `anyhow::Result<u8>` (the exit code on success).

pub mod bisect;
pub mod cleanup;
pub mod history;
pub mod image;
pub mod kcidb;
pub mod kernel;
pub mod merge;
pub mod providers;
pub mod publish;
pub mod qemu;
pub mod replay;
pub mod report;
pub mod run;
pub mod ui;

/// Where log lines go: to stderr (at the `-v`/`RUST_LOG` level) unless
/// progress bars are drawn there, and, once a run has a results folder, to
/// its `run.log` (at info level or `RUST_LOG`), so a log line never breaks
/// the bars and is never lost.
struct LogRoute {
    /// `run.log` and its path, once a run has a folder.
    file: std::sync::Mutex<Option<(std::fs::File, std::path::PathBuf)>>,
    bars: std::sync::atomic::AtomicBool,
    /// The first write to `run.log` that failed (the log goes on to
    /// stderr alone): said once, and at the end of the run.
    failed: std::sync::Mutex<Option<lazyinit_core::WriteError>>,
}

static ROUTE: LogRoute = LogRoute {
    file: std::sync::Mutex::new(None),
    bars: std::sync::atomic::AtomicBool::new(false),
    failed: std::sync::Mutex::new(None),
};

/// From now on, log lines also go to the run's `run.log` (appended).
pub fn log_to_file(run: &lazyinit_core::RunWriter) -> Result<(), lazyinit_core::WriteError> {
    let f = run.open_append(lazyinit_core::RunFolder::RUN_LOG)?;
    *ROUTE.file.lock().unwrap() = Some((f, run.folder().run_log().shown()));
    Ok(())
}

/// The write to `run.log` that failed, if one did.
pub fn log_failure() -> Option<lazyinit_core::WriteError> {
    ROUTE.failed.lock().unwrap().take()
}

/// While bars are drawn on stderr, log lines go only to the run's log.
pub fn bars_on_stderr(on: bool) {
    ROUTE.bars.store(on, std::sync::atomic::Ordering::SeqCst);
}

struct StderrUnlessBars;
struct RunLog;

impl std::io::Write for StderrUnlessBars {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !ROUTE.bars.load(std::sync::atomic::Ordering::SeqCst) {
            std::io::stderr().write_all(buf)?;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl std::io::Write for RunLog {
    /// A line that cannot be written stops the log file (its lines still
    /// reach stderr at its level) and is said once on stderr.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut file = ROUTE.file.lock().unwrap();
        if let Some((f, path)) = file.as_mut() {
            if let Err(e) = f.write_all(buf) {
                let e = lazyinit_core::WriteError::new(path.clone(), e);
                eprintln!(
                    "error: {}: the run goes on without it",
                    lazyinit_core::exit::chain_text(&e)
                );
                ROUTE.failed.lock().unwrap().get_or_insert(e);
                *file = None;
            }
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Logs go through tracing; `RUST_LOG` overrides the levels.
pub fn init_logging(verbose: u8) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{fmt, EnvFilter, Layer};
    // The SDK warns once per credential source it tries and per retry, each
    // a debug dump: the harness's own error says what failed, in one line.
    let default = match verbose {
        0 => "warn,aws_config=error,aws_smithy_runtime=error",
        1 => "info,aws_config=error,aws_smithy_runtime=error",
        2 => "debug",
        _ => "trace",
    };
    let stderr_filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let file_filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(if verbose >= 2 { default } else { "info" }));
    let _ = tracing_subscriber::registry()
        .with(
            fmt::layer()
                .with_writer(|| StderrUnlessBars)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_target(false)
                .with_filter(stderr_filter),
        )
        .with(
            fmt::layer()
                .with_writer(|| RunLog)
                .with_ansi(false)
                .with_filter(file_filter),
        )
        .try_init();
}
