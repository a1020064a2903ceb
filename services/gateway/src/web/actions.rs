//! Approvals and Actions: the pending queue, each action's plan, decision, receipt,
//! verification and audit trail, and the audit chain check.

use axum::extract::{Path, State};
use axum::response::Response;
use maud::{Markup, html};
use pulse_api::actions::{DecisionBody, ListQuery};
use pulse_domain::Scope;
use serde::Deserialize;
use serde_json::Value;

use super::layout::{self, Nav, badge, csrf, seg, text, time};
use super::session::{CsrfForm, Flash, WebUser, redirect_with};
use crate::actions::{self as api, ApproveScope};
use crate::authorized::{AdminScope, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;

fn table(actions: &[Value], empty: &str) -> Markup {
    html! {
        @if actions.is_empty() {
            p { (empty) }
        } @else {
            div class="table-wrap" {
                table {
                    thead { tr {
                        th { "Action" } th { "Resource" } th { "State" }
                        th class="opt" { "Severity" } th class="opt" { "Requested by" } th class="opt" { "Planned" }
                    } }
                    tbody {
                        @for action in actions {
                            tr {
                                td { a href={"/actions/" (text(&action["action_id"]))} { code { (text(&action["capability"])) } } }
                                td { code { (text(&action["resource_id"])) } }
                                td {
                                    (badge(action["state"].as_str().unwrap_or("unknown")))
                                    @if let Some(v) = action["verification"].as_str() { " " (badge(v)) }
                                }
                                td class="opt" { (text(&action["severity"])) }
                                td class="opt" { (text(&action["requested_by"])) }
                                td class="opt" { (time(&action["planned_at"])) }
                            }
                        }
                    }
                }
            }
        }
    }
}

async fn listing(state: &AppState, user: &WebUser, pending: bool) -> Result<Vec<Value>, ApiError> {
    let auth = user.authorized::<MonitoringReadScope>()?;
    let query = ApiQuery::new(ListQuery { limit: Some(200) });
    let answer = if pending {
        layout::value(api::pending(State(state.clone()), auth, query).await)?
    } else {
        layout::value(api::list(State(state.clone()), auth, query).await)?
    };
    Ok(answer.as_array().cloned().unwrap_or_default())
}

pub async fn approvals(State(state): State<AppState>, user: WebUser) -> Response {
    let pending = match listing(&state, &user, true).await {
        Ok(pending) => pending,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let body = html! {
        h1 { "Approvals" }
        p class="hint" { "Plans waiting for a human decision, the one expiring first at the top (then the riskiest). Open one to see its plan and decide." }
        div id="approvals" data-live {
            (table(&pending, "Nothing is waiting for approval."))
        }
    };
    layout::page(&user, "Approvals", Nav::Approvals, body)
}

pub async fn list(State(state): State<AppState>, user: WebUser) -> Response {
    let actions = match listing(&state, &user, false).await {
        Ok(actions) => actions,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let chain = if user.can(Scope::Admin) {
        match user.authorized::<AdminScope>() {
            Ok(auth) => layout::value(crate::audit::verify(State(state.clone()), auth).await).ok(),
            Err(_) => None,
        }
    } else {
        None
    };
    let in_flight = actions.iter().any(|a| {
        matches!(a["state"].as_str(), Some("approved" | "executing"))
            || (a["state"].as_str() == Some("completed") && a["verification"].is_null())
    });
    let body = html! {
        h1 { "Actions" }
        @if let Some(chain) = &chain {
            div class="panel" id="audit-chain" {
                h2 { "Audit chain" }
                @if chain["ok"].as_bool() == Some(true) {
                    p { (badge("verified")) " The tenant's audit log is intact: " (text(&chain["entries"])) " entries verified." }
                } @else {
                    p class="flash error" role="alert" {
                        "The audit chain is broken at entry " (text(&chain["first_broken_seq"]))
                        ": " (text(&chain["reason"])) "."
                    }
                }
            }
        }
        div id="actions" data-live data-pending[in_flight] {
            (table(&actions, "No actions yet."))
        }
    };
    layout::page(&user, "Actions", Nav::Actions, body)
}

fn decision_form(user: &WebUser, id: &str) -> Markup {
    html! {
        form method="post" action={"/actions/" (id) "/decision"} class="panel" id="decision-form" {
            (csrf(user))
            h2 { "Decide" }
            p {
                label for="decision-reason" { "Reason (recorded in the audit log)" }
                input id="decision-reason" name="reason" required size="50";
            }
            div class="actions-row" {
                button type="submit" name="outcome" value="approved" { "Approve" }
                button type="submit" name="outcome" value="rejected" class="danger" { "Reject" }
            }
        }
    }
}

pub async fn detail(
    State(state): State<AppState>,
    user: WebUser,
    Path(id): Path<String>,
) -> Response {
    let loaded = async {
        let auth = user.authorized::<MonitoringReadScope>()?;
        let action =
            layout::value(api::get(State(state.clone()), auth, ApiPath::parse(id.clone())?).await)?;
        let auth = user.authorized::<MonitoringReadScope>()?;
        let trail = layout::value(
            api::audit(State(state.clone()), auth, ApiPath::parse(id.clone())?).await,
        )?;
        Ok::<_, ApiError>((action, trail))
    }
    .await;
    let (action, trail) = match loaded {
        Ok(loaded) => loaded,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let state_word = action["state"].as_str().unwrap_or("unknown");
    let awaiting = matches!(state_word, "approved" | "executing" | "planned")
        || (state_word == "completed" && action["verification"].is_null());
    let decidable = state_word == "pending_approval" && user.can(Scope::ActionsApprove);
    let policy = &action["policy_decision"];
    let body = html! {
        p { a href="/approvals" { "← Approvals" } " · " a href="/actions" { "All actions" } }
        div id="action" data-live data-pending[awaiting] {
            h1 { "Action " code { (text(&action["capability"])) } }
            p {
                (badge(state_word))
                @if let Some(v) = action["verification"].as_str() { " " (badge(v)) }
                @else if state_word == "completed" { " awaiting verification" }
            }
            div class="grid" {
                div class="panel" {
                    h2 { "Plan" }
                    dl class="facts" {
                        dt { "Resource" } dd { a href={"/resources/" (seg(&action["resource_id"]))} { code { (text(&action["resource_id"])) } } }
                        dt { "Parameters" } dd { code { (action["params"].to_string()) } }
                        dt { "Why" } dd { (text(&action["reason"])) }
                        dt { "Severity" } dd { (text(&action["severity"])) }
                        dt { "Risk floor" } dd { (text(&action["approval_floor"])) }
                        dt { "Policy" } dd {
                            (text(&policy["outcome"]))
                            @for code in policy["reason_codes"].as_array().into_iter().flatten() { " " code { (text(code)) } }
                        }
                        dt { "Plan hash" } dd { code { (text(&action["plan_hash"])) } }
                        dt { "Resource version" } dd { code { (text(&action["resource_version"])) } }
                        dt { "Requested by" } dd { (text(&action["requested_by"])) }
                        dt { "Planned" } dd { (time(&action["planned_at"])) }
                        dt { "Expires" } dd { (time(&action["expires_at"])) }
                        @if let Some(finding) = action["finding_id"].as_str() {
                            dt { "Fixes finding" } dd { a href={"/findings/" (finding)} { (finding) } }
                        }
                    }
                }
                div class="panel" {
                    h2 { "Outcome" }
                    dl class="facts" {
                        dt { "Decided by" } dd {
                            (text(&action["decided_by_name"]))
                            @if action["decided_by"].is_string() { " (" (text(&action["decided_by"])) ")" }
                        }
                        dt { "Decision reason" } dd { (text(&action["decision_reason"])) }
                        dt { "Receipt" } dd {
                            @if action["result"].is_null() { "—" } @else { pre { (serde_json::to_string_pretty(&action["result"]).unwrap_or_default()) } }
                        }
                        dt { "Verification" } dd {
                            @match action["verification"].as_str() {
                                Some(v) => (badge(v)),
                                None => "not judged yet",
                            }
                        }
                        dt { "Why" } dd { (text(&action["verification_reason"])) }
                        dt { "Verified at" } dd { (time(&action["verified_at"])) }
                    }
                }
            }
            @if decidable {
                (decision_form(&user, &id))
            }
            section class="panel" {
                h2 { "Audit trail" }
                @if let Some(rows) = trail.as_array().filter(|r| !r.is_empty()) {
                    ol class="timeline" {
                        @for row in rows {
                            li {
                                (time(&row["occurred_at"])) " · " strong { (text(&row["kind"])) } " by " (text(&row["actor"]))
                                @if row["seq"].is_number() { " · seq " (text(&row["seq"])) }
                            }
                        }
                    }
                } @else {
                    p { "No audit rows." }
                }
            }
        }
    };
    layout::page(&user, "Action", Nav::Actions, body)
}

#[derive(Debug, Deserialize)]
pub struct DecisionForm {
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    reason: String,
}

pub async fn decide(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: CsrfForm<DecisionForm>,
) -> Response {
    let CsrfForm { user, form } = form;
    let back = format!("/actions/{id}");
    let decided = async {
        let outcome =
            serde_json::from_value(Value::String(form.outcome.clone())).map_err(|_| {
                ApiError::new(
                    pulse_capabilities::ErrorCode::InvalidParameter,
                    "choose Approve or Reject",
                )
            })?;
        let auth = user.authorized::<ApproveScope>()?;
        let body = DecisionBody {
            outcome,
            reason: form.reason.clone(),
        };
        layout::value(
            api::decision(
                State(state.clone()),
                auth,
                ApiPath::parse(id.clone())?,
                ApiJson::new(body),
            )
            .await,
        )
    }
    .await;
    let flash = match decided {
        Ok(action) => Flash::ok(format!(
            "Decision recorded: {} (plan hash {}).",
            form.outcome,
            text(&action["plan_hash"])
        )),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, &back, flash)
}
