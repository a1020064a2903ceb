//! Who is signed in: the session cookie, the CSRF token of every form, flash messages.
//!
//! - The session cookie `pulse_session` is HttpOnly, SameSite=Lax, `Path=/`, and Secure when
//!   the request reached us over TLS (a proxy in front says so with `X-Forwarded-Proto: https`).
//! - Every form a signed-in user posts carries the session's CSRF token in the field `csrf`;
//!   [`CsrfForm`] checks it (constant time) before the form is even parsed, so no handler can
//!   forget. The sign-in form, which has no session yet, uses a double-submit cookie instead.
//! - A page a signed-out browser asks for redirects to `/signin?next=<path>`.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_store::tokens::{Principal, PrincipalKind};
use pulse_store::web_sessions::{self, WebSession};
use serde::de::DeserializeOwned;

use super::layout;
use crate::authorized::{Authorized, RequiredScopes};
use crate::error::ApiError;
use crate::state::AppState;

pub const SESSION_COOKIE: &str = "pulse_session";
/// The double-submit token of the sign-in form.
pub const SIGNIN_CSRF_COOKIE: &str = "pulse_signin";
const FLASH_COOKIE: &str = "pulse_flash";
/// The form field every posted form carries its CSRF token in.
pub const CSRF_FIELD: &str = "csrf";

/// The value of cookie `name`, if the request carries it.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim())
}

/// Whether the request reached the gateway over TLS (terminated by a proxy in front of it).
pub fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Lax, whole site, Secure over TLS. `max_age` 0 deletes.
pub fn set_cookie(headers: &HeaderMap, name: &str, value: &str, max_age: i64) -> HeaderValue {
    let secure = if over_tls(headers) { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("pulse_invalid=; Max-Age=0"))
}

/// Equal strings, compared without an early exit.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0_u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The principal a web session acts as: its user, with the user's role's scopes.
pub fn principal(session: &WebSession) -> Principal {
    Principal {
        tenant: session.tenant.clone(),
        token_id: session.id,
        token_name: session.username.clone(),
        user_id: Some(session.user_id),
        scopes: session.role.scopes(),
        kind: PrincipalKind::WebSession,
        agent_id: None,
    }
}

/// The live session the request's cookie names, if any.
pub async fn current(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<WebSession>, ApiError> {
    let Some(secret) = cookie(headers, SESSION_COOKIE) else {
        return Ok(None);
    };
    let Some(session) = web_sessions::resolve(&state.store, secret, Utc::now()).await? else {
        return Ok(None);
    };
    // A suspended tenant's users are refused like its tokens, pages and API alike.
    if let Some(pulse_store::tenants::Standing::Suspended { reason, .. }) =
        pulse_store::tenants::standing(&state.store, &session.tenant).await?
    {
        return Err(ApiError::new(
            pulse_capabilities::ErrorCode::TenantSuspended,
            pulse_domain::tenant::suspended_message(&reason),
        ));
    }
    Ok(Some(session))
}

/// A signed-in user of the web UI.
#[derive(Debug, Clone)]
pub struct WebUser {
    pub session: WebSession,
    pub principal: Principal,
    /// The flash message the previous request left, shown once.
    pub flash: Option<Flash>,
    /// The request's headers, for cookies set on the answer.
    pub headers: HeaderMap,
}

impl WebUser {
    /// The user as a caller of an API handler that needs `R`'s scopes.
    pub fn authorized<R: RequiredScopes>(&self) -> Result<Authorized<R>, ApiError> {
        Authorized::check(self.principal.clone())
    }

    pub fn can(&self, scope: Scope) -> bool {
        self.principal.has(scope)
    }

    /// The stable actor id (`user:<id>`) audit rows and decisions name.
    pub fn actor(&self) -> String {
        format!("user:{}", self.session.user_id)
    }
}

fn signin_redirect(parts: &Parts) -> Response {
    let next = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/");
    let query = serde_urlencoded::to_string([("next", next)]).unwrap_or_default();
    Redirect::to(&format!("/signin?{query}")).into_response()
}

impl FromRequestParts<AppState> for WebUser {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        match current(state, &parts.headers).await {
            Ok(Some(session)) => Ok(WebUser {
                principal: principal(&session),
                session,
                flash: Flash::read(&parts.headers),
                headers: parts.headers.clone(),
            }),
            Ok(None) => Err(signin_redirect(parts)),
            Err(error) => Err(layout::error_page(None, &error)),
        }
    }
}

/// A form posted by a signed-in user whose CSRF token matched: the rest of its fields as `T`.
pub struct CsrfForm<T> {
    pub user: WebUser,
    pub form: T,
}

