//! The real [`Remote`]: a pinned-host-key SSH session.

use std::path::Path;
use std::time::{Duration, Instant};

use lazyinit_core::provider::Endpoint;
use lazyinit_ssh::{Keys, Session, UploadSource};

use crate::{Connect, GuestError, Remote, RemoteOutput};

fn ssh(e: lazyinit_ssh::SshError) -> GuestError {
    match e {
        lazyinit_ssh::SshError::Cancelled { .. } => GuestError::Interrupted,
        e => GuestError::Ssh(e),
    }
}

pub struct SshRemote {
    session: Session,
}

impl SshRemote {
    /// Waits until the guest answers SSH with the pinned host key, or fails
    /// at once when `is_alive` says the machine is gone.
    pub fn wait_ready(
        ep: &Endpoint,
        keys: &Keys,
        deadline: Instant,
        is_alive: impl FnMut() -> bool,
    ) -> Result<Self, GuestError> {
        let session =
            lazyinit_ssh::wait_until_ready(&ep.host, ep.port, &ep.user, keys, deadline, is_alive)
                .map_err(ssh)?;
        Ok(Self { session })
    }

    pub fn session(&self) -> &Session {
        &self.session
    }
}

impl Remote for SshRemote {
    fn exec(&mut self, script: &str, timeout: Duration) -> Result<RemoteOutput, GuestError> {
        let out = self
            .session
            .exec_with_timeout(script, timeout)
            .map_err(ssh)?;
        Ok(RemoteOutput {
            status: out.status,
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }

    fn upload(&mut self, local: &Path, remote: &str, mode: u32) -> Result<(), GuestError> {
        self.session
            .upload(UploadSource::File(local), remote, mode)
            .map_err(ssh)
    }

    fn set_cancel(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.session.set_cancel(flag);
    }
}

/// SSH with the project's keys: how the runner reaches every provider's
/// guests.
pub struct SshConnect {
    keys: Keys,
}

impl SshConnect {
    pub fn new(keys: Keys) -> Self {
        Self { keys }
    }
}

impl Connect for SshConnect {
    fn wait_ready(
        &self,
        ep: &Endpoint,
        deadline: Instant,
        alive: &mut dyn FnMut() -> bool,
    ) -> Result<Box<dyn Remote>, GuestError> {
        Ok(Box::new(SshRemote::wait_ready(
            ep, &self.keys, deadline, alive,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused connection under a guest error: the guest's words, the
    /// SSH stage and the OS reason all print, and `source()` reaches each.
    #[test]
    fn an_ssh_failure_keeps_its_chain() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = ssh(lazyinit_ssh::SshError::Connect {
            addr: "127.0.0.1:2222".into(),
            source: io,
        });
        assert!(matches!(
            &e,
            GuestError::Ssh(lazyinit_ssh::SshError::Connect { addr, .. }) if addr == "127.0.0.1:2222"
        ));
        let chain: Vec<String> =
            std::iter::successors(Some(&e as &(dyn std::error::Error + 'static)), |c| {
                c.source()
            })
            .map(|c| c.to_string())
            .collect();
        assert_eq!(
            chain,
            [
                "SSH to the guest failed",
                "cannot connect to 127.0.0.1:2222",
                "connection refused"
            ]
        );
        let root = std::error::Error::source(&e)
            .and_then(|s| s.source())
            .unwrap();
        assert_eq!(
            root.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
        assert_eq!(
            lazyinit_core::exit::chain_text(&e),
            "SSH to the guest failed: cannot connect to 127.0.0.1:2222: connection refused"
        );
    }

    #[test]
    fn a_cancelled_command_is_an_interrupt() {
        let e = ssh(lazyinit_ssh::SshError::Cancelled {
            cmd: "mkfs".into(),
            addr: "a".into(),
        });
        assert!(matches!(e, GuestError::Interrupted));
    }
}
