//! What model calls cost: exact prices, the per-call cost, dollar budgets and the ledger.
//!
//! Three answers, never blurred: a known dollar amount, an unknown one (a metered model with no
//! exact price row), or not metered (a local model server or a plan allowance, where zero is
//! true). An unknown price is never reported as zero.

pub mod budget;
pub mod ledger;
pub mod pricing;
pub mod tenant_budget;
pub mod usage_ledger;

use serde::Serialize;

use crate::provider::Usage;
use crate::registry::RouteClass;
use crate::route::Route;

pub use budget::{BudgetDecision, DollarBudget, RefusalReason, Spend};
pub use ledger::{LedgerEntry, record};
pub use tenant_budget::TenantBudgetCheck;
pub use usage_ledger::LedgerUsageSink;
// Dollar amounts and the period spend are domain values: the readiness gate reads them too.
pub use pulse_domain::usd::{ParseUsdError, Usd};

/// What one call cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "usd", rename_all = "snake_case")]
pub enum Cost {
    /// Priced from an exact row.
    Known(Usd),
    /// Metered, but no exact price row for this model: the amount is not known.
    Unknown,
    /// Not billed per token (local model server, plan allowance).
    NotMetered,
}

impl Cost {
    /// The amount to record, `None` when it is not known. Not metered is a true zero.
    pub fn amount(self) -> Option<Usd> {
        match self {
            Self::Known(usd) => Some(usd),
            Self::NotMetered => Some(Usd::ZERO),
            Self::Unknown => None,
        }
    }

    pub fn is_known(self) -> bool {
        !matches!(self, Self::Unknown)
    }
}

/// The cost of `usage` on `route`, at the route's own class.
pub fn cost_for(route: &Route, usage: Usage) -> Cost {
    cost_for_class(route, route.route_class(), usage)
}

/// The cost of `usage` on `route` when the class was decided by its configured address (a Z.ai
/// base URL on the coding path is a plan allowance).
pub fn cost_for_class(route: &Route, class: RouteClass, usage: Usage) -> Cost {
    if !class.is_metered() {
        return Cost::NotMetered;
    }
    match pricing::price(route.provider_id(), route.model()) {
        Some(row) => Cost::Known(row.cost(usage)),
        None => Cost::Unknown,
    }
}
