//! What every handler shares: [`AppState`], the gateway's per-process state.
//!
//! Its parts are defined in leaf modules (the fleet view, the HTTP metrics, the settings
//! context, the stream bounds, the request-rate windows, the MCP endpoint), so the handlers that read the state and the
//! state itself do not import each other. One part is still defined beside the handlers that
//! read it: the web UI's sign-in limiter (`web`).

use std::sync::Arc;

use axum::body::Bytes;

use crate::event_stream::StreamLimits;
use crate::fleet::Fleet;
use crate::mcp_endpoint::McpEndpoint;
use crate::observe::HttpMetrics;
use crate::quota_rate::QuotaRate;
use crate::settings_context::SettingsContext;
use crate::signin_limit::WebState;
use crate::tenant_feed::TenantFeeds;

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub store: pulse_store::Store,
    pub fleet: Arc<Fleet>,
    pub max_body_bytes: usize,
    pub http_metrics: HttpMetrics,
    pub settings: Arc<SettingsContext>,
    /// Run requests go to the patrol-scheduler over this bus.
    pub bus: pulse_bus::Bus,
    pub patrol_request_timeout: std::time::Duration,
    /// Open event streams per tenant, bounded by `gateway.max_streams_per_tenant`.
    pub streams: Arc<StreamLimits>,
    /// The `[patrol]` cadence settings, for the status's next due time.
    pub patrol: pulse_config::PatrolConfig,
    /// The web UI's sign-in limiter.
    pub web: Arc<WebState>,
    /// The per-tenant live feeds of the event streams (`GET /api/agent/events`,
    /// `GET /api/ai/patrol/stream`).
    pub event_feeds: Arc<TenantFeeds>,
    /// `POST /mcp`: the MCP server over this gateway's manifest and API.
    pub mcp: Arc<McpEndpoint>,
    /// The tenants' request-rate windows (`api_requests_per_sec`), counted in this process.
    pub quota_rate: Arc<QuotaRate>,
    /// This API's OpenAPI document and capabilities manifest, serialized once at start.
    pub documents: Arc<ApiDocuments>,
}

/// This API's own descriptions, as the public routes answer them.
#[derive(Debug)]
pub struct ApiDocuments {
    pub openapi: Bytes,
    pub manifest: Bytes,
}
