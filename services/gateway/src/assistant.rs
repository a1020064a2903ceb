//! Pulse Assistant over HTTP (scope `ai:chat`): `POST /api/ai/chat` (a Server-Sent Events
//! turn) and the session routes under `/api/ai/sessions`.
//!
//! A chat request stores the prompt and marks the session running in one transaction, opens
//! the session's live event subject, sends `session` (first, exactly once), then asks a
//! model-runner for the turn and forwards its events until `done` or `error`. A client that
//! goes away aborts the turn, so the provider call stops and no tool row stays open; the
//! transcript stays consistent either way.
//!
//! Authority: an `ai:chat` caller can have actions *planned* (approval cards) at the
//! `controlled` and `autonomous` levels, never approved or executed by the chat: approvals go
//! through the action routes, which need `actions:approve` and a human. Sessions are visible to
//! their creator (and to `admin`); Patrol and investigation transcripts are system sessions,
//! listed only on request and never resumed.

use axum::routing;
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::extract::rejection::PathRejection;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use pulse_api::assistant::{
    AbortAnswer, ChatBody, ControlLevelBody, ForkBody, MAX_PROMPT_CHARS, MessageList, MessageView,
    MessagesQuery, NewSessionBody, PromptText, RenameBody, SessionId, SessionList, SessionView,
    SessionsQuery, SteerAnswer, SteerBody, SummarizeAnswer, UndoAnswer, UndoBody,
};
use pulse_bus::AssistantClient;
use pulse_bus::assistant_api::{
    AssistantAbort, AssistantCaller, AssistantEvent, AssistantSummarizeReply,
    AssistantSummarizeRequest, AssistantTurnRequest, ChatEventKind, abort_subject,
    session_events_subject,
};
use pulse_capabilities::{ControlLevel, ErrorCode};
use pulse_domain::Scope;
use pulse_store::TenantTx;
use pulse_store::chat::{self, ChatStoreError, MessageBody, NewMessage, Role, RowState, Session};
use pulse_store::tokens::Principal;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::authorized::{Authorized, RequiredScopes};
use crate::error::ApiError;
use crate::event_stream::KEEPALIVE_INTERVAL;
use crate::extract::{ApiJson, ApiPath, ApiQuery, PathParam};
use crate::route::{Answer, Body, RouteSpec, endpoint_errors, route_errors, schema};
use crate::state::AppState;

/// `ai:chat`.
pub struct ChatScope;
impl RequiredScopes for ChatScope {
    const SCOPES: &'static [Scope] = &[Scope::AiChat];
}

/// How long the gateway waits for a runner to take a turn.
pub const TURN_ACCEPT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a compaction may take (a model call).
pub const SUMMARIZE_TIMEOUT: Duration = Duration::from_secs(120);
/// Events buffered for a slow client.
const BUFFERED_EVENTS: usize = 256;
/// Sessions a list answers at most.
const MAX_SESSIONS: i64 = 200;

/// The runner's summary reply as the API answers it.
fn summarize_answer(r: AssistantSummarizeReply) -> SummarizeAnswer {
    SummarizeAnswer {
        session_id: r.session_id,
        compacted_rows: r.compacted_rows,
        summary_chars: r.summary_chars,
        model_route: r.model_route,
    }
}

/// A stored session as the API shows it.
fn session_view(s: Session) -> SessionView {
    SessionView {
        id: s.id,
        kind: s.kind.as_str().to_owned(),
        title: s.title,
        created_by: s.created_by,
        control_level: s.control_level,
        approval_required: s.approval_required,
        finding_id: s.finding_id,
        status: s.status,
        model_route: s.model_route,
        forked_from: s.forked_from,
        created_at: s.created_at,
        updated_at: s.updated_at,
    }
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidChatRequest, message)
}

