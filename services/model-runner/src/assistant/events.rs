//! A turn's events: the sink that publishes them in order and keeps the transcript rows, and
//! the loop observer that feeds it client-safe text and tool progress.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use pulse_bus::Bus;
use pulse_bus::assistant_api::{AssistantEvent, ChatEvent, ChatEventKind};
use pulse_domain::TenantId;
use pulse_redaction::{RedactionReport, Redactor};
use pulse_store::Store;
use pulse_store::chat::{self, ChatMessage, MessageBody, NewMessage, Role, RowState, ToolRow};
use pulse_store::settings::MasterKey;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;

use pulse_agent_loop::agent_loop::{BoxFuture, LoopObserver, ToolCallRecord};
use pulse_agent_loop::provider::{Message, StreamEvent, ToolCall};

use super::filter::ClientSafeText;
use super::tools::{Card, CardSink};

/// Characters of one tool row's preview in an event.
const PREVIEW_CHARS: usize = 2_000;

/// What the turn's sink is told, in order.
pub(super) enum Signal {
    Event(ChatEventKind, Value),
    Content(String),
    ToolStarted { id: String, name: String },
    ToolProgress { id: String, raw_input: String },
    ToolDenied { call: ToolCall, message: String },
    ToolFinished(ToolCallRecord),
    Card { call_id: String, card: Card },
    Flush(tokio::sync::oneshot::Sender<SinkState>),
}

/// What the sink learned, handed back at a flush.
#[derive(Debug, Default, Clone)]
pub(super) struct SinkState {
    /// Client-safe text streamed in this turn (all model turns).
    pub(super) streamed: String,
    /// Tool rows still open, by call id.
    pub(super) open_tools: Vec<String>,
    pub(super) approvals: u32,
}

/// Publishes a turn's events in order and keeps its transcript rows.
pub(super) struct TurnSink {
    pub(super) bus: Bus,
    pub(super) store: Store,
    pub(super) key: MasterKey,
    pub(super) tenant: TenantId,
    pub(super) session: Uuid,
    pub(super) turn: Uuid,
    pub(super) subject: String,
    pub(super) seq: u64,
    /// Tool rows by call id: (row id, name, raw input).
    pub(super) tools: HashMap<String, (Uuid, String, String)>,
    pub(super) state: SinkState,
    pub(super) redactor: Arc<Redactor>,
}

impl TurnSink {
    pub(super) async fn publish(&mut self, kind: ChatEventKind, data: Value) {
        self.seq += 1;
        let event = AssistantEvent {
            session_id: self.session,
            turn_id: self.turn,
            seq: self.seq,
            event: ChatEvent::new(kind, data),
        };
        if let Err(e) = self.bus.publish(&self.tenant, &self.subject, &event).await {
            tracing::warn!(error = %e, "assistant event not published");
        }
    }

    async fn append(&self, message: NewMessage) -> Option<ChatMessage> {
        let result = async {
            let tx = self.store.tenant_tx(&self.tenant).await?;
            let row = chat::append(&tx, &self.key, self.session, &message).await?;
            tx.commit().await?;
            Ok::<_, chat::ChatStoreError>(row)
        }
        .await;
        match result {
            Ok(row) => Some(row),
            Err(e) => {
                tracing::warn!(error = %e, "assistant transcript row not stored");
                None
            }
        }
    }

