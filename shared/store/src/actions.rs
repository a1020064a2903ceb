//! The action store: the only writer path for `actions` (migration 0015); the remediation lock
//! lives in [`crate::operator_state`].
//!
//! Every state change is [`transition`]: the pure state machine in
//! [`pulse_domain::action::transition`] decides the new state, and one compare-and-swap UPDATE
//! names both the state and the version that were read, so of two racing writers exactly one
//! lands. The same call appends the transition to the tenant's hash-chained audit log
//! ([`crate::audit`]) inside the caller's transaction, so a state change without its audit row
//! (or the reverse) cannot be committed. Nothing here commits: the caller commits (and can put an
//! outbox message in the same transaction).

use chrono::{DateTime, Utc};
use pulse_domain::TenantId;
use pulse_domain::action::{
    ActionEvent, ActionPlan, ActionState, IllegalTransition, Verification, transition as next_state,
};
use pulse_domain::finding::FindingId;
use serde::Serialize;
use serde_json::{Value, json};
use tokio_postgres::Row;
use tokio_postgres::types::Json;
use uuid::Uuid;

use crate::audit::{self, AuditEntry};
use crate::{Store, StoreError, TenantTx};

/// Listing limits of [`list`] and [`pending`].
pub const DEFAULT_LIST_LIMIT: i64 = 100;
pub const MAX_LIST_LIMIT: i64 = pulse_domain::listing::MAX_ACTIONS;

/// An action as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredAction {
    pub plan: ActionPlan,
    pub state: ActionState,
    /// The compare-and-swap token.
    pub version: i64,
    pub decided_by: Option<String>,
    pub decision_reason: Option<String>,
    pub human_approved: bool,
    pub lease_id: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub result: Option<Value>,
    pub updated_at: DateTime<Utc>,
    /// The finding the action is meant to fix.
    pub finding_id: Option<FindingId>,
    /// The verifier's judgement of a completed action, once recorded.
    pub verification: Option<Verification>,
    /// `{reason, evidence, observations, checked_at}` of the judgement.
    pub verification_detail: Option<Value>,
    pub verified_at: Option<DateTime<Utc>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ActionsError {
    #[error("no action {0}")]
    NotFound(Uuid),
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// A verification was asked of an action that is not `completed`, or already has one.
    #[error("action {id} cannot take a verification: {reason}")]
    NotVerifiable { id: Uuid, reason: String },
    /// The caller named a version (or state) the action no longer has.
    #[error("action {id} changed concurrently (expected version {expected})")]
    Conflict { id: Uuid, expected: i64 },
    #[error("action {0} already exists")]
    Duplicate(Uuid),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<tokio_postgres::Error> for ActionsError {
    fn from(e: tokio_postgres::Error) -> Self {
        ActionsError::Store(StoreError::Database(e))
    }
}

/// Columns every read selects, in this order. `plan_hash` is the column, which wins over the
/// copy inside `plan`: it is the hash recorded when the plan was made.
const SELECT: &str = "SELECT plan, state, version, decided_by, decision_reason, human_approved,
        lease_id, lease_expires_at, result, updated_at, plan_hash, finding_id, verification,
        verification_detail, verified_at FROM actions";

fn from_row(row: &Row) -> Result<StoredAction, StoreError> {
    let Json(mut plan): Json<ActionPlan> = row
        .try_get(0)
        .map_err(|e| StoreError::Invalid(format!("action plan: {e}")))?;
    let state: String = row.get(1);
    let state = ActionState::parse(&state)
        .ok_or_else(|| StoreError::Invalid(format!("unknown action state {state:?}")))?;
    plan.plan_hash = row.get(10);
    let finding_id: Option<String> = row.get(11);
    let finding_id = finding_id
        .map(|f| {
            f.parse::<FindingId>()
                .map_err(|e| StoreError::Invalid(format!("action finding_id {f:?}: {e}")))
        })
        .transpose()?;
    let verification: Option<String> = row.get(12);
    let verification = verification
        .map(|v| {
            Verification::parse(&v)
                .ok_or_else(|| StoreError::Invalid(format!("unknown verification {v:?}")))
        })
        .transpose()?;
    Ok(StoredAction {
        plan,
        state,
        version: row.get(2),
        decided_by: row.get(3),
        decision_reason: row.get(4),
        human_approved: row.get(5),
        lease_id: row.get(6),
        lease_expires_at: row.get(7),
        result: row.get(8),
        updated_at: row.get(9),
        finding_id,
        verification,
        verification_detail: row.get(13),
        verified_at: row.get(14),
    })
}

/// Inserts a new plan in state `planned` and appends `action.planned` to the audit log.
pub async fn create(
    tx: &TenantTx,
    plan: &ActionPlan,
    actor: &str,
) -> Result<StoredAction, ActionsError> {
    create_for_finding(tx, plan, None, actor).await
}

/// [`create`] for an action meant to fix `finding_id` (its fix outcome is written back to it).
pub async fn create_for_finding(
    tx: &TenantTx,
    plan: &ActionPlan,
    finding_id: Option<FindingId>,
    actor: &str,
) -> Result<StoredAction, ActionsError> {
    let finding_hex = finding_id.map(|f| f.as_hex());
    let row = tx
        .client()
        .query_opt(
            "INSERT INTO actions (tenant_id, id, resource_id, agent_id, capability, state,
                                  severity, risk_rank, approval_floor, requested_by, plan_hash,
                                  planned_at, expires_at, version, plan, finding_id)
             VALUES ($1, $2, $3, $4, $5, 'planned', $6, $7, $8, $9, $10, $11, $12, 1, $13, $14)
             ON CONFLICT (tenant_id, id) DO NOTHING
             RETURNING id",
            &[
                &tx.tenant().as_str(),
                &plan.action_id,
                &plan.resource_id,
                &plan.agent_id,
                &plan.capability.as_str(),
                &plan.severity.as_str(),
                &plan.severity.risk_rank(),
                &plan.approval_floor.as_str(),
                &plan.requested_by,
                &plan.plan_hash,
                &plan.planned_at,
                &plan.expires_at,
                &Json(plan),
                &finding_hex,
            ],
        )
        .await?;
    if row.is_none() {
        return Err(ActionsError::Duplicate(plan.action_id));
    }
    let payload = json!({
        "to": ActionState::Planned,
        "plan_hash": plan.plan_hash,
        "resource_id": plan.resource_id,
        "capability": plan.capability,
        "approval_floor": plan.approval_floor,
        "policy_decision": plan.policy_decision,
        "finding_id": finding_hex,
    });
    audit_and_reread(tx, plan.action_id, actor, "action.planned", payload).await
}

