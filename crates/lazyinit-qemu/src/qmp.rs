//! Just enough QMP to ask QEMU to quit cleanly.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// Sends `qmp_capabilities` then `quit`. Errors are reported, not fatal:
/// the caller falls back to signals.
pub async fn quit(socket: &Path, deadline: Duration) -> std::io::Result<()> {
    tokio::time::timeout(deadline, async {
        let stream = UnixStream::connect(socket).await?;
        let (r, mut w) = stream.into_split();
        let mut lines = BufReader::new(r).lines();
        lines.next_line().await?; // greeting
        w.write_all(b"{\"execute\":\"qmp_capabilities\"}\n").await?;
        lines.next_line().await?;
        w.write_all(b"{\"execute\":\"quit\"}\n").await?;
        let _ = lines.next_line().await;
        Ok(())
    })
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "QMP quit timed out"))?
}