    async fn update(&self, row: Uuid, state: RowState, body: &MessageBody) {
        let result = async {
            let tx = self.store.tenant_tx(&self.tenant).await?;
            chat::update_message(&tx, &self.key, self.session, row, state, body).await?;
            tx.commit().await?;
            Ok::<_, chat::ChatStoreError>(())
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "assistant transcript row not updated");
        }
    }

    fn safe(&self, text: &str) -> String {
        client_safe(&self.redactor, text, PREVIEW_CHARS)
    }

    async fn tool_row(&mut self, id: &str, name: &str) -> Uuid {
        if let Some((row, _, _)) = self.tools.get(id) {
            return *row;
        }
        let body = MessageBody {
            tool: Some(ToolRow {
                call_id: id.to_owned(),
                name: name.to_owned(),
                ..ToolRow::default()
            }),
            ..MessageBody::default()
        };
        let row = self
            .append(NewMessage::new(self.turn, Role::Tool, body).with_state(RowState::Running))
            .await
            .map(|r| r.id)
            .unwrap_or_else(Uuid::new_v4);
        self.tools
            .insert(id.to_owned(), (row, name.to_owned(), String::new()));
        self.state.open_tools.push(id.to_owned());
        row
    }

    fn close(&mut self, id: &str) {
        self.state.open_tools.retain(|t| t != id);
    }

    pub(super) async fn handle(&mut self, signal: Signal) {
        match signal {
            Signal::Event(kind, data) => self.publish(kind, data).await,
            Signal::Content(text) => {
                if text.is_empty() {
                    return;
                }
                self.state.streamed.push_str(&text);
                self.publish(ChatEventKind::Content, json!({"text": text}))
                    .await;
            }
            Signal::ToolStarted { id, name } => {
                self.tool_row(&id, &name).await;
                self.publish(
                    ChatEventKind::ToolStart,
                    json!({"id": id, "name": name, "raw_input": ""}),
                )
                .await;
            }
            Signal::ToolProgress { id, raw_input } => {
                let raw = self.safe(&raw_input);
                let name = match self.tools.get_mut(&id) {
                    Some(entry) => {
                        entry.2.clone_from(&raw);
                        entry.1.clone()
                    }
                    None => return,
                };
                self.publish(
                    ChatEventKind::ToolProgress,
                    json!({"id": id, "name": name, "raw_input": raw, "state": "running"}),
                )
                .await;
            }
            Signal::ToolDenied { call, message } => {
                let row = self.tool_row(&call.id, &call.name).await;
                let input = self.safe(&call.arguments.to_string());
                let reason = self.safe(&message);
                let body = MessageBody {
                    tool: Some(ToolRow {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        input: input.clone(),
                        output: String::new(),
                        reason: Some(reason.clone()),
                    }),
                    ..MessageBody::default()
                };
                self.update(row, RowState::Denied, &body).await;
                self.close(&call.id);
                self.publish(
                    ChatEventKind::ToolCancel,
                    json!({"id": call.id, "name": call.name, "raw_input": input, "reason": reason}),
                )
                .await;
            }
            Signal::ToolFinished(record) => {
                let row = self.tool_row(&record.call_id, &record.name).await;
                // A repeat of an earlier call of the answer is not a failure: its row points
                // at that call's.
                let ok = record.status.succeeded();
                let body = MessageBody {
                    tool: Some(ToolRow {
                        call_id: record.call_id.clone(),
                        name: record.name.clone(),
                        input: record.input.clone(),
                        output: record.output.clone(),
                        reason: None,
                    }),
                    ..MessageBody::default()
                };
                self.update(
                    row,
                    if ok { RowState::Done } else { RowState::Failed },
                    &body,
                )
                .await;
                self.close(&record.call_id);
                self.publish(
                    ChatEventKind::ToolEnd,
                    json!({
                        "id": record.call_id, "name": record.name, "raw_input": record.input,
                        "output": record.output, "success": ok,
                        "duration_ms": u64::try_from(record.duration.as_millis()).unwrap_or(u64::MAX),
                    }),
                )
                .await;
            }
            Signal::Card { call_id, card } => match card {
                Card::Approval { action_id, card } => {
                    self.state.approvals += 1;
                    let body = MessageBody {
                        card: Some(card.clone()),
                        ..MessageBody::default()
                    };
                    self.append(
                        NewMessage::new(self.turn, Role::Approval, body)
                            .with_state(RowState::Pending)
                            .with_action(Some(action_id)),
                    )
                    .await;
                    let mut data = card;
                    data["tool_id"] = json!(call_id);
                    self.publish(ChatEventKind::ApprovalNeeded, data).await;
                }
                Card::Question(card) => {
                    let body = MessageBody {
                        card: Some(card.clone()),
                        ..MessageBody::default()
                    };
                    self.append(NewMessage::new(self.turn, Role::Question, body))
                        .await;
                    let mut data = card;
                    data["tool_id"] = json!(call_id);
                    self.publish(ChatEventKind::Question, data).await;
                }
            },
            Signal::Flush(reply) => {
                let _ = reply.send(self.state.clone());
            }
        }
    }
}

/// `text` as a client may see it: markup filtered, secrets redacted, bounded.
pub(super) fn client_safe(redactor: &Redactor, text: &str, max_chars: usize) -> String {
    let mut out = ClientSafeText::filter_all(text);
    let destination = redactor.destination();
    let mut scratch = RedactionReport {
        route: destination.route.clone(),
        boundary: destination.boundary,
        local_only_withheld: false,
        counts: Default::default(),
        total: 0,
    };
    redactor.sanitize_string(&mut out, &mut scratch);
    if out.chars().count() > max_chars {
        out = out.chars().take(max_chars).collect();
        out.push('…');
    }
    out
}

