//! The MCP server behind `POST /mcp` (see [`crate::mcp`]): the manifest it projects, the HTTP
//! client it calls the API with, and where this gateway listens.

use std::sync::Arc;

use pulse_mcp::McpServer;
use serde_json::Value;

/// What every `/mcp` request shares: the manifest as JSON, the client for calls back into the
/// API, and where this gateway listens.
#[derive(Debug)]
pub struct McpEndpoint {
    manifest: Arc<Value>,
    http: reqwest::Client,
    base_url: String,
}

impl McpEndpoint {
    /// The endpoint over `manifest` (this gateway's capabilities manifest), calling back into the
    /// API at `base_url`.
    pub fn new(base_url: String, manifest: Value) -> anyhow::Result<Self> {
        Ok(Self {
            manifest: Arc::new(manifest),
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(120))
                .build()?,
            base_url,
        })
    }

    /// The MCP server of one request, calling the API with the client's `token`.
    pub fn server(&self, token: String) -> McpServer {
        McpServer::with_manifest(
            self.base_url.clone(),
            Some(token),
            self.http.clone(),
            self.manifest.clone(),
        )
    }
}
