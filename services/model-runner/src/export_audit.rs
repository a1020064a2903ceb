//! The export audit: one hash-chained audit record per provider-bound request, written right
//! before transport. It holds where the request went and what the sanitizer redacted, as counts
//! per kind: never a redacted value, never the prompt.

use pulse_domain::TenantId;
use pulse_store::Store;
use pulse_store::audit::{self, AuditEntry};
use serde_json::{Map, Value, json};

use pulse_agent_loop::agent_loop::{BoxFuture, ExportAudit, ProviderExport, RecordError};

/// The audit kind of a provider-bound request.
pub const EXPORT_KIND: &str = "model.export";
/// Who exports: this service.
pub const EXPORT_ACTOR: &str = "service:model-runner";

/// Appends a `model.export` record to the tenant's audit chain for every request of a run.
#[derive(Clone)]
pub struct AuditedExports {
    store: Store,
    tenant: TenantId,
    run_id: Option<String>,
}

impl std::fmt::Debug for AuditedExports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditedExports")
            .field("tenant", &self.tenant)
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl AuditedExports {
    pub fn new(store: Store, tenant: TenantId) -> Self {
        Self {
            store,
            tenant,
            run_id: None,
        }
    }

    pub fn with_run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }
}

/// The audit entry of one export: destination and counts only.
pub fn export_entry(export: &ProviderExport<'_>, run_id: Option<&str>) -> AuditEntry {
    let report = export.report;
    let redactions: Map<String, Value> = report
        .counts
        .iter()
        .map(|(kind, n)| (kind.as_str().to_owned(), json!(n)))
        .collect();
    let mut payload = json!({
        "destination": report.route,
        "boundary": report.boundary,
        "local_only_withheld": report.local_only_withheld,
        "redactions": redactions,
        "total": report.total,
        "call": export.call,
    });
    if let Some(run_id) = run_id {
        payload["run_id"] = json!(run_id);
    }
    AuditEntry {
        actor: EXPORT_ACTOR.to_owned(),
        kind: EXPORT_KIND.to_owned(),
        subject: report.route.clone(),
        payload,
    }
}

impl ExportAudit for AuditedExports {
    fn exported<'a>(
        &'a self,
        export: &'a ProviderExport<'a>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(async move {
            let failed =
                |e: &dyn std::fmt::Display| RecordError::new(format!("export audit failed: {e}"));
            let entry = export_entry(export, self.run_id.as_deref());
            let tx = self
                .store
                .tenant_tx(&self.tenant)
                .await
                .map_err(|e| failed(&e))?;
            audit::append(&tx, &entry).await.map_err(|e| failed(&e))?;
            tx.commit().await.map_err(|e| failed(&e))
        })
    }
}
