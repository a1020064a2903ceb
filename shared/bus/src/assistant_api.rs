//! Pulse Assistant between the gateway and the model-runner.
//!
//! | subject | kind | type |
//! |---|---|---|
//! | `pulse.<tenant>.assistant.turn` | request/reply (queue group `model-runner`) | [`AssistantTurnRequest`] → [`AssistantTurnAccepted`] |
//! | `pulse.<tenant>.assistant.summarize` | request/reply | [`AssistantSummarizeRequest`] → [`AssistantSummarizeReply`] |
//! | `pulse.<tenant>.assistant.session.<session>.events` | core publish | [`AssistantEvent`] |
//! | `pulse.<tenant>.assistant.abort` | core publish, every runner | [`AssistantAbort`] |
//!
//! The gateway stores the user's prompt and marks the session running before it asks for a
//! turn; the runner that accepts it reads the transcript, runs the model and publishes the
//! turn's events live on the session subject, in order (`seq`). Live events go over core NATS,
//! not the outbox: they are deltas of one open stream, and the durable record is the sealed
//! transcript the runner writes as it goes (a reconnecting client restores from it).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use pulse_capabilities::ErrorCode;

use crate::subjects::Subjects;
use crate::{Endpoint, Message, Request};
use pulse_domain::TenantId;

/// The queue group the model-runner replicas share Assistant requests in.
pub const ASSISTANT_QUEUE_GROUP: &str = "model-runner";

/// What the caller may do, decided by the gateway from its token or session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssistantCaller {
    /// `user:<id>` or `token:<id>`: the actor a planned action is requested by.
    pub actor: String,
    /// The caller holds `actions:plan` (a plan may be made on its behalf).
    pub may_plan: bool,
}

/// Run one Assistant turn of a session whose prompt is already stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssistantTurnRequest {
    pub session_id: Uuid,
    pub turn_id: Uuid,
    pub caller: AssistantCaller,
    /// The effective control level: `read_only`, `controlled` or `autonomous`.
    pub control_level: String,
    /// Started from a finding: every planned change needs approval.
    pub approval_required: bool,
}

impl Message for AssistantTurnRequest {
    const TYPE: &'static str = "pulse.assistant.turn";
}

impl Request for AssistantTurnRequest {
    type Reply = AssistantTurnAccepted;
}

impl Endpoint for AssistantTurnRequest {
    const SUBJECT: &'static str = "assistant.turn";
    const QUEUE_GROUP: &'static str = ASSISTANT_QUEUE_GROUP;
    /// Refusals before the turn starts; what fails later is a turn event, not a reply.
    const ERRORS: &'static [ErrorCode] = &[
        ErrorCode::AssistantNotConfigured,
        ErrorCode::ServiceUnavailable,
        ErrorCode::InternalError,
    ];
    const UNAVAILABLE: ErrorCode = ErrorCode::AssistantUnavailable;
}

/// The runner took the turn; its events follow on the session subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantTurnAccepted {
    pub turn_id: Uuid,
    /// The route the turn runs on (`provider:model`).
    pub model_route: String,
}

impl Message for AssistantTurnAccepted {
    const TYPE: &'static str = "pulse.assistant.turn_accepted";
}

/// Compact an idle session: a bounded, redacted transcript is summarised by the chat model and
/// the summary replaces the older rows in the model's context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssistantSummarizeRequest {
    pub session_id: Uuid,
}

impl Message for AssistantSummarizeRequest {
    const TYPE: &'static str = "pulse.assistant.summarize";
}

impl Request for AssistantSummarizeRequest {
    type Reply = AssistantSummarizeReply;
}

