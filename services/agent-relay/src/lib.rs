//! pulse-agent-relay: the endpoint agents connect to (default `127.0.0.1:7656`).
//!
//! This build serves the relay listener with the health routes; agent sessions, report ingestion
//! and the command channel arrive with Step 2.

use pulse_runtime::{ServiceContext, ServiceSpec};

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "agent-relay",
    health_port: None,
};

pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    let app = pulse_runtime::health_router(ctx.readiness.clone(), ctx.metrics.clone());
    let addr = ctx.config.relay.listen;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    tracing::info!(%addr, "agent relay listening");
    let stop = ctx.shutdown.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await?;
    Ok(())
}
