//! The loop's usage sink over the cost ledger: one ledger row per completed provider call, in its
//! own tenant transaction, and the tenant spend budgets checked from that ledger before each call
//! ([`super::tenant_budget`]).

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_store::Store;

use super::ledger::{LedgerEntry, record};
use super::tenant_budget::TenantBudgetCheck;
use crate::agent_loop::usage::BudgetCheckError;
use crate::agent_loop::{BoxFuture, CallOutcome, ProviderCallUsage, RecordError, UsageSink};
use crate::registry::RouteClass;
use crate::route::Route;

/// Writes each completed call of a run to the tenant's cost ledger.
///
/// A failed call gets no row: the provider reported no usage for it, and a row of zero tokens
/// would be a made-up number (and, on a metered route without a price, an unknown cost).
#[derive(Clone)]
pub struct LedgerUsageSink {
    store: Store,
    tenant: TenantId,
    surface: String,
    run_id: Option<String>,
}

impl std::fmt::Debug for LedgerUsageSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerUsageSink")
            .field("tenant", &self.tenant)
            .field("surface", &self.surface)
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl LedgerUsageSink {
    /// `surface` is the use case making the calls (`chat`, `patrol`, ...).
    pub fn new(store: Store, tenant: TenantId, surface: impl Into<String>) -> Self {
        Self {
            store,
            tenant,
            surface: surface.into(),
            run_id: None,
        }
    }

    pub fn with_run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }
}

impl UsageSink for LedgerUsageSink {
    /// The tenant spend budgets, from the ledger this sink writes.
    fn admit_call<'a>(
        &'a self,
        route: &'a Route,
        route_class: RouteClass,
    ) -> BoxFuture<'a, Result<(), BudgetCheckError>> {
        Box::pin(async move {
            TenantBudgetCheck::new(self.store.clone(), self.tenant.clone())
                .admit(route, route_class, Utc::now())
                .await
        })
    }

    fn record<'a>(
        &'a self,
        call: &'a ProviderCallUsage<'a>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(async move {
            crate::metrics::ModelMetrics::shared().call(&self.surface, call);
            if let CallOutcome::Failed(cause) = call.outcome {
                tracing::debug!(route = %call.route, %cause, "failed provider call has no usage to record");
                return Ok(());
            }
            let failed = |e: &dyn std::fmt::Display| {
                RecordError::new(format!("cost ledger write failed: {e}"))
            };
            let tx = self
                .store
                .tenant_tx(&self.tenant)
                .await
                .map_err(|e| failed(&e))?;
            let entry = LedgerEntry {
                occurred_at: Utc::now(),
                surface: &self.surface,
                route: call.route,
                route_class: call.route_class,
                usage: call.usage,
                run_id: self.run_id.as_deref(),
            };
            record(&tx, &entry).await.map_err(|e| failed(&e))?;
            tx.commit().await.map_err(|e| failed(&e))
        })
    }
}