impl Endpoint for AssistantSummarizeRequest {
    const SUBJECT: &'static str = "assistant.summarize";
    const QUEUE_GROUP: &'static str = ASSISTANT_QUEUE_GROUP;
    const ERRORS: &'static [ErrorCode] = &[
        ErrorCode::AssistantSessionNotFound,
        ErrorCode::AssistantSessionBusy,
        ErrorCode::AssistantNotConfigured,
        ErrorCode::AssistantUnavailable,
        ErrorCode::ServiceUnavailable,
        ErrorCode::InternalError,
    ];
    const UNAVAILABLE: ErrorCode = ErrorCode::AssistantUnavailable;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantSummarizeReply {
    pub session_id: Uuid,
    /// Rows the summary replaced in the model's context.
    pub compacted_rows: u64,
    pub summary_chars: u64,
    pub model_route: String,
}

impl Message for AssistantSummarizeReply {
    const TYPE: &'static str = "pulse.assistant.summarize_reply";
}

/// Stop a running turn (the operator pressed Stop, or the client went away). Every runner
/// hears it; the one running the turn cancels the provider call and ends the turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssistantAbort {
    pub session_id: Uuid,
    pub turn_id: Uuid,
    /// `user_abort` or `client_disconnected`.
    pub reason: String,
}

impl Message for AssistantAbort {
    const TYPE: &'static str = "pulse.assistant.abort";
}

/// One live event of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantEvent {
    pub session_id: Uuid,
    pub turn_id: Uuid,
    /// Position in the turn, from 1.
    pub seq: u64,
    /// The browser-facing event: `{"type": ..., "data": ...}` as the SSE stream sends it. Only
    /// client-safe events are ever published.
    pub event: ChatEvent,
}

impl Message for AssistantEvent {
    const TYPE: &'static str = "pulse.assistant.event";
}

/// A browser-facing Assistant stream event. The SSE event name is `kind`; the data is `data`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatEvent {
    pub kind: ChatEventKind,
    pub data: serde_json::Value,
}

/// The closed family of Assistant stream events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatEventKind {
    Session,
    WorkflowState,
    Content,
    ToolStart,
    ToolProgress,
    ToolEnd,
    ToolCancel,
    ApprovalNeeded,
    ActionOutcome,
    Question,
    SteerApplied,
    StreamIdle,
    Done,
    Error,
}

impl ChatEventKind {
    pub const ALL: [ChatEventKind; 14] = [
        Self::Session,
        Self::WorkflowState,
        Self::Content,
        Self::ToolStart,
        Self::ToolProgress,
        Self::ToolEnd,
        Self::ToolCancel,
        Self::ApprovalNeeded,
        Self::ActionOutcome,
        Self::Question,
        Self::SteerApplied,
        Self::StreamIdle,
        Self::Done,
        Self::Error,
    ];

    /// The wire names of [`ChatEventKind::ALL`], in order.
    pub const NAMES: [&'static str; 14] = {
        let mut names = [""; 14];
        let mut i = 0;
        while i < 14 {
            names[i] = Self::ALL[i].as_str();
            i += 1;
        }
        names
    };

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::WorkflowState => "workflow_state",
            Self::Content => "content",
            Self::ToolStart => "tool_start",
            Self::ToolProgress => "tool_progress",
            Self::ToolEnd => "tool_end",
            Self::ToolCancel => "tool_cancel",
            Self::ApprovalNeeded => "approval_needed",
            Self::ActionOutcome => "action_outcome",
            Self::Question => "question",
            Self::SteerApplied => "steer_applied",
            Self::StreamIdle => "stream_idle",
            Self::Done => "done",
            Self::Error => "error",
        }
    }

    /// `done` and `error` end a turn.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Done | Self::Error)
    }
}

impl ChatEvent {
    pub fn new(kind: ChatEventKind, data: serde_json::Value) -> Self {
        Self { kind, data }
    }
}

/// `pulse.<tenant>.assistant.session.<session>.events` ([`Subjects::assistant_session_events`]).
pub fn session_events_subject(subjects: &Subjects, tenant: &TenantId, session: Uuid) -> String {
    subjects.assistant_session_events(tenant, session)
}

/// `pulse.<tenant>.assistant.abort` ([`Subjects::assistant_abort`]).
pub fn abort_subject(subjects: &Subjects, tenant: &TenantId) -> String {
    subjects.assistant_abort(tenant)
}
