//! The run lease sweeper: a `running` Patrol run whose lease lapsed (its runner died, hung or
//! lost the database) ends `error` with cause `runner_lost`, with its `events.run.completed`
//! through the outbox in the same transaction.
//!
//! Every few seconds it lists the lapsed leases of every tenant (`pulse_expired_run_leases`, the
//! identities-only door through row-level security) and ends each run in its own tenant's
//! transaction with the store's compare-and-swap, which locks the row and re-checks the lease:
//! a runner that renewed in the meantime keeps its run, and two schedulers sweeping at once end
//! a run once. A late terminal write of the lost runner then finds the run ended and changes
//! nothing.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pulse_bus::events::{RUN_COMPLETED, RunCompleted};
use pulse_bus::{OutboxRow, Subjects};
use pulse_domain::TenantId;
use pulse_domain::patrol::run::RunId;
use pulse_store::{Store, StoreError, patrol_runs};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Lapsed leases handled per sweep round.
pub const SWEEP_BATCH: i32 = 100;

/// Ends runs whose runner was lost.
#[derive(Clone)]
pub struct LeaseSweeper {
    store: Store,
    subjects: Subjects,
    interval: Duration,
    outbox_notify: Option<Arc<Notify>>,
}

impl std::fmt::Debug for LeaseSweeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseSweeper")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// Why a sweep failed.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Outbox(#[from] pulse_bus::OutboxError),
}

impl LeaseSweeper {
    pub fn new(store: Store, subjects: Subjects, interval: Duration) -> Self {
        Self {
            store,
            subjects,
            interval,
            outbox_notify: None,
        }
    }

    /// Wakes the outbox relay after each run it ends.
    pub fn with_outbox_notify(mut self, notify: Arc<Notify>) -> Self {
        self.outbox_notify = Some(notify);
        self
    }