fn form_error(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidParameter, message)
}

impl<T: DeserializeOwned> FromRequest<AppState> for CsrfForm<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let user = WebUser::from_request_parts(&mut parts, state).await?;
        let bytes = axum::body::to_bytes(body, state.max_body_bytes)
            .await
            .map_err(|_| {
                layout::error_page(
                    Some(&user),
                    &ApiError::new(ErrorCode::PayloadTooLarge, "the form is too large"),
                )
            })?;
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes)
            .map_err(|e| layout::error_page(Some(&user), &form_error(e.to_string())))?;
        let presented = pairs
            .iter()
            .find(|(key, _)| key == CSRF_FIELD)
            .map(|(_, value)| value.as_str())
            .unwrap_or("");
        if !same_secret(presented, &user.session.csrf_token) {
            tracing::info!(user = %user.session.username, "form refused: CSRF token missing or wrong");
            return Err(layout::error_page(
                Some(&user),
                &ApiError::new(
                    ErrorCode::CsrfTokenInvalid,
                    "this form is not from your current session; reload the page and try again",
                ),
            ));
        }
        let rest: Vec<&(String, String)> =
            pairs.iter().filter(|(key, _)| key != CSRF_FIELD).collect();
        let encoded = serde_urlencoded::to_string(&rest)
            .map_err(|e| layout::error_page(Some(&user), &form_error(e.to_string())))?;
        let form = serde_urlencoded::from_str(&encoded)
            .map_err(|e| layout::error_page(Some(&user), &form_error(format!("form: {e}"))))?;
        Ok(CsrfForm { user, form })
    }
}

/// A one-time message shown on the next page: what a form did, or why it was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flash {
    pub ok: bool,
    pub text: String,
}

const FLASH_MAX_CHARS: usize = 600;

impl Flash {
    pub fn ok(text: impl Into<String>) -> Self {
        Self {
            ok: true,
            text: text.into(),
        }
    }

    pub fn error(error: &ApiError) -> Self {
        Self {
            ok: false,
            text: format!("{} ({})", error.message, error.code.code()),
        }
    }

    fn read(headers: &HeaderMap) -> Option<Flash> {
        let raw = cookie(headers, FLASH_COOKIE)?;
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw).ok()?;
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        Some(Flash {
            ok: get("k")? == "ok",
            text: get("m")?,
        })
    }

    fn cookie_value(&self) -> String {
        let text: String = self.text.chars().take(FLASH_MAX_CHARS).collect();
        let kind = if self.ok { "ok" } else { "error" };
        serde_urlencoded::to_string([("k", kind), ("m", text.as_str())]).unwrap_or_default()
    }
}

/// A redirect after a form (303), leaving `flash` for the page it lands on.
pub fn redirect_with(headers: &HeaderMap, to: &str, flash: Flash) -> Response {
    let mut response = Redirect::to(to).into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(headers, FLASH_COOKIE, &flash.cookie_value(), 60),
    );
    response
}

/// Clears a shown flash message.
pub fn clear_flash(headers: &HeaderMap) -> HeaderValue {
    set_cookie(headers, FLASH_COOKIE, "", 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_read_by_exact_name() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "a=1; pulse_session=ps_abc;pulse_sessionx=no"
                .parse()
                .unwrap(),
        );
        assert_eq!(cookie(&headers, SESSION_COOKIE), Some("ps_abc"));
        assert_eq!(cookie(&headers, "a"), Some("1"));
        assert_eq!(cookie(&headers, "b"), None);
    }

    #[test]
    fn session_cookies_are_http_only_lax_and_secure_over_tls() {
        let mut headers = HeaderMap::new();
        let plain = set_cookie(&headers, SESSION_COOKIE, "ps_x", 60);
        assert_eq!(
            plain.to_str().unwrap(),
            "pulse_session=ps_x; Path=/; HttpOnly; SameSite=Lax; Max-Age=60"
        );
        headers.insert("x-forwarded-proto", "https".parse().unwrap());
        let secure = set_cookie(&headers, SESSION_COOKIE, "ps_x", 60);
        assert!(secure.to_str().unwrap().ends_with("; Secure"));
    }

    #[test]
    fn flash_round_trips_through_its_cookie() {
        let flash = Flash::ok("Approved; plan hash a1b2, \"quoted\" & more");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            format!("{FLASH_COOKIE}={}", flash.cookie_value())
                .parse()
                .unwrap(),
        );
        assert_eq!(Flash::read(&headers), Some(flash));
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert!(!same_secret("", "a"));
    }
}
