//! The route table: every module's routes ([`RouteSpec`]s declared next to their handlers),
//! assembled in the order the API lists them, and the router built from them. The OpenAPI
//! document and the capabilities manifest are projected from the same table
//! ([`openapi_document`], [`manifest`]).
//!
//! This module is the top of the gateway's module graph: it imports the API modules, and none
//! imports it (authentication and the declared-codes check are handed the lookups they need).

use std::sync::LazyLock;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{MethodRouter, post};
use pulse_api::system::Manifest;
use pulse_capabilities::ErrorCode;
use serde_json::Value;

pub use crate::route::{RouteSpec, UNROUTED};

use crate::error::ApiError;
use crate::state::AppState;
use crate::{
    actions, agent_context, agents, alerts, assistant, audit, auth, body_limit, connections, cost,
    declared_errors, findings, forecast, manifest, models, observe, openapi, operator_state,
    patrol, platform, remediation_locks, resources, settings, system, tokens,
};

/// Every `/api/` route of the tenant API, in the order the API lists them.
pub static API_ROUTES: LazyLock<Vec<RouteSpec>> = LazyLock::new(|| {
    [
        system::ROUTES,
        tokens::ROUTES,
        resources::ROUTES,
        agents::ROUTES,
        forecast::ROUTES,
        alerts::ROUTES,
        patrol::ROUTES,
        assistant::ROUTES,
        findings::ROUTES,
        settings::ROUTES,
        models::ROUTES,
        actions::ROUTES,
        remediation_locks::ROUTES,
        audit::ROUTES,
        agent_context::ROUTES,
        operator_state::ROUTES,
        connections::ROUTES,
        cost::ROUTES,
    ]
    .concat()
});

/// Every route the gateway serves: the tenant API, then the platform API.
pub fn all_routes() -> impl Iterator<Item = &'static RouteSpec> {
    API_ROUTES.iter().chain(platform::ROUTES.iter())
}

/// The entry for a request's method and matched route template (`HEAD` is answered by the `GET`
/// handler).
pub fn find(method: &str, path: &str) -> Option<&'static RouteSpec> {
    let method = if method.eq_ignore_ascii_case("HEAD") {
        "GET"
    } else {
        method
    };
    all_routes().find(|r| r.path == path && r.method.eq_ignore_ascii_case(method))
}

/// Whether `path` (a concrete request path) is a public route: answered without a token.
pub fn is_public_path(path: &str) -> bool {
    API_ROUTES.iter().any(|r| r.public && r.path == path)
}

/// This API as an OpenAPI document (`GET /api/openapi.json`).
pub fn openapi_document() -> Value {
    openapi::build(all_routes())
}

/// The agent capabilities manifest (`GET /api/agent/capabilities`).
pub fn manifest() -> Manifest {
    manifest::build(&API_ROUTES)
}

/// The router: one route per path of [`all_routes`], each path's entries merged.
pub fn router(state: AppState) -> Router {
    let limit = state.max_body_bytes;
    let mut paths: Vec<&'static str> = Vec::new();
    for spec in all_routes() {
        if !paths.contains(&spec.path) {
            paths.push(spec.path);
        }
    }
    let mut router = Router::new();
    for path in paths {
        let method_router = all_routes()
            .filter(|spec| spec.path == path)
            .fold(MethodRouter::new(), |acc, spec| acc.merge((spec.handler)()));
        router = router.route(path, method_router);
    }
    // The web UI's pages and forms beside the API (not API capabilities), and Pulse MCP over
    // streamable HTTP (a protocol endpoint projecting the capabilities above).
    router
        .merge(crate::web::routes())
        .route(
            "/mcp",
            post(crate::mcp::post)
                .get(crate::mcp::not_offered)
                .delete(crate::mcp::not_offered),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(
            auth::Gate {
                state: state.clone(),
                is_public: is_public_path,
            },
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
        // Outermost: sees every error answer, whichever layer made it.
        .layer(middleware::from_fn_with_state(
            declared_errors::DeclaredErrors {
                metrics: state.http_metrics.clone(),
                find,
            },
            declared_errors::check,
        ))
        .with_state(state)
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn names_and_method_paths_are_unique_and_well_formed() {
        let mut names = HashSet::new();
        let mut routes = HashSet::new();
        for spec in API_ROUTES.iter() {
            assert!(names.insert(spec.name), "duplicate name {}", spec.name);
            assert!(
                routes.insert((spec.method, spec.path)),
                "duplicate route {} {}",
                spec.method,
                spec.path
            );
            assert!(
                spec.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_'),
                "{}",
                spec.name
            );
            assert!(spec.path.starts_with("/api/"), "{}", spec.path);
            assert!(
                ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&spec.method),
                "{}",
                spec.method
            );
            assert_eq!(
                spec.public,
                spec.scopes.is_empty(),
                "{}: a route is public exactly when it needs no scope",
                spec.name
            );
            assert!(!spec.title.is_empty() && !spec.description.is_empty());
            for param in spec.path_params() {
                assert_eq!(param, "id", "{}: path parameters are named id", spec.path);
            }
        }
    }

    #[test]
    fn upstream_capability_names_are_kept() {
        for (name, method, path) in [
            ("list_findings", "GET", "/api/ai/patrol/findings"),
            ("acknowledge_finding", "POST", "/api/ai/patrol/acknowledge"),
            ("snooze_finding", "POST", "/api/ai/patrol/snooze"),
            ("dismiss_finding", "POST", "/api/ai/patrol/dismiss"),
            ("resolve_finding", "POST", "/api/ai/patrol/resolve"),
            ("plan_action", "POST", "/api/actions/plan"),
            ("decide_action", "POST", "/api/actions/{id}/decision"),
            ("execute_action", "POST", "/api/actions/{id}/execute"),
            ("get_fleet_context", "GET", "/api/agent/fleet-context"),
            (
                "get_resource_context",
                "GET",
                "/api/agent/resource-context/{id}",
            ),
            (
                "list_resource_capabilities",
                "GET",
                "/api/agent/resource-capabilities/{id}",
            ),
            (
                "get_patrol_control_status",
                "GET",
                "/api/agent/patrol-control/status",
            ),
        ] {
            let spec = find(method, path).unwrap_or_else(|| panic!("{method} {path}"));
            assert_eq!(spec.name, name);
        }
    }

    #[test]
    fn declared_codes_include_the_common_ones() {
        let tokens = find("POST", "/api/tokens").expect("route");
        let codes = tokens.error_codes();
        for code in [
            ErrorCode::Unauthorized,
            ErrorCode::MissingScope,
            ErrorCode::InvalidJson,
            ErrorCode::PayloadTooLarge,
            ErrorCode::InternalError,
        ] {
            assert!(codes.contains(&code), "{code}");
            assert!(tokens.declares(code), "{code}");
        }
        assert!(!tokens.declares(ErrorCode::FindingNotFound));
        let health = find("GET", "/api/health").expect("route");
        assert!(!health.declares(ErrorCode::Unauthorized));
        assert_eq!(
            find("HEAD", "/api/resources").map(|r| r.name),
            Some("list_resources")
        );
        assert!(is_public_path("/api/openapi.json"));
        assert!(is_public_path("/api/agent/capabilities"));
        assert!(!is_public_path("/api/tokens"));
    }
}
