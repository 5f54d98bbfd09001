//! The host-sharing policy between concurrent cells (docs/design.md §3).
//!
//! A cell's sleep between groups is set once, near the start of lazy-init:
//! with the fix from the first group's zeroing time z1, without it from the
//! first zeroing that crosses a tick (which at HZ=250 a slow zeroing can
//! cross twice). Under TCG part of that zeroing is the guest's CPU time, so
//! a neighbour holding the CPU at that moment changes the whole run.
//!
//! So the guest of a cell runs, on the host:
//! - its unmeasured work (boot, warm-up, mkfs) at a nice value set by how
//!   long the cell is expected to take: the longest cells get the CPU first
//!   and reach their measured phase first, which keeps the matrix's wall
//!   time near that of its slowest cell;
//! - its measured phase (mount to the thread's exit) at real-time priority
//!   (SCHED_FIFO 1), so its zeroings never wait behind unmeasured work;
//! - from the end of its mount until a few dozen groups are traced (its
//!   start delay, bitmap prefetch and first zeroings, long past the moment
//!   the sleep is set; with an early stop, every group the estimate reads
//!   first) one real-time level higher, so another guest's mount
//!   (a CPU burst at the lower level) never delays them.
//!
//! - and that span is exclusive: one guest at a time on the host, across
//!   every harness process (a file lock, [`HostToken`]). With two guests'
//!   first zeroings at the same level on two cores, their emulated CPU
//!   time still grew, and with the fix that moved L by a tick.
//!
//! Guests are idle between zeroings, so real-time priority costs the others
//! nothing measurable; only the critical spans are serialized.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use lazyinit_core::provider::{Priority, Provider};

#[derive(Clone)]
pub struct HostGate {
    /// Raises a cell's guest during its sensitive window (None: nothing to
    /// raise, as on EC2 where every cell has its own host).
    provider: Option<Arc<dyn Provider>>,
    enabled: bool,
    /// One critical span at a time on this host (guests sharing its CPU).
    token: Option<(HostToken, Arc<AtomicBool>)>,
}

impl HostGate {
    pub fn new(enabled: bool) -> Self {
        Self {
            provider: None,
            enabled,
            token: None,
        }
    }

    /// Raise the provider's machines during sensitive windows.
    pub fn prioritizing(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Give one guest at a time its critical span; a wait for it ends
    /// (holding nothing) once `cancel` is set.
    pub fn exclusive(mut self, token: HostToken, cancel: Arc<AtomicBool>) -> Self {
        self.token = Some((token, cancel));
        self
    }

    /// The gate one cell uses; `nice` is its unmeasured work's nice value.
    pub fn for_cell(&self, cell: &str, nice: u8) -> CellGate {
        CellGate {
            host: self.clone(),
            cell: cell.to_string(),
            nice,
        }
    }
}

/// Nice values for the unmeasured work of cells expected to take
/// `durations`: 0 for the longest, up to 19 for the shortest, in
/// proportion. The spread is wide because CFS weights are geometric: at
/// nice 10 a guest still takes a tenth of what a nice-0 one does, and a
/// dozen of them slowed the longest cells' boots by a fifth.
pub fn nice_by_duration(durations: &[f64]) -> Vec<u8> {
    let max = durations.iter().cloned().fold(0.0, f64::max);
    durations
        .iter()
        .map(|d| {
            if max > 0.0 {
                (19.0 * (1.0 - d / max)).round().clamp(0.0, 19.0) as u8
            } else {
                0
            }
        })
        .collect()
}

pub use crate::token::{HostToken, TokenGuard};

/// A cell's view of the gate.
#[derive(Clone)]
pub struct CellGate {
    host: HostGate,
    cell: String,
    nice: u8,
}

impl CellGate {
    /// Sets the priority; true if the provider set it. Runs on the
    /// protocol's blocking thread or in async code, inside the runtime.
    fn set(&self, p: Priority) -> bool {
        match (&self.host.provider, self.host.enabled) {
            (Some(provider), true) => {
                let (provider, cell) = (provider.clone(), self.cell.clone());
                let fut = async move { provider.prioritize(&cell, p).await };
                match tokio::runtime::Handle::current().runtime_flavor() {
                    tokio::runtime::RuntimeFlavor::CurrentThread => false,
                    _ => tokio::task::block_in_place(|| {
                        tokio::runtime::Handle::current().block_on(fut)
                    }),
                }
            }
            _ => false,
        }
    }

    /// Unmeasured work from now on (once the guest answers: the boot runs
    /// at the priority it was launched with).
    pub fn prepare(&self) {
        self.set(Priority::Prepare { nice: self.nice });
    }

    /// A guard that holds `p` and goes back to `back` when dropped.
    fn hold(&self, p: Priority, back: Priority) -> Held {
        Held {
            gate: self.set(p).then(|| (self.clone(), back)),
            token: None,
        }
    }

    /// The host token, when the gate serializes critical spans.
    fn token(&self) -> Option<TokenGuard> {
        let (token, cancel) = self.host.token.as_ref().filter(|_| self.host.enabled)?;
        let asked = Instant::now();
        let guard = token.acquire(cancel)?;
        tracing::info!(
            cell = %self.cell,
            waited_s = asked.elapsed().as_secs_f64(),
            "critical span: host token taken"
        );
        Some(guard)
    }
}

/// Restores a priority, then gives the token back, when dropped.
struct Held {
    gate: Option<(CellGate, Priority)>,
    token: Option<TokenGuard>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((gate, back)) = self.gate.take() {
            gate.set(back);
        }
        if self.token.take().is_some() {
            tracing::debug!("critical span: host token released");
        }
    }
}

