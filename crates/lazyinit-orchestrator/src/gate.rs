//! The host-sharing policy between concurrent cells (DESIGN §3).
//!
//! A cell's sleep between groups is set once, near the start of lazy-init:
//! with the fix from the first group's zeroing time z1, without it from the
//! first zeroing that crosses a tick (which at HZ=250 a slow zeroing can
//! cross twice). Under TCG part of that zeroing is the guest's CPU time, so
//! a neighbour holding the CPU at that moment changes the whole run.
//!
//! So each cell runs its *sensitive window* (from mount until a few dozen
//! groups are traced, long past the moment its sleep is set) at real-time
//! priority on the host: the provider raises every thread of that cell's
//! guest to SCHED_FIFO and lowers it again afterwards. A waking real-time
//! thread preempts the other guests at once, so the zeroing runs as if the
//! host were idle, while every other guest keeps running: nothing is paused
//! or serialized, and the wall time of the matrix stays that of its slowest
//! cell. The guest is idle between zeroings, so holding the priority costs
//! the others nothing measurable.

use std::sync::Arc;

use lazyinit_core::provider::Provider;

#[derive(Clone)]
pub struct HostGate {
    /// Raises a cell's guest during its sensitive window (None: nothing to
    /// raise, as on EC2 where every cell has its own host).
    provider: Option<Arc<dyn Provider>>,
    enabled: bool,
}

impl HostGate {
    pub fn new(enabled: bool) -> Self {
        Self {
            provider: None,
            enabled,
        }
    }

    /// Raise the provider's machines during sensitive windows.
    pub fn prioritizing(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// The gate one cell uses.
    pub fn for_cell(&self, cell: &str) -> CellGate {
        CellGate {
            host: self.clone(),
            cell: cell.to_string(),
        }
    }
}

/// A cell's view of the gate.
#[derive(Clone)]
pub struct CellGate {
    host: HostGate,
    cell: String,
}

struct Raised {
    provider: Arc<dyn Provider>,
    cell: String,
}

impl Drop for Raised {
    fn drop(&mut self) {
        // Dropped on the protocol's blocking thread, inside the runtime.
        tokio::runtime::Handle::current().block_on(self.provider.prioritize(&self.cell, false));
    }
}

impl lazyinit_guest::Gate for CellGate {
    fn heavy(&self) -> Box<dyn Send> {
        Box::new(())
    }

    fn quiet(&self) -> Box<dyn Send> {
        match (&self.host.provider, self.host.enabled) {
            (Some(p), true) => {
                // Runs on the protocol's blocking thread, inside the runtime.
                let raised =
                    tokio::runtime::Handle::current().block_on(p.prioritize(&self.cell, true));
                if raised {
                    return Box::new(Raised {
                        provider: p.clone(),
                        cell: self.cell.clone(),
                    });
                }
                Box::new(())
            }
            _ => Box::new(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use lazyinit_core::provider::{LaunchRequest, Machine, ProviderError};
    use lazyinit_guest::Gate;
    use std::sync::Mutex;

    /// Records prioritize calls.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(String, bool)>>);

    #[async_trait]
    impl Provider for Recorder {
        fn name(&self) -> &str {
            "recorder"
        }
        async fn preflight(&self, _: &[lazyinit_core::Cell]) -> Result<(), ProviderError> {
            Ok(())
        }
        async fn launch(&self, _: &LaunchRequest) -> Result<Box<dyn Machine>, ProviderError> {
            Err(ProviderError::infra("not in this test"))
        }
        async fn prioritize(&self, cell: &str, on: bool) -> bool {
            self.0.lock().unwrap().push((cell.to_string(), on));
            true
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn quiet_raises_the_cell_and_lowers_it_after() {
        let rec = Arc::new(Recorder::default());
        let host = HostGate::new(true).prioritizing(rec.clone());
        let cell = host.for_cell("c1");
        let guard = tokio::task::spawn_blocking(move || cell.quiet())
            .await
            .unwrap();
        assert_eq!(*rec.0.lock().unwrap(), vec![("c1".to_string(), true)]);
        tokio::task::spawn_blocking(move || drop(guard))
            .await
            .unwrap();
        assert_eq!(
            *rec.0.lock().unwrap(),
            vec![("c1".to_string(), true), ("c1".to_string(), false)]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn disabled_gate_raises_nothing() {
        let rec = Arc::new(Recorder::default());
        let host = HostGate::new(false).prioritizing(rec.clone());
        let cell = host.for_cell("c1");
        let guard = tokio::task::spawn_blocking(move || cell.quiet())
            .await
            .unwrap();
        drop(guard);
        assert!(rec.0.lock().unwrap().is_empty());
    }
}
