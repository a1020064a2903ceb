//! Resources and alerts: every resource with its health; one resource with its metric history
//! and capacity forecast, its alerts, its open findings and its operator state.

use axum::extract::{Path, State};
use axum::response::Response;
use chrono::Utc;
use maud::html;
use pulse_api::alerts::AlertsQuery;
use pulse_api::constraints::ResourceRef;
use pulse_api::forecast::{DEFAULT_WINDOW_HOURS, ForecastQuery};
use pulse_api::resources::ListQuery;
use pulse_domain::resource::ResourceId;
use serde_json::Value;

use super::layout::{self, Nav, badge, raw, seg, text, time};
use super::session::WebUser;
use super::svg;
use crate::authorized::MonitoringReadScope;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::forecast::{MAX_SAMPLES, default_metric};
use crate::state::AppState;

pub async fn list(State(state): State<AppState>, user: WebUser) -> Response {
    let loaded = async {
        let auth = user.authorized::<MonitoringReadScope>()?;
        let resources = layout::value(
            crate::resources::list(
                State(state.clone()),
                auth,
                ApiQuery::new(ListQuery {
                    resource_type: None,
                }),
            )
            .await,
        )?;
        let auth = user.authorized::<MonitoringReadScope>()?;
        let alerts = layout::value(
            crate::alerts::list(
                State(state.clone()),
                auth,
                ApiQuery::new(AlertsQuery::default()),
            )
            .await,
        )?;
        Ok::<_, ApiError>((resources, alerts))
    }
    .await;
    let (resources, alerts) = match loaded {
        Ok(loaded) => loaded,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let resources = resources["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let alerts = alerts["alerts"].as_array().cloned().unwrap_or_default();
    let body = html! {
        h1 { "Resources" }
        div id="resources" data-live {
            @if resources.is_empty() {
                p { "No resources reported yet: start the host agent (pulsectl up starts one)." }
            } @else {
                div class="table-wrap" {
                    table {
                        thead { tr { th { "Resource" } th { "Type" } th { "Status" } th { "Health" } th class="opt" { "Observed" } } }
                        tbody {
                            @for r in &resources {
                                tr {
                                    td { a href={"/resources/" (seg(&r["id"]))} { (text(&r["name"])) } br; code { (text(&r["id"])) } }
                                    td { (text(&r["type"])) }
                                    td { (badge(r["status"].as_str().unwrap_or("unknown"))) }
                                    td { (badge(r["health"].as_str().unwrap_or("unknown"))) }
                                    td class="opt" { (time(&r["observed_at"])) }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Alerts" }
            (alert_table(&alerts))
        }
    };
    layout::page(&user, "Resources", Nav::Resources, body)
}

fn alert_table(alerts: &[Value]) -> maud::Markup {
    html! {
        @if alerts.is_empty() {
            p { "No alerts." }
        } @else {
            div class="table-wrap" {
                table {
                    thead { tr { th { "Alert" } th { "Resource" } th { "Level" } th { "State" } th class="opt" { "Since" } } }
                    tbody {
                        @for a in alerts {
                            tr {
                                td { (text(&a["alert_type"])) " " (text(&a["message"])) }
                                td { code { (text(&a["resource_id"])) } }
                                td { (badge(a["level"].as_str().unwrap_or("unknown"))) }
                                td { (badge(a["state"].as_str().unwrap_or("unknown"))) }
                                td class="opt" { (time(&a["fired_at"])) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The metric's history as chart points and the forecast's projection to `days_to_full` (at
/// most two weeks ahead).
async fn chart(state: &AppState, user: &WebUser, resource: &Value) -> Option<String> {
    let id = resource["id"].as_str()?;
    let kind = serde_json::from_value(resource["type"].clone()).ok()?;
    let metric = default_metric(kind)?;
    let auth = user.authorized::<MonitoringReadScope>().ok()?;
    let forecast = layout::value(
        crate::forecast::get(
            State(state.clone()),
            auth,
            ApiPath::parse(id).ok()?,
            ApiQuery::new(ForecastQuery::default()),
        )
        .await,
    )
    .ok()?;
    let resource_id: ResourceId = serde_json::from_value(resource["id"].clone()).ok()?;
    let since = Utc::now() - chrono::Duration::hours(DEFAULT_WINDOW_HOURS);
    let tx = state.store.tenant_tx(&user.principal.tenant).await.ok()?;
    let history = pulse_store::metrics::history(&tx, &resource_id, metric, since, MAX_SAMPLES)
        .await
        .ok()?;
    tx.commit().await.ok()?;
    let points: Vec<(f64, f64)> = history
        .iter()
        .map(|(at, value)| (at.timestamp() as f64, *value))
        .collect();
    let projection = match (points.last(), forecast["daily_change"].as_f64()) {
        (Some((x, y)), Some(daily)) if daily > 0.0 => {
            let days = ((100.0 - y) / daily).clamp(0.0, 14.0);
            Some((x + days * 86_400.0, (y + daily * days).min(100.0)))
        }
        _ => None,
    };
    let description = match forecast["days_to_full"].as_f64() {
        Some(days) => format!(
            "{metric} over the last {} samples; at the current trend it reaches 100% in {days:.1} days",
            points.len()
        ),
        None => format!(
            "{metric} over the last {} samples; no upward trend to forecast",
            points.len()
        ),
    };
    Some(svg::line(
        &format!("{metric} with capacity forecast"),
        &description,
        &points,
        projection,
        100.0,
        "%",
    ))
}

pub async fn detail(
    State(state): State<AppState>,
    user: WebUser,
    Path(id): Path<String>,
) -> Response {
    let loaded = async {
        let auth = user.authorized::<MonitoringReadScope>()?;
        let resource = layout::value(
            crate::resources::get(State(state.clone()), auth, ApiPath::parse(id.clone())?).await,
        )?;
        let auth = user.authorized::<MonitoringReadScope>()?;
        let alerts = layout::value(
            crate::alerts::list(
                State(state.clone()),
                auth,
                ApiQuery::new(AlertsQuery {
                    resource_id: resource["id"]
                        .as_str()
                        .map(|id| ResourceRef::parse(id.to_owned()))
                        .transpose()
                        .map_err(|_| {
                            ApiError::new(
                                pulse_capabilities::ErrorCode::InvalidParameter,
                                format!("resource_id: {}", ResourceRef::requirement()),
                            )
                        })?,
                    ..AlertsQuery::default()
                }),
            )
            .await,
        )?;
        Ok::<_, ApiError>((resource, alerts))
    }
    .await;
    let (resource, alerts) = match loaded {
        Ok(loaded) => loaded,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let chart = chart(&state, &user, &resource).await;
    let operator = operator_state(&state, &user, &resource).await;
    let alerts = alerts["alerts"].as_array().cloned().unwrap_or_default();
    let name = text(&resource["name"]);
    let body = html! {
        p { a href="/resources" { "← Resources" } }
        h1 { (name) }
        div id="resource" data-live {
            p {
                (badge(resource["status"].as_str().unwrap_or("unknown"))) " "
                (badge(resource["health"].as_str().unwrap_or("unknown")))
            }
            div class="panel" {
                dl class="facts" {
                    dt { "Id" } dd { code { (text(&resource["id"])) } }
                    dt { "Type" } dd { (text(&resource["type"])) }
                    dt { "Agent" } dd { (text(&resource["agent_id"])) }
                    dt { "Restarts" } dd { (text(&resource["restart_count"])) }
                    dt { "Observed" } dd { (time(&resource["observed_at"])) }
                    @if let Some(labels) = resource["labels"].as_object().filter(|l| !l.is_empty()) {
                        dt { "Labels" } dd {
                            @for (k, v) in labels { code { (k) "=" (text(v)) } " " }
                        }
                    }
                }
                p { a href={"/findings?resource_id=" (seg(&resource["id"]))} { "Findings of this resource" } }
            }
            @if let Some(chart) = chart {
                section class="panel" {
                    h2 { "Metric history and forecast" }
                    (raw(chart))
                }
            }
            @if let Some(operator) = &operator {
                (operator_form(&user, &resource, operator))
            }
            h2 { "Alerts" }
            (alert_table(&alerts))
        }
    };
    layout::page(&user, &name, Nav::Resources, body)
}

async fn operator_state(state: &AppState, user: &WebUser, resource: &Value) -> Option<Value> {
    let id = resource["id"].as_str()?.to_owned();
    let auth = user.authorized::<MonitoringReadScope>().ok()?;
    layout::value(
        crate::operator_state::get(State(state.clone()), auth, ApiPath::parse(id).ok()?).await,
    )
    .ok()
}

/// `YYYY-MM-DDTHH:MM` (a `datetime-local` input's value, read as UTC) of an RFC 3339 time.
fn local_input(value: &Value) -> String {
    value
        .as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc).format("%Y-%m-%dT%H:%M").to_string())
        .unwrap_or_default()
}

fn operator_form(user: &WebUser, resource: &Value, operator: &Value) -> maud::Markup {
    let id = seg(&resource["id"]);
    let can_set = user.can(pulse_domain::Scope::ActionsApprove);
    let criticality = operator["criticality"].as_str().unwrap_or("");
    html! {
        section class="panel" id="operator-state" {
            h2 { "Operator state" }
            p {
                @match operator["suppression_cause"].as_str() {
                    Some(cause) => { (badge("suppressed")) " Findings are silenced: " (cause.replace('_', " ")) "." }
                    None => "Patrol treats this resource normally.",
                }
                @if operator["never_auto_remediate"].as_bool() == Some(true) {
                    " No fix is dispatched to it (never auto-remediate)."
                }
            }
            @if let Some(set_by) = operator["set_by"].as_str() {
                p class="hint" { "Set by " (set_by) " at " (time(&operator["set_at"])) "." }
            }
            @if can_set {
                form method="post" action={"/resources/" (id) "/operator-state"} {
                    (super::layout::csrf(user))
                    p {
                        label for="maintenance-until" { "Maintenance until" }
                        input id="maintenance-until" name="maintenance_until" type="datetime-local"
                            value=(local_input(&operator["maintenance_window"]["ends_at"]));
                        " "
                        span class="hint" { "UTC; empty means no maintenance window." }
                    }
                    p class="inline" {
                        input type="checkbox" id="intentionally-offline" name="intentionally_offline" value="yes"
                            checked[operator["intentionally_offline"].as_bool() == Some(true)];
                        " " label for="intentionally-offline" { "Intentionally offline (its findings are expected)" }
                    }
                    p class="inline" {
                        input type="checkbox" id="never-auto-remediate" name="never_auto_remediate" value="yes"
                            checked[operator["never_auto_remediate"].as_bool() == Some(true)];
                        " " label for="never-auto-remediate" { "Never auto-remediate (no fix is dispatched, even approved)" }
                    }
                    p {
                        label for="criticality" { "Criticality" }
                        select id="criticality" name="criticality" {
                            option value="" selected[criticality.is_empty()] { "not set" }
                            @for level in ["low", "medium", "high", "critical"] {
                                option value=(level) selected[criticality == level] { (level) }
                            }
                        }
                    }
                    p {
                        label for="operator-note" { "Note" }
                        input id="operator-note" name="note" size="50" value=(operator["note"].as_str().unwrap_or(""));
                    }
                    div class="actions-row" {
                        button type="submit" { "Save operator state" }
                    }
                }
                form method="post" action={"/resources/" (id) "/operator-state/clear"} {
                    (super::layout::csrf(user))
                    button type="submit" class="secondary" { "Clear operator state" }
                }
            }
        }
    }
}

#[derive(Debug, serde::Deserialize)]
pub struct OperatorForm {
    #[serde(default)]
    maintenance_until: String,
    #[serde(default)]
    intentionally_offline: Option<String>,
    #[serde(default)]
    never_auto_remediate: Option<String>,
    #[serde(default)]
    criticality: String,
    #[serde(default)]
    note: String,
}

/// The operator-state body a submitted form asks for.
fn operator_body(form: &OperatorForm) -> Result<Value, ApiError> {
    let mut body = serde_json::json!({
        "intentionally_offline": form.intentionally_offline.as_deref() == Some("yes"),
        "never_auto_remediate": form.never_auto_remediate.as_deref() == Some("yes"),
    });
    let until = form.maintenance_until.trim();
    if !until.is_empty() {
        let ends_at = chrono::NaiveDateTime::parse_from_str(until, "%Y-%m-%dT%H:%M")
            .map_err(|_| {
                ApiError::new(
                    pulse_capabilities::ErrorCode::InvalidParameter,
                    "maintenance until: a date and time (YYYY-MM-DDTHH:MM, UTC)",
                )
            })?
            .and_utc();
        body["maintenance_window"] = serde_json::json!({ "ends_at": ends_at });
    }
    if !form.criticality.is_empty() {
        body["criticality"] = serde_json::json!(form.criticality);
    }
    if !form.note.trim().is_empty() {
        body["note"] = serde_json::json!(form.note.trim());
    }
    Ok(body)
}

pub async fn set_operator_state(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: super::session::CsrfForm<OperatorForm>,
) -> Response {
    let super::session::CsrfForm { user, form } = form;
    let back = format!("/resources/{id}");
    let saved = async {
        let body = operator_body(&form)?;
        let body = serde_json::from_value(body).map_err(|e| {
            ApiError::new(pulse_capabilities::ErrorCode::InvalidRequest, e.to_string())
        })?;
        let auth = user.authorized::<crate::actions::ApproveScope>()?;
        layout::value(
            crate::operator_state::put(
                State(state.clone()),
                auth,
                ApiPath::parse(id.clone())?,
                crate::extract::ApiJson::new(body),
            )
            .await,
        )
    }
    .await;
    let flash = match saved {
        Ok(view) => {
            let dismissed = view["dismissed_finding_ids"].as_array().map_or(0, Vec::len);
            super::session::Flash::ok(format!(
                "Operator state saved.{}",
                if dismissed > 0 {
                    format!(" {dismissed} open finding(s) were dismissed as expected behavior.")
                } else {
                    String::new()
                }
            ))
        }
        Err(error) => super::session::Flash::error(&error),
    };
    super::session::redirect_with(&user.headers, &back, flash)
}

pub async fn clear_operator_state(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: super::session::CsrfForm<std::collections::HashMap<String, String>>,
) -> Response {
    let user = form.user;
    let back = format!("/resources/{id}");
    let cleared = async {
        let auth = user.authorized::<crate::actions::ApproveScope>()?;
        layout::value(
            crate::operator_state::delete(State(state.clone()), auth, ApiPath::parse(id.clone())?)
                .await,
        )
    }
    .await;
    let flash = match cleared {
        Ok(_) => super::session::Flash::ok("Operator state cleared."),
        Err(error) => super::session::Flash::error(&error),
    };
    super::session::redirect_with(&user.headers, &back, flash)
}
