//! Domain events published on `pulse.<tenant>.events.<domain>.<event>`: resources, alerts,
//! settings, Patrol runs and actions. The event types live here or in `pulse-domain`; this module
//! gives them their wire identity. Requests and their replies live with the API of the service
//! that serves them ([`crate::patrol_api`], [`crate::actions_api`], [`crate::verify_api`],
//! [`crate::relay_api`]).

use pulse_domain::ai_settings::SettingsChanged;
use pulse_domain::alert_rules::AlertTransition;
use pulse_domain::resource::ResourceChanged;

use crate::Message;

/// `events.resource.changed`: domain and event tokens of the subject.
pub const RESOURCE_CHANGED: (&str, &str) = ("resource", "changed");

impl Message for ResourceChanged {
    const TYPE: &'static str = "pulse.resource.changed";
}

/// `events.alert.fired`: an alert started firing.
pub const ALERT_FIRED: (&str, &str) = ("alert", "fired");
/// `events.alert.level_changed`: a firing alert changed level.
pub const ALERT_LEVEL_CHANGED: (&str, &str) = ("alert", "level_changed");
/// `events.alert.cleared`: a firing alert cleared.
pub const ALERT_CLEARED: (&str, &str) = ("alert", "cleared");

/// The event a lifecycle transition is published as.
pub fn alert_event(transition: &AlertTransition) -> (&'static str, &'static str) {
    match transition {
        AlertTransition::Fired { .. } => ALERT_FIRED,
        AlertTransition::LevelChanged { .. } => ALERT_LEVEL_CHANGED,
        AlertTransition::Cleared { .. } => ALERT_CLEARED,
    }
}

impl Message for AlertTransition {
    const TYPE: &'static str = "pulse.alert.transition";
}

/// `events.settings.changed`: a tenant's AI settings were saved.
pub const SETTINGS_CHANGED: (&str, &str) = ("settings", "changed");

impl Message for SettingsChanged {
    const TYPE: &'static str = "pulse.settings.changed";
}

/// `events.run.accepted`: a Patrol run was accepted and recorded `queued`.
pub const RUN_ACCEPTED: (&str, &str) = ("run", "accepted");

/// `events.run.started`: a runner took a run's job and holds its lease.
pub const RUN_STARTED: (&str, &str) = ("run", "started");
/// `events.run.progress`: a running run made a provider call; its accounting so far.
pub const RUN_PROGRESS: (&str, &str) = ("run", "progress");
/// `events.run.tool`: one tool call of a run (bounded input and output).
pub const RUN_TOOL: (&str, &str) = ("run", "tool");
/// `events.run.completed`: a run ended in its one terminal status.
pub const RUN_COMPLETED: (&str, &str) = ("run", "completed");

/// The payload of `events.run.started`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunStarted {
    pub run_id: pulse_domain::patrol::run::RunId,
    #[serde(rename = "type")]
    pub run_type: pulse_domain::patrol::run::RunType,
    pub trigger_reason: pulse_domain::patrol::run::TriggerReason,
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// The runner holding the run's lease.
    pub runner_id: String,
    /// The canonical ids the run covers, re-resolved at start (empty for a full run).
    pub effective_scope_resource_ids: Vec<String>,
}

impl Message for RunStarted {
    const TYPE: &'static str = "pulse.patrol.run_started";
}

/// The payload of `events.run.progress`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunProgress {
    pub run_id: pulse_domain::patrol::run::RunId,
    /// Provider calls made so far.
    pub provider_calls: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub at: chrono::DateTime<chrono::Utc>,
}

impl Message for RunProgress {
    const TYPE: &'static str = "pulse.patrol.run_progress";
}

/// The payload of `events.run.tool`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunTool {
    pub run_id: pulse_domain::patrol::run::RunId,
    #[serde(flatten)]
    pub call: pulse_domain::patrol::run::ToolCallRecord,
}

impl Message for RunTool {
    const TYPE: &'static str = "pulse.patrol.run_tool";
}

/// The payload of `events.run.completed`: the terminal status and the run's accounting.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunCompleted {
    pub run_id: pulse_domain::patrol::run::RunId,
    #[serde(rename = "type")]
    pub run_type: pulse_domain::patrol::run::RunType,
    pub status: pulse_domain::patrol::run::RunStatus,
    pub error_cause: Option<pulse_domain::patrol::run::ErrorCause>,
    pub error_summary: Option<String>,
    pub completed_at: Option<chrono::DateTime<chrono::Utc>>,
    pub duration_ms: Option<u64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `None` when the route has no known price.
    pub cost_usd: Option<f64>,
    pub new_findings: u32,
    pub tool_call_count: u32,
}

