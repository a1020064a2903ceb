//! Investigation leases: the renewal of a running attempt's lease by the runner that holds it,
//! and the sweeper that takes over attempts whose runner was lost.
//!
//! The sweeper runs in every model-runner. Every [`SWEEP_EVERY`] it lists the lapsed leases of
//! every tenant (`pulse_expired_investigation_leases`, identities only) and takes each attempt
//! over in its own tenant's transaction with [`investigations::take_over`], a compare-and-swap
//! under the row lock: of two runners sweeping at once one takes it, and a runner that renewed
//! meanwhile keeps it. What the taker does, in that transaction:
//!
//! - the attempt was taken over more than [`MAX_TAKEOVERS`] times: it ends `failed` with cause
//!   `runner_lost`, so an investigation that keeps killing its runners is not retried forever;
//! - the lost runner had already submitted its proposal (an action planned for the finding by
//!   `patrol:investigation` since the attempt started): the attempt ends with that action, and
//!   no second plan is made;
//! - otherwise the attempt runs again from the committed finding, under the taker's lease.

use std::sync::Arc;
use std::time::Duration;

use pulse_domain::TenantId;
use pulse_domain::finding::{Finding, FindingId};
use pulse_domain::patrol::run::RunId;
use pulse_runtime::CancellationToken;
use pulse_store::investigations::{
    self, ActionReference, InvestigationRecord, InvestigationStatus, ProposalSummary,
};
use pulse_store::{Store, StoreError, actions, findings};
use tokio::task::{JoinHandle, JoinSet};
use uuid::Uuid;

use super::{InvestigationService, REQUESTED_BY, base_record, gate};

/// How often the sweeper looks for lapsed leases.
pub const SWEEP_EVERY: Duration = Duration::from_secs(2);
/// Lapsed leases handled per sweep round.
pub const SWEEP_BATCH: i32 = 100;
/// Takeovers of one attempt before it ends `failed` (`runner_lost`).
pub const MAX_TAKEOVERS: u32 = 2;

/// What a renewal holds.
#[derive(Debug, Clone)]
pub struct Hold {
    pub store: Store,
    pub tenant: TenantId,
    pub id: Uuid,
    pub runner_id: String,
    pub lease: Duration,
}

/// Renews an attempt's lease every third of it until stopped or dropped (an abandoned attempt
/// must not keep a lease alive for work nobody does).
#[derive(Debug)]
pub struct Renewal {
    lost: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Renewal {
    pub fn spawn(hold: Hold) -> Self {
        let lost = CancellationToken::new();
        let lost_tx = lost.clone();
        let every = hold.lease / 3;
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                // A renewal slower than a beat is as good as a failed one.
                match tokio::time::timeout(every, renew(&hold)).await {
                    Ok(Ok(true)) => {}
                    Ok(Ok(false)) => {
                        lost_tx.cancel();
                        return;
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(investigation_id = %hold.id, %error, "investigation lease renewal failed; retrying at the next beat");
                    }
                    Err(_) => {
                        tracing::warn!(investigation_id = %hold.id, "investigation lease renewal timed out; retrying at the next beat");
                    }
                }
            }
        });
        Self {
            lost,
            task: Some(task),
        }
    }

    /// Resolves when the lease is known to be gone; never while it is held.
    pub async fn lost(&mut self) {
        self.lost.cancelled().await;
    }

    /// Stops renewing.
    pub async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn renew(hold: &Hold) -> Result<bool, StoreError> {
    let tx = hold.store.tenant_tx(&hold.tenant).await?;
    let renewed = investigations::renew_lease(&tx, hold.id, &hold.runner_id, hold.lease).await?;
    tx.commit().await?;
    Ok(renewed)
}

/// What taking over one lapsed attempt came to.
#[derive(Debug)]
pub enum Takeover {
    /// Someone else holds or ended it.
    NotTaken,
    /// Ended in the takeover's transaction (too many takeovers, or its proposal was made).
    Ended(InvestigationStatus),
    /// To run again under this runner's lease.
    Run {
        id: Uuid,
        run_id: RunId,
        finding: Box<Finding>,
    },
}

