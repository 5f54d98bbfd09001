//! Just enough QMP: quit cleanly, and stop/cont a guest (which also stops
//! its clocks: under TCG the guest TSC and the arm virtual counter follow
//! QEMU's virtual clock, so a paused guest does not see the pause).

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// Runs one QMP command (`quit`, `stop`, `cont`). Errors are reported, not
/// fatal: callers fall back to signals or carry on.
pub async fn execute(socket: &Path, command: &str, deadline: Duration) -> std::io::Result<()> {
    tokio::time::timeout(deadline, async {
        let stream = UnixStream::connect(socket).await?;
        let (r, mut w) = stream.into_split();
        let mut lines = BufReader::new(r).lines();
        lines.next_line().await?; // greeting
        w.write_all(b"{\"execute\":\"qmp_capabilities\"}\n").await?;
        lines.next_line().await?;
        w.write_all(format!("{{\"execute\":\"{command}\"}}\n").as_bytes())
            .await?;
        // The reply, skipping asynchronous events (STOP, RESUME, ...).
        while let Some(l) = lines.next_line().await? {
            if l.contains("\"return\"") || l.contains("\"error\"") {
                break;
            }
        }
        Ok(())
    })
    .await
    .map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("QMP {command} timed out"),
        )
    })?
}

pub async fn quit(socket: &Path, deadline: Duration) -> std::io::Result<()> {
    execute(socket, "quit", deadline).await
}

/// The zero-hold filter's hold on the virtual clock, read and set over
/// QMP (`qom-set /objects/<id> hold-ns`): the `ebs` calibration sets it
/// while the guest runs, as it sets the NBD server's on the real clock.
/// The value is also kept here, so `get` needs no round trip.
pub struct QmpHold {
    socket: std::path::PathBuf,
    id: String,
    ns: std::sync::atomic::AtomicU64,
    /// The noise's standard deviation, set as `jitter-ns` when it starts
    /// (the filter was opened with its seed and no jitter).
    noise_sd_ns: Option<u64>,
}

impl QmpHold {
    pub fn new(socket: &Path, id: &str, initial: Duration, noise_sd_ns: Option<u64>) -> Self {
        QmpHold {
            socket: socket.to_path_buf(),
            id: id.to_string(),
            ns: std::sync::atomic::AtomicU64::new(initial.as_nanos() as u64),
            noise_sd_ns,
        }
    }

    /// One `qom-set`, on a blocking socket (the calibration is synchronous
    /// guest-protocol code): the reply is read before returning, so the
    /// next zero request sees the new hold.
    fn qom_set(&self, property: &str, value: u64) -> std::io::Result<()> {
        let cmd = serde_json::json!({
            "execute": "qom-set",
            "arguments": {"path": format!("/objects/{}", self.id), "property": property, "value": value},
        });
        call_blocking(&self.socket, &cmd).map(|_| ())
    }
}

/// One QMP command on a blocking socket of its own (greeting, capabilities,
/// the command), each step bounded by 10 s: its `return` value, or its
/// `error` as an error. Asynchronous events before the reply are skipped.
pub fn call_blocking(
    socket: &Path,
    command: &serde_json::Value,
) -> std::io::Result<serde_json::Value> {
    use std::io::{BufRead, Write};
    let s = std::os::unix::net::UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut w = s.try_clone()?;
    let mut lines = std::io::BufReader::new(s).lines();
    let mut next = || {
        lines.next().unwrap_or_else(|| {
            Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "QMP closed",
            ))
        })
    };
    next()?; // greeting
    w.write_all(b"{\"execute\":\"qmp_capabilities\"}\n")?;
    next()?;
    w.write_all(format!("{command}\n").as_bytes())?;
    loop {
        let l = next()?;
        let mut v: serde_json::Value = serde_json::from_str(&l)
            .map_err(|e| std::io::Error::other(format!("QMP sent {l:?}: {e}")))?;
        if let Some(r) = v.get_mut("return") {
            return Ok(r.take());
        }
        if v.get("error").is_some() {
            return Err(std::io::Error::other(format!("{command}: {l}")));
        }
    }
}

impl lazyinit_core::provider::ZeroHold for QmpHold {
    fn get(&self) -> Duration {
        Duration::from_nanos(self.ns.load(std::sync::atomic::Ordering::SeqCst))
    }

    fn set(&self, hold: Duration) {
        let ns = hold.as_nanos() as u64;
        self.ns.store(ns, std::sync::atomic::Ordering::SeqCst);
        if let Err(e) = self.qom_set("hold-ns", ns) {
            // The row's z1 and its window say what came of it.
            tracing::warn!("cannot set the zero hold to {hold:?} over QMP: {e}");
        }
    }

    fn start_noise(&self) {
        let Some(sd) = self.noise_sd_ns else { return };
        if let Err(e) = self.qom_set("jitter-ns", sd) {
            // The zeroings then carry no noise: their spread in the row's
            // groups.csv shows it.
            tracing::warn!("cannot start the zero hold's noise (jitter-ns {sd}) over QMP: {e}");
        }
    }
}
