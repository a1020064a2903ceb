//! What model calls cost: exact prices, the per-call cost, dollar budgets and the ledger.
//!
//! Three answers, never blurred: a known dollar amount, an unknown one (a metered model with no
//! exact price row), or not metered (a local model server or a plan allowance, where zero is
//! true). An unknown price is never reported as zero.

pub mod budget;
pub mod ledger;
pub mod tenant_budget;
pub mod usage_ledger;

// The cost of one call is priced by the table in `crate::pricing`, which the metrics read too.
pub use crate::pricing::{Cost, cost_for, cost_for_class};
pub use budget::{BudgetDecision, DollarBudget, RefusalReason, Spend};
pub use ledger::{LedgerEntry, record};
pub use tenant_budget::TenantBudgetCheck;
pub use usage_ledger::{CallMetrics, CallsNotCounted, LedgerUsageSink};
// Dollar amounts and the period spend are domain values: the readiness gate reads them too.
pub use pulse_domain::usd::{ParseUsdError, Usd};
