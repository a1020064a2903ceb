//! Cost-ledger sums for the tenant spend budgets: what the tenant of a transaction spent in the
//! current UTC day and month, fed to the pure [`pulse_domain::patrol::budget::decide`].
//!
//! Rows are written by the model-runner (one per provider call); this module only reads. Every
//! sum is the tenant's own: the query filters on the transaction's tenant and the table's
//! row-level security would hide other tenants' rows anyway. A period counts rows with
//! `start <= occurred_at < reset_at`, so a row at the boundary belongs to the new period.

use chrono::{DateTime, Utc};
use pulse_domain::ai_settings::{self, Budgets};
use pulse_domain::patrol::budget::{BudgetPeriod, PeriodSpend, Spend, TenantSpend};
use pulse_domain::usd::Usd;

use crate::settings::{self, SettingsStoreError};
use crate::{StoreError, TenantTx};

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The tenant's totals over `[from, to)`: input plus output tokens, the known dollar sum and the
/// calls whose price was unknown.
pub async fn period_spend(
    tx: &TenantTx,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<PeriodSpend, StoreError> {
    let row = tx
        .client()
        .query_one(
            "SELECT coalesce(sum(input_tokens + output_tokens), 0)::bigint, \
             coalesce(sum(cost_usd), 0)::text, \
             count(*) FILTER (WHERE NOT price_known)::bigint \
             FROM cost_ledger \
             WHERE tenant_id = $1 AND occurred_at >= $2 AND occurred_at < $3",
            &[&tx.tenant().as_str(), &from, &to],
        )
        .await?;
    let amount: String = row.try_get(1)?;
    let known: Usd = amount
        .parse()
        .map_err(|e| StoreError::Invalid(format!("the cost ledger holds {e}")))?;
    Ok(PeriodSpend {
        tokens: count(row.try_get(0)?),
        dollars: Spend {
            known,
            unknown_price_calls: count(row.try_get(2)?),
        },
    })
}

/// The tenant's totals for the UTC day and the UTC month that contain `now`.
pub async fn tenant_spend(tx: &TenantTx, now: DateTime<Utc>) -> Result<TenantSpend, StoreError> {
    let day = BudgetPeriod::Day.window(now);
    let month = BudgetPeriod::Month.window(now);
    Ok(TenantSpend {
        day: period_spend(tx, day.start, day.reset_at).await?,
        month: period_spend(tx, month.start, month.reset_at).await?,
    })
}

/// The tenant's stored budgets. Budgets come only from the stored settings document (the
/// `[ai]` config layer sets none), so no config layer is needed to read them.
pub async fn stored_budgets(tx: &TenantTx) -> Result<Budgets, StoreError> {
    let stored = settings::get(tx, false).await.map_err(|e| match e {
        SettingsStoreError::Store(e) => e,
        other => StoreError::Invalid(other.to_string()),
    })?;
    // Only the budgets are resolved: the rest of the document may depend on the config layer.
    let budgets = match stored.document.get("budgets") {
        Some(budgets) => serde_json::json!({ "budgets": budgets }),
        None => serde_json::json!({}),
    };
    ai_settings::resolve(&[&budgets])
        .map(|s| s.budgets)
        .map_err(|e| StoreError::Invalid(format!("the stored budgets do not resolve: {e}")))
}
