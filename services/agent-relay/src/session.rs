//! One agent's WebSocket session: token check at the handshake, then Hello, then reports.
//! After Hello the session is registered (tenant, agent id) and serves the agent's request
//! subjects; requests go out on the socket at any time and each answer (matched by request id)
//! goes back to its waiter. Answers are bounded in size and rate.
//!
//! Bad input never takes the relay down: a message that is too large, not UTF-8 or not a valid
//! protocol message is answered with `Rejected { reason }` and logged; after
//! [`MAX_STRIKES`] of them the connection is closed. Other sessions are unaffected.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use pulse_domain::Scope;
use pulse_domain::agent_protocol::{AgentMessage, Hello, PROTOCOL_VERSION, RelayMessage, Report};
use pulse_domain::resource::{ResourceId, limits, valid_agent_id};
use pulse_store::agents::{self, AgentSession};
use pulse_store::tokens::{self, AuthFailure, Principal};

use pulse_capabilities::error_codes::ErrorCode;
use tokio::sync::{mpsc, oneshot};

use crate::RelayState;
use crate::error::RelayError;
use crate::limits::ReportBudget;
use crate::metrics::RejectReason;
use crate::registry::{Answer, Outbound, SessionLink};

/// Invalid messages tolerated before the connection is closed.
pub const MAX_STRIKES: u32 = 5;
/// Time an agent has to send Hello after connecting.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for one send to the agent.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an open session re-reads its tenant's standing, so a suspension also ends the
/// sessions that were open before it (docs/tenants.md).
const STANDING_EVERY: Duration = Duration::from_secs(10);

fn refuse(status: StatusCode, code: ErrorCode, message: &str) -> Response {
    (
        status,
        axum::Json(serde_json::json!({"error": code.code(), "message": message})),
    )
        .into_response()
}

fn presented_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// `GET /api/agent/ws`: authenticates before upgrading, so a bad token gets a plain HTTP 401 and
/// a token without `agent:report` a 403.
pub async fn upgrade(
    State(state): State<RelayState>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let Some(token) = presented_token(&headers) else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "send Authorization: Bearer <token>",
        );
    };
    let principal = match tokens::authenticate(&state.store, token, Utc::now()).await {
        Ok(principal) => principal,
        Err(AuthFailure::Suspended { reason }) => {
            tracing::info!(%reason, "agent of a suspended tenant refused");
            return refuse(
                StatusCode::FORBIDDEN,
                ErrorCode::TenantSuspended,
                &pulse_domain::tenant::suspended_message(&reason),
            );
        }
        Err(AuthFailure::Store(error)) => {
            tracing::warn!(%error, "token check failed");
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ServiceUnavailable,
                "the database is unavailable; retry shortly",
            );
        }
        Err(reason) => {
            tracing::info!(%reason, "agent token refused");
            return refuse(
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthorized,
                "invalid token",
            );
        }
    };
    if !principal.has(Scope::AgentReport) {
        tracing::info!(token_id = %principal.token_id, "agent token lacks agent:report");
        return refuse(
            StatusCode::FORBIDDEN,
            ErrorCode::MissingScope,
            "this endpoint requires scope agent:report",
        );
    }
    if let Some(refused) = admit_agents_quota(&state, &principal).await {
        return refused;
    }
    // Room above the report limit so an oversized report can still be read and answered with
    // a reason; anything beyond this closes the connection at the protocol level.
    let frame_limit = state
        .limits
        .max_report_bytes
        .saturating_mul(2)
        .max(state.limits.max_report_bytes.saturating_add(1 << 20));
    ws.max_message_size(frame_limit)
        .max_frame_size(frame_limit)
        .on_upgrade(move |socket| async move {
            Session::new(state, principal).run(socket).await;
        })
}

/// Each tenant's suspension reason as last read, and when, so the open sessions of one tenant
/// cost one read per half [`STANDING_EVERY`] per relay process instead of one each. Sessions
/// look every half period too, so a suspension ends them within one period.
#[derive(Debug, Default)]
pub struct StandingCache {
    read: std::sync::Mutex<
        std::collections::HashMap<pulse_domain::TenantId, (Instant, Option<String>)>,
    >,
}

