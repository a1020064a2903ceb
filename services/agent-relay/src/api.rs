//! The relay's request/reply API on the bus (NATS core):
//!
//! | subject | request | reply |
//! |---|---|---|
//! | `pulse.<tenant>.relay.command` | [`CommandRequest`] | [`CommandReceipt`] |
//! | `pulse.<tenant>.relay.observe` | [`ObserveRequest`] | [`ObserveReply`] |
//! | `pulse.<tenant>.relay.read` | [`ReadRequest`] | [`ReadReply`] |
//!
//! Any relay replica takes a request (queue group `agent-relay`) and forwards it to the replica
//! holding the agent's session over `pulse.<tenant>.relay.<verb>.<agent>`. Errors travel as
//! typed error replies: `agent_not_connected`, `agent_timeout`, `agent_refused`,
//! `missing_scope` (commands need a token with `agent:exec`), `rate_limited`,
//! `agent_response_too_large`, `invalid_request`.

use chrono::{DateTime, Utc};
use pulse_bus::{Message, Request};
use pulse_domain::agent_protocol::{
    Observation, ReadRequest as ReadSpec, ReadResult, Receipt, ResourceTarget,
};
use serde::{Deserialize, Serialize};

/// Queue group every relay replica serves the request subjects in.
pub const QUEUE_GROUP: &str = "agent-relay";

/// Run one typed capability on an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandRequest {
    pub agent_id: String,
    /// The agent runs each action id at most once; re-send the same id to learn the outcome.
    pub action_id: String,
    pub lease_id: String,
    pub lease_expires_at: DateTime<Utc>,
    /// `service.start|stop|restart`, `docker.container.start|stop|restart`.
    pub capability: String,
    pub target: String,
}

impl Message for CommandRequest {
    const TYPE: &'static str = "pulse.relay.command";
}

/// The agent's receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CommandReceipt(pub Receipt);

impl Message for CommandReceipt {
    const TYPE: &'static str = "pulse.relay.command.receipt";
}

impl Request for CommandRequest {
    type Reply = CommandReceipt;
}

/// Re-collect one resource on an agent now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObserveRequest {
    pub agent_id: String,
    pub target: ResourceTarget,
}

impl Message for ObserveRequest {
    const TYPE: &'static str = "pulse.relay.observe";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ObserveReply(pub Observation);

impl Message for ObserveReply {
    const TYPE: &'static str = "pulse.relay.observe.reply";
}

impl Request for ObserveRequest {
    type Reply = ObserveReply;
}

/// A bounded live read on an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadRequest {
    pub agent_id: String,
    pub read: ReadSpec,
}

impl Message for ReadRequest {
    const TYPE: &'static str = "pulse.relay.read";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReadReply(pub ReadResult);

impl Message for ReadReply {
    const TYPE: &'static str = "pulse.relay.read.reply";
}

impl Request for ReadRequest {
    type Reply = ReadReply;
}
