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
        let mut response = (self.status(), axum::Json(body)).into_response();
        // For the declared-codes check, which must not parse bodies.
        response.extensions_mut().insert(self.code);
        response
    }
}

/// The one mapping of a service's answer (or its absence) to an API error: a service's error
/// reply keeps its code and message; a service that did not answer gets that service's
/// unavailable code.
impl From<pulse_bus::ClientError> for ApiError {
    fn from(error: pulse_bus::ClientError) -> Self {
        use pulse_bus::ClientError;
        let code = error.code();
        match error {
            ClientError::Remote { code, message } => ApiError::new(code, message),
            ClientError::NoResponder { service, .. } => ApiError::new(
                code,
                format!(
                    "no {service} is running, so nothing was done; start pulse-{service} \
                     (check /api/health) and send the request again"
                ),
            ),
            ClientError::Timeout { service, .. } => ApiError::new(
                code,
                format!(
                    "the {service} did not answer in time; check the outcome (GET the \
                     resource again) before sending the request again"
                ),
            ),
            ClientError::UnknownCode { .. } => {
                tracing::error!(%error, "a service answered with an unknown error code");
                ApiError::new(code, "the request failed")
            }
            ClientError::Bus(_) => {
                tracing::warn!(%error, "a request failed on the bus");
                ApiError::new(code, "the message bus is unavailable; retry shortly")
            }
        }
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

    #[test]
    fn a_service_answer_keeps_its_code_and_silence_names_the_service() {
        use pulse_bus::ClientError;
        let remote: ApiError = ClientError::Remote {
            code: ErrorCode::UnprocessableScope,
            message: "unmatched resource_ids: nope".to_owned(),
        }
        .into();
        assert_eq!(remote.code, ErrorCode::UnprocessableScope);
        assert_eq!(remote.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(remote.message, "unmatched resource_ids: nope");

        let none: ApiError = ClientError::NoResponder {
            service: "model-runner",
            unavailable: ErrorCode::PatrolRunnerUnavailable,
        }
        .into();
        assert_eq!(none.code, ErrorCode::PatrolRunnerUnavailable);
        assert_eq!(none.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            none.message.contains("pulse-model-runner"),
            "{}",
            none.message
        );

        let late: ApiError = ClientError::Timeout {
            service: "patrol-scheduler",
            unavailable: ErrorCode::PatrolSchedulerUnavailable,
            timeout: std::time::Duration::from_secs(5),
        }
        .into();
        assert_eq!(late.code, ErrorCode::PatrolSchedulerUnavailable);

        let unknown: ApiError = ClientError::UnknownCode {
            service: "action-broker",
            code: "bad_request".to_owned(),
            message: "x".to_owned(),
        }
        .into();
        assert_eq!(unknown.code, ErrorCode::InternalError);
    }
}
