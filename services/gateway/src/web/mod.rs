//! The web UI: server-rendered pages for operators, served by the gateway itself (no separate
//! front-end build, nothing from another origin).
//!
//! Pages are rendered with maud from the same handlers the JSON API answers with, so a page
//! shows exactly what `GET /api/...` would, and a form does exactly what the matching API call
//! does (same scope checks, same owners, same audit). A little plain JavaScript
//! (`assets/app.js`) keeps the regions marked `data-live` current from the event streams
//! (`/api/agent/events`, `/api/ai/patrol/stream`), which a signed-in browser may read with its
//! session cookie.

mod actions;
mod assets;
mod chat;
mod connections;
mod cost;
mod findings;
mod layout;
mod patrol;
mod resources;
mod runs;
mod session;
mod settings;
mod signin;
mod svg;

use axum::Router;
use axum::http::HeaderMap;
use axum::response::Redirect;
use axum::routing::{get, post};
use pulse_store::tokens::Principal;

use crate::error::ApiError;
use crate::state::AppState;

/// The principal of a signed-in browser, for the API's safe methods.
pub async fn session_principal(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<Principal>, ApiError> {
    Ok(session::current(state, headers)
        .await?
        .map(|session| session::principal(&session)))
}

/// Every form the UI posts to, for the CSRF test: a form here without the session's token is
/// refused before it is read.
pub const FORM_ROUTES: &[&str] = &[
    "/signout",
    "/patrol/run",
    "/patrol/mode",
    "/patrol/enabled",
    "/findings/{id}/{action}",
    "/actions/{id}/decision",
    "/resources/{id}/operator-state",
    "/resources/{id}/operator-state/clear",
    "/settings",
    "/settings/preflight",
    "/settings/test",
    "/settings/connections",
    "/settings/connections/{id}/check",
    "/settings/connections/{id}/guest-actions",
    "/settings/connections/{id}/remove",
    "/chat/send",
    "/chat/{id}/stop",
];

/// The UI's routes (merged beside the API's).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/patrol") }))
        .route("/assets/{name}", get(assets::serve))
        .route("/signin", get(signin::page).post(signin::submit))
        .route("/signout", post(signin::signout))
        .route("/patrol", get(patrol::page))
        .route("/patrol/run", post(patrol::run_now))
        .route("/patrol/mode", post(patrol::set_mode))
        .route("/patrol/enabled", post(patrol::set_enabled))
        .route("/findings", get(findings::list))
        .route("/findings/{id}", get(findings::detail))
        .route("/findings/{id}/{action}", post(findings::act))
        .route("/runs", get(runs::list))
        .route("/runs/{id}", get(runs::detail))
        .route("/approvals", get(actions::approvals))
        .route("/actions", get(actions::list))
        .route("/actions/{id}", get(actions::detail))
        .route("/actions/{id}/decision", post(actions::decide))
        .route("/resources", get(resources::list))
        .route("/resources/{id}", get(resources::detail))
        .route("/settings", get(settings::page).post(settings::save))
        .route("/settings/preflight", post(settings::preflight))
        .route("/settings/test", post(settings::test))
        .route("/settings/connections", post(connections::add))
        .route("/settings/connections/{id}/check", post(connections::check))
        .route(
            "/settings/connections/{id}/guest-actions",
            post(connections::guest_actions),
        )
        .route(
            "/settings/connections/{id}/remove",
            post(connections::remove),
        )
        .route("/cost", get(cost::page))
        .route("/chat", get(chat::new_chat))
        .route("/chat/send", post(chat::send))
        .route("/chat/{id}", get(chat::resume))
        .route("/chat/{id}/stop", post(chat::stop))
        .route(
            "/resources/{id}/operator-state",
            post(resources::set_operator_state),
        )
        .route(
            "/resources/{id}/operator-state/clear",
            post(resources::clear_operator_state),
        )
}
