//! Operator state of a resource: what the operator has told Pulse about it.
//!
//! - `GET /api/resources/{id}/operator-state` (`monitoring:read`): the state; a resource never
//!   set has every signal unset.
//! - `PUT /api/resources/{id}/operator-state` (`actions:approve`, as the remediation lock):
//!   replaces the whole state with
//!   `{maintenance_window?: {starts_at?, ends_at}, intentionally_offline, never_auto_remediate,
//!   criticality?, note?}`. When the new state silences the resource now (an active maintenance
//!   window, or intentionally offline), its open findings are auto-dismissed with reason
//!   `expected_behavior` in the same transaction, each with a `dismissed` lifecycle event
//!   naming the `operator_state_cause`; the answer lists them in `dismissed_finding_ids`.
//! - `DELETE /api/resources/{id}/operator-state` (`actions:approve`): clears every signal.
//!
//! `never_auto_remediate` is the same stored fact as the remediation lock
//! (`/api/resources/{id}/remediation-lock`), which the action broker checks on every dispatch.
//! Findings dismissed by operator state wake when re-detected after the state lifted. The id
//! accepts what the other resource routes accept; state is kept on the canonical id. A resource
//! of another tenant answers `404 not_found`, like an unknown one.

use axum::Json;
use axum::extract::State;
use axum::routing;
use chrono::{DateTime, Utc};
use pulse_api::constraints::{Note, ResourceRef};
use pulse_api::operator_state::{OperatorStateBody, OperatorStateView};
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::finding::operator_state::{
    MAX_OPERATOR_NOTE_CHARS, MaintenanceWindow, OperatorStateProjection,
};
use pulse_store::findings::{self, FindingsError};
use pulse_store::operator_state::{self as store, OperatorState, OperatorStateInput};

use crate::actions::{ApproveScope, actor};
use crate::authorized::{Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::extract::ApiPath;
use crate::resources::resolve;
use crate::route::{Answer, Body, RouteSpec, schema};
use crate::state::AppState;

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
}

/// The state to store, or why the body is refused.
pub(crate) fn validate(
    body: OperatorStateBody,
    now: DateTime<Utc>,
) -> Result<OperatorStateInput, ApiError> {
    let maintenance_window = body
        .maintenance_window
        .map(|w| {
            let window = MaintenanceWindow::new(w.starts_at, w.ends_at)
                .map_err(|e| invalid(e.to_string()))?;
            if window.ends_at <= now {
                return Err(invalid(
                    "maintenance_window.ends_at is in the past; a window must end later \
                         than now (DELETE the state to end maintenance early)",
                ));
            }
            Ok(window)
        })
        .transpose()?;
    let note = body.note.unwrap_or_default();
    Note::<MAX_OPERATOR_NOTE_CHARS>::check(&note).map_err(|e| invalid(e.message("note")))?;
    Ok(OperatorStateInput {
        projection: OperatorStateProjection {
            maintenance_window,
            intentionally_offline: body.intentionally_offline,
            never_auto_remediate: body.never_auto_remediate,
            criticality: body.criticality,
        },
        note,
    })
}

/// The state of `resource_id` as the API shows it at `now`.
fn view(
    resource_id: String,
    stored: Option<OperatorState>,
    now: DateTime<Utc>,
) -> OperatorStateView {
    let (projection, note, set_by, set_at) = match stored {
        Some(s) => (s.projection, s.note, Some(s.set_by), Some(s.set_at)),
        None => (
            OperatorStateProjection::default(),
            String::new(),
            None,
            None,
        ),
    };
    OperatorStateView {
        resource_id,
        maintenance_window: projection.maintenance_window,
        maintenance_active: projection
            .maintenance_window
            .is_some_and(|w| w.is_active(now)),
        intentionally_offline: projection.intentionally_offline,
        never_auto_remediate: projection.never_auto_remediate,
        criticality: projection.criticality,
        note,
        suppression_cause: projection.suppression_cause(now).map(Into::into),
        set_by,
        set_at,
        dismissed_finding_ids: None,
    }
}

fn findings_error(error: FindingsError) -> ApiError {
    match error {
        FindingsError::Store(e) => e.into(),
        FindingsError::Contended(_) | FindingsError::Conflict { .. } => ApiError::new(
            ErrorCode::Conflict,
            "a finding of the resource kept changing concurrently; send the request again",
        ),
        other => {
            tracing::error!(error = %other, "dismissing findings under operator state failed");
            ApiError::new(
                ErrorCode::InternalError,
                "the operator state could not be applied",
            )
        }
    }
}

pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiPath(reference): ApiPath<ResourceRef>,
) -> Result<Json<OperatorStateView>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resource = resolve(&tx, &reference).await?;
    let resource_id = resource.id.as_str().to_owned();
    let stored = store::get(&tx, &resource_id).await?;
    tx.rollback().await?;
    Ok(Json(view(resource_id, stored, Utc::now())))
}

pub async fn put(
    State(state): State<AppState>,
    auth: Authorized<ApproveScope>,
    ApiPath(reference): ApiPath<ResourceRef>,
    ApiJson(body, _): ApiJson<OperatorStateBody>,
) -> Result<Json<OperatorStateView>, ApiError> {
    let now = Utc::now();
    let input = validate(body, now)?;
    let actor = actor(&auth.principal);
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resource = resolve(&tx, &reference).await?;
    let resource_id = resource.id.as_str().to_owned();
    let stored = store::put(&tx, &resource_id, &input, &actor).await?;
    let dismissed = match stored.projection.suppression_cause(now) {
        Some(cause) => findings::apply_operator_state(&tx, &resource_id, cause, now)
            .await
            .map_err(findings_error)?,
        None => Vec::new(),
    };
    tx.commit().await?;
    tracing::info!(
        resource_id,
        actor,
        dismissed = dismissed.len(),
        "operator state set"
    );
    let mut view = view(resource_id, Some(stored), now);
    view.dismissed_finding_ids = Some(dismissed);
    Ok(Json(view))
}

