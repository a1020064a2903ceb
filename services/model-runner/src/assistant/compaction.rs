//! Compaction of an idle session: the older rows are summarized by the chat model and the
//! summary stands in for them.

use pulse_bus::assistant_api::AssistantSummarizeReply;
use pulse_bus::{ErrorCode, ErrorReply};
use pulse_capabilities::{ControlLevel, ExecutionProfile, ToolPolicy};
use pulse_domain::TenantId;
use pulse_store::chat::{self, ChatMessage};
use uuid::Uuid;

use crate::export_audit::AuditedExports;
use crate::redaction::redactor;
use pulse_agent_loop::agent_loop::{AgentLoop, BoxFuture, LoopInput, LoopLimits, LoopStop};
use pulse_agent_loop::cost::LedgerUsageSink;
use pulse_agent_loop::provider::{Message, ToolCall};

use super::AssistantService;
use super::events::client_safe;

/// The cost-ledger surface of session compaction.
pub const COMPACTION_SURFACE: &str = "assistant_session_compaction";
/// Characters of transcript a compaction sends to the model.
const COMPACTION_INPUT_CHARS: usize = 24_000;
/// Rows a compaction keeps verbatim after the summary.
const COMPACTION_KEEP_ROWS: usize = 6;

impl AssistantService {
    /// Compacts an idle session: the older rows go to the chat model as a bounded, redacted
    /// transcript; its summary stands in for them.
    pub(super) async fn summarize(
        &self,
        tenant: &TenantId,
        session: Uuid,
    ) -> Result<AssistantSummarizeReply, ErrorReply> {
        let unavailable = |e: &dyn std::fmt::Display| {
            ErrorReply::new(ErrorCode::ServiceUnavailable, e.to_string())
        };
        let store_error = |e: chat::ChatStoreError| match e {
            chat::ChatStoreError::NotFound => ErrorReply::new(
                ErrorCode::AssistantSessionNotFound,
                "no such Assistant session",
            ),
            chat::ChatStoreError::Busy => ErrorReply::new(
                ErrorCode::AssistantSessionBusy,
                "the session is running a turn; compact it when the turn is done",
            ),
            other => ErrorReply::new(ErrorCode::ServiceUnavailable, other.to_string()),
        };
        let tx = self
            .store
            .tenant_tx(tenant)
            .await
            .map_err(|e| unavailable(&e))?;
        let current = chat::get_session(&tx, &self.master_key, session)
            .await
            .map_err(store_error)?;
        if current.status == "running" {
            return Err(store_error(chat::ChatStoreError::Busy));
        }
        let rows = chat::messages(&tx, &self.master_key, session, false)
            .await
            .map_err(store_error)?;
        let live: Vec<&ChatMessage> = rows.iter().filter(|r| !r.compacted).collect();
        if live.len() <= COMPACTION_KEEP_ROWS {
            return Ok(AssistantSummarizeReply {
                session_id: session,
                compacted_rows: 0,
                summary_chars: 0,
                model_route: current.model_route.unwrap_or_default(),
            });
        }
        let keep_from = live[live.len() - COMPACTION_KEEP_ROWS].seq;
        let connection = self.chat_connection(&tx).await?;
        drop(tx);
        let connection = connection.connection;
        let class = connection.route_class();
        let redactor = redactor(&connection, class)
            .map_err(|e| ErrorReply::new(ErrorCode::InternalError, e))?;
        let mut transcript = String::new();
        for row in live.iter().filter(|r| r.seq < keep_from) {
            let text = match (&row.body.tool, row.role) {
                (Some(tool), _) => format!("tool {}: {}", tool.name, tool.output),
                (None, role) => format!("{}: {}", role.as_str(), row.body.text),
            };
            transcript.push_str(&text);
            transcript.push('\n');
        }
        let transcript = client_safe(&redactor, &transcript, COMPACTION_INPUT_CHARS);
        let config = connection
            .provider_config(&self.timeouts)
            .map_err(|e| ErrorReply::new(ErrorCode::AssistantNotConfigured, e.to_string()))?;
        let provider = self
            .providers
            .provider(config)
            .map_err(|f| ErrorReply::new(ErrorCode::AssistantNotConfigured, f.summary()))?;
        let usage = LedgerUsageSink::new(
            self.store.clone(),
            tenant.clone(),
            COMPACTION_SURFACE,
            crate::metrics::ModelMetrics::shared(),
        )
        .with_run_id(session.to_string());
        let exports = AuditedExports::new(self.store.clone(), tenant.clone())
            .with_run_id(session.to_string());
        let outcome = AgentLoop::run(LoopInput {
            transport: &provider,
            route: connection.route.clone(),
            route_class: class,
            system_prompt: "Summarize this conversation between an operator and Pulse Assistant \
                            in at most 12 short bullet points: the questions, what was found, \
                            actions planned and their outcomes. Plain text only."
                .to_owned(),
            messages: vec![Message::user(transcript)],
            policy: ToolPolicy::offering_nothing(ExecutionProfile::InteractiveAssistant {
                control: ControlLevel::ReadOnly,
            }),
            handler: &NoTools,
            redactor: &redactor,
            exports: &exports,
            usage: &usage,
            limits: LoopLimits {
                max_turns: 1,
                max_provider_calls: 2,
                max_output_tokens: Some(1_024),
                ..LoopLimits::default()
            },
            compaction: None,
            allowance: None,
            stream: false,
            temperature: Some(0.0),
            tool_calls_from_text: connection.tool_calls_from_text(),
            listed: None,
            observer: None,
        })
        .await;
        let summary = client_safe(&redactor, &outcome.final_text, 4_000);
        if !matches!(outcome.stop, LoopStop::Completed) || summary.trim().is_empty() {
            return Err(ErrorReply::new(
                ErrorCode::AssistantUnavailable,
                format!(
                    "the model gave no summary ({}); the session is unchanged",
                    outcome.stop.as_str()
                ),
            ));
        }
        let tx = self
            .store
            .tenant_tx(tenant)
            .await
            .map_err(|e| unavailable(&e))?;
        let compacted = live.iter().filter(|r| r.seq < keep_from).count() as u64;
        chat::compact(
            &tx,
            &self.master_key,
            session,
            &summary,
            keep_from,
            Some(connection.route.to_string()),
        )
        .await
        .map_err(store_error)?;
        tx.commit().await.map_err(|e| unavailable(&e))?;
        Ok(AssistantSummarizeReply {
            session_id: session,
            compacted_rows: compacted,
            summary_chars: summary.chars().count() as u64,
            model_route: connection.route.to_string(),
        })
    }
}

/// A handler for turns that offer no tool (its gate admits nothing, so it is never called).
pub(super) struct NoTools;

impl pulse_agent_loop::agent_loop::ToolHandler for NoTools {
    fn call<'a>(
        &'a self,
        call: &'a ToolCall,
        _admitted: &'a pulse_capabilities::AdmittedCall,
    ) -> BoxFuture<'a, pulse_agent_loop::provider::ToolResult> {
        Box::pin(async move {
            pulse_agent_loop::provider::ToolResult::error(&call.id, "no tool is offered")
        })
    }
}
