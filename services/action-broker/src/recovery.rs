//! The recovery sweep: at start and every [`BrokerSettings::sweep_interval`], every unfinished
//! action of every tenant (a plan past its expiry, `approved`, `executing`, `completed` without
//! a verification) is handed to [`Broker::advance`], which expires it, executes it, learns its
//! receipt by sending the same command again, or verifies it.
//!
//! So a broker (or relay) killed anywhere between an approval and the receipt leaves nothing
//! behind: the next sweep of any replica takes the action up from its stored state, and the
//! agent's at-most-once execution per action id makes the re-sent command safe. What this
//! process is driving already is skipped ([`Broker::claim`]); several replicas sweeping at once
//! are safe because every change is a compare-and-swap.
//!
//! [`BrokerSettings::sweep_interval`]: crate::broker::BrokerSettings::sweep_interval

use std::future::Future;

use pulse_store::actions;

use crate::broker::Broker;

/// Unfinished actions read per sweep.
const SWEEP_ROWS: i32 = 1_000;
/// Actions this process drives at once; a sweep takes no more beyond it.
const MAX_IN_FLIGHT: usize = 256;

impl Broker {
    /// One sweep: hands every unfinished action this process is not driving yet to a background
    /// [`Broker::advance`]. Returns how many it started.
    pub async fn sweep(&self) -> Result<usize, pulse_store::StoreError> {
        let unfinished = actions::unfinished(&self.store, SWEEP_ROWS).await?;
        let mut started = 0;
        for action in unfinished {
            if self.in_flight() >= MAX_IN_FLIGHT {
                break;
            }
            let Some(claim) = self.claim(action.action_id) else {
                continue;
            };
            let this = self.clone();
            self.advancing.spawn(async move {
                let id = action.action_id;
                if let Err(error) = this.advance_claimed(&action.tenant, id, claim).await {
                    tracing::warn!(action_id = %id, tenant = %action.tenant, %error, "recovery did not advance the action; next sweep retries");
                }
            });
            started += 1;
        }
        Ok(started)
    }

    /// Sweeps at once and then every interval until `shutdown` completes.
    pub async fn run_recovery(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            match self.sweep().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(actions = n, "recovery sweep took up unfinished actions"),
                Err(error) => tracing::warn!(%error, "recovery sweep failed; retrying"),
            }
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(self.settings.sweep_interval) => {}
            }
        }
    }
}
