//! Authentication before routing, scope checks per route.
//!
//! Every `/api/` request except the public paths must carry a live token; otherwise it gets 401
//! whatever the path (so unknown routes do not reveal which exist). A `GET` or `HEAD` without a
//! token may instead carry the session cookie of a signed-in web UI user, with that user's
//! role's scopes. Handlers then state the scopes they need with
//! [`crate::authorized::Authorized`].

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use pulse_capabilities::ErrorCode;
use pulse_store::tokens::{self, AuthFailure, Principal};

use crate::error::ApiError;
use crate::state::AppState;

pub(crate) fn presented_token(parts: &axum::http::HeaderMap) -> Option<&str> {
    if let Some(value) = parts.get(axum::http::header::AUTHORIZATION) {
        let value = value.to_str().ok()?;
        let (scheme, token) = value.split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| token.trim());
    }
    // Upstream Pulse clients send the token in this header.
    parts.get("x-api-token")?.to_str().ok().map(str::trim)
}

/// Path prefix of the platform API.
pub const PLATFORM_PREFIX: &str = "/api/platform/";

/// Whether a request path belongs to the platform API.
pub fn is_platform_path(path: &str) -> bool {
    path.starts_with(PLATFORM_PREFIX) || path == "/api/platform"
}

/// What authentication needs: the app, and which paths the route table makes public.
#[derive(Clone)]
pub struct Gate {
    pub state: AppState,
    /// Whether a concrete request path is a public route (answered without a token).
    pub is_public: fn(&str) -> bool,
}

pub async fn authenticate(State(gate): State<Gate>, mut req: Request, next: Next) -> Response {
    let state = gate.state;
    let path = req.uri().path();
    let is_api = path == "/api" || path.starts_with("/api/");
    if !is_api || (gate.is_public)(path) {
        return next.run(req).await;
    }
    // The platform API answers platform tokens only: no tenant token, no web session.
    if is_platform_path(path) {
        return authenticate_platform(&state, req, next).await;
    }
    let unauthorized = || {
        ApiError::new(
            ErrorCode::Unauthorized,
            "a valid token is required: send Authorization: Bearer <token>",
        )
        .into_response()
    };
    let Some(token) = presented_token(req.headers()) else {
        // A signed-in browser may read (the web UI's live event streams): safe methods only,
        // so a cookie alone can never change anything through the API.
        let safe = matches!(*req.method(), Method::GET | Method::HEAD);
        if safe {
            match crate::web::session_principal(&state, req.headers()).await {
                Ok(Some(principal)) => {
                    // The session's tenant standing was checked when it was resolved.
                    if let Err(refused) = admit_request_rate(&state, &principal).await {
                        return refused;
                    }
                    req.extensions_mut().insert(principal);
                    return next.run(req).await;
                }
                Ok(None) => {}
                Err(error) => return error.into_response(),
            }
        }
        return unauthorized();
    };
    match tokens::authenticate(&state.store, token, Utc::now()).await {
        Ok(principal) => {
            if let Err(refused) = admit_request_rate(&state, &principal).await {
                return refused;
            }
            let store = state.store.clone();
            let touched = principal.clone();
            tokio::spawn(async move {
                if let Err(error) = tokens::touch_last_used(&store, &touched).await {
                    tracing::debug!(%error, "last_used_at not updated");
                }
            });
            req.extensions_mut().insert(principal);
            next.run(req).await
        }
        Err(AuthFailure::Store(error)) => ApiError::from(error).into_response(),
        Err(AuthFailure::Suspended { reason }) => ApiError::new(
            ErrorCode::TenantSuspended,
            pulse_domain::tenant::suspended_message(&reason),
        )
        .into_response(),
        Err(reason) => {
            tracing::info!(%reason, "token refused");
            unauthorized()
        }
    }
}

/// The tenant's `api_requests_per_sec` quota: 429 `quota_exceeded` with Retry-After.
async fn admit_request_rate(state: &AppState, principal: &Principal) -> Result<(), Response> {
    match state
        .quota_rate
        .admit(&state.store, &principal.tenant)
        .await
    {
        Ok(Ok(())) => Ok(()),
        Ok(Err(refused)) => {
            let seconds = refused.retry_after.as_secs_f64().ceil().max(1.0) as u64;
            let mut response =
                ApiError::new(ErrorCode::QuotaExceeded, refused.exceeded.to_string())
                    .into_response();
            if let Ok(value) = axum::http::HeaderValue::from_str(&seconds.to_string()) {
                response
                    .headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, value);
            }
            Err(response)
        }
        Err(error) => Err(ApiError::from(error).into_response()),
    }
}

/// `/api/platform/...`: a live platform token, or `platform_token_required`.
async fn authenticate_platform(state: &AppState, mut req: Request, next: Next) -> Response {
    let refused = |message: &str| {
        ApiError::new(ErrorCode::PlatformTokenRequired, message.to_owned()).into_response()
    };
    let Some(token) = presented_token(req.headers()) else {
        return refused(
            "the platform API needs a platform-operator token: send Authorization: Bearer \
             <platform token> (pulsectl admin platform-token)",
        );
    };
    match pulse_store::platform::authenticate(&state.store, token).await {
        Ok(principal) => {
            req.extensions_mut().insert(principal);
            next.run(req).await
        }
        Err(pulse_store::platform::PlatformAuthFailure::Store(error)) => {
            ApiError::from(error).into_response()
        }
        Err(reason) => {
            tracing::info!(%reason, "platform token refused");
            refused(
                "a live platform-operator token is required; tenant tokens never reach the \
                 platform API",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn reads_bearer_and_api_token_headers() {
        assert_eq!(
            presented_token(&headers(&[("authorization", "Bearer abc")])),
            Some("abc")
        );
        assert_eq!(
            presented_token(&headers(&[("authorization", "bearer  abc ")])),
            Some("abc")
        );
        assert_eq!(
            presented_token(&headers(&[("authorization", "Basic abc")])),
            None
        );
        assert_eq!(
            presented_token(&headers(&[("x-api-token", "xyz")])),
            Some("xyz")
        );
        assert_eq!(presented_token(&headers(&[])), None);
    }
}
