//! The agent-relay's request/reply API on the bus (NATS core), declared here so every service
//! that asks the relay (action-broker, verifier, model-runner) and the relay itself share one
//! definition of the wire contract:
//!
//! | subject | request | reply |
//! |---|---|---|
//! | `pulse.<tenant>.relay.command` | [`RelayCommandRequest`] | [`RelayCommandReceipt`] |
//! | `pulse.<tenant>.relay.observe` | [`RelayObserveRequest`] | [`RelayObserveReply`] |
//! | `pulse.<tenant>.relay.read` | [`RelayReadRequest`] | [`RelayReadReply`] |
//!
//! Errors travel as typed error replies: `agent_not_connected`, `agent_timeout`,
//! `agent_refused`, `missing_scope` (commands need a token with `agent:exec`), `rate_limited`,
//! `agent_response_too_large`, `invalid_request`.
//!
//! Callers use [`crate::clients::RelayClient`]. The relay replica that receives a request forwards
//! it to the replica holding the agent's session on [`agent_subject`].

use chrono::{DateTime, Utc};
use pulse_domain::agent_protocol::{
    Observation, ReadRequest as ReadSpec, ReadResult, Receipt, ResourceTarget,
};
use serde::{Deserialize, Serialize};

use pulse_domain::TenantId;

use pulse_capabilities::ErrorCode;

use crate::{Endpoint, Message, Request, Subjects};

/// Queue group every relay replica serves the request subjects in.
pub const RELAY_QUEUE_GROUP: &str = "agent-relay";

/// Run one typed capability on an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayCommandRequest {
    pub agent_id: String,
    /// The agent runs each action id at most once; re-send the same id to learn the outcome.
    pub action_id: String,
    pub lease_id: String,
    pub lease_expires_at: DateTime<Utc>,
    /// `service.start|stop|restart`, `docker.container.start|stop|restart`.
    pub capability: String,
    pub target: String,
}

impl Message for RelayCommandRequest {
    const TYPE: &'static str = "pulse.relay.command";
}

/// The agent's receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RelayCommandReceipt(pub Receipt);

impl Message for RelayCommandReceipt {
    const TYPE: &'static str = "pulse.relay.command.receipt";
}

impl Request for RelayCommandRequest {
    type Reply = RelayCommandReceipt;
}

/// Re-collect one resource on an agent now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayObserveRequest {
    pub agent_id: String,
    pub target: ResourceTarget,
}

impl Message for RelayObserveRequest {
    const TYPE: &'static str = "pulse.relay.observe";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RelayObserveReply(pub Observation);

impl Message for RelayObserveReply {
    const TYPE: &'static str = "pulse.relay.observe.reply";
}

impl Request for RelayObserveRequest {
    type Reply = RelayObserveReply;
}

/// A bounded live read on an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayReadRequest {
    pub agent_id: String,
    pub read: ReadSpec,
    /// Who asks (`run:<run id>`, `chat:<session>`), recorded in the relay's exec audit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<String>,
}

impl Message for RelayReadRequest {
    const TYPE: &'static str = "pulse.relay.read";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RelayReadReply(pub ReadResult);

impl Message for RelayReadReply {
    const TYPE: &'static str = "pulse.relay.read.reply";
}

impl Request for RelayReadRequest {
    type Reply = RelayReadReply;
}

/// Every code the agent-relay answers a command, observation or read with (a reply forwarded
/// from the replica holding the agent's session keeps its code, which is one of these).
pub const RELAY_ERRORS: &[ErrorCode] = &[
    ErrorCode::InvalidRequest,
    ErrorCode::MissingScope,
    ErrorCode::AgentNotConnected,
    ErrorCode::AgentTimeout,
    ErrorCode::AgentRefused,
    ErrorCode::RateLimited,
    ErrorCode::AgentResponseTooLarge,
    ErrorCode::InternalError,
    ErrorCode::ServiceUnavailable,
];

impl Endpoint for RelayCommandRequest {
    const SUBJECT: &'static str = "relay.command";
    const QUEUE_GROUP: &'static str = RELAY_QUEUE_GROUP;
    const ERRORS: &'static [ErrorCode] = RELAY_ERRORS;
    const UNAVAILABLE: ErrorCode = ErrorCode::ActionExecutorUnavailable;
}

impl Endpoint for RelayObserveRequest {
    const SUBJECT: &'static str = "relay.observe";
    const QUEUE_GROUP: &'static str = RELAY_QUEUE_GROUP;
    const ERRORS: &'static [ErrorCode] = RELAY_ERRORS;
    const UNAVAILABLE: ErrorCode = ErrorCode::ActionExecutorUnavailable;
}

impl Endpoint for RelayReadRequest {
    const SUBJECT: &'static str = "relay.read";
    const QUEUE_GROUP: &'static str = RELAY_QUEUE_GROUP;
    const ERRORS: &'static [ErrorCode] = RELAY_ERRORS;
    const UNAVAILABLE: ErrorCode = ErrorCode::ActionExecutorUnavailable;
}

/// `pulse.<tenant>.relay.<verb>.<agent>`: the subject the relay replica holding `agent_id`'s
/// session serves requests of type `E` on.
pub fn agent_subject<E: Endpoint>(
    subjects: &Subjects,
    tenant: &TenantId,
    agent_id: &str,
) -> String {
    let verb = E::SUBJECT.strip_prefix("relay.").unwrap_or(E::SUBJECT);
    subjects.relay_agent(tenant, verb, agent_id)
}
