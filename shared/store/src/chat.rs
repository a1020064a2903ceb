//! Pulse Assistant sessions and transcripts: the only reader and writer of `chat_sessions` and
//! `chat_messages`.
//!
//! Titles and message bodies are sealed with the master key; the associated data binds each
//! ciphertext to its tenant, session and row (`pulse-chat|<tenant>|<session>|<row>`), so a row
//! copied to another tenant or session does not open. Roles, states and the undo mark stay in
//! clear: the service orders and governs a transcript without reading it.
//!
//! A session runs at most one turn at a time ([`begin_turn`] is a compare-and-swap from `idle`);
//! [`end_turn`] returns it to `idle` and closes every tool row still `running` as `cancelled`, so
//! however a turn ends (done, error, abort, a client gone) no orphan tool row remains.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::settings::{MasterKey, Sealed};
use crate::{StoreError, TenantTx};

/// Characters of a session title.
pub const MAX_TITLE_CHARS: usize = 120;

/// Why a chat store call failed.
#[derive(Debug, thiserror::Error)]
pub enum ChatStoreError {
    #[error("no such session")]
    NotFound,
    /// The session is running a turn.
    #[error("the session is running a turn")]
    Busy,
    /// The session is a system session (Patrol, investigation): it is not resumed.
    #[error("the session is a system session and cannot be resumed")]
    SystemSession,
    /// An undo or redo whose `expected_prompt` is not the prompt it would act on.
    #[error("{0}")]
    Conflict(String),
    #[error("a sealed row cannot be opened: {0}")]
    Sealing(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<tokio_postgres::Error> for ChatStoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Store(StoreError::Database(e))
    }
}

/// What a session is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    Chat,
    /// Patrol and investigation transcripts: never offered for resume.
    Patrol,
    Investigation,
}

impl SessionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Patrol => "patrol",
            Self::Investigation => "investigation",
        }
    }

    fn parse(text: &str) -> Result<Self, StoreError> {
        match text {
            "chat" => Ok(Self::Chat),
            "patrol" => Ok(Self::Patrol),
            "investigation" => Ok(Self::Investigation),
            other => Err(StoreError::Invalid(format!(
                "unknown session kind {other:?}"
            ))),
        }
    }

    pub fn is_system(self) -> bool {
        !matches!(self, Self::Chat)
    }
}

/// A session as stored (title opened).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Session {
    pub id: Uuid,
    pub kind: SessionKind,
    pub title: String,
    pub created_by: String,
    /// `read_only`, `controlled` or `autonomous`.
    pub control_level: String,
    /// Started from a finding: every change needs approval, whatever the control level.
    pub approval_required: bool,
    pub finding_id: Option<String>,
    /// `idle` or `running`.
    pub status: String,
    pub active_turn: Option<Uuid>,
    pub model_route: Option<String>,
    pub forked_from: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Session {
    pub fn is_system(&self) -> bool {
        self.kind.is_system()
    }
}

/// What a new session starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    pub kind: SessionKind,
    pub title: String,
    pub created_by: String,
    pub control_level: String,
    pub approval_required: bool,
    pub finding_id: Option<String>,
}

/// A transcript row's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    Tool,
    /// An approval card: a planned action waiting for a human.
    Approval,
    /// A `pulse_question` card.
    Question,
    /// The verifier's outcome of an action this session planned, as Pulse read it.
    Outcome,
    /// A compaction summary standing in for the rows it replaced.
    Summary,
    /// Operator steering, applied at the next turn boundary.
    Steer,
    /// The one terminal error of a turn (safe text only).
    Error,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
            Self::Approval => "approval",
            Self::Question => "question",
            Self::Outcome => "outcome",
            Self::Summary => "summary",
            Self::Steer => "steer",
            Self::Error => "error",
        }
    }

    fn parse(text: &str) -> Result<Self, StoreError> {
        Ok(match text {
            "user" => Self::User,
            "assistant" => Self::Assistant,
            "tool" => Self::Tool,
            "approval" => Self::Approval,
            "question" => Self::Question,
            "outcome" => Self::Outcome,
            "summary" => Self::Summary,
            "steer" => Self::Steer,
            "error" => Self::Error,
            other => return Err(StoreError::Invalid(format!("unknown chat role {other:?}"))),
        })
    }
}

