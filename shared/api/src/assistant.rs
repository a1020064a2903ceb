//! Pulse Assistant: `POST /api/ai/chat` (a Server-Sent Events turn) and the session routes
//! under `/api/ai/sessions`.

use chrono::{DateTime, Utc};
use pulse_capabilities::ControlLevel;
use pulse_domain::finding::FindingId;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::constraints::Text;

/// Characters of a prompt or a steer.
pub const MAX_PROMPT_CHARS: usize = 16_000;

uuid_id! {
    /// An Assistant session's id (`/api/ai/sessions/{id}/...`).
    SessionId
}

/// A prompt, a steer or a title: text with content, at most [`MAX_PROMPT_CHARS`] characters.
pub type PromptText = Text<MAX_PROMPT_CHARS>;

/// `POST /api/ai/chat`. `finding_id` and `control_level` set up a new session, so they are left
/// out (or null) when `session_id` continues one.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["session_id"], "properties": {"session_id": {"type": "string"}}},
    "then" = {"properties": {"finding_id": {"type": "null"}, "control_level": {"type": "null"}}}
))]
pub struct ChatBody {
    /// The operator's message (1 to 16,000 characters, not only white space).
    #[schemars(with = "PromptText")]
    pub prompt: String,
    /// Continue this session; without it a new session starts.
    #[serde(default)]
    pub session_id: Option<Uuid>,
    /// Start from a finding (handoff): the session is approval-required.
    #[serde(default)]
    #[schemars(with = "Option<FindingId>")]
    pub finding_id: Option<String>,
    /// `read_only` (default), `controlled` or `autonomous`; for a new session only.
    #[serde(default)]
    pub control_level: Option<ControlLevelBody>,
}

/// A control level on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ControlLevelBody {
    ReadOnly,
    Controlled,
    Autonomous,
}

impl From<ControlLevelBody> for ControlLevel {
    fn from(level: ControlLevelBody) -> Self {
        match level {
            ControlLevelBody::ReadOnly => ControlLevel::ReadOnly,
            ControlLevelBody::Controlled => ControlLevel::Controlled,
            ControlLevelBody::Autonomous => ControlLevel::Autonomous,
        }
    }
}

/// A session as the API shows it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionView {
    pub id: Uuid,
    /// `chat`, `patrol` or `investigation`.
    pub kind: String,
    pub title: String,
    pub created_by: String,
    pub control_level: String,
    pub approval_required: bool,
    pub finding_id: Option<String>,
    /// `idle` or `running`.
    pub status: String,
    pub model_route: Option<String>,
    pub forked_from: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionView>,
}

/// One transcript row of the restore view. Provider reasoning is never stored, so never shown.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MessageView {
    pub seq: i64,
    pub id: Uuid,
    pub turn_id: Uuid,
    /// `user`, `assistant`, `tool`, `approval`, `question`, `outcome`, `summary`, `steer`,
    /// `error`.
    pub role: String,
    /// `done`, `running`, `failed`, `cancelled`, `denied`, `pending`, `applied`.
    pub state: String,
    pub text: String,
    /// A tool row: `{call_id, name, input, output, reason}`.
    pub tool: Option<Value>,
    /// An approval, question or outcome card.
    pub card: Option<Value>,
    pub model_route: Option<String>,
    pub action_id: Option<Uuid>,
    pub undone: bool,
    pub compacted: bool,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MessageList {
    pub session: SessionView,
    pub messages: Vec<MessageView>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionsQuery {
    /// Include Patrol and investigation transcripts (read only).
    #[serde(default)]
    pub include_system: bool,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessagesQuery {
    /// Include rows an undo took back.
    #[serde(default)]
    pub include_undone: bool,
}

/// `POST /api/ai/sessions`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSessionBody {
    /// "New chat" when absent.
    #[serde(default)]
    #[schemars(length(max = MAX_PROMPT_CHARS))]
    pub title: Option<String>,
    #[serde(default)]
    pub control_level: Option<ControlLevelBody>,
    #[serde(default)]
    #[schemars(with = "Option<FindingId>")]
    pub finding_id: Option<String>,
}

/// `PATCH /api/ai/sessions/{id}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameBody {
    #[schemars(with = "PromptText")]
    pub title: String,
}

/// `POST /api/ai/sessions/{id}/fork`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// Copy rows up to and including this `seq`; all live rows without it.
    #[serde(
        default,
        deserialize_with = "crate::constraints::optional_whole_number"
    )]
    pub through_seq: Option<i64>,
}

/// `POST /api/ai/sessions/{id}/undo` and `/redo`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UndoBody {
    /// The prompt of the turn to undo (or redo), exactly as the messages show it.
    pub expected_prompt: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UndoAnswer {
    pub session_id: Uuid,
    pub turn_id: Uuid,
    /// `undone` or `redone`.
    pub result: String,
}

/// `POST /api/ai/sessions/{id}/steer`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SteerBody {
    #[schemars(with = "PromptText")]
    pub text: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SteerAnswer {
    pub session_id: Uuid,
    pub steer_id: Uuid,
    /// `pending` until the running turn reaches its next boundary (`steer_applied`).
    pub state: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AbortAnswer {
    pub session_id: Uuid,
    /// The turn that was asked to stop; `None` when the session was idle.
    pub turn_id: Option<Uuid>,
    pub aborted: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SummarizeAnswer {
    pub session_id: Uuid,
    pub compacted_rows: u64,
    pub summary_chars: u64,
    pub model_route: String,
}
