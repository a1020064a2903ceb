//! What goes in the cost ledger for one provider call: the call priced by the one price table
//! ([`crate::pricing`]), written in the caller's tenant transaction by the store, which owns the
//! ledger ([`pulse_store::cost_ledger`]: the row, and every sum read back from it).

use chrono::{DateTime, Utc};
use pulse_store::cost_ledger::{self, LedgerCall};
use pulse_store::{StoreError, TenantTx};
use uuid::Uuid;

use super::{Cost, cost_for_class};
use crate::provider::Usage;
use crate::registry::RouteClass;
use crate::route::Route;

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

/// Prices one call and records it in the caller's transaction; the caller commits. Returns the
/// row id and the cost recorded.
pub async fn record(tx: &TenantTx, entry: &LedgerEntry<'_>) -> Result<(Uuid, Cost), StoreError> {
    let cost = entry.cost();
    let route = entry.route.to_string();
    let call = LedgerCall {
        occurred_at: entry.occurred_at,
        surface: entry.surface,
        route: &route,
        provider: entry.route.provider_id(),
        model: entry.route.model(),
        route_class: entry.route_class,
        usage: entry.usage,
        cost_usd: cost.amount(),
        run_id: entry.run_id,
    };
    let id = cost_ledger::record(tx, &call).await?;
    Ok((id, cost))
}
