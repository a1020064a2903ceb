//! `GET /api/audit/verify` (scope `admin`): recomputes the tenant's hash-chained audit log with
//! [`pulse_store::audit::verify`] and answers `{ok, entries, first_broken_seq?, reason?}`.
//!
//! `entries` counts the rows that verified (all of them when `ok`); a broken chain is a normal
//! answer (200 with `ok: false`), not an error: the request succeeded, the chain did not.

use axum::Json;
use axum::extract::State;
use axum::routing;
use pulse_api::audit::{ChainBreak, VerifyView};
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_domain::Scope;
use pulse_store::audit::{self, VerifyReport};

use crate::authorized::{AdminScope, Authorized};
use crate::error::ApiError;
use crate::route::{Answer, RouteSpec, schema};
use crate::state::AppState;

/// The verification report as the API shows it.
fn view(report: VerifyReport) -> VerifyView {
    VerifyView {
        ok: report.is_intact(),
        entries: report.rows_checked,
        first_broken_seq: report.first_broken.as_ref().map(|b| b.seq),
        reason: report.first_broken.map(|b| chain_break(b.reason)),
    }
}

fn chain_break(reason: audit::ChainBreak) -> ChainBreak {
    match reason {
        audit::ChainBreak::MissingRow => ChainBreak::MissingRow,
        audit::ChainBreak::PrevHashMismatch => ChainBreak::PrevHashMismatch,
        audit::ChainBreak::RowHashMismatch => ChainBreak::RowHashMismatch,
        audit::ChainBreak::HeadMismatch => ChainBreak::HeadMismatch,
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
    Ok(Json(view(report)))
}

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[RouteSpec {
    method: "GET",
    path: "/api/audit/verify",
    scopes: &[Scope::Admin],
    public: false,
    name: "verify_audit_chain",
    title: "Verify the audit chain",
    description: "Recomputes the tenant's hash-chained audit log; a broken chain is a normal answer (ok: false).",
    category: Category::Audit,
    action_mode: ActionMode::Read,
    approval_policy: ApprovalPolicy::ScopeOnly,
    id: None,
    query: None,
    body: None,
    response: Answer::Json {
        status: 200,
        schema: schema::<pulse_api::audit::VerifyView>,
    },
    errors: &[],
    handler: || routing::get(verify),
}];

#[cfg(test)]
mod tests {
    use super::*;
    use pulse_store::audit::BrokenRow;

    #[test]
    fn verify_view_shapes() {
        let intact = view(VerifyReport {
            rows_checked: 12,
            first_broken: None,
        });
        insta::assert_json_snapshot!("audit_verify_intact", intact);
        let broken = view(VerifyReport {
            rows_checked: 2,
            first_broken: Some(BrokenRow {
                seq: 3,
                reason: audit::ChainBreak::RowHashMismatch,
            }),
        });
        assert!(!broken.ok);
        insta::assert_json_snapshot!("audit_verify_broken", broken);
    }
}
