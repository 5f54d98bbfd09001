//! The guest protocol shared by every provider: verify the kernel, mkfs,
//! mount, time ext4lazyinit from the trace, collect.
//!
//! The protocol is written against [`Remote`], a small seam over SSH, and
//! the runner reaches guests through [`Connect`], so both are tested
//! without a guest; [`SshRemote`] and [`SshConnect`] are the real ones, and
//! the `fake` feature adds a scripted guest ([`fake::FakeGuest`]).

mod estimate;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod install;
pub mod parse;
pub mod protocol;
mod ssh;
pub mod volume;

use std::path::Path;
use std::time::{Duration, Instant};

use lazyinit_core::provider::Endpoint;

pub use lazyinit_core::results::Measurement;
pub use protocol::{run, Expectation, Gate, NoGate, ProtocolOptions};
pub use ssh::{SshConnect, SshRemote};

/// A command's outcome on the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteOutput {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A shell on the guest (as root, POSIX sh).
pub trait Remote: Send {
    /// Runs shell text and returns its outcome, whatever its exit status.
    fn exec(&mut self, script: &str, timeout: Duration) -> Result<RemoteOutput, GuestError>;
    /// Copies a local file to `remote` (replaced whole or not at all).
    fn upload(&mut self, local: &Path, remote: &str, mode: u32) -> Result<(), GuestError>;
    /// From now on a command or upload in progress gives up once `flag` is
    /// set, with [`GuestError::Interrupted`], instead of running to its end
    /// or timeout. A remote whose calls return at once may ignore it.
    fn set_cancel(&mut self, _flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {}
}

/// How the runner reaches a booted guest.
pub trait Connect: Send + Sync {
    /// Waits until the guest at `ep` answers with the pinned host key, or
    /// fails at once when `alive` says its machine is gone.
    fn wait_ready(
        &self,
        ep: &Endpoint,
        deadline: Instant,
        alive: &mut dyn FnMut() -> bool,
    ) -> Result<Box<dyn Remote>, GuestError>;
}

#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// The SSH session failed; the [`lazyinit_ssh::SshError`] says at
    /// which stage and why.
    #[error("SSH to the guest failed")]
    Ssh(#[source] lazyinit_ssh::SshError),
    /// The way to the guest failed with nothing behind it but these words
    /// (an in-process remote, a fake).
    #[error("SSH to the guest failed: {0}")]
    Transport(String),
    #[error("the guest runs the wrong kernel: {what} is `{found}`, expected `{expected}`; rebuild or pick the right kernel")]
    WrongKernel {
        what: String,
        expected: String,
        found: String,
    },
    #[error("the guest's clocksource is `{0}`: with tick resolution the fixed kernel behaves like the unfixed one, so the run is refused (docs/design.md §3); give the guest a TSC reference (tsc_early_khz) or a kernel with HPET/ACPI PM timer")]
    JiffiesClocksource(String),
    #[error("the guest kernel has no ext4_lazy_itable_init tracepoint (tracefs missing or CONFIG_FTRACE off)")]
    NoTracing,
    #[error("{step} failed in the guest (exit {status}): {stderr}")]
    Command {
        step: &'static str,
        status: i32,
        stderr: String,
    },
    #[error("{step}: {what}")]
    Parse { step: &'static str, what: String },
    #[error("mkfs left {zeroed} of {groups} groups marked ITABLE_ZEROED: lazy-init would have nothing to do (docs/design.md §3, the discard trap)")]
    AlreadyZeroed { groups: u64, zeroed: u64 },
    #[error("traced {traced} groups but {expected} needed initialising (of {groups}): the trace lost events or the run is incomplete")]
    GroupCount {
        traced: u64,
        expected: u64,
        groups: u64,
    },
    #[error("{step} did not finish within {after:?}")]
    Timeout { step: &'static str, after: Duration },
    /// The thread outlived its deadline: how far it got and what it was
    /// doing tell a slow host (groups still coming) from a stuck one.
    #[error("lazyinit did not finish within {after:?}: {done} of {total} groups zeroed, the thread {thread}")]
    LazyinitTimeout {
        after: Duration,
        done: u64,
        total: u64,
        thread: String,
    },
    #[error("interrupted")]
    Interrupted,
}