/// The action with this id; `None` also for another tenant's id (row-level security).
pub async fn get(tx: &TenantTx, id: Uuid) -> Result<Option<StoredAction>, StoreError> {
    let row = tx
        .client()
        .query_opt(&format!("{SELECT} WHERE id = $1"), &[&id])
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// Like [`get`], locking the row for the rest of the transaction.
pub async fn get_for_update(tx: &TenantTx, id: Uuid) -> Result<Option<StoredAction>, StoreError> {
    let row = tx
        .client()
        .query_opt(&format!("{SELECT} WHERE id = $1 FOR UPDATE"), &[&id])
        .await?;
    row.as_ref().map(from_row).transpose()
}

fn clamp(limit: Option<i64>) -> i64 {
    limit.unwrap_or(DEFAULT_LIST_LIMIT).clamp(1, MAX_LIST_LIMIT)
}

/// The newest action `requested_by` planned for `finding` at or after `since`, if any (an
/// investigation taken over from a lost runner asks whether its proposal was already made).
pub async fn latest_for_finding(
    tx: &TenantTx,
    finding: FindingId,
    requested_by: &str,
    since: DateTime<Utc>,
) -> Result<Option<StoredAction>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            &format!(
                "{SELECT} WHERE finding_id = $1 AND requested_by = $2 AND planned_at >= $3
                 ORDER BY planned_at DESC, id DESC LIMIT 1"
            ),
            &[&finding.as_hex(), &requested_by, &since],
        )
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// The tenant's actions, newest first.
pub async fn list(tx: &TenantTx, limit: Option<i64>) -> Result<Vec<StoredAction>, StoreError> {
    let rows = tx
        .client()
        .query(
            &format!("{SELECT} ORDER BY planned_at DESC, id DESC LIMIT $1"),
            &[&clamp(limit)],
        )
        .await?;
    rows.iter().map(from_row).collect()
}

