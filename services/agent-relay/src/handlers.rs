//! Bus handlers for `relay.command`, `relay.observe` and `relay.read`.
//!
//! The tenant-wide subjects are served by every replica in one queue group; the replica that
//! takes a request forwards it to its own session for the agent when it has one, and otherwise
//! over the per-agent subject served by the replica that has it (no responder there means the
//! agent is not connected anywhere). The per-agent subjects are served by the session itself.
//! Both gate an exec read and audit it ([`crate::exec_audit`]).

use std::time::{Duration, Instant};

use pulse_bus::{Bus, BusError, ErrorCode, RequestContext, Responder, relay_api};
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::{
    AgentMessage, Command, MAX_ID_BYTES, Observe, Read, RelayMessage,
};
use pulse_domain::resource::valid_agent_id;

use crate::RelayState;
use crate::api::{
    CommandReceipt, CommandRequest, ObserveReply, ObserveRequest, QUEUE_GROUP, ReadReply,
    ReadRequest,
};
use crate::error::RelayError;
use crate::exec_audit::{self, Answer};
use crate::registry::not_connected;

/// Extra time a hop to another replica gets over the agent's own timeout.
const HOP_SLACK: Duration = Duration::from_secs(2);

fn check_agent(agent_id: &str) -> Result<(), RelayError> {
    if valid_agent_id(agent_id) {
        Ok(())
    } else {
        Err(RelayError::InvalidRequest(
            "agent_id must be 1 to 128 of A-Z a-z 0-9 . _ -".to_owned(),
        ))
    }
}

fn unexpected(answer: &AgentMessage) -> RelayError {
    RelayError::Unexpected(match answer {
        AgentMessage::Hello(_) => "hello",
        AgentMessage::Report(_) => "report",
        AgentMessage::Receipt(_) => "receipt",
        AgentMessage::Observation(_) => "observation",
        AgentMessage::ReadResult(_) => "read_result",
        AgentMessage::Refused(_) => "refused",
    })
}

fn refused(reason: &str) -> RelayError {
    RelayError::Refused(reason.to_owned())
}

/// Maps the error of a hop to another replica back to a typed reply.
fn hop_error(agent_id: &str, error_: BusError) -> RelayError {
    match error_ {
        BusError::NoResponders { .. } => not_connected(agent_id),
        BusError::Timeout { .. } => {
            RelayError::Timeout(format!("agent {agent_id} did not answer in time"))
        }
        BusError::Remote { code, message } => RelayError::Forwarded { code, message },
        other => RelayError::Bus(other.to_string()),
    }
}

/// Forwards to the local session of the agent: `None` when it has none here.
pub async fn command_local(
    state: &RelayState,
    tenant: &TenantId,
    request: CommandRequest,
) -> Option<Result<CommandReceipt, RelayError>> {
    let link = state.registry.get(tenant, &request.agent_id)?;
    if !link.can_exec {
        return Some(Err(RelayError::MissingScope(format!(
            "commands need a token with agent:exec; agent {} connected with a token that lacks it",
            request.agent_id
        ))));
    }
    let message = RelayMessage::Command(Command {
        request_id: state.registry.request_id(),
        action_id: request.action_id,
        lease_id: request.lease_id,
        lease_expires_at: request.lease_expires_at,
        capability: request.capability,
        target: request.target,
    });
    Some(
        match link.forward(message, state.limits.request_timeout).await {
            Ok(AgentMessage::Receipt(receipt)) => Ok(CommandReceipt(receipt)),
            Ok(AgentMessage::Refused(r)) => Err(refused(&r.reason)),
            Ok(other) => Err(unexpected(&other)),
            Err(e) => Err(e),
        },
    )
}

pub async fn observe_local(
    state: &RelayState,
    tenant: &TenantId,
    request: ObserveRequest,
) -> Option<Result<ObserveReply, RelayError>> {
    let link = state.registry.get(tenant, &request.agent_id)?;
    let message = RelayMessage::Observe(Observe {
        request_id: state.registry.request_id(),
        target: request.target,
    });
    let answer = match link.forward(message, state.limits.request_timeout).await {
        Ok(AgentMessage::Observation(o)) => Ok(ObserveReply(o)),
        Ok(AgentMessage::Refused(r)) => Err(refused(&r.reason)),
        Ok(other) => Err(unexpected(&other)),
        Err(e) => Err(e),
    };
    state.metrics.observation(answer.is_ok());
    Some(answer)
}

/// Forwards a read to the local session of its agent (`None` when it has none here) and
/// records an exec's outcome in the audit.
pub async fn read_local(
    state: &RelayState,
    tenant: &TenantId,
    request: ReadRequest,
) -> Option<Result<ReadReply, RelayError>> {
    let link = state.registry.get(tenant, &request.agent_id)?;
    let started = Instant::now();
    let message = RelayMessage::Read(Read {
        request_id: state.registry.request_id(),
        read: request.read.clone(),
    });
    let (answer, refusal_code) = match link.forward(message, state.limits.request_timeout).await {
        Ok(AgentMessage::ReadResult(r)) => (Ok(ReadReply(r)), None),
        // A coded refusal keeps its code in front of the reason, where requesters read it.
        Ok(AgentMessage::Refused(r)) => (
            Err(refused(&match &r.code {
                Some(code) => format!("{code}: {}", r.reason),
                None => r.reason.clone(),
            })),
            Some(r.code),
        ),
        Ok(other) => (Err(unexpected(&other)), None),
        Err(e) => (Err(e), None),
    };
    let audited = match (&answer, &refusal_code) {
        (Ok(reply), _) => Answer::Reply(reply),
        (Err(_), Some(code)) => Answer::AgentRefused(code.as_deref()),
        (Err(error), None) => Answer::Failed(error),
    };
    exec_audit::record(state, tenant, &request, started, audited).await;
    Some(answer)
}

