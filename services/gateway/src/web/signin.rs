//! Sign in and sign out.
//!
//! - `GET /signin` shows the form with a fresh double-submit CSRF token (cookie and field).
//! - `POST /signin` checks the token, then the bounds on guessing:
//!   [`crate::signin_limit::MAX_FAILURES_PER_ADDRESS`]
//!   failed sign-ins from one address, and `web_sessions::MAX_FAILURES` for one account, within
//!   the store's window; then the argon2id password. Every wrong organization, username or
//!   password gets the same answer in about the same time (a decoy hash is checked when there is
//!   no such user). Success starts a session, clears the account's failures and redirects to
//!   the page asked for (a local path only).
//! - `POST /signout` (with the session's CSRF token) revokes the session and clears the cookie.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::{ConnectInfo, FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use maud::html;
use pulse_capabilities::ErrorCode;
use pulse_domain::TenantId;
use pulse_store::web_sessions::{self, SESSION_TTL};
use pulse_store::{tenants, users};
use serde::Deserialize;

use super::layout;
use super::session::{
    CsrfForm, SESSION_COOKIE, SIGNIN_CSRF_COOKIE, cookie, same_secret, set_cookie,
};
use crate::error::ApiError;
use crate::state::AppState;

/// The client's address, when the server records it (it does when it serves; tests of the
/// router alone have none).
pub struct PeerAddress(Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for PeerAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(PeerAddress(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| addr.ip()),
        ))
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct SignInQuery {
    #[serde(default)]
    next: Option<String>,
}

/// Only a local absolute path may be a redirect target (no `//host`, no scheme).
fn local_path(next: Option<&str>) -> String {
    match next {
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.starts_with("/\\")
                && !path.contains(['\r', '\n'])
                && path != "/signin" =>
        {
            path.to_owned()
        }
        _ => "/patrol".to_owned(),
    }
}

fn form(
    headers: &HeaderMap,
    status: StatusCode,
    next: &str,
    organization: &str,
    username: &str,
    error: Option<&ApiError>,
) -> Response {
    let token = web_sessions::random_hex();
    let body = html! {
        div class="signin" {
            h1 { "Sign in to Pulse" }
            @if let Some(error) = error {
                p class="flash error" role="alert" id="signin-error" { (error.message) }
            }
            form method="post" action="/signin" {
                input type="hidden" name="csrf" value=(token);
                input type="hidden" name="next" value=(next);
                p {
                    label for="organization" { "Organization" }
                    input id="organization" name="organization" autocomplete="organization"
                        required value=(organization);
                }
                p {
                    label for="username" { "Username" }
                    input id="username" name="username" autocomplete="username" required
                        value=(username) autofocus[username.is_empty()];
                }
                p {
                    label for="password" { "Password" }
                    input id="password" name="password" type="password"
                        autocomplete="current-password" required autofocus[!username.is_empty()];
                }
                p { button type="submit" { "Sign in" } }
            }
            p class="hint" {
                "The first admin's password is printed once when the stack first starts "
                "(and saved as admin-password in its state directory). Admins create more users "
                "with " code { "pulsectl user create" } "."
            }
        }
    };
    let mut response = layout::public_page(status, "Sign in", body);
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(headers, SIGNIN_CSRF_COOKIE, &token, 3600),
    );
    response
}

pub async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<SignInQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let next = local_path(query.as_ref().ok().and_then(|q| q.next.as_deref()));
    // Already signed in: go where asked.
    if let Ok(Some(_)) = super::session::current(&state, &headers).await {
        return Redirect::to(&next).into_response();
    }
    form(&headers, StatusCode::OK, &next, "default", "", None)
}

#[derive(Debug, Deserialize)]
pub struct SignInForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    next: Option<String>,
    #[serde(default)]
    organization: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

fn failed() -> ApiError {
    ApiError::new(
        ErrorCode::SignInFailed,
        "The organization, username or password is wrong.",
    )
}

fn rate_limited(wait: Duration) -> ApiError {
    let minutes = wait.as_secs().div_ceil(60).max(1);
    ApiError::new(
        ErrorCode::SignInRateLimited,
        format!("Too many failed sign-ins. Try again in {minutes} minute(s)."),
    )
}

async fn verify(hash: Option<String>, password: String) -> bool {
    tokio::task::spawn_blocking(move || users::verify_password(hash.as_deref(), &password))
        .await
        .unwrap_or(false)
}