/// A transcript row's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowState {
    Done,
    /// A tool call still executing (only while its turn runs).
    Running,
    Failed,
    /// A tool call whose turn ended before it did, or that was skipped.
    Cancelled,
    /// A tool call the policy refused before dispatch.
    Denied,
    /// A steer not yet applied; an approval card not yet decided.
    Pending,
    /// A steer the turn applied.
    Applied,
}

impl RowState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Running => "running",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Denied => "denied",
            Self::Pending => "pending",
            Self::Applied => "applied",
        }
    }

    fn parse(text: &str) -> Result<Self, StoreError> {
        Ok(match text {
            "done" => Self::Done,
            "running" => Self::Running,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            "denied" => Self::Denied,
            "pending" => Self::Pending,
            "applied" => Self::Applied,
            other => return Err(StoreError::Invalid(format!("unknown row state {other:?}"))),
        })
    }
}

/// A tool call as the transcript keeps it (input and output bounded and redacted by the
/// runtime before they get here).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolRow {
    pub call_id: String,
    pub name: String,
    #[serde(default)]
    pub input: String,
    #[serde(default)]
    pub output: String,
    /// Why the call was skipped, refused or cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The sealed part of a row.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageBody {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolRow>,
    /// An approval, question or outcome card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card: Option<Value>,
}

impl MessageBody {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }
}

/// One transcript row (body opened).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatMessage {
    pub seq: i64,
    pub id: Uuid,
    pub turn_id: Uuid,
    pub role: Role,
    pub state: RowState,
    pub undone: bool,
    pub compacted: bool,
    pub body: MessageBody,
    pub model_route: Option<String>,
    pub action_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A row to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    pub turn_id: Uuid,
    pub role: Role,
    pub state: RowState,
    pub body: MessageBody,
    pub model_route: Option<String>,
    pub action_id: Option<Uuid>,
}

impl NewMessage {
    pub fn new(turn_id: Uuid, role: Role, body: MessageBody) -> Self {
        Self {
            turn_id,
            role,
            state: RowState::Done,
            body,
            model_route: None,
            action_id: None,
        }
    }

    pub fn with_state(mut self, state: RowState) -> Self {
        self.state = state;
        self
    }

    pub fn with_route(mut self, route: Option<String>) -> Self {
        self.model_route = route;
        self
    }

    pub fn with_action(mut self, action_id: Option<Uuid>) -> Self {
        self.action_id = action_id;
        self
    }
}

fn title_aad(tenant: &str, session: Uuid) -> Vec<u8> {
    format!("pulse-chat|{tenant}|{session}|title").into_bytes()
}

fn body_aad(tenant: &str, session: Uuid, row: Uuid) -> Vec<u8> {
    format!("pulse-chat|{tenant}|{session}|{row}").into_bytes()
}

fn seal(key: &MasterKey, aad: &[u8], plaintext: &[u8]) -> Result<Sealed, ChatStoreError> {
    key.seal_bytes(aad, plaintext)
        .ok_or_else(|| ChatStoreError::Sealing("encryption failed".to_owned()))
}

fn open(key: &MasterKey, aad: &[u8], sealed: Sealed) -> Result<Vec<u8>, ChatStoreError> {
    key.open_bytes(aad, &sealed)
        .map_err(|e| ChatStoreError::Sealing(e.to_owned()))
}

/// The title bounded to [`MAX_TITLE_CHARS`] and without control characters.
pub fn clean_title(title: &str) -> String {
    title
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(MAX_TITLE_CHARS)
        .collect()
}

const SESSION_COLUMNS: &str = "id, kind, title_sealed, title_nonce, key_id, created_by, \
     control_level, approval_required, finding_id, status, active_turn, model_route, forked_from, \
     created_at, updated_at";

