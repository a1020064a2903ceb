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
//!
//! The same sweeper enforces the take deadline of dispatched runs ([`crate::take_deadline`]): a
//! run still `queued` a deadline after its job was written (`pulse_untaken_runs`, the database's
//! clock) gets its job written again, or, after the last re-dispatch, ends `error` with cause
//! `runner_unavailable` and its `events.run.completed`. Each run is handled in its own tenant's
//! transaction that re-checks, under the row lock, that it is still `queued` with the dispatch
//! time it was listed with: a runner that took it meanwhile keeps it, and two sweepers act once.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pulse_bus::events::{RUN_COMPLETED, RunCompleted};
use pulse_bus::patrol_api::WatchJob;
use pulse_bus::{OutboxRow, Subjects};
use pulse_domain::TenantId;
use pulse_domain::patrol::run::{ErrorCause, RunEvent, RunId};
use pulse_store::patrol_dispatch::{self, UntakenRun};
use pulse_store::patrol_runs::ApplyError;
use pulse_store::{Store, StoreError, patrol_runs};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::take_deadline::{TakeDeadline, TakeDecision, give_up_detail};

/// Lapsed leases handled per sweep round.
pub const SWEEP_BATCH: i32 = 100;

/// Ends runs whose runner was lost.
#[derive(Clone)]
pub struct LeaseSweeper {
    store: Store,
    subjects: Subjects,
    interval: Duration,
    outbox_notify: Option<Arc<Notify>>,
    take_deadline: Option<TakeDeadline>,
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
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

/// What one take-deadline sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UntakenSwept {
    /// Runs whose job was written again.
    pub redispatched: usize,
    /// Runs ended `runner_unavailable`.
    pub given_up: usize,
}

impl LeaseSweeper {
    pub fn new(store: Store, subjects: Subjects, interval: Duration) -> Self {
        Self {
            store,
            subjects,
            interval,
            outbox_notify: None,
            take_deadline: None,
        }
    }

