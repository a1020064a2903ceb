//! pulse-patrol-scheduler: run admission, cadence timers and run records (Step 4).
//!
//! This build runs the service harness only: it connects to NATS and Postgres, migrates,
//! reports health and heartbeats, and drains on shutdown. Its handlers arrive with their steps.

use pulse_runtime::{ServiceContext, ServiceSpec};

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "patrol-scheduler",
    health_port: Some(7661),
};

/// Runs until shutdown is requested.
pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    ctx.shutdown.cancelled().await;
    Ok(())
}