/// The loop's observer: turns provider stream events and call outcomes into sink signals.
pub(super) struct TurnObserver {
    pub(super) signals: mpsc::UnboundedSender<Signal>,
    /// The text filter of the model turn in progress, and its turn number.
    pub(super) text: Mutex<(u32, ClientSafeText)>,
    /// Raw argument text per call id.
    pub(super) arguments: Mutex<HashMap<String, String>>,
    /// Model turns whose reasoning was announced.
    pub(super) thinking: Mutex<u32>,
    /// Instant of the last provider event (for `stream_idle`).
    pub(super) last_event: Arc<Mutex<Instant>>,
    pub(super) store: Store,
    pub(super) key: MasterKey,
    pub(super) tenant: TenantId,
    pub(super) session: Uuid,
}

impl TurnObserver {
    fn send(&self, signal: Signal) {
        let _ = self.signals.send(signal);
    }

    pub(super) fn flush_text(&self) {
        let mut text = self.text.lock().unwrap_or_else(|p| p.into_inner());
        let rest = text.1.finish();
        if !rest.is_empty() {
            self.send(Signal::Content(rest));
        }
    }
}

impl LoopObserver for TurnObserver {
    fn stream_event(&self, turn: u32, event: &StreamEvent) {
        *self.last_event.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        {
            let mut text = self.text.lock().unwrap_or_else(|p| p.into_inner());
            if text.0 != turn {
                let rest = text.1.finish();
                if !rest.is_empty() {
                    self.send(Signal::Content(rest));
                }
                *text = (turn, ClientSafeText::new());
            }
        }
        match event {
            StreamEvent::Content { text } => {
                let safe = self
                    .text
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .1
                    .push(text);
                if !safe.is_empty() {
                    self.send(Signal::Content(safe));
                }
            }
            StreamEvent::Thinking { .. } => {
                // Reasoning stays runtime-only; the client gets one neutral status per turn.
                let mut announced = self.thinking.lock().unwrap_or_else(|p| p.into_inner());
                if *announced < turn {
                    *announced = turn;
                    self.send(Signal::Event(
                        ChatEventKind::WorkflowState,
                        json!({"state": "model_thinking", "label": "The model is thinking."}),
                    ));
                }
            }
            StreamEvent::ToolStart { id, name } => {
                self.flush_text();
                self.send(Signal::ToolStarted {
                    id: id.clone(),
                    name: name.clone(),
                });
            }
            StreamEvent::ToolProgress {
                id,
                arguments_delta,
            } => {
                let raw = {
                    let mut args = self.arguments.lock().unwrap_or_else(|p| p.into_inner());
                    let entry = args.entry(id.clone()).or_default();
                    entry.push_str(arguments_delta);
                    entry.clone()
                };
                self.send(Signal::ToolProgress {
                    id: id.clone(),
                    raw_input: raw,
                });
            }
            StreamEvent::ProviderRetry {
                attempt,
                max_attempts,
                retry_after_ms,
            } => self.send(Signal::Event(
                ChatEventKind::WorkflowState,
                json!({
                    "state": "provider_retry", "attempt": attempt,
                    "max_attempts": max_attempts, "retry_after_ms": retry_after_ms,
                    "label": "The provider asked to retry; trying the same model again.",
                }),
            )),
            StreamEvent::Done { .. } => self.flush_text(),
            StreamEvent::ToolEnd { .. } | StreamEvent::Error { .. } => {}
        }
    }

    fn call_denied(&self, call: &ToolCall, message: &str) {
        self.send(Signal::ToolDenied {
            call: call.clone(),
            message: message.to_owned(),
        });
    }

    fn call_admitted(&self, call: &ToolCall) {
        // A provider that did not stream the call's start still gets its row.
        self.send(Signal::ToolStarted {
            id: call.id.clone(),
            name: call.name.clone(),
        });
    }

    fn call_finished(&self, record: &ToolCallRecord) {
        self.send(Signal::ToolFinished(record.clone()));
    }

    fn turn_boundary(&self) -> BoxFuture<'_, Vec<Message>> {
        Box::pin(async move {
            let taken = async {
                let tx = self.store.tenant_tx(&self.tenant).await?;
                let steers = chat::take_steers(&tx, &self.key, self.session).await?;
                tx.commit().await?;
                Ok::<_, chat::ChatStoreError>(steers)
            }
            .await;
            match taken {
                Ok(steers) => steers
                    .into_iter()
                    .map(|s| {
                        self.send(Signal::Event(
                            ChatEventKind::SteerApplied,
                            json!({"id": s.id, "text": s.body.text}),
                        ));
                        Message::user(format!("[Operator steering] {}", s.body.text))
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "steering could not be read");
                    Vec::new()
                }
            }
        })
    }
}

/// Hands tool cards to the sink.
pub(super) struct SignalCards(pub(super) mpsc::UnboundedSender<Signal>);

impl CardSink for SignalCards {
    fn card(&self, call: &ToolCall, card: Card) {
        let _ = self.0.send(Signal::Card {
            call_id: call.id.clone(),
            card,
        });
    }
}