impl RunCompleted {
    /// The event of a run's terminal record.
    pub fn of(run: &pulse_domain::patrol::run::PatrolRun) -> Self {
        Self {
            run_id: run.id,
            run_type: run.run_type,
            status: run.status,
            error_cause: run.error_cause,
            error_summary: run.error_summary.clone(),
            completed_at: run.completed_at,
            duration_ms: run.duration_ms,
            input_tokens: run.input_tokens,
            output_tokens: run.output_tokens,
            cost_usd: run.cost_usd,
            new_findings: run.new_findings,
            tool_call_count: run.tool_call_count,
        }
    }
}

impl Message for RunCompleted {
    const TYPE: &'static str = "pulse.patrol.run_completed";
}

/// `events.approval.pending`: a plan waits for a human decision.
pub const APPROVAL_PENDING: (&str, &str) = ("approval", "pending");
/// `events.action.completed`: an action reached `completed` or `failed`.
pub const ACTION_COMPLETED: (&str, &str) = ("action", "completed");

/// The payload of `events.approval.pending`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApprovalPending {
    pub action_id: uuid::Uuid,
    pub resource_id: String,
    pub capability: String,
    pub severity: pulse_domain::action::Severity,
    pub approval_floor: pulse_domain::action::ApprovalFloor,
    pub plan_hash: String,
    pub expires_at: chrono::DateTime<chrono::Utc>,
}

impl Message for ApprovalPending {
    const TYPE: &'static str = "pulse.actions.approval_pending";
}

/// The payload of `events.action.completed`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ActionCompleted {
    pub action_id: uuid::Uuid,
    /// `completed` or `failed`.
    pub state: pulse_domain::action::ActionState,
    pub plan_hash: String,
    pub reason: Option<String>,
    pub at: chrono::DateTime<chrono::Utc>,
}

impl Message for ActionCompleted {
    const TYPE: &'static str = "pulse.actions.completed";
}

/// `events.finding.created`: a finding was recorded for the first time, or a resolved one
/// regressed (came back).
pub const FINDING_CREATED: (&str, &str) = ("finding", "created");
/// `events.finding.updated`: any other lifecycle change of a finding (acknowledge, snooze,
/// dismiss, undo, suppress, note, severity change, a re-detection that changed something).
pub const FINDING_UPDATED: (&str, &str) = ("finding", "updated");
/// `events.finding.resolved`: an open finding resolved (by an operator, a verdict, absence
/// from a full run or a verified fix).
pub const FINDING_RESOLVED: (&str, &str) = ("finding", "resolved");

/// Which of the three finding events a change is published as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingChange {
    Created,
    Updated,
    Resolved,
}

impl FindingChange {
    /// The event's domain and event tokens.
    pub fn event(self) -> (&'static str, &'static str) {
        match self {
            FindingChange::Created => FINDING_CREATED,
            FindingChange::Updated => FINDING_UPDATED,
            FindingChange::Resolved => FINDING_RESOLVED,
        }
    }
}

/// The payload of `events.finding.created|updated|resolved`: what a UI or an agent needs to act
/// on the finding without reading it again. Published by the finding store in the transaction
/// that changed the finding.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FindingChanged {
    pub finding_id: pulse_domain::finding::FindingId,
    /// The tenant-free key of the problem (`cpu-pressure`, `service-unhealthy`).
    pub key: pulse_domain::finding::FindingKey,
    pub resource_id: String,
    pub resource_name: String,
    pub severity: pulse_domain::finding::Severity,
    pub category: pulse_domain::finding::Category,
    /// The finding's status after the change.
    pub status: pulse_domain::finding::FindingStatus,
    pub title: String,
    pub change: FindingChange,
    /// The newest lifecycle event the change appended (`acknowledged`, `regressed`...); `None`
    /// for a change that appended none (a severity change on re-detection).
    pub lifecycle_event: Option<pulse_domain::finding::LifecycleEventType>,
    /// The finding's version after the change (what an `If-Match` names).
    pub version: i64,
    pub at: chrono::DateTime<chrono::Utc>,
}

impl Message for FindingChanged {
    const TYPE: &'static str = "pulse.finding.changed";
}
