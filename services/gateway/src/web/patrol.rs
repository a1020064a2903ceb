//! The Patrol page: status and readiness, the on/off switch, the mode, Run now, the live run.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use chrono::Utc;
use maud::{Markup, html};
use pulse_domain::Scope;
use serde::Deserialize;
use serde_json::{Value, json};

use super::layout::{self, Nav, badge, csrf, text, time};
use super::session::{CsrfForm, Flash, WebUser, redirect_with};
use crate::authorized::{AdminScope, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiQuery};
use crate::patrol::PatrolExecuteScope;
use crate::state::AppState;

/// The four modes with the words operators know them by.
pub const MODES: &[(&str, &str, &str)] = &[
    (
        "monitor",
        "Watch only",
        "Patrol records findings; it never proposes or runs a fix.",
    ),
    (
        "approval",
        "Ask first",
        "Patrol may propose a fix; nothing runs until a human approves it.",
    ),
    (
        "assisted",
        "Safe auto-fix",
        "Low-risk fixes run on their own; everything else waits for approval.",
    ),
    (
        "full",
        "Autopilot",
        "Every fix the policy allows runs without asking. Needs your acknowledgement.",
    ),
];

/// What an operator accepts to turn Autopilot on.
pub const AUTOPILOT_TERMS: &str = "I understand that in Autopilot Patrol runs every fix the \
    policy allows on my infrastructure without asking anyone first, and that each run is \
    verified and audited afterwards, not approved before.";

/// Reads the AI settings view, when the user may.
async fn settings_view(state: &AppState, user: &WebUser) -> Option<Value> {
    let auth = user.authorized::<AdminScope>().ok()?;
    layout::response_value(crate::settings::get(State(state.clone()), auth).await)
        .await
        .ok()
}

pub async fn status(state: &AppState, user: &WebUser) -> Result<Value, ApiError> {
    let auth = user.authorized::<MonitoringReadScope>()?;
    layout::value(crate::patrol::status(State(state.clone()), auth).await)
}

