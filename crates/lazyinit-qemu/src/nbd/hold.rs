//! The hold of a cell's zero requests and the scheduling of its NBD
//! threads, shared by the servers of one cell.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The hold of every zero (WRITE_ZEROES) request, from its arrival. Shared
/// by the volume's and the warm-up disk's servers, and set while the guest
/// runs: the `ebs` profile calibrates it on each guest (the guest protocol's
/// calibration step) before the measured mount.
///
/// It also carries the scheduling level of the cell's NBD threads (see
/// [`ThreadLevel`]): the servers of one cell share both.
#[derive(Debug, Clone)]
pub struct Hold(Arc<AtomicU64>, pub(super) Arc<Mutex<Threads>>);

impl Hold {
    pub fn new(d: Duration) -> Self {
        Hold(
            Arc::new(AtomicU64::new(d.as_nanos() as u64)),
            Arc::new(Mutex::new(Threads {
                tids: Vec::new(),
                level: ThreadLevel::Normal { nice: 0 },
            })),
        )
    }
    pub fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::SeqCst))
    }
    pub fn set(&self, d: Duration) {
        self.0.store(d.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Moves every NBD thread of the cell (and those started later) to
    /// `level`. Errors (not root) are the caller's to report.
    pub fn set_level(&self, level: ThreadLevel) -> Result<(), String> {
        let mut t = self.1.lock().unwrap();
        t.level = level;
        t.tids
            .retain(|tid| std::path::Path::new(&format!("/proc/self/task/{tid}")).exists());
        t.tids.iter().try_for_each(|&tid| level.apply(tid))
    }

    /// Registers the calling thread and puts it at the cell's level.
    pub(super) fn join(&self) {
        let tid = nix::unistd::gettid().as_raw() as u32;
        let mut t = self.1.lock().unwrap();
        t.tids.push(tid);
        if let Err(why) = t.level.apply(tid) {
            tracing::debug!(%why, "NBD thread stays at normal priority");
        }
    }
}

/// The NBD threads of one cell, and the level they run at.
#[derive(Debug)]
pub(super) struct Threads {
    pub(super) tids: Vec<u32>,
    level: ThreadLevel,
}

/// How a cell's NBD threads are scheduled. They follow their guest: while
/// it makes its filesystem they are normal work at its nice value (at a
/// real-time level, two dozen servers busy with other guests' mkfs took the
/// CPU from a guest timing its calibration mounts: samples of 4-22 ms for a
/// 3.4 ms zeroing, on 48 cells at once); while it is measured they sit
/// above its real-time level, so a held reply leaves on time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadLevel {
    Normal { nice: u8 },
    Realtime(u8),
}

impl ThreadLevel {
    fn apply(self, tid: u32) -> Result<(), String> {
        match self {
            ThreadLevel::Realtime(p) => crate::process::set_realtime(tid, false, Some(p)),
            ThreadLevel::Normal { nice } => {
                crate::process::set_realtime(tid, false, None)?;
                crate::process::set_thread_nice(tid, nice)
            }
        }
    }
}

impl lazyinit_core::provider::ZeroHold for Hold {
    fn get(&self) -> Duration {
        Hold::get(self)
    }
    fn set(&self, hold: Duration) {
        Hold::set(self, hold)
    }
}
