//! Dollar budgets. They fail closed: a spend that cannot be priced is not assumed to fit.

use serde::Serialize;

use super::{Cost, Usd, cost_for_class};
use crate::provider::Usage;
use crate::registry::RouteClass;
use crate::route::Route;

/// A dollar limit over some window (the caller decides the window and sums the ledger for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DollarBudget {
    pub limit: Usd,
}

/// What the ledger says was spent in the budget's window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spend {
    /// The sum of the calls whose price was known.
    pub known: Usd,
    /// Metered calls whose price was unknown: their amount could be anything.
    pub unknown_price_calls: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum BudgetDecision {
    Allowed,
    Refused { reason: RefusalReason },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// The call, or spend already in the window, has no known price, so the budget cannot be
    /// shown to hold.
    UnknownPrice,
    /// The known spend plus this call would pass the limit.
    Exceeded,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownPrice => "unknown_price",
            Self::Exceeded => "exceeded",
        }
    }

    /// One line for the operator.
    pub fn summary(self) -> &'static str {
        match self {
            Self::UnknownPrice => {
                "the model has no known price, so the dollar budget cannot be checked"
            }
            Self::Exceeded => "the dollar budget for this period is spent",
        }
    }

    pub fn recommendation(self) -> &'static str {
        match self {
            Self::UnknownPrice => {
                "choose a model with a known price, a local model, or remove the dollar budget"
            }
            Self::Exceeded => "raise the budget or wait for the next period",
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
        if spent.unknown_price_calls > 0 {
            return BudgetDecision::Refused {
                reason: RefusalReason::UnknownPrice,
            };
        }
        if spent.known.saturating_add(next) > self.limit {
            return BudgetDecision::Refused {
                reason: RefusalReason::Exceeded,
            };
        }
        BudgetDecision::Allowed
    }
}
