//! The action-broker's request/reply API: plan, decide and execute governed actions, and read a
//! resource's typed action catalogue.
//!
//! | subject | request | reply |
//! |---|---|---|
//! | `pulse.<tenant>.actions.plan.request` | [`ActionPlanRequest`] | [`ActionReply`] |
//! | `pulse.<tenant>.actions.decide.request` | [`ActionDecisionRequest`] | [`ActionReply`] |
//! | `pulse.<tenant>.actions.execute.request` | [`ActionExecuteRequest`] | [`ActionReply`] |
//! | `pulse.<tenant>.actions.capabilities.request` | [`ActionCapabilitiesRequest`] | [`ActionCapabilitiesReply`] |
//!
//! Callers use [`crate::clients::ActionBrokerClient`].

use pulse_capabilities::ErrorCode;

use crate::{Endpoint, Message};

/// `pulse.<tenant>.actions.plan.request`: ask the action-broker to plan an action.
pub const ACTION_PLAN_REQUEST: &str = "actions.plan.request";
/// `pulse.<tenant>.actions.decide.request`: a human's approval or rejection of a pending plan.
pub const ACTION_DECIDE_REQUEST: &str = "actions.decide.request";
/// `pulse.<tenant>.actions.execute.request`: run an approved plan.
pub const ACTION_EXECUTE_REQUEST: &str = "actions.execute.request";
/// The queue group the action-broker replicas share the action requests in.
pub const ACTIONS_QUEUE_GROUP: &str = "action-broker";

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
    /// How much can go wrong when it runs (`low`, `medium`, `high`).
    #[serde(default)]
    pub risk_level: pulse_domain::action::RiskLevel,
}

/// Every code the action-broker answers a plan, decision or execution with (one error type
/// serves the three; the catalogue request declares its own few).
pub const ACTION_BROKER_ERRORS: &[ErrorCode] = &[
    ErrorCode::ServiceUnavailable,
    ErrorCode::InternalError,
    ErrorCode::ActionNotFound,
    ErrorCode::NotFound,
    ErrorCode::AmbiguousResource,
    ErrorCode::InvalidActionRequest,
    ErrorCode::Conflict,
    ErrorCode::ActionDecisionNotAllowed,
    ErrorCode::ActionNotApproved,
    ErrorCode::ActionAlreadyExecuting,
    ErrorCode::ActionExecutionFinal,
    ErrorCode::ActionStepUpUnavailable,
    ErrorCode::ActionSelfApprovalForbidden,
    ErrorCode::ActionDecisionRequiresHuman,
    ErrorCode::ActionPlanExpired,
    ErrorCode::ActionPlanDrift,
    ErrorCode::ResourceRemediationLocked,
    ErrorCode::ActionRefused,
];

impl Endpoint for ActionPlanRequest {
    const SUBJECT: &'static str = ACTION_PLAN_REQUEST;
    const QUEUE_GROUP: &'static str = ACTIONS_QUEUE_GROUP;
    const ERRORS: &'static [ErrorCode] = ACTION_BROKER_ERRORS;
    const UNAVAILABLE: ErrorCode = ErrorCode::ActionExecutorUnavailable;
}

impl Endpoint for ActionDecisionRequest {
    const SUBJECT: &'static str = ACTION_DECIDE_REQUEST;
    const QUEUE_GROUP: &'static str = ACTIONS_QUEUE_GROUP;
    const ERRORS: &'static [ErrorCode] = ACTION_BROKER_ERRORS;
    const UNAVAILABLE: ErrorCode = ErrorCode::ActionExecutorUnavailable;
}

impl Endpoint for ActionExecuteRequest {
    const SUBJECT: &'static str = ACTION_EXECUTE_REQUEST;
    const QUEUE_GROUP: &'static str = ACTIONS_QUEUE_GROUP;
    const ERRORS: &'static [ErrorCode] = ACTION_BROKER_ERRORS;
    const UNAVAILABLE: ErrorCode = ErrorCode::ActionExecutorUnavailable;
}

impl Endpoint for ActionCapabilitiesRequest {
    const SUBJECT: &'static str = ACTION_CAPABILITIES_REQUEST;
    const QUEUE_GROUP: &'static str = ACTIONS_QUEUE_GROUP;
    /// The catalogue reads one resource: a bad reference, none, several, or no database.
    const ERRORS: &'static [ErrorCode] = &[
        ErrorCode::InvalidActionRequest,
        ErrorCode::NotFound,
        ErrorCode::AmbiguousResource,
        ErrorCode::ServiceUnavailable,
        ErrorCode::InternalError,
    ];
    const UNAVAILABLE: ErrorCode = ErrorCode::ActionExecutorUnavailable;
}
