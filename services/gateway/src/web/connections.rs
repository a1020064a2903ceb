//! The Settings page's connections panel: the Proxmox VE clusters and Proxmox Backup Servers
//! Pulse reads, each with its state and what to fix; a form that checks, then adds one (the
//! token secret is write-only); per connection, check again, turn guest actions on or off, and
//! remove. The API's handlers do
//! the work (`crate::connections`), so the page refuses what the API refuses, with its codes.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::response::Response;
use maud::{Markup, html};
use pulse_api::connections::{ConnectionBody, ConnectionId, ConnectionList};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::connection::ConnectionKind;

use super::layout::{at_opt, badge, csrf, shown};
use super::session::{CsrfForm, Flash, WebUser, redirect_with};
use crate::authorized::AdminScope;
use crate::error::ApiError;
use crate::state::AppState;

const BACK: &str = "/settings#connections";

pub fn panel(user: &WebUser, list: &Result<ConnectionList, ApiError>) -> Markup {
    let admin = user.can(Scope::Admin);
    html! {
        section class="panel" id="connections" {
            h2 { "Proxmox connections" }
            p class="hint" { "Proxmox VE clusters and Proxmox Backup Servers Pulse reads with an API token (docs/proxmox.md). A connection is checked before it is added; its token secret is stored encrypted and never shown again." }
            @match list {
                Err(error) => p class="hint" { "The connections are unavailable: " (error.message) " (" (error.code.code()) ")" }
                Ok(list) if list.connections.is_empty() => p class="hint" id="no-connections" { "No connection yet." }
                Ok(list) => div class="table-wrap" {
                    table id="connection-list" {
                        thead { tr { th { "Name" } th { "Kind" } th { "State" } th { "URL" } th { "Read every" } th { "Guest actions" } th { "Checked" } th { "Cause" } @if admin { th { "" } } } }
                        tbody {
                            @for c in &list.connections {
                                tr data-connection=(c.name) {
                                    td { (c.name) }
                                    td { (c.kind.as_str()) }
                                    td { (badge(c.state.as_str())) }
                                    td { code { (c.url) } }
                                    td { (c.cadence_seconds) " s" }
                                    td class="guest-actions" { @if c.kind != ConnectionKind::ProxmoxVe { "none (no guests)" } @else if c.guest_actions { "on" } @else { "off" } }
                                    td { (at_opt(c.checked_at.as_ref())) }
                                    td {
                                        (shown(c.state_cause.as_deref()))
                                        @if let Some(fp) = &c.presented_fingerprint {
                                            @if c.state.as_str() == "tls_mismatch" { br; "Presented: " code { (fp) } }
                                        }
                                    }
                                    @if admin {
                                        td {
                                            form method="post" action=(format!("/settings/connections/{}/check", c.id)) class="inline" {
                                                (csrf(user))
                                                button type="submit" class="secondary" { "Check again" }
                                            }
                                            @if c.kind == ConnectionKind::ProxmoxVe {
                                            form method="post" action=(format!("/settings/connections/{}/guest-actions", c.id)) class="inline" {
                                                (csrf(user))
                                                input type="hidden" name="enabled" value=(if c.guest_actions { "no" } else { "yes" });
                                                button type="submit" class="secondary" { @if c.guest_actions { "Turn guest actions off" } @else { "Turn guest actions on" } }
                                            }
                                            }
                                            form method="post" action=(format!("/settings/connections/{}/remove", c.id)) class="inline" {
                                                (csrf(user))
                                                button type="submit" class="secondary" { "Remove" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if admin {
                form method="post" action="/settings/connections" id="add-connection" {
                    (csrf(user))
                    h3 { "Add a connection" }
                    label { "Kind " select name="kind" { option value="proxmox-ve" selected { "Proxmox VE cluster" } option value="proxmox-backup" { "Proxmox Backup Server (port 8007)" } } }
                    label { "URL " input type="url" name="url" required placeholder="https://pve1.lan:8006"; }
                    label { "Name " input type="text" name="name" placeholder="from the URL's host"; }
                    label { "Token ID " input type="text" name="token_id" required placeholder="pulse@pve!monitor"; }
                    label { "Token secret " input type="password" name="token_secret" required autocomplete="off"; }
                    label { "Certificate SHA-256 fingerprint " input type="text" name="fingerprint" placeholder="AB:CD:…"; }
                    label { "or the CA's certificates (PEM) " textarea name="ca_pem" rows="3" {} }
                    label { input type="checkbox" name="public_ca" value="yes"; " or a publicly signed certificate" }
                    label { "Read every (seconds) " input type="number" name="cadence_seconds" min="10" max="3600" placeholder="30"; }
                    label { input type="checkbox" name="guest_actions" value="yes"; " Allow guest power actions (start, shut down, reboot, stop), each with a human approval; the token needs VM.PowerMgmt (Proxmox VE only)" }
                    button type="submit" { "Check and add" }
                }
            }
        }
    }
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
}

fn filled(form: &HashMap<String, String>, key: &str) -> Option<String> {
    form.get(key)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The form as the API's body; an empty field is a field not given.
fn body(form: &HashMap<String, String>) -> Result<ConnectionBody, ApiError> {
    let kind = match form.get("kind").map(String::as_str) {
        Some(raw) => raw
            .parse::<ConnectionKind>()
            .map_err(|e| invalid(format!("kind: {e}")))?,
        None => ConnectionKind::ProxmoxVe,
    };
    Ok(ConnectionBody {
        kind,
        name: filled(form, "name"),
        url: filled(form, "url").unwrap_or_default(),
        token_id: filled(form, "token_id").unwrap_or_default(),
        token_secret: filled(form, "token_secret").unwrap_or_default(),
        fingerprint: filled(form, "fingerprint"),
        ca_pem: filled(form, "ca_pem"),
        public_ca: form.get("public_ca").map(String::as_str) == Some("yes"),
        cadence_seconds: filled(form, "cadence_seconds")
            .map(|raw| {
                raw.parse::<u32>().map_err(|_| {
                    invalid(format!(
                        "cadence_seconds {raw:?}: a whole number of seconds"
                    ))
                })
            })
            .transpose()?,
        guest_actions: form.get("guest_actions").map(String::as_str) == Some("yes"),
    })
}

pub async fn add(
    State(state): State<AppState>,
    form: CsrfForm<HashMap<String, String>>,
) -> Response {
    let CsrfForm { user, form } = form;
    let added = async {
        let body = body(&form)?;
        let auth = user.authorized::<AdminScope>()?;
        crate::connections::add(&state, &auth, body).await
    }
    .await;
    let flash = match added {
        Ok(c) => Flash::ok(format!(
            "Connection {} added: {}.",
            c.name,
            c.state.as_str()
        )),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, BACK, flash)
}

fn id(raw: &str) -> Result<ConnectionId, ApiError> {
    crate::extract::ApiPath::<ConnectionId>::parse(raw).map(|p| p.0)
}

pub async fn check(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    form: CsrfForm<HashMap<String, String>>,
) -> Response {
    let user = form.user;
    let checked = async {
        let auth = user.authorized::<AdminScope>()?;
        crate::connections::recheck(&state, &auth, id(&raw)?).await
    }
    .await;
    let flash = match checked {
        Ok(check) => Flash::ok(format!(
            "Checked: {}{}",
            check.state.as_str(),
            check.cause.map(|c| format!(" ({c})")).unwrap_or_default()
        )),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, BACK, flash)
}

pub async fn guest_actions(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    form: CsrfForm<HashMap<String, String>>,
) -> Response {
    let CsrfForm { user, form } = form;
    let enabled = form.get("enabled").map(String::as_str) == Some("yes");
    let switched = async {
        let auth = user.authorized::<AdminScope>()?;
        crate::connections::set_guest_actions(&state, &auth, id(&raw)?, enabled).await
    }
    .await;
    let flash = match switched {
        Ok(c) => Flash::ok(format!(
            "Guest actions are {} for {}.",
            if c.guest_actions { "on" } else { "off" },
            c.name
        )),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, BACK, flash)
}

pub async fn remove(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    form: CsrfForm<HashMap<String, String>>,
) -> Response {
    let user = form.user;
    let removed = async {
        let auth = user.authorized::<AdminScope>()?;
        crate::connections::remove(&state, &auth, id(&raw)?).await
    }
    .await;
    let flash = match removed {
        Ok(()) => Flash::ok("Connection removed."),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, BACK, flash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_field_is_a_field_not_given() {
        let form: HashMap<String, String> = [
            ("kind", "proxmox-ve"),
            ("url", " https://pve.lan "),
            ("name", ""),
            ("token_id", "pulse@pve!monitor"),
            ("token_secret", "s"),
            ("fingerprint", ""),
            ("ca_pem", ""),
            ("public_ca", "yes"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let body = body(&form).unwrap();
        assert_eq!(body.url, "https://pve.lan");
        assert_eq!(
            (body.name, body.fingerprint, body.ca_pem),
            (None, None, None)
        );
        assert!(body.public_ca);
        let mut bad = form.clone();
        bad.insert("kind".into(), "vmware".into());
        assert!(body_err(&bad).contains("kind"));
    }

    fn body_err(form: &HashMap<String, String>) -> String {
        body(form).map(|_| ()).unwrap_err().message
    }
}
