//! The tenant spend budgets before each provider call of a Watch run or an investigation.
//!
//! Right before every provider call the loop asks its usage sink whether the call may start
//! ([`crate::agent_loop::UsageSink::admit_call`]); the cost-ledger sink answers with
//! [`TenantBudgetCheck`]: the tenant's stored budgets and the ledger's sums for the current UTC
//! day and month, read in one tenant transaction, then the pure
//! [`pulse_domain::patrol::budget::decide`] with the next call priced by [`DollarBudget`]. Every
//! call reads the ledger afresh, so concurrent runs and investigations of one tenant see each
//! other's recorded spend; the call that crosses a limit finishes, the next one does not start.
//! Preflights are not checked: they do not go through the loop's ledger sink.

use chrono::{DateTime, Utc};
use pulse_domain::TenantId;
use pulse_domain::patrol::budget::{self, BudgetExceeded, TenantBudgets, TenantSpend};
use pulse_store::{Store, StoreError, cost_ledger};

use super::DollarBudget;
use crate::agent_loop::usage::BudgetCheckError;
use crate::provider::Usage;
use crate::registry::RouteClass;
use crate::route::Route;

/// The next call, for pricing: the smallest call there is. A dollar budget has room while the
/// known spend plus one input token stays within it (what a call will use is known only after).
const NEXT_CALL: Usage = Usage {
    input_tokens: 1,
    output_tokens: 0,
    cached_input_tokens: 0,
    cache_write_input_tokens: 0,
};

/// Whether a call on `route` (class `class`) may start, by the budgets and the period spend.
pub fn decide_call(
    budgets: &TenantBudgets,
    spend: &TenantSpend,
    route: &Route,
    class: RouteClass,
    now: DateTime<Utc>,
) -> Result<(), BudgetExceeded> {
    let price = |limit, spent| {
        DollarBudget::new(limit)
            .check(route, class, spent, NEXT_CALL)
            .into_result()
    };
    budget::decide(budgets, spend, now, Some(&price))
}

/// Reads a tenant's budgets and spend and decides one call.
#[derive(Clone)]
pub struct TenantBudgetCheck {
    store: Store,
    tenant: TenantId,
}

impl std::fmt::Debug for TenantBudgetCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantBudgetCheck")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl TenantBudgetCheck {
    pub fn new(store: Store, tenant: TenantId) -> Self {
        Self { store, tenant }
    }

    /// Decides a call starting at `now`.
    pub async fn admit(
        &self,
        route: &Route,
        class: RouteClass,
        now: DateTime<Utc>,
    ) -> Result<(), BudgetCheckError> {
        let unchecked = |e: StoreError| BudgetCheckError::Unchecked(e.to_string());
        let tx = self
            .store
            .tenant_tx(&self.tenant)
            .await
            .map_err(unchecked)?;
        let stored = cost_ledger::stored_budgets(&tx).await.map_err(unchecked)?;
        let budgets = TenantBudgets::from_settings(&stored)
            .map_err(|e| BudgetCheckError::Unchecked(e.to_string()))?;
        // The platform operator's daily quotas apply on top of the tenant's own budgets.
        let quotas = pulse_store::quotas::get(&tx).await.map_err(unchecked)?;
        let budgets = budgets.within_quotas(&quotas);
        if budgets.is_unlimited() {
            return Ok(());
        }
        let spend = cost_ledger::tenant_spend(&tx, now)
            .await
            .map_err(unchecked)?;
        tx.rollback().await.map_err(unchecked)?;
        decide_call(&budgets, &spend, route, class, now).map_err(|refused| {
            tracing::info!(
                tenant = %self.tenant,
                budget = refused.kind.as_str(),
                reason = refused.reason.as_str(),
                resets_at = %refused.resets_at,
                "tenant spend budget refuses the next provider call"
            );
            BudgetCheckError::Exceeded(refused)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use pulse_domain::patrol::budget::{BudgetKind, PeriodSpend, RefusalReason, Spend};

    fn route(text: &str) -> Route {
        Route::parse(text).expect("valid route")
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 21, 0, 0).unwrap()
    }

    fn daily_usd(limit: &str) -> TenantBudgets {
        TenantBudgets {
            daily_usd: Some(limit.parse().unwrap()),
            ..Default::default()
        }
    }

    fn spent(known: &str) -> TenantSpend {
        let period = PeriodSpend {
            tokens: 0,
            dollars: Spend {
                known: known.parse().unwrap(),
                unknown_price_calls: 0,
            },
        };
        TenantSpend {
            day: period,
            month: period,
        }
    }

    #[test]
    fn a_route_without_a_price_fails_a_dollar_budget_closed() {
        let unpriced = route("openai:gpt-5-imaginary");
        let refused = decide_call(
            &daily_usd("100"),
            &spent("0"),
            &unpriced,
            RouteClass::MeteredApi,
            now(),
        )
        .unwrap_err();
        assert_eq!(refused.kind, BudgetKind::DailyUsd);
        assert_eq!(refused.reason, RefusalReason::UnknownPrice);
        // The same route under a token budget only is not a dollar question.
        let tokens = TenantBudgets {
            daily_tokens: Some(10),
            ..Default::default()
        };
        assert!(
            decide_call(
                &tokens,
                &spent("0"),
                &unpriced,
                RouteClass::MeteredApi,
                now()
            )
            .is_ok()
        );
    }

    #[test]
    fn a_priced_route_runs_while_the_dollar_budget_has_room() {
        let priced = route("openai:gpt-4o-mini");
        let class = RouteClass::MeteredApi;
        assert!(decide_call(&daily_usd("1"), &spent("0.99"), &priced, class, now()).is_ok());
        let refused = decide_call(&daily_usd("1"), &spent("1"), &priced, class, now()).unwrap_err();
        assert_eq!(refused.reason, RefusalReason::Exceeded);
        assert_eq!(
            refused.resets_at,
            Utc.with_ymd_and_hms(2026, 12, 2, 0, 0, 0).unwrap()
        );
    }

    #[test]
    fn a_local_model_needs_no_price_but_a_spent_budget_still_stops_it() {
        let local = route("ollama:llama3.2");
        let class = RouteClass::LocalModelServer;
        assert!(decide_call(&daily_usd("1"), &spent("0.5"), &local, class, now()).is_ok());
        assert!(decide_call(&daily_usd("1"), &spent("1"), &local, class, now()).is_err());
    }
}
