//! Patrol readiness over the store: the last preflight per tenant, and the one readiness
//! evaluation the status route, the scheduler's admission and the runner all call.
//!
//! [`assess`] reads the tenant's settings, which providers hold a key and the last preflight in
//! the caller's transaction, then applies the pure
//! [`pulse_domain::patrol::readiness::assess`]. A preflight older than the route provider's
//! stored key is ignored: the key was replaced since, so the outcome says nothing about it.
//! When the tenant has a spend budget, the cost ledger's sums for the current UTC day and month
//! ([`crate::cost_ledger::tenant_spend`]) feed the `budget` check.

use chrono::{DateTime, Utc};
use pulse_domain::patrol::readiness::{self, PreflightRecord, TurnTransport};
use pulse_domain::patrol::status::{Blocked, ReadinessCheck, readiness_gate};

use crate::cost_ledger;
use crate::settings::{self, ConfigLayer, SettingsStoreError};
use crate::{StoreError, TenantTx};

/// Upper bound on the tenants one boot sweep visits.
pub const MAX_PREFLIGHT_TENANTS: i32 = 100_000;

fn store_error(error: SettingsStoreError) -> StoreError {
    match error {
        SettingsStoreError::Store(error) => error,
        other => StoreError::Invalid(other.to_string()),
    }
}

/// Replaces the tenant's stored preflight outcome.
pub async fn record_preflight(tx: &TenantTx, record: &PreflightRecord) -> Result<(), StoreError> {
    let tenant = tx.tenant().as_str();
    tx.client()
        .execute(
            "INSERT INTO patrol_preflights (tenant_id, route, model, base_url, ok,
                 tool_call_observed, cause, summary, recommendation, action, checked_at,
                 transport, tool_calls_recovered, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, now())
             ON CONFLICT (tenant_id) DO UPDATE SET
                 route = EXCLUDED.route, model = EXCLUDED.model, base_url = EXCLUDED.base_url,
                 ok = EXCLUDED.ok, tool_call_observed = EXCLUDED.tool_call_observed,
                 cause = EXCLUDED.cause, summary = EXCLUDED.summary,
                 recommendation = EXCLUDED.recommendation, action = EXCLUDED.action,
                 checked_at = EXCLUDED.checked_at, transport = EXCLUDED.transport,
                 tool_calls_recovered = EXCLUDED.tool_calls_recovered,
                 updated_at = EXCLUDED.updated_at",
            &[
                &tenant,
                &record.route,
                &record.model,
                &record.base_url,
                &record.ok,
                &record.tool_call_observed,
                &record.cause,
                &record.summary,
                &record.recommendation,
                &record.action,
                &record.checked_at,
                &record.transport.map(TurnTransport::as_str),
                &i32::try_from(record.tool_calls_recovered).unwrap_or(i32::MAX),
            ],
        )
        .await?;
    Ok(())
}

/// The tenant's last preflight outcome, if one ran.
pub async fn load_preflight(tx: &TenantTx) -> Result<Option<PreflightRecord>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT route, model, base_url, ok, tool_call_observed, cause, summary,
                 recommendation, action, checked_at, transport, tool_calls_recovered
             FROM patrol_preflights",
            &[],
        )
        .await?;
    Ok(row.map(|row| PreflightRecord {
        route: row.get(0),
        model: row.get(1),
        base_url: row.get(2),
        ok: row.get(3),
        tool_call_observed: row.get(4),
        cause: row.get(5),
        summary: row.get(6),
        recommendation: row.get(7),
        action: row.get(8),
        checked_at: row.get(9),
        transport: row
            .get::<_, Option<String>>(10)
            .as_deref()
            .and_then(TurnTransport::parse),
        tool_calls_recovered: u32::try_from(row.get::<_, i32>(11)).unwrap_or(0),
    }))
}

/// Every readiness check of the tenant of `tx`, in the stable check order.
pub async fn assess(
    tx: &TenantTx,
    config: &ConfigLayer,
    now: DateTime<Utc>,
) -> Result<Vec<ReadinessCheck>, StoreError> {
    let stored = settings::get(tx, false).await.map_err(store_error)?;
    let resolved = match config.resolve(&stored) {
        Ok(settings) => Some(settings),
        Err(error) => {
            tracing::warn!(tenant = %tx.tenant().as_str(), %error, "stored ai settings do not resolve");
            None
        }
    };
    let route = resolved.as_ref().and_then(|s| s.patrol_route());
    let credentials = settings::configured_credentials(tx)
        .await
        .map_err(store_error)?;
    let key_set_at = route
        .as_ref()
        .and_then(|r| credentials.get(r.provider).copied());
    let has_key = route
        .as_ref()
        .is_some_and(|r| key_set_at.is_some() || config.environment_keys.contains(r.provider));
    let preflight = load_preflight(tx)
        .await?
        .filter(|p| key_set_at.is_none_or(|set_at| p.checked_at >= set_at));
    // The ledger is summed only when a budget is set: most tenants have none.
    let spend = match resolved.as_ref().map(|s| &s.budgets) {
        Some(b)
            if b.daily_usd.is_some()
                || b.monthly_usd.is_some()
                || b.daily_tokens.is_some()
                || b.monthly_tokens.is_some() =>
        {
            Some(cost_ledger::tenant_spend(tx, now).await?)
        }
        _ => None,
    };
    let connections: Vec<readiness::ConnectionReading> = crate::connections::list(tx)
        .await?
        .into_iter()
        .map(|c| readiness::ConnectionReading {
            name: c.name,
            state: c.state,
            cause: c.state_cause,
        })
        .collect();
    Ok(readiness::assess(
        resolved.as_ref(),
        has_key,
        preflight.as_ref(),
        spend.as_ref(),
        &connections,
        now,
    ))
}

/// The readiness gate for the tenant of `tx`: `Ok(Err(blocked))` when a check is known to fail.
pub async fn gate(
    tx: &TenantTx,
    config: &ConfigLayer,
    now: DateTime<Utc>,
) -> Result<Result<(), Blocked>, StoreError> {
    Ok(readiness_gate(&assess(tx, config, now).await?))
}

/// Every tenant id (identities only, across row-level security), at most `max_rows`: the
/// model-runner's boot preflight visits each in its own transaction.
pub async fn tenants(
    store: &crate::Store,
    max_rows: i32,
) -> Result<Vec<pulse_domain::TenantId>, StoreError> {
    let client = store.pool().get().await?;
    let rows = client
        .query(
            "SELECT tenant_id FROM pulse_preflight_tenants($1)",
            &[&max_rows],
        )
        .await?;
    rows.iter()
        .map(|row| {
            pulse_domain::TenantId::new(row.get::<_, String>(0))
                .map_err(|e| StoreError::Invalid(e.to_string()))
        })
        .collect()
}