impl InvestigationService {
    /// Takes over one attempt whose lease lapsed (see the module docs).
    pub async fn take_over(&self, tenant: &TenantId, id: Uuid) -> Result<Takeover, StoreError> {
        let tx = self.store.tenant_tx(tenant).await?;
        let Some(taken) = investigations::take_over(&tx, id, &self.runner_id, self.lease).await?
        else {
            return Ok(Takeover::NotTaken);
        };
        let attempt = taken.attempt;
        let finding_id: FindingId = attempt
            .finding_id
            .parse()
            .map_err(|_| StoreError::Invalid(format!("finding id {:?}", attempt.finding_id)))?;
        let Some(stored) = findings::get(&tx, finding_id).await? else {
            // The finding is gone: the lease lapses again and the timeout ends the attempt.
            tx.commit().await?;
            tracing::warn!(tenant = %tenant, investigation_id = %id, %finding_id, "taken-over investigation has no finding");
            return Ok(Takeover::NotTaken);
        };
        let run_id = RunId::from_uuid(attempt.watch_run_id);
        let finding = stored.finding;
        let base = || base_record(id, run_id, &finding, attempt.started_at);
        let ended = if taken.takeovers > MAX_TAKEOVERS {
            Some(InvestigationRecord {
                status: InvestigationStatus::Failed,
                error: format!(
                    "runner_lost: the runner of this investigation was lost {} times; \
                     it is not run again",
                    taken.takeovers
                ),
                ..base()
            })
        } else {
            actions::latest_for_finding(&tx, finding_id, REQUESTED_BY, attempt.started_at)
                .await?
                .map(|action| {
                    let summary = ProposalSummary {
                        resource_id: action.plan.resource_id.clone(),
                        causal_resource_id: action.plan.resource_id.clone(),
                        capability_name: action.plan.capability.as_str().to_owned(),
                        reason: action.plan.reason.clone(),
                    };
                    InvestigationRecord {
                        status: InvestigationStatus::Completed,
                        outcome: Some(gate::plan_outcome(action.state)),
                        recommended_action: format!(
                            "{} on {}",
                            summary.capability_name, summary.resource_id
                        ),
                        proposal: Some(summary),
                        action: Some(ActionReference {
                            action_id: action.plan.action_id,
                            state: action.state.as_str().to_owned(),
                        }),
                        error: "the runner was lost after submitting this proposal; \
                                the proposal stands"
                            .to_owned(),
                        ..base()
                    }
                })
        };
        match ended {
            Some(record) => {
                investigations::finish(&tx, &record, Some(&self.runner_id)).await?;
                tx.commit().await?;
                tracing::warn!(tenant = %tenant, investigation_id = %id, takeovers = taken.takeovers, status = record.status.as_str(), "lost runner's investigation ended");
                Ok(Takeover::Ended(record.status))
            }
            None => {
                tx.commit().await?;
                tracing::warn!(tenant = %tenant, investigation_id = %id, takeovers = taken.takeovers, "lost runner's investigation taken over; running it again");
                Ok(Takeover::Run {
                    id,
                    run_id,
                    finding: Box::new(finding),
                })
            }
        }
    }

    /// One sweep: takes over every lapsed attempt it can and spawns the runs into `running`.
    /// Returns how many attempts were taken over.
    pub async fn sweep(self: &Arc<Self>, running: &mut JoinSet<()>) -> Result<usize, StoreError> {
        let expired = investigations::expired_leases(&self.store, SWEEP_BATCH).await?;
        let mut taken = 0;
        for (tenant, id) in expired {
            match self.take_over(&tenant, id).await {
                Ok(Takeover::NotTaken) => {}
                Ok(Takeover::Ended(_)) => taken += 1,
                Ok(Takeover::Run {
                    id,
                    run_id,
                    finding,
                }) => {
                    taken += 1;
                    let this = self.clone();
                    running.spawn(
                        async move { this.investigate(&tenant, id, run_id, *finding).await },
                    );
                }
                Err(error) => {
                    tracing::warn!(tenant = %tenant, investigation_id = %id, %error, "investigation takeover failed");
                }
            }
        }
        Ok(taken)
    }

    /// Sweeps every [`SWEEP_EVERY`] until `stop`; the runs it took over are abandoned at stop
    /// (their leases lapse for another runner).
    pub(super) async fn sweep_until(self: Arc<Self>, stop: CancellationToken) {
        let mut running: JoinSet<()> = JoinSet::new();
        let mut ticker = tokio::time::interval(SWEEP_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = ticker.tick() => {}
            }
            while running.try_join_next().is_some() {}
            if let Err(error) = self.sweep(&mut running).await {
                tracing::warn!(%error, "investigation lease sweep failed");
            }
        }
        running.shutdown().await;
    }
}
