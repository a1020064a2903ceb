//! The cost ledger (`cost_ledger`), one row per completed provider call: the one writer
//! ([`record`]) and the one owner of every sum over it:
//!
//! - the tenant spend budgets: what the tenant of a transaction spent in the current UTC day and
//!   month ([`tenant_spend`]), fed to the pure [`pulse_domain::patrol::budget::decide`];
//! - the cost report: the ledger grouped by UTC day, Patrol run, surface and route ([`lines`]),
//!   and per-route totals folded from it ([`summary`], also the model-runner's window sums).
//!
//! The model-runner prices each call with its one price table and records it here; this module
//! stores the price as given and never prices anything. Every sum is the tenant's own: the query filters on the
//! transaction's tenant and the table's row-level security would hide other tenants' rows
//! anyway. A period counts rows with `start <= occurred_at < reset_at`, so a row at the boundary
//! belongs to the new period. An unknown price is never summed as zero: each total keeps the
//! known dollar sum and the count of calls whose price was unknown apart.

use chrono::{DateTime, NaiveDate, Utc};
use pulse_domain::ai_settings::{self, Budgets};
use pulse_domain::patrol::budget::{BudgetPeriod, PeriodSpend, Spend, TenantSpend};
use pulse_domain::usd::Usd;
use pulse_providers::Usage;
use pulse_providers::registry::RouteClass;
use serde::Serialize;
use uuid::Uuid;

use crate::settings::{self, SettingsStoreError};
use crate::{StoreError, TenantTx};

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// One completed provider call, priced, as [`record`] writes it.
#[derive(Debug, Clone)]
pub struct LedgerCall<'a> {
    pub occurred_at: DateTime<Utc>,
    /// The use case that made the call (`chat`, `patrol`, `auto_fix`, `assistant_session_title`).
    pub surface: &'a str,
    /// `provider:model`.
    pub route: &'a str,
    pub provider: &'a str,
    pub model: &'a str,
    /// The class at the route's configured address.
    pub route_class: RouteClass,
    pub usage: Usage,
    /// What the call cost; `None` when its price is unknown (stored as unknown, never as zero).
    pub cost_usd: Option<Usd>,
    /// The Patrol run or Assistant session the call belongs to.
    pub run_id: Option<&'a str>,
}

fn tokens(n: u64) -> Result<i64, StoreError> {
    i64::try_from(n)
        .map_err(|_| StoreError::Invalid(format!("token count {n} does not fit the ledger")))
}

/// The cache counts of `usage` as the ledger stores them: a provider that reports more cached
/// than prompt tokens gets its counts capped at the prompt (the table requires it), read first.
fn cache_counts(usage: Usage) -> Usage {
    let cached = usage.cached_input_tokens.min(usage.input_tokens);
    Usage {
        cached_input_tokens: cached,
        cache_write_input_tokens: usage
            .cache_write_input_tokens
            .min(usage.input_tokens - cached),
        ..usage
    }
}

/// Records one call for the transaction's tenant; the caller commits. Returns the row id.
pub async fn record(tx: &TenantTx, call: &LedgerCall<'_>) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    let amount = call.cost_usd.map(|usd| usd.to_string());
    let cached = cache_counts(call.usage);
    tx.client()
        .execute(
            "INSERT INTO cost_ledger (id, tenant_id, occurred_at, surface, route, provider, model, \
             route_class, input_tokens, output_tokens, cost_usd, price_known, run_id, \
             cached_input_tokens, cache_write_input_tokens) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::text::numeric, $12, $13, \
             $14, $15)",
            &[
                &id,
                &tx.tenant().as_str(),
                &call.occurred_at,
                &call.surface,
                &call.route,
                &call.provider,
                &call.model,
                &call.route_class.as_str(),
                &tokens(call.usage.input_tokens)?,
                &tokens(call.usage.output_tokens)?,
                &amount,
                &call.cost_usd.is_some(),
                &call.run_id,
                &tokens(cached.cached_input_tokens)?,
                &tokens(cached.cache_write_input_tokens)?,
            ],
        )
        .await?;
    Ok(id)
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

/// Tokens and dollars of a group of ledger rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CostTotals {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The sum over calls whose price was known.
    pub known_cost_usd: Usd,
    /// Calls whose price was unknown; when non-zero the dollar total is unknown and
    /// `known_cost_usd` only a lower bound.
    pub unknown_price_calls: u64,
}

impl CostTotals {
    pub fn add(&mut self, other: &CostTotals) {
        self.calls += other.calls;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.known_cost_usd = self.known_cost_usd.saturating_add(other.known_cost_usd);
        self.unknown_price_calls += other.unknown_price_calls;
    }

    /// The dollar total, `None` when a call's price was unknown (never a silent zero).
    pub fn cost_usd(&self) -> Option<Usd> {
        (self.unknown_price_calls == 0).then_some(self.known_cost_usd)
    }