fn store_error(error: ChatStoreError) -> ApiError {
    match error {
        ChatStoreError::NotFound => ApiError::new(
            ErrorCode::AssistantSessionNotFound,
            "no Assistant session with this id",
        ),
        ChatStoreError::Busy => ApiError::new(
            ErrorCode::AssistantSessionBusy,
            "the session is running a turn; wait for its done event or stop it",
        ),
        ChatStoreError::SystemSession => ApiError::new(
            ErrorCode::AssistantSystemSession,
            "this is a Patrol or investigation transcript; it is read only",
        ),
        ChatStoreError::Conflict(message) => {
            ApiError::new(ErrorCode::AssistantUndoConflict, message)
        }
        ChatStoreError::Sealing(reason) => {
            tracing::error!(%reason, "a chat row could not be opened");
            ApiError::new(
                ErrorCode::InternalError,
                "the transcript could not be opened with this gateway's master key",
            )
        }
        ChatStoreError::Store(e) => e.into(),
    }
}

impl PathParam for SessionId {
    fn from_segment(raw: String) -> Result<Self, ApiError> {
        raw.parse().map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidParameter,
                format!("{raw:?} is not a session id (a UUID)"),
            )
        })
    }

    fn unreadable(_: &PathRejection) -> ApiError {
        ApiError::new(
            ErrorCode::InvalidParameter,
            "the session id in the path is not readable (a UUID is expected)",
        )
    }
}

fn check_text(field: &str, text: &str) -> Result<(), ApiError> {
    PromptText::check(text).map_err(|e| invalid(e.message(field)))
}

/// The caller's actor for sessions and plans (see [`crate::actions::actor`]).
fn actor(principal: &Principal) -> String {
    crate::actions::actor(principal)
}

/// The session, if the caller may see it (its creator, or an admin).
async fn visible_session(
    state: &AppState,
    tx: &TenantTx,
    principal: &Principal,
    id: Uuid,
) -> Result<Session, ApiError> {
    let session = chat::get_session(tx, &state.settings.master_key, id)
        .await
        .map_err(store_error)?;
    if session.created_by != actor(principal) && !principal.has(Scope::Admin) {
        // Indistinguishable from a session that does not exist.
        return Err(store_error(ChatStoreError::NotFound));
    }
    Ok(session)
}

async fn finding_exists(tx: &TenantTx, id: &str) -> Result<(), ApiError> {
    let parsed: pulse_domain::finding::FindingId = id
        .parse()
        .map_err(|_| invalid(format!("{id:?} is not a finding id")))?;
    match pulse_store::findings::get(tx, parsed).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::new(
            ErrorCode::FindingNotFound,
            format!("no finding {id} in this tenant"),
        )),
    }
}

fn new_session(
    principal: &Principal,
    title: String,
    level: Option<ControlLevelBody>,
    finding_id: Option<String>,
) -> chat::NewSession {
    let level: ControlLevel = level.map(Into::into).unwrap_or_default();
    chat::NewSession {
        kind: chat::SessionKind::Chat,
        title,
        created_by: actor(principal),
        control_level: level.as_str().to_owned(),
        approval_required: finding_id.is_some(),
        finding_id,
    }
}

fn title_from(prompt: &str) -> String {
    let title: String = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut short: String = title.chars().take(60).collect();
    if title.chars().count() > 60 {
        short.push('…');
    }
    short
}

/// `POST /api/ai/chat`.
pub async fn chat(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiJson(body, _): ApiJson<ChatBody>,
) -> Result<Response, ApiError> {
    open_chat(&state, auth.principal, body).await
}

