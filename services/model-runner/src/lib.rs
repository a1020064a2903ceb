//! pulse-model-runner: the agentic loop, provider transports and budgets, and the Watch and
//! investigation runs built on them.
//!
//! The service harness connects to NATS and Postgres, migrates, reports health and heartbeats,
//! and drains on shutdown. [`provider`] holds the provider-neutral types and the transports
//! (OpenAI-compatible, Anthropic, Gemini, Ollama); [`agent_loop`] drives them under the tool policy,
//! [`watch`] and [`investigation`] take their jobs from the bus.

pub mod agent_loop;
pub mod assistant;
pub mod cost;
pub mod export_audit;
pub mod investigation;
pub mod metrics;
pub mod patrol_connection;
pub mod preflight;
pub mod pricing;
pub mod provider;
pub mod readiness_service;
pub mod redaction;
pub mod route;
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
    let providers = Arc::new(provider::pool::ProviderPool::new());
    let watch = watch::WatchService::start(&ctx, providers.clone()).await?;
    let readiness = readiness_service::ReadinessService::start(&ctx, providers.clone()).await?;
    let investigations = investigation::InvestigationHandle::start(&ctx, providers.clone()).await?;
    let assistant = assistant::AssistantHandle::start(&ctx, providers).await?;
    ctx.shutdown.cancelled().await;
    assistant.stop().await;
    investigations.stop().await;
    readiness.stop().await;
    watch.stop().await;
    Ok(())
}
