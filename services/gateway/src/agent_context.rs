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

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use chrono::{DateTime, Utc};
use pulse_bus::ActionBrokerClient;
use pulse_bus::actions_api::{ActionCapabilitiesRequest, ActionCapabilityEntry};
use pulse_capabilities::ErrorCode;
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::finding::{Finding, SeverityCounts};
use pulse_domain::patrol::run::RunStatus;
use pulse_domain::patrol::status::{CheckStatus, HealthBasis, RuntimeState};
use pulse_domain::resource::{Health, Resource, ResourceStatus, ResourceType};
use pulse_store::alerts::{self, AlertFilter, StateFilter, StoredAlert};
use pulse_store::findings::{self as finding_store, ListFilter, MAX_LIST_LIMIT};
use pulse_store::{TenantTx, actions as action_store, metrics, resources as resource_store};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::actions::{ACTION_REQUEST_TIMEOUT, ActionView};
use crate::auth::{Authorized, MonitoringReadScope};
use crate::resources::{check_reference, resolve};
use crate::{ApiError, AppState};

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

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FleetQuery {
    /// Only resources of this type (`host`, `service`, `app-container`, `storage`).
    #[serde(rename = "type")]
    #[schemars(with = "Option<ResourceType>")]
    pub resource_type: Option<String>,
    /// Only resources in this status (`running`, `exited`, `stopped`, `unknown`).
    #[schemars(with = "Option<ResourceStatus>")]
    pub status: Option<String>,
}

/// One resource in the fleet context.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FleetResource {
    pub id: String,
    #[serde(rename = "type")]
    pub resource_type: ResourceType,
    pub name: String,
    pub agent_id: String,
    pub status: ResourceStatus,
    pub health: Health,
    pub open_findings: SeverityCounts,
    pub firing_alerts: u32,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FleetContext {
    pub resources: Vec<FleetResource>,
    pub resource_count: usize,
    /// Open findings of the listed resources.
    pub open_findings: SeverityCounts,
    pub pending_approvals: usize,
    pub generated_at: DateTime<Utc>,
}

fn invalid(message: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidParameter, message)
}

fn parse_status(raw: &str) -> Result<ResourceStatus, ApiError> {
    [
        ResourceStatus::Running,
        ResourceStatus::Exited,
        ResourceStatus::Stopped,
        ResourceStatus::Unknown,
    ]
    .into_iter()
    .find(|s| s.as_str() == raw)
    .ok_or_else(|| {
        invalid(format!(
            "status: {raw:?} is not one of running, exited, stopped, unknown"
        ))
    })
}

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
    query: Result<Query<FleetQuery>, QueryRejection>,
) -> Result<Json<FleetContext>, ApiError> {
    let Query(query) = query.map_err(|e| invalid(e.body_text()))?;
    let resource_type = query
        .resource_type
        .map(|t| t.parse::<ResourceType>())
        .transpose()
        .map_err(|e| invalid(format!("type: {e}")))?;
    let status = query.status.as_deref().map(parse_status).transpose()?;
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let listed = resource_store::list(&tx, resource_type).await?;
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
        .filter(|r| status.is_none_or(|s| r.status == s))
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

/// One metric over the summary window.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct MetricSummary {
    pub metric: String,
    pub samples: usize,
    pub latest: f64,
    pub latest_at: DateTime<Utc>,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

impl MetricSummary {
    fn of(metric: &str, samples: &[(DateTime<Utc>, f64)]) -> Option<Self> {
        let (latest_at, latest) = *samples.last()?;
        let values = samples.iter().map(|(_, v)| *v);
        let min = values.clone().fold(f64::INFINITY, f64::min);
        let max = values.clone().fold(f64::NEG_INFINITY, f64::max);
        let mean = values.sum::<f64>() / samples.len() as f64;
        Some(Self {
            metric: metric.to_owned(),
            samples: samples.len(),
            latest,
            latest_at,
            min,
            max,
            mean,
        })
    }
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ResourceContext {
    pub resource: Resource,
    /// The summarized window, in minutes.
    pub metrics_window_minutes: i64,
    pub metrics: Vec<MetricSummary>,
    pub open_findings: Vec<Finding>,
    pub open_finding_counts: SeverityCounts,
    /// Firing alerts of the resource.
    pub firing_alerts: Vec<StoredAlert>,
    /// The newest actions on the resource, newest first.
    pub recent_actions: Vec<ActionView>,
    /// Whether the resource is marked never_auto_remediate.
    pub never_auto_remediate: bool,
}

fn reference(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(reference) = path.map_err(|e| invalid(e.body_text()))?;
    check_reference("id", &reference)?;
    Ok(reference)
}

pub async fn resource(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<ResourceContext>, ApiError> {
    let reference = reference(path)?;
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resource = resolve(&tx, &reference).await?;
    let id = resource.id.as_str().to_owned();
    let since = Utc::now() - chrono::Duration::minutes(METRIC_WINDOW_MINUTES);
    let mut summaries = Vec::new();
    for metric in SUMMARIZED_METRICS {
        let samples = metrics::history(&tx, &resource.id, metric, since, METRIC_SAMPLES).await?;
        summaries.extend(MetricSummary::of(metric, &samples));
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
        firing_alerts: firing,
        recent_actions,
        never_auto_remediate: lock == pulse_domain::action::LockState::Locked,
    }))
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResourceCapabilities {
    /// The canonical id the reference resolved to.
    pub resource_id: String,
    pub resource_type: ResourceType,
    pub resource_name: String,
    /// The capabilities `plan_action` accepts for this resource.
    pub capabilities: Vec<ActionCapabilityEntry>,
}

pub async fn capabilities(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<ResourceCapabilities>, ApiError> {
    let reference = reference(path)?;
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
        capabilities: reply.capabilities,
    }))
}

/// Patrol's switch, mode and readiness.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PatrolControl {
    pub enabled: bool,
    /// The Patrol mode (`autonomy_level`); `null` when the stored settings do not resolve.
    pub mode: Option<AutonomyLevel>,
    pub runtime_state: RuntimeState,
    /// Whether no readiness check fails.
    pub ready: bool,
    pub readiness_checks: usize,
    pub readiness_checks_failing: usize,
}

/// Counts only: no finding, resource or action content.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PatrolControlStatus {
    pub patrol: PatrolControl,
    /// The Patrol status's verdict: `false` while a warning or critical finding is active,
    /// `true` only after a recent successful full run with none, `null` otherwise
    /// (`health_basis` says which).
    pub healthy: Option<bool>,
    pub health_basis: HealthBasis,
    /// Active findings of every severity (`active_findings.total`).
    pub findings_count: u32,
    /// Every active finding of the tenant, by severity.
    pub active_findings: SeverityCounts,
    pub pending_approvals: usize,
    /// Runs running now (0 or 1: one full or scoped run at a time per tenant).
    pub running_runs: u32,
    pub queued_scoped_runs: u32,
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn metric_summary_of_a_window() {
        let t = |m| {
            Utc.with_ymd_and_hms(2026, 12, 1, 12, m, 0)
                .single()
                .expect("time")
        };
        assert_eq!(MetricSummary::of("used_percent", &[]), None);
        let summary =
            MetricSummary::of("used_percent", &[(t(0), 80.0), (t(1), 90.0), (t(2), 85.0)])
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
    fn status_filter() {
        assert_eq!(parse_status("running").ok(), Some(ResourceStatus::Running));
        let err = parse_status("up").expect_err("unknown status");
        assert_eq!(err.code, ErrorCode::InvalidParameter);
        assert!(err.message.starts_with("status:"), "{}", err.message);
    }
}