    pub fn price_known(&self) -> bool {
        self.unknown_price_calls == 0
    }
}

/// Totals of every ledger row of one run (a Patrol run, an Assistant session).
pub async fn run_totals(tx: &TenantTx, run_id: &str) -> Result<CostTotals, StoreError> {
    let row = tx
        .client()
        .query_one(
            "SELECT count(*)::bigint, coalesce(sum(input_tokens), 0)::bigint, \
             coalesce(sum(output_tokens), 0)::bigint, coalesce(sum(cost_usd), 0)::text, \
             count(*) FILTER (WHERE NOT price_known)::bigint \
             FROM cost_ledger WHERE tenant_id = $1 AND run_id = $2",
            &[&tx.tenant().as_str(), &run_id],
        )
        .await?;
    let amount: String = row.try_get(3)?;
    Ok(CostTotals {
        calls: count(row.try_get(0)?),
        input_tokens: count(row.try_get(1)?),
        output_tokens: count(row.try_get(2)?),
        known_cost_usd: amount
            .parse()
            .map_err(|e| StoreError::Invalid(format!("the cost ledger holds {e}")))?,
        unknown_price_calls: count(row.try_get(4)?),
    })
}

/// The provider/model route a call went to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct CostRoute {
    /// `provider:model`.
    pub route: String,
    pub provider: String,
    pub model: String,
    pub route_class: &'static str,
}

/// Ledger rows of one UTC day, one Patrol run (or none), one surface and one route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostLine {
    pub day: NaiveDate,
    pub run_id: Option<String>,
    /// The use case that made the calls (`patrol`, `chat`, ...).
    pub surface: String,
    pub route: CostRoute,
    pub totals: CostTotals,
}

fn route_class(text: &str) -> Result<&'static str, StoreError> {
    RouteClass::parse(text)
        .map(RouteClass::as_str)
        .ok_or_else(|| StoreError::Invalid(format!("the cost ledger holds route class {text:?}")))
}

/// The tenant's ledger over `[from, to)` grouped by UTC day, run, surface and route, ordered
/// by day, then run (calls outside a run first), surface and route.
pub async fn lines(
    tx: &TenantTx,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<CostLine>, StoreError> {
    let rows = tx
        .client()
        .query(
            "SELECT (occurred_at AT TIME ZONE 'UTC')::date AS day, run_id, surface, route, \
             provider, model, route_class, count(*)::bigint, \
             coalesce(sum(input_tokens), 0)::bigint, coalesce(sum(output_tokens), 0)::bigint, \
             coalesce(sum(cost_usd), 0)::text, \
             count(*) FILTER (WHERE NOT price_known)::bigint \
             FROM cost_ledger \
             WHERE tenant_id = $1 AND occurred_at >= $2 AND occurred_at < $3 \
             GROUP BY day, run_id, surface, route, provider, model, route_class \
             ORDER BY day, run_id NULLS FIRST, surface, route, route_class",
            &[&tx.tenant().as_str(), &from, &to],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let class: String = row.try_get(6)?;
            let amount: String = row.try_get(10)?;
            Ok(CostLine {
                day: row.try_get(0)?,
                run_id: row.try_get(1)?,
                surface: row.try_get(2)?,
                route: CostRoute {
                    route: row.try_get(3)?,
                    provider: row.try_get(4)?,
                    model: row.try_get(5)?,
                    route_class: route_class(&class)?,
                },
                totals: CostTotals {
                    calls: count(row.try_get(7)?),
                    input_tokens: count(row.try_get(8)?),
                    output_tokens: count(row.try_get(9)?),
                    known_cost_usd: amount
                        .parse()
                        .map_err(|e| StoreError::Invalid(format!("the cost ledger holds {e}")))?,
                    unknown_price_calls: count(row.try_get(11)?),
                },
            })
        })
        .collect()
}

/// Totals of one route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteCost {
    #[serde(flatten)]
    pub route: CostRoute,
    #[serde(flatten)]
    pub totals: CostTotals,
}

/// Folds lines into per-route totals, ordered by route.
pub fn by_route<'a>(lines: impl IntoIterator<Item = &'a CostLine>) -> Vec<RouteCost> {
    let mut routes: std::collections::BTreeMap<&CostRoute, CostTotals> = Default::default();
    for line in lines {
        routes.entry(&line.route).or_default().add(&line.totals);
    }
    routes
        .into_iter()
        .map(|(route, totals)| RouteCost {
            route: route.clone(),
            totals,
        })
        .collect()
}

/// Per-route totals of the transaction's tenant over `[from, to)`, ordered by route.
pub async fn summary(
    tx: &TenantTx,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<RouteCost>, StoreError> {
    Ok(by_route(&lines(tx, from, to).await?))
}
