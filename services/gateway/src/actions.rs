//! Governed actions over the API. The gateway authenticates and checks scopes; the
//! action-broker plans, decides and executes over the bus; reads come from the action store.
//!
//! - `POST /api/actions/plan` (`actions:plan`): `{resource_id, capability, params, reason,
//!   severity, approval_floor?}`; the requester is the authenticated caller.
//! - `GET /api/actions`, `GET /api/actions/pending` (by expiry, risk, age, id),
//!   `GET /api/actions/{id}`, `GET /api/actions/{id}/audit` (`monitoring:read`).
//! - `POST /api/actions/{id}/decision` (`actions:approve`): `{outcome: approved|rejected,
//!   reason}`; the decider is the human behind the token, never a body field (unknown fields are
//!   refused). An approval starts the execution; the answer (`approved`) does not wait for it.
//! - `POST /api/actions/{id}/execute` (`actions:execute`): runs an approved action that is not
//!   running yet; never runs one twice.
//!
//! `decided_by` is the decider's stable actor id (`user:<id>`), as the audit records it;
//! `decided_by_name` is that user's username, for people to read (`null` when the decider is not
//! a user of the tenant any more).
//!
//! An action shows the finding it fixes (`finding_id`) and, once the verifier judged the
//! completed action, `verification` (`verified|still_failing|inconclusive`),
//! `verification_reason` and `verified_at`.
//!
//! Another tenant's action id answers `action_not_found`, like an unknown one.

use axum::routing;
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::PathRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use pulse_api::actions::{
    ActionId, ActionView, AuditRecord, DecisionBody, DecisionOutcome, ListQuery, PlanBody,
};
use pulse_bus::actions_api::{
    self, ActionDecisionRequest, ActionExecuteRequest, ActionPlanRequest, ActionReply,
};
use pulse_bus::{ActionBrokerClient, ClientError};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_store::actions::{self, StoredAction};
use pulse_store::tokens::Principal;
use pulse_store::{TenantTx, users};
use serde_json::Value;
use uuid::Uuid;

use crate::authorized::{Authorized, MonitoringReadScope, RequiredScopes};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, PathParam};
use crate::route::{Answer, Body, JSON_BODY, RouteSpec, endpoint_errors, route_errors, schema};
use crate::state::AppState;

pub struct PlanScope;
impl RequiredScopes for PlanScope {
    const SCOPES: &'static [Scope] = &[Scope::ActionsPlan];
}

pub struct ApproveScope;
impl RequiredScopes for ApproveScope {
    const SCOPES: &'static [Scope] = &[Scope::ActionsApprove];
}

pub struct ExecuteScope;
impl RequiredScopes for ExecuteScope {
    const SCOPES: &'static [Scope] = &[Scope::ActionsExecute];
}

/// How long the gateway waits for the broker: an execution includes the agent's receipt.
pub const ACTION_REQUEST_TIMEOUT: Duration = Duration::from_secs(90);

/// `user:<id>` for a token a human created, else `token:<id>`.
pub fn actor(principal: &Principal) -> String {
    match principal.user_id {
        Some(user) => format!("user:{user}"),
        None => format!("token:{}", principal.token_id),
    }
}