impl StandingCache {
    fn fresh(&self, tenant: &pulse_domain::TenantId) -> Option<Option<String>> {
        let read = self
            .read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        read.get(tenant)
            .filter(|(at, _)| at.elapsed() < STANDING_EVERY / 2)
            .map(|(_, reason)| reason.clone())
    }

    fn remember(&self, tenant: pulse_domain::TenantId, reason: Option<String>) {
        let mut read = self
            .read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        read.insert(tenant, (Instant::now(), reason));
    }
}

/// The suspension reason of `tenant`, if it is suspended now (a failed read is not a
/// suspension: the next check asks again).
async fn suspension(state: &RelayState, tenant: &pulse_domain::TenantId) -> Option<String> {
    if let Some(known) = state.standing.fresh(tenant) {
        return known;
    }
    match pulse_store::tenants::standing(&state.store, tenant).await {
        Ok(standing) => {
            let reason = match standing {
                Some(pulse_store::tenants::Standing::Suspended { reason, .. }) => Some(reason),
                _ => None,
            };
            state.standing.remember(tenant.clone(), reason.clone());
            reason
        }
        Err(error) => {
            tracing::debug!(%error, "tenant standing not read");
            None
        }
    }
}

/// The tenant's `agents` quota (docs/tenants.md): a refusal answer, or `None` to go on.
async fn admit_agents_quota(state: &RelayState, principal: &Principal) -> Option<Response> {
    let checked = async {
        let tx = state.store.tenant_tx(&principal.tenant).await?;
        let admitted = pulse_store::quotas::admit_agent_token(&tx, principal.token_id).await;
        tx.rollback().await?;
        admitted
    }
    .await;
    match checked {
        Ok(()) => None,
        Err(pulse_store::quotas::QuotaError::Exceeded(exceeded)) => {
            tracing::info!(tenant = %principal.tenant, %exceeded, "agent refused by the agents quota");
            Some(refuse(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::QuotaExceeded,
                &exceeded.to_string(),
            ))
        }
        Err(pulse_store::quotas::QuotaError::Store(error)) => {
            tracing::warn!(%error, "agents quota check failed");
            Some(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ServiceUnavailable,
                "the database is unavailable; retry shortly",
            ))
        }
    }
}

/// Why a message was refused: sent back to the agent and logged.
struct Refusal {
    seq: Option<u64>,
    reason: String,
    /// Counts toward [`MAX_STRIKES`] (protocol violations do; rate limiting does not).
    strike: bool,
    /// The `reason` label it is counted under.
    kind: RejectReason,
}

impl Refusal {
    /// A protocol violation (unless [`Refusal::of`] says otherwise).
    fn strike(reason: impl Into<String>) -> Self {
        Self {
            seq: None,
            reason: reason.into(),
            strike: true,
            kind: RejectReason::Protocol,
        }
    }

    fn of(self, kind: RejectReason) -> Self {
        Self { kind, ..self }
    }
}

struct Session {
    state: RelayState,
    principal: Principal,
    agent_id: Option<String>,
    idle_timeout: Duration,
    budget: ReportBudget,
    strikes: u32,
    /// Set after Hello: the registry entry and the queue of requests for this agent.
    link: Option<Arc<SessionLink>>,
    outbound: Option<mpsc::Receiver<Outbound>>,
    responders: Vec<pulse_bus::Responder>,
    /// Requests sent to the agent, by request id, waiting for the answer.
    pending: HashMap<String, oneshot::Sender<Answer>>,
    answer_budget: ReportBudget,
    /// A hash of the details of each resource as this session's last stored report left them,
    /// by resource id: unchanged details are not sent to the database again.
    stored_details: HashMap<ResourceId, u64>,
    details_hasher: RandomState,
    /// The report being stored. Requests to the agent keep flowing while it is (a command must
    /// not wait behind the database); its ack is sent when the store answers. The agent sends
    /// the next report only after that ack, and a report arriving earlier waits for this one.
    storing: Option<StoringReport>,
}

/// A report handed to ingest, waiting for the store's answer.
struct StoringReport {
    seq: u64,
    received: Instant,
    agent_id: String,
    details: Vec<(ResourceId, u64)>,
    stored: std::pin::Pin<
        Box<dyn std::future::Future<Output = anyhow::Result<crate::ingest::Ingested>> + Send>,
    >,
}

/// The store's answer to the report being stored; pending while there is none.
async fn next_stored(
    storing: &mut Option<StoringReport>,
) -> anyhow::Result<crate::ingest::Ingested> {
    match storing {
        Some(report) => report.stored.as_mut().await,
        None => std::future::pending().await,
    }
}

