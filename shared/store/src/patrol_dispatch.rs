//! Patrol run dispatch over the store: what the patrol-scheduler's dispatcher reads across tenants
//! (the schedule, runs waiting for admission, runs in flight and which of them ended), the
//! per-tenant checks of the accept path, the dispatch mark, and the dispatcher's leadership lock.
//!
//! A run is recorded `queued` at acceptance; [`mark_dispatched`] sets `dispatched_at` in the
//! transaction that enqueues its `jobs.watch` job, so a run has a job exactly when it has a
//! dispatch time.
//!
//! The take deadline: a dispatched run still `queued` long after its job was written was taken
//! by no runner. [`untaken`] lists such runs; [`mark_redispatched`] moves `dispatched_at` to the
//! transaction that writes the job again and counts it, and [`lock_untaken`] holds a run that is
//! to end `runner_unavailable`. Both re-check, under the row lock, that the run is still `queued`
//! with the dispatch time it was listed with, so two sweepers act on a run once and a runner that
//! started it in the meantime keeps it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use pulse_domain::TenantId;
use pulse_domain::patrol::run::{RunId, RunStatus, RunType, TriggerReason};

use crate::{Store, StoreError, TenantTx};

/// Upper bound on the rows one cross-tenant read returns.
pub const MAX_ROWS: i32 = 100_000;

fn invalid(e: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(e.to_string())
}

fn tenant(value: String) -> Result<TenantId, StoreError> {
    TenantId::new(value).map_err(invalid)
}

fn run_type(value: &str) -> Result<RunType, StoreError> {
    match value {
        "full" => Ok(RunType::Full),
        "scoped" => Ok(RunType::Scoped),
        other => Err(invalid(format!("unknown patrol run type {other:?}"))),
    }
}

fn trigger_reason(value: &str) -> Result<TriggerReason, StoreError> {
    TriggerReason::ALL
        .into_iter()
        .find(|reason| reason.as_str() == value)
        .ok_or_else(|| invalid(format!("unknown patrol trigger reason {value:?}")))
}

fn run_status(value: &str) -> Result<RunStatus, StoreError> {
    RunStatus::ALL
        .into_iter()
        .find(|status| status.as_str() == value)
        .ok_or_else(|| invalid(format!("unknown patrol run status {value:?}")))
}

/// One tenant's schedule facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSchedule {
    pub tenant: TenantId,
    /// The cadence the tenant stored; `None`: not set (config or the default applies).
    pub patrol_interval_minutes: Option<u32>,
    pub last_successful_full_at: Option<DateTime<Utc>>,
}

/// Every tenant with its schedule facts, at most `max_rows`.
pub async fn schedule(store: &Store, max_rows: i32) -> Result<Vec<TenantSchedule>, StoreError> {
    let client = store.pool().get().await?;
    let rows = client
        .query(
            "SELECT tenant_id, patrol_interval_minutes, last_successful_full_at
             FROM pulse_patrol_schedule($1)",
            &[&max_rows],
        )
        .await?;
    rows.into_iter()
        .map(|row| {
            let minutes: Option<i32> = row.get(1);
            Ok(TenantSchedule {
                tenant: tenant(row.get(0))?,
                patrol_interval_minutes: minutes.and_then(|m| u32::try_from(m).ok()),
                last_successful_full_at: row.get(2),
            })
        })
        .collect()
}

/// A run accepted and not yet dispatched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndispatchedRun {
    pub tenant: TenantId,
    pub run_id: RunId,
    pub run_type: RunType,
    pub trigger_reason: TriggerReason,
    pub queued_at: DateTime<Utc>,
    pub scope_resource_ids: Vec<String>,
}

/// Runs of every tenant waiting for dispatch, oldest accepted first, at most `max_rows`.
pub async fn undispatched(
    store: &Store,
    max_rows: i32,
) -> Result<Vec<UndispatchedRun>, StoreError> {
    let client = store.pool().get().await?;
    let rows = client
        .query(
            "SELECT tenant_id, run_id, run_type, trigger_reason, queued_at, scope_resource_ids
             FROM pulse_undispatched_runs($1)",
            &[&max_rows],
        )
        .await?;
    rows.into_iter()
        .map(|row| {
            Ok(UndispatchedRun {
                tenant: tenant(row.get(0))?,
                run_id: RunId::from_uuid(row.get(1)),
                run_type: run_type(row.get(2))?,
                trigger_reason: trigger_reason(row.get(3))?,
                queued_at: row.get(4),
                scope_resource_ids: row.get(5),
            })
        })
        .collect()
}