/// A stored action as the API shows it (without its decider's username).
fn view_of(a: StoredAction) -> ActionView {
    ActionView {
        plan: a.plan,
        state: a.state,
        version: a.version,
        decided_by: a.decided_by,
        decided_by_name: None,
        decision_reason: a.decision_reason,
        human_approved: a.human_approved,
        lease_id: a.lease_id,
        lease_expires_at: a.lease_expires_at,
        result: a.result,
        updated_at: a.updated_at,
        finding_id: a.finding_id,
        verification: a.verification,
        verification_reason: a
            .verification_detail
            .as_ref()
            .and_then(|d| d.get("reason"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        verified_at: a.verified_at,
    }
}

/// The API view of `stored`, with the deciders' usernames looked up in one query.
pub(crate) async fn views(
    tx: &TenantTx,
    stored: Vec<StoredAction>,
) -> Result<Vec<ActionView>, ApiError> {
    let deciders: Vec<Uuid> = stored
        .iter()
        .filter_map(|a| a.decided_by.as_deref().and_then(users::actor_user_id))
        .collect();
    let names = users::usernames(tx, &deciders).await?;
    Ok(stored
        .into_iter()
        .map(|a| {
            let name = a
                .decided_by
                .as_deref()
                .and_then(users::actor_user_id)
                .and_then(|id| names.get(&id).cloned());
            ActionView {
                decided_by_name: name,
                ..view_of(a)
            }
        })
        .collect())
}

async fn view(tx: &TenantTx, stored: StoredAction) -> Result<ActionView, ApiError> {
    let mut one = views(tx, vec![stored]).await?;
    one.pop()
        .ok_or_else(|| ApiError::new(ErrorCode::InternalError, "the action view was lost"))
}

fn not_found(id: impl std::fmt::Display) -> ApiError {
    ApiError::new(ErrorCode::ActionNotFound, format!("no action {id}"))
}

/// An id that is not a UUID names no action.
impl PathParam for ActionId {
    fn from_segment(raw: String) -> Result<Self, ApiError> {
        raw.parse().map_err(|_| not_found(format!("{raw:?}")))
    }

    fn unreadable(_: &PathRejection) -> ApiError {
        not_found("with this id")
    }
}

fn broker(state: &AppState) -> ActionBrokerClient {
    ActionBrokerClient::new(state.bus.clone())
}

/// Reads the action the action-broker answered about.
async fn answered(
    state: &AppState,
    principal: &Principal,
    reply: Result<ActionReply, ClientError>,
) -> Result<ActionView, ApiError> {
    let tenant = &principal.tenant;
    let reply = reply?;
    let tx = state.store.tenant_tx(tenant).await?;
    let action = actions::get(&tx, reply.action_id)
        .await?
        .ok_or_else(|| not_found(reply.action_id))?;
    let view = view(&tx, action).await?;
    tx.rollback().await?;
    Ok(view)
}

pub async fn plan(
    State(state): State<AppState>,
    auth: Authorized<PlanScope>,
    ApiJson(body, _): ApiJson<PlanBody>,
) -> Result<Response, ApiError> {
    let request = ActionPlanRequest {
        resource_id: body.resource_id,
        capability: body.capability,
        params: body.params,
        reason: body.reason,
        severity: body.severity,
        approval_floor: body.approval_floor,
        requested_by: actor(&auth.principal),
        finding_id: body.finding_id,
    };
    let reply = broker(&state)
        .plan(&auth.principal.tenant, &request, ACTION_REQUEST_TIMEOUT)
        .await;
    let view = answered(&state, &auth.principal, reply).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

pub async fn decision(
    State(state): State<AppState>,
    auth: Authorized<ApproveScope>,
    ApiPath(ActionId(id)): ApiPath<ActionId>,
    ApiJson(body, _): ApiJson<DecisionBody>,
) -> Result<Json<ActionView>, ApiError> {
    if auth.principal.user_id.is_none() {
        return Err(ApiError::new(
            ErrorCode::ActionDecisionRequiresHuman,
            "decisions are made by a human; this token belongs to no user",
        ));
    }
    let request = ActionDecisionRequest {
        action_id: id,
        outcome: match body.outcome {
            DecisionOutcome::Approved => actions_api::DecisionOutcome::Approved,
            DecisionOutcome::Rejected => actions_api::DecisionOutcome::Rejected,
        },
        reason: body.reason,
        decided_by: actor(&auth.principal),
    };
    let reply = broker(&state)
        .decide(&auth.principal.tenant, &request, ACTION_REQUEST_TIMEOUT)
        .await;
    Ok(Json(answered(&state, &auth.principal, reply).await?))
}

pub async fn execute(
    State(state): State<AppState>,
    auth: Authorized<ExecuteScope>,
    ApiPath(ActionId(id)): ApiPath<ActionId>,
) -> Result<Json<ActionView>, ApiError> {
    let request = ActionExecuteRequest {
        action_id: id,
        requested_by: actor(&auth.principal),
    };
    let reply = broker(&state)
        .execute(&auth.principal.tenant, &request, ACTION_REQUEST_TIMEOUT)
        .await;
    Ok(Json(answered(&state, &auth.principal, reply).await?))
}

pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiQuery(query, _): ApiQuery<ListQuery>,
) -> Result<Json<Vec<ActionView>>, ApiError> {
    let limit = query.limit;
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let list = views(&tx, actions::list(&tx, limit).await?).await?;
    tx.rollback().await?;
    Ok(Json(list))
}

pub async fn pending(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiQuery(query, _): ApiQuery<ListQuery>,
) -> Result<Json<Vec<ActionView>>, ApiError> {
    let limit = query.limit;
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let list = views(&tx, actions::pending(&tx, limit).await?).await?;
    tx.rollback().await?;
    Ok(Json(list))
}

pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiPath(ActionId(id)): ApiPath<ActionId>,
) -> Result<Json<ActionView>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let action = actions::get(&tx, id).await?.ok_or_else(|| not_found(id))?;
    let view = view(&tx, action).await?;
    tx.rollback().await?;
    Ok(Json(view))
}

