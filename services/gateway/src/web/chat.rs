//! Chat: Pulse Assistant in the web UI. The page lists the user's sessions and holds the
//! transcript, the prompt box, the control level and Stop; `assets/app.js` restores the
//! transcript from `GET /api/ai/sessions/{id}/messages` and renders a turn's events as they
//! stream.
//!
//! The browser never posts to `/api/`: `POST /chat/send` checks the session's CSRF token like
//! every form and then answers with the stream `POST /api/ai/chat` would (the same
//! [`assistant::open_chat`]), and `POST /chat/{id}/stop` is the API's abort. Approval cards
//! decide through `/actions/{id}/decision`, the Approvals page's form.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use pulse_api::assistant::{ChatBody, ControlLevelBody, SessionView, SessionsQuery};
use pulse_capabilities::{ControlLevel, ErrorCode, ToolName};
use pulse_domain::Scope;
use serde::Deserialize;
use serde::de::IntoDeserializer;
use uuid::Uuid;

use super::layout::{self, Nav, at, badge, csrf, shown};
use super::session::{CsrfForm, WebUser};
use crate::assistant::{self, ChatScope};
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::state::AppState;

/// What the control-level selector says the level governs.
const CONTROL_SCOPE: &str = "Assistant chat only";

/// The control levels a new chat can start at, with what each lets the Assistant do.
const LEVELS: &[(ControlLevel, &str)] = &[
    (
        ControlLevel::ReadOnly,
        "Read only: answers from reads, plans nothing",
    ),
    (
        ControlLevel::Controlled,
        "Controlled: may plan actions, each waiting for a human's approval",
    ),
    (
        ControlLevel::Autonomous,
        "Autonomous: may plan actions; without ai:execute they wait for approval as in Controlled",
    ),
];

/// The operator-facing label of a tool (the raw id stays in the row's details).
fn tool_label(tool: ToolName) -> &'static str {
    match tool {
        ToolName::PulseQuery => "Looked up the inventory",
        ToolName::PulseMetrics => "Read metrics",
        ToolName::PulseRead => "Read logs or details",
        ToolName::PulseAlerts => "Checked alerts and findings",
        ToolName::PulseSummarize => "Summarized health",
        ToolName::PulseQuestion => "Asked you a question",
        ToolName::PulseControl => "Planned an action",
        ToolName::PulseStorage => "Checked storage",
        ToolName::PulseDocker => "Checked containers",
        ToolName::PulseKubernetes => "Checked Kubernetes",
        ToolName::PulseFileEdit => "Edited a file",
        ToolName::PulseDiscovery => "Ran discovery",
        ToolName::PulseKnowledge => "Read saved knowledge",
        _ => "Used a Patrol tool",
    }
}

/// Every tool's label by wire name, for the script that renders live tool rows.
fn tool_labels() -> String {
    let labels: BTreeMap<&str, &str> = ToolName::ALL
        .iter()
        .map(|t| (t.wire_name(), tool_label(*t)))
        .collect();
    serde_json::to_string(&labels).unwrap_or_default()
}

async fn sessions(state: &AppState, user: &WebUser) -> Result<Vec<SessionView>, ApiError> {
    let auth = user.authorized::<ChatScope>()?;
    let answer = layout::answer(
        assistant::list(
            State(state.clone()),
            auth,
            ApiQuery::new(SessionsQuery::default()),
        )
        .await,
    )?;
    Ok(answer.sessions)
}

fn session_list(sessions: &[SessionView], current: Option<&str>) -> Markup {
    html! {
        nav class="sessions" aria-label="Chats" {
            h2 { "Chats" }
            p { a class="button secondary" href="/chat" { "New chat" } }
            @if sessions.is_empty() {
                p class="hint" { "No chats yet." }
            } @else {
                ul {
                    @for session in sessions {
                        @let id = session.id.to_string();
                        li {
                            @if current == Some(id.as_str()) {
                                a href={"/chat/" (id)} aria-current="page" { (shown(Some(&session.title))) }
                            } @else {
                                a href={"/chat/" (id)} { (shown(Some(&session.title))) }
                            }
                            span class="hint" {
                                " " (shown(Some(&session.control_level)).replace('_', " ")) " · " (at(&session.updated_at))
                            }
                        }
                    }
                }
            }
        }
    }
}

