//! Read-only context for external agents: `GET /api/agent/fleet-context`,
//! `GET /api/agent/resource-context/{id}`, `GET /api/agent/resource-capabilities/{id}` and
//! `GET /api/agent/patrol-control/status`.

use chrono::{DateTime, Utc};
use pulse_domain::action::{ApprovalFloor, RiskLevel};
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::finding::{Finding, SeverityCounts};
use pulse_domain::patrol::status::{HealthBasis, RuntimeState};
use pulse_domain::resource::{Health, Resource, ResourceStatus, ResourceType};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::actions::ActionView;
use crate::alerts::Alert;
use crate::constraints::refuse;

#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FleetQuery {
    /// Only resources of this type (`host`, `service`, `app-container`, `storage`).
    #[serde(
        rename = "type",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::query::parsed"
    )]
    #[schemars(with = "Option<ResourceType>")]
    pub resource_type: Option<ResourceType>,
    /// Only resources in this status (`running`, `exited`, `stopped`, `unknown`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "status_filter"
    )]
    #[schemars(with = "Option<ResourceStatus>")]
    pub status: Option<ResourceStatus>,
}

/// A resource status by its name.
fn status_filter<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<ResourceStatus>, D::Error> {
    let raw = String::deserialize(deserializer)?;
    [
        ResourceStatus::Running,
        ResourceStatus::Exited,
        ResourceStatus::Stopped,
        ResourceStatus::Unknown,
    ]
    .into_iter()
    .find(|s| s.as_str() == raw)
    .map(Some)
    .ok_or_else(|| {
        refuse(&format!(
            "{raw:?} is not one of running, exited, stopped, unknown"
        ))
    })
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

#[derive(Debug, Serialize, JsonSchema)]
pub struct ResourceContext {
    pub resource: Resource,
    /// The summarized window, in minutes.
    pub metrics_window_minutes: i64,
    pub metrics: Vec<MetricSummary>,
    pub open_findings: Vec<Finding>,
    pub open_finding_counts: SeverityCounts,
    /// Firing alerts of the resource.
    pub firing_alerts: Vec<Alert>,
    /// The newest actions on the resource, newest first.
    pub recent_actions: Vec<ActionView>,
    /// Whether the resource is marked never_auto_remediate.
    pub never_auto_remediate: bool,
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

/// One capability a resource advertises.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ActionCapabilityEntry {
    /// The capability wire name (`service.restart`, ...): matched exactly.
    pub name: String,
    pub description: String,
    /// A closed JSON schema of the params (`target` etc.).
    pub params_schema: Value,
    /// Param names whose values are sensitive; a proposal naming one is refused.
    #[serde(default)]
    pub sensitive_params: Vec<String>,
    pub approval_floor: ApprovalFloor,
    /// Whether tenant policy may authorize it without a human (floor `none`); the decision is
    /// still the broker's, at plan time.
    pub auto_approval_eligible: bool,
    /// How much can go wrong when it runs: `low`, `medium` or `high` (`guest.stop`).
    pub risk_level: RiskLevel,
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