/// A stored audit row as the API shows it: the hashes in hex.
fn audit_record(row: pulse_store::audit::AuditRecord) -> AuditRecord {
    AuditRecord {
        seq: row.seq,
        occurred_at: row.occurred_at,
        actor: row.actor,
        kind: row.kind,
        subject: row.subject,
        payload: row.payload,
        prev_hash: hex::encode(&row.prev_hash),
        row_hash: hex::encode(&row.row_hash),
    }
}

pub async fn audit(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiPath(ActionId(id)): ApiPath<ActionId>,
) -> Result<Json<Vec<AuditRecord>>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    if actions::get(&tx, id).await?.is_none() {
        return Err(not_found(id));
    }
    let trail = actions::audit_trail(&tx, id).await?;
    tx.rollback().await?;
    Ok(Json(trail.into_iter().map(audit_record).collect()))
}

/// Planning and deciding parse a body, then ask the action-broker.
const PLAN_ERRORS: &[ErrorCode] = route_errors!(&JSON_BODY, endpoint_errors!(ActionPlanRequest));
const DECIDE_ERRORS: &[ErrorCode] =
    route_errors!(&JSON_BODY, endpoint_errors!(ActionDecisionRequest));

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "POST",
        path: "/api/actions/plan",
        scopes: &[Scope::ActionsPlan],
        public: false,
        name: "plan_action",
        title: "Plan an action",
        description: "Plans one typed capability on a resource (see list_resource_capabilities). Nothing runs: policy either authorizes it or it waits for a human decision.",
        category: Category::Actions,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ActionPlan,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::actions::PlanBody>)),
        response: Answer::Json {
            status: 201,
            schema: schema::<pulse_api::actions::ActionView>,
        },
        errors: PLAN_ERRORS,
        handler: || routing::post(plan),
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_actions",
        title: "List actions",
        description: "The tenant's actions, newest first.",
        category: Category::Actions,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::actions::ListQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<Vec<pulse_api::actions::ActionView>>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || routing::get(list),
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions/pending",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_pending_approvals",
        title: "List pending approvals",
        description: "Actions waiting for a decision, by expiry, risk and age.",
        category: Category::Actions,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::actions::ListQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<Vec<pulse_api::actions::ActionView>>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || routing::get(pending),
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_action",
        title: "Get an action",
        description: "One action: its plan, state, decision, execution result and verification.",
        category: Category::Actions,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::actions::ActionId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::actions::ActionView>,
        },
        errors: &[ErrorCode::ActionNotFound],
        handler: || routing::get(get),
    },
    RouteSpec {
        method: "POST",
        path: "/api/actions/{id}/decision",
        scopes: &[Scope::ActionsApprove],
        public: false,
        name: "decide_action",
        title: "Approve or reject an action",
        description: "A human's decision on a pending action; an approval starts its execution.",
        category: Category::Actions,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ActionPlan,
        id: Some(schema::<pulse_api::actions::ActionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::actions::DecisionBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::actions::ActionView>,
        },
        errors: DECIDE_ERRORS,
        handler: || routing::post(decision),
    },
    RouteSpec {
        method: "POST",
        path: "/api/actions/{id}/execute",
        scopes: &[Scope::ActionsExecute],
        public: false,
        name: "execute_action",
        title: "Execute an approved action",
        description: "Runs an approved action that is not running yet; never runs one twice.",
        category: Category::Actions,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ActionPlan,
        id: Some(schema::<pulse_api::actions::ActionId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::actions::ActionView>,
        },
        errors: endpoint_errors!(ActionExecuteRequest),
        handler: || routing::post(execute),
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions/{id}/audit",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_action_audit",
        title: "Action audit trail",
        description: "The audit records of one action, in order.",
        category: Category::Actions,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::actions::ActionId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<Vec<pulse_api::actions::AuditRecord>>,
        },
        errors: &[ErrorCode::ActionNotFound],
        handler: || routing::get(audit),
    },
];
