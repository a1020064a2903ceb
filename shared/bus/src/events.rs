//! Domain events published on `pulse.<tenant>.events.<domain>.<event>`. The event types live in
//! `pulse-domain`; this module gives them their wire identity.

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

/// `pulse.<tenant>.patrol.run.request`: ask the patrol-scheduler to accept a manual run.
pub const PATROL_RUN_REQUEST: &str = "patrol.run.request";
/// The queue group the patrol-scheduler replicas share run requests in.
pub const PATROL_RUN_QUEUE_GROUP: &str = "patrol-scheduler";
/// `events.run.accepted`: a Patrol run was accepted and recorded `queued`.
pub const RUN_ACCEPTED: (&str, &str) = ("run", "accepted");
/// `jobs.watch`: the job a runner takes to execute an accepted Patrol run.
pub const WATCH_JOB: &str = "watch";

/// A manual run request: the parsed body (`None` for a full run) and who asked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PatrolRunRequest {
    pub scope: Option<pulse_domain::patrol::scope::ScopedRequest>,
    /// The requesting actor (token name), recorded on the run.
    pub requested_by: String,
}

impl Message for PatrolRunRequest {
    const TYPE: &'static str = "pulse.patrol.run_request";
}

impl crate::Request for PatrolRunRequest {
    type Reply = PatrolRunAccepted;
}

/// The reply to [`PatrolRunRequest`], and the payload of `events.run.accepted`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PatrolRunAccepted {
    pub run_id: pulse_domain::patrol::run::RunId,
    pub trigger_reason: pulse_domain::patrol::run::TriggerReason,
    #[serde(rename = "type")]
    pub run_type: pulse_domain::patrol::run::RunType,
    pub queued_at: chrono::DateTime<chrono::Utc>,
    pub scope_resource_ids: Vec<String>,
    pub effective_scope_resource_ids: Vec<String>,
}

impl Message for PatrolRunAccepted {
    const TYPE: &'static str = "pulse.patrol.run_accepted";
}

/// The `jobs.watch` message: which accepted run to execute.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WatchJob {
    pub run_id: pulse_domain::patrol::run::RunId,
    #[serde(rename = "type")]
    pub run_type: pulse_domain::patrol::run::RunType,
    pub trigger_reason: pulse_domain::patrol::run::TriggerReason,
}

impl Message for WatchJob {
    const TYPE: &'static str = "pulse.patrol.watch";
}

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

/// `pulse.<tenant>.patrol.preflight.request`: ask a model-runner to run a fresh Patrol
/// preflight for the tenant's Patrol route now; the reply is the stored outcome.
pub const PATROL_PREFLIGHT_REQUEST: &str = "patrol.preflight.request";
/// The queue group the model-runner replicas share preflight requests in.
pub const PATROL_PREFLIGHT_QUEUE_GROUP: &str = "model-runner-preflight";

/// A preflight request: who asked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PatrolPreflightRequest {
    pub requested_by: String,
}

impl Message for PatrolPreflightRequest {
    const TYPE: &'static str = "pulse.patrol.preflight_request";
}

impl crate::Request for PatrolPreflightRequest {
    type Reply = pulse_domain::patrol::readiness::PreflightRecord;
}

impl Message for pulse_domain::patrol::readiness::PreflightRecord {
    const TYPE: &'static str = "pulse.patrol.preflight_record";
}

/// `pulse.<tenant>.verify.resolution`: ask the verifier whether the fault behind a finding is
/// gone, judged on a fresh observation from the agent (FIND-07..09). Fails closed: only
/// [`VerifierOutcome::Confirmed`](pulse_domain::finding::VerifierOutcome) lets a `resolved`
/// verdict through.
pub const VERIFY_RESOLUTION: &str = "verify.resolution";
/// The queue group the verifier replicas share resolution checks in.
pub const VERIFIER_QUEUE_GROUP: &str = "verifier";

/// A resolution check: the finding, its key and the canonical id of its resource.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolutionCheckRequest {
    pub finding_id: pulse_domain::finding::FindingId,
    /// Normalized on receipt (aliases such as `high-cpu` reach their verifier key).
    pub key: pulse_domain::finding::FindingKey,
    pub resource_id: String,
}

