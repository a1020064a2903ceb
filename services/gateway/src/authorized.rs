//! The scopes a handler needs, stated in its signature: [`Authorized<R>`] is the authenticated
//! caller (put on the request by [`crate::auth::authenticate`]), proven to hold `R::SCOPES`.

use std::marker::PhantomData;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_store::tokens::Principal;

use crate::error::ApiError;

/// The scopes a route requires, all of them.
pub trait RequiredScopes {
    const SCOPES: &'static [Scope];
}

pub struct AdminScope;
impl RequiredScopes for AdminScope {
    const SCOPES: &'static [Scope] = &[Scope::Admin];
}

pub struct MonitoringReadScope;
impl RequiredScopes for MonitoringReadScope {
    const SCOPES: &'static [Scope] = &[Scope::MonitoringRead];
}

/// The authenticated caller, proven to hold `R::SCOPES`.
pub struct Authorized<R: RequiredScopes> {
    pub principal: Principal,
    _scopes: PhantomData<R>,
}

impl<S, R> FromRequestParts<S> for Authorized<R>
where
    S: Send + Sync,
    R: RequiredScopes,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let principal = parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "a valid token is required"))?;
        Self::check(principal)
    }
}

impl<R: RequiredScopes> Authorized<R> {
    /// `principal`, if it holds every scope of `R`; else `missing_scope` naming them.
    pub fn check(principal: Principal) -> Result<Self, ApiError> {
        let missing: Vec<&str> = R::SCOPES
            .iter()
            .filter(|scope| !principal.has(**scope))
            .map(|scope| scope.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(ApiError::new(
                ErrorCode::MissingScope,
                format!("this request requires scope(s): {}", missing.join(", ")),
            ));
        }
        Ok(Self {
            principal,
            _scopes: PhantomData,
        })
    }
}