    /// Also enforces the take deadline of dispatched runs.
    pub fn with_take_deadline(mut self, take_deadline: TakeDeadline) -> Self {
        self.take_deadline = Some(take_deadline);
        self
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
            match self.sweep_untaken().await {
                Ok(swept) if swept == UntakenSwept::default() => {}
                Ok(swept) => tracing::info!(
                    redispatched = swept.redispatched,
                    given_up = swept.given_up,
                    "untaken runs handled"
                ),
                Err(error) => {
                    tracing::warn!(%error, "take-deadline sweep failed; retrying at the next tick")
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

    /// One take-deadline round (nothing without [`Self::with_take_deadline`]): every dispatched
    /// run still `queued` past its deadline gets its job again or ends `runner_unavailable`.
    pub async fn sweep_untaken(&self) -> Result<UntakenSwept, SweepError> {
        let Some(policy) = self.take_deadline else {
            return Ok(UntakenSwept::default());
        };
        let mut swept = UntakenSwept::default();
        loop {
            let untaken =
                patrol_dispatch::untaken(&self.store, policy.deadline, SWEEP_BATCH).await?;
            let found = untaken.len();
            let mut progressed = false;
            for run in untaken {
                let decision = policy.decide(run.dispatched_at, run.redispatches, run.now);
                let handled = match decision {
                    TakeDecision::Wait => Ok(false),
                    TakeDecision::Redispatch { attempt } => self.redispatch(&run, attempt).await,
                    TakeDecision::GiveUp => self.give_up(&policy, &run).await,
                };
                match (decision, handled) {
                    (TakeDecision::Redispatch { .. }, Ok(true)) => swept.redispatched += 1,
                    (TakeDecision::GiveUp, Ok(true)) => swept.given_up += 1,
                    // Taken, ended or handled by another sweeper in the meantime.
                    (_, Ok(_)) => continue,
                    (_, Err(error)) => {
                        tracing::warn!(tenant = %run.tenant, run_id = %run.run_id, %error, "handling an untaken run failed");
                        continue;
                    }
                }
                progressed = true;
            }
            if found < SWEEP_BATCH as usize || !progressed {
                if swept.redispatched > 0 || swept.given_up > 0 {
                    if let Some(notify) = &self.outbox_notify {
                        notify.notify_one();
                    }
                }
                return Ok(swept);
            }
        }
    }

    /// Writes the job of an untaken run again if it is still untaken as listed.
    async fn redispatch(&self, run: &UntakenRun, attempt: u32) -> Result<bool, SweepError> {
        let tx = self.store.tenant_tx(&run.tenant).await?;
        if !patrol_dispatch::mark_redispatched(&tx, run.run_id, run.dispatched_at).await? {
            tx.rollback().await?;
            return Ok(false);
        }
        let job = WatchJob {
            run_id: run.run_id,
            run_type: run.run_type,
            trigger_reason: run.trigger_reason,
        };
        crate::dispatcher::enqueue_watch_job(&self.subjects, &tx, &job).await?;
        tx.commit().await?;
        tracing::warn!(
            tenant = %run.tenant,
            run_id = %run.run_id,
            attempt,
            waited_ms = (run.now - run.dispatched_at).num_milliseconds(),
            "no runner took the patrol run's job; job written again"
        );
        Ok(true)
    }

    /// Ends an untaken run `runner_unavailable` if it is still untaken as listed.
    async fn give_up(&self, policy: &TakeDeadline, run: &UntakenRun) -> Result<bool, SweepError> {
        let tx = self.store.tenant_tx(&run.tenant).await?;
        if !patrol_dispatch::lock_untaken(&tx, run.run_id, run.dispatched_at).await? {
            tx.rollback().await?;
            return Ok(false);
        }
        let detail = give_up_detail(policy, run.redispatches);
        let ended = patrol_runs::finish(
            &tx,
            run.run_id,
            None,
            RunEvent::Failed {
                cause: ErrorCause::RunnerUnavailable,
            },
            Utc::now(),
            Some(&detail),
            |_| {},
        )
        .await?;
        let (domain, event) = RUN_COMPLETED;
        let row = OutboxRow::event(
            &self.subjects,
            &run.tenant,
            domain,
            event,
            &RunCompleted::of(&ended),
        )?;
        pulse_bus::enqueue(&**tx.client(), row).await?;
        tx.commit().await?;
        pulse_runtime::metrics::patrol_run_ended(&ended);
        tracing::warn!(tenant = %run.tenant, run_id = %run.run_id, %detail, "patrol run ended: no runner took it");
        Ok(true)
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
        pulse_runtime::metrics::patrol_run_ended(&run);
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

    async fn dispatch(db: &TestDb, tenant: &TenantId, id: RunId) {
        let tx = db.store().tenant_tx(tenant).await.unwrap();
        assert!(patrol_dispatch::mark_dispatched(&tx, id).await.unwrap());
        tx.commit().await.unwrap();
    }

    /// Moves a run's dispatch time `secs` into the past, as time passing without a runner does.
    async fn age_dispatch(db: &TestDb, id: RunId, secs: i32) {
        let owner = db.owner_client().await.unwrap();
        owner
            .execute(
                "UPDATE patrol_runs SET dispatched_at = now() - make_interval(secs => $2)
                 WHERE id = $1",
                &[&id.as_uuid(), &f64::from(secs)],
            )
            .await
            .unwrap();
    }

    async fn watch_jobs(db: &TestDb, id: RunId) -> i64 {
        let owner = db.owner_client().await.unwrap();
        owner
            .query_one(
                "SELECT count(*) FROM outbox
                 WHERE subject LIKE '%.jobs.watch' AND payload->>'run_id' = $1",
                &[&id.to_string()],
            )
            .await
            .unwrap()
            .get(0)
    }

    #[tokio::test]
    async fn an_untaken_run_is_dispatched_again_then_ends_runner_unavailable() {
        let db = TestDb::create().await.unwrap();
        let acme = TenantId::new("acme").unwrap();
        tenants::create(db.store(), &acme, "Acme").await.unwrap();
        let untaken = queued(&db, &acme).await;
        let taken = queued(&db, &acme).await;
        let fresh = queued(&db, &acme).await;
        for id in [untaken, taken, fresh] {
            dispatch(&db, &acme, id).await;
        }
        // `taken` was started by a runner; `fresh` was dispatched just now.
        start(&db, &acme, taken, Duration::from_secs(60)).await;
        let sweeper = LeaseSweeper::new(
            db.store().clone(),
            Subjects::new(None),
            Duration::from_secs(1),
        )
        .with_take_deadline(TakeDeadline {
            deadline: Duration::from_secs(30),
            max_redispatches: 1,
        });

        assert_eq!(
            sweeper.sweep_untaken().await.unwrap(),
            UntakenSwept::default()
        );
        age_dispatch(&db, untaken, 31).await;
        age_dispatch(&db, taken, 31).await;
        assert_eq!(
            sweeper.sweep_untaken().await.unwrap(),
            UntakenSwept {
                redispatched: 1,
                given_up: 0
            }
        );
        // The first job is not in the outbox here (only the dispatch mark is): one job, the
        // re-dispatch's.
        assert_eq!(
            watch_jobs(&db, untaken).await,
            1,
            "the job was written again"
        );
        assert_eq!(get(&db, &acme, untaken).await.status, RunStatus::Queued);
        // The re-dispatch restarted the deadline.
        assert_eq!(
            sweeper.sweep_untaken().await.unwrap(),
            UntakenSwept::default()
        );

        age_dispatch(&db, untaken, 31).await;
        assert_eq!(
            sweeper.sweep_untaken().await.unwrap(),
            UntakenSwept {
                redispatched: 0,
                given_up: 1
            }
        );
        let run = get(&db, &acme, untaken).await;
        assert_eq!(run.status, RunStatus::Error);
        assert_eq!(run.error_cause, Some(ErrorCause::RunnerUnavailable));
        assert_eq!(
            run.error_summary.as_deref(),
            Some(ErrorCause::RunnerUnavailable.summary())
        );
        assert!(
            run.error_detail
                .as_deref()
                .is_some_and(|d| d.contains("check that the model-runner service is running")),
            "{:?}",
            run.error_detail
        );
        assert_eq!(watch_jobs(&db, untaken).await, 1, "no job after giving up");
        assert_eq!(
            completed_events(&db).await,
            [(
                "pulse.acme.events.run.completed".to_owned(),
                "runner_unavailable".to_owned()
            )]
        );
        // Ended once; the started run and the fresh one were never touched.
        assert_eq!(
            sweeper.sweep_untaken().await.unwrap(),
            UntakenSwept::default()
        );
        assert_eq!(get(&db, &acme, taken).await.status, RunStatus::Running);
        assert_eq!(watch_jobs(&db, taken).await, 0);
        assert_eq!(get(&db, &acme, fresh).await.status, RunStatus::Queued);
        assert_eq!(watch_jobs(&db, fresh).await, 0);
        db.cleanup().await.unwrap();
    }

    #[tokio::test]
    async fn two_sweepers_handle_an_untaken_run_once() {
        let db = TestDb::create().await.unwrap();
        let acme = TenantId::new("acme").unwrap();
        tenants::create(db.store(), &acme, "Acme").await.unwrap();
        let id = queued(&db, &acme).await;
        dispatch(&db, &acme, id).await;
        age_dispatch(&db, id, 10).await;
        let sweeper = || {
            LeaseSweeper::new(
                db.store().clone(),
                Subjects::new(None),
                Duration::from_secs(1),
            )
            .with_take_deadline(TakeDeadline {
                deadline: Duration::from_secs(5),
                max_redispatches: 3,
            })
        };
        let (a, b) = (sweeper(), sweeper());
        let (ra, rb) = tokio::join!(a.sweep_untaken(), b.sweep_untaken());
        assert_eq!(ra.unwrap().redispatched + rb.unwrap().redispatched, 1);
        assert_eq!(watch_jobs(&db, id).await, 1, "one job written again");
        db.cleanup().await.unwrap();
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
