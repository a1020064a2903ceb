//! Oversized bodies get a clean `413 payload_too_large`.
//!
//! Answering while the client is still uploading makes many clients see a reset instead of the
//! answer. When the declared length is over the limit, the body is read and discarded (up to a
//! bound and a deadline) before answering, so the client can read the error.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use pulse_capabilities::ErrorCode;

use crate::error::ApiError;

/// Drain at most this many times the limit before giving up on politeness.
const DRAIN_FACTOR: usize = 16;
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

pub async fn reject_oversized(State(limit): State<usize>, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(declared) = declared.filter(|len| *len > limit as u64) else {
        return next.run(req).await;
    };
    let error = ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!("request body of {declared} bytes is over the limit of {limit} bytes"),
    );
    let budget = limit.saturating_mul(DRAIN_FACTOR) as u64;
    if declared <= budget {
        let mut stream = req.into_body().into_data_stream();
        let drained = tokio::time::timeout(DRAIN_DEADLINE, async {
            while let Some(chunk) = stream.next().await {
                if chunk.is_err() {
                    break;
                }
            }
        })
        .await;
        if drained.is_err() {
            tracing::debug!("gave up draining an oversized body");
        }
    }
    let mut response = error.into_response();
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}
