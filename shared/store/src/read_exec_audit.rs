//! The audit of `pulse_read` exec: one row per exec the agent-relay was asked for, ran or
//! refused, written by the relay ([`insert`]) and read newest first ([`list`]). The relay hands
//! over the command already bounded and redacted; this module bounds it again so a row always
//! fits the table.

use chrono::{DateTime, Utc};
use pulse_domain::resource::truncate_chars;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{StoreError, TenantTx};

/// Longest command text kept, in characters.
pub const MAX_COMMAND_CHARS: usize = 2048;
/// Longest requester and code kept, in characters.
const MAX_REQUESTER_CHARS: usize = 200;
const MAX_CODE_CHARS: usize = 64;
/// Most rows one [`list`] returns.
pub const MAX_LIST: i64 = 500;

/// How an exec request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecOutcome {
    /// The agent ran it (whatever its exit status).
    Ran,
    /// The agent ran it and killed it at its timeout.
    TimedOut,
    /// The relay or the agent refused it; nothing ran.
    Refused,
    /// It could not be carried out (agent not connected, no answer, the command did not start).
    Failed,
}

impl ExecOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ran => "ran",
            Self::TimedOut => "timed_out",
            Self::Refused => "refused",
            Self::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Ran, Self::TimedOut, Self::Refused, Self::Failed]
            .into_iter()
            .find(|o| o.as_str() == text)
    }
}

/// One audited exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecAuditRow {
    pub occurred_at: DateTime<Utc>,
    pub agent_id: String,
    /// The command as text (`df -h`), redacted.
    pub command: String,
    pub outcome: ExecOutcome,
    pub exit_status: Option<i32>,
    /// The refusal or failure code.
    pub code: Option<String>,
    pub duration_ms: u64,
    /// Bytes of stdout and stderr returned.
    pub output_bytes: u64,
    pub truncated: bool,
    pub requester: Option<String>,
}

/// Records `row` for the transaction's tenant.
pub async fn insert(tx: &TenantTx, row: &ExecAuditRow) -> Result<(), StoreError> {
    let command = if row.command.is_empty() {
        "(empty)".to_owned()
    } else {
        truncate_chars(&row.command, MAX_COMMAND_CHARS)
    };
    let code = row
        .code
        .as_deref()
        .filter(|c| !c.is_empty())
        .map(|c| truncate_chars(c, MAX_CODE_CHARS));
    let requester = row
        .requester
        .as_deref()
        .filter(|r| !r.is_empty())
        .map(|r| truncate_chars(r, MAX_REQUESTER_CHARS));
    let duration = i64::try_from(row.duration_ms).unwrap_or(i64::MAX);
    let bytes = i64::try_from(row.output_bytes).unwrap_or(i64::MAX);
    tx.client()
        .execute(
            "INSERT INTO read_exec_audit (id, tenant_id, occurred_at, agent_id, command, outcome, \
             exit_status, code, duration_ms, output_bytes, truncated, requester) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            &[
                &Uuid::now_v7(),
                &tx.tenant().as_str(),
                &row.occurred_at,
                &row.agent_id,
                &command,
                &row.outcome.as_str(),
                &row.exit_status,
                &code,
                &duration,
                &bytes,
                &row.truncated,
                &requester,
            ],
        )
        .await?;
    Ok(())
}

fn from_row(row: &Row) -> Result<ExecAuditRow, StoreError> {
    let outcome: String = row.try_get(3)?;
    let duration: i64 = row.try_get(6)?;
    let bytes: i64 = row.try_get(7)?;
    Ok(ExecAuditRow {
        occurred_at: row.try_get(0)?,
        agent_id: row.try_get(1)?,
        command: row.try_get(2)?,
        outcome: ExecOutcome::parse(&outcome)
            .ok_or_else(|| StoreError::Invalid(format!("unknown exec outcome {outcome:?}")))?,
        exit_status: row.try_get(4)?,
        code: row.try_get(5)?,
        duration_ms: u64::try_from(duration).unwrap_or(0),
        output_bytes: u64::try_from(bytes).unwrap_or(0),
        truncated: row.try_get(8)?,
        requester: row.try_get(9)?,
    })
}

/// The tenant's newest audited execs, at most `limit` (capped at [`MAX_LIST`]), optionally of
/// one agent only.
pub async fn list(
    tx: &TenantTx,
    agent_id: Option<&str>,
    limit: i64,
) -> Result<Vec<ExecAuditRow>, StoreError> {
    let limit = limit.clamp(1, MAX_LIST);
    let rows = tx
        .client()
        .query(
            "SELECT occurred_at, agent_id, command, outcome, exit_status, code, duration_ms, \
             output_bytes, truncated, requester FROM read_exec_audit \
             WHERE tenant_id = $1 AND ($2::text IS NULL OR agent_id = $2) \
             ORDER BY occurred_at DESC, id DESC LIMIT $3",
            &[&tx.tenant().as_str(), &agent_id, &limit],
        )
        .await?;
    rows.iter().map(from_row).collect()
}
