//! pulse-patrol-scheduler: run admission, cadence timers, run records and dispatch, the take
//! deadline and lease sweeps of dispatched runs, and the deterministic alert floor.
//!
//! The alert floor ([`alert_floor`]) evaluates the threshold rules of
//! [`pulse_domain::alert_rules`] on every resource version the relay writes, stores the alert
//! lifecycle and publishes `events.alert.*` through the transactional outbox, which this service
//! relays to JetStream itself.
//!
//! Manual runs ([`manual`]): `pulse.<t>.patrol.run.request` is served in a queue group; each
//! accepted request becomes a `queued` run record with its `events.run.accepted` event, written
//! in one transaction through the same outbox.
//!
//! Dispatch ([`dispatcher`]): one active dispatcher among the replicas admits accepted runs and
//! due cadence runs fairly across tenants and enqueues their `jobs.watch` jobs.

pub mod accept;
pub mod admission;
pub mod alert_floor;
pub mod alert_trigger;
pub mod dispatcher;
pub mod floor_metrics;
pub mod lease_sweep;
pub mod manual;
pub mod take_deadline;

use std::sync::Arc;

use pulse_runtime::{ServiceContext, ServiceSpec};
use tokio::sync::Notify;

pub use alert_floor::{AlertFloor, FloorSettings, TickReport};

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "patrol-scheduler",
    health_port: Some(7661),
};

/// Runs until shutdown is requested.
pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    let notify = ctx.outbox_notify();
    // Accepted runs wait for the dispatcher, which this process wakes after each accept.
    let dispatch_wake = Arc::new(Notify::new());
    let acceptor = accept::RunAcceptor::new(ctx.store.clone(), ctx.bus.subjects().clone())
        .with_outbox_notify(notify.clone())
        .with_dispatch_notify(dispatch_wake.clone())
        .with_scoped_queue_limit(ctx.config.patrol.scoped_queue_limit)
        .with_readiness_gate(pulse_store::settings::ConfigLayer::from_config(
            &ctx.config.ai,
        )?);
    let floor = AlertFloor::new(
        ctx.store.clone(),
        ctx.bus.subjects().clone(),
        FloorSettings::from_config(&ctx.config.alerts),
    )
    .with_outbox_notify(notify.clone())
    .with_metrics(floor_metrics::FloorMetrics::register(&ctx.metrics));
    // Alert-triggered scoped runs; the consumer exists before the outbox relay publishes.
    let alert_trigger = alert_trigger::AlertTrigger::new(
        acceptor.clone(),
        pulse_store::settings::ConfigLayer::from_config(&ctx.config.ai)?,
    )
    .with_metrics(alert_trigger::AlertTriggerMetrics::register(&ctx.metrics))
    .consume(&ctx.bus, ctx.shutdown.clone())
    .await?;
    ctx.outbox_relay();
    let floor_task = tokio::spawn(floor.run(ctx.shutdown.clone()));
    let sweeper = lease_sweep::LeaseSweeper::new(
        ctx.store.clone(),
        ctx.bus.subjects().clone(),
        ctx.config.runner.lease_sweep(),
    )
    .with_take_deadline(take_deadline::TakeDeadline::from_config(&ctx.config.patrol))
    .with_outbox_notify(notify.clone());
    let sweep_task = tokio::spawn(sweeper.run(ctx.shutdown.clone()));
    let dispatcher = dispatcher::Dispatcher::new(
        acceptor.clone(),
        pulse_store::settings::ConfigLayer::from_config(&ctx.config.ai)?,
        dispatcher::DispatchSettings::from_config(&ctx.config),
    )
    .with_wake(dispatch_wake)
    .with_bus(ctx.bus.clone())
    .with_metrics(dispatcher::DispatchMetrics::register(&ctx.metrics));
    pulse_runtime::metrics::PatrolRunMetrics::register(&ctx.metrics);
    let dispatch_task = tokio::spawn(dispatcher.run(ctx.shutdown.clone()));
    let manual = manual::ManualRuns::with_acceptor(acceptor)
        .serve(&ctx.bus)
        .await?;
    ctx.shutdown.cancelled().await;
    manual.stop().await;
    let _ = floor_task.await;
    let _ = alert_trigger.await;
    let _ = sweep_task.await;
    let _ = dispatch_task.await;
    Ok(())
}