/// The relay's gate on a read; a refused exec is audited here, since no agent sees it.
async fn gate_read(
    state: &RelayState,
    tenant: &TenantId,
    request: &ReadRequest,
) -> Result<(), RelayError> {
    let started = Instant::now();
    if let Err((error, code)) = exec_audit::gate(request) {
        exec_audit::record(state, tenant, request, started, Answer::GateRefused(code)).await;
        return Err(error);
    }
    Ok(())
}

async fn hop<R: pulse_bus::Endpoint>(
    state: &RelayState,
    tenant: &TenantId,
    agent_id: &str,
    request: &R,
) -> Result<R::Reply, RelayError> {
    let subject = relay_api::agent_subject::<R>(state.bus.subjects(), tenant, agent_id);
    state
        .bus
        .request(
            tenant,
            &subject,
            request,
            state.limits.request_timeout + HOP_SLACK,
        )
        .await
        .map_err(|e| hop_error(agent_id, e))
}

/// Serves the tenant-wide subjects until the responders are stopped.
pub async fn serve(state: &RelayState) -> Result<Vec<Responder>, BusError> {
    let bus: &Bus = &state.bus;
    let s = state.clone();
    let command = bus
        .serve_endpoint(move |ctx: RequestContext, request: CommandRequest| {
            let state = s.clone();
            async move {
                check_agent(&request.agent_id)?;
                if request.action_id.is_empty() || request.action_id.len() > MAX_ID_BYTES {
                    return Err(RelayError::InvalidRequest(format!(
                        "action_id must be 1 to {MAX_ID_BYTES} bytes"
                    )));
                }
                if let Some(answer) = command_local(&state, &ctx.tenant, request.clone()).await {
                    return answer;
                }
                let agent_id = request.agent_id.clone();
                hop(&state, &ctx.tenant, &agent_id, &request).await
            }
        })
        .await?;
    let s = state.clone();
    let observe = bus
        .serve_endpoint(move |ctx: RequestContext, request: ObserveRequest| {
            let state = s.clone();
            async move {
                check_agent(&request.agent_id)?;
                if let Some(answer) = observe_local(&state, &ctx.tenant, request.clone()).await {
                    return answer;
                }
                let agent_id = request.agent_id.clone();
                hop(&state, &ctx.tenant, &agent_id, &request).await
            }
        })
        .await?;
    let s = state.clone();
    let read = bus
        .serve_endpoint(move |ctx: RequestContext, request: ReadRequest| {
            let state = s.clone();
            async move {
                check_agent(&request.agent_id)?;
                gate_read(&state, &ctx.tenant, &request).await?;
                if let Some(answer) = read_local(&state, &ctx.tenant, request.clone()).await {
                    return answer;
                }
                let agent_id = request.agent_id.clone();
                let started = Instant::now();
                let answer = hop(&state, &ctx.tenant, &agent_id, &request).await;
                // No replica holds the agent: no session recorded the attempt.
                if let Err(error) = &answer
                    && error.code() == ErrorCode::AgentNotConnected
                {
                    exec_audit::record(
                        &state,
                        &ctx.tenant,
                        &request,
                        started,
                        Answer::Failed(error),
                    )
                    .await;
                }
                answer
            }
        })
        .await?;
    Ok(vec![command, observe, read])
}

/// Serves the per-agent subjects of one session; only this replica's session answers them.
pub async fn serve_agent(
    state: &RelayState,
    tenant: &TenantId,
    agent_id: &str,
) -> Result<Vec<Responder>, BusError> {
    let subjects = state.bus.subjects().clone();
    let gone = |agent_id: &str| not_connected(agent_id);
    let s = state.clone();
    let command = state
        .bus
        .serve(
            &relay_api::agent_subject::<CommandRequest>(&subjects, tenant, agent_id),
            Some(QUEUE_GROUP),
            move |ctx: RequestContext, request: CommandRequest| {
                let state = s.clone();
                async move {
                    let agent_id = request.agent_id.clone();
                    command_local(&state, &ctx.tenant, request)
                        .await
                        .unwrap_or_else(|| Err(gone(&agent_id)))
                }
            },
        )
        .await?;
    let s = state.clone();
    let observe = state
        .bus
        .serve(
            &relay_api::agent_subject::<ObserveRequest>(&subjects, tenant, agent_id),
            Some(QUEUE_GROUP),
            move |ctx: RequestContext, request: ObserveRequest| {
                let state = s.clone();
                async move {
                    let agent_id = request.agent_id.clone();
                    observe_local(&state, &ctx.tenant, request)
                        .await
                        .unwrap_or_else(|| Err(gone(&agent_id)))
                }
            },
        )
        .await?;
    let s = state.clone();
    let read = state
        .bus
        .serve(
            &relay_api::agent_subject::<ReadRequest>(&subjects, tenant, agent_id),
            Some(QUEUE_GROUP),
            move |ctx: RequestContext, request: ReadRequest| {
                let state = s.clone();
                async move {
                    gate_read(&state, &ctx.tenant, &request).await?;
                    let agent_id = request.agent_id.clone();
                    read_local(&state, &ctx.tenant, request)
                        .await
                        .unwrap_or_else(|| Err(gone(&agent_id)))
                }
            },
        )
        .await?;
    Ok(vec![command, observe, read])
}
