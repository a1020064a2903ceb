//! A JSON body extractor whose every rejection is an [`ApiError`] with a stable code.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use pulse_capabilities::ErrorCode;
use serde::de::DeserializeOwned;

use crate::ApiError;

pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => Err(map_rejection(rejection)),
        }
    }
}

fn map_rejection(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::JsonDataError(e) => ApiError::new(ErrorCode::InvalidRequest, e.body_text()),
        JsonRejection::JsonSyntaxError(e) => ApiError::new(ErrorCode::InvalidJson, e.body_text()),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "expected Content-Type: application/json",
        ),
        JsonRejection::BytesRejection(e) => {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(ErrorCode::PayloadTooLarge, "request body is too large")
            } else {
                ApiError::new(ErrorCode::InvalidJson, "request body could not be read")
            }
        }
        other => ApiError::new(ErrorCode::InvalidJson, other.body_text()),
    }
}
