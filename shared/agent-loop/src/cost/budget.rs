//! Dollar budgets. They fail closed: a spend that cannot be priced is not assumed to fit.
//!
//! The comparison over a window's spend is the domain's one dollar rule
//! ([`pulse_domain::patrol::budget::dollar_fits`], which the readiness gate applies too); this
//! type prices the call first, by the one price table ([`crate::pricing`]).

use serde::Serialize;

use super::{Cost, Usd, cost_for_class};
use crate::provider::Usage;
use crate::registry::RouteClass;
use crate::route::Route;

pub use pulse_domain::patrol::budget::{RefusalReason, Spend, dollar_fits};

/// A dollar limit over some window (the caller decides the window and sums the ledger for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DollarBudget {
    pub limit: Usd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum BudgetDecision {
    Allowed,
    Refused { reason: RefusalReason },
}

impl BudgetDecision {
    pub fn into_result(self) -> Result<(), RefusalReason> {
        match self {
            Self::Allowed => Ok(()),
            Self::Refused { reason } => Err(reason),
        }
    }
}

impl DollarBudget {
    pub fn new(limit: Usd) -> Self {
        Self { limit }
    }

    /// Whether a call of `projected` usage on `route` (class `class`) fits after `spent`.
    /// Calls that are not metered always fit; metered calls must be priceable, and so must
    /// everything already spent in the window.
    pub fn check(
        &self,
        route: &Route,
        class: RouteClass,
        spent: Spend,
        projected: Usage,
    ) -> BudgetDecision {
        let next = match cost_for_class(route, class, projected) {
            Cost::NotMetered => return BudgetDecision::Allowed,
            Cost::Unknown => {
                return BudgetDecision::Refused {
                    reason: RefusalReason::UnknownPrice,
                };
            }
            Cost::Known(usd) => usd,
        };
        match dollar_fits(self.limit, spent, next) {
            Ok(()) => BudgetDecision::Allowed,
            Err(reason) => BudgetDecision::Refused { reason },
        }
    }
}
