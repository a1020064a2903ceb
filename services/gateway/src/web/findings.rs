//! The Findings pages: the filtered list, and one finding with its evidence, lifecycle,
//! investigation record, fix outcome and the operator actions its status accepts.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use maud::{Markup, html};
use pulse_api::actions::ActionView;
use pulse_api::findings::{
    DismissBody, FindingRef, InvestigationRecord, ListQuery, NoteBody, ResolveBody, SnoozeBody,
    SuppressBody,
};
use pulse_domain::action::ActionState;
use pulse_domain::finding::{Category, DismissedReason, Finding, FindingStatus, Severity};
use serde::Deserialize;

use super::actions::awaiting_verification;
use super::layout::{self, Nav, at, badge, csrf, segment, shown, wire_name};
use super::session::{CsrfForm, Flash, WebUser, redirect_with};
use crate::authorized::MonitoringReadScope;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, FindingRequest};
use crate::findings::{self as api, FindingScope};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub struct Filters {
    #[serde(default)]
    severity: Option<String>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    resource_id: Option<String>,
}

fn select(
    name: &str,
    label: &str,
    options: impl IntoIterator<Item = &'static str>,
    current: Option<&str>,
) -> Markup {
    html! {
        p {
            label for=(name) { (label) }
            select id=(name) name=(name) {
                option value="" { "any" }
                @for option in options {
                    option value=(option) selected[current == Some(option)] { (option) }
                }
            }
        }
    }
}

