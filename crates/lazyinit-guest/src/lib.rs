//! The guest protocol shared by every provider: verify the kernel, mkfs,
//! mount, time ext4lazyinit from the trace, collect.
//!
//! The protocol is written against [`Remote`], a one-method seam over SSH,
//! so its logic is tested without a guest; `SshRemote` is the real one.

mod estimate;
pub mod install;
pub mod parse;
pub mod protocol;
mod ssh;
pub mod volume;

use std::time::Duration;

pub use protocol::{run, Expectation, Gate, Measurement, NoGate, ProtocolOptions};
pub use ssh::SshRemote;

/// A command's outcome on the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteOutput {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs shell text on the guest (as root, POSIX sh).
pub trait Remote: Send {
    fn exec(&mut self, script: &str, timeout: Duration) -> Result<RemoteOutput, GuestError>;
}

#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error("SSH to the guest failed: {0}")]
    Ssh(String),
    #[error("the guest runs the wrong kernel: {what} is `{found}`, expected `{expected}`; rebuild or pick the right kernel")]
    WrongKernel {
        what: String,
        expected: String,
        found: String,
    },
    #[error("the guest's clocksource is `{0}`: with tick resolution the fixed kernel behaves like the unfixed one, so the run is refused (DESIGN §3); give the guest a TSC reference (tsc_early_khz) or a kernel with HPET/ACPI PM timer")]
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
    #[error("mkfs left {zeroed} of {groups} groups marked ITABLE_ZEROED: lazy-init would have nothing to do (DESIGN §3, the discard trap)")]
    AlreadyZeroed { groups: u64, zeroed: u64 },
    #[error("traced {traced} groups but {expected} needed initialising (of {groups}): the trace lost events or the run is incomplete")]
    GroupCount {
        traced: u64,
        expected: u64,
        groups: u64,
    },
    #[error("{step} did not finish within {after:?}")]
    Timeout { step: &'static str, after: Duration },
    #[error("interrupted")]
    Interrupted,
}
