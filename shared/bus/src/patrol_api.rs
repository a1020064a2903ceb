//! The Patrol request/reply API: manual runs (served by the patrol-scheduler) and preflights
//! (served by the model-runner), and the job a runner takes to execute an accepted run.
//!
//! | subject | request | reply | served by |
//! |---|---|---|---|
//! | `pulse.<tenant>.patrol.run.request` | [`PatrolRunRequest`] | [`PatrolRunAccepted`] | patrol-scheduler |
//! | `pulse.<tenant>.patrol.preflight.request` | [`PatrolPreflightRequest`] | [`PreflightRecord`](pulse_domain::patrol::readiness::PreflightRecord) | model-runner |
//!
//! Callers use [`crate::clients::PatrolClient`].

use pulse_capabilities::ErrorCode;

use crate::{Endpoint, Message};

/// `pulse.<tenant>.patrol.run.request`: ask the patrol-scheduler to accept a manual run.
pub const PATROL_RUN_REQUEST: &str = "patrol.run.request";
/// The queue group the patrol-scheduler replicas share run requests in.
pub const PATROL_RUN_QUEUE_GROUP: &str = "patrol-scheduler";
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

impl Endpoint for PatrolRunRequest {
    const SUBJECT: &'static str = PATROL_RUN_REQUEST;
    const QUEUE_GROUP: &'static str = PATROL_RUN_QUEUE_GROUP;
    /// The patrol-scheduler's refusals of a run (its `AcceptError`).
    const ERRORS: &'static [ErrorCode] = &[
        ErrorCode::PatrolDisabled,
        ErrorCode::TenantSuspended,
        ErrorCode::QuotaExceeded,
        ErrorCode::PatrolNotReady,
        ErrorCode::UnprocessableScope,
        ErrorCode::PatrolRunInProgress,
        ErrorCode::PatrolQueueFull,
        ErrorCode::ServiceUnavailable,
        ErrorCode::InternalError,
    ];
    const UNAVAILABLE: ErrorCode = ErrorCode::PatrolSchedulerUnavailable;
}

impl Endpoint for PatrolPreflightRequest {
    const SUBJECT: &'static str = PATROL_PREFLIGHT_REQUEST;
    const QUEUE_GROUP: &'static str = PATROL_PREFLIGHT_QUEUE_GROUP;
    /// No Patrol route to check, or the store failed (the model-runner's `PreflightError`).
    const ERRORS: &'static [ErrorCode] = &[
        ErrorCode::PatrolNotReady,
        ErrorCode::ServiceUnavailable,
        ErrorCode::InternalError,
    ];
    const UNAVAILABLE: ErrorCode = ErrorCode::PatrolRunnerUnavailable;
}