fn non_empty(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

pub async fn list(
    State(state): State<AppState>,
    user: WebUser,
    filters: Result<Query<Filters>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(filters) = filters.unwrap_or_default();
    let status = non_empty(&filters.status);
    // Any status but active is among the resolved-inclusive list.
    let include_resolved = status
        .as_deref()
        .is_some_and(|s| s != FindingStatus::Active.as_str());
    // The filters as the API reads a query, so a bad one is refused as the API refuses it.
    let pairs = [
        ("include_resolved", include_resolved.then(|| "1".to_owned())),
        ("limit", Some("200".to_owned())),
        ("severity", non_empty(&filters.severity)),
        ("category", non_empty(&filters.category)),
        ("status", status.clone()),
        ("resource_id", non_empty(&filters.resource_id)),
    ];
    let pairs: Vec<(&str, String)> = pairs
        .into_iter()
        .filter_map(|(name, value)| Some((name, value?)))
        .collect();
    let query = serde_urlencoded::to_string(pairs).unwrap_or_default();
    let answer = match user.authorized::<FindingScope>() {
        Ok(auth) => {
            async {
                let query = ApiQuery::<ListQuery, FindingRequest>::parse(&query)?;
                layout::answer(api::list(State(state), auth, query).await)
            }
            .await
        }
        Err(error) => Err(error),
    };
    let findings = match answer {
        Ok(found) => found.findings,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let body = html! {
        h1 { "Findings" }
        form method="get" action="/findings" class="filters panel" role="search" {
            // Most severe first.
            (select("severity", "Severity", Severity::ALL.iter().rev().map(|s| s.as_str()), filters.severity.as_deref()))
            (select("category", "Category", Category::ALL.map(Category::as_str), filters.category.as_deref()))
            (select("status", "Status", FindingStatus::ALL.map(FindingStatus::as_str), status.as_deref()))
            p {
                label for="resource_id" { "Resource" }
                input id="resource_id" name="resource_id" value=(filters.resource_id.as_deref().unwrap_or(""));
            }
            p { button type="submit" { "Filter" } " " a href="/findings" { "Clear" } }
        }
        div id="findings-table" data-live {
            @if findings.is_empty() {
                p { "No findings match." }
            } @else {
                p class="hint" { (findings.len()) " finding(s), most recently seen first." }
                div class="table-wrap" {
                    table {
                        thead { tr {
                            th { "Severity" } th { "Finding" } th { "Resource" }
                            th class="opt" { "Category" } th { "Status" } th class="opt" { "Last seen" }
                        } }
                        tbody {
                            @for finding in &findings {
                                tr {
                                    td { (badge(finding.severity.as_str())) }
                                    td { a href={"/findings/" (finding.id)} { (shown(Some(&finding.title))) } }
                                    td { (shown(Some(&finding.resource_name))) br; code { (shown(Some(&finding.resource_id))) } }
                                    td class="opt" { (finding.category.as_str()) }
                                    td { (badge(finding.status.as_str())) }
                                    td class="opt" { (at(&finding.last_seen_at)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    layout::page(&user, "Findings", Nav::Findings, body)
}

fn lifecycle(finding: &Finding) -> Markup {
    html! {
        ol class="timeline" {
            @for event in finding.lifecycle.iter().rev() {
                li {
                    (at(&event.at)) " · " strong { (event.event_type.as_str().replace('_', " ")) }
                    @if !event.metadata.is_empty() {
                        " · " code { (serde_json::to_string(&event.metadata).unwrap_or_default()) }
                    }
                }
            }
        }
    }
}

fn investigation(record: Option<&InvestigationRecord>) -> Markup {
    let Some(record) = record else {
        return html! { p { "Not investigated." } };
    };
    html! {
        dl class="facts" {
            dt { "Status" } dd { (badge(&wire_name(&record.status))) }
            dt { "Outcome" } dd { (shown(record.outcome.map(|o| wire_name(&o)).as_deref())) }
            dt { "Confidence" } dd { (shown(Some(&record.confidence))) }
            dt { "Conclusion" } dd { (shown(Some(&record.conclusion))) }
            dt { "Recommended" } dd { (shown(Some(&record.recommended_action))) }
            dt { "Tools used" } dd {
                @for tool in &record.tools_used { code { (shown(Some(tool))) } " " }
            }
            dt { "Started" } dd { (at(&record.started_at)) }
        }
        @if !record.evidence.is_empty() {
            h3 { "Evidence gathered" }
            ul {
                @for item in &record.evidence {
                    li {
                        strong { "id" } ": " (shown(Some(&item.id))) " "
                        strong { "kind" } ": " (shown(Some(&item.kind))) " "
                        strong { "summary" } ": " (shown(Some(&item.summary))) " "
                    }
                }
            }
        }
        @if let Some(proposal) = &record.proposal {
            h3 { "Proposed fix" }
            dl class="facts" {
                dt { "capability name" } dd { (shown(Some(&proposal.capability_name))) }
                dt { "causal resource id" } dd { (shown(Some(&proposal.causal_resource_id))) }
                dt { "reason" } dd { (shown(Some(&proposal.reason))) }
                dt { "resource id" } dd { (shown(Some(&proposal.resource_id))) }
                @if let Some(action) = &record.action {
                    dt { "action id" } dd { a href={"/actions/" (action.action_id)} { (action.action_id) } }
                }
            }
        }
    }
}

fn action_forms<A: AsRef<str>>(user: &WebUser, id: &str, allowed: &[A]) -> Markup {
    let allows = |name: &str| allowed.iter().any(|a| a.as_ref() == name);
    html! {
        div class="actions-row" {
            @if allows("acknowledge") {
                form method="post" action={"/findings/" (id) "/acknowledge"} {
                    (csrf(user)) button type="submit" { "Acknowledge" }
                }
            }
            @if allows("snooze") {
                form method="post" action={"/findings/" (id) "/snooze"} {
                    (csrf(user))
                    label for="snooze-hours" { "Snooze hours" }
                    input id="snooze-hours" name="duration_hours" type="number" min="1" max="2160" value="24" size="5";
                    " " button type="submit" class="secondary" { "Snooze" }
                }
            }
            @if allows("resolve") {
                form method="post" action={"/findings/" (id) "/resolve"} {
                    (csrf(user))
                    label for="resolve-note" { "Resolution note" }
                    input id="resolve-note" name="note";
                    " " button type="submit" class="secondary" { "Resolve" }
                }
            }
        }
        @if allows("dismiss") {
            form method="post" action={"/findings/" (id) "/dismiss"} class="actions-row" {
                (csrf(user))
                p {
                    label for="dismiss-reason" { "Dismiss because" }
                    select id="dismiss-reason" name="reason" {
                        @for reason in DismissedReason::ALL {
                            option value=(reason.as_str()) { (reason.as_str().replace('_', " ")) }
                        }
                    }
                }
                p { label for="dismiss-note" { "Note" } input id="dismiss-note" name="note"; }
                p { button type="submit" class="secondary" { "Dismiss" } }
            }
        }
        div class="actions-row" {
            @if allows("suppress") {
                form method="post" action={"/findings/" (id) "/suppress"} data-confirm="Suppress this finding on this resource and category from now on?" {
                    (csrf(user)) button type="submit" class="secondary" { "Suppress" }
                }
            }
            @if allows("dismiss/undo") {
                form method="post" action={"/findings/" (id) "/undo-dismiss"} {
                    (csrf(user)) button type="submit" class="secondary" { "Undo dismiss" }
                }
            }
            @if allows("suppress/undo") {
                form method="post" action={"/findings/" (id) "/undo-suppress"} {
                    (csrf(user)) button type="submit" class="secondary" { "Undo suppress" }
                }
            }
        }
        @if allows("note") {
            form method="post" action={"/findings/" (id) "/note"} class="actions-row" {
                (csrf(user))
                p { label for="note-text" { "Add a note" } textarea id="note-text" name="note" rows="2" cols="40" {} }
                p { button type="submit" class="secondary" { "Save note" } }
            }
        }
    }
}

/// The actions recorded to fix `finding_id`, newest first.
async fn fixes(state: &AppState, user: &WebUser, finding: &Finding) -> Vec<ActionView> {
    let Ok(auth) = user.authorized::<MonitoringReadScope>() else {
        return Vec::new();
    };
    let query = pulse_api::actions::ListQuery { limit: Some(200) };
    let Ok(list) = layout::answer(
        crate::actions::list(State(state.clone()), auth, ApiQuery::new(query)).await,
    ) else {
        return Vec::new();
    };
    list.into_iter()
        .filter(|a| a.finding_id == Some(finding.id))
        .collect()
}

/// The actions planned to fix a finding, each with its state and verification.
fn fix_list(fixes: &[ActionView]) -> Markup {
    html! {
        @if fixes.is_empty() {
            p { "No fix has been planned for this finding." }
        } @else {
            ul {
                @for action in fixes {
                    li {
                        a href={"/actions/" (action.plan.action_id)} { code { (action.plan.capability.as_str()) } }
                        " · " (badge(action.state.as_str()))
                        @if let Some(v) = action.verification { " · " (badge(v.as_str())) }
                        @if awaiting_verification(action) {
                            " · awaiting verification"
                        }
                    }
                }
            }
        }
    }
}

pub async fn detail(
    State(state): State<AppState>,
    user: WebUser,
    Path(id): Path<String>,
) -> Response {
    let answer = match user.authorized::<FindingScope>() {
        Ok(auth) => {
            async {
                layout::answer(
                    api::get(State(state.clone()), auth, ApiPath::parse(id.clone())?).await,
                )
            }
            .await
        }
        Err(error) => Err(error),
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let finding = &answer.finding;
    let allowed = &answer.allowed_actions;
    let fixes = fixes(&state, &user, finding).await;
    // Polled while something no event announces is under way: an investigation not recorded
    // yet on an open finding, a fix not judged yet.
    let investigating =
        answer.investigation_record.is_none() && finding.status == FindingStatus::Active;
    let in_flight = investigating
        || fixes.iter().any(|a| {
            a.verification.is_none()
                && !matches!(
                    a.state,
                    ActionState::Rejected | ActionState::Expired | ActionState::Failed
                )
        });
    let title = shown(Some(&finding.title));
    let body = html! {
        p { a href="/findings" { "← All findings" } }
        div id="finding" data-live data-pending[in_flight] {
            h1 { (title) }
            p {
                (badge(finding.severity.as_str())) " "
                (badge(finding.status.as_str()))
            }
            div class="grid" {
                div class="panel" {
                    h2 { "What" }
                    dl class="facts" {
                        dt { "Resource" } dd { a href={"/resources/" (segment(&finding.resource_id))} { (shown(Some(&finding.resource_name))) } " " code { (shown(Some(&finding.resource_id))) } }
                        dt { "Category" } dd { (finding.category.as_str()) }
                        dt { "Detected" } dd { (at(&finding.detected_at)) }
                        dt { "Last seen" } dd { (at(&finding.last_seen_at)) }
                        dt { "Times raised" } dd { (finding.times_raised) }
                        @if let Some(reason) = finding.dismissed_reason {
                            dt { "Dismissed as" } dd { (reason.as_str()) }
                        }
                        @if !finding.user_note.is_empty() {
                            dt { "Note" } dd { (finding.user_note) }
                        }
                    }
                    p { (shown(Some(&finding.description))) }
                    @if !finding.impact.is_empty() {
                        p { strong { "Impact: " } (finding.impact) }
                    }
                    @if !finding.recommendation.is_empty() {
                        p { strong { "Recommendation: " } (finding.recommendation) }
                    }
                }
                div class="panel" {
                    h2 { "Evidence" }
                    pre { (shown(Some(&finding.evidence))) }
                }
            }
            section class="panel" id="investigation" {
                h2 { "Investigation" }
                (investigation(answer.investigation_record.as_ref()))
            }
            section class="panel" id="fix" {
                h2 { "Fix" }
                (fix_list(&fixes))
            }
            section class="panel" {
                h2 { "Act on this finding" }
                @if allowed.is_empty() {
                    p { "No operator action applies in this status." }
                } @else {
                    (action_forms(&user, &id, allowed))
                }
            }
            section class="panel" {
                h2 { "Lifecycle" }
                (lifecycle(finding))
            }
        }
    };
    layout::page(&user, &title, Nav::Findings, body)
}

#[derive(Debug, Deserialize)]
pub struct ActForm {
    #[serde(default)]
    duration_hours: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    note: Option<String>,
}

pub async fn act(
    State(state): State<AppState>,
    Path((id, action)): Path<(String, String)>,
    form: CsrfForm<ActForm>,
) -> Response {
    let CsrfForm { user, form } = form;
    let back = format!("/findings/{id}");
    let outcome = perform(&state, &user, &id, &action, form).await;
    let flash = match outcome {
        Ok(done) => Flash::ok(done),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, &back, flash)
}

async fn perform(
    state: &AppState,
    user: &WebUser,
    id: &str,
    action: &str,
    form: ActForm,
) -> Result<String, ApiError> {
    let auth = user.authorized::<FindingScope>()?;
    let state = State(state.clone());
    let finding_id = id.to_owned();
    let reference = || {
        ApiJson::new(FindingRef {
            finding_id: finding_id.clone(),
        })
    };
    let answer = match action {
        "acknowledge" => api::acknowledge(state, auth, reference()).await,
        "undo-dismiss" => api::undo_dismiss(state, auth, reference()).await,
        "undo-suppress" => api::undo_suppress(state, auth, reference()).await,
        "snooze" => {
            let hours = form
                .duration_hours
                .as_deref()
                .unwrap_or("")
                .trim()
                .parse::<i64>()
                .map_err(|_| {
                    ApiError::new(
                        pulse_capabilities::ErrorCode::InvalidFindingRequest,
                        "duration_hours: a whole number of hours",
                    )
                })?;
            api::snooze(
                state,
                auth,
                ApiJson::new(SnoozeBody {
                    finding_id,
                    duration_hours: hours,
                }),
            )
            .await
        }
        "dismiss" => {
            api::dismiss(
                state,
                auth,
                ApiJson::new(DismissBody {
                    finding_id,
                    reason: form.reason.unwrap_or_default(),
                    note: form.note.unwrap_or_default(),
                }),
            )
            .await
        }
        "resolve" => {
            api::resolve(
                state,
                auth,
                ApiJson::new(ResolveBody {
                    finding_id,
                    note: form.note.unwrap_or_default(),
                }),
            )
            .await
        }
        "note" => {
            api::note(
                state,
                auth,
                ApiJson::new(NoteBody {
                    finding_id,
                    note: form.note.unwrap_or_default(),
                }),
            )
            .await
        }
        "suppress" => {
            // The rule is exactly this finding's resource and category.
            let current = api::get(
                state.clone(),
                user.authorized::<FindingScope>()?,
                ApiPath::parse(finding_id.clone())?,
            )
            .await?;
            let resource_id = current.0.finding.resource_id.clone();
            let category = current.0.finding.category.as_str().to_owned();
            api::suppress(
                state,
                auth,
                ApiJson::new(SuppressBody {
                    finding_id: Some(finding_id),
                    resource_id,
                    category,
                    allow_broad_scope: false,
                }),
            )
            .await
        }
        other => {
            return Err(ApiError::new(
                pulse_capabilities::ErrorCode::NotFound,
                format!("no finding action {other:?}"),
            ));
        }
    }?;
    let status = answer.0.finding.status;
    Ok(format!(
        "{}: done; the finding is now {status}.",
        action.replace('-', " ")
    ))
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use pulse_domain::action::{
        ActionPlan, ApprovalFloor, Capability, PolicyDecision, PolicyOutcome, Severity,
        Verification,
    };
    use uuid::Uuid;

    use super::*;

    fn fix(state: ActionState, verification: Option<Verification>) -> ActionView {
        let now = Utc::now();
        ActionView {
            plan: ActionPlan {
                action_id: Uuid::from_u128(7),
                resource_id: "service:host-1:web".to_owned(),
                agent_id: "host-1".to_owned(),
                capability: Capability::ServiceRestart,
                params: serde_json::json!({"target": "web"}),
                reason: "the health check fails".to_owned(),
                severity: Severity::Warning,
                approval_floor: ApprovalFloor::None,
                requested_by: "patrol:investigation".to_owned(),
                planned_at: now,
                expires_at: now,
                resource_version: "v1".to_owned(),
                policy_decision: PolicyDecision {
                    outcome: PolicyOutcome::NeedsApproval,
                    reason_codes: Vec::new(),
                },
                plan_hash: "hash".to_owned(),
            },
            state,
            version: 1,
            decided_by: None,
            decided_by_name: None,
            decision_reason: None,
            human_approved: false,
            lease_id: None,
            lease_expires_at: None,
            result: None,
            updated_at: now,
            finding_id: None,
            verification,
            verification_reason: None,
            verified_at: None,
        }
    }

    #[test]
    fn a_fix_links_its_action_and_says_whether_it_was_verified() {
        let action = format!("/actions/{}", Uuid::from_u128(7));
        let ran = fix_list(&[fix(ActionState::Completed, None)]).into_string();
        assert!(ran.contains(&format!(r#"href="{action}""#)), "{ran}");
        assert!(ran.contains("service.restart"), "{ran}");
        assert!(ran.contains("awaiting verification"), "{ran}");
        let verified =
            fix_list(&[fix(ActionState::Completed, Some(Verification::Verified))]).into_string();
        assert!(
            verified.contains(r#"class="badge b-verified""#),
            "{verified}"
        );
        assert!(!verified.contains("awaiting verification"), "{verified}");
        let none = fix_list(&[]).into_string();
        assert!(none.contains("No fix has been planned"), "{none}");
    }

    #[test]
    fn the_filters_offer_every_value_the_api_accepts() {
        let form = select(
            "status",
            "Status",
            FindingStatus::ALL.map(FindingStatus::as_str),
            Some("dismissed"),
        )
        .into_string();
        for status in FindingStatus::ALL {
            assert!(
                form.contains(&format!(r#"value="{}""#, status.as_str())),
                "{status} missing from {form}"
            );
        }
        assert!(
            form.contains(r#"<option value="dismissed" selected>"#),
            "{form}"
        );
    }
}