    /// Sweeps every `interval` until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            match self.sweep().await {
                Ok(0) => {}
                Ok(ended) => tracing::info!(ended, "lost runs ended"),
                Err(error) => {
                    tracing::warn!(%error, "lease sweep failed; retrying at the next tick")
                }
            }
        }
    }

    /// One round: ends every run whose lease lapsed (in batches). Returns how many it ended.
    pub async fn sweep(&self) -> Result<usize, SweepError> {
        let mut ended = 0;
        loop {
            let expired = patrol_runs::expired_leases(&self.store, SWEEP_BATCH).await?;
            let found = expired.len();
            let mut progressed = false;
            for (tenant, run_id) in expired {
                match self.end(&tenant, run_id).await {
                    Ok(true) => {
                        ended += 1;
                        progressed = true;
                    }
                    // Renewed or ended in the meantime.
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(tenant = %tenant, run_id = %run_id, %error, "ending a lost run failed");
                    }
                }
            }
            if found < SWEEP_BATCH as usize || !progressed {
                return Ok(ended);
            }
        }
    }

    /// Ends one run `runner_lost` if its lease still lapsed; `false` when it did not any more.
    async fn end(&self, tenant: &TenantId, run_id: RunId) -> Result<bool, SweepError> {
        let tx = self.store.tenant_tx(tenant).await?;
        let Some(run) = patrol_runs::lose_expired(&tx, run_id, Utc::now()).await? else {
            tx.rollback().await?;
            return Ok(false);
        };
        let (domain, event) = RUN_COMPLETED;
        let row = OutboxRow::event(
            &self.subjects,
            tenant,
            domain,
            event,
            &RunCompleted::of(&run),
        )?;
        pulse_bus::enqueue(&**tx.client(), row).await?;
        tx.commit().await?;
        if let Some(notify) = &self.outbox_notify {
            notify.notify_one();
        }
        tracing::warn!(tenant = %tenant, run_id = %run_id, detail = run.error_detail.as_deref().unwrap_or(""), "patrol run ended: runner lost");
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use pulse_domain::patrol::run::{ErrorCause, PatrolRun, RunStatus, RunType, TriggerReason};
    use pulse_store::tenants;
    use pulse_test_support::db::TestDb;

    async fn queued(db: &TestDb, tenant: &TenantId) -> RunId {
        let run = PatrolRun::queued(
            patrol_runs::new_run_id(),
            TriggerReason::Manual,
            RunType::Full,
            Utc::now(),
        );
        let tx = db.store().tenant_tx(tenant).await.unwrap();
        assert!(patrol_runs::insert_queued(&tx, &run, None).await.unwrap());
        tx.commit().await.unwrap();
        run.id
    }

    async fn start(db: &TestDb, tenant: &TenantId, id: RunId, lease: Duration) {
        let tx = db.store().tenant_tx(tenant).await.unwrap();
        patrol_runs::start(&tx, id, "runner-a", lease, Utc::now(), None)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }

    async fn get(db: &TestDb, tenant: &TenantId, id: RunId) -> PatrolRun {
        let tx = db.store().tenant_tx(tenant).await.unwrap();
        let run = patrol_runs::get(&tx, id).await.unwrap().unwrap();
        tx.commit().await.unwrap();
        run
    }

    /// Moves a run's lease into the past, as a runner that stopped renewing leaves it.
    async fn lapse(db: &TestDb, id: RunId) {
        let owner = db.owner_client().await.unwrap();
        owner
            .execute(
                "UPDATE patrol_runs SET lease_expires_at = now() - interval '1 second'
                 WHERE id = $1",
                &[&id.as_uuid()],
            )
            .await
            .unwrap();
    }

    async fn completed_events(db: &TestDb) -> Vec<(String, String)> {
        let owner = db.owner_client().await.unwrap();
        owner
            .query(
                "SELECT subject, payload->>'error_cause' FROM outbox
                 WHERE subject LIKE '%.events.run.completed' ORDER BY id",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    }

    #[tokio::test]
    async fn lapsed_leases_of_every_tenant_end_runner_lost_once() {
        let db = TestDb::create().await.unwrap();
        let acme = TenantId::new("acme").unwrap();
        let globex = TenantId::new("globex").unwrap();
        tenants::create(db.store(), &acme, "Acme").await.unwrap();
        tenants::create(db.store(), &globex, "Globex")
            .await
            .unwrap();
        let lost_a = queued(&db, &acme).await;
        let lost_g = queued(&db, &globex).await;
        let alive = queued(&db, &acme).await;
        let waiting = queued(&db, &acme).await;
        for id in [lost_a, alive] {
            start(&db, &acme, id, Duration::from_secs(60)).await;
        }
        start(&db, &globex, lost_g, Duration::from_secs(60)).await;
        lapse(&db, lost_a).await;
        lapse(&db, lost_g).await;

        let sweeper = LeaseSweeper::new(
            db.store().clone(),
            Subjects::new(None),
            Duration::from_secs(1),
        );
        assert_eq!(sweeper.sweep().await.unwrap(), 2);
        for (tenant, id) in [(&acme, lost_a), (&globex, lost_g)] {
            let run = get(&db, tenant, id).await;
            assert_eq!(run.status, RunStatus::Error);
            assert_eq!(run.error_cause, Some(ErrorCause::RunnerLost));
            assert_eq!(
                run.error_detail.as_deref(),
                Some("runner runner-a stopped renewing its lease")
            );
        }
        assert_eq!(get(&db, &acme, alive).await.status, RunStatus::Running);
        assert_eq!(get(&db, &acme, waiting).await.status, RunStatus::Queued);
        // A second sweep finds nothing: one terminal record, one completion event per run.
        assert_eq!(sweeper.sweep().await.unwrap(), 0);
        let mut events = completed_events(&db).await;
        events.sort();
        assert_eq!(
            events,
            [
                ("pulse.acme.events.run.completed", "runner_lost"),
                ("pulse.globex.events.run.completed", "runner_lost"),
            ]
            .map(|(s, c)| (s.to_owned(), c.to_owned()))
        );
        // The lost runner can neither renew nor finish any more.
        let tx = db.store().tenant_tx(&acme).await.unwrap();
        assert!(
            patrol_runs::renew_lease(&tx, lost_a, "runner-a", Duration::from_secs(60))
                .await
                .unwrap()
                .is_none()
        );
        tx.commit().await.unwrap();
        db.cleanup().await.unwrap();
    }
}
