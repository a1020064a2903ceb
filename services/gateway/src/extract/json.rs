//! The JSON body extractor: every rejection is an [`ApiError`] with a stable code of the
//! route family ([`Refusals`]), except what no family decides: a body not declared JSON is
//! `unsupported_media_type`, an oversized one `payload_too_large`.
//!
//! Every JSON body of the API is an object. serde reads a struct from an array as well (its
//! fields by position, so `[null, null]` would be a body with two absent fields); a body whose
//! JSON is not an object is refused instead ([`is_object`]).

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, JsonRejection};
use std::marker::PhantomData;

use axum::extract::{FromRequest, Request};
use pulse_capabilities::ErrorCode;
use serde::de::DeserializeOwned;

use super::{Refusals, Standard};
use crate::error::ApiError;

/// The request's JSON body as `T`, refused with `R`'s codes.
pub struct ApiJson<T, R = Standard>(pub T, pub PhantomData<R>);

impl<T, R> ApiJson<T, R> {
    /// A body already read (what a web form hands the API's handler).
    pub fn new(body: T) -> Self {
        Self(body, PhantomData)
    }
}

/// The refusal of a JSON body that is not an object.
const NOT_AN_OBJECT: &str = "the request body must be a JSON object";

/// The refusal of a body with U+0000 in a string (no stored text can hold it).
const HAS_NUL: &str = "strings in the request body must not contain U+0000";

/// Whether the JSON text has a `\u0000` escape (raw control characters are not valid JSON).
fn has_nul(body: &[u8]) -> bool {
    let mut i = 0;
    while i < body.len() {
        if body[i] == b'\\' {
            if body.get(i + 1) == Some(&b'u') && body.get(i + 2..i + 6) == Some(b"0000") {
                return true;
            }
            // Skips the escaped character, so `\\u0000` (a backslash, then text) is not one.
            i += 2;
        } else {
            i += 1;
        }
    }
    false
}

/// Why a body that parsed is still refused: not an object, or U+0000 in a string.
fn refusal(body: &[u8]) -> Option<&'static str> {
    if !is_object(body) {
        Some(NOT_AN_OBJECT)
    } else if has_nul(body) {
        Some(HAS_NUL)
    } else {
        None
    }
}

/// Whether a body that parsed as JSON is an object (its first character is `{`).
fn is_object(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Reads the body as axum's `Json` does (content type, size limit, syntax, data), with the
/// [`refusal`] of a body that parsed, if any.
async fn object_body<S, T>(
    req: Request,
    state: &S,
) -> Result<(T, Option<&'static str>), JsonRejection>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    let (parts, body) = req.into_parts();
    let headers = parts.headers.clone();
    let bytes = Bytes::from_request(Request::from_parts(parts, body), state)
        .await
        .map_err(JsonRejection::from)?;
    let refused = refusal(&bytes);
    let mut buffered = Request::new(Body::from(bytes));
    *buffered.headers_mut() = headers;
    let axum::Json(value) = axum::Json::<T>::from_request(buffered, state).await?;
    Ok((value, refused))
}

impl<S, T, R> FromRequest<S> for ApiJson<T, R>
where
    T: DeserializeOwned,
    S: Send + Sync,
    R: Refusals,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match object_body::<S, T>(req, state).await {
            Ok((value, None)) => Ok(Self::new(value)),
            Ok((_, Some(refusal))) => Err(ApiError::new(R::INVALID_BODY, refusal)),
            Err(rejection) => Err(map_rejection::<R>(rejection)),
        }
    }
}

/// The answer to a body that could not be read at all: too large, or not read (`unreadable`).
pub fn bytes_rejection(e: &BytesRejection, unreadable: ErrorCode) -> ApiError {
    if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(ErrorCode::PayloadTooLarge, "request body is too large")
    } else {
        ApiError::new(unreadable, "request body could not be read")
    }
}

fn map_rejection<R: Refusals>(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::JsonDataError(e) => ApiError::new(R::INVALID_BODY, e.body_text()),
        JsonRejection::JsonSyntaxError(e) => ApiError::new(R::UNREADABLE_BODY, e.body_text()),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "expected Content-Type: application/json",
        ),
        JsonRejection::BytesRejection(e) => bytes_rejection(&e, R::UNREADABLE_BODY),
        other => ApiError::new(R::UNREADABLE_BODY, other.body_text()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_objects_are_objects() {
        assert!(is_object(b" \n{}"));
        assert!(!is_object(b"[null, null]"));
        assert!(!is_object(b"null"));
        assert!(!is_object(b""));
        assert!(has_nul(br#"{"a": "x\u0000"}"#));
        assert!(!has_nul(br#"{"a": "x\\u0000"}"#));
        assert!(has_nul(br#"{"a": "\\\u0000"}"#));
        assert_eq!(refusal(br#"{"a": 1}"#), None);
    }
}
