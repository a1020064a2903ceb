//! `DELETE /api/agents/{id}` (scope `admin`): forgets a decommissioned host's agent.
//!
//! Its resources leave the inventory in one transaction with the agent's mark: each removal is
//! announced as `events.resource.changed` (`removed`), their firing alerts clear through the
//! alert floor's sweep of removed resources, and the agent is never swept offline afterwards, so
//! no `agent_offline` alert and no Patrol run follow the decommissioning. The agent row stays
//! (`forgotten`) so its history keeps its keys; an agent that still runs comes back, online, with
//! its next report, so stop it first. Forgetting an unknown agent is `404 not_found`; forgetting
//! twice removes nothing the second time. Audited as `agent.forgotten`.

use axum::Json;
use axum::extract::State;
use axum::routing;
use chrono::Utc;
use pulse_api::agents::{AgentId, ForgottenAgent};
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_bus::OutboxRow;
use pulse_bus::events::RESOURCE_CHANGED;
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_store::audit::{self, AuditEntry};
use pulse_store::{agents, resources};
use serde_json::json;

use crate::authorized::{AdminScope, Authorized};
use crate::error::ApiError;
use crate::extract::{ApiPath, PathParam};
use crate::route::{Answer, RouteSpec, schema};
use crate::state::AppState;

impl PathParam for AgentId {
    fn from_segment(raw: String) -> Result<Self, ApiError> {
        AgentId::parse(raw).ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidParameter,
                format!("id: {}", AgentId::requirement()),
            )
        })
    }
}

pub async fn forget(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
    ApiPath(id): ApiPath<AgentId>,
) -> Result<Json<ForgottenAgent>, ApiError> {
    let tenant = auth.principal.tenant.clone();
    let tx = state.store.tenant_tx(&tenant).await?;
    let Some(previous_status) = agents::forget(&tx, id.as_str()).await? else {
        tx.rollback().await?;
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!(
                "no agent {:?}; GET /api/resources lists each resource's agent_id",
                id.as_str()
            ),
        ));
    };
    // Nothing observed: every resource of the agent is removed, by the one owner of removal.
    let removed = resources::apply_report(&tx, id.as_str(), Utc::now(), &[]).await?;
    let subjects = &state.settings.subjects;
    for change in &removed {
        let (domain, event) = RESOURCE_CHANGED;
        let row = OutboxRow::event(subjects, &tenant, domain, event, change).map_err(|error| {
            tracing::error!(%error, "resource event not encoded");
            ApiError::new(
                ErrorCode::InternalError,
                "the removal could not be announced",
            )
        })?;
        pulse_bus::enqueue(&**tx.client(), row)
            .await
            .map_err(|error| {
                tracing::warn!(%error, "resource event not queued");
                ApiError::new(
                    ErrorCode::ServiceUnavailable,
                    "the database is unavailable; retry shortly",
                )
            })?;
    }
    let resources_removed = u32::try_from(removed.len()).unwrap_or(u32::MAX);
    let actor = auth.principal.named_actor();
    audit::append(
        &tx,
        &AuditEntry {
            actor: actor.clone(),
            kind: "agent.forgotten".to_owned(),
            subject: id.as_str().to_owned(),
            payload: json!({
                "previous_status": previous_status,
                "resources_removed": resources_removed,
            }),
        },
    )
    .await?;
    tx.commit().await?;
    if !removed.is_empty() {
        state.settings.outbox_notify.notify_one();
    }
    tracing::info!(agent_id = id.as_str(), %previous_status, resources_removed, %actor, "agent forgotten");
    Ok(Json(ForgottenAgent {
        agent_id: id.as_str().to_owned(),
        previous_status,
        resources_removed,
    }))
}

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[RouteSpec {
    method: "DELETE",
    path: "/api/agents/{id}",
    scopes: &[Scope::Admin],
    public: false,
    name: "forget_agent",
    title: "Forget an agent",
    description: "Removes a decommissioned host's agent and its resources from the inventory (their alerts clear; no offline alert follows); audited. A running agent comes back with its next report: stop it first.",
    category: Category::Inventory,
    action_mode: ActionMode::Write,
    approval_policy: ApprovalPolicy::ScopeOnly,
    id: Some(schema::<pulse_api::agents::AgentId>),
    query: None,
    body: None,
    response: Answer::Json {
        status: 200,
        schema: schema::<pulse_api::agents::ForgottenAgent>,
    },
    errors: &[ErrorCode::InvalidParameter, ErrorCode::NotFound],
    handler: || routing::delete(forget),
}];