impl Message for ResolutionCheckRequest {
    const TYPE: &'static str = "pulse.verify.resolution";
}

impl crate::Request for ResolutionCheckRequest {
    type Reply = ResolutionCheckReply;
}

/// The verifier's answer. `reason` and `evidence` are built by the verifier from typed values
/// only (no agent-reported text), so they are safe to display and to hand to a model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ResolutionCheckReply {
    pub finding_id: pulse_domain::finding::FindingId,
    pub key: pulse_domain::finding::FindingKey,
    pub resource_id: String,
    pub outcome: pulse_domain::finding::VerifierOutcome,
    /// One sentence: why the outcome is what it is.
    pub reason: String,
    /// What was observed; `None` when no fresh observation could be had.
    pub evidence: Option<ResolutionEvidence>,
    /// When the verifier decided (its clock).
    pub checked_at: chrono::DateTime<chrono::Utc>,
}

impl Message for ResolutionCheckReply {
    const TYPE: &'static str = "pulse.verify.resolution_reply";
}

/// The fresh observation a resolution check judged, reduced to typed values.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ResolutionEvidence {
    /// When the agent read the source (the agent's clock).
    pub observed_at: chrono::DateTime<chrono::Utc>,
    #[serde(rename = "type")]
    pub resource_type: pulse_domain::resource::ResourceType,
    pub status: pulse_domain::resource::ResourceStatus,
    pub health: pulse_domain::resource::Health,
    pub restart_count: Option<u32>,
    /// The readings the check used (e.g. `memory_percent`, `exit_code`, `uptime_seconds`).
    pub readings: std::collections::BTreeMap<String, f64>,
}

/// `pulse.<tenant>.actions.plan.request`: ask the action-broker to plan an action.
pub const ACTION_PLAN_REQUEST: &str = "actions.plan.request";
/// `pulse.<tenant>.actions.decide.request`: a human's approval or rejection of a pending plan.
pub const ACTION_DECIDE_REQUEST: &str = "actions.decide.request";
/// `pulse.<tenant>.actions.execute.request`: run an approved plan.
pub const ACTION_EXECUTE_REQUEST: &str = "actions.execute.request";
/// The queue group the action-broker replicas share the action requests in.
pub const ACTIONS_QUEUE_GROUP: &str = "action-broker";
/// `events.approval.pending`: a plan waits for a human decision.
pub const APPROVAL_PENDING: (&str, &str) = ("approval", "pending");
/// `events.action.completed`: an action reached `completed` or `failed`.
pub const ACTION_COMPLETED: (&str, &str) = ("action", "completed");

/// Plan one typed capability on one resource.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionPlanRequest {
    pub resource_id: String,
    /// A capability wire name (`service.restart`, ...); an unknown one is refused.
    pub capability: String,
    /// An object; `target` names the service or container.
    pub params: serde_json::Value,
    pub reason: String,
    pub severity: pulse_domain::action::Severity,
    /// Raised to the capability's minimum, never lowered.
    pub approval_floor: Option<pulse_domain::action::ApprovalFloor>,
    /// `user:<id>` or `token:<id>` of the authenticated caller, or `patrol:investigation`.
    pub requested_by: String,
    /// The finding this action is meant to fix; its fix outcome (`fix_verified`,
    /// `fix_rejected`, ...) is written back to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding_id: Option<pulse_domain::finding::FindingId>,
}

impl Message for ActionPlanRequest {
    const TYPE: &'static str = "pulse.actions.plan_request";
}

impl crate::Request for ActionPlanRequest {
    type Reply = ActionReply;
}

/// A human's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionOutcome {
    Approved,
    Rejected,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionDecisionRequest {
    pub action_id: uuid::Uuid,
    pub outcome: DecisionOutcome,
    pub reason: String,
    /// `user:<id>` of the authenticated human; never taken from a request body.
    pub decided_by: String,
}

impl Message for ActionDecisionRequest {
    const TYPE: &'static str = "pulse.actions.decide_request";
}