pub async fn delete(
    State(state): State<AppState>,
    auth: Authorized<ApproveScope>,
    ApiPath(reference): ApiPath<ResourceRef>,
) -> Result<Json<OperatorStateView>, ApiError> {
    let actor = actor(&auth.principal);
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resource = resolve(&tx, &reference).await?;
    let resource_id = resource.id.as_str().to_owned();
    let cleared = store::clear(&tx, &resource_id, &actor).await?;
    tx.commit().await?;
    tracing::info!(resource_id, actor, cleared, "operator state cleared");
    Ok(Json(view(resource_id, None, Utc::now())))
}

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "GET",
        path: "/api/resources/{id}/operator-state",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_operator_state",
        title: "Get a resource's operator state",
        description: "What the operator says about a resource: maintenance window, intentionally \
            offline, never auto-remediate, criticality and note, with whether it silences \
            findings now.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::operator_state::OperatorStateView>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::NotFound,
            ErrorCode::AmbiguousResource,
        ],
        handler: || routing::get(get),
    },
    RouteSpec {
        method: "PUT",
        path: "/api/resources/{id}/operator-state",
        scopes: &[Scope::ActionsApprove],
        public: false,
        name: "set_operator_state",
        title: "Set a resource's operator state",
        description: "Replaces the resource's operator state. A maintenance window or \
            intentionally offline dismisses its open findings (expected_behavior) until it \
            lifts; never_auto_remediate is the remediation lock every dispatch checks.",
        category: Category::Context,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: Some(Body::required(
            schema::<pulse_api::operator_state::OperatorStateBody>,
        )),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::operator_state::OperatorStateView>,
        },
        errors: &[
            ErrorCode::InvalidJson,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidParameter,
            ErrorCode::NotFound,
            ErrorCode::AmbiguousResource,
            ErrorCode::Conflict,
        ],
        handler: || routing::put(put),
    },
    RouteSpec {
        method: "DELETE",
        path: "/api/resources/{id}/operator-state",
        scopes: &[Scope::ActionsApprove],
        public: false,
        name: "clear_operator_state",
        title: "Clear a resource's operator state",
        description: "Removes the resource's operator state: maintenance ends, the lock lifts.",
        category: Category::Context,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::operator_state::OperatorStateView>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::NotFound,
            ErrorCode::AmbiguousResource,
            ErrorCode::Conflict,
        ],
        handler: || routing::delete(delete),
    },
];

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone};

    use super::*;
    use pulse_api::operator_state::SuppressionCause;
    use pulse_domain::finding::operator_state::Criticality;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 0).unwrap()
    }

    fn body(json: &str) -> Result<OperatorStateInput, String> {
        let body: OperatorStateBody = serde_json::from_str(json).map_err(|e| e.to_string())?;
        validate(body, now()).map_err(|e| e.message)
    }

    #[test]
    fn the_body_is_strict() {
        let ok = body(
            r#"{"maintenance_window": {"starts_at": "2026-12-02T11:00:00Z",
                "ends_at": "2026-12-02T14:00:00Z"}, "intentionally_offline": false,
                "never_auto_remediate": true, "criticality": "high", "note": "db upgrade"}"#,
        )
        .unwrap();
        assert!(ok.projection.never_auto_remediate);
        assert_eq!(ok.projection.criticality, Some(Criticality::High));
        assert_eq!(
            ok.projection.maintenance_window.unwrap().ends_at,
            now() + Duration::hours(2)
        );
        for bad in [
            r#"{}"#,
            r#"{"intentionally_offline": false}"#,
            r#"{"intentionally_offline": false, "never_auto_remediate": false, "x": 1}"#,
            r#"{"intentionally_offline": false, "never_auto_remediate": false,
                "maintenance_window": {"ends_at": "2026-12-03T00:00:00Z", "until": 1}}"#,
            r#"{"intentionally_offline": false, "never_auto_remediate": false,
                "criticality": "urgent"}"#,
            r#"{"intentionally_offline": false, "never_auto_remediate": false,
                "maintenance_window": {"starts_at": "2026-12-02T13:00:00Z",
                "ends_at": "2026-12-02T12:30:00Z"}}"#,
            r#"{"intentionally_offline": false, "never_auto_remediate": false,
                "maintenance_window": {"ends_at": "2026-12-02T11:00:00Z"}}"#,
            r#"{"intentionally_offline": false, "never_auto_remediate": false,
                "note": "a\u0000b"}"#,
        ] {
            assert!(body(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_view_has_its_shape() {
        let stored = OperatorState {
            resource_id: "service:h1:web".to_owned(),
            projection: OperatorStateProjection {
                maintenance_window: Some(MaintenanceWindow {
                    starts_at: None,
                    ends_at: now() + Duration::hours(1),
                }),
                intentionally_offline: true,
                never_auto_remediate: false,
                criticality: Some(Criticality::Critical),
            },
            note: "patching".to_owned(),
            set_by: "user:alice".to_owned(),
            set_at: now(),
        };
        let shown = view("service:h1:web".to_owned(), Some(stored), now());
        assert_eq!(
            shown.suppression_cause,
            Some(SuppressionCause::MaintenanceWindow)
        );
        insta::assert_json_snapshot!("operator_state_view", shown);
        let unset = view("service:h1:web".to_owned(), None, now());
        assert_eq!(unset.suppression_cause, None);
        assert!(!unset.never_auto_remediate);
    }
}
