//! API errors: a code from the stable table and a message. Nothing else reaches a client.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use pulse_capabilities::ErrorCode;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    message: &'a str,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            error: self.code.code(),
            message: &self.message,
        };
        (self.status(), axum::Json(body)).into_response()
    }
}

impl From<pulse_store::StoreError> for ApiError {
    fn from(error: pulse_store::StoreError) -> Self {
        match error {
            pulse_store::StoreError::Unavailable(reason) => {
                tracing::warn!(%reason, "database unavailable");
                ApiError::new(
                    ErrorCode::ServiceUnavailable,
                    "the database is unavailable; retry shortly",
                )
            }
            other => {
                tracing::error!(error = %other, "store error");
                ApiError::new(ErrorCode::InternalError, "unexpected database error")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn error_envelope_shape() {
        let response = ApiError::new(
            ErrorCode::MissingScope,
            "this request requires scope(s): admin",
        )
        .into_response();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let bytes = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        insta::assert_json_snapshot!(body);
    }
}
