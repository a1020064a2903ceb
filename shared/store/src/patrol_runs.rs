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

use crate::{StoreError, TenantTx, TxError};

/// Listing limits of [`list`].
pub const DEFAULT_LIST_LIMIT: i64 = 30;
pub const MAX_LIST_LIMIT: i64 = pulse_domain::listing::MAX_PATROL_RUNS;

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

impl TxError for ApplyError {
    fn store_error(&self) -> Option<&StoreError> {
        match self {
            ApplyError::Store(error) => Some(error),
            _ => None,
        }
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
                 lease_expires_at = CASE WHEN $3 = 'running' THEN lease_expires_at END,
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

/// The first `alert_fired` run `requested_by` asked for that was queued at or after `since`:
/// the run a firing (`requested_by` = `alert:<alert id>`) already started, if any.
pub async fn alert_run_requested_by(
    tx: &TenantTx,
    requested_by: &str,
    since: DateTime<Utc>,
) -> Result<Option<RunId>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT id FROM patrol_runs
             WHERE requested_by = $1 AND trigger_reason = 'alert_fired' AND queued_at >= $2
             ORDER BY queued_at LIMIT 1",
            &[&requested_by, &since],
        )
        .await?;
    Ok(row.map(|row| RunId::from_uuid(row.get(0))))
}

/// A new run id.
pub fn new_run_id() -> RunId {
    RunId::from_uuid(Uuid::new_v4())
}

// Leases: a `running` run is held by one runner, which renews its lease while it works; the
// sweeper ends a run whose lease lapsed (`runner_lost`). Lease times are the database clock.

/// Longest runner id a lease takes.
pub const MAX_RUNNER_ID_CHARS: usize = 200;

/// A runner's hold on a running run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub runner_id: String,
    /// Database time at which the lease lapses unless it is renewed.
    pub expires_at: DateTime<Utc>,
}

fn check_runner_id(runner_id: &str) -> Result<(), StoreError> {
    let chars = runner_id.chars().count();
    if chars == 0 || chars > MAX_RUNNER_ID_CHARS {
        return Err(invalid(format!(
            "a runner id has 1 to {MAX_RUNNER_ID_CHARS} characters, not {chars}"
        )));
    }
    Ok(())
}

/// A lease's length in seconds for `make_interval`; a zero lease is refused.
pub(crate) fn lease_secs(lease: std::time::Duration) -> Result<f64, StoreError> {
    if lease.is_zero() {
        return Err(invalid("a lease must last longer than zero"));
    }
    Ok(lease.as_secs_f64())
}

/// Why a compare-and-swap found nothing to write: the status the run has now.
async fn conflict(tx: &TenantTx, id: RunId, expected: RunStatus) -> ApplyError {
    match status(tx, id).await {
        Ok(Some(found)) => ApplyError::Conflict {
            id,
            expected,
            found,
        },
        Ok(None) => ApplyError::NotFound(id),
        Err(e) => ApplyError::Store(e),
    }
}

/// Starts a queued run under a lease held by `runner_id`: the compare-and-swap
/// `queued -> running` of [`RunEvent::Started`]. `effective_scope`, when given, replaces the
/// canonical ids the run covers (re-resolved at start). Of two runners racing to start one run,
/// exactly one succeeds; the other gets [`ApplyError::Conflict`] or [`ApplyError::Illegal`].
pub async fn start(
    tx: &TenantTx,
    id: RunId,
    runner_id: &str,
    lease: std::time::Duration,
    at: DateTime<Utc>,
    effective_scope: Option<&[String]>,
) -> Result<(PatrolRun, Lease), ApplyError> {
    check_runner_id(runner_id)?;
    let secs = lease_secs(lease)?;
    let mut run = get(tx, id).await?.ok_or(ApplyError::NotFound(id))?;
    let from = run.status;
    let to = run.apply(RunEvent::Started, at, None)?;
    if let Some(scope) = effective_scope {
        run.effective_scope_resource_ids = scope.to_vec();
    }
    let row = tx
        .client()
        .query_opt(
            "UPDATE patrol_runs
             SET status = $3, started_at = $4, effective_scope_resource_ids = $5, record = $6,
                 runner_id = $7, lease_expires_at = now() + make_interval(secs => $8),
                 updated_at = now()
             WHERE id = $1 AND status = $2
             RETURNING lease_expires_at",
            &[
                &id.as_uuid(),
                &from.as_str(),
                &to.as_str(),
                &run.started_at,
                &run.effective_scope_resource_ids,
                &Json(&run),
                &runner_id,
                &secs,
            ],
        )
        .await?;
    match row {
        Some(row) => Ok((
            run,
            Lease {
                runner_id: runner_id.to_owned(),
                expires_at: row.get(0),
            },
        )),
        None => Err(conflict(tx, id, from).await),
    }
}