/// Starts a turn and answers with its event stream (the web UI's chat form calls this too).
pub async fn open_chat(
    state: &AppState,
    principal: Principal,
    body: ChatBody,
) -> Result<Response, ApiError> {
    check_text("prompt", &body.prompt)?;
    let tenant = principal.tenant.clone();
    let key = &state.settings.master_key;
    let turn = Uuid::new_v4();
    let tx = state.store.tenant_tx(&tenant).await?;
    let prompt = MessageBody::text(body.prompt.clone());
    let (session, created) = match body.session_id {
        Some(id) => {
            if body.finding_id.is_some() || body.control_level.is_some() {
                return Err(invalid(
                    "finding_id and control_level set up a new session; leave them out when \
                     continuing one (session_id)",
                ));
            }
            let session = visible_session(state, &tx, &principal, id).await?;
            chat::begin_turn(&tx, session.id, turn, None)
                .await
                .map_err(store_error)?;
            chat::append(
                &tx,
                key,
                session.id,
                &NewMessage::new(turn, Role::User, prompt),
            )
            .await
            .map_err(store_error)?;
            (session, false)
        }
        None => {
            if let Some(finding) = &body.finding_id {
                finding_exists(&tx, finding).await?;
            }
            let new = new_session(
                &principal,
                title_from(&body.prompt),
                body.control_level,
                body.finding_id.clone(),
            );
            let session = chat::create_running(&tx, key, &new, turn, &prompt)
                .await
                .map_err(store_error)?;
            (session, true)
        }
    };
    tx.commit().await?;

    // Subscribe before the turn is asked for, so no event can be missed.
    let subject = session_events_subject(state.bus.subjects(), &tenant, session.id);
    let mut events = match state.bus.subscribe::<AssistantEvent>(&subject).await {
        Ok(s) => s,
        Err(e) => {
            end_turn_quietly(state, &tenant, session.id, turn).await;
            tracing::warn!(error = %e, "assistant event subscription failed");
            return Err(ApiError::new(
                ErrorCode::ServiceUnavailable,
                "the message bus is unavailable; retry shortly",
            ));
        }
    };
    let (tx_events, rx_events) = mpsc::channel::<Event>(BUFFERED_EVENTS);
    let control = ControlLevel::parse(&session.control_level).unwrap_or_default();
    let session_event = json!({
        "session_id": session.id,
        "turn_id": turn,
        "title": session.title,
        "created": created,
        "control_level": control.as_str(),
        "control_scope": "Assistant chat only",
        "approval_required": session.approval_required,
        "finding_id": session.finding_id,
    });
    let _ = tx_events.try_send(sse(ChatEventKind::Session, 0, &session_event));
    let request = AssistantTurnRequest {
        session_id: session.id,
        turn_id: turn,
        caller: AssistantCaller {
            actor: actor(&principal),
            may_plan: control.allows_control_tools(),
        },
        control_level: control.as_str().to_owned(),
        // An ai:chat caller's plans always wait for a human, unless the session is
        // autonomous and the caller may execute AI-initiated changes (ai:execute).
        approval_required: session.approval_required
            || control != ControlLevel::Autonomous
            || !principal.has(Scope::AiExecute),
    };
    let state = state.clone();
    tokio::spawn(async move {
        let client = AssistantClient::new(state.bus.clone());
        if let Err(e) = client.turn(&tenant, &request, TURN_ACCEPT_TIMEOUT).await {
            let error = ApiError::from(e);
            end_turn_quietly(&state, &tenant, request.session_id, turn).await;
            let _ = tx_events
                .send(sse(
                    ChatEventKind::Error,
                    1,
                    &json!({"code": error.code, "message": error.message}),
                ))
                .await;
            return;
        }
        loop {
            let next = tokio::select! {
                () = tx_events.closed() => None,
                next = events.next() => Some(next),
            };
            let Some(next) = next else {
                // The client went away: stop the turn (the runner ends it consistently).
                let abort = AssistantAbort {
                    session_id: request.session_id,
                    turn_id: turn,
                    reason: "client_disconnected".to_owned(),
                };
                let subject = abort_subject(state.bus.subjects(), &tenant);
                if let Err(e) = state.bus.publish(&tenant, &subject, &abort).await {
                    tracing::warn!(error = %e, "assistant abort not published");
                }
                return;
            };
            let Some(Ok(decoded)) = next else {
                if next.is_none() {
                    return;
                }
                continue;
            };
            let event = decoded.payload;
            if event.turn_id != turn {
                continue;
            }
            let terminal = event.event.kind.is_terminal();
            if tx_events
                .send(sse(event.event.kind, event.seq, &event.event.data))
                .await
                .is_err()
            {
                continue;
            }
            if terminal {
                return;
            }
        }
    });
    let stream = futures::stream::unfold(rx_events, |mut rx| async move {
        rx.recv()
            .await
            .map(|event| (Ok::<_, Infallible>(event), rx))
    });
    Ok(Sse::new(stream)
        .keep_alive(
            KeepAlive::new()
                .interval(KEEPALIVE_INTERVAL)
                .text("keepalive"),
        )
        .into_response())
}

