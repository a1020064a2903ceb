//! Pulse Assistant turns.
//!
//! The gateway stores the user's prompt, marks the session running and asks for a turn
//! (`assistant.turn`); the runner that takes it:
//!
//! 1. reports outcomes of actions the session planned that reached the verifier (an `outcome`
//!    row and an `action_outcome` event, read from the action record, never from the model);
//! 2. builds the history from the live transcript (undone and compacted rows left out);
//! 3. runs the agent loop under the Interactive Assistant profile at the session's control
//!    level, streaming client-safe events as they happen (`workflow_state`, `content`,
//!    `tool_start`/`tool_progress`/`tool_end`/`tool_cancel`, `approval_needed`, `question`,
//!    `steer_applied`, `stream_idle` while the provider is silent);
//! 4. guards the final answer (text after the last tool result: one more turn without tools,
//!    else a plain statement of what happened);
//! 5. stores the answer and ends with exactly one `done` or one `error`.
//!
//! Every event and stored row passes [`filter::ClientSafeText`] and the redactor: provider
//! reasoning and leaked tool-call markup never reach a client or the transcript. An abort (the
//! operator's Stop, or the gateway losing the client) drops the loop, which closes the provider
//! connection; ending the turn closes any tool row still running.
//!
//! This module wires the service (the `assistant.turn` and `assistant.summarize` endpoints and
//! the aborts); [`turn`] runs a turn, [`events`] publishes its events and rows, [`history`] and
//! [`outcomes`] build what the model reads, [`idle`] reports provider silence, [`compaction`]
//! summarizes an idle session.

mod compaction;
mod events;
pub mod filter;
mod history;
mod idle;
mod outcomes;
pub mod tools;
mod turn;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use pulse_bus::assistant_api::{
    AssistantAbort, AssistantSummarizeRequest, AssistantTurnAccepted, AssistantTurnRequest,
};
use pulse_bus::{Bus, ErrorCode, ErrorReply, Responder};
use pulse_domain::TenantId;
use pulse_runtime::{CancellationToken, ServiceContext};
use pulse_store::Store;
use pulse_store::settings::{ConfigLayer, MasterKey};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::patrol_connection::{PatrolConnection, RoutePurpose, route_connection};
use crate::preflight::PreflightSettings;
use pulse_agent_loop::provider::pool::ProviderPool;

pub use compaction::COMPACTION_SURFACE;
pub use idle::IDLE_AFTER;
pub use turn::{MAX_MODEL_TURNS, TURN_OUTPUT_TOKENS, context_limit_tokens};

/// The cost-ledger surface of Assistant turns (run id = the session).
pub const ASSISTANT_SURFACE: &str = "assistant";

/// The running Assistant of this process.
pub struct AssistantHandle {
    stop: CancellationToken,
    responders: Vec<Responder>,
    tasks: Vec<JoinHandle<()>>,
}

impl AssistantHandle {
    pub async fn start(ctx: &ServiceContext, providers: Arc<ProviderPool>) -> anyhow::Result<Self> {
        let path = ctx.config.master_key_path();
        let master_key =
            tokio::task::spawn_blocking(move || MasterKey::load_or_create(&path)).await??;
        let service = Arc::new(AssistantService {
            store: ctx.store.clone(),
            bus: ctx.bus.clone(),
            config_layer: ConfigLayer::from_config(&ctx.config.ai)?,
            environment_keys: crate::patrol_connection::environment_keys(&ctx.config.ai),
            master_key,
            timeouts: PreflightSettings::default(),
            running: Mutex::new(HashMap::new()),
            providers,
            shutdown: ctx.shutdown.clone(),
        });
        service.start().await
    }

