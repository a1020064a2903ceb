//! pulse-patrol-scheduler: the deterministic alert floor now; run admission, cadence timers and
//! run records arrive with Step 4.
//!
//! The alert floor ([`alert_floor`]) evaluates the threshold rules of
//! [`pulse_domain::alert_rules`] on every resource version the relay writes, stores the alert
//! lifecycle and publishes `events.alert.*` through the transactional outbox, which this service
//! relays to JetStream itself.
//!
//! Manual runs ([`manual`]): `pulse.<t>.patrol.run.request` is served in a queue group; each
//! accepted request becomes a `queued` run record with its `events.run.accepted` event and
//! `jobs.watch` job, written in one transaction through the same outbox.

pub mod accept;
pub mod admission;
pub mod alert_floor;
pub mod floor_metrics;
pub mod manual;

use std::sync::Arc;

use pulse_bus::OutboxRelay;
use pulse_runtime::{ServiceContext, ServiceSpec};
use tokio::sync::Notify;

pub use alert_floor::{AlertFloor, FloorSettings, TickReport};

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "patrol-scheduler",
    health_port: Some(7661),
};

/// Runs until shutdown is requested.
pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let floor = AlertFloor::new(
        ctx.store.clone(),
        ctx.bus.subjects().clone(),
        FloorSettings::from_config(&ctx.config.alerts),
    )
    .with_outbox_notify(notify.clone())
    .with_metrics(floor_metrics::FloorMetrics::register(&ctx.metrics));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let outbox = OutboxRelay::new(
        ctx.store.pool().clone(),
        ctx.bus.jetstream().clone(),
        pulse_bus::RelayConfig::default(),
    )
    .with_notify(notify.clone());
    let outbox_task = tokio::spawn(async move { outbox.run(stop_rx).await });
    let floor_task = tokio::spawn(floor.run(ctx.shutdown.clone()));
    let manual = manual::ManualRuns::new(ctx.store.clone(), ctx.bus.subjects().clone())
        .with_outbox_notify(notify.clone())
        .serve(&ctx.bus)
        .await?;
    ctx.shutdown.cancelled().await;
    manual.stop().await;
    let _ = floor_task.await;
    let _ = stop_tx.send(true);
    let _ = outbox_task.await;
    Ok(())
}
