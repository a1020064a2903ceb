//! The path parameter extractor: `{id}` as the type the route takes, refused as that type says.

use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use pulse_capabilities::ErrorCode;

use crate::error::ApiError;

/// A type a route takes as its `{id}` path parameter.
pub trait PathParam: Sized {
    /// The value `raw` names, or the route's refusal of it.
    fn from_segment(raw: String) -> Result<Self, ApiError>;

    /// The refusal of a segment the router could not read as text (invalid percent-encoding).
    fn unreadable(rejection: &PathRejection) -> ApiError {
        ApiError::new(ErrorCode::InvalidParameter, rejection.body_text())
    }
}

/// The request's `{id}` as `T`.
pub struct ApiPath<T>(pub T);

impl<T: PathParam> ApiPath<T> {
    /// Reads `raw` as the router would hand it to the handler.
    pub fn parse(raw: impl Into<String>) -> Result<Self, ApiError> {
        T::from_segment(raw.into()).map(ApiPath)
    }
}

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: PathParam,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(raw)) => Self::parse(raw),
            Err(rejection) => Err(T::unreadable(&rejection)),
        }
    }
}
