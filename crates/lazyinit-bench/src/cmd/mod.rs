//! One module per subcommand family. Each exposes clap argument types and
//! async functions returning `anyhow::Result<u8>` (the exit code on success).

pub mod bisect;
pub mod cleanup;
pub mod image;
pub mod kcidb;
pub mod kernel;
pub mod providers;
pub mod replay;
pub mod report;
pub mod run;
pub mod ui;

/// Where log lines go: to stderr (at the `-v`/`RUST_LOG` level) unless
/// progress bars are drawn there, and, once a run has a results folder, to
/// its `run.log` (at info level or `RUST_LOG`), so a log line never breaks
/// the bars and is never lost.
struct LogRoute {
    file: std::sync::Mutex<Option<std::fs::File>>,
    bars: std::sync::atomic::AtomicBool,
}

static ROUTE: LogRoute = LogRoute {
    file: std::sync::Mutex::new(None),
    bars: std::sync::atomic::AtomicBool::new(false),
};

/// From now on, log lines also go to `path` (appended).
pub fn log_to_file(path: &std::path::Path) {
    if let Ok(f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        *ROUTE.file.lock().unwrap() = Some(f);
    }
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
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(f) = ROUTE.file.lock().unwrap().as_mut() {
            f.write_all(buf)?;
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
    let default = match verbose {
        0 => "warn",
        1 => "info",
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