impl lazyinit_guest::Gate for CellGate {
    fn measuring(&self) -> Box<dyn Send> {
        // After the measurement comes only the trace's collection: at the
        // harness's own priority, not the cell's nice. At nice 15-19 beside
        // other guests' nice-0 mkfs, reading a 3 TiB cell's 6 MB trace over
        // SSH took more than its 120 s, and a finished measurement was lost
        // (results/reported-series-quiet, x86_64 5.10 fix 3 TiB r2).
        Box::new(self.hold(Priority::Measure, Priority::Prepare { nice: 0 }))
    }

    fn critical(&self) -> Box<dyn Send> {
        let token = self.token();
        let mut held = self.hold(Priority::Critical, Priority::Measure);
        held.token = token;
        Box::new(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use lazyinit_core::provider::{LaunchRequest, Machine, ProviderError};
    use lazyinit_guest::Gate;
    use std::sync::atomic::Ordering;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Records prioritize calls.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(String, Priority)>>);

    #[async_trait]
    impl Provider for Recorder {
        fn name(&self) -> &str {
            "recorder"
        }
        fn kernel_profile(&self) -> lazyinit_core::KernelProfile {
            lazyinit_core::KernelProfile::Qemu
        }
        fn cost(
            &self,
            _: &[lazyinit_core::provider::CellEstimate<'_>],
            _: &lazyinit_core::StorageProfile,
            _: usize,
        ) -> Result<lazyinit_core::provider::Cost, ProviderError> {
            Err(ProviderError::infra("not in this test"))
        }
        async fn preflight(
            &self,
            _: &[lazyinit_core::Cell],
            _: &lazyinit_core::StorageProfile,
        ) -> Result<(), ProviderError> {
            Ok(())
        }
        async fn launch(&self, _: &LaunchRequest) -> Result<Box<dyn Machine>, ProviderError> {
            Err(ProviderError::infra("not in this test"))
        }
        async fn prioritize(&self, cell: &str, p: Priority) -> bool {
            self.0.lock().unwrap().push((cell.to_string(), p));
            true
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn phases_raise_and_lower_in_order() {
        let rec = Arc::new(Recorder::default());
        let host = HostGate::new(true).prioritizing(rec.clone());
        let cell = host.for_cell("c1", 4);
        tokio::task::spawn_blocking(move || {
            cell.prepare();
            let m = cell.measuring();
            let c = cell.critical();
            drop(c);
            drop(m);
        })
        .await
        .unwrap();
        let p = |p| ("c1".to_string(), p);
        assert_eq!(
            *rec.0.lock().unwrap(),
            vec![
                p(Priority::Prepare { nice: 4 }),
                p(Priority::Measure),
                p(Priority::Critical),
                p(Priority::Measure),
                // Collecting the trace: the harness's priority.
                p(Priority::Prepare { nice: 0 }),
            ]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn disabled_gate_sets_nothing() {
        let rec = Arc::new(Recorder::default());
        let host = HostGate::new(false).prioritizing(rec.clone());
        let cell = host.for_cell("c1", 0);
        tokio::task::spawn_blocking(move || {
            cell.prepare();
            drop(cell.measuring());
        })
        .await
        .unwrap();
        assert!(rec.0.lock().unwrap().is_empty());
    }

    #[test]
    fn host_token_is_exclusive_across_opens_and_cancellable() {
        let dir = tempfile::tempdir().unwrap();
        let token = HostToken::in_dir(dir.path());
        let never = AtomicBool::new(false);
        let held = token.acquire(&never).expect("free token");
        // A second holder (another cell, or another run) waits...
        let (t2, got) = (token.clone(), Arc::new(AtomicBool::new(false)));
        let got2 = got.clone();
        let waiter = std::thread::spawn(move || {
            let g = t2.acquire(&AtomicBool::new(false));
            got2.store(true, Ordering::SeqCst);
            g.is_some()
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(!got.load(Ordering::SeqCst), "taken while held");
        drop(held);
        assert!(waiter.join().unwrap());
        // ...and a wait ends, holding nothing, once the run is cancelled.
        let _held = token.acquire(&never).unwrap();
        assert!(token.acquire(&AtomicBool::new(true)).is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn critical_spans_of_two_cells_never_overlap() {
        let dir = tempfile::tempdir().unwrap();
        let rec = Arc::new(Recorder::default());
        let host = HostGate::new(true).prioritizing(rec.clone()).exclusive(
            HostToken::in_dir(dir.path()),
            Arc::new(AtomicBool::new(false)),
        );
        let inside = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut tasks = Vec::new();
        for c in ["a", "b", "c"] {
            let (cell, inside) = (host.for_cell(c, 0), inside.clone());
            tasks.push(tokio::task::spawn_blocking(move || {
                for _ in 0..5 {
                    let g = cell.critical();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two inside");
                    std::thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(g);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let raised = rec
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, p)| *p == Priority::Critical)
            .count();
        assert_eq!(raised, 15);
    }

    #[test]
    fn longest_cells_get_the_lowest_nice() {
        assert_eq!(
            nice_by_duration(&[60.0, 27.0, 14.0, 60.0]),
            vec![0, 10, 15, 0]
        );
        assert_eq!(nice_by_duration(&[0.0]), vec![0]);
        assert_eq!(nice_by_duration(&[]), Vec::<u8>::new());
    }
}
