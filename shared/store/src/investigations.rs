//! Patrol investigations: the only writer of `investigations` (migration 0017).
//!
//! One row per attempt of one finding: the investigation gate reads its state from here
//! ([`gate_state`]) under a per-tenant transaction lock ([`lock_tenant`]), so two dispatchers
//! cannot both take the last concurrency slot; [`begin`] records the attempt before it runs and
//! [`finish`] writes its outcome and the durable [`InvestigationRecord`]. An attempt left
//! `running` past the investigation timeout with no live lease is ended `timed_out` by
//! [`expire_stale`], which the gate calls first.
//!
//! **Leases** (migration 0038). The runner that begins an attempt holds it ([`hold`]) and
//! renews the hold while it works ([`renew_lease`]); the database's clock times them. An attempt
//! whose lease lapsed (its runner died) is listed by [`expired_leases`] and taken over by
//! another runner with [`take_over`], a compare-and-swap under the row lock, so of two runners
//! sweeping at once one takes it, and a runner that renewed meanwhile keeps it.
//!
//! Nothing here commits: the caller commits.

use chrono::{DateTime, Utc};
use pulse_domain::finding::{FindingId, InvestigationOutcome};
use serde::{Deserialize, Serialize};
use tokio_postgres::Row;
use tokio_postgres::types::Json;
use uuid::Uuid;

use crate::{StoreError, TenantTx};

/// Where an attempt stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvestigationStatus {
    Running,
    Completed,
    Failed,
    TimedOut,
}

impl InvestigationStatus {
    pub const ALL: [InvestigationStatus; 4] = [
        InvestigationStatus::Running,
        InvestigationStatus::Completed,
        InvestigationStatus::Failed,
        InvestigationStatus::TimedOut,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InvestigationStatus::Running => "running",
            InvestigationStatus::Completed => "completed",
            InvestigationStatus::Failed => "failed",
            InvestigationStatus::TimedOut => "timed_out",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// The resource the investigation was about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvestigationSubject {
    pub resource_id: String,
    pub resource_name: String,
    pub resource_type: String,
    #[serde(default)]
    pub node: String,
}

/// The finding that triggered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvestigationTrigger {
    pub finding_key: String,
    pub source: String,
    pub severity: String,
    pub category: String,
    pub title: String,
    pub detected_at: DateTime<Utc>,
    pub description: String,
    /// Why the investigation started (`watch_run:<id>`).
    pub cause: String,
}

/// One piece of evidence the investigation read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvestigationEvidence {
    /// The tool call id.
    pub id: String,
    /// The tool.
    pub kind: String,
    pub summary: String,
}

/// The typed proposal the investigation captured, without its params (their durable home is
/// the canonical action and its audit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposalSummary {
    pub resource_id: String,
    pub causal_resource_id: String,
    pub capability_name: String,
    pub reason: String,
}

/// The canonical action a proposal became.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionReference {
    pub action_id: Uuid,
    /// The action's state when it was submitted (`pending_approval`, `refused`, ...).
    pub state: String,
}

/// The durable, operator-facing record of one investigation attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvestigationRecord {
    pub id: Uuid,
    pub finding_id: String,
    /// The execution session (internal detail): the Watch run that dispatched it.
    pub session_id: String,
    pub subject: InvestigationSubject,
    pub trigger: InvestigationTrigger,
    pub status: InvestigationStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<InvestigationOutcome>,
    /// `low`, `medium` or `high`.
    pub confidence: String,
    pub evidence: Vec<InvestigationEvidence>,
    pub conclusion: String,
    /// The finding's impact, unchanged; empty when it has none.
    pub impact: String,
    pub recommended_action: String,
    #[serde(default)]
    pub verification: Vec<String>,
    /// No remediation plan backs these investigations, so none is fabricated.
    #[serde(default)]
    pub rollback: Vec<String>,
    pub tools_used: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<ProposalSummary>,
    pub started_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionReference>,
    #[serde(default)]
    pub error: String,
}