fn session_from_row(tx: &TenantTx, key: &MasterKey, row: &Row) -> Result<Session, ChatStoreError> {
    let id: Uuid = row.try_get(0).map_err(StoreError::from)?;
    let kind: String = row.try_get(1).map_err(StoreError::from)?;
    let sealed = Sealed {
        ciphertext: row.try_get(2).map_err(StoreError::from)?,
        nonce: row.try_get(3).map_err(StoreError::from)?,
        key_id: row.try_get(4).map_err(StoreError::from)?,
    };
    let title = open(key, &title_aad(tx.tenant().as_str(), id), sealed)?;
    Ok(Session {
        id,
        kind: SessionKind::parse(&kind)?,
        title: String::from_utf8_lossy(&title).into_owned(),
        created_by: row.try_get(5).map_err(StoreError::from)?,
        control_level: row.try_get(6).map_err(StoreError::from)?,
        approval_required: row.try_get(7).map_err(StoreError::from)?,
        finding_id: row.try_get(8).map_err(StoreError::from)?,
        status: row.try_get(9).map_err(StoreError::from)?,
        active_turn: row.try_get(10).map_err(StoreError::from)?,
        model_route: row.try_get(11).map_err(StoreError::from)?,
        forked_from: row.try_get(12).map_err(StoreError::from)?,
        created_at: row.try_get(13).map_err(StoreError::from)?,
        updated_at: row.try_get(14).map_err(StoreError::from)?,
    })
}

/// Creates a session.
pub async fn create_session(
    tx: &TenantTx,
    key: &MasterKey,
    new: &NewSession,
) -> Result<Session, ChatStoreError> {
    create_with_id(tx, key, Uuid::new_v4(), new, None).await
}

async fn create_with_id(
    tx: &TenantTx,
    key: &MasterKey,
    id: Uuid,
    new: &NewSession,
    forked_from: Option<Uuid>,
) -> Result<Session, ChatStoreError> {
    let title = clean_title(&new.title);
    let sealed = seal(key, &title_aad(tx.tenant().as_str(), id), title.as_bytes())?;
    let row = tx
        .client()
        .query_one(
            &format!(
                "INSERT INTO chat_sessions (tenant_id, id, kind, title_sealed, title_nonce, \
                 key_id, created_by, control_level, approval_required, finding_id, forked_from) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 RETURNING {SESSION_COLUMNS}"
            ),
            &[
                &tx.tenant().as_str(),
                &id,
                &new.kind.as_str(),
                &sealed.ciphertext,
                &sealed.nonce,
                &sealed.key_id,
                &new.created_by,
                &new.control_level,
                &new.approval_required,
                &new.finding_id,
                &forked_from,
            ],
        )
        .await?;
    session_from_row(tx, key, &row)
}

/// The session, or [`ChatStoreError::NotFound`].
pub async fn get_session(
    tx: &TenantTx,
    key: &MasterKey,
    id: Uuid,
) -> Result<Session, ChatStoreError> {
    let row = tx
        .client()
        .query_opt(
            &format!("SELECT {SESSION_COLUMNS} FROM chat_sessions WHERE id = $1"),
            &[&id],
        )
        .await?
        .ok_or(ChatStoreError::NotFound)?;
    session_from_row(tx, key, &row)
}

/// Sessions, most recently updated first; system sessions only when asked for.
pub async fn list_sessions(
    tx: &TenantTx,
    key: &MasterKey,
    include_system: bool,
    limit: i64,
) -> Result<Vec<Session>, ChatStoreError> {
    let rows = tx
        .client()
        .query(
            &format!(
                "SELECT {SESSION_COLUMNS} FROM chat_sessions \
                 WHERE ($1 OR kind = 'chat') ORDER BY updated_at DESC, id LIMIT $2"
            ),
            &[&include_system, &limit],
        )
        .await?;
    rows.iter().map(|r| session_from_row(tx, key, r)).collect()
}

/// Renames a session.
pub async fn rename(
    tx: &TenantTx,
    key: &MasterKey,
    id: Uuid,
    title: &str,
) -> Result<Session, ChatStoreError> {
    let title = clean_title(title);
    let sealed = seal(key, &title_aad(tx.tenant().as_str(), id), title.as_bytes())?;
    let row = tx
        .client()
        .query_opt(
            &format!(
                "UPDATE chat_sessions SET title_sealed = $2, title_nonce = $3, key_id = $4, \
                 updated_at = now() WHERE id = $1 RETURNING {SESSION_COLUMNS}"
            ),
            &[&id, &sealed.ciphertext, &sealed.nonce, &sealed.key_id],
        )
        .await?
        .ok_or(ChatStoreError::NotFound)?;
    session_from_row(tx, key, &row)
}