/// Extends the lease of a running run by `lease` from now. Only the holder renews, and only
/// while the run is `running`: `None` means the lease is gone (the run ended, or the sweeper
/// declared the runner lost) and the runner must stop working on it.
pub async fn renew_lease(
    tx: &TenantTx,
    id: RunId,
    runner_id: &str,
    lease: std::time::Duration,
) -> Result<Option<Lease>, StoreError> {
    let secs = lease_secs(lease)?;
    let row = tx
        .client()
        .query_opt(
            "UPDATE patrol_runs
             SET lease_expires_at = now() + make_interval(secs => $3), updated_at = now()
             WHERE id = $1 AND status = 'running' AND runner_id = $2
             RETURNING lease_expires_at",
            &[&id.as_uuid(), &runner_id, &secs],
        )
        .await?;
    Ok(row.map(|row| Lease {
        runner_id: runner_id.to_owned(),
        expires_at: row.get(0),
    }))
}

/// The current lease of a run, if it is running under one.
pub async fn lease(tx: &TenantTx, id: RunId) -> Result<Option<Lease>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT runner_id, lease_expires_at FROM patrol_runs
             WHERE id = $1 AND lease_expires_at IS NOT NULL",
            &[&id.as_uuid()],
        )
        .await?;
    Ok(row.map(|row| Lease {
        runner_id: row.get(0),
        expires_at: row.get(1),
    }))
}

/// Updates the accounting of a running run held by `runner_id` (tokens so far, say) without
/// moving it. `None` when the run is no longer running under that holder. `update` must not
/// change the status.
pub async fn record_progress(
    tx: &TenantTx,
    id: RunId,
    runner_id: &str,
    update: impl FnOnce(&mut PatrolRun),
) -> Result<Option<PatrolRun>, StoreError> {
    let Some(mut run) = get(tx, id).await? else {
        return Ok(None);
    };
    if run.status != RunStatus::Running {
        return Ok(None);
    }
    update(&mut run);
    if run.status != RunStatus::Running {
        return Err(invalid("progress cannot move a run; finish it instead"));
    }
    let updated = tx
        .client()
        .execute(
            "UPDATE patrol_runs SET record = $3, updated_at = now()
             WHERE id = $1 AND status = 'running' AND runner_id = $2",
            &[&id.as_uuid(), &runner_id, &Json(&run)],
        )
        .await?;
    Ok((updated == 1).then_some(run))
}

