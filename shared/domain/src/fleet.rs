//! The services that make up a Pulse stack, by the names `/api/health` reports.

/// Every one must have a ready instance for the stack to be healthy.
pub const FLEET_SERVICES: [&str; 7] = [
    "gateway",
    "patrol-scheduler",
    "model-runner",
    "action-broker",
    "verifier",
    "agent-relay",
    "connector",
];