fn sse(kind: ChatEventKind, seq: u64, data: &Value) -> Event {
    Event::default()
        .event(kind.as_str())
        .id(seq.to_string())
        .data(data.to_string())
}

async fn end_turn_quietly(
    state: &AppState,
    tenant: &pulse_domain::TenantId,
    session: Uuid,
    turn: Uuid,
) {
    let ended = async {
        let tx = state.store.tenant_tx(tenant).await?;
        chat::end_turn(
            &tx,
            &state.settings.master_key,
            session,
            turn,
            "the turn did not start",
        )
        .await?;
        tx.commit().await?;
        Ok::<_, ChatStoreError>(())
    }
    .await;
    if let Err(e) = ended {
        tracing::error!(error = %e, %session, "assistant turn could not be ended");
    }
}

/// `GET /api/ai/sessions`.
pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiQuery(query, _): ApiQuery<SessionsQuery>,
) -> Result<axum::Json<SessionList>, ApiError> {
    let principal = auth.principal;
    let tx = state.store.tenant_tx(&principal.tenant).await?;
    let me = actor(&principal);
    let admin = principal.has(Scope::Admin);
    let sessions = chat::list_sessions(
        &tx,
        &state.settings.master_key,
        query.include_system,
        MAX_SESSIONS,
    )
    .await
    .map_err(store_error)?
    .into_iter()
    .filter(|s| admin || s.created_by == me)
    .map(session_view)
    .collect();
    Ok(axum::Json(SessionList { sessions }))
}

/// `POST /api/ai/sessions`.
pub async fn create(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiJson(body, _): ApiJson<NewSessionBody>,
) -> Result<(StatusCode, axum::Json<SessionView>), ApiError> {
    let principal = auth.principal;
    let tx = state.store.tenant_tx(&principal.tenant).await?;
    if let Some(finding) = &body.finding_id {
        finding_exists(&tx, finding).await?;
    }
    let title = body.title.unwrap_or_else(|| "New chat".to_owned());
    if title.chars().count() > MAX_PROMPT_CHARS {
        return Err(invalid("title is too long"));
    }
    let session = chat::create_session(
        &tx,
        &state.settings.master_key,
        &new_session(&principal, title, body.control_level, body.finding_id),
    )
    .await
    .map_err(store_error)?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, axum::Json(session_view(session))))
}

/// `GET /api/ai/sessions/{id}/messages`.
pub async fn messages(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiQuery(query, _): ApiQuery<MessagesQuery>,
    ApiPath(SessionId(id)): ApiPath<SessionId>,
) -> Result<axum::Json<MessageList>, ApiError> {
    let principal = auth.principal;
    let tx = state.store.tenant_tx(&principal.tenant).await?;
    let session = visible_session(&state, &tx, &principal, id).await?;
    let rows = chat::messages(&tx, &state.settings.master_key, id, query.include_undone)
        .await
        .map_err(store_error)?;
    let messages = rows
        .into_iter()
        .map(|m| MessageView {
            seq: m.seq,
            id: m.id,
            turn_id: m.turn_id,
            role: m.role.as_str().to_owned(),
            state: m.state.as_str().to_owned(),
            text: m.body.text,
            tool: m
                .body
                .tool
                .map(|t| json!({"call_id": t.call_id, "name": t.name, "input": t.input, "output": t.output, "reason": t.reason})),
            card: m.body.card,
            model_route: m.model_route,
            action_id: m.action_id,
            undone: m.undone,
            compacted: m.compacted,
            created_at: m.created_at,
        })
        .collect();
    Ok(axum::Json(MessageList {
        session: session_view(session),
        messages,
    }))
}

