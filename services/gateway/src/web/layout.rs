//! The page shell every page shares, and the small pieces pages are built from.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::session::{CSRF_FIELD, WebUser, clear_flash};
use crate::error::ApiError;

/// The sections of the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Patrol,
    Findings,
    Runs,
    Approvals,
    Actions,
    Resources,
    Settings,
    Cost,
    Chat,
    None,
}

const NAV: &[(Nav, &str, &str)] = &[
    (Nav::Patrol, "/patrol", "Patrol"),
    (Nav::Findings, "/findings", "Findings"),
    (Nav::Runs, "/runs", "Runs"),
    (Nav::Approvals, "/approvals", "Approvals"),
    (Nav::Actions, "/actions", "Actions"),
    (Nav::Resources, "/resources", "Resources"),
    (Nav::Settings, "/settings", "Settings"),
    (Nav::Cost, "/cost", "Cost"),
    (Nav::Chat, "/chat", "Chat"),
];

/// Security headers every HTML answer carries: no framing, no inline script, nothing from
/// another origin.
fn harden(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
             connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// An HTML answer with the security headers.
pub fn html_response(status: StatusCode, markup: Markup) -> Response {
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response();
    harden(&mut response);
    response
}

fn document(title: &str, user: Option<&WebUser>, nav: Nav, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Pulse" }
                link rel="icon" href="data:,";
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body {
                a class="skip" href="#main" { "Skip to content" }
                header class="top" {
                    a class="brand" href="/patrol" { "Pulse" }
                    @if let Some(user) = user {
                        nav aria-label="Main" {
                            ul {
                                @for (item, href, label) in NAV {
                                    li {
                                        @if *item == nav {
                                            a href=(href) aria-current="page" { (label) }
                                        } @else {
                                            a href=(href) { (label) }
                                        }
                                    }
                                }
                            }
                        }
                        form class="signout" method="post" action="/signout" {
                            (csrf(user))
                            span class="who" { (user.session.username) " · " (user.session.tenant.as_str()) }
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main id="main" tabindex="-1" {
                    @if let Some(flash) = user.and_then(|u| u.flash.as_ref()) {
                        @if flash.ok {
                            p class="flash ok" role="status" { (flash.text) }
                        } @else {
                            p class="flash error" role="alert" { (flash.text) }
                        }
                    }
                    (body)
                }
                p id="live-status" class="visually-hidden" aria-live="polite" {}
            }
        }
    }
}

/// A page of a signed-in user (clears the flash message it shows).
pub fn page(user: &WebUser, title: &str, nav: Nav, body: Markup) -> Response {
    let mut response = html_response(StatusCode::OK, document(title, Some(user), nav, body));
    if user.flash.is_some() {
        response
            .headers_mut()
            .append(header::SET_COOKIE, clear_flash(&user.headers));
    }
    response
}

/// A page nobody needs to be signed in for.
pub fn public_page(status: StatusCode, title: &str, body: Markup) -> Response {
    html_response(status, document(title, None, Nav::None, body))
}

/// An error as a page, with the status, stable code and what to do.
pub fn error_page(user: Option<&WebUser>, error: &ApiError) -> Response {
    let body = html! {
        h1 { "Something was refused" }
        p class="flash error" role="alert" { (error.message) }
        dl class="facts" {
            dt { "Code" } dd { code { (error.code.code()) } }
            dt { "What to do" } dd { (error.code.remedy()) }
        }
        p { a href="/patrol" { "Back to Patrol" } }
    };
    html_response(error.status(), document("Refused", user, Nav::None, body))
}

/// The hidden CSRF field of a form.
pub fn csrf(user: &WebUser) -> Markup {
    html! { input type="hidden" name=(CSRF_FIELD) value=(user.session.csrf_token); }
}

/// A handler's typed answer, for rendering.
pub fn answer<T>(answer: Result<axum::Json<T>, ApiError>) -> Result<T, ApiError> {
    answer.map(|axum::Json(body)| body)
}

/// A text, or an em dash when there is none or it is empty.
pub fn shown(value: Option<&str>) -> String {
    match value {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => "—".to_owned(),
    }
}

/// A time as `YYYY-MM-DD HH:MM:SS UTC` in a `<time>` element.
pub fn at(value: &chrono::DateTime<chrono::Utc>) -> Markup {
    let raw = value.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    let shown = value.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    html! { time datetime=(raw) { (shown) } }
}

/// A time if there is one, or an em dash.
pub fn at_opt(value: Option<&chrono::DateTime<chrono::Utc>>) -> Markup {
    match value {
        Some(value) => at(value),
        None => html! { "—" },
    }
}

/// A text as one path segment or query value (resource ids hold `/`).
pub fn segment(value: &str) -> String {
    pulse_mcp::encode(value)
}

/// A status word as a badge (its class names the state, never the only signal: the word shows).
pub fn badge(word: &str) -> Markup {
    let class = format!(
        "badge b-{}",
        word.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
    );
    html! { span class=(class) { (word.replace('_', " ")) } }
}

/// Dollars with up to four decimals (two unless the amount is below a cent).
pub fn dollars(amount: f64) -> String {
    if amount < 0.01 && amount > 0.0 {
        format!("${amount:.4}")
    } else {
        format!("${amount:.2}")
    }
}

/// An amount of dollars, or "unknown" when there is no price.
pub fn usd_of(amount: Option<pulse_domain::usd::Usd>) -> String {
    match amount {
        Some(amount) => dollars(amount.as_f64()),
        None => "unknown".to_owned(),
    }
}

/// Pre-escaped markup from a string the server built (SVG).
pub fn raw(markup: String) -> PreEscaped<String> {
    PreEscaped(markup)
}

/// The word a unit enum answers on the wire (its serde name), for enums with no `as_str`.
pub fn wire_name<T: serde::Serialize>(value: &T) -> String {
    let Ok(json) = serde_json::to_string(value) else {
        return "—".to_owned();
    };
    // A unit variant is one JSON string; its name holds no character JSON escapes.
    match json
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    {
        Some(name) => name.to_owned(),
        None => json,
    }
}