/// Deletes a session and its transcript. A running session is not deleted.
pub async fn delete_session(tx: &TenantTx, id: Uuid) -> Result<(), ChatStoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT status FROM chat_sessions WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await?
        .ok_or(ChatStoreError::NotFound)?;
    let status: String = row.get(0);
    if status == "running" {
        return Err(ChatStoreError::Busy);
    }
    tx.client()
        .execute("DELETE FROM chat_sessions WHERE id = $1", &[&id])
        .await?;
    Ok(())
}

/// Marks the session running `turn` (compare-and-swap from `idle`); records the route it runs.
pub async fn begin_turn(
    tx: &TenantTx,
    id: Uuid,
    turn: Uuid,
    model_route: Option<&str>,
) -> Result<(), ChatStoreError> {
    let started = tx
        .client()
        .execute(
            "UPDATE chat_sessions SET status = 'running', active_turn = $2, \
             model_route = COALESCE($3, model_route), updated_at = now() \
             WHERE id = $1 AND status = 'idle' AND kind = 'chat'",
            &[&id, &turn, &model_route],
        )
        .await?;
    if started == 0 {
        // Say why: no such session, a system session, or one already running.
        let row = tx
            .client()
            .query_opt("SELECT kind FROM chat_sessions WHERE id = $1", &[&id])
            .await?
            .ok_or(ChatStoreError::NotFound)?;
        let kind: String = row.get(0);
        return Err(if SessionKind::parse(&kind)?.is_system() {
            ChatStoreError::SystemSession
        } else {
            ChatStoreError::Busy
        });
    }
    // A new turn after an undo drops what was undone: redo only follows undo.
    tx.client()
        .execute(
            "DELETE FROM chat_messages WHERE session_id = $1 AND undone",
            &[&id],
        )
        .await?;
    Ok(())
}

/// Creates a chat session already running `turn`, with `prompt` as its first row: what a chat
/// without a session id does, in two statements.
pub async fn create_running(
    tx: &TenantTx,
    key: &MasterKey,
    new: &NewSession,
    turn: Uuid,
    prompt: &MessageBody,
) -> Result<Session, ChatStoreError> {
    let id = Uuid::new_v4();
    let title = clean_title(&new.title);
    let sealed = seal(key, &title_aad(tx.tenant().as_str(), id), title.as_bytes())?;
    let row = tx
        .client()
        .query_one(
            &format!(
                "INSERT INTO chat_sessions (tenant_id, id, kind, title_sealed, title_nonce, \
                 key_id, created_by, control_level, approval_required, finding_id, status, \
                 active_turn) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'running', $11) \
                 RETURNING {SESSION_COLUMNS}"
            ),
            &[
                &tx.tenant().as_str(),
                &id,
                &new.kind.as_str(),
                &sealed.ciphertext,
                &sealed.nonce,
                &sealed.key_id,
                &new.created_by,
                &new.control_level,
                &new.approval_required,
                &new.finding_id,
                &turn,
            ],
        )
        .await?;
    let session = session_from_row(tx, key, &row)?;
    if session.kind.is_system() {
        return Err(ChatStoreError::SystemSession);
    }
    let message = Uuid::new_v4();
    let body = seal_body(tx, key, id, message, prompt)?;
    tx.client()
        .execute(
            "INSERT INTO chat_messages (tenant_id, session_id, seq, id, turn_id, role, state, \
             body_sealed, body_nonce, key_id) VALUES ($1, $2, 1, $3, $4, 'user', 'done', $5, $6, $7)",
            &[
                &tx.tenant().as_str(),
                &id,
                &message,
                &turn,
                &body.ciphertext,
                &body.nonce,
                &body.key_id,
            ],
        )
        .await?;
    Ok(session)
}

