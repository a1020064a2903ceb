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
pub mod metrics;
pub mod recovery;

use std::time::Duration;

use pulse_runtime::{ServiceContext, ServiceSpec};

/// How long shutdown waits for actions driven in the background (a send, a receipt, a
/// verification) before leaving them to the recovery sweep of the next broker.
const ADVANCE_GRACE: Duration = Duration::from_secs(5);

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "action-broker",
    health_port: Some(7663),
};

/// Runs until shutdown is requested.
pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    metrics::ActionMetrics::register(&ctx.metrics);
    let notify = ctx.outbox_relay();
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
    let mut responders = broker.clone().serve().await?;
    responders.push(capabilities::serve(&ctx).await?);
    ctx.shutdown.cancelled().await;
    for responder in responders {
        responder.stop().await;
    }
    let _ = recovery.await;
    let abandoned = broker.drain(ADVANCE_GRACE).await;
    if abandoned > 0 {
        tracing::warn!(
            actions = abandoned,
            "actions still in progress at shutdown; the recovery sweep takes them up"
        );
    }
    Ok(())
}
