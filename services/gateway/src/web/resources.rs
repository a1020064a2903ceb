//! Resources and alerts: every resource with its health; one resource with its metric history
//! and capacity forecast, its alerts, its open findings and its operator state.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use chrono::Utc;
use maud::html;
use pulse_domain::resource::ResourceId;
use serde_json::Value;

use super::layout::{self, Nav, badge, raw, text, time};
use super::session::WebUser;
use super::svg;
use crate::alerts::AlertsQuery;
use crate::auth::MonitoringReadScope;
use crate::forecast::{DEFAULT_WINDOW_HOURS, ForecastQuery, MAX_SAMPLES, default_metric};
use crate::resources::ListQuery;
use crate::{ApiError, AppState};

pub async fn list(State(state): State<AppState>, user: WebUser) -> Response {
    let loaded = async {
        let auth = user.authorized::<MonitoringReadScope>()?;
        let resources = layout::value(
            crate::resources::list(
                State(state.clone()),
                auth,
                Ok(Query(ListQuery {
                    resource_type: None,
                })),
            )
            .await,
        )?;
        let auth = user.authorized::<MonitoringReadScope>()?;
        let alerts = layout::value(
            crate::alerts::list(
                State(state.clone()),
                auth,
                Ok(Query(AlertsQuery::default())),
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
                                    td { a href={"/resources/" (text(&r["id"]))} { (text(&r["name"])) } br; code { (text(&r["id"])) } }
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
            Ok(Path(id.to_owned())),
            Ok(Query(ForecastQuery::default())),
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
            crate::resources::get(State(state.clone()), auth, Ok(Path(id.clone()))).await,
        )?;
        let auth = user.authorized::<MonitoringReadScope>()?;
        let alerts = layout::value(
            crate::alerts::list(
                State(state.clone()),
                auth,
                Ok(Query(AlertsQuery {
                    resource_id: resource["id"].as_str().map(str::to_owned),
                    ..AlertsQuery::default()
                })),
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
                p { a href={"/findings?resource_id=" (text(&resource["id"]))} { "Findings of this resource" } }
            }
            @if let Some(chart) = chart {
                section class="panel" {
                    h2 { "Metric history and forecast" }
                    (raw(chart))
                }
            }
            h2 { "Alerts" }
            (alert_table(&alerts))
        }
    };
    layout::page(&user, &name, Nav::Resources, body)
}