/// Ends a run with the terminal `event` in one compare-and-swap: `update` first fills in the
/// accounting (tokens, cost, tool calls, summary, effective scope), then the state machine
/// applies the event. A running run is finished only by its lease holder (`holder`); a queued
/// run (refused before it started) has none. The lease is released.
pub async fn finish(
    tx: &TenantTx,
    id: RunId,
    holder: Option<&str>,
    event: RunEvent,
    at: DateTime<Utc>,
    detail: Option<&str>,
    update: impl FnOnce(&mut PatrolRun),
) -> Result<PatrolRun, ApplyError> {
    let mut run = get(tx, id).await?.ok_or(ApplyError::NotFound(id))?;
    let from = run.status;
    if from == RunStatus::Running && holder.is_none() {
        return Err(invalid("a running run is finished by its lease holder").into());
    }
    let mut next = run.clone();
    update(&mut next);
    next.status = from;
    let to = next.apply(event, at, detail)?;
    if !to.is_terminal() {
        return Err(invalid(format!("{} does not end a run", event.as_str())).into());
    }
    run = next;
    let updated = tx
        .client()
        .execute(
            "UPDATE patrol_runs
             SET status = $3, completed_at = $4, error_cause = $5, record = $6,
                 effective_scope_resource_ids = $7, lease_expires_at = NULL, updated_at = now()
             WHERE id = $1 AND status = $2 AND ($8::text IS NULL OR runner_id = $8)",
            &[
                &id.as_uuid(),
                &from.as_str(),
                &to.as_str(),
                &run.completed_at,
                &run.error_cause.map(|c| c.as_str()),
                &Json(&run),
                &run.effective_scope_resource_ids,
                &holder,
            ],
        )
        .await?;
    if updated == 1 {
        Ok(run)
    } else {
        Err(conflict(tx, id, from).await)
    }
}

/// Ends a running run whose lease lapsed with [`RunEvent::RunnerLost`]. `None` when the run is
/// not (or no longer) running under an expired lease: its holder renewed in time, or it ended.
/// The row is locked, so a renewal racing the sweep either lands first (and the run is left
/// alone) or finds the run ended.
pub async fn lose_expired(
    tx: &TenantTx,
    id: RunId,
    at: DateTime<Utc>,
) -> Result<Option<PatrolRun>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT record, runner_id FROM patrol_runs
             WHERE id = $1 AND status = 'running' AND lease_expires_at < now()
             FOR UPDATE",
            &[&id.as_uuid()],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let mut run = from_row(&row)?;
    let runner_id: Option<String> = row.get(1);
    let detail = format!(
        "runner {} stopped renewing its lease",
        runner_id.as_deref().unwrap_or("unknown")
    );
    run.apply(RunEvent::RunnerLost, at, Some(&detail))
        .map_err(invalid)?;
    tx.client()
        .execute(
            "UPDATE patrol_runs
             SET status = $2, completed_at = $3, error_cause = $4, record = $5,
                 lease_expires_at = NULL, updated_at = now()
             WHERE id = $1 AND status = 'running'",
            &[
                &id.as_uuid(),
                &run.status.as_str(),
                &run.completed_at,
                &run.error_cause.map(|c| c.as_str()),
                &Json(&run),
            ],
        )
        .await?;
    Ok(Some(run))
}

/// Running runs of every tenant whose lease lapsed, oldest first, at most `max_rows`
/// (identities only; end each in its own tenant's transaction with [`lose_expired`]).
pub async fn expired_leases(
    store: &crate::Store,
    max_rows: i32,
) -> Result<Vec<(pulse_domain::TenantId, RunId)>, StoreError> {
    Ok(lapsed(
        store,
        "SELECT tenant_id, run_id FROM pulse_expired_run_leases($1)",
        max_rows,
    )
    .await?
    .into_iter()
    .map(|(tenant, id)| (tenant, RunId::from_uuid(id)))
    .collect())
}

/// The `(tenant, id)` rows of a lapsed-lease function (`sql` calls it with `$1` = `max_rows`):
/// the sweepers' identities-only door through row-level security.
pub(crate) async fn lapsed(
    store: &crate::Store,
    sql: &str,
    max_rows: i32,
) -> Result<Vec<(pulse_domain::TenantId, uuid::Uuid)>, StoreError> {
    let client = store.pool().get().await?;
    let rows = client.query(sql, &[&max_rows]).await?;
    rows.iter()
        .map(|row| {
            let tenant: String = row.get(0);
            let tenant = pulse_domain::TenantId::new(tenant).map_err(invalid)?;
            Ok((tenant, row.get(1)))
        })
        .collect()
}