/// The approval queue: actions waiting for a human, by expiry (soonest first), risk (critical
/// first), age (oldest first) and id.
pub async fn pending(tx: &TenantTx, limit: Option<i64>) -> Result<Vec<StoredAction>, StoreError> {
    let rows = tx
        .client()
        .query(
            &format!(
                "{SELECT} WHERE state = 'pending_approval'
                 ORDER BY expires_at, risk_rank, planned_at, id LIMIT $1"
            ),
            &[&clamp(limit)],
        )
        .await?;
    rows.iter().map(from_row).collect()
}

/// What a transition records besides the new state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TransitionDetail {
    /// Why: the human's reason, a policy reason code, a refusal message (`plan_drift: ...`).
    pub reason: Option<String>,
    /// The deciding human, for `approve` / `reject`.
    pub decided_by: Option<String>,
    /// The execution lease, for `start_execution`.
    pub lease: Option<(String, DateTime<Utc>)>,
    /// The receipt or refusal, for `complete` / `fail` / `refuse`.
    pub result: Option<Value>,
    /// Extra audit payload fields.
    pub audit: Option<Value>,
}

/// Moves the action from `current` (as read, with its version) by `event`: one compare-and-swap
/// UPDATE plus the audit row, both in the caller's transaction. `Conflict` when the row changed
/// since it was read; nothing was written then.
pub async fn transition(
    tx: &TenantTx,
    current: &StoredAction,
    event: ActionEvent,
    actor: &str,
    detail: TransitionDetail,
) -> Result<StoredAction, ActionsError> {
    let id = current.plan.action_id;
    let to = next_state(current.state, event)?;
    let human = matches!(event, ActionEvent::Approve);
    let (lease_id, lease_expires_at) = match &detail.lease {
        Some((id, at)) => (Some(id.as_str()), Some(*at)),
        None => (None, None),
    };
    let row = tx
        .client()
        .query_opt(
            "UPDATE actions
             SET state = $3, version = version + 1, updated_at = now(),
                 decided_by = COALESCE($4, decided_by),
                 decision_reason = COALESCE($5, decision_reason),
                 human_approved = human_approved OR $6,
                 lease_id = COALESCE($7, lease_id),
                 lease_expires_at = COALESCE($8, lease_expires_at),
                 result = COALESCE($9, result)
             WHERE id = $1 AND version = $2 AND state = $10
             RETURNING id",
            &[
                &id,
                &current.version,
                &to.as_str(),
                &detail.decided_by,
                &detail.reason,
                &human,
                &lease_id,
                &lease_expires_at,
                &detail.result,
                &current.state.as_str(),
            ],
        )
        .await?;
    if row.is_none() {
        return Err(conflict(current));
    }
    let mut payload = json!({
        "from": current.state,
        "to": to,
        "event": event,
        "plan_hash": current.plan.plan_hash,
    });
    if let Some(reason) = &detail.reason {
        payload["reason"] = json!(reason);
    }
    if let Some(decided_by) = &detail.decided_by {
        payload["decided_by"] = json!(decided_by);
    }
    if let Some(lease_id) = lease_id {
        payload["lease_id"] = json!(lease_id);
    }
    if let Some(extra) = &detail.audit {
        merge_object(&mut payload, extra);
    }
    audit_and_reread(tx, id, actor, event.audit_kind(), payload).await
}

/// Records the verifier's judgement of the completed action `current` (as read, with its
/// version): one compare-and-swap that bumps the version plus the `action.verification` audit
/// row, in the caller's transaction. Only a `completed` action without a verification takes
/// one ([`ActionsError::NotVerifiable`] otherwise, nothing written); a lost race is
/// [`ActionsError::Conflict`]. So an action never gets a second outcome.
pub async fn record_verification(
    tx: &TenantTx,
    current: &StoredAction,
    outcome: Verification,
    detail: Value,
    actor: &str,
) -> Result<StoredAction, ActionsError> {
    let id = current.plan.action_id;
    if current.state != ActionState::Completed {
        return Err(ActionsError::NotVerifiable {
            id,
            reason: format!("it is {}, not completed", current.state),
        });
    }
    if let Some(existing) = current.verification {
        return Err(ActionsError::NotVerifiable {
            id,
            reason: format!("it is already {existing}"),
        });
    }
    let row = tx
        .client()
        .query_opt(
            "UPDATE actions
             SET verification = $3, verification_detail = $4, verified_at = now(),
                 version = version + 1, updated_at = now()
             WHERE id = $1 AND version = $2 AND state = 'completed' AND verification IS NULL
             RETURNING id",
            &[&id, &current.version, &outcome.as_str(), &detail],
        )
        .await?;
    if row.is_none() {
        return Err(conflict(current));
    }
    let mut payload = json!({
        "state": current.state,
        "verification": outcome,
        "plan_hash": current.plan.plan_hash,
    });
    merge_object(&mut payload, &detail);
    audit_and_reread(tx, id, actor, "action.verification", payload).await
}

