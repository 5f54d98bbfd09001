//! Polling a resource until it reaches a state.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Ec2Error;

/// What one probe saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe<T> {
    Ready(T),
    /// Not yet; the current state, for the timeout message.
    Pending(String),
    /// A state from which the wanted one cannot be reached.
    Failed(String),
}

/// Probes every `interval` until ready, failed or `timeout`. The first
/// probe runs at once: the emulator (and a fast API) is often ready.
pub async fn until<T, F, Fut>(
    what: &str,
    wanted: &str,
    interval: Duration,
    timeout: Duration,
    mut probe: F,
) -> Result<T, Ec2Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Probe<T>, Ec2Error>>,
{
    let start = Instant::now();
    loop {
        match probe().await? {
            Probe::Ready(v) => return Ok(v),
            Probe::Failed(state) => {
                return Err(Ec2Error::UnexpectedState {
                    what: what.to_string(),
                    state,
                    wanted: wanted.to_string(),
                })
            }
            Probe::Pending(state) => {
                if start.elapsed() + interval > timeout {
                    return Err(Ec2Error::Timeout {
                        what: format!("{what} to become {wanted}"),
                        waited: start.elapsed(),
                        last: state,
                    });
                }
            }
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn returns_when_ready_and_times_out_otherwise() {
        let mut n = 0;
        let v = until(
            "i-1",
            "running",
            Duration::from_secs(5),
            Duration::from_secs(60),
            || {
                n += 1;
                let r = if n < 3 {
                    Probe::Pending("pending".into())
                } else {
                    Probe::Ready(n)
                };
                async move { Ok(r) }
            },
        )
        .await
        .unwrap();
        assert_eq!(v, 3);

        let e = until::<(), _, _>(
            "vol-1",
            "available",
            Duration::from_secs(5),
            Duration::from_secs(20),
            || async { Ok(Probe::Pending("creating".into())) },
        )
        .await
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("vol-1 to become available"), "{msg}");
        assert!(msg.contains("last state: creating"), "{msg}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_end_state_fails_at_once() {
        let e = until::<(), _, _>(
            "i-1",
            "running",
            Duration::from_secs(5),
            Duration::from_secs(60),
            || async { Ok(Probe::Failed("terminated".into())) },
        )
        .await
        .unwrap_err();
        assert!(e
            .to_string()
            .contains("state `terminated` instead of `running`"));
    }
}
