//! The extractors every API handler reads its input with: [`ApiJson`] (the JSON body),
//! [`ApiQuery`] (the query string) and [`ApiPath`] (the `{id}` path parameter). Each answers
//! input it cannot read with an [`ApiError`] of a stable code, so no handler maps a rejection
//! itself.
//!
//! Which code a refusal carries is the route family's ([`Refusals`]): most routes answer
//! [`Standard`] codes, the finding routes [`FindingRequest`]'s. A path parameter's type decides
//! its own refusal ([`PathParam`]): an action id that does not parse names no action, so it is
//! `action_not_found`, where a malformed resource reference is `invalid_parameter`.

use pulse_capabilities::ErrorCode;

mod json;
mod path;
mod query;

pub use json::{ApiJson, bytes_rejection};
pub use path::{ApiPath, PathParam};
pub use query::ApiQuery;

/// The codes a family of routes refuses unreadable input with.
pub trait Refusals {
    /// A body that is not JSON (or could not be read at all).
    const UNREADABLE_BODY: ErrorCode;
    /// A JSON body the route's type refuses (or that is not an object).
    const INVALID_BODY: ErrorCode;
    /// A query parameter the route refuses, or a malformed query string.
    const INVALID_PARAMETER: ErrorCode;
}

/// `invalid_json`, `invalid_request` and `invalid_parameter`.
#[derive(Debug)]
pub struct Standard;

impl Refusals for Standard {
    const UNREADABLE_BODY: ErrorCode = ErrorCode::InvalidJson;
    const INVALID_BODY: ErrorCode = ErrorCode::InvalidRequest;
    const INVALID_PARAMETER: ErrorCode = ErrorCode::InvalidParameter;
}

/// The finding routes: every refusal of their input is `invalid_finding_request`.
#[derive(Debug)]
pub struct FindingRequest;

impl Refusals for FindingRequest {
    const UNREADABLE_BODY: ErrorCode = ErrorCode::InvalidFindingRequest;
    const INVALID_BODY: ErrorCode = ErrorCode::InvalidFindingRequest;
    const INVALID_PARAMETER: ErrorCode = ErrorCode::InvalidFindingRequest;
}
