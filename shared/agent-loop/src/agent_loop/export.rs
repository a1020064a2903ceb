//! The export hook: called with the sanitizer's report for every provider-bound request, after
//! the sanitizer ran and before the request goes out. The service running the loop records it
//! in its audit chain (the model-runner's `export_audit::AuditedExports`).

use pulse_redaction::RedactionReport;

use super::{BoxFuture, RecordError};

/// One provider-bound request, as the audit may see it: where it goes and what was redacted
/// (counts per kind, never a value, never the prompt).
#[derive(Debug, Clone, Copy)]
pub struct ProviderExport<'a> {
    /// Position of the provider call in the run, from 1.
    pub call: u32,
    pub report: &'a RedactionReport,
}

/// Told about every request right before transport. An error stops the run before the request
/// is sent: an export that could not be recorded does not happen.
pub trait ExportAudit: Send + Sync {
    fn exported<'a>(
        &'a self,
        export: &'a ProviderExport<'a>,
    ) -> BoxFuture<'a, Result<(), RecordError>>;
}

/// Records nothing (benchmarks, and tests of other behaviour).
#[derive(Debug, Clone, Copy, Default)]
pub struct ExportsNotAudited;

impl ExportAudit for ExportsNotAudited {
    fn exported<'a>(
        &'a self,
        _export: &'a ProviderExport<'a>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(async { Ok(()) })
    }
}
