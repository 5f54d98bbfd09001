use std::path::PathBuf;
use std::time::Duration;

use lazyinit_core::exit::{self, ExitCode, ExitError};

/// One variant per stage, so a caller (and a reader of the log) knows how far
/// a connection got. Messages say what failed; the source says why.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("cannot create the project's SSH keys")]
    MissingTool(#[source] ExitError),
    #[error("cannot {action} {}", path.display())]
    KeyFile {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{tool}` failed to generate a key: {stderr}")]
    KeyGen { tool: &'static str, stderr: String },
    #[error("{} is not a usable key file: {reason}; delete the directory {} to regenerate the project keys", path.display(), path.parent().map(|p| p.display().to_string()).unwrap_or_default())]
    BadKeyFile { path: PathBuf, reason: String },

    #[error("cannot connect to {addr}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("SSH handshake with {addr} failed")]
    Handshake {
        addr: String,
        #[source]
        source: ssh2::Error,
    },
    #[error("{addr} sent no host key")]
    NoHostKey { addr: String },
    #[error(
        "host key of {addr} does not match the pinned key in {}: expected {expected}, seen {seen}; \
         refusing to connect (is this the guest booted with our initramfs?)",
        known_hosts.display()
    )]
    HostKeyMismatch {
        addr: String,
        known_hosts: PathBuf,
        expected: String,
        seen: String,
    },
    #[error("public-key authentication as `{user}` on {addr} failed")]
    Auth {
        user: String,
        addr: String,
        #[source]
        source: ssh2::Error,
    },
    #[error("cannot run `{}` on {addr}", short(.cmd))]
    Exec {
        cmd: String,
        addr: String,
        #[source]
        source: ssh2::Error,
    },
    #[error("lost the connection while running `{}` on {addr}", short(.cmd))]
    Io {
        cmd: String,
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{}` on {addr} did not finish within {timeout:?}", short(.cmd))]
    Timeout {
        cmd: String,
        addr: String,
        timeout: Duration,
    },
    #[error("`{}` on {addr} exited with status {status}{}", short(.cmd), fmt_stderr(.stderr))]
    ExitStatus {
        cmd: String,
        addr: String,
        status: i32,
        stderr: String,
    },
    /// The caller's cancel flag was set while the command ran: the channel
    /// is closed without waiting for the command (a Ctrl-C during an mkfs
    /// of 3 TiB must not wait for it).
    #[error("`{cmd}` on {addr} was cancelled")]
    Cancelled { cmd: String, addr: String },
    #[error("cannot read {} for upload", path.display())]
    UploadSource {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the machine behind {addr} stopped while waiting for SSH")]
    MachineDied { addr: String },
    #[error("SSH on {addr} was not ready after {waited:?}")]
    NotReady {
        addr: String,
        waited: Duration,
        #[source]
        last: Box<SshError>,
    },
}

fn fmt_stderr(s: &str) -> String {
    let s = s.trim_end();
    if s.is_empty() {
        String::new()
    } else {
        // The tail is what explains a failure; the head of a long stderr rarely does.
        let tail: Vec<&str> = s.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!("; stderr:\n{}", tail.join("\n"))
    }
}

impl SshError {
    /// Errors that will not go away by retrying the connection.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            SshError::HostKeyMismatch { .. }
                | SshError::Auth { .. }
                | SshError::MissingTool(_)
                | SshError::KeyFile { .. }
                | SshError::BadKeyFile { .. }
                | SshError::MachineDied { .. }
        )
    }
}

/// A missing key tool is 4; every other failure is the infrastructure's.
impl ExitCode for SshError {
    fn exit_code(&self) -> u8 {
        match self {
            SshError::MissingTool(e) => e.exit_code(),
            SshError::NotReady { last, .. } => last.exit_code(),
            _ => exit::INFRASTRUCTURE,
        }
    }
}

/// A command as an error message names it: a one-liner as it is; a script
/// (the guest protocol's) by its first line of code, without its
/// arguments (`set -- ...`) and comments.
fn short(cmd: &str) -> String {
    const MAX: usize = 80;
    if !cmd.contains('\n') && cmd.len() <= MAX {
        return cmd.to_string();
    }
    let first = cmd
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("set -- "))
        .unwrap_or("");
    let mut s: String = first.chars().take(MAX).collect();
    if s.len() < first.len() {
        s.push('…');
    }
    format!("{s} …")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_named_by_their_first_line_of_code() {
        assert_eq!(short("uname -r"), "uname -r");
        assert_eq!(
            short("set -- '2' '60'\n# Blocks until...\n# more\nI=/sys/kernel/tracing\nk=\"$1\"\n"),
            "I=/sys/kernel/tracing …"
        );
        let long = "x".repeat(100);
        assert_eq!(short(&long), format!("{} …", "x".repeat(80) + "…"));
    }
}
