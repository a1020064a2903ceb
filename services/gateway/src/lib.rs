//! The gateway: the HTTP API, authentication, tenant resolution and the fleet health view.

mod actions;
mod agent_context;
mod agent_events;
mod alerts;
mod assistant;
mod audit;
mod auth;
mod body_limit;
mod bootstrap;
mod cost;
pub mod declared_errors;
mod error;
mod event_stream;
pub mod extract;
mod findings;
mod fleet;
mod forecast;
pub mod manifest;
mod mcp;
mod observe;
pub mod openapi;
mod operator_state;
mod patrol;
mod patrol_stream;
pub mod platform;
mod quota_rate;
mod remediation_locks;
mod resources;
pub mod routes;
mod settings;
mod tokens;
mod web;

use std::sync::Arc;

use pulse_runtime::{ServiceContext, ServiceSpec};

pub use error::ApiError;
pub use fleet::{EXPECTED_SERVICES, Fleet};
pub use routes::{API_ROUTES, Answer, RouteSpec, router};
pub use web::FORM_ROUTES;

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "gateway",
    health_port: None,
};

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub store: pulse_store::Store,
    pub fleet: Arc<Fleet>,
    pub max_body_bytes: usize,
    pub http_metrics: observe::HttpMetrics,
    pub settings: Arc<settings::SettingsContext>,
    /// Run requests go to the patrol-scheduler over this bus.
    pub bus: pulse_bus::Bus,
    pub patrol_request_timeout: std::time::Duration,
    /// Open event streams per tenant, bounded by `gateway.max_streams_per_tenant`.
    pub streams: Arc<event_stream::StreamLimits>,
    /// The `[patrol]` cadence settings, for the status's next due time.
    pub patrol: pulse_config::PatrolConfig,
    /// The web UI's sign-in limiter.
    pub web: Arc<web::WebState>,
    /// The per-tenant live feeds of `GET /api/agent/events`.
    pub agent_events: Arc<agent_events::AgentEvents>,
    /// `POST /mcp`: the MCP server over this gateway's manifest and API.
    pub mcp: Arc<mcp::McpEndpoint>,
}

/// Serves the API until shutdown.
pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    bootstrap::run(&ctx).await?;
    let fleet = Arc::new(Fleet::new(std::time::Duration::from_millis(
        ctx.config.gateway.heartbeat_stale_ms,
    )));
    let watcher = tokio::spawn(fleet::watch(
        fleet.clone(),
        ctx.bus.clone(),
        ctx.shutdown.clone(),
    ));
    let key_path = ctx.config.master_key_path();
    let master_key = tokio::task::spawn_blocking(move || {
        pulse_store::settings::MasterKey::load_or_create(&key_path)
    })
    .await??;
    // Publishes the events handlers enqueue (settings changes) after their commit.
    let outbox_notify = ctx.outbox_relay();
    let settings = settings::SettingsContext::new(
        &ctx.config.ai,
        master_key,
        ctx.bus.subjects().clone(),
        outbox_notify.clone(),
    )
    .map_err(|e| anyhow::anyhow!("invalid ai configuration: {e}"))?;
    // Bound first: the MCP endpoint calls back into the API at the address actually bound.
    let listener = pulse_runtime::bind(
        ctx.config.gateway.listen,
        "the API",
        ctx.config.http.reuse_port,
    )
    .await?;
    let mut own = listener.local_addr()?;
    if own.ip().is_unspecified() {
        own.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let state = AppState {
        store: ctx.store.clone(),
        fleet,
        max_body_bytes: ctx.config.gateway.max_body_bytes,
        http_metrics: observe::HttpMetrics::register(&ctx.metrics),
        settings: Arc::new(settings),
        bus: ctx.bus.clone(),
        patrol_request_timeout: std::time::Duration::from_millis(
            ctx.config.nats.request_timeout_ms,
        ),
        streams: Arc::new(event_stream::StreamLimits::new(
            ctx.config.gateway.max_streams_per_tenant,
            ctx.shutdown.clone(),
        )),
        patrol: ctx.config.patrol.clone(),
        web: Arc::new(web::WebState::default()),
        agent_events: Arc::new(agent_events::AgentEvents::new(
            &ctx.bus,
            ctx.shutdown.clone(),
        )),
        mcp: Arc::new(mcp::McpEndpoint::new(format!("http://{own}"))?),
    };
    let app = router(state).merge(pulse_runtime::health_router(
        ctx.readiness.clone(),
        ctx.metrics.clone(),
    ));
    tracing::info!(addr = %listener.local_addr()?, "gateway listening");
    let stop = ctx.shutdown.clone();
    // Event streams write small frames one after another: without TCP_NODELAY, Nagle's
    // algorithm holds each behind the client's delayed ACK of the one before (about 40 ms).
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set on a connection");
        }
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(async move { stop.cancelled().await })
    .await?;
    watcher.abort();
    Ok(())
}