fn status_panel(status: &Value) -> Markup {
    let runtime = status["runtime_state"].as_str().unwrap_or("unknown");
    html! {
        div class="panel" id="patrol-status" data-live {
            h2 { "Status" }
            dl class="facts" {
                dt { "State" } dd { (badge(runtime)) }
                dt { "Enabled" } dd { @if status["enabled"].as_bool() == Some(true) { "on" } @else { "off" } }
                dt { "Health" } dd id="patrol-health" {
                    @match status["healthy"].as_bool() {
                        Some(true) => (badge("healthy")),
                        Some(false) => {
                            (badge("unhealthy"))
                            @if status["health_basis"] == "active_findings" {
                                " warning or critical findings are active"
                            }
                        }
                        None => @if status["health_basis"] == "recent_full_run_errored" {
                            "not known (the last full run ended in error)"
                        } @else {
                            "not yet known (no recent full run)"
                        },
                    }
                }
                dt { "Last patrol" } dd { (time(&status["last_patrol_at"])) }
                dt { "Next patrol" } dd { (time(&status["next_patrol_at"])) }
                dt { "Resources checked" } dd { (text(&status["resources_checked"])) }
                dt { "Active findings" } dd id="patrol-active-findings" {
                    (text(&status["findings_count"]))
                    @let by = &status["active_findings"];
                    @if by.is_object() {
                        " (" (text(&by["critical"])) " critical, " (text(&by["warning"])) " warning, "
                        (text(&by["watch"])) " watch, " (text(&by["info"])) " info)"
                    }
                }
                @if let Some(run) = status["current_run_id"].as_str() {
                    dt { "Running now" } dd { a href={"/runs/" (run)} { (run) } }
                }
            }
            @if let Some(reason) = status["blocked_reason"].as_str() {
                p class="flash error" role="alert" {
                    strong { "Blocked" }
                    @if let Some(cause) = status["blocked_cause"].as_str() { " (" code { (cause) } ")" }
                    ": " (reason)
                    @if status["blocked_until"].is_string() { " Lifts at " (time(&status["blocked_until"])) "." }
                }
            }
            @if let Some(checks) = status["readiness_checks"].as_array() {
                h3 { "Readiness" }
                div class="table-wrap" {
                    table {
                        thead { tr { th { "Check" } th { "Result" } th { "What it says / what to do" } } }
                        tbody {
                            @for check in checks {
                                tr {
                                    td { (text(&check["id"])) }
                                    td { (badge(check["status"].as_str().unwrap_or("unknown"))) }
                                    td { (text(&check["message"])) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn mode_form(user: &WebUser, settings: &Value) -> Markup {
    let current = settings["autonomy_level"].as_str().unwrap_or("monitor");
    html! {
        form method="post" action="/patrol/mode" class="panel" id="mode-form" {
            (csrf(user))
            fieldset {
                legend { h2 { "Mode" } }
                div class="modes" {
                    @for (value, label, meaning) in MODES {
                        label {
                            input type="radio" name="mode" value=(value) checked[*value == current];
                            " " strong { (label) } (meaning)
                        }
                    }
                }
                p class="inline" {
                    input type="checkbox" id="autopilot-ack" name="acknowledge" value="yes";
                    " "
                    label for="autopilot-ack" { (AUTOPILOT_TERMS) }
                }
                @if let Some(ack) = settings["autopilot_acknowledgement"].as_object() {
                    p class="hint" {
                        "Autopilot terms version " (text(&ack["version"])) " accepted by "
                        (text(&ack["acknowledged_by"])) " at " (time(&ack["at"])) "."
                    }
                }
            }
            p { button type="submit" { "Save mode" } }
        }
    }
}

pub async fn page(State(state): State<AppState>, user: WebUser) -> Response {
    let status = match status(&state, &user).await {
        Ok(status) => status,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let settings = settings_view(&state, &user).await;
    let resources = resources(&state, &user).await;
    let enabled = status["enabled"].as_bool() == Some(true);
    let can_run = user.can(Scope::Admin) && user.can(Scope::AiExecute);
    let body = html! {
        h1 { "Patrol" }
        (status_panel(&status))
        @if user.can(Scope::Admin) {
            form method="post" action="/patrol/enabled" class="panel" id="switch-form" {
                (csrf(&user))
                h2 { "Patrol is " @if enabled { "on" } @else { "off" } }
                input type="hidden" name="enabled" value=(if enabled { "false" } else { "true" });
                @if enabled {
                    button type="submit" class="danger" { "Turn Patrol off" }
                    p class="hint" { "Scheduled and alert-triggered runs stop; findings stay." }
                } @else {
                    button type="submit" { "Turn Patrol on" }
                }
            }
        }
        @if let Some(settings) = &settings {
            (mode_form(&user, settings))
        } @else {
            p class="hint" { "Only an admin can see and change the mode." }
        }
        @if can_run {
            form method="post" action="/patrol/run" class="panel" id="run-form" {
                (csrf(&user))
                h2 { "Run now" }
                p class="hint" { "Nothing selected runs a full patrol of every resource." }
                @if !resources.is_empty() {
                    fieldset {
                        legend { "Resources to patrol" }
                        div class="modes" {
                            @for resource in &resources {
                                label {
                                    input type="checkbox" name="resource" value=(text(&resource["id"]));
                                    " " (text(&resource["name"])) " "
                                    (badge(resource["health"].as_str().unwrap_or("unknown")))
                                    br;
                                    span class="hint" { code { (text(&resource["id"])) } }
                                }
                            }
                        }
                    }
                }
                p {
                    label for="resource_ids" { "Resources (optional: ids separated by spaces or commas)" }
                    input id="resource_ids" name="resource_ids" size="50" placeholder="service:host-1:web";
                }
                button type="submit" { "Run Patrol now" }
            }
        }
        section class="panel" {
            h2 { "Current run, live" }
            p class="hint" { "Tools called, resources checked and verdicts appear here as the run reports them." }
            ul id="run-feed" class="feed" aria-live="off" {}
            p { a href="/runs" { "All runs" } }
        }
    };
    layout::page(&user, "Patrol", Nav::Patrol, body)
}

/// The tenant's resources for the Run now choice (at most [`MAX_RUN_CHOICES`]).
async fn resources(state: &AppState, user: &WebUser) -> Vec<Value> {
    let Ok(auth) = user.authorized::<MonitoringReadScope>() else {
        return Vec::new();
    };
    let query = pulse_api::resources::ListQuery {
        resource_type: None,
    };
    layout::value(crate::resources::list(State(state.clone()), auth, ApiQuery::new(query)).await)
        .ok()
        .and_then(|list| list["resources"].as_array().cloned())
        .map(|mut list| {
            list.truncate(MAX_RUN_CHOICES);
            list
        })
        .unwrap_or_default()
}

/// Resources offered as checkboxes; more are named in the text field.
const MAX_RUN_CHOICES: usize = 60;

fn json_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers
}

pub async fn run_now(
    State(state): State<AppState>,
    form: CsrfForm<Vec<(String, String)>>,
) -> Response {
    let CsrfForm { user, form } = form;
    let mut ids: Vec<&str> = Vec::new();
    for (key, value) in &form {
        match key.as_str() {
            "resource" => ids.push(value.trim()),
            "resource_ids" => ids.extend(value.split([',', ' ', '\n', '\t']).map(str::trim)),
            _ => {}
        }
    }
    ids.retain(|id| !id.is_empty());
    ids.dedup();
    let body = if ids.is_empty() {
        json!({})
    } else {
        json!({ "resource_ids": ids })
    };
    let answer = async {
        let auth = user.authorized::<PatrolExecuteScope>()?;
        let response = crate::patrol::run(
            State(state.clone()),
            auth,
            json_headers(),
            Ok(Bytes::from(body.to_string())),
        )
        .await;
        layout::response_value(response).await
    }
    .await;
    let flash = match answer {
        Ok(accepted) => Flash::ok(format!("Patrol run {} queued.", text(&accepted["run_id"]))),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, "/patrol", flash)
}

/// Saves a settings patch as the signed-in admin, through the settings API's one writer.
pub async fn save_settings(
    state: &AppState,
    user: &WebUser,
    patch: Value,
) -> Result<Value, ApiError> {
    let auth = user.authorized::<AdminScope>()?;
    layout::response_value(
        crate::settings::put(
            State(state.clone()),
            auth,
            HeaderMap::new(),
            ApiJson::new(patch),
        )
        .await,
    )
    .await
}

#[derive(Debug, Deserialize)]
pub struct ModeForm {
    #[serde(default)]
    mode: String,
    #[serde(default)]
    acknowledge: Option<String>,
}

pub async fn set_mode(State(state): State<AppState>, form: CsrfForm<ModeForm>) -> Response {
    let CsrfForm { user, form } = form;
    let Some((mode, label, _)) = MODES.iter().find(|(value, _, _)| *value == form.mode) else {
        let error = ApiError::new(
            pulse_capabilities::ErrorCode::InvalidParameter,
            "choose one of the four modes",
        );
        return redirect_with(&user.headers, "/patrol", Flash::error(&error));
    };
    let mut patch = json!({ "autonomy_level": mode });
    if *mode == "full" {
        if form.acknowledge.as_deref() != Some("yes") {
            let error = ApiError::new(
                pulse_capabilities::ErrorCode::InvalidParameter,
                "Autopilot needs the acknowledgement: tick the box that you accept its terms",
            );
            return redirect_with(&user.headers, "/patrol", Flash::error(&error));
        }
        let version = settings_view(&state, &user)
            .await
            .and_then(|s| s["autopilot_acknowledgement_version"].as_u64())
            .unwrap_or(1);
        // The acknowledgement names the signed-in user; the settings API binds it to the
        // caller whatever a body says.
        patch["autopilot_acknowledgement"] = json!({
            "version": version,
            "acknowledged_by": user.actor(),
            "at": Utc::now(),
        });
    }
    let flash = match save_settings(&state, &user, patch).await {
        Ok(_) => Flash::ok(format!("Mode set to {label}.")),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, "/patrol", flash)
}

#[derive(Debug, Deserialize)]
pub struct EnabledForm {
    enabled: String,
}

/// The settings field that switches Patrol on and off for the tenant.
pub const ENABLED_FIELD: &str = "patrol_enabled";

pub async fn set_enabled(State(state): State<AppState>, form: CsrfForm<EnabledForm>) -> Response {
    let CsrfForm { user, form } = form;
    let enabled = form.enabled == "true";
    let flash = match save_settings(&state, &user, json!({ ENABLED_FIELD: enabled })).await {
        Ok(_) if enabled => Flash::ok("Patrol is on."),
        Ok(_) => {
            Flash::ok("Patrol is off: no scheduled or alert-triggered runs until it is on again.")
        }
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, "/patrol", flash)
}
