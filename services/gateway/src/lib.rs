//! The gateway: the HTTP API, authentication, tenant resolution and the fleet health view.

mod actions;
mod agent_context;
mod agent_events;
mod agents;
mod alerts;
mod assistant;
mod audit;
mod auth;
mod authorized;
mod body_limit;
mod bootstrap;
mod connections;
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
mod mcp_endpoint;
mod models;
mod observe;
pub mod openapi;
mod operator_state;
mod patrol;
mod patrol_stream;
pub mod platform;
mod quota_rate;
mod remediation_locks;
mod resources;
mod route;
pub mod routes;
mod settings;
mod settings_context;
mod signin_limit;
mod state;
mod system;
mod tenant_feed;
mod tokens;
mod web;

use std::sync::Arc;

use pulse_runtime::{ServiceContext, ServiceSpec};

pub use error::ApiError;
pub use fleet::{EXPECTED_SERVICES, Fleet};
pub use route::{Answer, RouteSpec};
pub use routes::{API_ROUTES, router};
pub use state::{ApiDocuments, AppState};
pub use web::FORM_ROUTES;

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "gateway",
    health_port: None,
};

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
    let settings = settings_context::SettingsContext::new(
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
    let manifest = routes::manifest();
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
        web: Arc::new(signin_limit::WebState::default()),
        event_feeds: Arc::new(tenant_feed::TenantFeeds::new(
            &ctx.bus,
            ctx.shutdown.clone(),
        )),
        mcp: Arc::new(mcp_endpoint::McpEndpoint::new(
            format!("http://{own}"),
            serde_json::to_value(&manifest)?,
        )?),
        quota_rate: Arc::default(),
        documents: Arc::new(ApiDocuments {
            openapi: serde_json::to_vec(&routes::openapi_document())?.into(),
            manifest: serde_json::to_vec(&manifest)?.into(),
        }),
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
