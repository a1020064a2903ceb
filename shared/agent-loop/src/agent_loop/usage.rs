//! What the loop reports of every provider call it makes: the route and its class, the tokens
//! the provider reported, and how the call ended. The cost ledger records them
//! ([`crate::cost::LedgerUsageSink`]).

use pulse_domain::patrol::budget::BudgetExceeded;
use serde::Serialize;

use super::{BoxFuture, RecordError};
use crate::provider::{FailureCause, Usage};
use crate::registry::RouteClass;
use crate::route::Route;

/// Why a call was not admitted (the tenant spend budgets, [`crate::cost::tenant_budget`]).
#[derive(Debug, thiserror::Error)]
pub enum BudgetCheckError {
    /// A budget is used up, or cannot be shown to hold (unknown price).
    #[error(transparent)]
    Exceeded(#[from] BudgetExceeded),
    /// The budgets or the ledger could not be read; the call is not made.
    #[error("the spend budgets could not be checked: {0}")]
    Unchecked(String),
}

/// How one provider call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "cause", rename_all = "snake_case")]
pub enum CallOutcome {
    /// The provider answered with a model turn; its usage is what the provider reported.
    Completed,
    /// The call failed; the provider reported no usage for it.
    Failed(FailureCause),
}

/// One provider call of a run (same-route retries included in the one call).
#[derive(Debug, Clone, Copy)]
pub struct ProviderCallUsage<'a> {
    pub route: &'a Route,
    pub route_class: RouteClass,
    /// Position of the call in the run, from 1.
    pub call: u32,
    pub usage: Usage,
    pub outcome: CallOutcome,
}

/// Told about every provider call, once, right after it ends. An error stops the run: spend
/// that was not recorded could not be checked against a budget.
pub trait UsageSink: Send + Sync {
    fn record<'a>(
        &'a self,
        call: &'a ProviderCallUsage<'a>,
    ) -> BoxFuture<'a, Result<(), RecordError>>;

    /// Asked right before each provider call whether it may start (the tenant spend budgets,
    /// [`crate::cost::tenant_budget`]); an error stops the run before the call. Admits every
    /// call unless the sink checks budgets.
    fn admit_call<'a>(
        &'a self,
        _route: &'a Route,
        _route_class: RouteClass,
    ) -> BoxFuture<'a, Result<(), BudgetCheckError>> {
        Box::pin(async { Ok(()) })
    }

    /// Told how many calls of one turn the loop recovered from the model's text, so the route's
    /// weakness is counted where its calls are. Counts nothing unless the sink keeps metrics.
    fn tool_calls_recovered(&self, _route: &Route, _route_class: RouteClass, _count: u32) {}
}

/// Records nothing (benchmarks, and runs whose cost is accounted elsewhere).
#[derive(Debug, Clone, Copy, Default)]
pub struct UsageNotRecorded;

impl UsageSink for UsageNotRecorded {
    fn record<'a>(
        &'a self,
        _call: &'a ProviderCallUsage<'a>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(async { Ok(()) })
    }
}