/// A dispatched run that has not ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlightRun {
    pub tenant: TenantId,
    pub run_id: RunId,
    pub run_type: RunType,
}

/// Dispatched runs of every tenant still `queued` or `running`, at most `max_rows`.
pub async fn in_flight(store: &Store, max_rows: i32) -> Result<Vec<InFlightRun>, StoreError> {
    let client = store.pool().get().await?;
    let rows = client
        .query(
            "SELECT tenant_id, run_id, run_type FROM pulse_dispatched_in_flight($1)",
            &[&max_rows],
        )
        .await?;
    rows.into_iter()
        .map(|row| {
            Ok(InFlightRun {
                tenant: tenant(row.get(0))?,
                run_id: RunId::from_uuid(row.get(1)),
                run_type: run_type(row.get(2))?,
            })
        })
        .collect()
}

/// A run that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedRun {
    pub tenant: TenantId,
    pub run_id: RunId,
    pub run_type: RunType,
    pub status: RunStatus,
    pub completed_at: DateTime<Utc>,
}

/// Of `runs` (tenant and id), those that ended.
pub async fn finished(
    store: &Store,
    runs: &[(TenantId, RunId)],
) -> Result<Vec<FinishedRun>, StoreError> {
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let tenants: Vec<&str> = runs.iter().map(|(t, _)| t.as_str()).collect();
    let ids: Vec<uuid::Uuid> = runs.iter().map(|(_, id)| id.as_uuid()).collect();
    let client = store.pool().get().await?;
    let rows = client
        .query(
            "SELECT tenant_id, run_id, run_type, status, completed_at
             FROM pulse_finished_runs($1, $2)",
            &[&tenants, &ids],
        )
        .await?;
    rows.into_iter()
        .map(|row| {
            Ok(FinishedRun {
                tenant: tenant(row.get(0))?,
                run_id: RunId::from_uuid(row.get(1)),
                run_type: run_type(row.get(2))?,
                status: run_status(row.get(3))?,
                completed_at: row.get(4),
            })
        })
        .collect()
}

/// Serializes the accept path of the tenant of `tx` until the transaction ends, so two racing
/// requests cannot both pass the checks below.
pub async fn lock_accept(tx: &TenantTx) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('pulse.patrol.accept.' || $1, 0))",
            &[&tx.tenant().as_str()],
        )
        .await?;
    Ok(())
}

/// The full run of the tenant that is `queued` or `running`, if any (the oldest).
pub async fn active_full_run(tx: &TenantTx) -> Result<Option<RunId>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT id FROM patrol_runs
             WHERE status IN ('queued', 'running') AND run_type = 'full'
             ORDER BY queued_at, id LIMIT 1",
            &[],
        )
        .await?;
    Ok(row.map(|row| RunId::from_uuid(row.get(0))))
}

/// How many scoped runs of the tenant wait for dispatch.
pub async fn undispatched_scoped(tx: &TenantTx) -> Result<u32, StoreError> {
    let row = tx
        .client()
        .query_one(
            "SELECT count(*) FROM patrol_runs
             WHERE status = 'queued' AND run_type = 'scoped' AND dispatched_at IS NULL",
            &[],
        )
        .await?;
    let n: i64 = row.get(0);
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// Marks a queued run dispatched. `false` when it was already dispatched or is no longer
/// queued: then no job may be enqueued for it.
pub async fn mark_dispatched(tx: &TenantTx, id: RunId) -> Result<bool, StoreError> {
    let updated = tx
        .client()
        .execute(
            "UPDATE patrol_runs SET dispatched_at = now(), updated_at = now()
             WHERE id = $1 AND status = 'queued' AND dispatched_at IS NULL",
            &[&id.as_uuid()],
        )
        .await?;
    Ok(updated == 1)
}

/// A dispatched run no runner has taken within the deadline it was listed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UntakenRun {
    pub tenant: TenantId,
    pub run_id: RunId,
    pub run_type: RunType,
    pub trigger_reason: TriggerReason,
    /// When its current job was written.
    pub dispatched_at: DateTime<Utc>,
    /// How many times its job was written again so far.
    pub redispatches: u32,
    /// The database's clock when the list was read.
    pub now: DateTime<Utc>,
}