/// What the investigation gate needs to know about a finding and its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GateState {
    /// Attempts of this finding so far.
    pub attempts: u32,
    pub last_started_at: Option<DateTime<Utc>>,
    pub last_status: Option<InvestigationStatus>,
    pub last_outcome: Option<InvestigationOutcome>,
    /// Attempts of the tenant still running.
    pub running_in_tenant: u32,
}

/// One attempt as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredInvestigation {
    pub id: Uuid,
    pub finding_id: String,
    pub watch_run_id: Uuid,
    pub status: InvestigationStatus,
    pub outcome: Option<InvestigationOutcome>,
    pub attempt: u32,
    pub started_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub action_id: Option<Uuid>,
    pub record: Option<InvestigationRecord>,
}

fn invalid(e: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(e.to_string())
}

fn outcome_text(outcome: InvestigationOutcome) -> Result<String, StoreError> {
    match serde_json::to_value(outcome).map_err(invalid)? {
        serde_json::Value::String(s) => Ok(s),
        other => Err(invalid(format!("outcome serialized as {other}"))),
    }
}

fn parse_outcome(text: Option<String>) -> Result<Option<InvestigationOutcome>, StoreError> {
    text.map(|t| serde_json::from_value(serde_json::Value::String(t)).map_err(invalid))
        .transpose()
}

const COLUMNS: &str = "id, finding_id, watch_run_id, status, outcome, attempt, started_at,
    completed_at, action_id, record";

fn from_row(row: &Row) -> Result<StoredInvestigation, StoreError> {
    let status: String = row.try_get(3).map_err(invalid)?;
    let record: Option<Json<InvestigationRecord>> = row
        .try_get(9)
        .map_err(|e| invalid(format!("investigation record: {e}")))?;
    Ok(StoredInvestigation {
        id: row.try_get(0).map_err(invalid)?,
        finding_id: row.try_get(1).map_err(invalid)?,
        watch_run_id: row.try_get(2).map_err(invalid)?,
        status: InvestigationStatus::parse(&status)
            .ok_or_else(|| invalid(format!("unknown investigation status {status:?}")))?,
        outcome: parse_outcome(row.try_get(4).map_err(invalid)?)?,
        attempt: u32::try_from(row.try_get::<_, i32>(5).map_err(invalid)?).unwrap_or(0),
        started_at: row.try_get(6).map_err(invalid)?,
        completed_at: row.try_get(7).map_err(invalid)?,
        action_id: row.try_get(8).map_err(invalid)?,
        record: record.map(|Json(r)| r),
    })
}

/// Serializes the gate decisions of one tenant until the transaction ends.
pub async fn lock_tenant(tx: &TenantTx) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('investigations:' || $1, 0))",
            &[&tx.tenant().as_str()],
        )
        .await?;
    Ok(())
}

/// Ends attempts still `running` that started before `cutoff` as `timed_out` (their runner is
/// gone), unless a runner still holds a live lease on them. Returns how many.
pub async fn expire_stale(
    tx: &TenantTx,
    cutoff: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let timed_out = outcome_text(InvestigationOutcome::TimedOut)?;
    Ok(tx
        .client()
        .execute(
            "UPDATE investigations SET status = 'timed_out', outcome = $2, completed_at = $3,
                    lease_expires_at = NULL
             WHERE status = 'running' AND started_at < $1
               AND (lease_expires_at IS NULL OR lease_expires_at < now())",
            &[&cutoff, &timed_out, &now],
        )
        .await?)
}

