//! Per-tenant quotas (migration 0026): the stored limits and the usage each one is checked
//! against. The decision itself is [`pulse_domain::tenant::TenantQuotas::admit`]; the callers
//! are the places where the bounded thing is created (docs/tenants.md).

use pulse_domain::tenant::{Quota, QuotaExceeded, TenantQuotas};

use crate::{StoreError, TenantTx};

fn to_u32(value: Option<i32>) -> Option<u32> {
    value.and_then(|v| u32::try_from(v).ok())
}

fn to_u64(value: Option<i64>) -> Option<u64> {
    value.and_then(|v| u64::try_from(v).ok())
}

fn to_i32(value: Option<u32>) -> Result<Option<i32>, StoreError> {
    value
        .map(|v| i32::try_from(v).map_err(|_| StoreError::Invalid(format!("quota {v} too large"))))
        .transpose()
}

fn to_i64(value: Option<u64>) -> Result<Option<i64>, StoreError> {
    value
        .map(|v| i64::try_from(v).map_err(|_| StoreError::Invalid(format!("quota {v} too large"))))
        .transpose()
}

/// The transaction's tenant's quotas (all `None` when none were set).
pub async fn get(tx: &TenantTx) -> Result<TenantQuotas, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT patrol_runs_per_hour, tokens_per_day, usd_micros_per_day, agents, resources,
                    findings, api_requests_per_sec
             FROM tenant_quotas WHERE tenant_id = $1",
            &[&tx.tenant().as_str()],
        )
        .await?;
    Ok(row.map_or_else(TenantQuotas::default, |row| TenantQuotas {
        patrol_runs_per_hour: to_u32(row.get(0)),
        tokens_per_day: to_u64(row.get(1)),
        usd_micros_per_day: to_u64(row.get(2)),
        agents: to_u32(row.get(3)),
        resources: to_u32(row.get(4)),
        findings: to_u32(row.get(5)),
        api_requests_per_sec: to_u32(row.get(6)),
    }))
}

/// Replaces the transaction's tenant's quotas.
pub async fn set(tx: &TenantTx, quotas: &TenantQuotas) -> Result<(), StoreError> {
    if quotas.api_requests_per_sec == Some(0) {
        return Err(StoreError::Invalid(
            "api_requests_per_sec: at least 1 (or null for no quota)".to_owned(),
        ));
    }
    tx.client()
        .execute(
            "INSERT INTO tenant_quotas (tenant_id, patrol_runs_per_hour, tokens_per_day,
                 usd_micros_per_day, agents, resources, findings, api_requests_per_sec)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (tenant_id) DO UPDATE SET
                 patrol_runs_per_hour = EXCLUDED.patrol_runs_per_hour,
                 tokens_per_day = EXCLUDED.tokens_per_day,
                 usd_micros_per_day = EXCLUDED.usd_micros_per_day,
                 agents = EXCLUDED.agents,
                 resources = EXCLUDED.resources,
                 findings = EXCLUDED.findings,
                 api_requests_per_sec = EXCLUDED.api_requests_per_sec,
                 updated_at = now()",
            &[
                &tx.tenant().as_str(),
                &to_i32(quotas.patrol_runs_per_hour)?,
                &to_i64(quotas.tokens_per_day)?,
                &to_i64(quotas.usd_micros_per_day)?,
                &to_i32(quotas.agents)?,
                &to_i32(quotas.resources)?,
                &to_i32(quotas.findings)?,
                &to_i32(quotas.api_requests_per_sec)?,
            ],
        )
        .await?;
    Ok(())
}

/// What the tenant has used of `quota` now; `None` for the request rate, which is counted in
/// the gateway's memory, not the database.
pub async fn usage(tx: &TenantTx, quota: Quota) -> Result<Option<u64>, StoreError> {
    let sql = match quota {
        Quota::PatrolRunsPerHour => {
            "SELECT count(*)::bigint FROM patrol_runs WHERE queued_at > now() - interval '1 hour'"
        }
        Quota::TokensPerDay => {
            "SELECT COALESCE(sum(input_tokens + output_tokens), 0)::bigint FROM cost_ledger
             WHERE occurred_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
        }
        Quota::UsdMicrosPerDay => {
            "SELECT COALESCE(ceil(sum(cost_usd) * 1000000), 0)::bigint FROM cost_ledger
             WHERE occurred_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
        }
        Quota::Agents => "SELECT count(*)::bigint FROM agents WHERE status <> 'forgotten'",
        Quota::Resources => "SELECT count(*)::bigint FROM resources",
        Quota::Findings => {
            "SELECT count(*)::bigint FROM findings WHERE status IN ('active', 'snoozed')"
        }
        Quota::ApiRequestsPerSec => return Ok(None),
    };
    let used: i64 = tx.client().query_one(sql, &[]).await?.get(0);
    Ok(Some(u64::try_from(used).unwrap_or(0)))
}

/// Why a quota check did not admit.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    #[error(transparent)]
    Exceeded(#[from] QuotaExceeded),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Refuses one more of `quota` when the tenant's usage already reached its limit. Reads nothing
/// when the tenant has no limit on `quota`.
pub async fn admit(tx: &TenantTx, quota: Quota) -> Result<(), QuotaError> {
    let quotas = get(tx).await?;
    if quotas.limit(quota).is_none() {
        return Ok(());
    }
    let used = usage(tx, quota).await?.unwrap_or(0);
    quotas.admit(quota, used)?;
    Ok(())
}

/// The `agents` quota at an agent's connection, before its hello names it: a token that already
/// registered an agent of the tenant reconnects freely; a token that has not may connect only
/// while the tenant has fewer agents than its quota.
pub async fn admit_agent_token(tx: &TenantTx, token_id: uuid::Uuid) -> Result<(), QuotaError> {
    let quotas = get(tx).await?;
    if quotas.limit(Quota::Agents).is_none() {
        return Ok(());
    }
    let known = tx
        .client()
        .query_opt(
            "SELECT 1 FROM agents WHERE token_id = $1 AND status <> 'forgotten' LIMIT 1",
            &[&token_id],
        )
        .await
        .map_err(StoreError::from)?;
    if known.is_some() {
        return Ok(());
    }
    let used = usage(tx, Quota::Agents).await?.unwrap_or(0);
    quotas.admit(Quota::Agents, used)?;
    Ok(())
}
