//! pulse-action-broker: action plans, policy, approvals and execution leases (Step 6).
//!
//! [`broker`] serves `pulse.<t>.actions.{plan,decide,execute}.request` in the `action-broker`
//! queue group; its events (`events.approval.pending`, `events.action.completed`) go through the
//! transactional outbox, which this service relays to JetStream itself.

pub mod broker;

use std::sync::Arc;

use pulse_bus::OutboxRelay;
use pulse_runtime::{ServiceContext, ServiceSpec};
use tokio::sync::Notify;

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "action-broker",
    health_port: Some(7663),
};

/// Runs until shutdown is requested.
pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let outbox = OutboxRelay::new(
        ctx.store.pool().clone(),
        ctx.bus.jetstream().clone(),
        pulse_bus::RelayConfig::default(),
    )
    .with_notify(notify.clone());
    let outbox_task = tokio::spawn(async move { outbox.run(stop_rx).await });
    let responders = broker::Broker::new(
        ctx.store.clone(),
        ctx.bus.clone(),
        pulse_store::settings::ConfigLayer::from_config(&ctx.config.ai)?,
    )
    .with_outbox_notify(notify)
    .serve()
    .await?;
    ctx.shutdown.cancelled().await;
    for responder in responders {
        responder.stop().await;
    }
    let _ = stop_tx.send(true);
    let _ = outbox_task.await;
    Ok(())
}