impl crate::Request for ActionDecisionRequest {
    type Reply = ActionReply;
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionExecuteRequest {
    pub action_id: uuid::Uuid,
    pub requested_by: String,
}

impl Message for ActionExecuteRequest {
    const TYPE: &'static str = "pulse.actions.execute_request";
}

impl crate::Request for ActionExecuteRequest {
    type Reply = ActionReply;
}

/// The action after a plan, decision or execution request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ActionReply {
    pub action_id: uuid::Uuid,
    pub state: pulse_domain::action::ActionState,
    pub plan_hash: String,
    pub policy_decision: pulse_domain::action::PolicyDecision,
    /// Why it ended where it did: a refusal (`plan_drift: ...`) or the agent's failure reason.
    pub message: Option<String>,
}

impl Message for ActionReply {
    const TYPE: &'static str = "pulse.actions.reply";
}

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

/// `pulse.<tenant>.verify.postcondition`: ask the verifier whether an executed action's
/// postcondition holds, judged on fresh observations through the relay (never the command's
/// output). The verifier polls until the postcondition holds or the wait runs out.
pub const VERIFY_POSTCONDITION: &str = "verify.postcondition";

/// A postcondition check of one executed action.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostconditionRequest {
    pub action_id: uuid::Uuid,
    /// The canonical id of the acted-on resource.
    pub resource_id: String,
    pub agent_id: String,
    /// The capability wire name (`service.restart`, ...).
    pub capability: String,
    /// The service or container the command named.
    pub target: String,
    /// When the command ran (the receipt's time): a restart must be observed after it.
    pub executed_at: chrono::DateTime<chrono::Utc>,
    /// How long to keep polling; `None` takes the verifier's configured default (30 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

impl Message for PostconditionRequest {
    const TYPE: &'static str = "pulse.verify.postcondition";
}

impl crate::Request for PostconditionRequest {
    type Reply = PostconditionReply;
}

/// The verifier's judgement. `reason` is verifier-built text from typed values only.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PostconditionReply {
    pub action_id: uuid::Uuid,
    pub outcome: pulse_domain::action::Verification,
    pub reason: String,
    /// The last fresh observation judged; `None` when none could be had.
    pub evidence: Option<ResolutionEvidence>,
    /// Fresh observations taken.
    pub observations: u32,
    pub checked_at: chrono::DateTime<chrono::Utc>,
}

impl Message for PostconditionReply {
    const TYPE: &'static str = "pulse.verify.postcondition_reply";
}

/// `pulse.<tenant>.actions.capabilities.request`: the typed action catalogue of one resource
/// (Patrol investigation's `patrol_action_capabilities`). Read only: no plan, no approval.
pub const ACTION_CAPABILITIES_REQUEST: &str = "actions.capabilities.request";

/// Which resource's catalogue: a canonical id, or a provider coordinate (source id, name or
/// alias) that resolves to exactly one resource.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionCapabilitiesRequest {
    pub resource_id: String,
}

impl Message for ActionCapabilitiesRequest {
    const TYPE: &'static str = "pulse.actions.capabilities_request";
}

impl crate::Request for ActionCapabilitiesRequest {
    type Reply = ActionCapabilitiesReply;
}

/// A resource's typed action catalogue, always under its canonical id.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ActionCapabilitiesReply {
    /// The canonical id the request resolved to.
    pub resource_id: String,
    pub resource_type: pulse_domain::resource::ResourceType,
    pub resource_name: String,
    pub capabilities: Vec<ActionCapabilityEntry>,
}

impl Message for ActionCapabilitiesReply {
    const TYPE: &'static str = "pulse.actions.capabilities_reply";
}

/// One capability a resource advertises.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ActionCapabilityEntry {
    /// The capability wire name (`service.restart`, ...): matched exactly.
    pub name: String,
    pub description: String,
    /// A closed JSON schema of the params (`target` etc.).
    pub params_schema: serde_json::Value,
    /// Param names whose values are sensitive; a proposal naming one is refused.
    #[serde(default)]
    pub sensitive_params: Vec<String>,
    pub approval_floor: pulse_domain::action::ApprovalFloor,
    /// Whether tenant policy may authorize it without a human (floor `none`); the decision is
    /// still the broker's, at plan time.
    pub auto_approval_eligible: bool,
}