/// `PATCH /api/ai/sessions/{id}`.
pub async fn rename(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiPath(SessionId(id)): ApiPath<SessionId>,
    ApiJson(body, _): ApiJson<RenameBody>,
) -> Result<axum::Json<SessionView>, ApiError> {
    check_text("title", &body.title)?;
    let principal = auth.principal;
    let tx = state.store.tenant_tx(&principal.tenant).await?;
    visible_session(&state, &tx, &principal, id).await?;
    let session = chat::rename(&tx, &state.settings.master_key, id, &body.title)
        .await
        .map_err(store_error)?;
    tx.commit().await?;
    Ok(axum::Json(session_view(session)))
}

/// `DELETE /api/ai/sessions/{id}`.
pub async fn delete(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiPath(SessionId(id)): ApiPath<SessionId>,
) -> Result<StatusCode, ApiError> {
    let principal = auth.principal;
    let tx = state.store.tenant_tx(&principal.tenant).await?;
    visible_session(&state, &tx, &principal, id).await?;
    chat::delete_session(&tx, id).await.map_err(store_error)?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/ai/sessions/{id}/abort`.
pub async fn abort(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiPath(SessionId(id)): ApiPath<SessionId>,
) -> Result<(StatusCode, axum::Json<AbortAnswer>), ApiError> {
    let principal = auth.principal;
    let tx = state.store.tenant_tx(&principal.tenant).await?;
    let session = visible_session(&state, &tx, &principal, id).await?;
    drop(tx);
    let Some(turn) = session.active_turn else {
        return Ok((
            StatusCode::OK,
            axum::Json(AbortAnswer {
                session_id: id,
                turn_id: None,
                aborted: false,
            }),
        ));
    };
    let abort = AssistantAbort {
        session_id: id,
        turn_id: turn,
        reason: "user_abort".to_owned(),
    };
    let subject = abort_subject(state.bus.subjects(), &principal.tenant);
    state
        .bus
        .publish(&principal.tenant, &subject, &abort)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "assistant abort not published");
            ApiError::new(
                ErrorCode::ServiceUnavailable,
                "the message bus is unavailable; retry shortly",
            )
        })?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(AbortAnswer {
            session_id: id,
            turn_id: Some(turn),
            aborted: true,
        }),
    ))
}

/// `POST /api/ai/sessions/{id}/fork`.
pub async fn fork(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiPath(SessionId(id)): ApiPath<SessionId>,
    ApiJson(body, _): ApiJson<ForkBody>,
) -> Result<(StatusCode, axum::Json<SessionView>), ApiError> {
    let principal = auth.principal;
    let tx = state.store.tenant_tx(&principal.tenant).await?;
    visible_session(&state, &tx, &principal, id).await?;
    let copy = chat::fork(
        &tx,
        &state.settings.master_key,
        id,
        body.through_seq,
        &actor(&principal),
    )
    .await
    .map_err(store_error)?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, axum::Json(session_view(copy))))
}

/// `POST /api/ai/sessions/{id}/summarize`.
pub async fn summarize(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiPath(SessionId(id)): ApiPath<SessionId>,
) -> Result<axum::Json<SummarizeAnswer>, ApiError> {
    let principal = auth.principal;
    let tx = state.store.tenant_tx(&principal.tenant).await?;
    let session = visible_session(&state, &tx, &principal, id).await?;
    drop(tx);
    if session.is_system() {
        return Err(store_error(ChatStoreError::SystemSession));
    }
    if session.status == "running" {
        return Err(store_error(ChatStoreError::Busy));
    }
    let reply = AssistantClient::new(state.bus.clone())
        .summarize(
            &principal.tenant,
            &AssistantSummarizeRequest { session_id: id },
            SUMMARIZE_TIMEOUT,
        )
        .await?;
    Ok(axum::Json(summarize_answer(reply)))
}

async fn undo_or_redo(
    state: &AppState,
    principal: &Principal,
    id: Uuid,
    body: &UndoBody,
    undo: bool,
) -> Result<axum::Json<UndoAnswer>, ApiError> {
    let tx = state.store.tenant_tx(&principal.tenant).await?;
    let session = visible_session(state, &tx, principal, id).await?;
    if session.is_system() {
        return Err(store_error(ChatStoreError::SystemSession));
    }
    let key = &state.settings.master_key;
    let turn = if undo {
        chat::undo(&tx, key, id, &body.expected_prompt).await
    } else {
        chat::redo(&tx, key, id, &body.expected_prompt).await
    }
    .map_err(store_error)?;
    tx.commit().await?;
    Ok(axum::Json(UndoAnswer {
        session_id: id,
        turn_id: turn,
        result: if undo { "undone" } else { "redone" }.to_owned(),
    }))
}

/// `POST /api/ai/sessions/{id}/undo`.
pub async fn undo(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiPath(SessionId(id)): ApiPath<SessionId>,
    ApiJson(body, _): ApiJson<UndoBody>,
) -> Result<axum::Json<UndoAnswer>, ApiError> {
    undo_or_redo(&state, &auth.principal, id, &body, true).await
}

/// `POST /api/ai/sessions/{id}/redo`.
pub async fn redo(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiPath(SessionId(id)): ApiPath<SessionId>,
    ApiJson(body, _): ApiJson<UndoBody>,
) -> Result<axum::Json<UndoAnswer>, ApiError> {
    undo_or_redo(&state, &auth.principal, id, &body, false).await
}

/// `POST /api/ai/sessions/{id}/steer`: operator steering for the running turn, applied at its
/// next turn boundary (`steer_applied`).
pub async fn steer(
    State(state): State<AppState>,
    auth: Authorized<ChatScope>,
    ApiPath(SessionId(id)): ApiPath<SessionId>,
    ApiJson(body, _): ApiJson<SteerBody>,
) -> Result<(StatusCode, axum::Json<SteerAnswer>), ApiError> {
    check_text("text", &body.text)?;
    let principal = auth.principal;
    let tx = state.store.tenant_tx(&principal.tenant).await?;
    let session = visible_session(&state, &tx, &principal, id).await?;
    let Some(turn) = session.active_turn else {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "the session is not running a turn, so there is nothing to steer; send the text \
             as a prompt (POST /api/ai/chat with session_id)",
        ));
    };
    let row = chat::append(
        &tx,
        &state.settings.master_key,
        id,
        &NewMessage::new(turn, Role::Steer, MessageBody::text(body.text))
            .with_state(RowState::Pending),
    )
    .await
    .map_err(store_error)?;
    tx.commit().await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(SteerAnswer {
            session_id: id,
            steer_id: row.id,
            state: "pending".to_owned(),
        }),
    ))
}

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "POST",
        path: "/api/ai/chat",
        scopes: &[Scope::AiChat],
        public: false,
        name: "assistant_chat",
        title: "Chat with Pulse Assistant",
        description: "One Assistant turn as Server-Sent Events: session first, then workflow_state, content, tool rows, approval and question cards, and exactly one done or error. Changes are only planned (approval cards), never run.",
        category: Category::Assistant,
        action_mode: ActionMode::Mixed,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::ChatBody>)),
        response: Answer::EventStream {
            events: &pulse_bus::assistant_api::ChatEventKind::NAMES,
        },
        errors: &[
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidChatRequest,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::AssistantSessionBusy,
            ErrorCode::AssistantSystemSession,
            ErrorCode::FindingNotFound,
        ],
        handler: || routing::post(chat),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/sessions",
        scopes: &[Scope::AiChat],
        public: false,
        name: "list_assistant_sessions",
        title: "List Assistant sessions",
        description: "The caller's chat sessions, most recent first; Patrol and investigation transcripts only with include_system.",
        category: Category::Assistant,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::assistant::SessionsQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::SessionList>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || routing::get(list),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions",
        scopes: &[Scope::AiChat],
        public: false,
        name: "create_assistant_session",
        title: "Create an Assistant session",
        description: "An empty chat session, optionally from a finding (approval-required) and at a control level.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(
            schema::<pulse_api::assistant::NewSessionBody>,
        )),
        response: Answer::Json {
            status: 201,
            schema: schema::<pulse_api::assistant::SessionView>,
        },
        errors: &[
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidChatRequest,
            ErrorCode::FindingNotFound,
        ],
        handler: || routing::post(create),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/sessions/{id}/messages",
        scopes: &[Scope::AiChat],
        public: false,
        name: "get_assistant_messages",
        title: "Read an Assistant transcript",
        description: "The session's transcript for restoring a view: prompts, answers, tool rows, cards and outcome notes. Provider reasoning is never stored.",
        category: Category::Assistant,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: Some(schema::<pulse_api::assistant::MessagesQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::MessageList>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
        ],
        handler: || routing::get(messages),
    },
    RouteSpec {
        method: "PATCH",
        path: "/api/ai/sessions/{id}",
        scopes: &[Scope::AiChat],
        public: false,
        name: "rename_assistant_session",
        title: "Rename an Assistant session",
        description: "Sets the session's title.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::RenameBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::SessionView>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidChatRequest,
        ],
        handler: || routing::patch(rename),
    },
    RouteSpec {
        method: "DELETE",
        path: "/api/ai/sessions/{id}",
        scopes: &[Scope::AiChat],
        public: false,
        name: "delete_assistant_session",
        title: "Delete an Assistant session",
        description: "Deletes an idle session and its transcript.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: None,
        response: Answer::Empty { status: 204 },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::AssistantSessionBusy,
        ],
        handler: || routing::delete(delete),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/abort",
        scopes: &[Scope::AiChat],
        public: false,
        name: "abort_assistant_turn",
        title: "Stop an Assistant turn",
        description: "Stops the running turn: the provider call is cancelled and open tool rows are closed as cancelled. 202 when a turn was asked to stop (aborted: true), 200 when the session was idle (aborted: false).",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: None,
        response: Answer::JsonEither {
            status: 200,
            or: 202,
            schema: schema::<pulse_api::assistant::AbortAnswer>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
        ],
        handler: || routing::post(abort),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/fork",
        scopes: &[Scope::AiChat],
        public: false,
        name: "fork_assistant_session",
        title: "Fork an Assistant session",
        description: "Copies the live transcript (up to through_seq) into a new session.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::ForkBody>)),
        response: Answer::Json {
            status: 201,
            schema: schema::<pulse_api::assistant::SessionView>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::AssistantSystemSession,
        ],
        handler: || routing::post(fork),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/summarize",
        scopes: &[Scope::AiChat],
        public: false,
        name: "summarize_assistant_session",
        title: "Compact an Assistant session",
        description: "Summarizes the older rows of an idle session with the chat model (bounded, redacted input); the summary replaces them in the model's context.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::SummarizeAnswer>,
        },
        errors: route_errors!(
            &[
                ErrorCode::InvalidParameter,
                ErrorCode::AssistantSessionNotFound,
                ErrorCode::AssistantSessionBusy,
                ErrorCode::AssistantSystemSession,
            ],
            endpoint_errors!(pulse_bus::assistant_api::AssistantSummarizeRequest)
        ),
        handler: || routing::post(summarize),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/undo",
        scopes: &[Scope::AiChat],
        public: false,
        name: "undo_assistant_turn",
        title: "Undo the last Assistant turn",
        description: "Takes the last turn out of the transcript when its prompt is expected_prompt.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::UndoBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::UndoAnswer>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::AssistantSessionBusy,
            ErrorCode::AssistantSystemSession,
            ErrorCode::AssistantUndoConflict,
        ],
        handler: || routing::post(undo),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/redo",
        scopes: &[Scope::AiChat],
        public: false,
        name: "redo_assistant_turn",
        title: "Redo an undone Assistant turn",
        description: "Restores the undone turn when its prompt is expected_prompt.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::UndoBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::UndoAnswer>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::AssistantSessionBusy,
            ErrorCode::AssistantSystemSession,
            ErrorCode::AssistantUndoConflict,
        ],
        handler: || routing::post(redo),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/steer",
        scopes: &[Scope::AiChat],
        public: false,
        name: "steer_assistant_turn",
        title: "Steer a running Assistant turn",
        description: "Adds operator guidance to the running turn, applied at its next turn boundary (steer_applied).",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::SteerBody>)),
        response: Answer::Json {
            status: 202,
            schema: schema::<pulse_api::assistant::SteerAnswer>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidChatRequest,
            ErrorCode::Conflict,
        ],
        handler: || routing::post(steer),
    },
];
