//! pulse-agent-relay: the endpoint agents connect to (default `127.0.0.1:7656`).
//!
//! Agents open a WebSocket on [`AGENT_WS_PATH`] with a token carrying `agent:report`; the tenant
//! comes from the token. Each report is stored transactionally (resources, aliases, metric
//! samples, and `events.resource.changed` through the outbox), together with the reports of other
//! agents of the tenant that arrived meanwhile (group commit); an outbox relay publishes the
//! events and a liveness task turns silent agents offline and their resources `unknown`.
//!
//! Over the same connection the relay forwards requests from the bus to the agent
//! (`relay.command`, `relay.observe`, `relay.read`; see [`api`]) and returns its answer.
//! Commands are forwarded only to sessions whose token carries `agent:exec`.

pub mod api;
pub mod error;
mod exec_audit;
mod handlers;
mod ingest;
mod limits;
mod liveness;
pub mod metrics;
mod registry;
mod session;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use pulse_bus::Subjects;
use pulse_domain::agent_protocol::AGENT_WS_PATH;
use pulse_runtime::{ServiceContext, ServiceSpec};
use tokio::sync::Notify;

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "agent-relay",
    health_port: None,
};

/// What every session and background task of the relay shares.
#[derive(Clone)]
pub struct RelayState {
    pub store: pulse_store::Store,
    pub subjects: Subjects,
    pub limits: RelayLimits,
    /// Wakes the outbox relay after a commit that enqueued events.
    pub outbox_notify: Arc<Notify>,
    pub bus: pulse_bus::Bus,
    /// The agent sessions of this process.
    pub registry: Arc<registry::Registry>,
    /// Where sessions hand their reports to be stored.
    pub ingest: ingest::Ingest,
    /// The relay's `/metrics` series.
    pub metrics: metrics::RelayMetrics,
    /// Each tenant's standing as this process last read it, shared by its sessions.
    pub standing: Arc<session::StandingCache>,
}

/// Per-agent limits and the liveness timeout.
#[derive(Debug, Clone, Copy)]
pub struct RelayLimits {
    pub offline_after: Duration,
    pub max_report_bytes: usize,
    pub max_reports_per_sec: u32,
    pub request_timeout: Duration,
    pub max_requests_per_sec: u32,
    pub max_response_bytes: usize,
}

impl RelayLimits {
    pub fn from_config(config: &pulse_config::RelayConfig) -> Self {
        Self {
            offline_after: Duration::from_millis(config.agent_offline_after_ms.max(100)),
            max_report_bytes: config.max_report_bytes.max(1024),
            max_reports_per_sec: config.max_reports_per_sec.max(1),
            request_timeout: Duration::from_millis(config.request_timeout_ms.max(100)),
            max_requests_per_sec: config.max_requests_per_sec.max(1),
            max_response_bytes: config.max_response_bytes.max(1024),
        }
    }
}

pub fn router(state: RelayState) -> Router {
    Router::new()
        .route(AGENT_WS_PATH, get(session::upgrade))
        .with_state(state)
}

pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    let outbox_notify = ctx.outbox_relay();
    let ingest = ingest::Ingest::start(ingest::IngestContext {
        store: ctx.store.clone(),
        subjects: ctx.bus.subjects().clone(),
        outbox_notify: outbox_notify.clone(),
    });
    let state = RelayState {
        store: ctx.store.clone(),
        subjects: ctx.bus.subjects().clone(),
        limits: RelayLimits::from_config(&ctx.config.relay),
        outbox_notify,
        bus: ctx.bus.clone(),
        registry: Arc::default(),
        ingest,
        metrics: metrics::RelayMetrics::register(&ctx.metrics),
        standing: Arc::default(),
    };
    let responders = handlers::serve(&state).await?;
    let liveness_task = tokio::spawn(liveness::run(state.clone(), ctx.shutdown.clone()));

    let app = router(state).merge(pulse_runtime::health_router(
        ctx.readiness.clone(),
        ctx.metrics.clone(),
    ));
    let listener = pulse_runtime::bind(
        ctx.config.relay.listen,
        "agents",
        ctx.config.http.reuse_port,
    )
    .await?;
    tracing::info!(addr = %listener.local_addr()?, "agent relay listening");
    let stop = ctx.shutdown.clone();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    for responder in responders {
        responder.stop().await;
    }
    let _ = liveness_task.await;
    served?;
    Ok(())
}
