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

pub use pulse_bus::relay_api::{
    RELAY_QUEUE_GROUP as QUEUE_GROUP, RelayCommandReceipt as CommandReceipt,
    RelayCommandRequest as CommandRequest, RelayObserveReply as ObserveReply,
    RelayObserveRequest as ObserveRequest, RelayReadReply as ReadReply,
    RelayReadRequest as ReadRequest,
};
