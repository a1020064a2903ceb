//! Patrol run records (`patrol_runs`): one row per accepted run id.
//!
//! A run is inserted `queued` ([`insert_queued`], idempotent on the run id) and then moves only
//! through [`apply`], a compare-and-swap on the stored status driven by
//! [`pulse_domain::patrol::run::transition`]: the UPDATE names the status it read, so of two
//! racing events at most one lands, and a terminal record never changes again. The record is
//! stored whole as JSON next to the columns the queries filter on.

use chrono::{DateTime, Utc};
use pulse_domain::patrol::run::{
    IllegalTransition, PatrolRun, RunEvent, RunId, RunStatus, RunType,
};
use tokio_postgres::types::Json;
use uuid::Uuid;

use crate::{StoreError, TenantTx};

/// Listing limits of [`list`].
pub const DEFAULT_LIST_LIMIT: i64 = 30;
pub const MAX_LIST_LIMIT: i64 = 200;

/// Why [`apply`] did not move a run.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("no patrol run {0}")]
    NotFound(RunId),
    /// The state machine refuses the event in the stored status (e.g. any event on a terminal
    /// run).
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// Another writer moved the run between the read and the write; nothing was written.
    #[error("patrol run {id} moved from {expected} to {found} concurrently")]
    Conflict {
        id: RunId,
        expected: RunStatus,
        found: RunStatus,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<tokio_postgres::Error> for ApplyError {
    fn from(e: tokio_postgres::Error) -> Self {
        ApplyError::Store(StoreError::Database(e))
    }
}

fn invalid(e: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(e.to_string())
}

fn from_row(row: &tokio_postgres::Row) -> Result<PatrolRun, StoreError> {
    let Json(run): Json<PatrolRun> = row
        .try_get(0)
        .map_err(|e| invalid(format!("patrol run record: {e}")))?;
    Ok(run)
}

/// Inserts a freshly accepted run. Returns `false` (and writes nothing) when a run with this id
/// already exists, so a retried acceptance never creates a second record.
pub async fn insert_queued(
    tx: &TenantTx,
    run: &PatrolRun,
    requested_by: Option<&str>,
) -> Result<bool, StoreError> {
    if run.status != RunStatus::Queued {
        return Err(invalid(format!(
            "a new patrol run must be queued, not {}",
            run.status
        )));
    }
    let inserted = tx
        .client()
        .execute(
            "INSERT INTO patrol_runs (tenant_id, id, trigger_reason, run_type, status, queued_at,
                                      scope_resource_ids, effective_scope_resource_ids,
                                      requested_by, record)
             VALUES ($1, $2, $3, $4, 'queued', $5, $6, $7, $8, $9)
             ON CONFLICT (tenant_id, id) DO NOTHING",
            &[
                &tx.tenant().as_str(),
                &run.id.as_uuid(),
                &run.trigger_reason.as_str(),
                &run.run_type.as_str(),
                &run.queued_at,
                &run.scope_resource_ids,
                &run.effective_scope_resource_ids,
                &requested_by,
                &Json(run),
            ],
        )
        .await?;
    Ok(inserted == 1)
}

/// Applies `event` at `at` to the stored run as a compare-and-swap: the new status comes from
/// the state machine, and the write happens only if the row still has the status it was read
/// with. Returns the updated record.
pub async fn apply(
    tx: &TenantTx,
    id: RunId,
    event: RunEvent,
    at: DateTime<Utc>,
    detail: Option<&str>,
) -> Result<PatrolRun, ApplyError> {
    let mut run = get(tx, id).await?.ok_or(ApplyError::NotFound(id))?;
    let from = run.status;
    let to = run.apply(event, at, detail)?;
    let updated = tx
        .client()
        .execute(
            "UPDATE patrol_runs
             SET status = $3, started_at = $4, completed_at = $5, error_cause = $6, record = $7,
                 updated_at = now()
             WHERE id = $1 AND status = $2",
            &[
                &id.as_uuid(),
                &from.as_str(),
                &to.as_str(),
                &run.started_at,
                &run.completed_at,
                &run.error_cause.map(|c| c.as_str()),
                &Json(&run),
            ],
        )
        .await?;
    if updated == 1 {
        return Ok(run);
    }
    let found = status(tx, id).await?.ok_or(ApplyError::NotFound(id))?;
    Err(ApplyError::Conflict {
        id,
        expected: from,
        found,
    })
}

async fn status(tx: &TenantTx, id: RunId) -> Result<Option<RunStatus>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT status FROM patrol_runs WHERE id = $1",
            &[&id.as_uuid()],
        )
        .await?;
    row.map(|row| {
        let s: String = row.get(0);
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| invalid(format!("unknown patrol run status {s:?}")))
    })
    .transpose()
}

/// The run with this id.
pub async fn get(tx: &TenantTx, id: RunId) -> Result<Option<PatrolRun>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT record FROM patrol_runs WHERE id = $1",
            &[&id.as_uuid()],
        )
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// The tenant's runs, newest accepted first; `limit` is clamped to 1..=[`MAX_LIST_LIMIT`].
pub async fn list(tx: &TenantTx, limit: i64) -> Result<Vec<PatrolRun>, StoreError> {
    let limit = limit.clamp(1, MAX_LIST_LIMIT);
    let rows = tx
        .client()
        .query(
            "SELECT record FROM patrol_runs ORDER BY queued_at DESC, id DESC LIMIT $1",
            &[&limit],
        )
        .await?;
    rows.iter().map(from_row).collect()
}

/// The run in flight: the newest run that is `queued` or `running`.
pub async fn current(tx: &TenantTx) -> Result<Option<PatrolRun>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT record FROM patrol_runs WHERE status IN ('queued', 'running')
             ORDER BY queued_at DESC, id DESC LIMIT 1",
            &[],
        )
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// How many scoped runs wait in `queued`.
pub async fn queued_scoped(tx: &TenantTx) -> Result<u32, StoreError> {
    let row = tx
        .client()
        .query_one(
            "SELECT count(*) FROM patrol_runs WHERE status = 'queued' AND run_type = 'scoped'",
            &[],
        )
        .await?;
    let n: i64 = row.get(0);
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// The most recently completed terminal run of `run_type`, optionally only successful ones.
async fn last_terminal(
    tx: &TenantTx,
    run_type: Option<RunType>,
    successful_only: bool,
) -> Result<Option<PatrolRun>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT record FROM patrol_runs
             WHERE completed_at IS NOT NULL
               AND ($1::text IS NULL OR run_type = $1)
               AND (NOT $2 OR status IN ('healthy', 'issues_found'))
             ORDER BY completed_at DESC, id DESC LIMIT 1",
            &[&run_type.map(RunType::as_str), &successful_only],
        )
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// The most recent terminal full run, whatever its status.
pub async fn last_full_run(tx: &TenantTx) -> Result<Option<PatrolRun>, StoreError> {
    last_terminal(tx, Some(RunType::Full), false).await
}

/// The most recent full run that ended without error.
pub async fn last_successful_full_run(tx: &TenantTx) -> Result<Option<PatrolRun>, StoreError> {
    last_terminal(tx, Some(RunType::Full), true).await
}

/// When the most recent terminal run of any type completed.
pub async fn last_activity_at(tx: &TenantTx) -> Result<Option<DateTime<Utc>>, StoreError> {
    Ok(last_terminal(tx, None, false)
        .await?
        .and_then(|run| run.completed_at))
}

/// A new run id.
pub fn new_run_id() -> RunId {
    RunId::from_uuid(Uuid::new_v4())
}
