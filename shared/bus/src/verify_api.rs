//! The verifier's request/reply API: resolution checks (is the fault behind a finding gone?) and
//! postcondition checks (did an executed action work?), both judged on fresh observations.
//!
//! | subject | request | reply |
//! |---|---|---|
//! | `pulse.<tenant>.verify.resolution` | [`ResolutionCheckRequest`] | [`ResolutionCheckReply`] |
//! | `pulse.<tenant>.verify.postcondition` | [`PostconditionRequest`] | [`PostconditionReply`] |
//!
//! Callers use [`crate::clients::VerifierClient`].

use pulse_capabilities::ErrorCode;

use crate::{Endpoint, Message};

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

/// Every code the verifier answers a check with: a malformed request, or an inventory it could
/// not read (so no judgement was made).
pub const VERIFIER_ERRORS: &[ErrorCode] =
    &[ErrorCode::InvalidRequest, ErrorCode::ServiceUnavailable];

impl Endpoint for ResolutionCheckRequest {
    const SUBJECT: &'static str = VERIFY_RESOLUTION;
    const QUEUE_GROUP: &'static str = VERIFIER_QUEUE_GROUP;
    const ERRORS: &'static [ErrorCode] = VERIFIER_ERRORS;
    const UNAVAILABLE: ErrorCode = ErrorCode::ServiceUnavailable;
}

impl Endpoint for PostconditionRequest {
    const SUBJECT: &'static str = VERIFY_POSTCONDITION;
    const QUEUE_GROUP: &'static str = VERIFIER_QUEUE_GROUP;
    const ERRORS: &'static [ErrorCode] = VERIFIER_ERRORS;
    const UNAVAILABLE: ErrorCode = ErrorCode::ServiceUnavailable;
}