/// Dispatched runs of every tenant still `queued` whose job was written at least
/// `take_deadline` ago (database clock), oldest dispatch first, at most `max_rows`.
pub async fn untaken(
    store: &Store,
    take_deadline: std::time::Duration,
    max_rows: i32,
) -> Result<Vec<UntakenRun>, StoreError> {
    let deadline_ms = i64::try_from(take_deadline.as_millis()).unwrap_or(i64::MAX);
    let client = store.pool().get().await?;
    let rows = client
        .query(
            "SELECT tenant_id, run_id, run_type, trigger_reason, dispatched_at, redispatch_count,
                    db_now
             FROM pulse_untaken_runs($1, $2)",
            &[&deadline_ms, &max_rows],
        )
        .await?;
    rows.into_iter()
        .map(|row| {
            let redispatches: i32 = row.get(5);
            Ok(UntakenRun {
                tenant: tenant(row.get(0))?,
                run_id: RunId::from_uuid(row.get(1)),
                run_type: run_type(row.get(2))?,
                trigger_reason: trigger_reason(row.get(3))?,
                dispatched_at: row.get(4),
                redispatches: u32::try_from(redispatches).unwrap_or(0),
                now: row.get(6),
            })
        })
        .collect()
}

/// Marks an untaken run dispatched again, now, and counts it, if it is still `queued` with the
/// dispatch time `seen`. `false`: a runner took it, it ended, or another sweeper dispatched it
/// again; then no job may be enqueued for it.
pub async fn mark_redispatched(
    tx: &TenantTx,
    id: RunId,
    seen: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let updated = tx
        .client()
        .execute(
            "UPDATE patrol_runs
             SET dispatched_at = now(), redispatch_count = redispatch_count + 1,
                 updated_at = now()
             WHERE id = $1 AND status = 'queued' AND dispatched_at = $2",
            &[&id.as_uuid(), &seen],
        )
        .await?;
    Ok(updated == 1)
}

/// Locks an untaken run until the transaction ends if it is still `queued` with the dispatch
/// time `seen`; `false` otherwise (taken, ended or dispatched again in the meantime).
pub async fn lock_untaken(
    tx: &TenantTx,
    id: RunId,
    seen: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT 1 FROM patrol_runs
             WHERE id = $1 AND status = 'queued' AND dispatched_at = $2
             FOR UPDATE",
            &[&id.as_uuid(), &seen],
        )
        .await?;
    Ok(row.is_some())
}

/// The advisory lock key of the one active dispatcher.
const DISPATCHER_LOCK: &str = "pulse.patrol.dispatcher";

/// The dispatcher's leadership: a session advisory lock held on a connection taken out of the
/// pool for as long as it is held. Dropping it closes the connection, which releases the lock.
///
/// It is a lease, not only a lock: the session runs with `idle_session_timeout` set to the
/// lease, so a holder that stops asking ([`Self::check`]) for that long, because it froze,
/// hangs or lost its network while its TCP connection looks alive, has its session ended by
/// Postgres, and another replica takes over. A process that dies releases it at once.
pub struct DispatcherLock {
    client: deadpool_postgres::ClientWrapper,
}

impl std::fmt::Debug for DispatcherLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatcherLock").finish_non_exhaustive()
    }
}

impl DispatcherLock {
    /// Takes the lock if no other session holds it (`None` otherwise), as a lease of `lease`
    /// (whole milliseconds, at least one).
    pub async fn try_acquire(store: &Store, lease: Duration) -> Result<Option<Self>, StoreError> {
        let client = deadpool_postgres::Object::take(store.pool().get().await?);
        let lease_ms = lease.as_millis().clamp(1, i32::MAX as u128);
        client
            .batch_execute(&format!("SET idle_session_timeout = {lease_ms}"))
            .await?;
        let row = client
            .query_one(
                "SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
                &[&DISPATCHER_LOCK],
            )
            .await?;
        let acquired: bool = row.get(0);
        Ok(acquired.then_some(Self { client }))
    }

    /// Whether the lock is still held: a session lock lasts as long as its session, so this is
    /// whether the session still answers.
    pub async fn check(&self) -> bool {
        !self.client.is_closed() && self.client.simple_query("SELECT 1").await.is_ok()
    }

    /// Releases the lock and closes its connection.
    pub async fn release(self) {
        let _ = self
            .client
            .execute(
                "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
                &[&DISPATCHER_LOCK],
            )
            .await;
    }
}
