//! The route table and the router built from it.

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{delete, get, post};
use axum::{Json, Router, middleware};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;

use crate::fleet::HealthReport;
use crate::{
    ApiError, AppState, actions, alerts, audit, auth, body_limit, findings, forecast, observe,
    patrol, patrol_stream, remediation_locks, resources, settings, tokens,
};
use crate::{cost, operator_state};

/// A documented API route: what it needs and whether it takes a JSON body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteSpec {
    pub method: &'static str,
    pub path: &'static str,
    /// Every scope required; empty for public routes.
    pub scopes: &'static [Scope],
    pub public: bool,
    pub json_body: bool,
}

/// Every `/api/` route. Tests walk this table; keep it in step with [`router`].
pub const API_ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "GET",
        path: "/api/health",
        scopes: &[],
        public: true,
        json_body: false,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tokens",
        scopes: &[Scope::Admin],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "GET",
        path: "/api/tokens",
        scopes: &[Scope::Admin],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "DELETE",
        path: "/api/tokens/{id}",
        scopes: &[Scope::Admin],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/resources",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/resources/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/resources/{id}/forecast",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/alerts",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/run",
        scopes: &[Scope::Admin, Scope::AiExecute],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/preflight",
        scopes: &[Scope::Admin, Scope::AiExecute],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/runs",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/runs/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/status",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/stream",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/findings",
        scopes: &[Scope::AiExecute],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/findings/{id}",
        scopes: &[Scope::AiExecute],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/acknowledge",
        scopes: &[Scope::AiExecute],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/snooze",
        scopes: &[Scope::AiExecute],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/dismiss",
        scopes: &[Scope::AiExecute],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/dismiss/undo",
        scopes: &[Scope::AiExecute],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/resolve",
        scopes: &[Scope::AiExecute],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/suppress",
        scopes: &[Scope::AiExecute],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/suppress/undo",
        scopes: &[Scope::AiExecute],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/findings/note",
        scopes: &[Scope::AiExecute],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "GET",
        path: "/api/settings/ai",
        scopes: &[Scope::Admin],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "PUT",
        path: "/api/settings/ai",
        scopes: &[Scope::Admin],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "POST",
        path: "/api/actions/plan",
        scopes: &[Scope::ActionsPlan],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions/pending",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "POST",
        path: "/api/actions/{id}/decision",
        scopes: &[Scope::ActionsApprove],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "POST",
        path: "/api/actions/{id}/execute",
        scopes: &[Scope::ActionsExecute],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions/{id}/audit",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/audit/verify",
        scopes: &[Scope::Admin],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/resources/{id}/remediation-lock",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "PUT",
        path: "/api/resources/{id}/remediation-lock",
        scopes: &[Scope::ActionsApprove],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "GET",
        path: "/api/resources/{id}/operator-state",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "PUT",
        path: "/api/resources/{id}/operator-state",
        scopes: &[Scope::ActionsApprove],
        public: false,
        json_body: true,
    },
    RouteSpec {
        method: "DELETE",
        path: "/api/resources/{id}/operator-state",
        scopes: &[Scope::ActionsApprove],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/cost/summary",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/cost/export",
        scopes: &[Scope::MonitoringRead],
        public: false,
        json_body: false,
    },
];

pub fn router(state: AppState) -> Router {
    let limit = state.max_body_bytes;
    Router::new()
        .route("/api/health", get(health))
        .route("/api/actions", get(actions::list))
        .route("/api/actions/plan", post(actions::plan))
        .route("/api/actions/pending", get(actions::pending))
        .route("/api/actions/{id}", get(actions::get))
        .route("/api/actions/{id}/decision", post(actions::decision))
        .route("/api/actions/{id}/execute", post(actions::execute))
        .route("/api/actions/{id}/audit", get(actions::audit))
        .route("/api/audit/verify", get(audit::verify))
        .route(
            "/api/resources/{id}/remediation-lock",
            get(remediation_locks::get).put(remediation_locks::put),
        )
        .route("/api/tokens", get(tokens::list).post(tokens::create))
        .route("/api/tokens/{id}", delete(tokens::revoke))
        .route("/api/resources", get(resources::list))
        .route("/api/resources/{id}", get(resources::get))
        .route("/api/resources/{id}/forecast", get(forecast::get))
        .route("/api/alerts", get(alerts::list))
        .route("/api/settings/ai", get(settings::get).put(settings::put))
        .route("/api/ai/patrol/run", post(patrol::run))
        .route("/api/ai/patrol/preflight", post(patrol::preflight))
        .route("/api/ai/patrol/runs", get(patrol::list))
        .route("/api/ai/patrol/runs/{id}", get(patrol::get))
        .route("/api/ai/patrol/status", get(patrol::status))
        .route("/api/ai/patrol/stream", get(patrol_stream::stream))
        .route("/api/ai/patrol/findings", get(findings::list))
        .route("/api/ai/patrol/findings/note", post(findings::note))
        .route("/api/ai/patrol/findings/{id}", get(findings::get))
        .route("/api/ai/patrol/acknowledge", post(findings::acknowledge))
        .route("/api/ai/patrol/snooze", post(findings::snooze))
        .route("/api/ai/patrol/dismiss", post(findings::dismiss))
        .route("/api/ai/patrol/dismiss/undo", post(findings::undo_dismiss))
        .route("/api/ai/patrol/resolve", post(findings::resolve))
        .route("/api/ai/patrol/suppress", post(findings::suppress))
        .route(
            "/api/ai/patrol/suppress/undo",
            post(findings::undo_suppress),
        )
        .route(
            "/api/resources/{id}/operator-state",
            get(operator_state::get)
                .put(operator_state::put)
                .delete(operator_state::delete),
        )
        .route("/api/ai/cost/summary", get(cost::summary))
        .route("/api/ai/cost/export", get(cost::export))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        // Outside authentication, so even a refused caller can read its answer.
        .layer(middleware::from_fn_with_state(
            limit,
            body_limit::reject_oversized,
        ))
        .layer(middleware::from_fn_with_state(
            state.http_metrics.clone(),
            observe::observe,
        ))
        .with_state(state)
}

async fn health(State(state): State<AppState>) -> Json<HealthReport> {
    Json(state.fleet.report(Instant::now()))
}

async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this route does not accept that method",
    )
}
