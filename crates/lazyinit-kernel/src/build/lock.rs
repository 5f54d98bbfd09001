//! The slot lock: one builder per slot, held by every command it runs.

use super::*;

/// Hold an exclusive lock on a slot for the life of the value.
pub(super) fn lock_slot(slot: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, KernelError> {
    std::fs::create_dir_all(slot).map_err(|e| KernelError::io(slot, e))?;
    lock_file(&slot.join("slot.lock"))
}

/// An exclusive lock on `path` (made if missing, never truncated) for the
/// life of the value: a slot's, or the QEMU build's (`emulator`).
pub(crate) fn lock_file(path: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, KernelError> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| KernelError::io(path, e))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| KernelError::Step(format!("locking {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command of the build holds the slot's lock while it lives, even
    /// once the harness is gone: another builder cannot take the slot.
    #[tokio::test]
    async fn the_builds_commands_hold_the_slots_lock() {
        let d = tempfile::tempdir().unwrap();
        let lock = lock_slot(d.path()).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&*lock);
        let mut cmd = tokio::process::Command::new("sleep");
        cmd.arg("30").kill_on_drop(true);
        inherit_fd(&mut cmd, fd);
        let mut child = cmd.spawn().unwrap();
        // The harness's own hold ends as when it is killed: its fd closed
        // with no unlock (dropping the Flock would unlock, which a killed
        // process never does).
        std::mem::forget(lock);
        // SAFETY: the fd is ours, and the forgotten Flock never closes it.
        #[allow(unsafe_code)]
        unsafe {
            libc::close(fd);
        }
        let f = std::fs::File::open(d.path().join("slot.lock")).unwrap();
        let taken = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock);
        assert!(taken.is_err(), "the slot was free while the command ran");
        child.kill().await.unwrap();
        child.wait().await.unwrap();
        let f = std::fs::File::open(d.path().join("slot.lock")).unwrap();
        assert!(nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok());
    }
}
