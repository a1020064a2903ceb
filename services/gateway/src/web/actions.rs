//! Approvals and Actions: the pending queue, each action's plan, decision, receipt,
//! verification and audit trail, and the audit chain check.

use axum::extract::{Path, State};
use axum::response::Response;
use maud::{Markup, html};
use pulse_api::actions::{ActionView, DecisionBody, DecisionOutcome, ListQuery};
use pulse_domain::Scope;
use pulse_domain::action::ActionState;
use serde::Deserialize;
use serde::de::IntoDeserializer;

use super::layout::{self, Nav, at, at_opt, badge, csrf, segment, shown, wire_name};
use super::session::{CsrfForm, Flash, WebUser, redirect_with};
use crate::actions::{self as api, ApproveScope};
use crate::authorized::{AdminScope, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;

/// The verification word of an action, if it was judged.
fn verification(action: &ActionView) -> Option<&'static str> {
    action.verification.map(|v| v.as_str())
}

/// Ran but not judged by the verifier yet.
pub(super) fn awaiting_verification(action: &ActionView) -> bool {
    action.state == ActionState::Completed && action.verification.is_none()
}

fn table(actions: &[ActionView], empty: &str) -> Markup {
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
                                td { a href={"/actions/" (action.plan.action_id)} { code { (action.plan.capability.as_str()) } } }
                                td { code { (shown(Some(&action.plan.resource_id))) } }
                                td {
                                    (badge(action.state.as_str()))
                                    @if let Some(v) = verification(action) { " " (badge(v)) }
                                }
                                td class="opt" { (action.plan.severity.as_str()) }
                                td class="opt" { (shown(Some(&action.plan.requested_by))) }
                                td class="opt" { (at(&action.plan.planned_at)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

async fn listing(
    state: &AppState,
    user: &WebUser,
    pending: bool,
) -> Result<Vec<ActionView>, ApiError> {
    let auth = user.authorized::<MonitoringReadScope>()?;
    let query = ApiQuery::new(ListQuery { limit: Some(200) });
    if pending {
        layout::answer(api::pending(State(state.clone()), auth, query).await)
    } else {
        layout::answer(api::list(State(state.clone()), auth, query).await)
    }
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
            Ok(auth) => layout::answer(crate::audit::verify(State(state.clone()), auth).await).ok(),
            Err(_) => None,
        }
    } else {
        None
    };
    let in_flight = actions.iter().any(|a| {
        matches!(a.state, ActionState::Approved | ActionState::Executing)
            || awaiting_verification(a)
    });
    let body = html! {
        h1 { "Actions" }
        @if let Some(chain) = &chain {
            div class="panel" id="audit-chain" {
                h2 { "Audit chain" }
                @if chain.ok {
                    p { (badge("verified")) " The tenant's audit log is intact: " (chain.entries) " entries verified." }
                } @else {
                    p class="flash error" role="alert" {
                        "The audit chain is broken at entry " (shown(chain.first_broken_seq.map(|seq| seq.to_string()).as_deref()))
                        ": " (shown(chain.reason.map(|reason| wire_name(&reason)).as_deref())) "."
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
                button type="submit" name="outcome" value=(wire_name(&DecisionOutcome::Approved)) { "Approve" }
                button type="submit" name="outcome" value=(wire_name(&DecisionOutcome::Rejected)) class="danger" { "Reject" }
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
        let action = layout::answer(
            api::get(State(state.clone()), auth, ApiPath::parse(id.clone())?).await,
        )?;
        let auth = user.authorized::<MonitoringReadScope>()?;
        let trail = layout::answer(
            api::audit(State(state.clone()), auth, ApiPath::parse(id.clone())?).await,
        )?;
        Ok::<_, ApiError>((action, trail))
    }
    .await;
    let (action, trail) = match loaded {
        Ok(loaded) => loaded,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let plan = &action.plan;
    let awaiting = matches!(
        action.state,
        ActionState::Approved | ActionState::Executing | ActionState::Planned
    ) || awaiting_verification(&action);
    let decidable = action.state == ActionState::PendingApproval && user.can(Scope::ActionsApprove);
    let policy = &plan.policy_decision;
    let body = html! {
        p { a href="/approvals" { "← Approvals" } " · " a href="/actions" { "All actions" } }
        div id="action" data-live data-pending[awaiting] {
            h1 { "Action " code { (plan.capability.as_str()) } }
            p {
                (badge(action.state.as_str()))
                @if let Some(v) = verification(&action) { " " (badge(v)) }
                @else if action.state == ActionState::Completed { " awaiting verification" }
            }
            div class="grid" {
                div class="panel" {
                    h2 { "Plan" }
                    dl class="facts" {
                        dt { "Resource" } dd { a href={"/resources/" (segment(&plan.resource_id))} { code { (shown(Some(&plan.resource_id))) } } }
                        dt { "Parameters" } dd { code { (serde_json::to_string(&plan.params).unwrap_or_default()) } }
                        dt { "Why" } dd { (shown(Some(&plan.reason))) }
                        dt { "Severity" } dd { (plan.severity.as_str()) }
                        dt { "Risk floor" } dd { (plan.approval_floor.as_str()) }
                        dt { "Policy" } dd {
                            (wire_name(&policy.outcome))
                            @for code in &policy.reason_codes { " " code { (code.as_str()) } }
                        }
                        dt { "Plan hash" } dd { code { (shown(Some(&plan.plan_hash))) } }
                        dt { "Resource version" } dd { code { (shown(Some(&plan.resource_version))) } }
                        dt { "Requested by" } dd { (shown(Some(&plan.requested_by))) }
                        dt { "Planned" } dd { (at(&plan.planned_at)) }
                        dt { "Expires" } dd { (at(&plan.expires_at)) }
                        @if let Some(finding) = &action.finding_id {
                            dt { "Fixes finding" } dd { a href={"/findings/" (finding)} { (finding) } }
                        }
                    }
                }
                div class="panel" {
                    h2 { "Outcome" }
                    dl class="facts" {
                        dt { "Decided by" } dd {
                            (shown(action.decided_by_name.as_deref()))
                            @if let Some(decider) = &action.decided_by { " (" (shown(Some(decider))) ")" }
                        }
                        dt { "Decision reason" } dd { (shown(action.decision_reason.as_deref())) }
                        dt { "Receipt" } dd {
                            @match &action.result {
                                Some(result) if !result.is_null() => pre { (serde_json::to_string_pretty(result).unwrap_or_default()) },
                                _ => "—",
                            }
                        }
                        dt { "Verification" } dd {
                            @match verification(&action) {
                                Some(v) => (badge(v)),
                                None => "not judged yet",
                            }
                        }
                        dt { "Why" } dd { (shown(action.verification_reason.as_deref())) }
                        dt { "Verified at" } dd { (at_opt(action.verified_at.as_ref())) }
                    }
                }
            }
            @if decidable {
                (decision_form(&user, &id))
            }
            section class="panel" {
                h2 { "Audit trail" }
                @if trail.is_empty() {
                    p { "No audit rows." }
                } @else {
                    ol class="timeline" {
                        @for row in &trail {
                            li {
                                (at(&row.occurred_at)) " · " strong { (shown(Some(&row.kind))) } " by " (shown(Some(&row.actor)))
                                " · seq " (row.seq)
                            }
                        }
                    }
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
        // The outcome's wire words are the API's: read the button's value as the API reads it.
        let outcome = DecisionOutcome::deserialize(form.outcome.as_str().into_deserializer())
            .map_err(|_: serde::de::value::Error| {
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
        layout::answer(
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
            shown(Some(&action.plan.plan_hash))
        )),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, &back, flash)
}