async fn next_outbound(outbound: &mut Option<mpsc::Receiver<Outbound>>) -> Option<Outbound> {
    match outbound {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Session {
    fn new(state: RelayState, principal: Principal) -> Self {
        let budget = ReportBudget::new(state.limits.max_reports_per_sec, Instant::now());
        let answer_budget = ReportBudget::new(state.limits.max_requests_per_sec, Instant::now());
        Self {
            idle_timeout: HELLO_TIMEOUT,
            state,
            principal,
            agent_id: None,
            budget,
            strikes: 0,
            link: None,
            outbound: None,
            responders: Vec::new(),
            pending: HashMap::new(),
            answer_budget,
            stored_details: HashMap::new(),
            details_hasher: RandomState::new(),
            storing: None,
        }
    }

    /// Unregisters the session and stops serving its request subjects.
    async fn close(&mut self) {
        if let (Some(link), Some(agent_id)) = (&self.link, &self.agent_id) {
            self.state
                .registry
                .unregister(&self.principal.tenant, agent_id, link.generation);
        }
        if self.link.take().is_some() {
            self.state.metrics.agents_connected.dec();
        }
        self.outbound = None;
        for responder in self.responders.drain(..) {
            responder.stop().await;
        }
        // Dropping the waiters tells them the agent went away.
        self.pending.clear();
    }

    /// Sends one request to the agent and remembers its waiter.
    async fn send_request(&mut self, socket: &mut WebSocket, outbound: Outbound) -> bool {
        let Some(request_id) = outbound.message.request_id().map(str::to_owned) else {
            return true;
        };
        self.pending.retain(|_, waiter| !waiter.is_closed());
        if !send(socket, &outbound.message).await {
            let _ = outbound.reply.send(Err(RelayError::NotConnected(
                "the request could not be written to the agent's connection".to_owned(),
            )));
            return false;
        }
        self.pending.insert(request_id, outbound.reply);
        true
    }

    /// An answer from the agent: to its waiter, within the size and rate bounds.
    fn answer(&mut self, message: AgentMessage, bytes: usize) -> Result<(), Refusal> {
        let request_id = message.request_id().unwrap_or_default().to_owned();
        let Some(waiter) = self.pending.remove(&request_id) else {
            if !self.answer_budget.try_take(Instant::now()) {
                return Err(Refusal::strike(
                    "answers to requests that were never sent (or already timed out) exceed the rate limit",
                ));
            }
            tracing::info!(agent_id = ?self.agent_id, %request_id, "answer to an unknown or timed-out request dropped");
            return Ok(());
        };
        let max = self.state.limits.max_response_bytes;
        let answer = if bytes > max {
            Err(RelayError::ResponseTooLarge(format!(
                "the agent's answer of {bytes} bytes exceeds the limit of {max} bytes"
            )))
        } else if !self.answer_budget.try_take(Instant::now()) {
            Err(RelayError::RateLimited(
                "the agent answers faster than relay.max_requests_per_sec allows".to_owned(),
            ))
        } else {
            Ok(message)
        };
        let _ = waiter.send(answer);
        Ok(())
    }

    async fn run(mut self, mut socket: WebSocket) {
        let tenant = self.principal.tenant.clone();
        let mut idle_deadline = tokio::time::Instant::now() + self.idle_timeout;
        let look = STANDING_EVERY / 2;
        let mut standing = tokio::time::interval_at(tokio::time::Instant::now() + look, look);
        standing.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let received = tokio::select! {
                _ = tokio::time::sleep_until(idle_deadline) => {
                    tracing::info!(tenant = %tenant, agent_id = ?self.agent_id, "agent session idle; closing");
                    break;
                }
                _ = standing.tick() => {
                    if let Some(reason) = suspension(&self.state, &tenant).await {
                        tracing::info!(tenant = %tenant, agent_id = ?self.agent_id, %reason, "tenant suspended; closing the agent session");
                        let message = pulse_domain::tenant::suspended_message(&reason);
                        // A close reason carries at most 123 bytes.
                        let mut text = format!("{}: {message}", ErrorCode::TenantSuspended.code());
                        while text.len() > 123 {
                            text.pop();
                        }
                        let close = Message::Close(Some(CloseFrame {
                            code: 1008,
                            reason: text.into(),
                        }));
                        let _ = tokio::time::timeout(SEND_TIMEOUT, socket.send(close)).await;
                        break;
                    }
                    continue;
                }
                outbound = next_outbound(&mut self.outbound) => {
                    match outbound {
                        Some(outbound) => {
                            if !self.send_request(&mut socket, outbound).await {
                                break;
                            }
                        }
                        None => self.outbound = None,
                    }
                    continue;
                }
                stored = next_stored(&mut self.storing) => {
                    let reply = self.report_stored(stored);
                    if !self.send_reply(&mut socket, reply).await {
                        break;
                    }
                    continue;
                }
                received = socket.recv() => received,
            };
            let received = match received {
                None => break,
                Some(Err(error)) => {
                    tracing::info!(tenant = %tenant, agent_id = ?self.agent_id, %error, "agent connection failed");
                    break;
                }
                Some(Ok(message)) => message,
            };
            let outcome = match received {
                Message::Text(text) => self.handle(text.as_str(), &mut socket).await,
                Message::Binary(bytes) => match std::str::from_utf8(&bytes) {
                    Ok(text) => self.handle(text, &mut socket).await,
                    Err(error) => Err(Refusal::strike(format!(
                        "message is not valid UTF-8 ({error})"
                    ))
                    .of(RejectReason::Malformed)),
                },
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => continue,
            };
            idle_deadline = tokio::time::Instant::now() + self.idle_timeout;
            let reply = match outcome {
                Ok(Some(reply)) => Ok(reply),
                Ok(None) => continue,
                Err(refusal) => Err(refusal),
            };
            if !self.send_reply(&mut socket, reply).await {
                break;
            }
            if self.strikes >= MAX_STRIKES {
                tracing::warn!(tenant = %tenant, agent_id = ?self.agent_id, "too many invalid messages; closing the agent connection");
                let close = Message::Close(Some(CloseFrame {
                    code: 1008,
                    reason: "too many invalid messages".into(),
                }));
                let _ = tokio::time::timeout(SEND_TIMEOUT, socket.send(close)).await;
                break;
            }
        }
        self.close().await;
    }

    /// Sends a reply or the rejection of a refused message (counting its strike); false when
    /// the connection cannot be written.
    async fn send_reply(
        &mut self,
        socket: &mut WebSocket,
        reply: Result<RelayMessage, Refusal>,
    ) -> bool {
        let reply = match reply {
            Ok(reply) => reply,
            Err(refusal) => {
                tracing::warn!(tenant = %self.principal.tenant, agent_id = ?self.agent_id, reason = %refusal.reason, "agent message rejected");
                self.state.metrics.rejected(refusal.kind);
                if refusal.strike {
                    self.strikes += 1;
                }
                RelayMessage::Rejected {
                    seq: refusal.seq,
                    reason: refusal.reason,
                }
            }
        };
        send(socket, &reply).await
    }

    /// The ack (or rejection) of the report whose store just answered.
    fn report_stored(
        &mut self,
        stored: anyhow::Result<crate::ingest::Ingested>,
    ) -> Result<RelayMessage, Refusal> {
        let Some(StoringReport {
            seq,
            received,
            agent_id,
            details,
            ..
        }) = self.storing.take()
        else {
            // `next_stored` only answers while a report is being stored.
            return Err(Refusal {
                seq: None,
                reason: "no report was being stored".to_owned(),
                strike: false,
                kind: RejectReason::StoreFailed,
            });
        };
        match stored {
            Ok(ingested) => {
                self.state.metrics.ingested(
                    received.elapsed(),
                    ingested.resources,
                    ingested.samples,
                );
                self.stored_details = details.into_iter().collect();
                tracing::debug!(agent_id = %agent_id, seq, resources = ingested.resources, changes = ingested.changes, samples = ingested.samples, "report stored");
                Ok(RelayMessage::Ack { seq })
            }
            Err(error) => {
                self.stored_details.clear();
                if let Some(exceeded) = error.downcast_ref::<pulse_domain::tenant::QuotaExceeded>()
                {
                    tracing::info!(agent_id = %agent_id, %exceeded, "report refused by the resources quota");
                    return Err(Refusal {
                        seq: Some(seq),
                        reason: format!("{}: {exceeded}", ErrorCode::QuotaExceeded.code()),
                        strike: false,
                        kind: RejectReason::StoreFailed,
                    });
                }
                tracing::error!(agent_id = %agent_id, error = %format!("{error:#}"), "report not stored");
                Err(Refusal {
                    seq: Some(seq),
                    reason: "the relay could not store the report; the next report replaces it"
                        .to_owned(),
                    strike: false,
                    kind: RejectReason::StoreFailed,
                })
            }
        }
    }

    async fn handle(
        &mut self,
        text: &str,
        socket: &mut WebSocket,
    ) -> Result<Option<RelayMessage>, Refusal> {
        let max = self.state.limits.max_report_bytes;
        if text.len() > max {
            return Err(Refusal::strike(format!(
                "message of {} bytes exceeds the limit of {max} bytes",
                text.len()
            ))
            .of(RejectReason::TooLarge));
        }
        let message: AgentMessage = serde_json::from_str(text).map_err(|error| {
            Refusal::strike(format!("malformed message: {error}")).of(RejectReason::Malformed)
        })?;
        match message {
            AgentMessage::Hello(hello) => {
                let welcome = self.hello(hello).await?;
                // Welcome first, so requests never reach the agent before it.
                if !send(socket, &welcome).await {
                    return Err(Refusal {
                        seq: None,
                        reason: "welcome could not be sent".to_owned(),
                        strike: true,
                        kind: RejectReason::ConnectionFailed,
                    });
                }
                self.register().await;
                Ok(None)
            }
            AgentMessage::Report(report) => {
                // Reports are acked in order: one sent before the previous ack waits for it.
                if self.storing.is_some() {
                    let stored = next_stored(&mut self.storing).await;
                    let reply = self.report_stored(stored);
                    if !self.send_reply(socket, reply).await {
                        return Err(Refusal {
                            seq: None,
                            reason: "an ack could not be sent".to_owned(),
                            strike: false,
                            kind: RejectReason::ConnectionFailed,
                        });
                    }
                }
                self.report(report).map(|()| None)
            }
            answer => {
                if self.agent_id.is_none() {
                    return Err(Refusal::strike("send hello before answers"));
                }
                self.answer(answer, text.len()).map(|()| None)
            }
        }
    }

    /// Registers the session and serves the agent's request subjects.
    async fn register(&mut self) {
        let Some(agent_id) = self.agent_id.clone() else {
            return;
        };
        let tenant = self.principal.tenant.clone();
        let (link, outbound) = self.state.registry.register(
            &tenant,
            &agent_id,
            self.principal.has(Scope::AgentExec),
            self.state.limits.max_requests_per_sec,
        );
        self.link = Some(link);
        self.outbound = Some(outbound);
        self.state.metrics.agents_connected.inc();
        match crate::handlers::serve_agent(&self.state, &tenant, &agent_id).await {
            Ok(responders) => self.responders = responders,
            Err(error) => {
                // This replica still answers requests for the agent it takes itself.
                tracing::warn!(tenant = %tenant, agent_id = %agent_id, %error, "per-agent request subjects not served");
            }
        }
    }

    async fn hello(&mut self, hello: Hello) -> Result<RelayMessage, Refusal> {
        if self.agent_id.is_some() {
            return Err(Refusal::strike("hello was already sent on this connection"));
        }
        if hello.protocol != PROTOCOL_VERSION {
            return Err(Refusal::strike(format!(
                "protocol {} is not supported (this relay speaks {PROTOCOL_VERSION})",
                hello.protocol
            )));
        }
        if !valid_agent_id(&hello.agent_id) {
            return Err(Refusal::strike(
                "agent_id must be 1 to 128 of A-Z a-z 0-9 . _ -",
            ));
        }
        if let Err(reason) = pulse_domain::connection::may_report_as(
            self.principal.agent_id.as_deref(),
            &hello.agent_id,
        ) {
            tracing::info!(tenant = %self.principal.tenant, token_id = %self.principal.token_id, agent_id = %hello.agent_id, "agent id refused for this token");
            return Err(Refusal::strike(reason));
        }
        let session = AgentSession {
            id: hello.agent_id.clone(),
            hostname: limits_text(&hello.hostname, limits::MAX_NAME_CHARS),
            agent_version: limits_text(&hello.agent_version, 64),
            report_interval_ms: hello.report_interval_ms.clamp(100, 24 * 3600 * 1000),
            token_id: Some(self.principal.token_id),
        };
        let stored = async {
            let tx = self.state.store.tenant_tx(&self.principal.tenant).await?;
            agents::connect(&tx, &session).await?;
            tx.commit().await
        }
        .await;
        if let Err(error) = stored {
            tracing::error!(%error, "agent session not recorded");
            return Err(Refusal {
                seq: None,
                reason: "the relay cannot store the session right now; retry".to_owned(),
                strike: false,
                kind: RejectReason::StoreFailed,
            });
        }
        // Three missed intervals, at least the configured liveness timeout, plus slack.
        let interval = Duration::from_millis(session.report_interval_ms);
        self.idle_timeout =
            (interval * 3).max(self.state.limits.offline_after) + Duration::from_secs(10);
        tracing::info!(tenant = %self.principal.tenant, agent_id = %hello.agent_id, hostname = %session.hostname, agent_exec = self.principal.has(Scope::AgentExec), "agent connected");
        self.agent_id = Some(hello.agent_id.clone());
        Ok(RelayMessage::Welcome {
            protocol: PROTOCOL_VERSION,
            agent_id: hello.agent_id,
            offline_after_ms: u64::try_from(self.state.limits.offline_after.as_millis())
                .unwrap_or(u64::MAX),
        })
    }

    /// Checks a report and hands it to ingest; its ack follows when the store answers
    /// ([`Session::report_stored`]).
    fn report(&mut self, mut report: Report) -> Result<(), Refusal> {
        let received = Instant::now();
        let seq = Some(report.seq);
        let Some(agent_id) = self.agent_id.clone() else {
            return Err(Refusal {
                seq,
                ..Refusal::strike("send hello before reports")
            });
        };
        if !self.budget.try_take(Instant::now()) {
            return Err(Refusal {
                seq,
                reason: format!(
                    "rate limit: at most {} reports per second",
                    self.state.limits.max_reports_per_sec
                ),
                strike: false,
                kind: RejectReason::RateLimited,
            });
        }
        if report.resources.len() > limits::MAX_RESOURCES_PER_REPORT {
            return Err(Refusal {
                seq,
                ..Refusal::strike(format!(
                    "report has {} resources; the limit is {}",
                    report.resources.len(),
                    limits::MAX_RESOURCES_PER_REPORT
                ))
                .of(RejectReason::TooManyResources)
            });
        }
        let mut truncated = 0;
        for resource in &mut report.resources {
            if resource.sanitize() {
                truncated += 1;
            }
        }
        if truncated > 0 {
            tracing::info!(agent_id = %agent_id, truncated, "over-long resource text truncated");
        }
        let seq = report.seq;
        let details: Vec<(ResourceId, u64)> = report
            .resources
            .iter()
            .map(|r| {
                let id = ResourceId::of(r.resource_type, &agent_id, &r.source_id);
                (id, self.details_hasher.hash_one(&r.details))
            })
            .collect();
        // Only the session the registry knows for the agent trusts its memory: another session
        // of the same agent may have stored other details since.
        let current = self
            .state
            .registry
            .get(&self.principal.tenant, &agent_id)
            .zip(self.link.as_ref())
            .is_some_and(|(known, mine)| known.generation == mine.generation);
        let details_stored = if current {
            details
                .iter()
                .map(|(id, hash)| self.stored_details.get(id) == Some(hash))
                .collect()
        } else {
            Vec::new()
        };
        let submission = crate::ingest::Submission {
            tenant: self.principal.tenant.clone(),
            agent_id: agent_id.clone(),
            report,
            details_stored,
        };
        let ingest = self.state.ingest.clone();
        self.storing = Some(StoringReport {
            seq,
            received,
            agent_id,
            details,
            stored: Box::pin(async move { ingest.store(submission).await }),
        });
        Ok(())
    }
}

fn limits_text(value: &str, max: usize) -> String {
    pulse_domain::resource::truncate_chars(value, max)
}

async fn send(socket: &mut WebSocket, message: &RelayMessage) -> bool {
    let text = match serde_json::to_string(message) {
        Ok(text) => text,
        Err(error) => {
            tracing::error!(%error, "relay message not encodable");
            return false;
        }
    };
    matches!(
        tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Text(text.into()))).await,
        Ok(Ok(()))
    )
}
