//! The per-resource remediation lock: `never_auto_remediate` refuses every action on the
//! resource at execution, approved or not (the broker reads it right before running).
//!
//! - `GET /api/resources/{id}/remediation-lock` (`monitoring:read`): the lock state; a resource
//!   never locked is unlocked.
//! - `PUT /api/resources/{id}/remediation-lock` (`actions:approve`):
//!   `{"never_auto_remediate": bool}`; the change is audited as `resource.remediation_lock` with
//!   the caller as actor.
//!
//! The id accepts what the other resource routes accept (canonical id, source id, name or alias);
//! the lock is kept on the canonical id, which is what plans name. A resource of another tenant
//! answers `404 not_found`, like an unknown one.
//!
//! The lock is the `never_auto_remediate` signal of the resource's operator state
//! (`pulse_store::operator_state`); this route reads and writes only that signal.

use axum::Json;
use axum::extract::State;
use axum::routing;
use pulse_api::actions::{LockBody, LockView};
use pulse_api::constraints::ResourceRef;
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::action::LockState;
use pulse_store::actions;

use crate::actions::{ApproveScope, actor};
use crate::authorized::{Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::extract::ApiPath;
use crate::resources::resolve;
use crate::route::{Answer, Body, JSON_BODY, RESOURCE_REF, RouteSpec, concat, schema};
use crate::state::AppState;

pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiPath(reference): ApiPath<ResourceRef>,
) -> Result<Json<LockView>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resource = resolve(&tx, &reference).await?;
    let resource_id = resource.id.as_str().to_owned();
    let lock = actions::remediation_lock(&tx, &resource_id).await?;
    tx.rollback().await?;
    Ok(Json(LockView {
        resource_id,
        never_auto_remediate: lock == LockState::Locked,
    }))
}

pub async fn put(
    State(state): State<AppState>,
    auth: Authorized<ApproveScope>,
    ApiPath(reference): ApiPath<ResourceRef>,
    ApiJson(body, _): ApiJson<LockBody>,
) -> Result<Json<LockView>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resource = resolve(&tx, &reference).await?;
    let resource_id = resource.id.as_str().to_owned();
    actions::set_remediation_lock(
        &tx,
        &resource_id,
        body.never_auto_remediate,
        &actor(&auth.principal),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(
        resource_id,
        never_auto_remediate = body.never_auto_remediate,
        actor = %actor(&auth.principal),
        "remediation lock set"
    );
    Ok(Json(LockView {
        resource_id,
        never_auto_remediate: body.never_auto_remediate,
    }))
}

const PUT_ERRORS: [ErrorCode; 6] = concat(RESOURCE_REF, JSON_BODY);

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "GET",
        path: "/api/resources/{id}/remediation-lock",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_remediation_lock",
        title: "Get a remediation lock",
        description: "Whether a resource is marked never_auto_remediate.",
        category: Category::Actions,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::actions::LockView>,
        },
        errors: &RESOURCE_REF,
        handler: || routing::get(get),
    },
    RouteSpec {
        method: "PUT",
        path: "/api/resources/{id}/remediation-lock",
        scopes: &[Scope::ActionsApprove],
        public: false,
        name: "set_remediation_lock",
        title: "Set a remediation lock",
        description: "Marks a resource never_auto_remediate (no action runs on it, approved or not) or clears the mark; audited.",
        category: Category::Actions,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::actions::LockBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::actions::LockView>,
        },
        errors: &PUT_ERRORS,
        handler: || routing::put(put),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_body_is_strict_and_the_view_has_its_shape() {
        let body: LockBody = serde_json::from_str(r#"{"never_auto_remediate": true}"#).unwrap();
        assert!(body.never_auto_remediate);
        for bad in [
            r#"{}"#,
            r#"{"never_auto_remediate": "yes"}"#,
            r#"{"never_auto_remediate": true, "set_by": "user:x"}"#,
        ] {
            assert!(serde_json::from_str::<LockBody>(bad).is_err(), "{bad}");
        }
        let view = LockView {
            resource_id: "service:h1:web".to_owned(),
            never_auto_remediate: true,
        };
        insta::assert_json_snapshot!("remediation_lock_view", view);
    }
}