/// The gate state of `finding` in its tenant.
pub async fn gate_state(tx: &TenantTx, finding: FindingId) -> Result<GateState, StoreError> {
    let id = finding.as_hex();
    let row = tx
        .client()
        .query_one(
            "SELECT
                (SELECT count(*) FROM investigations WHERE finding_id = $1),
                (SELECT count(*) FROM investigations WHERE status = 'running')",
            &[&id],
        )
        .await?;
    let attempts: i64 = row.try_get(0).map_err(invalid)?;
    let running: i64 = row.try_get(1).map_err(invalid)?;
    let last = tx
        .client()
        .query_opt(
            "SELECT started_at, status, outcome FROM investigations WHERE finding_id = $1
             ORDER BY started_at DESC, id DESC LIMIT 1",
            &[&id],
        )
        .await?;
    let (last_started_at, last_status, last_outcome) = match last {
        Some(row) => {
            let status: String = row.try_get(1).map_err(invalid)?;
            (
                Some(row.try_get(0).map_err(invalid)?),
                InvestigationStatus::parse(&status),
                parse_outcome(row.try_get(2).map_err(invalid)?)?,
            )
        }
        None => (None, None, None),
    };
    Ok(GateState {
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        last_started_at,
        last_status,
        last_outcome,
        running_in_tenant: u32::try_from(running).unwrap_or(u32::MAX),
    })
}

/// Records a new `running` attempt. `false` when this run already dispatched an attempt of
/// this finding (a redelivered run event): nothing is written.
pub async fn begin(
    tx: &TenantTx,
    id: Uuid,
    finding: FindingId,
    watch_run_id: Uuid,
    attempt: u32,
    started_at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let attempt = i32::try_from(attempt).map_err(invalid)?;
    let inserted = tx
        .client()
        .execute(
            "INSERT INTO investigations (tenant_id, id, finding_id, watch_run_id, status,
                                         attempt, started_at)
             VALUES ($1, $2, $3, $4, 'running', $5, $6)
             ON CONFLICT (tenant_id, finding_id, watch_run_id) DO NOTHING",
            &[
                &tx.tenant().as_str(),
                &id,
                &finding.as_hex(),
                &watch_run_id,
                &attempt,
                &started_at,
            ],
        )
        .await?;
    Ok(inserted == 1)
}

/// Ends a running attempt with its record. `false` when it was no longer running (it was
/// expired meanwhile) or, with `holder`, when another runner holds it now (it was taken over):
/// the record is not written over theirs.
pub async fn finish(
    tx: &TenantTx,
    record: &InvestigationRecord,
    holder: Option<&str>,
) -> Result<bool, StoreError> {
    if record.status == InvestigationStatus::Running {
        return Err(invalid("an attempt cannot finish as running"));
    }
    let outcome = record.outcome.map(outcome_text).transpose()?;
    let completed_at = record.completed_at.unwrap_or_else(Utc::now);
    let action_id = record.action.as_ref().map(|a| a.action_id);
    let updated = tx
        .client()
        .execute(
            "UPDATE investigations SET status = $2, outcome = $3, completed_at = $4,
                    action_id = $5, record = $6, lease_expires_at = NULL
             WHERE id = $1 AND status = 'running' AND ($7::text IS NULL OR runner_id = $7)",
            &[
                &record.id,
                &record.status.as_str(),
                &outcome,
                &completed_at,
                &action_id,
                &Json(record),
                &holder,
            ],
        )
        .await?;
    Ok(updated == 1)
}

/// Makes `runner_id` the holder of the attempt [`begin`] just recorded, for `lease` from now.
/// `false` when the attempt is not running or someone holds it already.
pub async fn hold(
    tx: &TenantTx,
    id: Uuid,
    runner_id: &str,
    lease: std::time::Duration,
) -> Result<bool, StoreError> {
    let secs = crate::patrol_runs::lease_secs(lease)?;
    let updated = tx
        .client()
        .execute(
            "UPDATE investigations
             SET runner_id = $2, lease_expires_at = now() + make_interval(secs => $3)
             WHERE id = $1 AND status = 'running' AND runner_id IS NULL",
            &[&id, &runner_id, &secs],
        )
        .await?;
    Ok(updated == 1)
}