fn composer(user: &WebUser, session: Option<&SessionView>) -> Markup {
    let level = session
        .map(|s| s.control_level.as_str())
        .unwrap_or(ControlLevel::default().as_str());
    let resuming = session.is_some();
    html! {
        form id="chat-form" method="post" action="/chat/send" class="panel" {
            (csrf(user))
            input type="hidden" name="session_id" value=(session.map(|s| s.id.to_string()).unwrap_or_default());
            p {
                label for="chat-prompt" { "Message" }
                textarea id="chat-prompt" name="prompt" rows="3" required maxlength=(pulse_api::assistant::MAX_PROMPT_CHARS) {}
            }
            p {
                label for="chat-control" { "Control level (scope: " (CONTROL_SCOPE) ")" }
                select id="chat-control" name="control_level" disabled[resuming] {
                    @for (value, label) in LEVELS {
                        option value=(value.as_str()) selected[value.as_str() == level] { (label) }
                    }
                }
                @if resuming {
                    span class="hint" { " Set when the chat started." }
                }
            }
            div class="actions-row" {
                button type="submit" id="chat-send" { "Send" }
                button type="button" id="chat-stop" class="danger" disabled { "Stop" }
            }
            noscript { p class="flash error" { "The chat needs JavaScript to show answers as they stream." } }
        }
    }
}

fn chat_page(user: &WebUser, sessions: &[SessionView], session: Option<&SessionView>) -> Markup {
    let id = session.map(|s| s.id.to_string());
    let approvers = "someone whose role holds actions:approve (an admin or operator)";
    html! {
        h1 { "Pulse Assistant" }
        div class="chat" {
            (session_list(sessions, id.as_deref()))
            section id="chat" class="conversation"
                aria-labelledby="chat-title"
                data-session=(id.clone().unwrap_or_default())
                data-actor=(user.actor())
                data-can-approve=(user.can(Scope::ActionsApprove))
                data-approvers=(approvers)
                data-tool-labels=(tool_labels()) {
                h2 id="chat-title" {
                    @match session {
                        Some(s) => (shown(Some(&s.title))),
                        None => "New chat",
                    }
                }
                @if let Some(s) = session {
                    p class="hint" {
                        (badge(&shown(Some(&s.control_level)))) " " (CONTROL_SCOPE)
                        @if s.approval_required { " · every plan waits for approval" }
                    }
                }
                ol id="transcript" class="transcript" aria-label="Transcript" {}
                p id="chat-status" class="chat-status" role="status" aria-live="polite" {}
                (composer(user, session))
            }
        }
    }
}

/// `GET /chat`: a new chat beside the list of the user's chats.
pub async fn new_chat(State(state): State<AppState>, user: WebUser) -> Response {
    let page = async {
        let list = sessions(&state, &user).await?;
        Ok::<_, ApiError>(chat_page(&user, &list, None))
    }
    .await;
    match page {
        Ok(body) => layout::page(&user, "Chat", Nav::Chat, body),
        Err(error) => layout::error_page(Some(&user), &error),
    }
}

/// `GET /chat/{id}`: one chat, its transcript restored, ready to continue.
pub async fn resume(
    State(state): State<AppState>,
    user: WebUser,
    Path(id): Path<String>,
) -> Response {
    let page = async {
        let list = sessions(&state, &user).await?;
        let auth = user.authorized::<ChatScope>()?;
        let restored = layout::answer(
            assistant::messages(
                State(state.clone()),
                auth,
                ApiQuery::new(pulse_api::assistant::MessagesQuery::default()),
                ApiPath::parse(id.clone())?,
            )
            .await,
        )?;
        Ok::<_, ApiError>(chat_page(&user, &list, Some(&restored.session)))
    }
    .await;
    match page {
        Ok(body) => layout::page(&user, "Chat", Nav::Chat, body),
        Err(error) => layout::error_page(Some(&user), &error),
    }
}