pub async fn submit(
    State(state): State<AppState>,
    PeerAddress(address): PeerAddress,
    headers: HeaderMap,
    form_body: Result<Form<SignInForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(input)) = form_body else {
        let error = ApiError::new(
            ErrorCode::InvalidParameter,
            "the sign-in form was malformed",
        );
        return form(
            &headers,
            StatusCode::BAD_REQUEST,
            "/patrol",
            "default",
            "",
            Some(&error),
        );
    };
    let next = local_path(input.next.as_deref());
    let organization = input.organization.trim().to_owned();
    let username = input.username.trim().to_owned();
    let again = |status: StatusCode, error: &ApiError| {
        form(
            &headers,
            status,
            &next,
            &organization,
            &username,
            Some(error),
        )
    };
    let expected = cookie(&headers, SIGNIN_CSRF_COOKIE).unwrap_or("");
    if expected.is_empty() || !same_secret(&input.csrf, expected) {
        let error = ApiError::new(
            ErrorCode::CsrfTokenInvalid,
            "The sign-in form expired or did not come from this site; please try again.",
        );
        return again(StatusCode::FORBIDDEN, &error);
    }
    let now = Instant::now();
    if let Some(wait) = address.and_then(|ip| state.web.limiter.blocked(ip, now)) {
        let error = rate_limited(wait);
        return again(StatusCode::TOO_MANY_REQUESTS, &error);
    }
    let record_address = || {
        if let Some(ip) = address {
            state.web.limiter.record(ip, now);
        }
    };
    let Ok(tenant) = TenantId::new(organization.clone()) else {
        verify(None, input.password).await;
        record_address();
        return again(StatusCode::UNAUTHORIZED, &failed());
    };
    match sign_in(&state, &tenant, &username, input.password).await {
        Ok(Ok(secret)) => {
            tracing::info!(tenant = %tenant, user = %username, "signed in");
            let mut response = Redirect::to(&next).into_response();
            let cookies = response.headers_mut();
            cookies.append(
                header::SET_COOKIE,
                set_cookie(&headers, SESSION_COOKIE, &secret, SESSION_TTL.num_seconds()),
            );
            cookies.append(
                header::SET_COOKIE,
                set_cookie(&headers, SIGNIN_CSRF_COOKIE, "", 0),
            );
            response
        }
        Ok(Err(error)) => {
            if error.code == ErrorCode::SignInFailed {
                record_address();
            }
            tracing::info!(tenant = %tenant, user = %username, code = error.code.code(), "sign-in refused");
            again(error.status(), &error)
        }
        Err(error) => again(error.status(), &error),
    }
}

/// The session secret, or why not (outer error: the store failed).
async fn sign_in(
    state: &AppState,
    tenant: &TenantId,
    username: &str,
    password: String,
) -> Result<Result<String, ApiError>, ApiError> {
    let now = Utc::now();
    let tx = state.store.tenant_tx(tenant).await?;
    if tenants::current(&tx).await?.is_none() {
        tx.rollback().await?;
        verify(None, password).await;
        return Ok(Err(failed()));
    }
    let (failures, retry_at) = web_sessions::recent_failures(&tx, username, now).await?;
    if failures >= web_sessions::MAX_FAILURES {
        tx.rollback().await?;
        let wait = retry_at
            .map(|at| (at - now).to_std().unwrap_or_default())
            .unwrap_or(Duration::from_secs(60));
        return Ok(Err(rate_limited(wait)));
    }
    let credentials = users::credentials(&tx, username).await?;
    let hash = credentials.as_ref().and_then(|(_, hash)| hash.clone());
    let matched = verify(hash, password).await;
    let Some((user, _)) = credentials.filter(|_| matched) else {
        web_sessions::record_failure(&tx, username, now).await?;
        tx.commit().await?;
        return Ok(Err(failed()));
    };
    web_sessions::clear_failures(&tx, username).await?;
    let created = web_sessions::create(&tx, &user, now).await?;
    tx.commit().await?;
    Ok(Ok(created.secret.expose().to_owned()))
}

#[derive(Debug, Deserialize)]
pub struct SignOutForm {}

pub async fn signout(State(state): State<AppState>, form: CsrfForm<SignOutForm>) -> Response {
    let user = form.user;
    let revoked = async {
        let tx = state.store.tenant_tx(&user.session.tenant).await?;
        web_sessions::revoke(&tx, user.session.id, Utc::now()).await?;
        tx.commit().await?;
        Ok::<_, ApiError>(())
    }
    .await;
    if let Err(error) = revoked {
        return layout::error_page(Some(&user), &error);
    }
    let mut response = Redirect::to("/signin").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(&user.headers, SESSION_COOKIE, "", 0),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_redirect_targets() {
        assert_eq!(local_path(Some("/findings/abc?x=1")), "/findings/abc?x=1");
        for bad in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil",
            "findings",
            "/signin",
        ] {
            assert_eq!(local_path(Some(bad)), "/patrol", "{bad}");
        }
        assert_eq!(local_path(None), "/patrol");
    }
}
