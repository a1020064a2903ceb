//! The loop's usage sink over the cost ledger: one ledger row per completed provider call, in its
//! own tenant transaction, and the tenant spend budgets checked from that ledger before each call
//! ([`super::tenant_budget`]). Every call it is told of, failed ones included, is counted first by
//! the service's [`CallMetrics`] (the model-runner's `/metrics` series), which come in as a
//! parameter: this crate does not know the service's registry.

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_store::Store;

use super::ledger::{LedgerEntry, record};
use super::tenant_budget::TenantBudgetCheck;
use crate::agent_loop::usage::BudgetCheckError;
use crate::agent_loop::{BoxFuture, CallOutcome, ProviderCallUsage, RecordError, UsageSink};
use crate::registry::RouteClass;
use crate::route::Route;

/// Counts provider calls for a service's metrics. The ledger sink tells it every call, before the
/// ledger write, so a call whose row could not be written is still counted.
pub trait CallMetrics: Send + Sync {
    /// `surface` is the sink's use case (`chat`, `patrol`, ...).
    fn call(&self, surface: &str, call: &ProviderCallUsage<'_>);

    /// Counts `count` tool calls of `surface` the model wrote as text and the loop recovered.
    fn tool_calls_recovered(
        &self,
        _surface: &str,
        _route: &Route,
        _route_class: RouteClass,
        _count: u32,
    ) {
    }
}

/// Counts nothing (tests of the ledger itself, and tools that keep no metrics).
#[derive(Debug, Clone, Copy, Default)]
pub struct CallsNotCounted;

impl CallMetrics for CallsNotCounted {
    fn call(&self, _surface: &str, _call: &ProviderCallUsage<'_>) {}
}

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
    metrics: &'static dyn CallMetrics,
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
    /// `surface` is the use case making the calls (`chat`, `patrol`, ...); `metrics` counts every
    /// call (the process's series, hence `'static`).
    pub fn new(
        store: Store,
        tenant: TenantId,
        surface: impl Into<String>,
        metrics: &'static dyn CallMetrics,
    ) -> Self {
        Self {
            store,
            tenant,
            surface: surface.into(),
            run_id: None,
            metrics,
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

    fn tool_calls_recovered(&self, route: &Route, route_class: RouteClass, count: u32) {
        self.metrics
            .tool_calls_recovered(&self.surface, route, route_class, count);
    }

    fn record<'a>(
        &'a self,
        call: &'a ProviderCallUsage<'a>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(async move {
            self.metrics.call(&self.surface, call);
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
