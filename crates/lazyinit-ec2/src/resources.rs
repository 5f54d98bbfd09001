//! Ownership of cloud resources: a registry of every id the provider has
//! created and not yet seen gone, and a guard that tears a launch's
//! resources down on every path, including a dropped future (Ctrl-C).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_ec2::Client;
use tokio::task::JoinHandle;

use crate::error::Ec2Error;
use crate::ops::{self, Pace};

/// What one launch created so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owned {
    pub instance: Option<String>,
    pub volume: Option<String>,
}

impl Owned {
    pub fn ids(&self) -> Vec<String> {
        self.instance
            .iter()
            .chain(self.volume.iter())
            .cloned()
            .collect()
    }
}

/// Every live launch of a provider, and cleanups running in the background.
#[derive(Debug, Default)]
pub struct Registry {
    live: Mutex<BTreeMap<u64, Owned>>,
    background: Mutex<Vec<JoinHandle<Teardown>>>,
    next: AtomicU64,
}

impl Registry {
    fn update(&self, key: u64, f: impl FnOnce(&mut Owned)) {
        f(self.live.lock().expect("registry").entry(key).or_default());
    }
    fn take(&self, key: u64) -> Option<Owned> {
        self.live.lock().expect("registry").remove(&key)
    }
    /// Ids of every resource created and not yet confirmed gone.
    pub fn live_ids(&self) -> Vec<String> {
        let live = self.live.lock().expect("registry");
        live.values().flat_map(Owned::ids).collect()
    }
    fn take_all(&self) -> Vec<Owned> {
        let mut live = self.live.lock().expect("registry");
        std::mem::take(&mut *live).into_values().collect()
    }
    fn take_background(&self) -> Vec<JoinHandle<Teardown>> {
        std::mem::take(&mut *self.background.lock().expect("registry"))
    }
}

/// What a teardown could not remove: the ids, and why.
type Teardown = Result<(), (Vec<String>, String)>;

/// Tears down what one launch owns: terminate the instance (its attached
/// volume is delete-on-termination once the launch finished; before that
/// it is detached by the termination), wait until it is gone, then delete
/// the volume once it is free. Returns every id it could not remove.
pub async fn teardown(c: &Client, owned: &Owned, pace: Pace) -> Teardown {
    let mut left = Vec::new();
    let mut errors = Vec::new();
    let mut instance_gone = true;
    if let Some(i) = &owned.instance {
        let r = match ops::terminate(c, i).await {
            Ok(()) => ops::wait_instance_gone(c, i, pace).await,
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            instance_gone = false;
            left.push(i.clone());
            errors.push(e.to_string());
        }
    }
    if let Some(v) = &owned.volume {
        if !instance_gone {
            // Still attached to a live instance: waiting would only time out.
            left.push(v.clone());
        } else if let Err(e) = ops::delete_volume_when_free(c, v, pace).await {
            left.push(v.clone());
            errors.push(e.to_string());
        }
    }
    if left.is_empty() {
        Ok(())
    } else {
        Err((left, errors.join("\n")))
    }
}

/// Owns one launch's resources until `release` succeeds; dropped before
/// that, it spawns the teardown on the current runtime and the provider's
/// `release_all` waits for it.
pub struct Guard {
    key: u64,
    client: Client,
    registry: Arc<Registry>,
    pace: Pace,
    /// The command that removes what a failed teardown leaves.
    cleanup: String,
    released: bool,
}

impl Guard {
    pub fn new(client: Client, registry: Arc<Registry>, pace: Pace, cleanup: &str) -> Guard {
        let key = registry.next.fetch_add(1, Ordering::Relaxed);
        registry.update(key, |_| {});
        Guard {
            key,
            client,
            registry,
            pace,
            cleanup: cleanup.to_string(),
            released: false,
        }
    }
    pub fn set_instance(&self, id: &str) {
        self.registry
            .update(self.key, |o| o.instance = Some(id.to_string()));
    }
    pub fn set_volume(&self, id: &str) {
        self.registry
            .update(self.key, |o| o.volume = Some(id.to_string()));
    }
    pub fn owned(&self) -> Owned {
        let live = self.registry.live.lock().expect("registry");
        live.get(&self.key).cloned().unwrap_or_default()
    }

    /// Tears everything down. On failure the ids stay registered (so a
    /// later `release_all` retries) and the error names them.
    pub async fn release(&mut self) -> Result<(), Ec2Error> {
        if self.released {
            return Ok(());
        }
        let owned = self.owned();
        match teardown(&self.client, &owned, self.pace).await {
            Ok(()) => {
                self.registry.take(self.key);
                self.released = true;
                Ok(())
            }
            Err((left, errors)) => {
                self.registry.update(self.key, |o| {
                    o.instance = owned.instance.clone().filter(|i| left.contains(i));
                    o.volume = owned.volume.clone().filter(|v| left.contains(v));
                });
                Err(Ec2Error::Leaked {
                    ids: left.join(", "),
                    cleanup: self.cleanup.clone(),
                    errors,
                })
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Some(owned) = self.registry.take(self.key) else {
            return;
        };
        if owned.ids().is_empty() {
            return;
        }
        let ids = owned.ids().join(", ");
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                tracing::warn!(
                    "EC2 resources dropped without teardown: removing {ids} in the background"
                );
                let (client, pace, cleanup) =
                    (self.client.clone(), self.pace, self.cleanup.clone());
                let h = rt.spawn(async move {
                    let r = teardown(&client, &owned, pace).await;
                    if let Err((left, errors)) = &r {
                        tracing::error!(
                            "could not remove {}: {errors}; run `{cleanup}`",
                            left.join(", ")
                        );
                    }
                    r
                });
                self.registry.background.lock().expect("registry").push(h);
            }
            Err(_) => tracing::error!(
                "EC2 resources {ids} dropped outside a runtime; run `{}`",
                self.cleanup
            ),
        }
    }
}

/// Tears down everything still registered and waits for background
/// cleanups, folding their failures in: every run's last step, after
/// Ctrl-C and failed cells included.
pub async fn release_all(
    c: &Client,
    registry: &Registry,
    pace: Pace,
    cleanup: &str,
) -> Result<(), Ec2Error> {
    let mut left = Vec::new();
    let mut errors = Vec::new();
    for owned in registry.take_all() {
        if let Err((l, e)) = teardown(c, &owned, pace).await {
            left.extend(l);
            errors.push(e);
        }
    }
    for h in registry.take_background() {
        match h.await {
            Ok(Ok(())) => {}
            Ok(Err((l, e))) => {
                left.extend(l);
                errors.push(e);
            }
            Err(e) => errors.push(format!("a background teardown failed: {e}")),
        }
    }
    if left.is_empty() && errors.is_empty() {
        Ok(())
    } else {
        Err(Ec2Error::Leaked {
            ids: if left.is_empty() {
                "(unknown ids)".into()
            } else {
                left.join(", ")
            },
            cleanup: cleanup.to_string(),
            errors: errors.join("\n"),
        })
    }
}
