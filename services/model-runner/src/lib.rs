//! pulse-model-runner: the Watch runs, investigations, preflights and Assistant turns, built on
//! the agentic loop of `pulse-agent-loop`.
//!
//! The service harness connects to NATS and Postgres, migrates, reports health and heartbeats,
//! and drains on shutdown. The loop, the provider transports and their pool, routes, prices and
//! the cost ledger sink are `pulse_agent_loop`'s; this crate gives the loop what it runs with:
//! the tools ([`tools`]), the run's redactor ([`redaction`]), the export audit
//! ([`export_audit`]) and the call metrics ([`metrics`]). [`watch`] and [`investigation`] take
//! their jobs from the bus.

pub mod assistant;
pub mod export_audit;
pub mod investigation;
pub mod metrics;
pub mod models_service;
pub mod patrol_connection;
pub mod preflight;
pub mod readiness_service;
pub mod redaction;
pub mod tools;

/// The provider table, owned by `pulse-providers` so settings and readiness read the same one.
pub use pulse_providers::registry;
pub mod watch;

use std::sync::Arc;

use pulse_runtime::{ServiceContext, ServiceSpec};

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "model-runner",
    health_port: Some(7662),
};

/// Runs until shutdown is requested.
pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    metrics::ModelMetrics::register(&ctx.metrics);
    // One set of provider HTTP clients for every surface of this process.
    let providers = Arc::new(pulse_agent_loop::provider::pool::ProviderPool::new());
    let watch = watch::WatchService::start(&ctx, providers.clone()).await?;
    let readiness = readiness_service::ReadinessService::start(&ctx, providers.clone()).await?;
    // After the readiness service: it creates the master key when there is none.
    let models = models_service::ModelsService::start(&ctx, providers.clone()).await?;
    let investigations = investigation::InvestigationHandle::start(&ctx, providers.clone()).await?;
    let assistant = assistant::AssistantHandle::start(&ctx, providers).await?;
    ctx.shutdown.cancelled().await;
    assistant.stop().await;
    investigations.stop().await;
    models.stop().await;
    readiness.stop().await;
    watch.stop().await;
    Ok(())
}
