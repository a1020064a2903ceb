//! pulse-action-broker: action plans, policy, approvals and execution leases.
//!
//! [`broker`] serves `pulse.<t>.actions.{plan,decide,execute}.request` in the `action-broker`
//! queue group; its events (`events.approval.pending`, `events.action.completed`) go through the
//! transactional outbox, which this service relays to JetStream itself. [`lifecycle`] runs what
//! was approved, learns the receipt and has the verifier judge it; [`recovery`] takes up, at start
//! and periodically, whatever a crash interrupted.

pub mod broker;
pub mod capabilities;
pub mod error;
pub mod lifecycle;
pub mod recovery;

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
    let broker = broker::Broker::new(
        ctx.store.clone(),
        ctx.bus.clone(),
        pulse_store::settings::ConfigLayer::from_config(&ctx.config.ai)?,
    )
    .with_settings(broker::BrokerSettings::from_config(&ctx.config))
    .with_outbox_notify(notify);
    // Interrupted actions are taken up at start and on every sweep (see `recovery`).
    let recovery = {
        let shutdown = ctx.shutdown.clone();
        tokio::spawn(
            broker
                .clone()
                .run_recovery(async move { shutdown.cancelled().await }),
        )
    };
    let responders = broker.serve().await?;
    capabilities::serve(&ctx).await?;
    ctx.shutdown.cancelled().await;
    for responder in responders {
        responder.stop().await;
    }
    let _ = stop_tx.send(true);
    let _ = recovery.await;
    let _ = outbox_task.await;
    Ok(())
}