/// Ends `turn`: the session returns to `idle` and every tool row of the turn still `running`
/// becomes `cancelled` with `reason`. Returns how many rows were closed. A turn that is no
/// longer the active one changes nothing (it was already ended).
pub async fn end_turn(
    tx: &TenantTx,
    key: &MasterKey,
    id: Uuid,
    turn: Uuid,
    reason: &str,
) -> Result<u64, ChatStoreError> {
    let running = tx
        .client()
        .query(
            "SELECT seq FROM chat_messages WHERE session_id = $1 AND turn_id = $2 \
             AND state = 'running'",
            &[&id, &turn],
        )
        .await?;
    let mut closed = 0;
    for row in running {
        let seq: i64 = row.get(0);
        let Some(mut message) = message_at(tx, key, id, seq).await? else {
            continue;
        };
        if let Some(tool) = message.body.tool.as_mut() {
            tool.reason = Some(reason.to_owned());
        }
        update_message(tx, key, id, message.id, RowState::Cancelled, &message.body).await?;
        closed += 1;
    }
    tx.client()
        .execute(
            "UPDATE chat_sessions SET status = 'idle', active_turn = NULL, updated_at = now() \
             WHERE id = $1 AND active_turn = $2",
            &[&id, &turn],
        )
        .await?;
    Ok(closed)
}

const MESSAGE_COLUMNS: &str = "seq, id, turn_id, role, state, undone, compacted, body_sealed, \
     body_nonce, key_id, model_route, action_id, created_at, updated_at";

fn message_from_row(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    row: &Row,
) -> Result<ChatMessage, ChatStoreError> {
    let id: Uuid = row.try_get(1).map_err(StoreError::from)?;
    let role: String = row.try_get(3).map_err(StoreError::from)?;
    let state: String = row.try_get(4).map_err(StoreError::from)?;
    let sealed = Sealed {
        ciphertext: row.try_get(7).map_err(StoreError::from)?,
        nonce: row.try_get(8).map_err(StoreError::from)?,
        key_id: row.try_get(9).map_err(StoreError::from)?,
    };
    let plaintext = open(key, &body_aad(tx.tenant().as_str(), session, id), sealed)?;
    let body: MessageBody = serde_json::from_slice(&plaintext)
        .map_err(|e| ChatStoreError::Sealing(format!("row body is not valid: {e}")))?;
    Ok(ChatMessage {
        seq: row.try_get(0).map_err(StoreError::from)?,
        id,
        turn_id: row.try_get(2).map_err(StoreError::from)?,
        role: Role::parse(&role)?,
        state: RowState::parse(&state)?,
        undone: row.try_get(5).map_err(StoreError::from)?,
        compacted: row.try_get(6).map_err(StoreError::from)?,
        body,
        model_route: row.try_get(10).map_err(StoreError::from)?,
        action_id: row.try_get(11).map_err(StoreError::from)?,
        created_at: row.try_get(12).map_err(StoreError::from)?,
        updated_at: row.try_get(13).map_err(StoreError::from)?,
    })
}

fn seal_body(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    row: Uuid,
    body: &MessageBody,
) -> Result<Sealed, ChatStoreError> {
    let plaintext = serde_json::to_vec(body)
        .map_err(|e| ChatStoreError::Sealing(format!("row body does not serialize: {e}")))?;
    seal(
        key,
        &body_aad(tx.tenant().as_str(), session, row),
        &plaintext,
    )
}

/// Appends a row at the end of the session's transcript.
pub async fn append(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    new: &NewMessage,
) -> Result<ChatMessage, ChatStoreError> {
    // Locks the session row (serialising appends of one session, so `seq` is gap-free and
    // ordered) and marks it updated, in one statement.
    tx.client()
        .query_opt(
            "UPDATE chat_sessions SET updated_at = now() WHERE id = $1 RETURNING 1",
            &[&session],
        )
        .await?
        .ok_or(ChatStoreError::NotFound)?;
    let id = Uuid::new_v4();
    let sealed = seal_body(tx, key, session, id, &new.body)?;
    let row = tx
        .client()
        .query_one(
            &format!(
                "INSERT INTO chat_messages (tenant_id, session_id, seq, id, turn_id, role, state, \
                 body_sealed, body_nonce, key_id, model_route, action_id) \
                 VALUES ($1, $2, (SELECT COALESCE(max(seq), 0) + 1 FROM chat_messages \
                 WHERE session_id = $2), $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 RETURNING {MESSAGE_COLUMNS}"
            ),
            &[
                &tx.tenant().as_str(),
                &session,
                &id,
                &new.turn_id,
                &new.role.as_str(),
                &new.state.as_str(),
                &sealed.ciphertext,
                &sealed.nonce,
                &sealed.key_id,
                &new.model_route,
                &new.action_id,
            ],
        )
        .await?;
    message_from_row(tx, key, session, &row)
}

