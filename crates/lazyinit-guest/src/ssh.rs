//! The real [`Remote`]: a pinned-host-key SSH session.

use std::path::Path;
use std::time::{Duration, Instant};

use lazyinit_core::provider::Endpoint;
use lazyinit_ssh::{Keys, Session, UploadSource};

use crate::{Connect, GuestError, Remote, RemoteOutput};

fn ssh(e: lazyinit_ssh::SshError) -> GuestError {
    match e {
        lazyinit_ssh::SshError::Cancelled { .. } => GuestError::Interrupted,
        e => GuestError::Ssh(with_causes(&e)),
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

/// The error with its causes (libssh2's reason is the source).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
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
