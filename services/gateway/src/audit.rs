//! `GET /api/audit/verify` (scope `admin`): recomputes the tenant's hash-chained audit log with
//! [`pulse_store::audit::verify`] and answers `{ok, entries, first_broken_seq?, reason?}`.
//!
//! `entries` counts the rows that verified (all of them when `ok`); a broken chain is a normal
//! answer (200 with `ok: false`), not an error: the request succeeded, the chain did not.

use axum::Json;
use axum::extract::State;
use pulse_store::audit::{self, ChainBreak, VerifyReport};
use serde::Serialize;

use crate::auth::{AdminScope, Authorized};
use crate::{ApiError, AppState};

/// The verification report as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct VerifyView {
    pub ok: bool,
    /// Rows verified, in sequence order, before the first broken one (if any).
    pub entries: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_broken_seq: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<ChainBreak>,
}

impl From<VerifyReport> for VerifyView {
    fn from(report: VerifyReport) -> Self {
        Self {
            ok: report.is_intact(),
            entries: report.rows_checked,
            first_broken_seq: report.first_broken.as_ref().map(|b| b.seq),
            reason: report.first_broken.map(|b| b.reason),
        }
    }
}

pub async fn verify(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
) -> Result<Json<VerifyView>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let report = audit::verify(&tx).await?;
    tx.rollback().await?;
    if let Some(broken) = &report.first_broken {
        tracing::warn!(
            tenant = %auth.principal.tenant,
            seq = broken.seq,
            reason = ?broken.reason,
            "audit chain verification found a break"
        );
    }
    Ok(Json(report.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulse_store::audit::BrokenRow;

    #[test]
    fn verify_view_shapes() {
        let intact = VerifyView::from(VerifyReport {
            rows_checked: 12,
            first_broken: None,
        });
        insta::assert_json_snapshot!("audit_verify_intact", intact);
        let broken = VerifyView::from(VerifyReport {
            rows_checked: 2,
            first_broken: Some(BrokenRow {
                seq: 3,
                reason: ChainBreak::RowHashMismatch,
            }),
        });
        assert!(!broken.ok);
        insta::assert_json_snapshot!("audit_verify_broken", broken);
    }
}