/// A compare-and-swap on `current` that found its version (or state) changed.
fn conflict(current: &StoredAction) -> ActionsError {
    ActionsError::Conflict {
        id: current.plan.action_id,
        expected: current.version,
    }
}

/// Copies the fields of `extra`, when it is an object, into the audit `payload` (an object).
fn merge_object(payload: &mut Value, extra: &Value) {
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            payload[k] = v.clone();
        }
    }
}

/// Appends the audit row `kind` of a change to action `id`, then reads the action as changed.
async fn audit_and_reread(
    tx: &TenantTx,
    id: Uuid,
    actor: &str,
    kind: &str,
    payload: Value,
) -> Result<StoredAction, ActionsError> {
    audit::append(
        tx,
        &AuditEntry {
            actor: actor.to_owned(),
            kind: kind.to_owned(),
            subject: id.to_string(),
            payload,
        },
    )
    .await?;
    get(tx, id).await?.ok_or(ActionsError::NotFound(id))
}

/// An action of some tenant the broker still has to move on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnfinishedAction {
    pub tenant: TenantId,
    pub action_id: Uuid,
    pub state: ActionState,
}

/// Actions of every tenant that are not done, oldest change first, at most `max_rows`: plans
/// past their expiry still `planned` or `pending_approval`, `approved` and `executing` ones, and
/// `completed` ones without a verification.
pub async fn unfinished(store: &Store, max_rows: i32) -> Result<Vec<UnfinishedAction>, StoreError> {
    let client = store.pool().get().await?;
    let rows = client
        .query(
            "SELECT tenant_id, action_id, state FROM pulse_unfinished_actions($1)",
            &[&max_rows],
        )
        .await?;
    // One row that does not decode must not stop the sweep for every other action.
    Ok(rows
        .iter()
        .filter_map(|row| match unfinished_from_row(row) {
            Ok(action) => Some(action),
            Err(error) => {
                tracing::warn!(%error, "unfinished action row skipped: it does not decode");
                None
            }
        })
        .collect())
}

fn unfinished_from_row(row: &Row) -> Result<UnfinishedAction, StoreError> {
    let tenant: String = row.try_get(0)?;
    let action_id: Uuid = row.try_get(1)?;
    let state: String = row.try_get(2)?;
    Ok(UnfinishedAction {
        tenant: TenantId::new(tenant).map_err(|e| StoreError::Invalid(e.to_string()))?,
        action_id,
        state: ActionState::parse(&state)
            .ok_or_else(|| StoreError::Invalid(format!("unknown action state {state:?}")))?,
    })
}

/// The audit rows of one action, in sequence order.
pub async fn audit_trail(tx: &TenantTx, id: Uuid) -> Result<Vec<audit::AuditRecord>, StoreError> {
    let rows = tx
        .client()
        .query(
            "SELECT seq, occurred_at, actor, kind, subject, payload, prev_hash, row_hash
             FROM audit_events WHERE subject = $1 AND kind LIKE 'action.%' ORDER BY seq",
            &[&id.to_string()],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| audit::AuditRecord {
            seq: row.get(0),
            occurred_at: row.get(1),
            actor: row.get(2),
            kind: row.get(3),
            subject: row.get(4),
            payload: row.get(5),
            prev_hash: row.get(6),
            row_hash: row.get(7),
        })
        .collect())
}

// The remediation lock is `never_auto_remediate` of the resource's operator state, whose one
// owner is `crate::operator_state`.
pub use crate::operator_state::{remediation_lock, set_remediation_lock};
