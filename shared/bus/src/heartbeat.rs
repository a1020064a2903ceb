//! The heartbeat every service instance publishes on `pulse._sys.heartbeat` (core NATS); the
//! gateway aggregates them into the fleet view.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::envelope::Message;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Service name, e.g. `pulse-verifier`.
    pub service: String,
    /// Unique per process.
    pub instance_id: String,
    pub version: String,
    pub started_at: DateTime<Utc>,
    pub sent_at: DateTime<Utc>,
    /// Whether the instance's `/readyz` would answer ready.
    pub ready: bool,
}

impl Message for Heartbeat {
    const TYPE: &'static str = "pulse.heartbeat";
}