/// The chat form's fields (empty strings are what a browser sends for "not set").
#[derive(Debug, Deserialize)]
pub struct SendForm {
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    session_id: String,
    #[serde(default)]
    control_level: String,
}

impl SendForm {
    fn into_body(self) -> Result<ChatBody, ApiError> {
        let session_id = match self.session_id.trim() {
            "" => None,
            raw => Some(Uuid::parse_str(raw).map_err(|_| {
                ApiError::new(
                    ErrorCode::InvalidParameter,
                    format!("{raw:?} is not a session id (a UUID); open the chat from the list"),
                )
            })?),
        };
        let control_level = match self.control_level.trim() {
            "" => None,
            raw => Some(
                ControlLevelBody::deserialize(
                    IntoDeserializer::<serde::de::value::Error>::into_deserializer(raw),
                )
                .map_err(|_| {
                    ApiError::new(
                        ErrorCode::InvalidParameter,
                        format!(
                            "{raw:?} is not a control level; choose read_only, controlled \
                                 or autonomous"
                        ),
                    )
                })?,
            ),
        };
        Ok(ChatBody {
            prompt: self.prompt,
            session_id,
            finding_id: None,
            control_level,
        })
    }
}

/// `POST /chat/send`: the turn's Server-Sent Events, exactly as `POST /api/ai/chat` answers
/// them; a refusal is the API's JSON error.
pub async fn send(State(state): State<AppState>, form: CsrfForm<SendForm>) -> Response {
    let CsrfForm { user, form } = form;
    let opened = async {
        let auth = user.authorized::<ChatScope>()?;
        assistant::open_chat(&state, auth.principal, form.into_body()?).await
    }
    .await;
    opened.unwrap_or_else(IntoResponse::into_response)
}

/// Stop has no fields but the CSRF token.
#[derive(Debug, Deserialize)]
pub struct StopForm {}

/// `POST /chat/{id}/stop`: the API's abort; the stream the turn is on ends with its `error`.
pub async fn stop(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: CsrfForm<StopForm>,
) -> Response {
    let stopped = async {
        let auth = form.user.authorized::<ChatScope>()?;
        assistant::abort(State(state), auth, ApiPath::parse(id)?).await
    }
    .await;
    match stopped {
        Ok(answer) => answer.into_response(),
        Err(error) => error.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(session_id: &str, control_level: &str) -> SendForm {
        SendForm {
            prompt: "restart web".to_owned(),
            session_id: session_id.to_owned(),
            control_level: control_level.to_owned(),
        }
    }

    #[test]
    fn empty_fields_mean_not_set() {
        let body = form("", "").into_body().unwrap();
        assert_eq!(body.session_id, None);
        assert_eq!(body.control_level, None);
        assert_eq!(body.prompt, "restart web");
    }

    #[test]
    fn a_level_and_a_session_are_read() {
        let id = Uuid::new_v4();
        let body = form(&id.to_string(), "controlled").into_body().unwrap();
        assert_eq!(body.session_id, Some(id));
        assert_eq!(body.control_level, Some(ControlLevelBody::Controlled));
    }

    #[test]
    fn bad_fields_get_a_stable_code_and_say_what_to_do() {
        let error = form("nope", "").into_body().unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidParameter);
        assert!(
            error.message.contains("not a session id"),
            "{}",
            error.message
        );
        let error = form("", "everything").into_body().unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidParameter);
        assert!(
            error.message.contains("read_only, controlled"),
            "{}",
            error.message
        );
    }

    #[test]
    fn every_tool_has_a_label_without_its_raw_id() {
        let labels: BTreeMap<String, String> = serde_json::from_str(&tool_labels()).unwrap();
        for tool in ToolName::ALL {
            let label = &labels[tool.wire_name()];
            assert!(!label.contains('_'), "{label}");
        }
    }
}