/// Replaces a row's state and body (a tool row's result, an approval card's decision).
pub async fn update_message(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    message: Uuid,
    state: RowState,
    body: &MessageBody,
) -> Result<(), ChatStoreError> {
    let sealed = seal_body(tx, key, session, message, body)?;
    let n = tx
        .client()
        .execute(
            "UPDATE chat_messages SET state = $3, body_sealed = $4, body_nonce = $5, \
             key_id = $6, updated_at = now() WHERE session_id = $1 AND id = $2",
            &[
                &session,
                &message,
                &state.as_str(),
                &sealed.ciphertext,
                &sealed.nonce,
                &sealed.key_id,
            ],
        )
        .await?;
    if n == 0 {
        return Err(ChatStoreError::NotFound);
    }
    Ok(())
}

async fn message_at(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    seq: i64,
) -> Result<Option<ChatMessage>, ChatStoreError> {
    let row = tx
        .client()
        .query_opt(
            &format!(
                "SELECT {MESSAGE_COLUMNS} FROM chat_messages WHERE session_id = $1 AND seq = $2"
            ),
            &[&session, &seq],
        )
        .await?;
    row.as_ref()
        .map(|r| message_from_row(tx, key, session, r))
        .transpose()
}

/// The transcript in order. Undone rows only when `include_undone`.
pub async fn messages(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    include_undone: bool,
) -> Result<Vec<ChatMessage>, ChatStoreError> {
    let rows = tx
        .client()
        .query(
            &format!(
                "SELECT {MESSAGE_COLUMNS} FROM chat_messages \
                 WHERE session_id = $1 AND ($2 OR NOT undone) ORDER BY seq"
            ),
            &[&session, &include_undone],
        )
        .await?;
    rows.iter()
        .map(|r| message_from_row(tx, key, session, r))
        .collect()
}

/// The user prompt of the turn `undo` would act on: the last turn not undone.
async fn last_turn(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    undone: bool,
) -> Result<Option<(Uuid, String)>, ChatStoreError> {
    // Undo takes the newest live turn; redo the oldest undone one (undo walks back, redo forward).
    let order = if undone { "ASC" } else { "DESC" };
    let row = tx
        .client()
        .query_opt(
            &format!(
                "SELECT {MESSAGE_COLUMNS} FROM chat_messages WHERE session_id = $1 \
                 AND role = 'user' AND undone = $2 AND NOT compacted ORDER BY seq {order} LIMIT 1"
            ),
            &[&session, &undone],
        )
        .await?;
    let Some(row) = row else { return Ok(None) };
    let message = message_from_row(tx, key, session, &row)?;
    Ok(Some((message.turn_id, message.body.text)))
}

async fn check_idle(tx: &TenantTx, session: Uuid) -> Result<(), ChatStoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT status FROM chat_sessions WHERE id = $1 FOR UPDATE",
            &[&session],
        )
        .await?
        .ok_or(ChatStoreError::NotFound)?;
    let status: String = row.get(0);
    if status == "running" {
        return Err(ChatStoreError::Busy);
    }
    Ok(())
}

/// Undoes the last turn when its prompt is `expected_prompt`; returns the undone turn.
pub async fn undo(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    expected_prompt: &str,
) -> Result<Uuid, ChatStoreError> {
    set_undone(tx, key, session, expected_prompt, true).await
}

/// Redoes the most recently undone turn when its prompt is `expected_prompt`.
pub async fn redo(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    expected_prompt: &str,
) -> Result<Uuid, ChatStoreError> {
    set_undone(tx, key, session, expected_prompt, false).await
}

async fn set_undone(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    expected_prompt: &str,
    undone: bool,
) -> Result<Uuid, ChatStoreError> {
    check_idle(tx, session).await?;
    let verb = if undone { "undo" } else { "redo" };
    let Some((turn, prompt)) = last_turn(tx, key, session, !undone).await? else {
        return Err(ChatStoreError::Conflict(format!(
            "there is no turn to {verb}"
        )));
    };
    if prompt != expected_prompt {
        return Err(ChatStoreError::Conflict(format!(
            "the turn to {verb} is not the one expected: its prompt differs from expected_prompt"
        )));
    }
    tx.client()
        .execute(
            "UPDATE chat_messages SET undone = $3, updated_at = now() \
             WHERE session_id = $1 AND turn_id = $2",
            &[&session, &turn, &undone],
        )
        .await?;
    tx.client()
        .execute(
            "UPDATE chat_sessions SET updated_at = now() WHERE id = $1",
            &[&session],
        )
        .await?;
    Ok(turn)
}

