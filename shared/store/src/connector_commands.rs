//! The connector's command log (migration 0036): the only reader and writer of
//! `connector_commands`, the idempotency log of the commands a connector runs on a cluster's
//! guests.
//!
//! It is the host agent's log kept where every connector replica can read it: an action id is
//! written `accepted` (in its own committed transaction) before the Proxmox API is asked, gets the
//! task's UPID the moment Proxmox answers, and is `finished` with its receipt. So whichever replica
//! holds the connection's lease when a command is delivered again knows what happened to it.

use chrono::{DateTime, Utc};
use pulse_domain::agent_protocol::{Command, Receipt};
use tokio_postgres::types::Json;
use uuid::Uuid;

use crate::{StoreError, TenantTx};

/// What the log knows about an action id.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// Accepted and not finished. `upid` is the Proxmox task it started, once Proxmox answered.
    Accepted {
        upid: Option<String>,
        capability: String,
        target: String,
        accepted_at: DateTime<Utc>,
    },
    /// Finished with this receipt.
    Finished(Receipt),
}

/// What the log holds for `action_id`, locked for the caller's transaction so two deliveries of
/// one action read it one after the other.
pub async fn get(tx: &TenantTx, action_id: &str) -> Result<Option<Recorded>, StoreError> {
    let Some(row) = tx
        .client()
        .query_opt(
            "SELECT state, upid, capability, target, accepted_at, receipt
             FROM connector_commands WHERE action_id = $1 FOR UPDATE",
            &[&action_id],
        )
        .await?
    else {
        return Ok(None);
    };
    let state: String = row.try_get(0)?;
    Ok(Some(if state == "finished" {
        let receipt: Json<Receipt> = row.try_get(5)?;
        Recorded::Finished(receipt.0)
    } else {
        Recorded::Accepted {
            upid: row.try_get(1)?,
            capability: row.try_get(2)?,
            target: row.try_get(3)?,
            accepted_at: row.try_get(4)?,
        }
    }))
}

/// Records that `command` is about to run on connection `connection`; false when the action id
/// is already recorded (nothing is written then).
pub async fn accept(
    tx: &TenantTx,
    connection: Uuid,
    command: &Command,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let inserted = tx
        .client()
        .execute(
            "INSERT INTO connector_commands
                 (tenant_id, action_id, connection_id, capability, target, lease_expires_at,
                  state, accepted_at)
             VALUES (current_setting('app.tenant_id', true), $1, $2, $3, $4, $5, 'accepted', $6)
             ON CONFLICT (tenant_id, action_id) DO NOTHING",
            &[
                &command.action_id,
                &connection,
                &command.capability,
                &command.target,
                &command.lease_expires_at,
                &at,
            ],
        )
        .await?;
    Ok(inserted == 1)
}

/// Records the Proxmox task an accepted action started.
pub async fn started(tx: &TenantTx, action_id: &str, upid: &str) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "UPDATE connector_commands SET upid = $2
             WHERE action_id = $1 AND state = 'accepted'",
            &[&action_id, &upid],
        )
        .await?;
    Ok(())
}

/// Records the receipt of a finished action. An action finished already keeps its first
/// receipt; the one recorded is returned.
pub async fn finish(tx: &TenantTx, receipt: &Receipt) -> Result<Receipt, StoreError> {
    tx.client()
        .execute(
            "UPDATE connector_commands
             SET state = 'finished', receipt = $2, finished_at = $3
             WHERE action_id = $1 AND state = 'accepted'",
            &[&receipt.action_id, &Json(receipt), &receipt.at],
        )
        .await?;
    match get(tx, &receipt.action_id).await? {
        Some(Recorded::Finished(recorded)) => Ok(recorded),
        _ => Ok(receipt.clone()),
    }
}
