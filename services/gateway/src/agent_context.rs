//! Context routes for external agents (scope `monitoring:read`, the caller's tenant only).
//!
//! - `GET /api/agent/fleet-context?type=&status=`: every resource with its health, its open
//!   (active) finding counts and its firing alerts, plus the pending approvals count.
//! - `GET /api/agent/resource-context/{id}`: one resource (any reference the resolver accepts),
//!   a summary of its recent metrics (the last hour of each percent metric the alert rules
//!   watch), its open findings, its recent actions and its remediation lock.
//! - `GET /api/agent/resource-capabilities/{id}`: the typed action catalogue of the resource, as
//!   the action-broker (the catalogue's one owner, also Patrol's) answers it: each capability
//!   with its params schema and approval floor.
//! - `GET /api/agent/patrol-control/status` (and the legacy alias
//!   `/api/agent/operations-loop/status`): counts only, from the Patrol status projection.
//!
//! Unknown references and another tenant's resources answer `404 not_found`; a reference naming
//! several resources `409 ambiguous_resource`, as every resource route does.
//!
//! The Patrol control status counts every active finding (the status projection's count). The
//! other counts read the same bounded lists the list routes read: open findings of the fleet
//! context among the newest `findings::MAX_LIST_LIMIT`, pending approvals among the first `actions::MAX_LIST_LIMIT`, and
//! recent actions of a resource among the newest `actions::MAX_LIST_LIMIT` of the tenant.

use axum::routing;
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use pulse_api::constraints::ResourceRef;
use pulse_api::context::{
    ActionCapabilityEntry, FleetContext, FleetQuery, FleetResource, MetricSummary, PatrolControl,
    PatrolControlStatus, ResourceCapabilities, ResourceContext,
};
use pulse_bus::ActionBrokerClient;
use pulse_bus::actions_api::{self, ActionCapabilitiesRequest};
use pulse_domain::finding::{Finding, SeverityCounts};
use pulse_domain::patrol::run::RunStatus;
use pulse_domain::patrol::status::CheckStatus;
use pulse_store::alerts::{self, AlertFilter, StateFilter, StoredAlert};
use pulse_store::findings::{self as finding_store, ListFilter, MAX_LIST_LIMIT};
use pulse_store::{TenantTx, actions as action_store, metrics, resources as resource_store};

use crate::actions::ACTION_REQUEST_TIMEOUT;
use crate::authorized::{Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::resources::resolve;
use crate::route::{Answer, RESOURCE_REF, RouteSpec, endpoint_errors, route_errors, schema};
use crate::state::AppState;

/// Recent actions shown in a resource context, at most.
pub const RECENT_ACTIONS: usize = 10;
/// The metric window summarized in a resource context.
pub const METRIC_WINDOW_MINUTES: i64 = 60;
/// Samples per metric summarized, at most.
const METRIC_SAMPLES: i64 = 720;
/// The metrics summarized: the percent metrics the alert rules watch.
const SUMMARIZED_METRICS: [&str; 3] = [
    alerts::MEMORY_PERCENT,
    alerts::USED_PERCENT,
    alerts::INODES_PERCENT,
];

/// Active findings of the tenant (the newest [`MAX_LIST_LIMIT`]), as the finding routes list
/// them.
async fn open_findings(tx: &TenantTx) -> Result<Vec<Finding>, ApiError> {
    let stored = finding_store::list(tx, ListFilter::Active, Some(MAX_LIST_LIMIT), Utc::now())
        .await
        .map_err(crate::findings::store_error)?;
    Ok(stored.into_iter().map(|s| s.finding).collect())
}

async fn firing_alerts(tx: &TenantTx) -> Result<Vec<StoredAlert>, ApiError> {
    Ok(alerts::list(
        tx,
        &AlertFilter {
            state: StateFilter::Firing,
            resource_id: None,
            limit: alerts::MAX_LIST_LIMIT,
        },
    )
    .await?)
}

pub async fn fleet(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiQuery(query, _): ApiQuery<FleetQuery>,
) -> Result<Json<FleetContext>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let listed = resource_store::list(&tx, query.resource_type).await?;
    let findings = open_findings(&tx).await?;
    let alerts = firing_alerts(&tx).await?;
    let pending = action_store::pending(&tx, Some(action_store::MAX_LIST_LIMIT)).await?;
    tx.rollback().await?;
    let mut by_resource: BTreeMap<&str, Vec<&Finding>> = BTreeMap::new();
    for finding in &findings {
        by_resource
            .entry(finding.resource_id.as_str())
            .or_default()
            .push(finding);
    }
    let mut alert_counts: BTreeMap<&str, u32> = BTreeMap::new();
    for alert in &alerts {
        *alert_counts.entry(alert.resource_id.as_str()).or_default() += 1;
    }
    let resources: Vec<FleetResource> = listed
        .into_iter()
        .filter(|r| query.status.is_none_or(|s| r.status == s))
        .map(|r| {
            let id = r.id.as_str();
            FleetResource {
                open_findings: SeverityCounts::of(
                    by_resource.get(id).into_iter().flatten().copied(),
                ),
                firing_alerts: alert_counts.get(id).copied().unwrap_or(0),
                id: id.to_owned(),
                resource_type: r.resource_type,
                name: r.name,
                agent_id: r.agent_id,
                status: r.status,
                health: r.health,
            }
        })
        .collect();
    let open = resources.iter().fold(SeverityCounts::default(), |sum, r| {
        sum.merged(r.open_findings)
    });
    Ok(Json(FleetContext {
        resource_count: resources.len(),
        resources,
        open_findings: open,
        pending_approvals: pending.len(),
        generated_at: Utc::now(),
    }))
}

