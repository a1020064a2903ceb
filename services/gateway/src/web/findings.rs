//! The Findings pages: the filtered list, and one finding with its evidence, lifecycle,
//! investigation record, fix outcome and the operator actions its status accepts.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use maud::{Markup, html};
use pulse_api::findings::{
    DismissBody, FindingRef, ListQuery, NoteBody, ResolveBody, SnoozeBody, SuppressBody,
};
use pulse_domain::finding::DismissedReason;
use serde::Deserialize;
use serde_json::Value;

use super::layout::{self, Nav, badge, csrf, seg, text, time};
use super::session::{CsrfForm, Flash, WebUser, redirect_with};
use crate::authorized::MonitoringReadScope;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, FindingRequest};
use crate::findings::{self as api, FindingScope};
use crate::state::AppState;

const SEVERITIES: &[&str] = &["critical", "warning", "watch", "info"];
const CATEGORIES: &[&str] = &[
    "reliability",
    "performance",
    "capacity",
    "backup",
    "security",
    "general",
];
const STATUSES: &[&str] = &["active", "snoozed", "dismissed", "suppressed", "resolved"];

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

fn select(name: &str, label: &str, options: &[&str], current: Option<&str>) -> Markup {
    html! {
        p {
            label for=(name) { (label) }
            select id=(name) name=(name) {
                option value="" { "any" }
                @for option in options {
                    option value=(option) selected[current == Some(*option)] { (option) }
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
    let include_resolved = status.as_deref().is_some_and(|s| s != "active");
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
                layout::value(api::list(State(state), auth, query).await)
            }
            .await
        }
        Err(error) => Err(error),
    };
    let found = match answer {
        Ok(found) => found,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let findings = found["findings"].as_array().cloned().unwrap_or_default();
    let body = html! {
        h1 { "Findings" }
        form method="get" action="/findings" class="filters panel" role="search" {
            (select("severity", "Severity", SEVERITIES, filters.severity.as_deref()))
            (select("category", "Category", CATEGORIES, filters.category.as_deref()))
            (select("status", "Status", STATUSES, status.as_deref()))
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
                                    td { (badge(finding["severity"].as_str().unwrap_or("info"))) }
                                    td { a href={"/findings/" (text(&finding["id"]))} { (text(&finding["title"])) } }
                                    td { (text(&finding["resource_name"])) br; code { (text(&finding["resource_id"])) } }
                                    td class="opt" { (text(&finding["category"])) }
                                    td { (badge(finding["status"].as_str().unwrap_or("unknown"))) }
                                    td class="opt" { (time(&finding["last_seen_at"])) }
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

fn lifecycle(finding: &Value) -> Markup {
    let events = finding["lifecycle"].as_array().cloned().unwrap_or_default();
    html! {
        ol class="timeline" {
            @for event in events.iter().rev() {
                li {
                    (time(&event["at"])) " · " strong { (text(&event["type"]).replace('_', " ")) }
                    @if let Some(actor) = event["actor"].as_str() { " by " (actor) }
                    @if let Some(note) = event["note"].as_str().filter(|n| !n.is_empty()) { " · " (note) }
                    @if let Some(meta) = event["metadata"].as_object().filter(|m| !m.is_empty()) {
                        " · " code { (Value::Object(meta.clone()).to_string()) }
                    }
                }
            }
        }
    }
}

fn investigation(record: &Value) -> Markup {
    if record.is_null() {
        return html! { p { "Not investigated." } };
    }
    html! {
        dl class="facts" {
            dt { "Status" } dd { (badge(record["status"].as_str().unwrap_or("unknown"))) }
            dt { "Outcome" } dd { (text(&record["outcome"])) }
            dt { "Confidence" } dd { (text(&record["confidence"])) }
            dt { "Conclusion" } dd { (text(&record["conclusion"])) }
            dt { "Recommended" } dd { (text(&record["recommended_action"])) }
            dt { "Tools used" } dd {
                @for tool in record["tools_used"].as_array().into_iter().flatten() { code { (text(tool)) } " " }
            }
            dt { "Started" } dd { (time(&record["started_at"])) }
        }
        @if let Some(evidence) = record["evidence"].as_array().filter(|e| !e.is_empty()) {
            h3 { "Evidence gathered" }
            ul {
                @for item in evidence {
                    li {
                        @if let Some(obj) = item.as_object() {
                            @for (key, value) in obj { strong { (key) } ": " (text(value)) " " }
                        } @else { (text(item)) }
                    }
                }
            }
        }
        @if let Some(proposal) = record["proposal"].as_object() {
            h3 { "Proposed fix" }
            dl class="facts" {
                @for (key, value) in proposal {
                    dt { (key.replace('_', " ")) }
                    dd {
                        @if key == "action_id" {
                            a href={"/actions/" (text(value))} { (text(value)) }
                        } @else { (text(value)) }
                    }
                }
            }
        }
    }
}

fn action_forms(user: &WebUser, id: &str, allowed: &[String]) -> Markup {
    let allows = |name: &str| allowed.iter().any(|a| a == name);
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
async fn fixes(state: &AppState, user: &WebUser, finding_id: &str) -> Vec<Value> {
    let Ok(auth) = user.authorized::<MonitoringReadScope>() else {
        return Vec::new();
    };
    let query = pulse_api::actions::ListQuery { limit: Some(200) };
    let Ok(list) =
        layout::value(crate::actions::list(State(state.clone()), auth, ApiQuery::new(query)).await)
    else {
        return Vec::new();
    };
    list.as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["finding_id"].as_str() == Some(finding_id))
        .cloned()
        .collect()
}

pub async fn detail(
    State(state): State<AppState>,
    user: WebUser,
    Path(id): Path<String>,
) -> Response {
    let answer = match user.authorized::<FindingScope>() {
        Ok(auth) => {
            async {
                layout::value(
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
    let finding = &answer["finding"];
    let allowed: Vec<String> = answer["allowed_actions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let fixes = fixes(&state, &user, &id).await;
    // Polled while something no event announces is under way: an investigation not recorded
    // yet on an open finding, a fix not judged yet.
    let investigating = answer["investigation_record"].is_null()
        && matches!(finding["status"].as_str(), Some("active" | "acknowledged"));
    let in_flight = investigating
        || fixes.iter().any(|a| {
            a["verification"].is_null()
                && !matches!(a["state"].as_str(), Some("rejected" | "expired" | "failed"))
        });
    let title = text(&finding["title"]);
    let body = html! {
        p { a href="/findings" { "← All findings" } }
        div id="finding" data-live data-pending[in_flight] {
            h1 { (title) }
            p {
                (badge(finding["severity"].as_str().unwrap_or("info"))) " "
                (badge(finding["status"].as_str().unwrap_or("unknown")))
            }
            div class="grid" {
                div class="panel" {
                    h2 { "What" }
                    dl class="facts" {
                        dt { "Resource" } dd { a href={"/resources/" (seg(&finding["resource_id"]))} { (text(&finding["resource_name"])) } " " code { (text(&finding["resource_id"])) } }
                        dt { "Category" } dd { (text(&finding["category"])) }
                        dt { "Detected" } dd { (time(&finding["detected_at"])) }
                        dt { "Last seen" } dd { (time(&finding["last_seen_at"])) }
                        dt { "Times raised" } dd { (text(&finding["times_raised"])) }
                        @if finding["dismissed_reason"].is_string() {
                            dt { "Dismissed as" } dd { (text(&finding["dismissed_reason"])) }
                        }
                        @if !text(&finding["user_note"]).starts_with('—') {
                            dt { "Note" } dd { (text(&finding["user_note"])) }
                        }
                    }
                    p { (text(&finding["description"])) }
                    @if finding["impact"].as_str().is_some_and(|s| !s.is_empty()) {
                        p { strong { "Impact: " } (text(&finding["impact"])) }
                    }
                    @if finding["recommendation"].as_str().is_some_and(|s| !s.is_empty()) {
                        p { strong { "Recommendation: " } (text(&finding["recommendation"])) }
                    }
                }
                div class="panel" {
                    h2 { "Evidence" }
                    pre { (text(&finding["evidence"])) }
                }
            }
            section class="panel" id="investigation" {
                h2 { "Investigation" }
                (investigation(&answer["investigation_record"]))
            }
            section class="panel" id="fix" {
                h2 { "Fix" }
                @if fixes.is_empty() {
                    p { "No fix has been planned for this finding." }
                } @else {
                    ul {
                        @for action in &fixes {
                            li {
                                a href={"/actions/" (text(&action["id"]))} { code { (text(&action["capability"])) } }
                                " · " (badge(action["state"].as_str().unwrap_or("unknown")))
                                @if let Some(v) = action["verification"].as_str() { " · " (badge(v)) }
                                @if action["verification"].is_null() && action["state"].as_str() == Some("completed") {
                                    " · awaiting verification"
                                }
                            }
                        }
                    }
                }
            }
            section class="panel" {
                h2 { "Act on this finding" }
                @if allowed.is_empty() {
                    p { "No operator action applies in this status." }
                } @else {
                    (action_forms(&user, &id, &allowed))
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
    let status = serde_json::to_value(answer.0.finding.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    Ok(format!(
        "{}: done; the finding is now {status}.",
        action.replace('-', " ")
    ))
}
