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
