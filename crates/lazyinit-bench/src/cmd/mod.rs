//! One module per subcommand family. Each exposes clap argument types and
//! async functions returning `anyhow::Result<u8>` (the exit code on success).

pub mod cleanup;
pub mod image;
pub mod kernel;
pub mod providers;
pub mod report;
pub mod run;
pub mod ui;

/// Logs go to stderr through tracing; `RUST_LOG` overrides the level.
pub fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