/// The summary of one metric's samples over the window; `None` without samples.
fn metric_summary(metric: &str, samples: &[(DateTime<Utc>, f64)]) -> Option<MetricSummary> {
    let (latest_at, latest) = *samples.last()?;
    let values = samples.iter().map(|(_, v)| *v);
    let min = values.clone().fold(f64::INFINITY, f64::min);
    let max = values.clone().fold(f64::NEG_INFINITY, f64::max);
    let mean = values.sum::<f64>() / samples.len() as f64;
    Some(MetricSummary {
        metric: metric.to_owned(),
        samples: samples.len(),
        latest,
        latest_at,
        min,
        max,
        mean,
    })
}

pub async fn resource(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiPath(reference): ApiPath<ResourceRef>,
) -> Result<Json<ResourceContext>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resource = resolve(&tx, &reference).await?;
    let id = resource.id.as_str().to_owned();
    let since = Utc::now() - chrono::Duration::minutes(METRIC_WINDOW_MINUTES);
    let mut summaries = Vec::new();
    for metric in SUMMARIZED_METRICS {
        let samples = metrics::history(&tx, &resource.id, metric, since, METRIC_SAMPLES).await?;
        summaries.extend(metric_summary(metric, &samples));
    }
    let findings: Vec<Finding> = open_findings(&tx)
        .await?
        .into_iter()
        .filter(|f| f.resource_id == id)
        .collect();
    let firing = alerts::list(
        &tx,
        &AlertFilter {
            state: StateFilter::Firing,
            resource_id: Some(id.clone()),
            limit: alerts::MAX_LIST_LIMIT,
        },
    )
    .await?;
    let recent: Vec<_> = action_store::list(&tx, Some(action_store::MAX_LIST_LIMIT))
        .await?
        .into_iter()
        .filter(|a| a.plan.resource_id == id)
        .take(RECENT_ACTIONS)
        .collect();
    let recent_actions = crate::actions::views(&tx, recent).await?;
    let lock = action_store::remediation_lock(&tx, &id).await?;
    tx.rollback().await?;
    Ok(Json(ResourceContext {
        resource,
        metrics_window_minutes: METRIC_WINDOW_MINUTES,
        metrics: summaries,
        open_finding_counts: SeverityCounts::of(&findings),
        open_findings: findings,
        firing_alerts: firing.into_iter().map(crate::alerts::alert).collect(),
        recent_actions,
        never_auto_remediate: lock == pulse_domain::action::LockState::Locked,
    }))
}

/// A capability of the broker's catalogue as the API shows it.
fn capability(entry: actions_api::ActionCapabilityEntry) -> ActionCapabilityEntry {
    ActionCapabilityEntry {
        name: entry.name,
        description: entry.description,
        params_schema: entry.params_schema,
        sensitive_params: entry.sensitive_params,
        approval_floor: entry.approval_floor,
        auto_approval_eligible: entry.auto_approval_eligible,
        risk_level: entry.risk_level,
    }
}

pub async fn capabilities(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiPath(reference): ApiPath<ResourceRef>,
) -> Result<Json<ResourceCapabilities>, ApiError> {
    // Resolved here first: an unknown or other tenant's reference is a 404 without a broker.
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resource = resolve(&tx, &reference).await?;
    tx.rollback().await?;
    let request = ActionCapabilitiesRequest {
        resource_id: resource.id.as_str().to_owned(),
    };
    let reply = ActionBrokerClient::new(state.bus.clone())
        .capabilities(&auth.principal.tenant, &request, ACTION_REQUEST_TIMEOUT)
        .await?;
    Ok(Json(ResourceCapabilities {
        resource_id: reply.resource_id,
        resource_type: reply.resource_type,
        resource_name: reply.resource_name,
        capabilities: reply.capabilities.into_iter().map(capability).collect(),
    }))
}