    /// Stops taking turns; turns in flight are aborted and ended.
    pub async fn stop(self) {
        self.stop.cancel();
        for responder in self.responders {
            responder.stop().await;
        }
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// What runs Assistant turns.
pub struct AssistantService {
    pub store: Store,
    pub bus: Bus,
    pub config_layer: ConfigLayer,
    pub environment_keys: BTreeMap<String, String>,
    pub master_key: MasterKey,
    pub timeouts: PreflightSettings,
    /// Turns running here: turn id -> (tenant, its cancellation).
    running: Mutex<HashMap<Uuid, (TenantId, CancellationToken)>>,
    /// The provider HTTP clients of this process.
    providers: Arc<ProviderPool>,
    shutdown: CancellationToken,
}

impl AssistantService {
    async fn start(self: Arc<Self>) -> anyhow::Result<AssistantHandle> {
        let stop = self.shutdown.child_token();
        let serving = self.clone();
        let turns = self
            .bus
            .serve_endpoint::<AssistantTurnRequest, ErrorReply, _, _>(move |ctx, request| {
                let service = serving.clone();
                async move { service.accept(ctx.tenant, request).await }
            })
            .await?;
        let serving = self.clone();
        let summaries = self
            .bus
            .serve_endpoint::<AssistantSummarizeRequest, ErrorReply, _, _>(move |ctx, request| {
                let service = serving.clone();
                async move { service.summarize(&ctx.tenant, request.session_id).await }
            })
            .await?;
        let mut aborts = self
            .bus
            .subscribe::<AssistantAbort>(&self.bus.subjects().assistant_abort_all())
            .await?;
        let listening = self.clone();
        let abort_stop = stop.clone();
        let abort_task = tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    _ = abort_stop.cancelled() => break,
                    next = aborts.next() => next,
                };
                let Some(message) = next else { break };
                match message {
                    Ok(decoded) => {
                        let tenant = decoded.meta.tenant.clone();
                        listening.abort(tenant.as_ref(), &decoded.payload);
                    }
                    Err(e) => tracing::warn!(error = %e, "undecodable assistant abort ignored"),
                }
            }
            // Shutting down: stop every turn still running here.
            let running: Vec<CancellationToken> = listening
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .map(|(_, token)| token.clone())
                .collect();
            for token in running {
                token.cancel();
            }
        });
        Ok(AssistantHandle {
            stop,
            responders: vec![turns, summaries],
            tasks: vec![abort_task],
        })
    }

    fn abort(&self, tenant: Option<&TenantId>, abort: &AssistantAbort) {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((owner, token)) = running.get(&abort.turn_id) {
            if Some(owner) == tenant {
                tracing::info!(turn_id = %abort.turn_id, reason = %abort.reason, "assistant turn aborted");
                token.cancel();
            }
        }
    }

    /// The tenant's chat route, or `assistant_not_configured` saying why there is none (turns and
    /// compaction both need it).
    async fn chat_connection(
        &self,
        tx: &pulse_store::TenantTx,
    ) -> Result<PatrolConnection, ErrorReply> {
        route_connection(
            tx,
            &self.config_layer,
            &self.environment_keys,
            &self.master_key,
            RoutePurpose::Chat,
        )
        .await
        .map_err(|e| ErrorReply::new(ErrorCode::AssistantNotConfigured, e.to_string()))
    }

    /// Takes a turn: checks the session holds it, resolves the chat route and starts the turn.
    async fn accept(
        self: Arc<Self>,
        tenant: TenantId,
        request: AssistantTurnRequest,
    ) -> Result<AssistantTurnAccepted, ErrorReply> {
        let unavailable = |e: &dyn std::fmt::Display| {
            ErrorReply::new(ErrorCode::ServiceUnavailable, e.to_string())
        };
        let tx = self
            .store
            .tenant_tx(&tenant)
            .await
            .map_err(|e| unavailable(&e))?;
        // The session's hold on the turn is checked when the turn reads its transcript.
        let connection = self.chat_connection(&tx).await?;
        drop(tx);
        let model_route = connection.route.to_string();
        let token = self.shutdown.child_token();
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(request.turn_id, (tenant.clone(), token.clone()));
        let service = self.clone();
        let turn_id = request.turn_id;
        tokio::spawn(async move {
            service
                .clone()
                .run_turn(tenant, request, connection.connection, token)
                .await;
            service
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&turn_id);
        });
        Ok(AssistantTurnAccepted {
            turn_id,
            model_route,
        })
    }
}
