//! `POST /mcp`: Pulse MCP over streamable HTTP, so a hosted tenant's agents need no local
//! adapter. The same server as `pulse-mcp` (the `pulse-mcp` crate), over the manifest this
//! gateway serves, calling this gateway's API with the caller's token: the client gets exactly
//! its token's authority.
//!
//! - A request carries its token like an API request (`Authorization: Bearer`, or
//!   `X-API-Token`); none, or one that is not live, is 401 `unauthorized`.
//! - The body is one JSON-RPC message (or a batch); a request is answered with
//!   `application/json`, a notification or response with 202 and no body.
//! - `GET` (a server-initiated event stream) and `DELETE` (ending a session) are 405: the server
//!   keeps no session and pushes nothing.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use pulse_capabilities::ErrorCode;
use serde_json::{Value, json};

use crate::auth::presented_token;
use crate::error::ApiError;
use crate::state::AppState;

fn parse_error(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32700, "message": message},
        })),
    )
        .into_response()
}

pub async fn post(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(token) = presented_token(&headers).map(str::to_owned) else {
        return ApiError::new(
            ErrorCode::Unauthorized,
            "send Authorization: Bearer <token>; the MCP client gets that token's authority",
        )
        .into_response();
    };
    match pulse_store::tokens::authenticate(&state.store, &token, Utc::now()).await {
        Ok(_) => {}
        Err(pulse_store::tokens::AuthFailure::Store(error)) => {
            return ApiError::from(error).into_response();
        }
        Err(_) => {
            return ApiError::new(ErrorCode::Unauthorized, "the token is not live").into_response();
        }
    }
    let message: Value = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(error) => return parse_error(&format!("parse error: {error}")),
    };
    let server = state.mcp.server(token);
    let answer = match message {
        Value::Array(batch) => {
            let mut answers = Vec::new();
            for message in batch {
                if let Some(answer) = server.handle(message).await {
                    answers.push(answer);
                }
            }
            (!answers.is_empty()).then_some(Value::Array(answers))
        }
        single => server.handle(single).await,
    };
    match answer {
        Some(answer) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            answer.to_string(),
        )
            .into_response(),
        None => StatusCode::ACCEPTED.into_response(),
    }
}

pub async fn not_offered() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "POST")],
        axum::Json(json!({
            "error": ErrorCode::MethodNotAllowed.code(),
            "message": "this MCP endpoint answers POST only: it keeps no session and pushes no events",
        })),
    )
        .into_response()
}
