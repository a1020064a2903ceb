//! The API's own routes: the fleet health (`GET /api/health`), this API as an OpenAPI document
//! (`GET /api/openapi.json`) and the agent capabilities manifest (`GET
//! /api/agent/capabilities`), all public. The documents are built once per process from the
//! route table ([`crate::routes::documents`]) and held in [`AppState`].

use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing;
use pulse_api::system::{ActionMode, ApprovalPolicy, Category, HealthReport, Manifest};
use serde_json::Value;

use crate::route::{Answer, RouteSpec, schema};
use crate::state::AppState;

async fn health(State(state): State<AppState>) -> Json<HealthReport> {
    Json(state.fleet.report(Instant::now()))
}

async fn openapi(State(state): State<AppState>) -> impl IntoResponse {
    json(state.documents.openapi.clone())
}

async fn capabilities(State(state): State<AppState>) -> impl IntoResponse {
    json(state.documents.manifest.clone())
}

fn json(document: Bytes) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document)
}

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "GET",
        path: "/api/health",
        scopes: &[],
        public: true,
        name: "get_health",
        title: "Fleet health",
        description: "Whether every Pulse service has a fresh, ready instance (from their heartbeats).",
        category: Category::System,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<HealthReport>,
        },
        errors: &[],
        handler: || routing::get(health),
    },
    RouteSpec {
        method: "GET",
        path: "/api/openapi.json",
        scopes: &[],
        public: true,
        name: "get_openapi_document",
        title: "OpenAPI document",
        description: "This API as an OpenAPI 3.1 document, generated from the route registry.",
        category: Category::System,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<Value>,
        },
        errors: &[],
        handler: || routing::get(openapi),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/capabilities",
        scopes: &[],
        public: true,
        name: "get_agent_capabilities",
        title: "Agent capabilities manifest",
        description: "The capabilities external agents (and the MCP adapter) may use: each route's scope, action mode, approval policy, input and output schemas and error codes, plus the surface contracts and workflow prompts.",
        category: Category::System,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<Manifest>,
        },
        errors: &[],
        handler: || routing::get(capabilities),
    },
];