/// Copies a session's live transcript (through `through_seq` when given) into a new session.
/// The copy is resealed under its own session id.
pub async fn fork(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    through_seq: Option<i64>,
    created_by: &str,
) -> Result<Session, ChatStoreError> {
    let source = get_session(tx, key, session).await?;
    if source.is_system() {
        return Err(ChatStoreError::SystemSession);
    }
    let copy = create_with_id(
        tx,
        key,
        Uuid::new_v4(),
        &NewSession {
            kind: SessionKind::Chat,
            title: format!("{} (fork)", source.title),
            created_by: created_by.to_owned(),
            control_level: source.control_level.clone(),
            approval_required: source.approval_required,
            finding_id: source.finding_id.clone(),
        },
        Some(session),
    )
    .await?;
    for message in messages(tx, key, session, false).await? {
        if through_seq.is_some_and(|last| message.seq > last) {
            break;
        }
        // A copied row that was running (it cannot be: forks need an idle session) stays closed.
        let state = if message.state == RowState::Running {
            RowState::Cancelled
        } else {
            message.state
        };
        let new = NewMessage::new(message.turn_id, message.role, message.body)
            .with_state(state)
            .with_route(message.model_route)
            .with_action(message.action_id);
        let copied = append(tx, key, copy.id, &new).await?;
        if message.compacted {
            tx.client()
                .execute(
                    "UPDATE chat_messages SET compacted = true WHERE session_id = $1 AND id = $2",
                    &[&copy.id, &copied.id],
                )
                .await?;
        }
    }
    get_session(tx, key, copy.id).await
}

/// Pending steers of the session, oldest first, marked applied to `turn`.
pub async fn take_steers(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
) -> Result<Vec<ChatMessage>, ChatStoreError> {
    let rows = tx
        .client()
        .query(
            &format!(
                "UPDATE chat_messages SET state = 'applied', updated_at = now() \
                 WHERE session_id = $1 AND role = 'steer' AND state = 'pending' \
                 RETURNING {MESSAGE_COLUMNS}"
            ),
            &[&session],
        )
        .await?;
    let mut steers: Vec<ChatMessage> = rows
        .iter()
        .map(|r| message_from_row(tx, key, session, r))
        .collect::<Result<_, _>>()?;
    steers.sort_by_key(|m| m.seq);
    Ok(steers)
}

/// Replaces the live rows before `keep_from_seq` with one summary row: they stay stored, marked
/// compacted, and leave the model's context. Returns the summary row.
pub async fn compact(
    tx: &TenantTx,
    key: &MasterKey,
    session: Uuid,
    summary: &str,
    keep_from_seq: i64,
    model_route: Option<String>,
) -> Result<ChatMessage, ChatStoreError> {
    check_idle(tx, session).await?;
    tx.client()
        .execute(
            "UPDATE chat_messages SET compacted = true, updated_at = now() \
             WHERE session_id = $1 AND seq < $2 AND NOT undone",
            &[&session, &keep_from_seq],
        )
        .await?;
    let row = append(
        tx,
        key,
        session,
        &NewMessage::new(Uuid::new_v4(), Role::Summary, MessageBody::text(summary))
            .with_route(model_route),
    )
    .await?;
    Ok(row)
}

/// Actions planned by the session whose outcome it has not yet recorded: the approval rows
/// with no outcome row for the same action.
pub async fn actions_awaiting_outcome(
    tx: &TenantTx,
    session: Uuid,
) -> Result<Vec<Uuid>, ChatStoreError> {
    let rows = tx
        .client()
        .query(
            "SELECT DISTINCT a.action_id FROM chat_messages a WHERE a.session_id = $1 \
             AND a.role = 'approval' AND a.action_id IS NOT NULL AND NOT EXISTS ( \
               SELECT 1 FROM chat_messages o WHERE o.session_id = $1 AND o.role = 'outcome' \
               AND o.action_id = a.action_id)",
            &[&session],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
