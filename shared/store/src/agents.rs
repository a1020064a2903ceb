//! Agents: one row per (tenant, agent id), online while it reports, offline once silent.

use chrono::{DateTime, Utc};
use pulse_domain::TenantId;
use uuid::Uuid;

use crate::{Store, StoreError, TenantTx};

/// What an agent says about itself when its session starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSession {
    pub id: String,
    pub hostname: String,
    pub agent_version: String,
    pub report_interval_ms: u64,
    pub token_id: Option<Uuid>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Agent {
    pub id: String,
    pub hostname: String,
    pub agent_version: String,
    pub status: String,
    pub report_interval_ms: u64,
    pub connected_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
}

/// Records a session start: the agent is online and seen now.
pub async fn connect(tx: &TenantTx, session: &AgentSession) -> Result<(), StoreError> {
    let interval = i64::try_from(session.report_interval_ms.max(1)).unwrap_or(i64::MAX);
    tx.client()
        .execute(
            "INSERT INTO agents (tenant_id, id, hostname, agent_version, status, report_interval_ms, token_id)
             VALUES ($1, $2, $3, $4, 'online', $5, $6)
             ON CONFLICT (tenant_id, id) DO UPDATE SET
                hostname = EXCLUDED.hostname, agent_version = EXCLUDED.agent_version,
                status = 'online', report_interval_ms = EXCLUDED.report_interval_ms,
                token_id = EXCLUDED.token_id, connected_at = now(), last_seen_at = now()",
            &[
                &tx.tenant().as_str(),
                &session.id,
                &session.hostname,
                &session.agent_version,
                &interval,
                &session.token_id,
            ],
        )
        .await?;
    Ok(())
}

/// Records a report: the agent is online and seen now.
pub async fn seen(tx: &TenantTx, id: &str) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "UPDATE agents SET status = 'online', last_seen_at = now() WHERE id = $1",
            &[&id],
        )
        .await?;
    Ok(())
}

/// Records a report of each of `ids` (one statement): online and seen now.
pub async fn seen_all(tx: &TenantTx, ids: &[&str]) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "UPDATE agents SET status = 'online', last_seen_at = now() WHERE id = ANY($1)",
            &[&ids],
        )
        .await?;
    Ok(())
}

pub async fn get(tx: &TenantTx, id: &str) -> Result<Option<Agent>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT id, hostname, agent_version, status, report_interval_ms, connected_at, last_seen_at
             FROM agents WHERE id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|row| Agent {
        id: row.get(0),
        hostname: row.get(1),
        agent_version: row.get(2),
        status: row.get(3),
        report_interval_ms: u64::try_from(row.get::<_, i64>(4)).unwrap_or_default(),
        connected_at: row.get(5),
        last_seen_at: row.get(6),
    }))
}

/// Forgets agent `id` (a decommissioned host): the row stays, `forgotten`, so its history keeps
/// its keys, and a report of the agent brings it back online (see [`seen_all`]). A forgotten
/// agent is never swept offline and not counted against the `agents` quota. The caller removes
/// the agent's resources in the same transaction (`resources::apply_report` with nothing
/// observed). Returns the agent's status before, or `None` when the tenant has no such agent.
pub async fn forget(tx: &TenantTx, id: &str) -> Result<Option<String>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "WITH before AS (SELECT id, status FROM agents WHERE id = $1 FOR UPDATE)
             UPDATE agents a SET status = 'forgotten'
             FROM before b WHERE a.id = b.id
             RETURNING b.status",
            &[&id],
        )
        .await?;
    Ok(row.map(|row| row.get(0)))
}

/// Online agents of every tenant silent at `at` for longer than `offline_after` and than three
/// of their own report intervals (a cluster read every 30 s is not offline between reads); at
/// most 1000, the longest silent first. Identities only: the one cross-tenant read, through
/// `pulse_stale_agents`.
pub async fn stale(
    store: &Store,
    at: DateTime<Utc>,
    offline_after: std::time::Duration,
) -> Result<Vec<(TenantId, String)>, StoreError> {
    let client = store.pool().get().await?;
    let offline_after_ms = i64::try_from(offline_after.as_millis()).unwrap_or(i64::MAX);
    let rows = client
        .query(
            "SELECT tenant_id, id FROM pulse_stale_agents($1, $2)",
            &[&at, &offline_after_ms],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let tenant: String = row.get(0);
            Ok((
                TenantId::new(tenant).map_err(|e| StoreError::Invalid(e.to_string()))?,
                row.get(1),
            ))
        })
        .collect()
}

/// Marks the agent offline if it is still online and, at `at`, silent for longer than
/// `offline_after` and three of its report intervals. Returns whether it changed (false when a
/// report arrived in between).
pub async fn mark_offline(
    tx: &TenantTx,
    id: &str,
    at: DateTime<Utc>,
    offline_after: std::time::Duration,
) -> Result<bool, StoreError> {
    let offline_after_ms = i64::try_from(offline_after.as_millis()).unwrap_or(i64::MAX);
    let n = tx
        .client()
        .execute(
            "UPDATE agents SET status = 'offline'
             WHERE id = $1 AND status = 'online'
               AND last_seen_at < $2::timestamptz - make_interval(
                       secs => greatest($3::bigint, report_interval_ms * 3) / 1000.0)",
            &[&id, &at, &offline_after_ms],
        )
        .await?;
    Ok(n == 1)
}
