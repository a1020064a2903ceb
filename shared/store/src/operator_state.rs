//! Operator state per resource: the only reader and writer of `resource_operator_state`.
//!
//! One row holds every operator-set signal of a resource ([`OperatorStateProjection`]): the
//! finding store reads it to auto-dismiss findings under maintenance or intentionally offline,
//! and the action broker reads the same row's `never_auto_remediate` as the remediation lock on
//! every dispatch ([`remediation_lock`]). The remediation-lock route writes only that column
//! ([`set_remediation_lock`]); the operator-state routes write the whole row ([`put`]) or delete
//! it ([`clear`]). Every change is audited with the caller as actor. Rows are keyed on the
//! canonical resource id, which is what findings and plans name.

use chrono::{DateTime, Utc};
use pulse_domain::action::LockState;
use pulse_domain::finding::operator_state::{
    Criticality, MaintenanceWindow, OperatorStateProjection,
};
use serde_json::json;
use tokio_postgres::Row;

use crate::audit::{self, AuditEntry};
use crate::{StoreError, TenantTx};

/// The stored operator state of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorState {
    pub resource_id: String,
    pub projection: OperatorStateProjection,
    pub note: String,
    pub set_by: String,
    pub set_at: DateTime<Utc>,
}

/// What an operator sets (the whole state: fields left out are cleared).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorStateInput {
    pub projection: OperatorStateProjection,
    pub note: String,
}

const COLUMNS: &str = "resource_id, never_auto_remediate, intentionally_offline, \
     maintenance_starts_at, maintenance_ends_at, criticality, note, set_by, set_at";

fn from_row(row: &Row) -> Result<OperatorState, StoreError> {
    let starts_at: Option<DateTime<Utc>> = row.try_get(3)?;
    let ends_at: Option<DateTime<Utc>> = row.try_get(4)?;
    let criticality: Option<String> = row.try_get(5)?;
    let criticality = criticality
        .map(|c| {
            Criticality::parse(&c)
                .ok_or_else(|| StoreError::Invalid(format!("unknown criticality {c:?}")))
        })
        .transpose()?;
    Ok(OperatorState {
        resource_id: row.try_get(0)?,
        projection: OperatorStateProjection {
            maintenance_window: ends_at.map(|ends_at| MaintenanceWindow { starts_at, ends_at }),
            intentionally_offline: row.try_get(2)?,
            never_auto_remediate: row.try_get(1)?,
            criticality,
        },
        note: row.try_get(6)?,
        set_by: row.try_get(7)?,
        set_at: row.try_get(8)?,
    })
}

/// The resource's stored state; `None` when nothing was ever set (or it was cleared).
pub async fn get(tx: &TenantTx, resource_id: &str) -> Result<Option<OperatorState>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            &format!("SELECT {COLUMNS} FROM resource_operator_state WHERE resource_id = $1"),
            &[&resource_id],
        )
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// Every signal of the resource in one read; the default (nothing set) when none is stored.
pub async fn projection(
    tx: &TenantTx,
    resource_id: &str,
) -> Result<OperatorStateProjection, StoreError> {
    Ok(get(tx, resource_id)
        .await?
        .map(|s| s.projection)
        .unwrap_or_default())
}

/// Replaces the resource's state, audited as `resource.operator_state`.
pub async fn put(
    tx: &TenantTx,
    resource_id: &str,
    input: &OperatorStateInput,
    actor: &str,
) -> Result<OperatorState, StoreError> {
    let p = &input.projection;
    let starts_at = p.maintenance_window.and_then(|w| w.starts_at);
    let ends_at = p.maintenance_window.map(|w| w.ends_at);
    let criticality = p.criticality.map(Criticality::as_str);
    let row = tx
        .client()
        .query_one(
            &format!(
                "INSERT INTO resource_operator_state
                     (tenant_id, resource_id, never_auto_remediate, intentionally_offline,
                      maintenance_starts_at, maintenance_ends_at, criticality, note, set_by,
                      set_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now())
                 ON CONFLICT (tenant_id, resource_id) DO UPDATE
                 SET never_auto_remediate = $3, intentionally_offline = $4,
                     maintenance_starts_at = $5, maintenance_ends_at = $6, criticality = $7,
                     note = $8, set_by = $9, set_at = now()
                 RETURNING {COLUMNS}"
            ),
            &[
                &tx.tenant().as_str(),
                &resource_id,
                &p.never_auto_remediate,
                &p.intentionally_offline,
                &starts_at,
                &ends_at,
                &criticality,
                &input.note,
                &actor,
            ],
        )
        .await?;
    let stored = from_row(&row)?;
    audit::append(
        tx,
        &AuditEntry {
            actor: actor.to_owned(),
            kind: "resource.operator_state".to_owned(),
            subject: resource_id.to_owned(),
            payload: json!({
                "never_auto_remediate": p.never_auto_remediate,
                "intentionally_offline": p.intentionally_offline,
                "maintenance_starts_at": starts_at,
                "maintenance_ends_at": ends_at,
                "criticality": criticality,
            }),
        },
    )
    .await?;
    Ok(stored)
}

/// Deletes the resource's state (every signal back to unset), audited as
/// `resource.operator_state_cleared`. Returns whether there was anything to clear.
pub async fn clear(tx: &TenantTx, resource_id: &str, actor: &str) -> Result<bool, StoreError> {
    let deleted = tx
        .client()
        .execute(
            "DELETE FROM resource_operator_state WHERE resource_id = $1",
            &[&resource_id],
        )
        .await?;
    if deleted > 0 {
        audit::append(
            tx,
            &AuditEntry {
                actor: actor.to_owned(),
                kind: "resource.operator_state_cleared".to_owned(),
                subject: resource_id.to_owned(),
                payload: json!({}),
            },
        )
        .await?;
    }
    Ok(deleted > 0)
}

/// Sets or clears only `never_auto_remediate` (the remediation-lock route), leaving the other
/// signals as they are; audited as `resource.remediation_lock`.
pub async fn set_remediation_lock(
    tx: &TenantTx,
    resource_id: &str,
    never_auto_remediate: bool,
    actor: &str,
) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "INSERT INTO resource_operator_state
                 (tenant_id, resource_id, never_auto_remediate, set_by, set_at)
             VALUES ($1, $2, $3, $4, now())
             ON CONFLICT (tenant_id, resource_id) DO UPDATE
             SET never_auto_remediate = $3, set_by = $4, set_at = now()",
            &[
                &tx.tenant().as_str(),
                &resource_id,
                &never_auto_remediate,
                &actor,
            ],
        )
        .await?;
    audit::append(
        tx,
        &AuditEntry {
            actor: actor.to_owned(),
            kind: "resource.remediation_lock".to_owned(),
            subject: resource_id.to_owned(),
            payload: json!({ "never_auto_remediate": never_auto_remediate }),
        },
    )
    .await?;
    Ok(())
}

/// The resource's remediation lock (`never_auto_remediate` of its operator state); a resource
/// never locked is unlocked.
pub async fn remediation_lock(tx: &TenantTx, resource_id: &str) -> Result<LockState, StoreError> {
    Ok(if projection(tx, resource_id).await?.never_auto_remediate {
        LockState::Locked
    } else {
        LockState::Unlocked
    })
}
