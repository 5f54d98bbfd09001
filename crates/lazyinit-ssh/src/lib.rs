//! SSH to guests with a pinned host key (ssh2), one error per stage.
//!
//! Blocking by design: libssh2 is blocking, and the async callers run these
//! calls on `tokio::task::spawn_blocking`. The project's keys ([`Keys`]) are
//! generated once into the state directory; every connection checks the
//! guest's host key against the pin and refuses any other key.

mod error;
mod keys;
mod runkeys;
mod session;

pub use error::SshError;
pub use keys::{fingerprint, HostKeyPin, Keys};
pub use runkeys::RunKeys;
pub use session::{wait_until_ready, Output, Session, UploadSource};
