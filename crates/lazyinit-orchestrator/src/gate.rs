//! The host-sharing policy between concurrent cells (DESIGN §3).
//!
//! With the fix, a cell's sleep between groups is set once, from its first
//! group's zeroing time, which under TCG is mostly CPU time. So:
//! - heavy steps (boot, mkfs) share the host;
//! - a with-fix cell takes the host alone from mount until its first group
//!   is traced (write lock; write-preferring, so new heavy steps queue),
//!   and every other guest is paused meanwhile (QMP stop: their clocks stop
//!   too, so their own timings do not see the pause);
//! - no-fix cells mount only once every with-fix cell of the run is past its
//!   first group, so no sleeping neighbour's periodic zeroing competes.
//!   No-fix timing does not depend on load, and they wait seconds, not minutes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::RwLock;

#[derive(Clone)]
pub struct HostGate {
    lock: Arc<RwLock<()>>,
    /// Pauses the other guests during a quiet window (None: nothing to pause).
    provider: Option<Arc<dyn lazyinit_core::provider::Provider>>,
    /// With-fix cells whose first group is still ahead.
    pending_fix: Arc<(Mutex<usize>, Condvar)>,
    enabled: bool,
}

impl HostGate {
    pub fn new(enabled: bool, fix_cells: usize) -> Self {
        Self {
            lock: Arc::new(RwLock::new(())),
            provider: None,
            pending_fix: Arc::new((
                Mutex::new(if enabled { fix_cells } else { 0 }),
                Condvar::new(),
            )),
            enabled,
        }
    }

    /// Pause the provider's other machines during quiet windows.
    pub fn pausing(mut self, provider: Arc<dyn lazyinit_core::provider::Provider>) -> Self {
        self.provider = Some(provider);
        self
    }

    pub async fn heavy_async(&self) -> Option<tokio::sync::OwnedRwLockReadGuard<()>> {
        if !self.enabled {
            return None;
        }
        Some(self.lock.clone().read_owned().await)
    }

    /// The gate one cell uses; a with-fix cell counts itself done once.
    pub fn for_cell(&self, cell: &str, fix: bool) -> CellGate {
        CellGate {
            host: self.clone(),
            cell: cell.to_string(),
            fix_done: Arc::new(AtomicBool::new(!fix)),
        }
    }

    fn fix_passed(&self) {
        let (m, cv) = &*self.pending_fix;
        let mut n = m.lock().unwrap();
        *n = n.saturating_sub(1);
        cv.notify_all();
    }

    pub fn pending_fix(&self) -> usize {
        *self.pending_fix.0.lock().unwrap()
    }
}

/// A cell's view of the gate. `release` is idempotent: the runner calls it
/// when the cell ends, whatever happened, so a failed fix cell never holds
/// the no-fix cells back.
#[derive(Clone)]
pub struct CellGate {
    host: HostGate,
    cell: String,
    fix_done: Arc<AtomicBool>,
}

impl CellGate {
    pub fn release(&self) {
        if !self.fix_done.swap(true, Ordering::SeqCst) {
            self.host.fix_passed();
        }
    }
}

struct QuietGuard {
    _write: Option<tokio::sync::OwnedRwLockWriteGuard<()>>,
    paused: Vec<String>,
    cell: CellGate,
}

impl Drop for QuietGuard {
    fn drop(&mut self) {
        // Dropped on the protocol's blocking thread, inside the runtime.
        if let (Some(p), false) = (&self.cell.host.provider, self.paused.is_empty()) {
            tokio::runtime::Handle::current().block_on(p.resume(&self.paused));
        }
        self.cell.release();
    }
}

impl lazyinit_guest::Gate for CellGate {
    fn heavy(&self) -> Box<dyn Send> {
        if !self.host.enabled {
            return Box::new(());
        }
        // Runs on the protocol's blocking thread, inside the runtime.
        Box::new(tokio::runtime::Handle::current().block_on(self.host.lock.clone().read_owned()))
    }

    fn quiet(&self) -> Box<dyn Send> {
        let write = self.host.enabled.then(|| {
            tokio::runtime::Handle::current().block_on(self.host.lock.clone().write_owned())
        });
        let paused = match (&self.host.provider, self.host.enabled) {
            (Some(p), true) => {
                tokio::runtime::Handle::current().block_on(p.pause_others(&self.cell))
            }
            _ => Vec::new(),
        };
        Box::new(QuietGuard {
            _write: write,
            paused,
            cell: self.clone(),
        })
    }

    fn settle(&self, cancel: &AtomicBool) {
        let (m, cv) = &*self.host.pending_fix;
        let mut n = m.lock().unwrap();
        while *n > 0 && !cancel.load(Ordering::SeqCst) {
            n = cv.wait_timeout(n, Duration::from_millis(200)).unwrap().0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazyinit_guest::Gate;

    #[test]
    fn settle_waits_for_every_fix_cell() {
        let host = HostGate::new(true, 2);
        let a = host.for_cell("c", true);
        let b = host.for_cell("c", true);
        let nofix = host.for_cell("c", false);
        let cancel = Arc::new(AtomicBool::new(false));
        let waiter = {
            let c = cancel.clone();
            std::thread::spawn(move || {
                nofix.settle(&c);
                true
            })
        };
        a.release();
        a.release(); // idempotent: still one pending
        assert_eq!(host.pending_fix(), 1);
        assert!(!waiter.is_finished());
        b.release();
        assert!(waiter.join().unwrap());
        assert_eq!(host.pending_fix(), 0);
    }

    #[test]
    fn settle_honours_cancel() {
        let host = HostGate::new(true, 1);
        let nofix = host.for_cell("c", false);
        let cancel = AtomicBool::new(true);
        nofix.settle(&cancel); // returns at once
    }

    #[test]
    fn disabled_gate_never_waits() {
        let host = HostGate::new(false, 3);
        host.for_cell("c", false).settle(&AtomicBool::new(false));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn quiet_excludes_heavy() {
        let host = HostGate::new(true, 1);
        let cell = host.for_cell("c", true);
        let guard = tokio::task::spawn_blocking(move || cell.quiet())
            .await
            .unwrap();
        let blocked = tokio::time::timeout(Duration::from_millis(100), host.heavy_async()).await;
        assert!(
            blocked.is_err(),
            "heavy must wait while a fix cell is quiet"
        );
        drop(guard);
        assert_eq!(
            host.pending_fix(),
            0,
            "leaving quiet counts the fix cell done"
        );
        assert!(
            tokio::time::timeout(Duration::from_secs(1), host.heavy_async())
                .await
                .is_ok()
        );
    }
}
