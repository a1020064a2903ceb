//! The cost ledger: one row per provider call, written in the caller's tenant transaction.

use chrono::{DateTime, Utc};
use pulse_store::{StoreError, TenantTx};
use serde::Serialize;
use uuid::Uuid;

use super::{Cost, ParseUsdError, Spend, Usd, cost_for_class};
use crate::provider::Usage;
use crate::registry::RouteClass;
use crate::route::Route;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("token count {0} does not fit the ledger")]
    TokensOutOfRange(u64),
    #[error("the ledger holds an unreadable amount: {0}")]
    Amount(#[from] ParseUsdError),
    #[error("the ledger holds an unknown route class {0:?}")]
    RouteClass(String),
}

impl From<tokio_postgres::Error> for LedgerError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Store(StoreError::from(e))
    }
}

/// One provider call to record.
#[derive(Debug, Clone)]
pub struct LedgerEntry<'a> {
    pub occurred_at: DateTime<Utc>,
    /// The use case that made the call (`chat`, `patrol`, `auto_fix`, `assistant_session_title`).
    pub surface: &'a str,
    pub route: &'a Route,
    /// The class at the route's configured address (see `ProviderEntry::route_class_at`).
    pub route_class: RouteClass,
    pub usage: Usage,
    pub run_id: Option<&'a str>,
}

impl<'a> LedgerEntry<'a> {
    /// An entry at the route's own class, occurring now.
    pub fn new(surface: &'a str, route: &'a Route, usage: Usage) -> Self {
        Self {
            occurred_at: Utc::now(),
            surface,
            route,
            route_class: route.route_class(),
            usage,
            run_id: None,
        }
    }

    pub fn cost(&self) -> Cost {
        cost_for_class(self.route, self.route_class, self.usage)
    }
}

fn tokens(n: u64) -> Result<i64, LedgerError> {
    i64::try_from(n).map_err(|_| LedgerError::TokensOutOfRange(n))
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

/// Records one call in the caller's transaction; the caller commits. Returns the row id and the
/// cost recorded.
pub async fn record(tx: &TenantTx, entry: &LedgerEntry<'_>) -> Result<(Uuid, Cost), LedgerError> {
    let id = Uuid::now_v7();
    let cost = entry.cost();
    let amount = cost.amount().map(|usd| usd.to_string());
    let route = entry.route.to_string();
    let cached = cache_counts(entry.usage);
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
                &entry.occurred_at,
                &entry.surface,
                &route,
                &entry.route.provider_id(),
                &entry.route.model(),
                &entry.route_class.as_str(),
                &tokens(entry.usage.input_tokens)?,
                &tokens(entry.usage.output_tokens)?,
                &amount,
                &cost.is_known(),
                &entry.run_id,
                &tokens(cached.cached_input_tokens)?,
                &tokens(cached.cache_write_input_tokens)?,
            ],
        )
        .await?;
    Ok((id, cost))
}

/// Tokens and cost of one route over a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteCost {
    pub route: String,
    pub provider: String,
    pub model: String,
    pub route_class: RouteClass,
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The sum over calls whose price was known.
    pub known_cost_usd: Usd,
    /// Calls whose price was unknown; when non-zero, `known_cost_usd` is a lower bound.
    pub unknown_price_calls: u64,
}

/// Per-route totals for the transaction's tenant over `[from, to)`, ordered by route: the
/// store's one ledger fold ([`pulse_store::cost_ledger::summary`]), with the route class typed.
pub async fn summary(
    tx: &TenantTx,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<RouteCost>, LedgerError> {
    pulse_store::cost_ledger::summary(tx, from, to)
        .await?
        .into_iter()
        .map(|r| {
            Ok(RouteCost {
                route_class: RouteClass::parse(r.route.route_class)
                    .ok_or_else(|| LedgerError::RouteClass(r.route.route_class.to_owned()))?,
                route: r.route.route,
                provider: r.route.provider,
                model: r.route.model,
                calls: r.totals.calls,
                input_tokens: r.totals.input_tokens,
                output_tokens: r.totals.output_tokens,
                known_cost_usd: r.totals.known_cost_usd,
                unknown_price_calls: r.totals.unknown_price_calls,
            })
        })
        .collect()
}

/// The spend a dollar budget checks, summed from a summary.
pub fn spend(routes: &[RouteCost]) -> Spend {
    routes.iter().fold(Spend::default(), |acc, r| Spend {
        known: acc.known.saturating_add(r.known_cost_usd),
        unknown_price_calls: acc.unknown_price_calls + r.unknown_price_calls,
    })
}