/// Extends the lease `runner_id` holds on a running attempt. `false` when the attempt ended or
/// another runner took it over: the caller must stop working on it.
pub async fn renew_lease(
    tx: &TenantTx,
    id: Uuid,
    runner_id: &str,
    lease: std::time::Duration,
) -> Result<bool, StoreError> {
    let secs = crate::patrol_runs::lease_secs(lease)?;
    let updated = tx
        .client()
        .execute(
            "UPDATE investigations SET lease_expires_at = now() + make_interval(secs => $3)
             WHERE id = $1 AND status = 'running' AND runner_id = $2",
            &[&id, &runner_id, &secs],
        )
        .await?;
    Ok(updated == 1)
}

/// Running attempts of every tenant whose lease lapsed, oldest expiry first, at most
/// `max_rows` (identities only; take each over in its own tenant's transaction).
pub async fn expired_leases(
    store: &crate::Store,
    max_rows: i32,
) -> Result<Vec<(pulse_domain::TenantId, Uuid)>, StoreError> {
    crate::patrol_runs::lapsed(
        store,
        "SELECT tenant_id, investigation_id FROM pulse_expired_investigation_leases($1)",
        max_rows,
    )
    .await
}

/// An attempt a runner took over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenOver {
    pub attempt: StoredInvestigation,
    /// How often the attempt has been taken over, this time included.
    pub takeovers: u32,
}

/// Takes over a running attempt whose lease lapsed: `runner_id` holds it for `lease` from now.
/// `None` when it ended or its lease is live again (its runner renewed, or another runner took
/// it over first).
pub async fn take_over(
    tx: &TenantTx,
    id: Uuid,
    runner_id: &str,
    lease: std::time::Duration,
) -> Result<Option<TakenOver>, StoreError> {
    let secs = crate::patrol_runs::lease_secs(lease)?;
    let row = tx
        .client()
        .query_opt(
            &format!(
                "UPDATE investigations
                 SET runner_id = $2, lease_expires_at = now() + make_interval(secs => $3),
                     takeovers = takeovers + 1
                 WHERE id = $1 AND status = 'running' AND lease_expires_at < now()
                 RETURNING {COLUMNS}, takeovers"
            ),
            &[&id, &runner_id, &secs],
        )
        .await?;
    row.map(|row| {
        let takeovers: i32 = row.try_get(10).map_err(invalid)?;
        Ok(TakenOver {
            attempt: from_row(&row)?,
            takeovers: u32::try_from(takeovers).unwrap_or(u32::MAX),
        })
    })
    .transpose()
}

pub async fn get(tx: &TenantTx, id: Uuid) -> Result<Option<StoredInvestigation>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            &format!("SELECT {COLUMNS} FROM investigations WHERE id = $1"),
            &[&id],
        )
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// The attempts of one finding, newest first (at most `limit`).
pub async fn list_for_finding(
    tx: &TenantTx,
    finding: FindingId,
    limit: i64,
) -> Result<Vec<StoredInvestigation>, StoreError> {
    let rows = tx
        .client()
        .query(
            &format!(
                "SELECT {COLUMNS} FROM investigations WHERE finding_id = $1
                 ORDER BY started_at DESC, id DESC LIMIT $2"
            ),
            &[&finding.as_hex(), &limit.clamp(1, 100)],
        )
        .await?;
    rows.iter().map(from_row).collect()
}

/// The record of the newest attempt of `finding` that has one.
pub async fn latest_record(
    tx: &TenantTx,
    finding: FindingId,
) -> Result<Option<InvestigationRecord>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            &format!(
                "SELECT {COLUMNS} FROM investigations WHERE finding_id = $1 AND record IS NOT NULL
                 ORDER BY started_at DESC, id DESC LIMIT 1"
            ),
            &[&finding.as_hex()],
        )
        .await?;
    Ok(row
        .as_ref()
        .map(from_row)
        .transpose()?
        .and_then(|s| s.record))
}
