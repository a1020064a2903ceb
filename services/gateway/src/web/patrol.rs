//! The Patrol page: status and readiness, the on/off switch, the mode, Run now, the live run.

use axum::extract::State;
use axum::response::Response;
use chrono::Utc;
use maud::{Markup, html};
use pulse_api::settings::SettingsView;
use pulse_domain::Scope;
use pulse_domain::ai_settings::{Acknowledgement, AutonomyLevel, PatchBody};
use pulse_domain::patrol::scope::{RawRunRequest, RunRequest};
use pulse_domain::patrol::status::{HealthBasis, PatrolStatus};
use pulse_domain::resource::Resource;
use serde::Deserialize;

use super::layout::{self, Nav, at, at_opt, badge, csrf, shown, wire_name};
use super::session::{CsrfForm, Flash, WebUser, redirect_with};
use crate::authorized::{AdminScope, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::patrol::PatrolExecuteScope;
use crate::state::AppState;

/// The four modes with the words operators know them by.
pub const MODES: &[(AutonomyLevel, &str, &str)] = &[
    (
        AutonomyLevel::Monitor,
        "Watch only",
        "Patrol records findings; it never proposes or runs a fix.",
    ),
    (
        AutonomyLevel::Approval,
        "Ask first",
        "Patrol may propose a fix; nothing runs until a human approves it.",
    ),
    (
        AutonomyLevel::Assisted,
        "Safe auto-fix",
        "Low-risk fixes run on their own; everything else waits for approval.",
    ),
    (
        AutonomyLevel::Full,
        "Autopilot",
        "Every fix the policy allows runs without asking. Needs your acknowledgement.",
    ),
];

/// What an operator accepts to turn Autopilot on.
pub const AUTOPILOT_TERMS: &str = "I understand that in Autopilot Patrol runs every fix the \
    policy allows on my infrastructure without asking anyone first, and that each run is \
    verified and audited afterwards, not approved before.";

/// Reads the AI settings view, when the user may.
async fn settings_view(state: &AppState, user: &WebUser) -> Option<SettingsView> {
    let auth = user.authorized::<AdminScope>().ok()?;
    crate::settings::current(state, &auth).await.ok()
}

async fn patrol_status(state: &AppState, user: &WebUser) -> Result<PatrolStatus, ApiError> {
    let auth = user.authorized::<MonitoringReadScope>()?;
    layout::answer(crate::patrol::status(State(state.clone()), auth).await)
}

fn status_panel(status: &PatrolStatus) -> Markup {
    let by = &status.active_findings;
    html! {
        div class="panel" id="patrol-status" data-live {
            h2 { "Status" }
            dl class="facts" {
                dt { "State" } dd { (badge(&wire_name(&status.runtime_state))) }
                dt { "Enabled" } dd { @if status.enabled { "on" } @else { "off" } }
                dt { "Health" } dd id="patrol-health" {
                    @match status.healthy {
                        Some(true) => (badge("healthy")),
                        Some(false) => {
                            (badge("unhealthy"))
                            @if status.health_basis == HealthBasis::ActiveFindings {
                                " warning or critical findings are active"
                            }
                        }
                        None => @if status.health_basis == HealthBasis::RecentFullRunErrored {
                            "not known (the last full run ended in error)"
                        } @else if status.health_basis == HealthBasis::ConnectionUnreadable {
                            "not known (a Proxmox connection cannot be read; see readiness)"
                        } @else {
                            "not yet known (no recent full run)"
                        },
                    }
                }
                dt { "Last patrol" } dd { (at_opt(status.last_patrol_at.as_ref())) }
                dt { "Next patrol" } dd { (at_opt(status.next_patrol_at.as_ref())) }
                dt { "Resources checked" } dd { (shown(status.resources_checked.map(|n| n.to_string()).as_deref())) }
                dt { "Active findings" } dd id="patrol-active-findings" {
                    (status.findings_count)
                    " (" (by.critical) " critical, " (by.warning) " warning, "
                    (by.watch) " watch, " (by.info) " info)"
                }
                @if let Some(run) = &status.current_run_id {
                    dt { "Running now" } dd { a href={"/runs/" (run)} { (run) } }
                }
            }
            @if let Some(reason) = &status.blocked_reason {
                p class="flash error" role="alert" {
                    strong { "Blocked" }
                    @if let Some(cause) = &status.blocked_cause { " (" code { (wire_name(cause)) } ")" }
                    ": " (reason)
                    @if let Some(until) = &status.blocked_until { " Lifts at " (at(until)) "." }
                }
            }
            h3 { "Readiness" }
            div class="table-wrap" {
                table {
                    thead { tr { th { "Check" } th { "Result" } th { "What it says / what to do" } } }
                    tbody {
                        @for check in &status.readiness_checks {
                            tr {
                                td { (wire_name(&check.id)) }
                                td { (badge(&wire_name(&check.status))) }
                                td { (shown(Some(&check.message))) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn mode_form(user: &WebUser, settings: &SettingsView) -> Markup {
    html! {
        form method="post" action="/patrol/mode" class="panel" id="mode-form" {
            (csrf(user))
            fieldset {
                legend { h2 { "Mode" } }
                div class="modes" {
                    @for (level, label, meaning) in MODES {
                        label {
                            input type="radio" name="mode" value=(wire_name(level)) checked[*level == settings.autonomy_level];
                            " " strong { (label) } (meaning)
                        }
                    }
                }
                p class="inline" {
                    input type="checkbox" id="autopilot-ack" name="acknowledge" value="yes";
                    " "
                    label for="autopilot-ack" { (AUTOPILOT_TERMS) }
                }
                @if let Some(ack) = &settings.autopilot_acknowledgement {
                    p class="hint" {
                        "Autopilot terms version " (ack.version) " accepted by "
                        (shown(Some(&ack.acknowledged_by))) " at " (at(&ack.at)) "."
                    }
                }
            }
            p { button type="submit" { "Save mode" } }
        }
    }
}

pub async fn page(State(state): State<AppState>, user: WebUser) -> Response {
    let status = match patrol_status(&state, &user).await {
        Ok(status) => status,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let settings = settings_view(&state, &user).await;
    let resources = resources(&state, &user).await;
    let enabled = status.enabled;
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
                                    input type="checkbox" name="resource" value=(resource.id.as_str());
                                    " " (shown(Some(&resource.name))) " "
                                    (badge(resource.health.as_str()))
                                    br;
                                    span class="hint" { code { (shown(Some(resource.id.as_str()))) } }
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
async fn resources(state: &AppState, user: &WebUser) -> Vec<Resource> {
    let Ok(auth) = user.authorized::<MonitoringReadScope>() else {
        return Vec::new();
    };
    let query = pulse_api::resources::ListQuery {
        resource_type: None,
    };
    layout::answer(crate::resources::list(State(state.clone()), auth, ApiQuery::new(query)).await)
        .map(|list| {
            let mut list = list.resources;
            list.truncate(MAX_RUN_CHOICES);
            list
        })
        .unwrap_or_default()
}

/// Resources offered as checkboxes; more are named in the text field.
const MAX_RUN_CHOICES: usize = 60;

pub async fn run_now(
    State(state): State<AppState>,
    form: CsrfForm<Vec<(String, String)>>,
) -> Response {
    let CsrfForm { user, form } = form;
    let mut ids: Vec<String> = Vec::new();
    for (key, value) in &form {
        match key.as_str() {
            "resource" => ids.push(value.trim().to_owned()),
            "resource_ids" => ids.extend(
                value
                    .split([',', ' ', '\n', '\t'])
                    .map(|id| id.trim().to_owned()),
            ),
            _ => {}
        }
    }
    ids.retain(|id| !id.is_empty());
    ids.dedup();
    // Nothing named is a full run, as an empty API body is.
    let raw = RawRunRequest {
        resource_ids: (!ids.is_empty()).then_some(ids),
        ..RawRunRequest::default()
    };
    let answer = async {
        let auth = user.authorized::<PatrolExecuteScope>()?;
        let request = RunRequest::from_raw(raw).map_err(crate::patrol::request_error)?;
        crate::patrol::start(&state, &auth, request).await
    }
    .await;
    let flash = match answer {
        Ok(accepted) => Flash::ok(format!("Patrol run {} queued.", accepted.accepted.run_id)),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, "/patrol", flash)
}

/// Saves a settings patch as the signed-in admin, through the settings API's one writer.
async fn save_settings(state: &AppState, user: &WebUser, body: PatchBody) -> Result<(), ApiError> {
    let auth = user.authorized::<AdminScope>()?;
    let patch = crate::settings::typed_patch(&body)?;
    crate::settings::save(state, &auth, None, patch)
        .await
        .map(drop)
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
    let Some((level, label, _)) = MODES
        .iter()
        .find(|(level, _, _)| wire_name(level) == form.mode)
    else {
        let error = ApiError::new(
            pulse_capabilities::ErrorCode::InvalidParameter,
            "choose one of the four modes",
        );
        return redirect_with(&user.headers, "/patrol", Flash::error(&error));
    };
    let patch = if *level == AutonomyLevel::Full {
        if form.acknowledge.as_deref() != Some("yes") {
            let error = ApiError::new(
                pulse_capabilities::ErrorCode::InvalidParameter,
                "Autopilot needs the acknowledgement: tick the box that you accept its terms",
            );
            return redirect_with(&user.headers, "/patrol", Flash::error(&error));
        }
        let version = settings_view(&state, &user)
            .await
            .map_or(1, |s| s.autopilot_acknowledgement_version);
        // The acknowledgement names the signed-in user; the settings API binds it to the
        // caller whatever a body says.
        let acknowledgement = Acknowledgement {
            version,
            acknowledged_by: user.actor(),
            at: Utc::now(),
        };
        PatchBody {
            autonomy_level: Some(Some(*level)),
            autopilot_acknowledgement: Some(acknowledgement),
            ..PatchBody::default()
        }
    } else {
        PatchBody {
            autonomy_level: Some(Some(*level)),
            ..PatchBody::default()
        }
    };
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

pub async fn set_enabled(State(state): State<AppState>, form: CsrfForm<EnabledForm>) -> Response {
    let CsrfForm { user, form } = form;
    let enabled = form.enabled == "true";
    let body = PatchBody {
        patrol_enabled: Some(Some(enabled)),
        ..PatchBody::default()
    };
    let flash = match save_settings(&state, &user, body).await {
        Ok(_) if enabled => Flash::ok("Patrol is on."),
        Ok(_) => {
            Flash::ok("Patrol is off: no scheduled or alert-triggered runs until it is on again.")
        }
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, "/patrol", flash)
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use pulse_domain::finding::SeverityCounts;
    use pulse_domain::patrol::status::{
        BlockedCause, CheckStatus, ReadinessCheck, ReadinessCheckId, StatusInputs, project,
    };

    use super::*;

    #[test]
    fn a_blocked_patrol_shows_its_cause_its_checks_and_the_findings_by_severity() {
        let status = project(&StatusInputs {
            now: Utc::now(),
            enabled: true,
            runner_available: true,
            readiness: vec![ReadinessCheck {
                id: ReadinessCheckId::Provider,
                status: CheckStatus::Fail,
                message: "no provider key is configured".to_owned(),
                cause: Some(BlockedCause::ProviderNotConfigured),
                resets_at: None,
            }],
            current_run: None,
            last_full_run: None,
            last_successful_full_at: None,
            last_activity_at: None,
            next_patrol_at: None,
            interval_ms: 3_600_000,
            active_findings: SeverityCounts {
                critical: 1,
                warning: 2,
                watch: 0,
                info: 3,
                total: 6,
            },
            queued_scoped_runs: 0,
            health_window_ms: 7_200_000,
        });
        let panel = status_panel(&status).into_string();
        for shown in [
            r#"class="badge b-blocked""#,
            "<code>provider_not_configured</code>",
            "<td>provider</td>",
            r#"class="badge b-fail""#,
            "no provider key is configured",
            "6 (1 critical, 2 warning, 0 watch, 3 info)",
            "warning or critical findings are active",
        ] {
            assert!(panel.contains(shown), "{shown:?} missing from {panel}");
        }
    }

    #[test]
    fn the_mode_choices_are_the_settings_wire_words() {
        let words: Vec<String> = MODES.iter().map(|(level, _, _)| wire_name(level)).collect();
        assert_eq!(words, ["monitor", "approval", "assisted", "full"]);
    }
}
