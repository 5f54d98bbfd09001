//! A connected, authenticated session to one guest.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::SshError;
use crate::keys::{fingerprint, Keys};
use lazyinit_core::shell::quote as shell_quote;

/// What a command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Exit status; -1 when the command was killed by a signal.
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// What [`Session::upload`] sends.
#[derive(Debug, Clone, Copy)]
pub enum UploadSource<'a> {
    Bytes(&'a [u8]),
    File(&'a Path),
}

/// Default timeout for [`Session::exec`]; long waits pass their own.
const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// Pause between non-blocking reads when the channel had nothing.
const POLL: Duration = Duration::from_millis(5);

pub struct Session {
    sess: ssh2::Session,
    addr: String,
    command_timeout: Duration,
    /// Set by the caller to give up a running command (see [`Session::set_cancel`]).
    cancel: Option<Arc<AtomicBool>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("addr", &self.addr).finish()
    }
}

fn millis(d: Duration) -> u32 {
    // 0 means "no timeout" to libssh2: never pass it by accident.
    d.as_millis().clamp(1, u32::MAX as u128) as u32
}

/// Host-key algorithms to offer, the pinned one first, so a server that has
/// several keys presents the pinned kind and any other server still gets as
/// far as the (refused) key comparison instead of failing the handshake.
fn hostkey_preference(pinned: &str) -> String {
    let mut algs = vec![pinned];
    for a in [
        "ssh-ed25519",
        "ecdsa-sha2-nistp256",
        "rsa-sha2-512",
        "rsa-sha2-256",
        "ssh-rsa",
    ] {
        if !algs.contains(&a) {
            algs.push(a);
        }
    }
    algs.join(",")
}

impl Session {
    /// Connects, checks the host key against the pin and logs in with the
    /// project's client key, all within `timeout`.
    pub fn connect(
        host: &str,
        port: u16,
        user: &str,
        keys: &Keys,
        timeout: Duration,
    ) -> Result<Session, SshError> {
        let addr = format!("{host}:{port}");
        let connect_err = |source| SshError::Connect {
            addr: addr.clone(),
            source,
        };
        let sockaddr = (host, port)
            .to_socket_addrs()
            .map_err(connect_err)?
            .next()
            .ok_or_else(|| connect_err(std::io::Error::new(ErrorKind::NotFound, "no address")))?;
        let tcp = TcpStream::connect_timeout(&sockaddr, timeout).map_err(connect_err)?;
        let handshake_err = |source| SshError::Handshake {
            addr: addr.clone(),
            source,
        };
        let mut sess = ssh2::Session::new().map_err(handshake_err)?;
        sess.set_timeout(millis(timeout));
        sess.method_pref(
            ssh2::MethodType::HostKey,
            &hostkey_preference(&keys.host_public.algorithm),
        )
        .map_err(handshake_err)?;
        sess.set_tcp_stream(tcp);
        sess.handshake().map_err(handshake_err)?;

        let (seen, _kind) = sess
            .host_key()
            .ok_or_else(|| SshError::NoHostKey { addr: addr.clone() })?;
        if seen != keys.host_public.blob.as_slice() {
            return Err(SshError::HostKeyMismatch {
                addr,
                known_hosts: keys.known_hosts.clone(),
                expected: keys.host_public.fingerprint(),
                seen: fingerprint(seen),
            });
        }

        sess.userauth_pubkey_file(user, None, &keys.client_private, None)
            .map_err(|source| SshError::Auth {
                user: user.to_string(),
                addr: addr.clone(),
                source,
            })?;
        if !sess.authenticated() {
            return Err(SshError::Auth {
                user: user.to_string(),
                addr,
                source: ssh2::Error::from_errno(ssh2::ErrorCode::Session(-18)),
            });
        }
        Ok(Session {
            sess,
            addr,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            cancel: None,
        })
    }

    /// Every command (and upload) from now on gives up within a few
    /// milliseconds once `flag` is set, with [`SshError::Cancelled`].
    pub fn set_cancel(&mut self, flag: Arc<AtomicBool>) {
        self.cancel = Some(flag);
    }

    fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst))
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Runs `cmd` (through the guest's shell) with the session's command timeout.
    pub fn exec(&self, cmd: &str) -> Result<Output, SshError> {
        self.exec_with_timeout(cmd, self.command_timeout)
    }

    /// Like [`Session::exec`], but a non-zero status is an error carrying stderr.
    pub fn exec_checked(&self, cmd: &str) -> Result<Output, SshError> {
        self.check(cmd, self.exec(cmd)?)
    }

    pub fn exec_checked_with_timeout(
        &self,
        cmd: &str,
        timeout: Duration,
    ) -> Result<Output, SshError> {
        self.check(cmd, self.exec_with_timeout(cmd, timeout)?)
    }

    fn check(&self, cmd: &str, out: Output) -> Result<Output, SshError> {
        if out.status == 0 {
            Ok(out)
        } else {
            Err(SshError::ExitStatus {
                cmd: cmd.to_string(),
                addr: self.addr.clone(),
                status: out.status,
                stderr: out.stderr,
            })
        }
    }

    pub fn exec_with_timeout(&self, cmd: &str, timeout: Duration) -> Result<Output, SshError> {
        let deadline = Instant::now() + timeout;
        let mut ch = self.open(cmd, timeout)?;
        self.finish(&mut ch, cmd, deadline, timeout)
    }

    /// Writes a file in the guest through `cat`, so the guest needs neither
    /// scp nor sftp. The file appears under its name only once complete.
    pub fn upload(&self, src: UploadSource<'_>, remote: &str, mode: u32) -> Result<(), SshError> {
        let timeout = self.command_timeout;
        let deadline = Instant::now() + timeout;
        let cmd = upload_command(remote, mode);
        let mut ch = self.open(&cmd, timeout)?;
        let written = match src {
            UploadSource::Bytes(b) => ch.write_all(b),
            UploadSource::File(path) => {
                let mut f = std::fs::File::open(path).map_err(|source| SshError::UploadSource {
                    path: path.to_path_buf(),
                    source,
                })?;
                std::io::copy(&mut f, &mut ch).map(|_| ())
            }
        };
        let eof = written.and_then(|()| ch.send_eof().map_err(std::io::Error::from));
        // Even if writing failed, the remote's status and stderr explain why.
        let out = self.finish(&mut ch, &cmd, deadline, timeout)?;
        let out = self.check(&cmd, out)?;
        eof.map_err(|source| SshError::Io {
            cmd: cmd.clone(),
            addr: self.addr.clone(),
            source,
        })?;
        drop(out);
        Ok(())
    }

    fn open(&self, cmd: &str, timeout: Duration) -> Result<ssh2::Channel, SshError> {
        let exec_err = |source| SshError::Exec {
            cmd: cmd.to_string(),
            addr: self.addr.clone(),
            source,
        };
        self.sess.set_blocking(true);
        self.sess.set_timeout(millis(timeout));
        let mut ch = self.sess.channel_session().map_err(exec_err)?;
        ch.exec(cmd).map_err(exec_err)?;
        Ok(ch)
    }

    // Long: one non-blocking read loop over both streams, its timeout and cancel, then the exit status.
    /// Reads stdout and stderr together (non-blocking, so neither stream can
    /// fill its window and stall the other) until EOF, then the exit status.
    fn finish(
        &self,
        ch: &mut ssh2::Channel,
        cmd: &str,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Output, SshError> {
        let io_err = |source| SshError::Io {
            cmd: cmd.to_string(),
            addr: self.addr.clone(),
            source,
        };
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut buf = vec![0u8; 32 * 1024];
        self.sess.set_blocking(false);
        let drained = loop {
            let mut progressed = false;
            let mut failed = None;
            for stream in [0, 1] {
                let r = if stream == 0 {
                    ch.read(&mut buf)
                } else {
                    ch.stderr().read(&mut buf)
                };
                match r {
                    Ok(0) => {}
                    Ok(n) => {
                        let sink = if stream == 0 {
                            &mut stdout
                        } else {
                            &mut stderr
                        };
                        sink.extend_from_slice(&buf[..n]);
                        progressed = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => failed = Some(e),
                }
            }
            if let Some(e) = failed {
                break Err(io_err(e));
            }
            if !progressed && ch.eof() {
                break Ok(());
            }
            if self.cancelled() {
                break Err(SshError::Cancelled {
                    cmd: cmd.to_string(),
                    addr: self.addr.clone(),
                });
            }
            if Instant::now() >= deadline {
                break Err(SshError::Timeout {
                    cmd: cmd.to_string(),
                    addr: self.addr.clone(),
                    timeout,
                });
            }
            if !progressed {
                std::thread::sleep(POLL);
            }
        };
        self.sess.set_blocking(true);
        if let Err(e) = drained {
            // Closing waits for the remote's close, which comes when the
            // command ends: a cancelled one must not be waited for.
            if matches!(e, SshError::Cancelled { .. }) {
                self.sess.set_timeout(200);
            }
            let _ = ch.close();
            return Err(e);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        self.sess
            .set_timeout(millis(left.max(Duration::from_secs(1))));
        ch.wait_close().map_err(|e| io_err(e.into()))?;
        let status = if ch.exit_signal().ok().and_then(|s| s.exit_signal).is_some() {
            -1
        } else {
            ch.exit_status().map_err(|e| io_err(e.into()))?
        };
        Ok(Output {
            status,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }
}

/// The guest-side half of an upload: write to a temporary name, set the
/// mode, then rename, so a reader never sees half a file.
fn upload_command(remote: &str, mode: u32) -> String {
    let part = shell_quote(&format!("{remote}.part"));
    format!(
        "cat > {part} && chmod {mode:o} {part} && mv -f {part} {}",
        shell_quote(remote)
    )
}

/// Whether an SSH server answers on `addr` with its banner within `timeout`.
///
/// Behind QEMU's user networking the TCP connect always succeeds (slirp
/// accepts for the guest); a guest that is not listening yet leaves the
/// connection hanging in slirp's SYN back-off for seconds. A short probe for
/// the banner, repeated, notices the server within a fraction of a second;
/// only then does the (slower, CPU-bound in the guest) SSH handshake start.
fn banner_seen(host: &str, port: u16, timeout: Duration) -> std::io::Result<()> {
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(ErrorKind::NotFound, "no address"))?;
    let mut tcp = TcpStream::connect_timeout(&addr, timeout)?;
    tcp.set_read_timeout(Some(timeout))?;
    let mut buf = [0u8; 4];
    tcp.read_exact(&mut buf)?;
    if &buf == b"SSH-" {
        Ok(())
    } else {
        Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "the server did not greet with an SSH banner",
        ))
    }
}

/// Retries connect + `true` until it works or `deadline` passes. Fails at
/// once when `is_alive` says the machine is gone, or on an error that
/// retrying cannot fix (wrong host key, rejected client key).
pub fn wait_until_ready(
    host: &str,
    port: u16,
    user: &str,
    keys: &Keys,
    deadline: Instant,
    mut is_alive: impl FnMut() -> bool,
) -> Result<Session, SshError> {
    const PROBE: Duration = Duration::from_millis(700);
    const ATTEMPT: Duration = Duration::from_secs(30);
    let start = Instant::now();
    let addr = format!("{host}:{port}");
    let mut last: Option<SshError> = None;
    loop {
        if !is_alive() {
            return Err(SshError::MachineDied { addr });
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let last = last.unwrap_or(SshError::Timeout {
                cmd: "true".into(),
                addr: addr.clone(),
                timeout: start.elapsed(),
            });
            return Err(SshError::NotReady {
                addr,
                waited: start.elapsed(),
                last: Box::new(last),
            });
        }
        let result = banner_seen(host, port, left.min(PROBE))
            .map_err(|source| SshError::Connect {
                addr: addr.clone(),
                source,
            })
            .and_then(|()| {
                let attempt = left.min(ATTEMPT);
                Session::connect(host, port, user, keys, attempt)
                    .and_then(|s| s.exec_checked_with_timeout("true", attempt).map(|_| s))
            });
        match result {
            Ok(s) => return Ok(s),
            Err(e) if e.is_permanent() => return Err(e),
            Err(e) => {
                tracing::debug!(%addr, error = %e, "SSH not ready yet");
                last = Some(e);
                std::thread::sleep(Duration::from_millis(100).min(left));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_command_is_atomic_and_quoted() {
        assert_eq!(
            upload_command("/root/my file", 0o755),
            "cat > '/root/my file.part' && chmod 755 '/root/my file.part' && mv -f '/root/my file.part' '/root/my file'"
        );
    }

    #[test]
    fn pinned_algorithm_goes_first_once() {
        assert_eq!(
            hostkey_preference("ssh-ed25519"),
            "ssh-ed25519,ecdsa-sha2-nistp256,rsa-sha2-512,rsa-sha2-256,ssh-rsa"
        );
        assert!(hostkey_preference("ssh-rsa").starts_with("ssh-rsa,ssh-ed25519"));
    }
}
