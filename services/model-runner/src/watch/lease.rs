//! The lease heartbeat of a running run: every third of the lease it renews the run's lease and
//! sends a progress ack for its job, so neither the sweeper nor JetStream takes the run away
//! while this runner works on it. A renewal that finds the lease gone (the sweeper declared the
//! runner lost, or the run ended) raises [`Heartbeat::lost`]: the runner must stop at once.

use std::time::Duration;

use pulse_bus::JobContext;
use pulse_domain::TenantId;
use pulse_domain::patrol::run::RunId;
use pulse_runtime::CancellationToken;
use pulse_store::{Store, patrol_runs};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running heartbeat; [`Heartbeat::stop`] ends it, and so does dropping it (a handler that
/// panicked or was abandoned must not keep a lease alive for a run nobody works on).
#[derive(Debug)]
pub struct Heartbeat {
    /// Cancelled when the lease is known to be gone.
    lost: CancellationToken,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// What a heartbeat renews.
#[derive(Debug, Clone)]
pub struct LeaseHold {
    pub store: Store,
    pub tenant: TenantId,
    pub run_id: RunId,
    pub runner_id: String,
    pub lease: Duration,
}

impl Heartbeat {
    /// Starts renewing `hold` every `every`, with a progress ack on `job` after each renewal.
    pub fn spawn(hold: LeaseHold, every: Duration, job: JobContext) -> Self {
        let lost = CancellationToken::new();
        let lost_tx = lost.clone();
        let (stop, mut stop_rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stop_rx => return,
                    _ = ticker.tick() => {}
                }
                // A renewal slower than a beat is as good as a failed one.
                match tokio::time::timeout(every, renew(&hold)).await {
                    Ok(Ok(true)) => {
                        if let Err(error) = job.progress().await {
                            tracing::warn!(run_id = %hold.run_id, %error, "job progress ack failed");
                        }
                    }
                    Ok(Ok(false)) => {
                        tracing::warn!(run_id = %hold.run_id, runner_id = %hold.runner_id, "run lease lost; stopping the run");
                        lost_tx.cancel();
                        return;
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(run_id = %hold.run_id, %error, "lease renewal failed; retrying at the next beat");
                    }
                    Err(_) => {
                        tracing::warn!(run_id = %hold.run_id, "lease renewal timed out; retrying at the next beat");
                    }
                }
            }
        });
        Self {
            lost,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Resolves when the lease is known to be gone; never while it is held.
    pub async fn lost(&mut self) {
        // A heartbeat that ended without losing the lease (stopped) never resolves this.
        self.lost.cancelled().await;
    }

    /// Stops renewing. The lease then lapses unless the run ends first.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// `true` when the lease was renewed, `false` when it is gone.
async fn renew(hold: &LeaseHold) -> Result<bool, pulse_store::StoreError> {
    let tx = hold.store.tenant_tx(&hold.tenant).await?;
    let renewed = patrol_runs::renew_lease(&tx, hold.run_id, &hold.runner_id, hold.lease).await?;
    tx.commit().await?;
    Ok(renewed.is_some())
}