pub async fn patrol_control_status(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
) -> Result<Json<PatrolControlStatus>, ApiError> {
    let (status, settings) = crate::patrol::status_projection(&state, &auth.principal).await?;
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let pending = action_store::pending(&tx, Some(action_store::MAX_LIST_LIMIT)).await?;
    // The status's current run may still be queued; only a started one is running.
    let running = pulse_store::patrol_runs::current(&tx)
        .await?
        .is_some_and(|run| run.status == RunStatus::Running);
    tx.rollback().await?;
    let failing = status
        .readiness_checks
        .iter()
        .filter(|c| c.status == CheckStatus::Fail)
        .count();
    Ok(Json(PatrolControlStatus {
        patrol: PatrolControl {
            enabled: status.enabled,
            mode: settings.map(|s| s.autonomy_level),
            runtime_state: status.runtime_state,
            ready: failing == 0,
            readiness_checks: status.readiness_checks.len(),
            readiness_checks_failing: failing,
        },
        healthy: status.healthy,
        health_basis: status.health_basis,
        findings_count: status.findings_count,
        active_findings: status.active_findings,
        pending_approvals: pending.len(),
        running_runs: u32::from(running),
        queued_scoped_runs: status.queued_scoped_runs,
    }))
}

/// The routes of this module, in the order the API lists them (with the event stream, whose
/// handler is `agent_events`).
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "GET",
        path: "/api/agent/fleet-context",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_fleet_context",
        title: "Fleet context",
        description: "Every resource with its health, open finding counts and firing alerts, plus the pending approvals count; optionally of one type or status.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::context::FleetQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::context::FleetContext>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || routing::get(fleet),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/resource-context/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_resource_context",
        title: "Resource context",
        description: "One resource with a summary of its recent metrics, its open findings, its recent actions and its remediation lock.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::context::ResourceContext>,
        },
        errors: &RESOURCE_REF,
        handler: || routing::get(resource),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/resource-capabilities/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_resource_capabilities",
        title: "Resource action capabilities",
        description: "The typed action capabilities a resource advertises, each with its params schema and approval floor: the inputs plan_action needs.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::context::ResourceCapabilities>,
        },
        errors: route_errors!(
            &RESOURCE_REF,
            endpoint_errors!(pulse_bus::actions_api::ActionCapabilitiesRequest)
        ),
        handler: || routing::get(capabilities),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/patrol-control/status",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_patrol_control_status",
        title: "Patrol control status",
        description: "Counts only: Patrol enabled, mode and readiness, active findings by severity, pending approvals and running runs.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::context::PatrolControlStatus>,
        },
        errors: &[ErrorCode::PatrolUnavailable],
        handler: || routing::get(patrol_control_status),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/operations-loop/status",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_operations_loop_status",
        title: "Patrol control status (legacy alias)",
        description: "The same answer as get_patrol_control_status, under its older path for older clients.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::context::PatrolControlStatus>,
        },
        errors: &[ErrorCode::PatrolUnavailable],
        handler: || routing::get(patrol_control_status),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/events",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "subscribe_events",
        title: "Agent event stream",
        description: "The tenant's finding, approval and action events as Server-Sent Events \
            (stream.connected, heartbeat, finding.created|updated|resolved, approval.pending, \
            action.completed), resumable with Last-Event-ID.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::events::StreamQuery>),
        body: None,
        response: Answer::EventStream {
            events: &crate::agent_events::EVENT_NAMES,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::InvalidLastEventId,
            ErrorCode::TooManyStreams,
        ],
        handler: || routing::get(crate::agent_events::stream),
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use pulse_domain::resource::{ResourceStatus, ResourceType};

    #[test]
    fn metric_summary_of_a_window() {
        let t = |m| {
            Utc.with_ymd_and_hms(2026, 12, 1, 12, m, 0)
                .single()
                .expect("time")
        };
        assert_eq!(metric_summary("used_percent", &[]), None);
        let summary = metric_summary("used_percent", &[(t(0), 80.0), (t(1), 90.0), (t(2), 85.0)])
            .expect("summary");
        assert_eq!(summary.samples, 3);
        assert_eq!(
            (summary.min, summary.max, summary.latest),
            (80.0, 90.0, 85.0)
        );
        assert_eq!(summary.latest_at, t(2));
        assert!((summary.mean - 85.0).abs() < 1e-9);
    }

    #[test]
    fn fleet_filters() {
        let read = |query: &str| ApiQuery::<FleetQuery>::parse(query).map(|q| q.0);
        let running = read("status=running&type=host").expect("valid");
        assert_eq!(running.status, Some(ResourceStatus::Running));
        assert_eq!(running.resource_type, Some(ResourceType::Host));
        let err = read("status=up").expect_err("unknown status");
        assert_eq!(err.code, ErrorCode::InvalidParameter);
        assert_eq!(
            err.message,
            "status: \"up\" is not one of running, exited, stopped, unknown"
        );
        let err = read("type=k8s-pod").expect_err("unknown type");
        assert!(err.message.starts_with("type: "), "{}", err.message);
    }
}
